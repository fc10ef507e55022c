"""`gtmcluster enable|disable|drain TARGET NAME --config FILE [--reason TEXT] [--by WHO]`:
an operator's admin state of a data center, link, pool, pool member (POOL/SERVER), wide IP
or virtual server, for the whole sync group.

The change goes to one member's API (--node, else the first member that answers, in the
config's order) with the API's bearer token (see `cli.nodeapi`), and reaches the others
through the sync group. It records who (the name on the client certificate when the API
asks for one, else --by, by default the user running the command), why (--reason) and when.

  disable  takes the object out for every client
  drain    takes it out for new clients; clients held by persistence keep it
  enable   gives it back (a virtual server held for manual resume is released)

What each target takes out is in the README ("Admin states").
"""

from __future__ import annotations

import argparse
import datetime
import getpass
import json
import sys
import urllib.parse
from typing import Any

from gtmcluster.cli.nodeapi import CliError, Tokens, Unreachable, add_token_argument, load_config, member, post
from gtmcluster.cli.shape import MapOf, Maybe, Obj
from gtmcluster.cli.terminal import printable
from gtmcluster.state.admin import LEVEL_NAMES, LEVEL_WORDS

#: the command and the action it names
COMMANDS = {"enable": "enable", "disable": "disable", "drain": "drain"}

#: an admin state as the API lists it (`state.admin.AdminState.to_json`), as read here
ADMIN_STATE = Obj(
    {
        "level": str,
        "name": str,
        "state": str,
        "by": Maybe(str),
        "reason": Maybe(str),
        "at": Maybe(float),
        "node": Maybe(str),
    },
    optional={"configured": bool},
)
#: what `render` reads of the answer to a change (`gtmcluster.cli.shape`)
CHANGED = Obj(
    {"target": str, "name": str, "admin": str, "by": object, "why": object, "at": Maybe(float), "node": object},
    optional={
        "virtual_servers": Maybe(MapOf(Obj({"available": bool, "serving": Maybe(bool)}))),
        "virtual_servers_total": int,
        "virtual_server": object,
        "available": Maybe(bool),
        "reason": object,
        "released_hold": object,
    },
)


def add_parser(sub: Any) -> None:
    for command, text in (
        ("enable", "give an object back to load balancing (replicated)"),
        ("disable", "take an object out of load balancing for every client (replicated)"),
        ("drain", "take an object out for new clients; persisted ones stay (replicated)"),
    ):
        p = sub.add_parser(
            command, help=text, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        p.add_argument("target", choices=list(LEVEL_NAMES), metavar="TARGET", help=", ".join(LEVEL_NAMES))
        p.add_argument("name", metavar="NAME", help="the object's name in the config (a pool member: POOL/SERVER)")
        p.add_argument("--config", "-c", required=True, metavar="FILE")
        p.add_argument("--node", "-n", metavar="NAME", help="the member to ask (default: the first that answers)")
        p.add_argument("--reason", "-r", default="", metavar="TEXT", help="why (kept with the change)")
        p.add_argument("--by", metavar="WHO", help="who does it (default: the user running this command)")
        p.add_argument("--json", action="store_true", help="the API's JSON answer")
        add_token_argument(p)
        p.set_defaults(run=run, action=COMMANDS[command])


def when(at: float | None) -> str:
    """*at* (seconds since the epoch) as a UTC time; "?" when unknown or beyond the calendar."""
    if at is None:
        return "?"
    try:
        return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return "?"


def render(answer: dict[str, Any]) -> str:
    level = LEVEL_NAMES.get(answer["target"], answer["target"])
    state = "draining" if answer["admin"] == "drain" else answer["admin"]
    lines = [
        f"{LEVEL_WORDS.get(level, level)} {answer['name']} {state} by {answer['by']} "
        f"at {when(answer['at'])} on {answer['node']}" + (f": {answer['why']}" if answer["why"] else "")
    ]
    servers = answer.get("virtual_servers")
    if isinstance(servers, dict):
        for name, s in sorted(servers.items()):
            word = "available" if s["available"] else ("draining" if s["serving"] else "out")
            lines.append(f"  virtual server {name}: {word}")
        more = answer.get("virtual_servers_total", len(servers)) - len(servers)
        if more > 0:
            lines.append(f"  ... and {more} more")
    if "virtual_server" in answer:
        lines.append(f"  now {'available' if answer.get('available') else 'out'}: {answer.get('reason', '')}")
        if answer.get("released_hold"):
            lines.append("  (released from its manual-resume hold)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    command = f"gtmcluster {args.action}"
    try:
        config = load_config(args.config)
        members = [member(config, args.node)] if args.node else list(config.sync_group.members)
        tokens = Tokens.from_args(config, args)
        by = args.by if args.by is not None else _user()
        path = f"/api/v1/admin/{args.target}/{urllib.parse.quote(args.name, safe='/')}/{args.action}"
        body = {"reason": args.reason, "by": by}
        answer = None
        unreachable = []
        for m in members:
            try:
                answer = post(m, path, body, tokens, fields=CHANGED)
                break
            except Unreachable as e:
                unreachable.append(str(e))
        if answer is None:
            raise CliError("no member answered:\n  " + "\n  ".join(unreachable))
    except CliError as e:
        print(f"{command}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=1, sort_keys=True) if args.json else render(printable(answer)))
    return 0


def _user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no user name known to the system
        return ""
