"""One node's working parts and how a query's decision reaches them.

`Node` holds the loaded config, this member's entry, the node's record store, the health
tracker (availability from the records), persistence (records too) and the balancer, and
builds the responder that answers from them. Services (`service.py`) run it; tests can use
it without a reactor.
"""

from __future__ import annotations

import ipaddress
import random
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, replace
from types import MappingProxyType

from gtmcluster.config.changes import Changes
from gtmcluster.config.model import Config, Member, WideIP
from gtmcluster.config.rum import Rum, rum_zones
from gtmcluster.dns.kept import KeptReplies
from gtmcluster.dns.responder import Responder
from gtmcluster.dns.rumnames import IdLimiter, OneUseNames
from gtmcluster.dns.transfer import PER_TURN, Transfers
from gtmcluster.dnssec.answers import zone_signing
from gtmcluster.health.index import HealthIndex, index_of
from gtmcluster.health.status import record_keys
from gtmcluster.health.tracker import HealthTracker
from gtmcluster.lb.cache import DecisionCache, Entry
from gtmcluster.lb.context import Availability, Client, PersistenceView, Rotations
from gtmcluster.lb.engine import Balancer
from gtmcluster.lb.trace import Action, Decision, tally
from gtmcluster.proximity.budget import Budget, request_ttl
from gtmcluster.proximity.clientrequests import ClientRequests
from gtmcluster.proximity.clients import ID, ClientSources
from gtmcluster.proximity.scheduler import request
from gtmcluster.proximity.table import PATH_KIND, Measurements
from gtmcluster.runtime.stats import QueryStats
from gtmcluster.state import keys, persistence
from gtmcluster.state.persistence import PersistRecord, StorePersistence
from gtmcluster.state.record import Record
from gtmcluster.state.schema import KINDS, MAX_CLIENT_TTL
from gtmcluster.state.store import Store


@dataclass(frozen=True)
class Prepared:
    """The parts of a node that depend on its config, built for a new config (see
    `Node.prepare_reload`)."""

    config: Config
    member: Member
    measurements: Measurements
    probe_budget: Budget
    balancer: Balancer
    responder: Responder
    cache: DecisionCache | None
    #: what the answer paths keep (its decisions are *cache*), the responder's
    kept: KeptReplies
    #: what differs from the running config (None: compared when switching)
    changes: Changes | None = None
    #: who hangs on whom in the config, for health evaluation (None: made when switching)
    health_index: HealthIndex | None = None


def make_balancer(
    config: Config,
    store: Store,
    availability: Availability,
    persistence: PersistenceView,
    clock: Callable[[], float],
    rng: random.Random,
    rotations: Rotations,
    ready: Callable[[], bool],
) -> Balancer:
    """The balancer of *config* over a record store: *availability* and *persistence* its
    views, the measurements (paths, RTT) read from *store* once *ready* says so. A node's, and
    `gtmcluster replay`'s (over a state snapshot)."""
    rum = config.rum
    clients = ClientSources(
        store.get,
        store.clock,
        config.proximity.sources,
        rum.min_samples if rum else 1,
        float(rum.sample_ttl if rum else MAX_CLIENT_TTL),
        config.proximity.client_probe.enabled,
    )
    datacenters = frozenset(m.datacenter for m in config.sync_group.members)
    measurements = Measurements(store, config.prober, ready, datacenters, clients)
    return Balancer(config.topology, availability, persistence, clock, rng, rotations, measurements=measurements)


class Node:
    def __init__(
        self,
        config: Config,
        name: str,
        clock: Callable[[], float],
        rng: random.Random | None = None,
        availability: Availability | None = None,
    ):
        self.clock = clock
        self.store = Store(name, clock)
        self.health = HealthTracker(config, self.store, clock, name)
        self.persistence = StorePersistence(self.store)
        self.availability = availability or self.health
        self.rng = rng or random.Random()
        #: measured methods (RTT, ...) are used only once the state is reconciled with the
        #: reachable peers (or the cold start wait is over), not from an empty table
        self._ready = False
        self.cache: DecisionCache | None = None
        #: what the answer paths keep for the running config: told of every change
        #: (`invalidate`), which ends what depended on it
        self.kept = KeptReplies()
        #: told when `ready` changes (the answering workers follow it)
        self.ready_listeners: list[Callable[[bool], object]] = []
        #: where a worker sends what its decisions ask for (see `_carry_out`); None: here
        self.delegate: Callable[[PersistRecord | None, str | None, str | None], object] | None = None
        #: where a worker sends the one-use names it answered (see `rum_id_seen`); None: here
        self.rum_delegate: Callable[[str, str, str], object] | None = None
        #: the one-use names' buckets per LDNS prefix (`dns.rumnames`): outlive a reload
        self.rum_limiter = IdLimiter(clock)
        #: when set, a persistence record a decision asks for is written only through it:
        #: it is called with the record's key and the write, and writes when it sees fit
        #: (a node still loading its snapshot first asks its peers for the client's record)
        self.before_persisting: Callable[[str, Callable[[], object]], object] | None = None
        #: how many configs this node has run (1 at start, +1 per reload) and since when
        self.generation = 0
        self.loaded_at = clock()
        self.stats = QueryStats()
        self._apply(config, name, Rotations())
        self.health.standing_listeners.append(self._standing_changed)
        self.health.wideip_listeners.append(self._wideips_changed)
        # (the kept decisions' fresh marks follow every change of what they read)
        self.store.subscribe(self._store_changed)
        self.store.bulk_listeners.append(self._store_loaded)

    def _apply(self, config: Config, name: str, rotations: Rotations) -> None:
        """Build everything that depends on the config, then switch to it in one step."""
        self._use(self._build(config, name, rotations))

    def _build(self, config: Config, name: str, rotations: Rotations) -> Prepared:
        """Everything that depends on *config*, built and not yet in use (what can fail)."""
        balancer = make_balancer(
            config, self.store, self.availability, self.persistence, self.clock, self.rng, rotations, lambda: self.ready
        )
        measurements: Measurements = balancer.measurements
        # Reuse decisions only where the health snapshot says all there is about
        # availability (tests may pass another availability, read at every query).
        cache = None
        if self.availability is self.health:
            # (a health generation grows only in the tracker's scheduled turns, which end the
            # fresh marks of the wide IPs concerned: a change not yet evaluated ends nothing)
            cache = DecisionCache(self.store.raw, self.clock, self._health_of, stats=self.stats)
        kept = KeptReplies(cache)
        responder = Responder(
            config.zones,
            config.wideips,
            self.decide,
            config.dns_server.udp_payload_size,
            self.stats,
            self.kept_entry,
            version=config.dns_server.version,
            ecs_trusted=config.dns_server.ecs_trusted,
            wideip_names=config.wideip_names,
            # (the running signers, where a zone's keys are unchanged: their kept signatures too)
            signing=zone_signing(config.zones, config.dnssec, getattr(self, "responder", None), config.wideip_names),
            # (the running transfers' IXFR journals continue; big transfers yield to the reactor)
            transfers=Transfers(
                config.zones,
                config.transfers,
                _running_transfers(self),
                PER_TURN.cooperate,
                config.dns_server.transfer.tsig_max_fudge,
            ),
            kept=kept,
            rum_names=self._one_use_names(config, name),
        )
        return Prepared(
            config,
            config.member(name),
            measurements,
            Budget(config.prober, self.clock),
            balancer,
            responder,
            cache,
            kept,
        )

    def _one_use_names(self, config: Config, name: str) -> OneUseNames | None:
        """The one-use names of *config* (``<id>.rum.<zone>``, `dns.rumnames`) under
        ``rum.zone`` (default: the first wide IP's zone) and every zone with a wide IP; None
        when ``rum`` is off or names no zone we serve."""
        rum = config.rum
        bases = rum_zones(rum, config.zones, config.wideips.values())
        if rum is None or not bases:
            return None
        answer = rum.answer
        if not answer:
            listener = config.member(name).rum
            answer = (listener.host,) if listener is not None and not listener.host.is_unspecified else ()
        return OneUseNames(bases, answer, self.rum_id_seen, self.rum_limiter, self.stats)

    def _use(self, built: Prepared) -> None:
        """Answer from *built* from now on: assignments, and the store's bounds (evictions),
        nothing that can fail half way."""
        config = built.config
        self.config = config
        self._wideips_of = config.wideips_of
        self._wideip_health: dict[str, int] = {}
        self.member: Member = built.member
        self.measurements = built.measurements
        budget = built.probe_budget
        old_budget: Budget | None = getattr(self, "probe_budget", None)
        if old_budget is not None:
            budget.unfiled = old_budget.unfiled  # a counter: it outlives a reload
        self.probe_budget = budget
        self.client_requests = ClientRequests(
            config.proximity.client_probe,
            [m.name for m in config.sync_group.members],
            built.member.name,
            self.clock,
            request_ttl(config.prober.probe_interval),
            getattr(self, "client_requests", None),
        )
        self.balancer = built.balancer
        self.responder = built.responder
        self.cache = built.cache
        self.kept = built.kept
        self.generation += 1
        self.loaded_at = self.clock()
        self._bound_store(config)

    def _bound_store(self, config: Config) -> None:
        """Bound the kinds of record DNS clients cause, alike on every member (see
        `Store.bound`): persistence records, and paths (per data center with a member)."""
        self.store.bound(persistence.KIND, config.persistence.max_records)
        datacenters = {m.datacenter for m in config.sync_group.members}
        self.store.bound(PATH_KIND, config.prober.max_ldns * max(1, len(datacenters)))
        # (client subnets from each data center, measured by browsers or probes; LDNS
        # populations; one-use ids, each member's own)
        rum = config.rum or Rum(MappingProxyType({}))
        self.store.bound("client", rum.max_subnets * max(1, len(config.datacenters)))
        self.store.bound("pop", rum.max_populations)
        self.store.bound("rumid", rum.max_pending_ids * len(config.sync_group.members))
        self.store.bound("cprobe", min(rum.max_subnets, KINDS["cprobe"].writer_limit))

    def reload(self, config: Config) -> None:
        """Answer from *config* from now on (validated already). Rotations carry over; the
        store (health verdicts, paths, persistence) is the same; health re-evaluates."""
        self.switch_to(self.prepare_reload(config))

    def prepare_reload(self, config: Config, changes: Changes | None = None) -> Prepared:
        """What answering from *config* needs, built (raising if it cannot be), not yet in
        use: `switch_to` puts it in use (see `nodeservice.NodeService.switch`). *changes*: what
        differs from the running config, when known."""
        built = self._build(config, self.member.name, self.balancer.rotations)
        return replace(built, changes=changes, health_index=index_of(config))

    def switch_to(self, prepared: Prepared) -> None:
        self._use(prepared)
        self.health.reconfigure(prepared.config, prepared.changes, prepared.health_index)

    @property
    def ready(self) -> bool:
        return self._ready

    @ready.setter
    def ready(self, value: bool) -> None:
        changed = value != self._ready
        if changed:
            self.kept.invalidate(everything=True)  # measured methods start (or stop) deciding
        self._ready = value
        if changed:
            for listener in self.ready_listeners:
                listener(value)

    def decide(self, wideip: WideIP, qtype: int, client: Client, key: Hashable = None) -> Decision:
        """Decide a wide IP answer and keep the persistence record it asks for.

        With a *key* (who asks, as the responder tells clients apart) the decision is kept
        for the same query from the same client while it holds (see `lb.cache`).
        """
        cache = self.cache if key is not None else None
        started = time.perf_counter()
        health = self._health_of(wideip.name)
        if cache is None:
            decision = self.balancer.decide(wideip, qtype, client)
        else:
            store = self.store
            reads: list[tuple[str, Record | None]] = []
            store.reads = reads
            try:
                decision = self.balancer.decide(wideip, qtype, client)
            finally:
                store.reads = None
            now = self.clock()
            kept = tuple(reads)
            cache.put((wideip.name, qtype, key), wideip.name, decision, kept, health, now)
            if decision.method == "persistence":  # the same for the client's whole network
                cache.put(self._network_key(wideip, qtype, client), wideip.name, decision, kept, health, now)
        self.stats.decisions.observe(time.perf_counter() - started)
        if decision.action is Action.ANSWER:
            self.stats.answered[tally(wideip.name, decision)] += 1
            self.stats.proximity[decision.proximity] += 1
        return self._carry_out(decision)

    def _health_of(self, wideip: str) -> int:
        """The wide IP's health generation: grows whenever a server of its pools starts or
        stops being available or serving. It reads what the tracker has evaluated so far,
        evaluating nothing: the tracker's turns keep that within `health.tracker.STALE` of
        the store for what may take a server out."""
        return self._wideip_health.get(wideip, 0)

    def _standing_changed(self, servers: Iterable[str]) -> None:
        wideips_of = self._wideips_of
        self._wideips_changed({wideip for name in servers for wideip in wideips_of.get(name, ())})

    def _wideips_changed(self, wideips: Iterable[str]) -> None:
        """The standing of a server of these wide IPs, or an admin state of them (or of
        their pools or pool members), changed: their kept decisions end, no other's."""
        names = tuple(wideips)
        generations = self._wideip_health
        for wideip in names:
            generations[wideip] = generations.get(wideip, 0) + 1
        self.kept.invalidate(wideips=names)

    def _store_changed(self, record: Record) -> None:
        self.kept.invalidate(keys=(record.key,))

    def _store_loaded(self, keys: list[str]) -> None:
        self.kept.invalidate(keys=keys)

    def cached(
        self, wideip: WideIP, qtype: int, key: Hashable, client: Callable[[], Client] | None = None
    ) -> Decision | None:
        """The decision kept for this query from the client *key*, if it still holds; with
        persistence, also the one kept for the client's network (*client* makes the client)."""
        entry = self.kept_entry(wideip, qtype, key, client)
        return None if entry is None else entry.decision

    def kept_entry(
        self, wideip: WideIP, qtype: int, key: Hashable, client: Callable[[], Client] | None = None
    ) -> Entry | None:
        """`cached`, as the kept entry (what the fast path keeps its reply with)."""
        cache = self.cache
        if cache is None:
            return None
        exact = (wideip.name, qtype, key)
        entry = cache.entry(exact)
        if entry is None and client is not None and wideip.persistence is not None:
            network = self._network_key(wideip, qtype, client())
            entry = cache.entry(network)
            if entry is not None:
                cache.alias(exact, network)
        if entry is not None:
            self._carry_out(entry.decision)
        return entry

    def _network_key(self, wideip: WideIP, qtype: int, client: Client) -> Hashable:
        """The key of persistence decisions: the record that holds the client's network."""
        persisted = self.balancer.persist_key(wideip, qtype, client)
        return ("persistence", persisted)

    def _carry_out(self, decision: Decision) -> Decision:
        """What a decision asks of the node: a persistence record kept, an LDNS or a client
        subnet probe requested (by the node itself, for a worker)."""
        if decision.persist is None and decision.probe is None and decision.probe_subnet is None:
            return decision
        if self.delegate is not None:
            self.delegate(decision.persist, decision.probe, decision.probe_subnet)
            return decision
        self.carry_out(decision.persist, decision.probe, decision.probe_subnet)
        return decision

    def carry_out(self, persist: PersistRecord | None, probe: str | None, subnet: str | None = None) -> None:
        if persist is not None:
            if self.before_persisting is None:
                self.persistence.put(persist)
            else:
                self.before_persisting(keys.persist(persist.key), lambda: self.persistence.put(persist))
        if probe is not None:
            request(self.store, self.probe_budget, probe, self.member.name)
        if subnet is not None:
            self.client_requests.file(self.store, self.probe_budget, subnet)

    def rum_id_seen(self, ident: str, ldns: str, ecs: str) -> None:
        """*ldns* asked for the one-use name of *ident* (`dns.rumnames.Seen`): recorded here,
        or by the node for a worker."""
        if self.rum_delegate is not None:
            self.rum_delegate(ident, ldns, ecs)
        else:
            self.record_rum_id(ident, ldns, ecs)

    def record_rum_id(self, ident: str, ldns: str, ecs: str) -> None:
        """Write ``rumid/<ident>`` (the LDNS, the trusted client subnet or ""), for the
        beacon with that id (`proximity.rumjoin`): not when held already the same, nor once
        a beacon used it (its tombstone is held: the id is spent)."""
        rum = self.config.rum
        if rum is None or not ID.fullmatch(ident) or not _subnet_or_empty(ecs):
            return
        try:
            ipaddress.ip_address(ldns)
        except ValueError:
            return
        key = keys.rum_id(ident)
        value = {"ldns": ldns, "ecs": ecs}
        held = self.store.raw(key)
        if held is not None and held.live(self.clock()) and (held.value is None or held.value == value):
            return
        self.store.put(key, value, float(rum.id_ttl))

    def health_keys(self) -> list[str]:
        """The keys of every record health and the load-based methods read (see
        `health.status.record_keys`)."""
        return record_keys(self.config)

    def tick(self) -> None:
        """Housekeeping, about once a second: expire records (verdicts, persistence, ...)."""
        self.store.expire()


def _subnet_or_empty(text: str) -> bool:
    """Whether *text* is "" or a subnet as a key segment (``10.1.2.0_24``)."""
    if not text:
        return True
    try:
        ipaddress.ip_network(keys.subnet_of_text(text))
    except ValueError:
        return False
    return True


def _running_transfers(node: Node) -> Transfers | None:
    """The transfers of the config *node* answers from (None while it is being built)."""
    responder: Responder | None = getattr(node, "responder", None)
    return responder.transfers if responder is not None else None
