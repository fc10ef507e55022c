"""`gtmcluster status --config FILE [--node N ...] [--json]`: how the sync group is doing.

Asks every member (or only the --node ones) for its /api/v1/status, all at once, and prints
one row per node (data center, config generation and digest, state digest and record count,
peers, virtual servers and links), each node's certificates' days left (its own, the group
CA's, its HTTPS API's: `gtmcluster.cli.certdays`), the problems each node sees (peers not
connected or with another config, virtual servers not available, links not up, certificates
near their end), then whether every node that
answered has the same state digest and the same config digest, and which nodes could not be
reached and why.

Digests that differ in one round of answers may only be in flight (a change written on one
member a moment before it reaches the others): the nodes are asked again, for up to
--settle seconds (3 by default), and only a difference that lasts counts (`cli.settle`);
the verdict says when it waited.

Exit status: 0 when every node asked answered and their digests agree, 1 otherwise (a node
unreachable, digests that differ for good, or a config problem). An answer that is too slow, too
large, not JSON or without the fields read here (`STATUS`) counts as the node unreachable,
with why; what the nodes say is shown with its control characters escaped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gtmcluster.cli import certdays
from gtmcluster.cli.admin import ADMIN_STATE, when
from gtmcluster.cli.nodeapi import CliError, Tokens, add_token_argument, get, load_config, member
from gtmcluster.cli.settle import MAX_SETTLE, SETTLE, Settled, settle
from gtmcluster.cli.shape import ListOf, MapOf, Maybe, Obj
from gtmcluster.cli.terminal import printable
from gtmcluster.config.model import Member
from gtmcluster.state.admin import LEVEL_WORDS

#: what this command reads of a node's /api/v1/status (`gtmcluster.cli.shape`)
PEER = Obj(
    {
        "name": str,
        "connected": bool,
        "synced": Maybe(bool),
        "config_matches": Maybe(bool),
        "config_digest": Maybe(str),
        "last_contact_ago": Maybe(float),
    },
    optional={
        "counted": Maybe(bool),
        "silent_for": Maybe(float),
        "dnssec_keys_match": Maybe(bool),
        "dnssec_keys_differ": Maybe(ListOf(str)),
    },
)
BUNDLE = Obj(
    {"generation": Maybe(int), "digest": Maybe(str), "held_generation": Maybe(int), "held_digest": Maybe(str)},
    optional={"refused": Maybe(Obj({"generation": int, "reasons": ListOf(str)}))},
)
STATUS = Obj(
    {
        "datacenter": str,
        "config_digest": str,
        "state": Obj(
            {"digest": str, "records": int},
            optional={"digest_by_protocol": Maybe(MapOf(str)), "origin_digests": Maybe(MapOf(str))},
        ),
        "peers": ListOf(PEER),
        "health": Obj(
            {
                "virtual_servers": MapOf(
                    Obj({"available": bool, "held": bool, "health": object, "admin": object, "reason": Maybe(str)})
                ),
                "links": MapOf(Obj({"state": str, "reason": Maybe(str)}, optional={"full": Maybe(str)})),
            }
        ),
    },
    optional={
        "ready": object,
        "bundle": Maybe(BUNDLE),
        "dnssec_keys": Maybe(MapOf(str)),
        "admin": Maybe(ListOf(ADMIN_STATE)),
        "certificates": certdays.CERTIFICATES,
    },
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "status",
        help="the sync group at a glance: peers, digests, health (exit 1 unless all answer and agree)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", "-c", required=True, metavar="FILE", help="the sync group's YAML config")
    p.add_argument(
        "--node",
        "-n",
        metavar="NAME",
        nargs="+",
        action="extend",
        help="ask only these members (repeatable; default: every member)",
    )
    p.add_argument(
        "--settle",
        type=float,
        default=SETTLE,
        metavar="SECONDS",
        help=f"while digests differ, ask again for up to this long (default {SETTLE:g}, at most {MAX_SETTLE:g}; "
        "0: one round)",
    )
    p.add_argument("--json", action="store_true", help="{nodes: {NODE: status or {error}}, summary: {...}}")
    add_token_argument(p)
    p.set_defaults(run=run)


@dataclass
class Summary:
    """What the answers say together."""

    asked: list[str]
    answered: list[str]
    unreachable: dict[str, str]
    state_digests: dict[str, str]
    config_digests: dict[str, str]
    #: each member's signed zones' DNSKEY set digests (members that predate them: left out)
    dnssec_keys: dict[str, dict[str, str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    #: rounds of answers asked, and seconds between the first and the last (`cli.settle`)
    polls: int = 1
    waited: float = 0.0
    #: origins whose records still differ among members that are taking them in
    in_flight: list[str] = field(default_factory=list)

    @property
    def state_agree(self) -> bool:
        return len(set(self.state_digests.values())) <= 1

    @property
    def config_agree(self) -> bool:
        return len(set(self.config_digests.values())) <= 1

    @property
    def dnssec_keys_agree(self) -> bool:
        return len({json.dumps(k, sort_keys=True) for k in self.dnssec_keys.values()}) <= 1

    @property
    def digests_agree(self) -> bool:
        return self.state_agree and self.config_agree and self.dnssec_keys_agree

    @property
    def ok(self) -> bool:
        state = self.state_agree or bool(self.in_flight)  # (in flight: not a failure)
        agree = state and self.config_agree and self.dnssec_keys_agree
        return bool(self.answered) and not self.unreachable and agree

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "asked": self.asked,
            "answered": self.answered,
            "unreachable": self.unreachable,
            "state_digests_agree": self.state_agree,
            "config_digests_agree": self.config_agree,
            "state_digests": self.state_digests,
            "config_digests": self.config_digests,
            "dnssec_keys_agree": self.dnssec_keys_agree,
            "dnssec_keys": self.dnssec_keys,
            "problems": self.problems,
            "polls": self.polls,
            "waited": self.waited,
            "state_in_flight": self.in_flight,
        }


def ask_all(members: Sequence[Member], tokens: Tokens | None = None) -> dict[str, dict[str, Any]]:
    """Every member's status, or ``{"error": reason}``, asked concurrently (each request has
    the API client's deadline, `nodeapi.DEADLINE`, so the whole round takes at most that
    long; a node that is down is told within `nodeapi.TIMEOUT`); each answer has the fields
    of `STATUS`."""

    def ask(m: Member) -> dict[str, Any]:
        try:
            answer: dict[str, Any] = get(m, "/api/v1/status", tokens=tokens, fields=STATUS)
        except CliError as e:
            return {"error": str(e)}
        return answer

    with ThreadPoolExecutor(max_workers=max(1, len(members))) as pool:
        answers = list(pool.map(ask, members))
    return {m.name: a for m, a in zip(members, answers, strict=True)}


def ask_settled(
    ask: Callable[[], dict[str, dict[str, Any]]],
    within: float,
    clock: Callable[[], float] = time.monotonic,
    wait: Callable[[float], None] = time.sleep,
) -> Settled:
    """Rounds of *ask* until the digests agree or *within* seconds (at most `MAX_SETTLE`)
    have passed: whether a difference lasts (`cli.settle`)."""
    limit = min(max(0.0, within), MAX_SETTLE)
    return settle(ask, lambda answers: summarize(answers).digests_agree, clock, wait, within=limit)


def summarize(statuses: dict[str, dict[str, Any]], settled: Settled | None = None) -> Summary:
    answered = {n: s for n, s in statuses.items() if "error" not in s}
    summary = Summary(
        asked=list(statuses),
        answered=list(answered),
        unreachable={n: s["error"] for n, s in statuses.items() if "error" in s},
        state_digests=state_digests(answered),
        config_digests={n: s["config_digest"] for n, s in answered.items()},
        dnssec_keys={n: s["dnssec_keys"] for n, s in answered.items() if isinstance(s.get("dnssec_keys"), dict)},
    )
    if settled is not None:
        summary.polls, summary.waited, summary.in_flight = settled.polls, settled.waited, settled.moving
    for node, s in answered.items():
        summary.problems.extend(f"{node}: {p}" for p in problems(s))
        summary.problems.extend(f"{node}: {p}" for p in certdays.problems(node, s))
    return summary


def state_digests(answered: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Each node's state digest over the records the oldest protocol version among them can
    hold (`digest_by_protocol`; a node without it speaks version 1): in a group being
    upgraded, an older member never holds the records of newer versions."""
    by_protocol = {
        n: {v: d for v, d in held.items() if v.isascii() and v.isdigit() and len(v) < 10}
        if isinstance(held := s["state"].get("digest_by_protocol"), dict)
        else {}
        for n, s in answered.items()
    }
    oldest = min((max((int(v) for v in d), default=1) for d in by_protocol.values()), default=1)
    return {n: by_protocol[n].get(str(oldest), s["state"]["digest"]) for n, s in answered.items()}


def problems(s: dict[str, Any]) -> list[str]:
    """What one node sees wrong: itself not ready, peers, virtual servers, links."""
    out = []
    if not s.get("ready", True):
        out.append("not ready yet (still reconciling with its peers)")
    for p in s["peers"]:
        if not p["connected"]:
            out.append(f"peer {p['name']} not connected (last contact {ago(p['last_contact_ago'])})")
        elif p.get("counted") is False:
            silent = p.get("silent_for")
            since = f" for {silent:.1f}s" if silent is not None else ""
            out.append(f"peer {p['name']} connected but silent{since}: its verdicts do not count")
        elif not p["synced"]:
            out.append(f"peer {p['name']} connected but not synced yet")
        if p["config_matches"] is False:
            out.append(f"peer {p['name']} runs another config (digest {p['config_digest']})")
        if p.get("dnssec_keys_match") is False:
            zones = ", ".join(p.get("dnssec_keys_differ") or [])
            out.append(f"peer {p['name']} serves other DNSSEC keys for {zones}: validators reject one of us")
    own = s.get("bundle") or {}
    if own.get("refused"):
        refused = own["refused"]
        out.append(
            f"refused the group's config generation {refused['generation']}, runs generation "
            f"{own['generation'] or 'of its own file'}: " + "; ".join(refused["reasons"])
        )
    for name, vs in s["health"]["virtual_servers"].items():
        if not vs["available"]:
            held = ", held for manual resume" if vs["held"] else ""
            reason = f": {vs['reason']}" if vs["reason"] else ""
            out.append(f"virtual server {name} unavailable (health {vs['health']}, admin {vs['admin']}{held}){reason}")
    for name, link in s["health"]["links"].items():
        if link["state"] != "up":
            reason = f": {link['reason']}" if link["reason"] else ""
            out.append(f"link {name} {link['state']}{reason}")
        if link.get("full"):  # (over its max_utilisation; absent from older members)
            out.append(f"{link['full']}: no new clients")
    return out


def ago(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    return f"{seconds:.1f}s ago"


def peers_cell(peers: list[dict[str, Any]]) -> str:
    if not peers:
        return "-"
    words = []
    for p in peers:
        if not p["connected"]:
            word = "DOWN"
        elif p.get("counted") is False:
            word = "SILENT"
        elif p["config_matches"] is False:
            word = "OTHER-CONFIG"
        elif p["synced"]:
            word = "synced"
        else:
            word = "syncing"
        words.append(f"{p['name']} {word}")
    return ", ".join(words)


def count_cell(total: int, good: int, word: str) -> str:
    if total == 0:
        return "-"
    return f"{good}/{total} {word}"


def table(rows: list[list[str]]) -> list[str]:
    """Columns padded to their widest cell; the last column is not padded."""
    widths = [max(len(row[i]) for row in rows if i < len(row)) for i in range(max(len(r) for r in rows))]
    return [
        "  ".join(cell if i == len(row) - 1 else cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
        for row in rows
    ]


HEADER = ["NODE", "DC", "BUNDLE", "CONFIG DIGEST", "STATE DIGEST", "RECORDS", "PEERS", "SERVERS", "LINKS"]


def bundle_cell(bundle: dict[str, Any] | None) -> str:
    """The group's config generation a node runs ("file": its own file), and the newest it
    holds when that differs (refused, or being run)."""
    if not bundle:
        return "-"
    running = str(bundle["generation"]) if bundle["generation"] else "file"
    if bundle["held_generation"] and bundle["held_digest"] != bundle["digest"]:
        return f"{running} (holds {bundle['held_generation']})"
    return running


def render(statuses: dict[str, dict[str, Any]], datacenters: dict[str, str], summary: Summary) -> str:
    rows = [HEADER]
    for node, s in statuses.items():
        if "error" in s:
            rows.append([node, datacenters.get(node, "?"), "-", "UNREACHABLE"])
            continue
        servers = s["health"]["virtual_servers"]
        links = s["health"]["links"]
        rows.append(
            [
                node,
                s["datacenter"],
                bundle_cell(s.get("bundle")),
                s["config_digest"],
                s["state"]["digest"],
                str(s["state"]["records"]),
                peers_cell(s["peers"]),
                count_cell(len(servers), sum(1 for v in servers.values() if v["available"]), "available"),
                count_cell(len(links), sum(1 for v in links.values() if v["state"] == "up"), "up"),
            ]
        )
    lines = table(rows)
    if cert_rows := certdays.rows(statuses):
        lines.extend(["", *table(cert_rows)])
    lines.extend(admin_lines(statuses))
    if summary.problems:
        lines.append("")
        lines.extend(summary.problems)
    lines.append("")
    lines.extend(verdict(summary))
    return "\n".join(lines)


def admin_lines(statuses: dict[str, dict[str, Any]]) -> list[str]:
    """The admin states operators set (replicated: as the first node that answered holds
    them), those not `enabled`: what, by whom, when, where, why; and those the config sets
    that no operator's record overrides."""
    held = next((s.get("admin") for s in statuses.values() if "error" not in s), None)
    if not held:
        return []
    out = []
    for a in held:
        if a["state"] == "enabled":
            continue
        level = LEVEL_WORDS.get(a["level"], a["level"])
        state = "draining" if a["state"] == "drain" else a["state"]
        if a.get("configured") is True:  # (the config's admin_state: no operator's record)
            out.append(f"{level} {a['name']} {state} in the config")
            continue
        where = f" on {a['node']}" if a["node"] else ""
        why = f": {a['reason']}" if a["reason"] else ""
        out.append(f"{level} {a['name']} {state} by {a['by'] or '?'} at {when(a['at'])}{where}{why}")
    return ["", "admin states:", *(f"  {line}" for line in out)] if out else []


def verdict(summary: Summary) -> list[str]:
    lines = []
    count = len(summary.answered)
    if count == 0:
        lines.append("no node answered")
    elif summary.state_agree and summary.config_agree:
        state = next(iter(summary.state_digests.values()))
        config = next(iter(summary.config_digests.values()))
        nodes = f"{count} node{'s' if count != 1 else ''}"
        lines.append(f"digests agree across {nodes} (state {state}, config {config})")
        if summary.polls > 1:
            lines.append(f"  (they differed at first: a change was propagating; agreed{waited(summary, ' after ')})")
    elif summary.config_agree and summary.in_flight:
        origins = ", ".join(summary.in_flight)
        lines.append(
            f"state digests still settling{waited(summary, ' after ')}: the records of {origins} are on their "
            "way to members taking them in (in flight, not a failure; ask again to see them agree)"
        )
    else:
        differ = []
        if not summary.state_agree:
            differ.append("state " + ", ".join(f"{n}={d}" for n, d in summary.state_digests.items()))
        if not summary.config_agree:
            differ.append("config " + ", ".join(f"{n}={d}" for n, d in summary.config_digests.items()))
        lines.append(f"DIGESTS DIFFER{waited(summary, ' for ')}: " + "; ".join(differ))
    if not summary.dnssec_keys_agree:
        differ = []
        for zone in sorted({z for keys in summary.dnssec_keys.values() for z in keys}):
            told = {n: keys.get(zone, "unsigned") for n, keys in summary.dnssec_keys.items()}
            if len(set(told.values())) > 1:
                differ.append(f"{zone} " + ", ".join(f"{n}={d}" for n, d in told.items()))
        lines.append("DNSSEC KEYS DIFFER: " + "; ".join(differ))
    for node, reason in summary.unreachable.items():
        lines.append(f"UNREACHABLE {node}: {reason}")
    return lines


def waited(summary: Summary, word: str) -> str:
    """How long the command waited for differing digests (nothing when one round sufficed)."""
    if summary.polls <= 1:
        return ""
    return f"{word}{summary.waited:.1f}s ({summary.polls} polls)"


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
        names = list(dict.fromkeys(args.node)) if args.node else [m.name for m in config.sync_group.members]
        members = [member(config, name) for name in names]
        tokens = Tokens.from_args(config, args)
    except CliError as e:
        print(f"gtmcluster status: {e}", file=sys.stderr)
        return 1
    settled = ask_settled(lambda: ask_all(members, tokens), args.settle)
    statuses = settled.statuses
    summary = summarize(statuses, settled)
    if args.json:
        print(json.dumps({"nodes": statuses, "summary": summary.to_json()}, indent=1, sort_keys=True))
    else:
        datacenters = {m.name: m.datacenter for m in config.sync_group.members}
        shown = printable(statuses)  # (what the nodes say, escaped for the terminal)
        print(render(shown, datacenters, summarize(shown, settled)))
    return 0 if summary.ok else 1
