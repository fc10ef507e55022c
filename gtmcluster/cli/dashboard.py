"""`gtmcluster dashboard-url --config FILE [--node N] [--token-file PATH]`: the address of a
node's dashboard with its bearer token in the fragment (``http://ADDR:PORT/#token=...``;
with api.tls ``https://MEMBER:PORT/#token=...``, the name the node's certificate holds), so
that the page can read and act as the API requires.

The token is found as for every command that talks to a node: ``--token-file``,
``GTM_API_TOKEN``, the config's ``api.token``/``api.token_file``, or the token the node made
in its state_dir (run this on the node's host, as its user or root). The fragment never
leaves the browser: it is not sent to the node, nor in a Referer.
"""

from __future__ import annotations

import argparse
import sys
import urllib.parse
from typing import Any

from gtmcluster.cli.nodeapi import CliError, Tokens, add_token_argument, load_config, member, url_of
from gtmcluster.config.model import Member


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "dashboard-url",
        help="print a node's dashboard address with its bearer token",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", "-c", required=True, metavar="FILE")
    p.add_argument("--node", "-n", metavar="NAME", help="the member (optional with one member)")
    add_token_argument(p)
    p.set_defaults(run=run)


def dashboard_url(tokens: Tokens, m: Member) -> str | None:
    """*m*'s dashboard address with its token, or None when no token is found."""
    token = tokens.for_member(m)
    if token is None:
        return None
    fragment = "#" + urllib.parse.urlencode({"token": token.value})
    if tokens.config.api.tls:
        # the certificate names the member: a browser checks the name it was given
        return f"https://{m.name}:{m.api.port}/{fragment}"
    return url_of(m) + fragment


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
        m = member(config, args.node)
        tokens = Tokens.from_args(config, args)
        url = dashboard_url(tokens, m)
        if url is None:
            why = tokens.unreadable.get(m.name)
            raise CliError(f"no token found for {m.name}{f' ({why})' if why else ''}: {tokens.where(m)}")
    except CliError as e:
        print(f"gtmcluster dashboard-url: {e}", file=sys.stderr)
        return 1
    print(url)
    if config.api.tls:
        print(
            f"note: {m.name}'s certificate names {m.name}: the browser must reach it by that name "
            f"({m.api.host} in DNS or /etc/hosts) and trust the group CA {tokens.trust.ca_of(m)}",
            file=sys.stderr,
        )
    return 0
