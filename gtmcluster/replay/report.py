"""The replay's findings, from each query's outcome before and after: per wide IP the share
of answers per data center and per member, the clients that move (from -> to), the queries
that would now fail or fall back, and how many logged decisions the base replay agrees with.

The report is plain data (dicts, lists, strings, numbers) with keys in a stable order, so
that `--json` is the report itself and the same input gives the same bytes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from gtmcluster.querylog.dnstap import Decided
from gtmcluster.replay.engine import Outcome, Pair

#: the bucket of answers that name no pool member (failure response, drop, fallback address)
NO_MEMBER = "(no member)"
#: disagreements with the log shown as examples, at most
EXAMPLES = 10
#: clients (a wide IP's LDNS, with the client subnet it sent) followed for the client lists,
#: by default (`--max-clients`)
MAX_CLIENTS = 500_000
#: outcomes whose places `Findings` keeps at once (they repeat: a config has few)
_KEPT_OUTCOMES = 10_000


def agrees(decided: Decided, outcome: Outcome) -> bool:
    """Whether a replayed *outcome* is what the log says was decided: the same wide IP, pool
    and members (persistence or not), or a failure response for both."""
    if decided.wideip != outcome.wideip:
        return False
    if decided.slot == "failure_response" or outcome.slot == "failure_response":
        return decided.slot == outcome.slot
    return decided.pool == outcome.pool and tuple(decided.members) == outcome.members


def _shares(counts: dict[str, list[float]], total: int) -> dict[str, dict[str, float]]:
    return {
        key: {
            "before": round(before, 3),
            "after": round(after, 3),
            "before_share": round(before / total, 4) if total else 0.0,
            "after_share": round(after / total, 4) if total else 0.0,
        }
        for key, (before, after) in sorted(counts.items())
    }


class _WideIP:
    """The counts of one wide IP's queries: per data center and member, per outcome."""

    __slots__ = ("datacenters", "members", "outcomes", "queries")

    def __init__(self) -> None:
        self.queries = 0
        self.datacenters: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        self.members: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        self.outcomes = {k: [0, 0] for k in ("answered", "fell_back", "failed")}

    def add(self, pair: Pair) -> None:
        self.queries += 1
        for side, outcome in enumerate((pair.before, pair.after)):
            if outcome.members:
                for dc in outcome.datacenters:
                    self.datacenters[dc][side] += 1 / len(outcome.datacenters)
                for m in outcome.members:
                    self.members[m][side] += 1 / len(outcome.members)
            else:
                self.datacenters[NO_MEMBER][side] += 1
                self.members[NO_MEMBER][side] += 1
            kind = "failed" if outcome.failed else "fell_back" if outcome.fell_back else "answered"
            self.outcomes[kind][side] += 1

    def summary(self) -> dict[str, Any]:
        return {
            "queries": self.queries,
            "datacenters": _shares(self.datacenters, self.queries),
            "members": _shares(self.members, self.queries),
            "outcomes": {k: {"before": b, "after": a} for k, (b, a) in sorted(self.outcomes.items())},
        }


_EMPTY: frozenset[str] = frozenset()


class _Client:
    """What one client's queries of one wide IP got: where they went before and after (the
    union over its queries, data centers and members), and the queries that now
    fail or now fall back with where they went. Sets are shared between clients
    (`Findings._same`), so a client costs the same whatever its number of queries."""

    __slots__ = (
        "after_dcs",
        "after_members",
        "before_dcs",
        "before_members",
        "failing",
        "failing_after",
        "failing_before",
        "falling_back",
        "falling_back_after",
        "falling_back_before",
        "queries",
    )

    def __init__(self) -> None:
        self.queries = 0
        self.before_dcs = self.before_members = self.after_dcs = self.after_members = _EMPTY
        self.failing = self.falling_back = 0
        self.failing_before = self.failing_after = self.falling_back_before = self.falling_back_after = _EMPTY


class Findings:
    """The report's figures, gathered query by query (`add`) as the log is read: per wide
    IP counts, per client (a wide IP's LDNS, with the client subnet it sent) where its
    queries go, the agreement with the log. What it holds grows with the clients, never
    with the queries; at most *max_clients* clients are followed for the client lists (the
    queries of any later client still count in the shares, outcomes and agreement, and in
    `not_followed`). `build` gives the report."""

    def __init__(self, max_clients: int = MAX_CLIENTS):
        self.max_clients = max_clients
        self._wideips: dict[str, _WideIP] = {}
        self._clients: dict[str, dict[str, _Client]] = {}
        self.clients = 0
        #: queries of clients beyond *max_clients*, not in the client lists
        self.not_followed = 0
        #: queries for names no wide IP of either config answers (not in the report)
        self.left_out = 0
        self._compared = 0
        self._disagree = 0
        self._examples: list[dict[str, str]] = []
        self._sets: dict[frozenset[str], frozenset[str]] = {}
        self._where: dict[Outcome, tuple[frozenset[str], frozenset[str], frozenset[str]]] = {}

    def _same(self, values: frozenset[str]) -> frozenset[str]:
        """The one set equal to *values* (sets of where queries go repeat between clients)."""
        return self._sets.setdefault(values, values)

    def _grown(self, held: frozenset[str], more: frozenset[str]) -> frozenset[str]:
        return held if more <= held else self._same(held | more)

    def _places(self, outcome: Outcome) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
        """The data centers and members an outcome counts in for its client, and its `where`
        (an outcome without members counts by what it is, e.g. "failure_response servfail")."""
        found = self._where.get(outcome)
        if found is None:
            where = self._same(frozenset((outcome.where(),)))
            if outcome.members:
                found = (self._same(frozenset(outcome.datacenters)), self._same(frozenset(outcome.members)), where)
            else:
                found = (where, where, where)
            if len(self._where) >= _KEPT_OUTCOMES:
                self._where.clear()
            self._where[outcome] = found
        return found

    def add(self, pair: Pair) -> None:
        """Count one query and what it got before and after, in log order."""
        before, after = pair.before, pair.after
        if before.wideip is None and after.wideip is None:
            self.left_out += 1
            return
        wideip = before.wideip or after.wideip or ""
        counts = self._wideips.get(wideip)
        if counts is None:
            counts = self._wideips[wideip] = _WideIP()
        counts.add(pair)
        decided = pair.query.decided
        if decided is not None:
            self._compared += 1
            if not agrees(decided, before):
                self._disagree += 1
                if len(self._examples) < EXAMPLES:
                    self._examples.append(
                        {
                            "client": pair.query.client,
                            "name": pair.query.name,
                            "logged": _decided_text(decided),
                            "replayed": before.where(),
                        }
                    )
        clients = self._clients.get(wideip)
        if clients is None:
            clients = self._clients[wideip] = {}
        name = pair.query.client
        client = clients.get(name)
        if client is None:
            if self.clients >= self.max_clients:
                self.not_followed += 1
                return
            client = clients[name] = _Client()
            self.clients += 1
        client.queries += 1
        before_dcs, before_members, before_where = self._places(before)
        after_dcs, after_members, after_where = self._places(after)
        client.before_dcs = self._grown(client.before_dcs, before_dcs)
        client.before_members = self._grown(client.before_members, before_members)
        client.after_dcs = self._grown(client.after_dcs, after_dcs)
        client.after_members = self._grown(client.after_members, after_members)
        if after.failed and not before.failed:
            client.failing += 1
            client.failing_before = self._grown(client.failing_before, before_where)
            client.failing_after = self._grown(client.failing_after, after_where)
        if after.fell_back and not before.fell_back:
            client.falling_back += 1
            client.falling_back_before = self._grown(client.falling_back_before, before_where)
            client.falling_back_after = self._grown(client.falling_back_after, after_where)

    def build(self, about: dict[str, Any]) -> dict[str, Any]:
        """The report; *about* says what was replayed (files, configs, state, --disable),
        put in as it is."""
        moved: list[dict[str, Any]] = []
        now_failing: list[dict[str, Any]] = []
        now_falling_back: list[dict[str, Any]] = []
        for wideip, clients in sorted(self._clients.items()):
            for name, c in sorted(clients.items()):
                was, now = _joined(c.before_dcs), _joined(c.after_dcs)
                if was != now:
                    moved.append(
                        {
                            "wideip": wideip,
                            "client": name,
                            "queries": c.queries,
                            "from": was,
                            "to": now,
                            "from_members": _joined(c.before_members),
                            "to_members": _joined(c.after_members),
                        }
                    )
                for count, before, after, into in (
                    (c.failing, c.failing_before, c.failing_after, now_failing),
                    (c.falling_back, c.falling_back_before, c.falling_back_after, now_falling_back),
                ):
                    if count:
                        into.append(
                            {
                                "wideip": wideip,
                                "client": name,
                                "queries": count,
                                "before": sorted(before),
                                "after": sorted(after),
                            }
                        )
        return {
            **about,
            "queries": sum(w.queries for w in self._wideips.values()),
            "clients": {"followed": self.clients, "max": self.max_clients, "queries_not_followed": self.not_followed},
            "agreement": {
                "compared": self._compared,
                "agree": self._compared - self._disagree,
                "examples": list(self._examples),
            },
            "wideips": {name: w.summary() for name, w in sorted(self._wideips.items())},
            "moved": moved,
            "now_failing": now_failing,
            "now_falling_back": now_falling_back,
        }


def _joined(values: frozenset[str]) -> str:
    return ", ".join(sorted(values))


def build(pairs: Iterable[Pair], about: dict[str, Any], max_clients: int = MAX_CLIENTS) -> dict[str, Any]:
    """The report of *pairs* (queries in log order, with what they got before and after);
    *about* says what was replayed, put in as it is."""
    findings = Findings(max_clients)
    for pair in pairs:
        findings.add(pair)
    return findings.build(about)


def _decided_text(decided: Decided) -> str:
    members = f" ({', '.join(decided.members)})" if decided.members else ""
    return f"{decided.pool or decided.slot}{members} by {decided.method}"
