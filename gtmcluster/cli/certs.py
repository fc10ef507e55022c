"""`gtmcluster certs`: make the sync group's CA and its nodes' keys and certificates.

``gtmcluster certs init [--dir certs]`` creates the CA (``ca.pem``, ``ca.key``);
``gtmcluster certs issue NODE [--dir certs]`` creates ``NODE.pem`` and ``NODE.key``, signed by
it, with NODE (the member's name in the config) as the certificate's DNS name;
``gtmcluster certs issue --client NAME [--dir certs]`` creates an operator's client
certificate for the HTTPS API, ``clients/NAME.pem`` and ``clients/NAME.key`` (give them to
the CLI with ``--client-cert``/``--client-key``); ``gtmcluster certs renew NODE`` replaces a
member's pair with a new one from the CA (`gtmcluster.cli.renewal`). Keys are written mode
0600; nothing is overwritten without ``--force`` (or ``renew``).
"""

from __future__ import annotations

import argparse
import stat
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gtmcluster.cli import renewal
from gtmcluster.sync import certs


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "certs",
        help="make the sync group CA and node certificates",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="certs_action", metavar="ACTION", required=True)

    init = actions.add_parser(
        "init", help="create the sync group CA (ca.pem, ca.key)", description="Create the sync group CA."
    )
    _common(init, f"the CA's lifetime in days (default: {certs.CA_DAYS})", certs.CA_DAYS)

    issue = actions.add_parser(
        "issue",
        help="create a node's key and certificate, signed by the CA",
        description="Create NODE.key and NODE.pem, signed by the CA in --dir, with NODE as DNS name; "
        "or with --client NAME an operator's client certificate for the HTTPS API.",
    )
    issue.add_argument("node", metavar="NODE", nargs="?", help="the member's name in the config; becomes the DNS name")
    issue.add_argument(
        "--client",
        metavar="NAME",
        help="instead of a node's: an operator's client certificate for the HTTPS API "
        f"(DIR/{certs.CLIENTS_DIR}/NAME.pem and NAME.key; for api.client_certificates: required)",
    )
    _common(issue, f"lifetime in days (default: {certs.NODE_DAYS}; never beyond the CA's expiry)", certs.NODE_DAYS)
    renewal.add_parser(actions)
    p.set_defaults(run=run)


def _common(p: argparse.ArgumentParser, days_help: str, days: int) -> None:
    p.add_argument("--dir", default="certs", type=Path, metavar="DIR", help="where the files are (default: certs)")
    p.add_argument("--days", type=int, default=days, metavar="N", help=days_help)
    p.add_argument("--force", action="store_true", help="replace existing files")


def run(args: argparse.Namespace) -> int:
    if args.certs_action == "renew":
        return renewal.run(args)
    try:
        if args.certs_action == "init":
            ca = certs.init_ca(args.dir, days=args.days, force=args.force)
            _report(ca.written)
        elif (args.node is None) == (args.client is None):
            print("gtmcluster certs issue: give NODE (a member's certificate) or --client NAME", file=sys.stderr)
            return 2
        else:
            if args.client is not None:
                node = certs.issue_client(args.dir, args.client, days=args.days, force=args.force)
            else:
                node = certs.issue(args.dir, args.node, days=args.days, force=args.force)
            _report(node.written)
            if node.capped:
                end = node.certificate.not_valid_after_utc.strftime("%Y-%m-%d")
                print(
                    f"note: {node.cert} expires with the CA on {end}, sooner than --days {args.days}", file=sys.stderr
                )
    except (certs.CertError, OSError) as e:
        print(f"gtmcluster certs {args.certs_action}: {e}", file=sys.stderr)
        return 1
    return 0


def _report(paths: Iterable[Path]) -> None:
    for path in paths:
        print(f"wrote {path} (mode {stat.S_IMODE(path.stat().st_mode):04o})")
