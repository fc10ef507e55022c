"""`gtmcluster audit --config FILE [-f] [--since WHEN] [--who NAME] [--limit N] [--json] [NODE ...]`:
the members' audit logs, merged.

Asks every member (or the NODEs named) for its audit log through its API
(``GET /api/v1/audit``, role viewer and up) and merges the entries by time, each under its
node's name, as `gtmcluster logs` merges the nodes' logs (`gtmcluster.cli.logs`: the same
limits on what is read, the same following with -f, a node that goes away asked again).
An entry reads::

    n1 | 2026-12-01T15:11:51.123Z alice (operator, token) from 192.0.2.7: disable data center DC1
         (maintenance): applied  [n1-5f0c9a2b7e41]

(on one line)

``requested`` is written before a change is made, ``applied`` or ``refused 403: why`` once
it is done; an admin change made on another member and taken by this one says ``(made on
n1)``: each member records every admin write of the group. --who shows one identity's
entries; --limit the last N of each node (20 by default, or all since --since); --json the
entries as the nodes wrote them.

Exit status as `gtmcluster logs`: 0 when every node's audit was read; 1 for a config
problem, a NODE that is not a member, a --since not understood, a node that could not be
read (the others are still shown).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from gtmcluster.cli import logs
from gtmcluster.cli.logs import Line, Printer
from gtmcluster.cli.nodeapi import CliError
from gtmcluster.cli.terminal import escape
from gtmcluster.nodelog.audit import parse_entry

PATH = "/api/v1/audit"
DEFAULT_LIMIT = 20
COMMAND = "audit"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "audit",
        help="show and follow the members' audit logs (who changed what, and what was refused), merged",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    logs.add_reading_arguments(p, "audit logs", "entries")
    p.add_argument("--who", metavar="NAME", help="only the entries of this identity")
    p.add_argument(
        "--limit",
        "-n",
        type=logs.non_negative,
        metavar="N",
        help=f"the last N entries of each node (default {DEFAULT_LIMIT}, or all since --since)",
    )
    logs.add_output_arguments(p)
    p.set_defaults(run=run)


class AuditPrinter(Printer):
    """Writes audit entries with their node's prefix (see the module docstring)."""

    def format(self, line: Line) -> str:
        if self.raw:
            return super().format(line)
        return f"{self.prefixes[line.node]} {describe(line.raw, line.node)}\n"


def describe(raw: str, node: str) -> str:
    """One entry for a terminal (its control characters escaped)."""
    entry = parse_entry(raw)
    if entry is None:
        return escape(raw)

    def text(key: str) -> str:
        value = entry.get(key)
        return escape(value if isinstance(value, str) else "" if value is None else str(value))

    who = text("who") or "(no identity)"
    known = ", ".join(v for v in (text("role"), text("proof")) if v)
    who = f"{who} ({known})" if known else who
    source = f" from {text('source')}" if text("source") else ""
    origin = f" (made on {text('origin')})" if text("origin") and text("origin") != node else ""
    change = text("change") or text("route")
    result = text("result")
    if result == "refused" and text("status"):
        result = f"refused {text('status')}"
    why = f": {text('message')}" if text("message") and result != "applied" else ""
    ident = f"  [{text('id')}]" if text("id") else ""
    head = f"{text('time')[:23]}Z {who}{source}"
    return f"{head}: {change}{origin}: {result}{why}{ident}" if change else f"{head}: {result}{why}"


def run(args: argparse.Namespace) -> int:
    try:
        return show(args)
    except CliError as e:
        logs.note(str(e), COMMAND)
        return 1
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def params_for(since: str | None, limit: int | None, who: str | None, follow: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    if since is not None:
        out["since"] = since
    if limit is not None:
        out["limit"] = str(limit)
    if who is not None:
        out["who"] = who
    if follow:
        out["follow"] = "1"
    return out


def show(args: argparse.Namespace) -> int:
    a = logs.asked(args)
    limit = args.limit if args.limit is not None else (None if a.since is not None else DEFAULT_LIMIT)
    printer = AuditPrinter(a.nodes, sys.stdout, logs.use_color(args.no_color, sys.stdout), a.members, raw=args.json)
    if args.follow:
        return logs.follow(a.targets, params_for(a.since, limit, args.who, True), a.tokens, printer, PATH, COMMAND)
    return logs.read_every(a.targets, params_for(a.since, limit, args.who, False), a.tokens, printer, PATH, COMMAND)
