"""`gtmcluster ldns --config FILE --node N [ADDRESS] [--json]`: the proximity table.

Printed in the form of BIG-IP's ``ldns { ... path { ... } }`` records: RTT in
microseconds, completion rate in 1/10000.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gtmcluster.cli.nodeapi import CliError, Tokens, add_token_argument, get, load_config, member
from gtmcluster.cli.shape import ListOf, Obj
from gtmcluster.cli.terminal import printable

#: what `render` reads of /api/v1/ldns (`gtmcluster.cli.shape`)
PATH = Obj({"datacenter": object, "rtt_us": int, "hops": object, "completion_rate": object})
TABLE = Obj(
    {"ldns": ListOf(Obj({"address": object, "ttl": object, "probe_protocol": object, "paths": ListOf(PATH)}))},
    optional={"truncated": object},
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("ldns", help="show the proximity table of a running node", description=__doc__)
    p.add_argument("--config", "-c", required=True, metavar="FILE")
    p.add_argument("--node", "-n", metavar="NAME", help="the member to ask (optional with one member)")
    p.add_argument("address", nargs="?", help="only this LDNS")
    p.add_argument("--limit", type=int, metavar="N", help="at most N paths of the whole table (default 1000)")
    p.add_argument("--json", action="store_true", help="the API's JSON")
    add_token_argument(p)
    p.set_defaults(run=run)


def render(table: dict[str, Any]) -> str:
    lines = []
    for entry in table["ldns"]:
        lines.append(
            f"ldns {{ address {entry['address']}  ttl {entry['ttl']}  probe_protocol {entry['probe_protocol']}"
        )
        width = max((len(str(p["rtt_us"])) for p in entry["paths"]), default=0)
        for p in entry["paths"]:
            lines.append(
                f'  path {{ datacenter "{p["datacenter"]}" cur_rtt {p["rtt_us"]:<{width}} '
                f"cur_hops {p['hops']} cur_completion_rate {p['completion_rate']} }}"
            )
        lines[-1] += " }"
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
        m = member(config, args.node)
        query = {"address": args.address} if args.address else {}
        if args.limit is not None:
            query["limit"] = str(args.limit)
        table = get(m, "/api/v1/ldns", query or None, Tokens.from_args(config, args), fields=TABLE)
    except CliError as e:
        print(f"gtmcluster ldns: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(table, indent=1, sort_keys=True))
    elif table["ldns"]:
        print(render(printable(table)))
        if table.get("truncated"):
            print(
                f"(the first {sum(len(e['paths']) for e in table['ldns'])} paths of a larger table: --limit N for more)"
            )
    else:
        print(f"{m.name} has no paths{' for ' + args.address if args.address else ''} yet")
    return 0
