"""`gtmcluster stats --config FILE --node N [--wideip NAME] [--json]`: what a node answered,
per wide IP, pool and pool member (as BIG-IP's ``show gtm wideip / pool / pool-member``).

Counts since the node started (its answering workers' included); see `gtmcluster.runtime.objectstats`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gtmcluster.cli.nodeapi import CliError, Tokens, add_token_argument, get, load_config, member
from gtmcluster.cli.shape import MapOf, Obj
from gtmcluster.cli.terminal import printable
from gtmcluster.runtime.objectstats import SLOTS

COUNTS = MapOf(object)
#: what `render` reads of /api/v1/stats (`gtmcluster.cli.shape`)
STATS = Obj(
    {
        "wideips": MapOf(
            Obj(
                {
                    "requests": object,
                    "types": COUNTS,
                    "answered": object,
                    "persistence_hits": object,
                    "fallbacks": object,
                    "returned_to_dns": object,
                    "dropped": object,
                    "rcodes": COUNTS,
                    "slots": COUNTS,
                    "methods": COUNTS,
                }
            )
        ),
        "pools": MapOf(
            Obj(
                {
                    "answered": object,
                    "slots": COUNTS,
                    "methods": COUNTS,
                    "members": MapOf(Obj({"answered": object, "slots": COUNTS})),
                }
            )
        ),
    }
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("stats", help="show what a running node answered, per wide IP, pool and member")
    p.description = __doc__
    p.add_argument("--config", "-c", required=True, metavar="FILE")
    p.add_argument("--node", "-n", metavar="NAME", help="the member to ask (optional with one member)")
    p.add_argument("--wideip", "-w", metavar="NAME", help="only this wide IP and its pools")
    p.add_argument("--json", action="store_true", help="the API's JSON")
    add_token_argument(p)
    p.set_defaults(run=run)


def _counts(counts: dict[str, int]) -> str:
    return " ".join(f"{k} {v}" for k, v in counts.items()) or "-"


def _slots(counts: dict[str, int]) -> str:
    """The slots in the order of the search (JSON keeps no order)."""
    ordered = sorted(counts.items(), key=lambda kv: SLOTS.index(kv[0]) if kv[0] in SLOTS else len(SLOTS))
    return _counts(dict(ordered))


def render(stats: dict[str, Any]) -> str:
    lines = []
    for name, w in stats["wideips"].items():
        lines.append(
            f"wideip {name}: requests {w['requests']} ({_counts(w['types'])})  answered {w['answered']}  "
            f"persisted {w['persistence_hits']}  fallbacks {w['fallbacks']}  "
            f"returned_to_dns {w['returned_to_dns']}  dropped {w['dropped']}"
            + (f"  {_counts(w['rcodes'])}" if w["rcodes"] else "")
        )
        lines.append(f"  by slot: {_slots(w['slots'])}")
        lines.append(f"  by method: {_counts(w['methods'])}")
    for name, p in stats["pools"].items():
        lines.append(f"pool {name}: answered {p['answered']}  by slot: {_slots(p['slots'])}")
        lines.append(f"  by method: {_counts(p['methods'])}")
        width = max((len(m) for m in p["members"]), default=0)
        for member_name, m in p["members"].items():
            lines.append(f"  member {member_name:<{width}}  answered {m['answered']}  {_slots(m['slots'])}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
        m = member(config, args.node)
        query = {"wideip": args.wideip} if args.wideip else None
        stats = get(m, "/api/v1/stats", query, Tokens.from_args(config, args), fields=STATS)
    except CliError as e:
        print(f"gtmcluster stats: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(stats, indent=1, sort_keys=True))
    elif stats["wideips"]:
        print(render(printable(stats)))
    else:
        print(f"{m.name} has answered no wide IP query{' for ' + args.wideip if args.wideip else ''} yet")
    return 0
