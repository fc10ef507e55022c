"""`gtmcluster certs renew NODE`: a member's new key and certificate from the group CA, and,
with ``--reload``, the member told to take them.

``gtmcluster certs renew NODE [--dir DIR] [--days N]`` replaces ``DIR/NODE.key`` and
``DIR/NODE.pem`` (`gtmcluster.sync.certs.renew`: both staged, then renamed into place; the
key 0600). With ``--config FILE`` NODE must be a member of the config's sync group, DIR
defaults to where the config has NODE's certificate, and ``--reload`` asks the member's API
to reload (``POST /api/v1/reload``, with the identity the other commands send), then checks
that the member serves the new certificate (its status's ``certificates``). A running member
takes the pair on any reload (a SIGHUP too): peer and API connections open then keep the
certificate they began with; new ones get the new one. Renewing the group CA itself is not
this command's: see docs/operations.md, Certificates.

Exit status: 0 when renewed (and, with ``--reload``, served); 1 when refused, with why.
"""

from __future__ import annotations

import argparse
import stat
import sys
from pathlib import Path
from typing import Any

from cryptography import x509

from gtmcluster.cli.certdays import CERTIFICATES
from gtmcluster.cli.nodeapi import CliError, Tokens, add_token_argument, get, load_config, member, post
from gtmcluster.cli.shape import Obj
from gtmcluster.sync import certs

#: what `--reload` reads of the member's status
SERVED = Obj({}, optional={"certificates": CERTIFICATES})


def add_parser(actions: Any) -> None:
    renew = actions.add_parser(
        "renew",
        help="replace a member's key and certificate with a new pair from the CA",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    renew.add_argument("node", metavar="NODE", help="the member whose pair is renewed")
    renew.add_argument(
        "--dir",
        type=Path,
        metavar="DIR",
        help="where the CA and NODE's files are (default: where --config has NODE's certificate, else certs)",
    )
    renew.add_argument(
        "--days",
        type=int,
        default=certs.NODE_DAYS,
        metavar="N",
        help=f"lifetime in days (default: {certs.NODE_DAYS}; never beyond the CA's expiry)",
    )
    renew.add_argument("--config", "-c", metavar="FILE", help="the sync group's config: NODE must be a member")
    renew.add_argument(
        "--reload", action="store_true", help="then have NODE reload and check it serves the new certificate"
    )
    add_token_argument(renew)


def run(args: argparse.Namespace) -> int:
    if args.reload and args.config is None:
        print("gtmcluster certs renew: --reload needs --config FILE (where NODE's API is)", file=sys.stderr)
        return 2
    try:
        directory = args.dir
        config = load_config(args.config) if args.config is not None else None
        if config is not None:
            m = member(config, args.node)
            if directory is None:
                directory = config.tls_for(m.name).cert.parent
        renewed = certs.renew(directory if directory is not None else Path("certs"), args.node, days=args.days)
    except (CliError, certs.CertError, OSError) as e:
        print(f"gtmcluster certs renew: {e}", file=sys.stderr)
        return 1
    new = renewed.new
    print(f"renewed {new.node}: serial {_serial(renewed.old)} (until {_until(renewed.old)})")
    print(f"  replaced by serial {_serial(new.certificate)} (until {_until(new.certificate)})")
    for path in new.written:
        print(f"wrote {path} (mode {stat.S_IMODE(path.stat().st_mode):04o})")
    if new.capped:
        print(f"note: {new.cert} expires with the CA, sooner than --days {args.days}", file=sys.stderr)
    if config is None or not args.reload:
        print(
            f"{new.node} takes them on its next reload (SIGHUP: systemctl reload gtm@{new.node}) once they are "
            "where its sync_group.tls names them"
        )
        return 0
    try:
        tokens = Tokens.from_args(config, args)
        post(m, "/api/v1/reload", {}, tokens)
        served = get(m, "/api/v1/status", tokens=tokens, fields=SERVED).get("certificates") or {}
    except CliError as e:
        print(f"gtmcluster certs renew: the files are renewed, but {new.node} did not reload: {e}", file=sys.stderr)
        return 1
    wanted = _serial(new.certificate)
    now = (served.get("node") or {}).get("serial")
    if now != wanted:
        own = config.tls_for(m.name)
        print(
            f"gtmcluster certs renew: {new.node} reloaded but serves serial {now}, not {wanted}: it reads "
            f"{own.cert} and {own.key}; put the new pair there and reload it",
            file=sys.stderr,
        )
        return 1
    print(f"{new.node} reloaded: new connections get serial {wanted}; open ones keep the certificate they began with")
    return 0


def _serial(cert: x509.Certificate) -> str:
    return f"{cert.serial_number:x}"


def _until(cert: x509.Certificate) -> str:
    return cert.not_valid_after_utc.strftime("%Y-%m-%d %H:%M:%SZ")
