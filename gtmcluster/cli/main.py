"""`gtmcluster`: the operator's command. Subcommands live in their own modules."""

from __future__ import annotations

import argparse
import sys

from gtmcluster.cli import (
    admin,
    audit,
    certs,
    check,
    configcmd,
    dashboard,
    demo,
    dnssec,
    explain,
    importcmd,
    ldns,
    logs,
    replay,
    rum,
    stats,
    status,
    users,
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gtmcluster", description="gtmcluster: a global traffic manager on Twisted.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    audit.add_parser(sub)
    certs.add_parser(sub)
    check.add_parser(sub)
    configcmd.add_parser(sub)
    dashboard.add_parser(sub)
    demo.add_parser(sub)
    dnssec.add_parser(sub)
    explain.add_parser(sub)
    importcmd.add_parser(sub)
    ldns.add_parser(sub)
    stats.add_parser(sub)
    logs.add_parser(sub)
    replay.add_parser(sub)
    rum.add_parser(sub)
    status.add_parser(sub)
    users.add_parser(sub)
    admin.add_parser(sub)  # enable, disable, drain
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
