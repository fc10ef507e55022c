"""`gtmcluster rum --config FILE --node N [--limit N] [--ldns ADDRESS] [--subnet CIDR]
[--json]`: the client table a running node holds (issue 36, docs/client-proximity.md).

Without ``--ldns`` or ``--subnet``: the client subnets most recently measured, each data
center's RTT with its samples, source (``rum``: browsers' beacons; ``probe``), the member
that wrote it and its age; then the LDNS populations (the resolvers tied to client subnets
by one-use names), each with its subnets, beacons and RTT per data center weighted by its
clients. ``--limit`` bounds both (50 by default, 1000 at most). ``--ldns ADDRESS``: that
LDNS's population, each of its subnets with its count and figures; ``--subnet``: one
client subnet.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from gtmcluster.cli.nodeapi import CliError, Tokens, add_token_argument, get, load_config, member
from gtmcluster.cli.shape import ListOf, MapOf, Maybe, Obj
from gtmcluster.cli.terminal import printable

#: what `render` reads of /api/v1/rum (`gtmcluster.cli.shape`)
FIGURE = Obj({"rtt_us": Maybe(float), "samples": object, "source": object, "by": object, "age": float})
SUBNET = Obj({"subnet": str, "age": float, "datacenters": MapOf(FIGURE)})
MEMBER = Obj({"subnet": str, "count": int, "figures": Maybe(SUBNET)})
POPULATION = Obj(
    {"ldns": str, "subnets": int, "n": int, "rtt_us": MapOf(Maybe(float)), "age": float},
    optional={"members": ListOf(MEMBER)},
)
TABLE = Obj(
    {"sources": ListOf(str), "held": Obj({"client_figures": object, "populations": object})},
    optional={
        "subnets": ListOf(SUBNET),
        "populations": ListOf(POPULATION),
        "truncated": object,
        "population": Maybe(POPULATION),
        "subnet": Maybe(SUBNET),
    },
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "rum", help="show the client table of a running node (subnets, LDNS populations)", description=__doc__
    )
    p.add_argument("--config", "-c", required=True, metavar="FILE")
    p.add_argument("--node", "-n", metavar="NAME", help="the member to ask (optional with one member)")
    p.add_argument("--limit", type=int, metavar="N", help="subnets and populations listed at most (default 50)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--ldns", metavar="ADDRESS", help="only this LDNS's population, with its subnets")
    which.add_argument("--subnet", metavar="CIDR", help="only this client subnet (an address or a /24, /48)")
    p.add_argument("--json", action="store_true", help="the API's JSON")
    add_token_argument(p)
    p.set_defaults(run=run)


def _ms(us: Any) -> str:
    return f"{us / 1000:.1f} ms" if isinstance(us, (int, float)) else "—"


def _figures(datacenters: Mapping[str, Any]) -> str:
    return "  ".join(
        f"{dc} {_ms(f['rtt_us'])} ({f['samples']} {f['source']}, {f['by']}, {f['age']:.0f} s)"
        for dc, f in datacenters.items()
    )


def _subnet_line(s: Mapping[str, Any]) -> str:
    return f"  {s['subnet']:<20} {_figures(s['datacenters'])}"


def _population_line(p: Mapping[str, Any]) -> str:
    rtts = "  ".join(f"{dc} {_ms(us)}" for dc, us in p["rtt_us"].items())
    return f"  {p['ldns']:<20} {p['subnets']} subnets, {p['n']} beacons  {rtts}  ({p['age']:.0f} s)"


def render(table: dict[str, Any]) -> str:
    held = table["held"]
    lines = [
        f"sources {', '.join(table['sources'])}; held: {held['client_figures']} client figures "
        f"(subnet x data center), {held['populations']} LDNS populations"
    ]
    if "population" in table:
        p = table["population"]
        if p is None:
            return "\n".join([*lines, "no measured clients for that LDNS"])
        lines += ["population:", _population_line(p), "its client subnets (beacons tied to it):"]
        for m in p.get("members", ()):
            figures = m["figures"]
            lines.append(
                f"  {m['subnet']:<20} {m['count']:>5}  "
                + (_figures(figures["datacenters"]) if figures else "no figures held")
            )
        return "\n".join(lines)
    if "subnet" in table:
        s = table["subnet"]
        return "\n".join([*lines, _subnet_line(s) if s else "no figures held for that subnet"])
    subnets, populations = table.get("subnets", []), table.get("populations", [])
    lines.append(f"client subnets (newest first, {len(subnets)} shown): RTT (samples source, by, age)")
    lines += [_subnet_line(s) for s in subnets] or ["  none yet"]
    lines.append(f"LDNS populations (newest first, {len(populations)} shown):")
    lines += [_population_line(p) for p in populations] or ["  none yet"]
    if table.get("truncated"):
        lines.append("(the newest of a larger table: --limit N for more, --ldns or --subnet for one)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    query: dict[str, str] = {}
    if args.limit is not None:
        query["limit"] = str(args.limit)
    if args.ldns:
        query["ldns"] = args.ldns
    if args.subnet:
        query["subnet"] = args.subnet
    try:
        config = load_config(args.config)
        m = member(config, args.node)
        table = get(m, "/api/v1/rum", query or None, Tokens.from_args(config, args), fields=TABLE)
    except CliError as e:
        print(f"gtmcluster rum: {e}", file=sys.stderr)
        return 1
    print(json.dumps(table, indent=1, sort_keys=True) if args.json else render(printable(table)))
    return 0
