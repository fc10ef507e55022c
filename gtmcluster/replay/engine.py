"""Deciding logged queries again, with one config and one state: the real decision code.

A `Replayer` holds what a node holds to decide (see `node.make_balancer`): a record store
(loaded from a copy in memory of a member's state snapshot, `statecopy`: the file itself
is only read, never locked for longer than the copy, never rolled back; or empty), the health tracker over it (health
verdicts and operators' admin states), persistence over it, the measurements (paths), and
a balancer with rotations from zero and a seeded random source. Each query finds its wide
IP as the responder does (its name, an alias or a wildcard, in the config's zones) and is
decided with `Balancer.decide`: rotations advance from query to query as on a node, and a
persistence record a decision asks for is kept in the replayer's own store (never on disk),
so a later query of that client is held by it as it would be. The clock stands still at
one moment (*now*), so the same log, config and state always decide the same way.

`--disable` objects become operators' admin states (``disabled``) in that store, exactly
what `gtmcluster disable` would write. Without a snapshot every server is taken as up
(admin states aside): `AssumedUp`.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from gtmcluster.config.model import Config, VirtualServer
from gtmcluster.dns.responder import client_of, wanted_type
from gtmcluster.dnsdata import names
from gtmcluster.health.tracker import HealthTracker
from gtmcluster.lb.context import Availability, Rotations
from gtmcluster.lb.trace import Action
from gtmcluster.node import make_balancer
from gtmcluster.replay import statecopy
from gtmcluster.replay.queries import LoggedQuery
from gtmcluster.state import admin, keys, snapshot
from gtmcluster.state.admin import AdminState
from gtmcluster.state.persistence import StorePersistence
from gtmcluster.state.store import Store
from gtmcluster.topology.prefixes import PrefixMap

#: what `--disable` takes, and the admin state level each is
TARGETS = {
    "datacenter": "datacenter",
    "server": "vs",
    "virtual-server": "vs",
    "link": "link",
    "pool": "pool",
    "pool-member": "member",
    "wideip": "wideip",
}
#: who the replay's admin states are by (as in a trace: "data center TEL disabled by what-if")
BY = "what-if"


class BadInput(Exception):
    """Input the replay cannot use (a snapshot that cannot be read, a --disable naming
    nothing in the config): the message says which and why."""


@dataclass(frozen=True, slots=True)
class Disable:
    """An object taken out for the replay: a `TARGETS` key and its name in the config."""

    target: str
    name: str

    @property
    def level(self) -> str:
        return TARGETS[self.target]

    def __str__(self) -> str:
        return f"{self.target} {self.name}"


def check_disables(config: Config, disables: Iterable[Disable], source: str) -> None:
    """Raise `BadInput` when a --disable names nothing in *config* (read from *source*)."""
    datacenters = set(config.datacenters)
    links = {vs.link.name for vs in config.virtual_servers.values() if vs.link is not None}
    wideips = {w.name for w in config.wideips.values()}
    for d in disables:
        level, name = d.level, d.name
        if level == "member":
            pool_name, _, server = name.partition("/")
            pool = config.pools.get(pool_name)
            known = pool is not None and any(m.name == server for m in pool.members)
        else:
            known = (
                name
                in {
                    "datacenter": datacenters,
                    "vs": set(config.virtual_servers),
                    "link": links,
                    "pool": set(config.pools),
                    "wideip": wideips,
                }[level]
            )
        if not known:
            raise BadInput(f"--disable {d}: {source} has no {admin.LEVEL_WORDS[level]} {name!r}")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one query got in one replay (or None for `wideip`: no wide IP has its name)."""

    wideip: str | None
    #: answer, rcode, drop, return_to_dns; not_served (the wide IP answers no such type: the
    #: zone does); no_wideip
    action: str
    pool: str = ""
    slot: str = ""
    method: str = ""
    members: tuple[str, ...] = ()
    datacenters: tuple[str, ...] = ()
    answer: tuple[str, ...] = ()
    rcode: int = 0

    @property
    def failed(self) -> bool:
        """No answer from the wide IP's pools: its failure response, a drop, the zone."""
        return self.action != "answer" or self.slot == "failure_response"

    @property
    def fell_back(self) -> bool:
        """Answered from a pool's fallback slot or the last resort pool."""
        return self.slot in ("fallback", "last_resort")

    def where(self) -> str:
        """Where the query goes, for a report: "DC1 (vs1)", "failure_response servfail"."""
        if self.members:
            return f"{', '.join(self.datacenters)} ({', '.join(self.members)})"
        if self.action == "answer":
            return f"{self.slot or self.method} {', '.join(self.answer)}".strip()
        what = _RCODE_NAMES.get(self.rcode, str(self.rcode)) if self.action == "rcode" else self.action
        return what if self.method in ("", what) else f"{self.method} {what}"


_RCODE_NAMES = {2: "servfail", 3: "nxdomain", 5: "refused"}


class AssumedUp:
    """Availability without a state snapshot: every server up, but for operators' admin
    states (the config's, and --disable's) as the health tracker applies them."""

    def __init__(self, tracker: HealthTracker):
        self.tracker = tracker

    def _admin(self, vs: VirtualServer) -> str:
        status = self.tracker.snapshot.vs.get(vs.name)
        return status.admin if status is not None else vs.admin_state

    def vs_up(self, vs: VirtualServer) -> bool:
        return self._admin(vs) == admin.ENABLED

    def vs_serving(self, vs: VirtualServer) -> bool:
        return self._admin(vs) != admin.DISABLED

    def weight(self, vs: VirtualServer, now: float) -> float:
        return 1.0

    def admin_states(self) -> Mapping[str, AdminState]:
        return self.tracker.admin_states()


class Replayer:
    """Decides logged queries with one config, one state and one set of --disable objects."""

    def __init__(
        self,
        config: Config,
        now: float,
        state: Path | None = None,
        disables: Iterable[Disable] = (),
        seed: int = 0,
    ):
        self.config = config
        self.now = now
        node = config.sync_group.members[0].name
        self.store = Store(node, self.clock)
        if state is not None:
            if not state.is_file():
                raise BadInput(f"{state}: no such state snapshot")
            try:
                snapshot.read(state, self.store, now, connect=statecopy.connect)
            except (snapshot.Unreadable, OSError) as e:
                raise BadInput(f"{state}: cannot read the state snapshot: {e}") from None
        for d in disables:
            self.store.put(keys.admin(d.level, d.name), admin.value(admin.DISABLED, BY, "replay", now, node))
        self.tracker = HealthTracker(config, self.store, self.clock, node)
        availability: Availability = self.tracker if state is not None else AssumedUp(self.tracker)
        self.persistence = StorePersistence(self.store)
        self.balancer = make_balancer(
            config,
            self.store,
            availability,
            self.persistence,
            self.clock,
            random.Random(seed),
            Rotations(),
            lambda: True,
        )
        self.trusted: PrefixMap[bool] = PrefixMap((n, True) for n in config.dns_server.ecs_trusted)
        #: data center of each virtual server
        self._datacenter = {name: vs.datacenter for name, vs in config.virtual_servers.items()}

    def clock(self) -> float:
        return self.now

    def decide(self, query: LoggedQuery) -> Outcome:
        """What *query* gets: its wide IP found as the responder finds it, then decided."""
        config = self.config
        wideip = config.wideip_names.find_in(config.zones, names.key(query.qname))
        if wideip is None:
            return Outcome(None, "no_wideip")
        qtype = wanted_type(wideip, query.qtype)
        if qtype not in wideip.types:
            return Outcome(wideip.name, "not_served")
        client = client_of(str(query.ldns), query.ecs, self.trusted)
        decision = self.balancer.decide(wideip, qtype, client)
        if decision.persist is not None:
            self.persistence.put(decision.persist)
        action = decision.action
        if action is Action.NOTHING:
            action = Action.RETURN_TO_DNS  # (as the responder takes it: the zone answers)
        datacenters = sorted({self._datacenter.get(m, "?") for m in decision.members})
        return Outcome(
            wideip.name,
            action.value,
            decision.pool or "",
            decision.slot or "",
            decision.method or "",
            tuple(decision.members),
            tuple(datacenters),
            tuple(str(a) for a in decision.addresses) + tuple(t.text for t in decision.targets),
            decision.rcode or 0,
        )


@dataclass(frozen=True, slots=True)
class Pair:
    """One query and what it gets before (base) and after (candidate)."""

    query: LoggedQuery
    before: Outcome
    after: Outcome


def decided(queries: Iterable[LoggedQuery], before: Replayer, after: Replayer) -> Iterator[Pair]:
    """Each query decided by *before* and by *after*, in order, one at a time (queries for
    names no wide IP of either config has included: both outcomes' `wideip` is None)."""
    for query in queries:
        yield Pair(query, before.decide(query), after.decide(query))


def replay(queries: Iterable[LoggedQuery], before: Replayer, after: Replayer) -> tuple[list[Pair], int]:
    """Each query decided by *before* and by *after*, in order, as a list; with how many
    were left out because no wide IP of either config has their name. (The command does
    not keep the pairs: `report.Findings` counts them as they come from `decided`.)"""
    pairs = []
    left_out = 0
    for pair in decided(queries, before, after):
        if pair.before.wideip is None and pair.after.wideip is None:
            left_out += 1
        else:
            pairs.append(pair)
    return pairs, left_out
