"""`gtmcluster explain --config FILE --node N WIDEIP --client ADDR [--ecs CIDR]`: how a
running node would answer that asker now, and why: every method tried, its candidates,
scores and result, and which proximity source decided (client RUM, client probe, LDNS
population, LDNS) with each data center's RTT from it beside the LDNS's own. ``--client``
is the address the query comes from (the LDNS; ``--ldns`` is the same option), ``--ecs``
an EDNS client subnet it sends (``--subnet``), taken only from a resolver in
``dns_server.ecs_trusted`` (the output says when it is not). Nothing changes on the node
(no rotation advances, nothing recorded).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gtmcluster.cli.nodeapi import CliError, Tokens, add_token_argument, get, load_config, member
from gtmcluster.cli.shape import ListOf, Obj
from gtmcluster.cli.terminal import printable

#: what `render` reads of /api/v1/explain (`gtmcluster.cli.shape`)
EXPLAINED = Obj(
    {
        "wideip": object,
        "type": object,
        "client": Obj({"ldns": object, "subnet": object, "keys": object}),
        # (a path-based method's step: each data center's figure, from nodes that have them)
        "trace": ListOf(Obj({"text": object}, optional={"datacenters": ListOf(Obj({"text": object}))})),
        "action": object,
        "answer": ListOf(str),
        "pool": object,
        "members": ListOf(str),
        "method": object,
        "ttl": object,
        "scope": object,
        "probe_requested": object,
    },
    optional={
        "name": object,
        "admin": ListOf(Obj({"virtual_server": object, "admin": object, "reason": object})),
        "unhealthy": ListOf(Obj({"virtual_server": object, "health": object, "reason": object})),
        # (which proximity source decided: nodes of issue 36 and later)
        "proximity": Obj(
            {
                "name": object,
                "text": object,
                "datacenters": ListOf(Obj({"text": object})),
                "passed_over": ListOf(Obj({"source": object, "reason": object})),
            }
        ),
    },
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("explain", help="explain a running node's answer for one asker", description=__doc__)
    p.add_argument("--config", "-c", required=True, metavar="FILE")
    p.add_argument("--node", "-n", metavar="NAME", help="the member to ask (optional with one member)")
    p.add_argument("wideip")
    p.add_argument(
        "--client", "--ldns", dest="ldns", required=True, metavar="ADDRESS", help="the asking resolver's address"
    )
    p.add_argument(
        "--ecs",
        "--subnet",
        dest="subnet",
        metavar="CIDR",
        help="an EDNS client subnet sent with the query (taken from a resolver in dns_server.ecs_trusted)",
    )
    p.add_argument("--type", default=None, choices=("A", "AAAA", "CNAME", "MX", "SRV", "NAPTR"))
    p.add_argument("--json", action="store_true", help="the API's JSON")
    add_token_argument(p)
    p.set_defaults(run=run)


def render(e: dict[str, Any]) -> str:
    asker = f"LDNS {e['client']['ldns']}" + (
        f", client subnet {e['client']['subnet']}" if e["client"]["subnet"] else ""
    )
    if e["client"]["subnet"] and e["client"].get("ecs_trusted") is False:
        asker += " (not trusted from this LDNS: ignored)"
    asked = e["wideip"]
    if e.get("name", asked) != asked:  # an alias, or a name a wildcard answers
        asked = f"{e['name']} (wide IP {e['wideip']})"
    lines = [f"{asked} {e['type']} asked by {asker}", f"  ({e['client']['keys']})"]
    for step in e["trace"]:
        lines.append(f"  {step['text']}")
        lines.extend(f"    {dc['text']}" for dc in step.get("datacenters", ()))
    proximity = e.get("proximity")
    if proximity is not None:
        lines.append(f"  proximity: {proximity['text']}")  # (the figures: under the step that decided)
        lines.extend(f"    passed over {p['source']}: {p['reason']}" for p in proximity["passed_over"])
    for out in e.get("admin", ()):
        lines.append(f"  virtual server {out['virtual_server']} out by admin state {out['admin']}: {out['reason']}")
    for out in e.get("unhealthy", ()):
        lines.append(f"  virtual server {out['virtual_server']} out (health {out['health']}): {out['reason']}")
    if e["action"] == "answer":
        lines.append(
            f"=> {', '.join(e['answer'])} from pool {e['pool']} ({', '.join(e['members']) or 'fallback'}) "
            f"by {e['method']}, TTL {e['ttl']}, ECS scope /{e['scope']}"
        )
    else:
        lines.append(f"=> {e['action']}")
    if e["probe_requested"]:
        lines.append("   (paths to this LDNS are missing or stale: answering would ask the group to probe it)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    params = {"wideip": args.wideip, "ldns": args.ldns}
    if args.subnet:
        params["subnet"] = args.subnet
    if args.type:
        params["type"] = args.type
    try:
        config = load_config(args.config)
        m = member(config, args.node)
        answer = get(m, "/api/v1/explain", params, Tokens.from_args(config, args), fields=EXPLAINED)
    except CliError as e:
        print(f"gtmcluster explain: {e}", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=1, sort_keys=True) if args.json else render(printable(answer)))
    return 0
