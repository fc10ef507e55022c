"""The decision for one wide IP query: persistence, pool choice, and each pool's
preferred / alternate / fallback chain, with a trace of every step.

A method that yields nothing passes to the next; a pool whose chain yields nothing passes
to the next pool in the wide IP's ranking, then to the last resort pool. `return_to_dns`
and `drop_packet` end the search with that outcome; `fallback_ip` answers with the pool's
fallback addresses whatever their health.

Operators' admin states (`state.admin`) of pools, pool members and wide IPs apply here
(those of data centers, links and servers are in each server's availability): a disabled
pool or pool member is no candidate, for anyone; a draining one is no candidate for new
clients, while clients held by persistence keep it. A disabled wide IP answers with its
`failure_response` (as when no pool has an available member), persistence aside; a
draining one does so for new clients only. Where no operator's record is held, the
config's `admin_state` of the object applies (`WideIP.configured_admin`, made when the
config is read: with nothing configured other than enabled, it costs nothing here).

A pool may have no members: it answers by `fallback_ip` alone (F5's fallback-only pool).

Only servers answering the queried type are candidates: by their address's family for A
and AAAA, by their record for CNAME, MX, SRV and NAPTR (`config.targets`).
"""

from __future__ import annotations

import copy
import ipaddress
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gtmcluster.config.addresses import IPAddress
from gtmcluster.config.model import Pool, PoolMember, PoolRef, Prefixes, RecordTarget, VirtualServer, WideIP
from gtmcluster.dnsdata.zone import TYPE_A, TYPE_AAAA, TYPE_CNAME
from gtmcluster.lb.context import (
    Availability,
    Client,
    Context,
    PersistenceView,
    Rotations,
)
from gtmcluster.lb.methods import METHODS, Slot
from gtmcluster.lb.ranking import Ranking
from gtmcluster.lb.trace import Action, Decision, Step
from gtmcluster.state.admin import DISABLED, ENABLED, AdminState
from gtmcluster.state.persistence import PersistKey, PersistRecord
from gtmcluster.topology.records import Topology


@dataclass(slots=True)
class _Run:
    """The mutable part of one decision: the trace so far and the scope."""

    ctx: Context
    version: int  # the address family answered (4, 6), 0 for the record types
    rtype: int  # the type answered: only servers answering it are candidates
    steps: list[Step] = field(default_factory=list)
    scope: int = 0
    #: the proximity source of the wide IP's `pool_lb`, when a path method ranked the pools
    #: (the answer's, unless the answering pool's own method read paths)
    source: str = ""
    #: operators' admin states of pools, pool members and wide IPs, by "<level>/<name>"
    #: (usually empty: then nothing is looked up)
    admin: Mapping[str, AdminState] = field(default_factory=dict)

    def admin_state(self, key: str) -> AdminState | None:
        return self.admin.get(key) if self.admin else None

    def decision(self, action: Action, **fields: Any) -> Decision:
        """The decision, with the scope, the trace and what the context noted on the way."""
        ctx = self.ctx
        probe = str(ctx.client.ldns) if ctx.probe_wanted else None
        return Decision(
            action,
            scope=self.scope,
            trace=tuple(self.steps),
            probe=probe,
            probe_subnet=ctx.probe_subnet,
            varies=ctx.varies,
            until=ctx.until,
            **fields,
        )

    def rank(self, method: str, candidates: Any, slot: Slot) -> Ranking:
        """*method*'s ranking of *candidates*, with the proximity source it read paths by
        left in the context (`Context.source`, "" for a method that reads none)."""
        self.ctx.source = ""
        return METHODS[method](candidates, self.ctx, slot)


@dataclass(frozen=True, slots=True)
class _PoolOutcome:
    action: Action
    members: tuple[PoolMember, ...] = ()
    addresses: tuple[IPAddress, ...] = ()
    method: str = ""
    slot: str = ""
    targets: tuple[RecordTarget, ...] = ()
    #: the proximity source of the method that chose (`Decision.proximity`)
    source: str = ""


_FULL = Prefixes(32, 128)
_RCODES = {"nxdomain": 3, "servfail": 2, "refused": 5}
#: resolution of slow-start shares: a ramping member's weight is in tenths
_RAMP_SCALE = 10


class Balancer:
    """Decides wide IP answers from the config and views of the node's state."""

    def __init__(
        self,
        topology: Topology,
        availability: Availability,
        persistence: PersistenceView,
        clock: Callable[[], float],
        rng: random.Random | None = None,
        rotations: Rotations | None = None,
        measurements: Any = None,
    ):
        self.topology = topology
        self.availability = availability
        self.persistence = persistence
        self.clock = clock
        self.rng = rng or random.Random()
        self.rotations = rotations or Rotations()
        self.measurements = measurements

    def decide(self, wideip: WideIP, qtype: int, client: Client) -> Decision:
        ctx = Context(
            client,
            self.clock(),
            self.rng,
            self.rotations,
            self.availability,
            self.persistence,
            self.topology,
            self.measurements,
        )
        return self._decide(wideip, qtype, client, ctx)

    def explain(self, wideip: WideIP, qtype: int, client: Client) -> Decision:
        """The decision *client* would get now, without side effects: the rotations and
        the random source are copies, and nothing is written (persistence, probes)."""
        twin = Balancer(
            self.topology,
            self.availability,
            self.persistence,
            self.clock,
            copy.deepcopy(self.rng),
            copy.deepcopy(self.rotations),
            self.measurements,
        )
        return twin.decide(wideip, qtype, client)

    @staticmethod
    def persist_key(wideip: WideIP, qtype: int, client: Client) -> tuple[PersistKey, int] | None:
        """The persistence record *client* would be held by, and the bits of its network
        (the answer's scope: a client subnet shorter than the prefix is held as its
        address's network at the prefix, `Client.network`).

        A client known by its client subnet is held together with the resolver that sent
        it, each at the wide IP's persistence prefix (BIG-IP's "persist CIDR" of the LDNS):
        a resolver reads and writes only its own records."""
        if wideip.persistence is None:
            return None
        prefixes = wideip.persistence.prefixes
        network = client.network(prefixes.for_version(client.address.version))
        resolver = ""
        if client.from_ecs:
            ldns = client.ldns
            resolver = str(ipaddress.ip_network((ldns, prefixes.for_version(ldns.version)), strict=False))
        return PersistKey(wideip.name, qtype, str(network), resolver), network.prefixlen

    def _decide(self, wideip: WideIP, qtype: int, client: Client, ctx: Context) -> Decision:
        version = 4 if qtype == TYPE_A else 6 if qtype == TYPE_AAAA else 0
        held = self.availability.admin_states()
        configured = wideip.configured_admin
        if configured:  # (operators' records over the config's states: a record wins)
            held = _Layered(held, configured) if held else configured
        run = _Run(ctx, version, qtype, admin=held)
        admin = run.admin_state(f"wideip/{wideip.name}") if run.admin else None
        if admin is not None and admin.state == DISABLED:
            run.steps.append(_admin_step(f"wideip {wideip.name}", admin))
            return self._failure(wideip, run)
        persisted = self.persist_key(wideip, qtype, client)
        key = None
        if persisted is not None:
            key, run.scope = persisted
            hit = self._persisted(wideip, key, run)
            if hit is not None:
                return hit
        if admin is not None and admin.state != ENABLED:  # draining: new clients are refused
            run.steps.append(_admin_step(f"wideip {wideip.name}", admin))
            return self._failure(wideip, run)
        outcome, ref = self._choose(wideip, run)
        if outcome.action is Action.NOTHING:
            return self._failure(wideip, run)
        if outcome.action is not Action.ANSWER:
            return run.decision(outcome.action, method=outcome.method)
        source = outcome.source or (run.source if outcome.members else "")
        assert ref is not None
        pool = ref.pool
        record = None
        if key is not None and wideip.persistence is not None and outcome.members:
            names = tuple(m.name for m in outcome.members)
            record = PersistRecord(key, pool.name, names, ctx.now, wideip.persistence.ttl)
        return run.decision(
            Action.ANSWER,
            addresses=outcome.addresses,
            targets=outcome.targets,
            ttl=pool.ttl,
            pool=pool.name,
            members=tuple(m.name for m in outcome.members),
            persist=record,
            method=outcome.method,
            slot=outcome.slot,
            proximity=source,
        )

    def _failure(self, wideip: WideIP, run: _Run) -> Decision:
        """Every pool yielded nothing: the wide IP's configured failure response."""
        response = wideip.failure_response
        subject = f"wideip {wideip.name}"
        if response == "fallback_ip":
            ips = tuple(a for a in wideip.fallback_ips if a.version == run.version)
            run.steps.append(
                Step(
                    subject,
                    "failure_response",
                    response,
                    tuple(map(str, wideip.fallback_ips)),
                    tuple(map(str, ips)),
                    note="every pool yielded nothing",
                )
            )
            if ips:
                ttl = min((r.pool.ttl for r in wideip.pools), default=30)
                return run.decision(
                    Action.ANSWER, addresses=ips, ttl=ttl, method="failure_response", slot="failure_response"
                )
            response = "return_to_dns"  # no address of this family: the zone answers
        else:
            run.steps.append(Step(subject, "failure_response", response, (), (), note="every pool yielded nothing"))
        if response in _RCODES:
            return run.decision(Action.RCODE, method="failure_response", rcode=_RCODES[response])
        action = Action.DROP if response == "drop" else Action.RETURN_TO_DNS
        return run.decision(action, method="failure_response")

    def _persisted(self, wideip: WideIP, key: PersistKey, run: _Run) -> Decision | None:
        """Answer from a live persistence record whose members are all still available."""
        ctx = run.ctx
        record = self.persistence.get(key, ctx.now)
        if record is None:
            return None
        refs = {r.name: r for r in wideip.pools}
        if wideip.last_resort is not None:
            refs.setdefault(wideip.last_resort.name, wideip.last_resort)
        ref = refs.get(record.pool)
        members = []
        if ref is not None:
            by_name = {m.name: m for m in ref.pool.members}
            members = [by_name.get(n) for n in record.members]
        admin = run.admin_state
        usable = (
            ref is not None
            and members
            and not (run.admin and _disabled(admin(f"pool/{ref.pool.name}")))
            and all(
                m is not None
                and m.vs.rtype == run.rtype
                and self.availability.vs_serving(m.vs)
                and not (run.admin and _disabled(admin(f"member/{ref.pool.name}/{m.name}")))
                for m in members
            )
        )
        step = Step(
            f"wideip {wideip.name}",
            "persistence",
            "persistence",
            (key.network,),
            tuple(record.members) if usable else (),
            note=f"record for pool {record.pool}" + ("" if usable else ", no longer available: deciding anew"),
        )
        run.steps.append(step)
        if not usable or ref is None:
            return None
        chosen = tuple(m.vs for m in members if m is not None)
        # Refresh a record past half its life, so an active client keeps it without a write
        # on every query.
        refresh = None
        half = record.written + record.ttl / 2
        if ctx.now > half:
            refresh = PersistRecord(key, record.pool, record.members, ctx.now, record.ttl)
        else:
            ctx.holds_until(half)
        addresses, targets = _records(chosen)
        return run.decision(
            Action.ANSWER,
            addresses=addresses,
            targets=targets,
            ttl=ref.pool.ttl,
            pool=ref.pool.name,
            members=record.members,
            persist=refresh,
            method="persistence",
            slot="persistence",
        )

    def _usable(self, pool: Pool, member: PoolMember, run: _Run) -> bool:
        if member.vs.rtype != run.rtype or not self.availability.vs_up(member.vs):
            return False
        return not run.admin or _enabled(run.admin.get(f"member/{pool.name}/{member.name}"))

    def _pool_up(self, pool: Pool, run: _Run) -> bool:
        """A pool is a candidate when it is enabled and a member is available, or when its
        chain has `fallback_ip` and an address of the right family to answer with."""
        if run.admin and not _enabled(run.admin.get(f"pool/{pool.name}")):
            return False
        if any(self._usable(pool, m, run) for m in pool.members):
            return True
        return "fallback_ip" in pool.methods.names() and any(a.version == run.version for a in pool.fallback_ips)

    def _slow_start(self, method: str, members: list[PoolMember], run: _Run) -> tuple[list[PoolMember], str, str]:
        """Members in slow start get a smaller share under round robin and ratio.

        Round robin becomes a ratio of equal weights with the ramping members' weights
        reduced; ratio scales their weights. Other methods are not affected.
        """
        if method not in ("round_robin", "ratio"):
            return members, method, ""
        now = run.ctx.now
        weights = [self.availability.weight(m.vs, now) for m in members]
        if all(w >= 1 for w in weights):
            return members, method, ""
        scaled = []
        for m, w in zip(members, weights, strict=True):
            base = m.ratio if method == "ratio" else 1
            scaled.append(replace(m, ratio=max(1, round(base * w * _RAMP_SCALE)) if base > 0 else 0))
        ramping = ", ".join(f"{m.name} at {w:.0%}" for m, w in zip(members, weights, strict=True) if w < 1)
        return scaled, "ratio", f"slow start: {ramping}"

    def _choose(self, wideip: WideIP, run: _Run) -> tuple[_PoolOutcome, PoolRef | None]:
        subject = f"wideip {wideip.name}"
        if run.admin:
            for r in wideip.pools:
                admin = run.admin.get(f"pool/{r.name}")
                if admin is not None and admin.state != ENABLED:
                    run.steps.append(_admin_step(f"pool {r.name}", admin))
        available = [r for r in wideip.pools if self._pool_up(r.pool, run)]
        order: tuple[PoolRef, ...] = ()
        if available:
            slot = Slot(
                ("wideip", wideip.name, "pool_lb"), wideip.persistence.prefixes if wideip.persistence else _FULL
            )
            ranking = run.rank(wideip.pool_lb, available, slot)
            run.source = run.ctx.source if ranking.order else ""
            order = ranking.order  # type: ignore[assignment]
            run.scope = max(run.scope, ranking.scope)
            run.steps.append(
                Step(
                    subject,
                    "pool_lb",
                    wideip.pool_lb,
                    tuple(r.name for r in available),
                    tuple(r.name for r in order),
                    ranking.scores,
                    ranking.note,
                )
            )
        else:
            run.steps.append(Step(subject, "pool_lb", wideip.pool_lb, (), (), note="no pool has an available member"))
        for ref in order:
            outcome = self._run_pool(ref.pool, run)
            if outcome.action is not Action.NOTHING:
                return outcome, ref
        last = wideip.last_resort
        if last is not None and last not in order and _enabled(run.admin_state(f"pool/{last.name}")):
            outcome = self._run_pool(last.pool, run, last_resort=True)
            if outcome.action is not Action.NOTHING:
                return outcome, last
        return _PoolOutcome(Action.NOTHING), None

    def _run_pool(self, pool: Pool, run: _Run, last_resort: bool = False) -> _PoolOutcome:
        subject = f"pool {pool.name}" + (" (last resort)" if last_resort else "")
        members = [m for m in pool.members if self._usable(pool, m, run)]
        if run.admin:
            for m in pool.members:
                admin = run.admin.get(f"member/{pool.name}/{m.name}")
                if admin is not None and admin.state != ENABLED:
                    run.steps.append(_admin_step(subject, admin))
        names = tuple(m.name for m in members)
        for slot_name, method in pool.methods.chain():
            counted = "last_resort" if last_resort else slot_name  # (for the statistics)
            if method == "none":
                continue
            if method in ("return_to_dns", "drop_packet"):
                run.steps.append(Step(subject, slot_name, method, names, (), note="ends the search"))
                action = Action.RETURN_TO_DNS if method == "return_to_dns" else Action.DROP
                return _PoolOutcome(action, method=method)
            if method == "fallback_ip":
                ips = tuple(a for a in pool.fallback_ips if a.version == run.version)[: pool.max_answers]
                run.steps.append(
                    Step(
                        subject,
                        slot_name,
                        method,
                        tuple(map(str, pool.fallback_ips)),
                        tuple(map(str, ips)),
                        note="regardless of health",
                    )
                )
                if ips:
                    return _PoolOutcome(Action.ANSWER, (), ips, method, counted)
                continue
            if not members:
                run.steps.append(Step(subject, slot_name, method, (), (), note="no available member"))
                continue
            slot = Slot(("pool", pool.name, slot_name), pool.static_persist, pool.rtt_tolerance, pool.qos)
            candidates, impl, ramp_note = self._slow_start(method, members, run)
            ranking = run.rank(impl, candidates, slot)
            run.scope = max(run.scope, ranking.scope)
            # (a CNAME RRset holds one record, RFC 2181 10.1: whatever max_answers says)
            chosen = ranking.order[: 1 if run.rtype == TYPE_CNAME else pool.max_answers]
            note = "; ".join(n for n in (ranking.note, ramp_note) if n)
            run.steps.append(
                Step(subject, slot_name, method, names, tuple(c.name for c in chosen), ranking.scores, note)
            )
            if chosen:
                picked = tuple(c for c in chosen if isinstance(c, PoolMember))
                addresses, targets = _records(tuple(m.vs for m in picked))
                return _PoolOutcome(Action.ANSWER, picked, addresses, method, counted, targets, run.ctx.source)
        return _PoolOutcome(Action.NOTHING)


class _Layered(Mapping[str, AdminState]):
    """Operators' admin records over the config's admin states: a record, whatever its
    state (an `enable` too), wins over the config's."""

    __slots__ = ("configured", "records")

    def __init__(self, records: Mapping[str, AdminState], configured: Mapping[str, AdminState]) -> None:
        self.records = records
        self.configured = configured

    def __getitem__(self, key: str) -> AdminState:
        found = self.records.get(key)
        return self.configured[key] if found is None else found

    def __iter__(self) -> Iterator[str]:
        yield from self.records
        yield from (k for k in self.configured if k not in self.records)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __bool__(self) -> bool:  # (not by its length: that walks the records)
        return bool(self.records or self.configured)


def _records(chosen: tuple[VirtualServer, ...]) -> tuple[tuple[IPAddress, ...], tuple[RecordTarget, ...]]:
    """What *chosen* answer with: their addresses, or their targets (one type at a time)."""
    addresses = tuple(vs.address for vs in chosen if vs.address is not None)
    return addresses, tuple(vs.target for vs in chosen if vs.target is not None)


def _enabled(admin: AdminState | None) -> bool:
    return admin is None or admin.state == ENABLED


def _disabled(admin: AdminState | None) -> bool:
    return admin is not None and admin.state == DISABLED


def _admin_step(subject: str, admin: AdminState) -> Step:
    """A trace step saying what an operator's admin state took out."""
    scope = "for every client" if admin.state == DISABLED else "for new clients"
    return Step(subject, "admin", admin.state, (admin.name,), (), note=f"{admin.describe()}: out {scope}")
