"""`gtmcluster replay --log FILE [--log FILE ...] --config NEW.yaml [--base OLD.yaml]
[--state SNAPSHOT] [--disable TARGET NAME ...] [--seed N] [--max-clients N] [--json]
[--html FILE]`: what a config change (or taking objects out) would do to logged traffic,
before it is made.

The queries of the query logs (`dns_server.query_log`) are decided again with the base
config (default: --config itself, for --disable alone) and with the candidate config plus
the --disable objects, by the node's own decision code, with the health verdicts, paths
and persistence records of a member's state snapshot (--state, its state.sqlite), or every
server taken as up without one. The clock stands at the last logged query and the random
source is seeded: the same input gives the same report. The logs are read a frame at a
time, twice (`queries.Logs`), and the report counted as the queries are decided
(`report.Findings`): memory grows with the clients followed (--max-clients), never with
the queries. See docs/what-if.md.

Exit 0 with the report; 2 for input it cannot use (a log, a config, a snapshot, a name).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path
from typing import Any

from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.config.problems import ConfigError
from gtmcluster.replay import queries, render, report
from gtmcluster.replay.engine import TARGETS, BadInput, Disable, Replayer, check_disables, decided

COMMAND = "gtmcluster replay"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "replay",
        help="what a config change would do to logged queries",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--log", "-l", required=True, action="append", type=Path, metavar="FILE", help="a query log file")
    p.add_argument("--config", "-c", required=True, type=Path, metavar="NEW.yaml", help="the candidate config")
    p.add_argument("--base", "-b", type=Path, metavar="OLD.yaml", help="the config now (default: --config)")
    p.add_argument("--state", "-s", type=Path, metavar="SNAPSHOT", help="a member's state.sqlite")
    p.add_argument(
        "--disable",
        nargs=2,
        action="append",
        default=[],
        metavar=("TARGET", "NAME"),
        help=f"take an object out in the candidate replay; TARGET: {', '.join(TARGETS)} (repeatable)",
    )
    p.add_argument("--seed", type=int, default=0, help="the random source's seed (default 0)")
    p.add_argument(
        "--max-clients",
        type=_positive,
        default=report.MAX_CLIENTS,
        metavar="N",
        help=f"clients followed for the lists of clients (default {report.MAX_CLIENTS:,}; later ones are counted)",
    )
    p.add_argument("--json", action="store_true", help="the report as JSON")
    p.add_argument("--html", type=Path, metavar="FILE", help="also write the report as an HTML page")
    p.set_defaults(run=run)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    return value


def _config(path: Path) -> Config:
    try:
        return load(path)
    except ConfigError as e:
        count = len(e.problems)
        raise BadInput(
            "\n".join([*map(str, e.problems), f"{path}: {count} problem{'s' if count != 1 else ''}"])
        ) from None


def _disables(pairs: list[list[str]]) -> list[Disable]:
    out = []
    for target, name in pairs:
        if target not in TARGETS:
            raise BadInput(f"--disable {target} {name}: TARGET is one of {', '.join(TARGETS)}")
        out.append(Disable(target, name))
    return out


def build(args: argparse.Namespace) -> dict[str, Any]:
    """The report of the command's arguments; raises `BadInput` or `queries.BadLog`."""
    disables = _disables(args.disable)
    with queries.Logs(args.log) as log:
        log.scan()
        config = _config(args.config)
        base = config if args.base is None else _config(args.base)
        check_disables(config, disables, str(args.config))
        now = log.last_time if log.last_time is not None else 0.0
        before = Replayer(base, now, args.state, (), args.seed)
        after = Replayer(config, now, args.state, disables, args.seed)
        findings = report.Findings(args.max_clients)
        for pair in decided(log.queries(), before, after):
            findings.add(pair)
    skipped = dict(log.skipped)
    if findings.left_out:
        skipped["not for a wide IP"] = findings.left_out
    notes = list(log.notes)
    if findings.not_followed:
        notes.append(
            f"only the first {findings.max_clients} clients are followed (--max-clients): the"
            f" {findings.not_followed} queries of later clients count in the shares and the agreement,"
            " not in the lists of clients"
        )
    if args.state is None:
        note = "none given: every server taken as up (admin states aside), no paths, no persistence records"
    else:
        note = f"{args.state}: health verdicts, paths and persistence records as of the last query"
    about = {
        "logs": [str(p) for p in args.log],
        "base": str(args.base if args.base is not None else args.config),
        "config": str(args.config),
        "disabled": [str(d) for d in disables],
        "state": {"snapshot": None if args.state is None else str(args.state), "note": note},
        "time": None
        if log.last_time is None
        else datetime.datetime.fromtimestamp(now, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seed": args.seed,
        "skipped": skipped,
        "notes": notes,
    }
    return findings.build(about)


def run(args: argparse.Namespace) -> int:
    try:
        found = build(args)
    except (BadInput, queries.BadLog) as e:
        print(f"{COMMAND}: {e}", file=sys.stderr)
        return 2
    if args.html is not None:
        try:
            with args.html.open("w") as page:
                page.writelines(render.html_parts(found))
        except OSError as e:
            print(f"{COMMAND}: {args.html}: cannot write the HTML report: {e.strerror or e}", file=sys.stderr)
            return 2
    try:
        if args.json:  # (written in pieces: a report listing many clients is never one string)
            sys.stdout.writelines(render.json_parts(found))
            sys.stdout.write("\n")
        else:
            sys.stdout.write(render.to_text(found))
        sys.stdout.flush()
    except BrokenPipeError:  # (whoever read the report has gone: `| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
