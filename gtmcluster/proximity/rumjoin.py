"""What a kept beacon does (issue 36, docs/client-proximity.md): its samples become the
client subnet's figures, and its one-use id ties the LDNS that resolved it to that subnet.

The RUM listener (`gtmcluster.rum`) calls `RumJoin.keep` with the subnet a beacon came
from (the POST's source, /24 or /48: what is trusted) and the beacon (`Beacon`):

- each sample merges into ``client/<subnet>/<dc>`` (`proximity.clients.merge_sample`,
  source ``rum``, written by this node, TTL ``rum.sample_ttl``), for the DCs ``rum.targets``
  names;
- with an id, the ``rumid/<id>`` record the node that answered ``<id>.rum.<zone>`` wrote
  (`node.Node.record_rum_id`) names the LDNS: ``pop/<ldns>`` grows by the subnet
  (`proximity.clients.population_after`, from the client records held now, TTL
  ``rum.sample_ttl``) and the id is spent: a tombstone replaces its record, so a second
  beacon with it ties nothing (nor does the name asked again while the tombstone lives:
  the node does not write an id it holds spent).

The record may not be here yet: another node answered the name and its record is on its
way (replication takes a moment, the beacon often less). The id then waits, at most
``rum.max_pending_ids`` of them (the least recently seen dropped first) and for at most
``rum.id_ttl``; when its record arrives (a store listener, one dict lookup per change of
the store) the tie is made on the next reactor turn (not inside the store's notification).
An id whose record never comes expires with nothing stored.

When the client subnet a trusted resolver sent with the query (the record's ``ecs``) does
not hold the beacon's subnet, the beacon's subnet is still the one tied (the source of the
POST is what we trust); it is counted (``ecs_differs``).

`counts` says what happened to ids (the metric ``gtm_rum_ties_total{result}``), `pending`
holds those waiting (``gtm_rum_pending_ids``).
"""

from __future__ import annotations

import ipaddress
import math
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from gtmcluster.config.rum import Rum
from gtmcluster.proximity.clients import ID, IPNetwork, merge_sample, population_after
from gtmcluster.state import keys
from gtmcluster.state.record import Record
from gtmcluster.state.store import Store

#: what `counts` counts: ids tied at once, tied when their record arrived, spent already
#: (a second beacon), expired unresolved, dropped past ``rum.max_pending_ids``, and ties whose
#: ECS subnet did not hold the beacon's subnet
RESULTS = ("tied", "tied_later", "spent", "expired", "dropped", "ecs_differs")


class Beacon(Protocol):
    """A kept beacon as the listener hands it: its samples (data center -> milliseconds,
    checked: finite, 0 < ms < 60,000, known DCs) and its one-use id, if any."""

    @property
    def samples(self) -> Mapping[str, float]: ...

    @property
    def id(self) -> str | None: ...


#: a `IReactorTime.callLater`
CallLater = Callable[[float, Callable[[], object]], object]


class RumJoin:
    """Kept beacons into the store (`keep`), and their ids tied to the LDNS that asked.

    *store*: the node's; *by*: this member's name (the client records' ``by``); *settings*:
    the running config's ``rum`` (None: off, a beacon then does nothing); *call_later*: the
    reactor's, for ties made when an id's record arrives.
    """

    def __init__(self, store: Store, by: str, settings: Callable[[], Rum | None], call_later: CallLater):
        self.store = store
        self.by = by
        self.settings = settings
        self.call_later = call_later
        #: ids whose record is not here yet: id -> (the beacon's subnet, when it came), the
        #: least recent first
        self.pending: OrderedDict[str, tuple[IPNetwork, float]] = OrderedDict()
        self.counts: dict[str, int] = dict.fromkeys(RESULTS, 0)
        #: ids whose record arrived, tied on the next turn: (id, subnet)
        self._arrived: list[tuple[str, IPNetwork]] = []
        store.subscribe(self._changed)

    def keep(self, subnet: IPNetwork, beacon: Beacon) -> None:
        """Merge *beacon*'s samples as *subnet*'s figures, and tie its id (see the module)."""
        rum = self.settings()
        if rum is None:
            return
        store = self.store
        now = store.clock()
        self._prune(now, rum)
        text = str(subnet)
        for dc, ms in beacon.samples.items():
            if dc not in rum.targets or not (isinstance(ms, (int, float)) and math.isfinite(ms) and ms > 0):
                continue
            key = keys.client(text, dc)
            held = store.get(key)
            value = merge_sample(None if held is None else held.value, round(ms * 1000), "rum", self.by)
            store.put(key, value, float(rum.sample_ttl))
        ident = beacon.id
        if not ident or not ID.fullmatch(ident):
            return
        held = store.raw(keys.rum_id(ident))
        if held is not None and held.live(now):
            self._tie(ident, held.value, subnet, rum)
            return
        pending = self.pending
        pending.pop(ident, None)
        pending[ident] = (subnet, now)
        while len(pending) > rum.max_pending_ids:
            pending.popitem(last=False)
            self.counts["dropped"] += 1

    def expire(self) -> None:
        """Forget the ids waiting past ``rum.id_ttl`` (`keep` does it too, as beacons come)."""
        rum = self.settings()
        if rum is None:
            self.counts["expired"] += len(self.pending)
            self.pending.clear()
            return
        self._prune(self.store.clock(), rum)

    def _prune(self, now: float, rum: Rum) -> None:
        pending = self.pending
        while pending:
            ident, (_, since) = next(iter(pending.items()))
            if now - since < rum.id_ttl:
                return
            del pending[ident]
            self.counts["expired"] += 1

    def _changed(self, record: Record) -> None:
        """A store change: an id's record arriving ties the beacon waiting for it."""
        if not self.pending or not record.key.startswith(keys.RUMID) or record.value is None:
            return
        entry = self.pending.pop(record.key[len(keys.RUMID) :], None)
        if entry is None:
            return
        if not record.live(self.store.clock()):  # (expired or evicted: heard of as it was)
            self.counts["expired"] += 1
            return
        if not self._arrived:
            self.call_later(0, self._tie_arrived)
        self._arrived.append((record.key[len(keys.RUMID) :], entry[0]))

    def _tie_arrived(self) -> None:
        arrived, self._arrived = self._arrived, []
        rum = self.settings()
        if rum is None:
            return
        now = self.store.clock()
        for ident, subnet in arrived:
            held = self.store.raw(keys.rum_id(ident))
            if held is None or not held.live(now):
                self.counts["expired"] += 1
                continue
            self._tie(ident, held.value, subnet, rum, "tied_later")

    def _tie(self, ident: str, value: Any, subnet: IPNetwork, rum: Rum, result: str = "tied") -> None:
        """Grow the population of the LDNS *value* names by *subnet* and spend the id
        (counted as *result*); nothing when it was spent already (*value* None: its
        tombstone)."""
        if value is None:
            self.counts["spent"] += 1
            return
        store = self.store
        ldns = str(value["ldns"])
        ecs = str(value.get("ecs", ""))
        if ecs and not _within(subnet, ecs):
            self.counts["ecs_differs"] += 1
        key = keys.population(ldns)
        held = store.get(key)
        targets = tuple(rum.targets)

        def figures(name: str) -> dict[str, int]:
            out = {}
            for dc in targets:
                record = store.get(keys.client(keys.subnet_of_text(name), dc))
                if record is not None:
                    out[dc] = int(record.value["rtt"])
            return out

        population = population_after(None if held is None else held.value, subnet, figures)
        store.put(key, population, float(rum.sample_ttl))
        store.put(keys.rum_id(ident), None, float(rum.id_ttl))  # (spent: one use)
        self.counts[result] += 1


def _within(subnet: IPNetwork, ecs: str) -> bool:
    """Whether the client subnet *ecs* (``10.1.2.0_24``) holds *subnet*."""
    try:
        network = ipaddress.ip_network(keys.subnet_of_text(ecs))
    except ValueError:
        return False
    return subnet.version == network.version and subnet.subnet_of(network)  # type: ignore[arg-type]
