"""Where the events come from: what the node already notices, turned into `Event`s.

- **Servers, pools, data centers, links** (`HealthEvents`), from the health tracker's
  changes (`HealthTracker.vs_listeners`, `link_listeners`): ``vs_down``/``vs_up`` when a
  server stops or starts being healthy (its monitors, link and dependencies; an operator's
  disable or drain is no "down", as for `GtmVirtualServerDown`); ``pool_down``/``pool_up``
  when a pool's members that may take new clients fall to none or rise from none (as
  ``gtm_pool_members_available``: the server available and the member enabled);
  ``datacenter_down``/``datacenter_up`` when none of a data center's servers is healthy, or
  one is again; ``link_down``/``link_up`` when a link's verdict leaves or comes back to up.
  Each change costs the pools of the one server and a count of its data center. Their
  anchor is the newest version among the replicated verdicts on the server (and its
  link), or on the link: what every member evaluated alike.
- **Peers** (`PeerEvents`): ``peer_lost`` when a peer this node heard from leaves its
  reach (disconnected, or silent for ``heartbeat_timeout``), ``peer_back`` when one lost
  comes back; a peer never reached since this node started gives neither. The peer an
  event is about never sends it; the anchor is the minute it happened in.
- **Config** (`config_event`): ``config_applied`` and ``config_refused`` when this
  member runs or refuses a config (a bundle of the group's, or its own file), each member
  its own; anchored on the bundle's generation and digest.
- **Certificates** (`CertificateEvents`): ``cert_expiring`` once per certificate (by its
  serial) when its end is within ``alerts.cert_expiring_days``; the CA's is the group's,
  the node's and the API's the member's own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from gtmcluster.alerts.events import GROUP, OWN, Event
from gtmcluster.config.model import Config
from gtmcluster.health.flap import UP
from gtmcluster.health.status import HealthSnapshot, Observed, VsStatus, verdicts
from gtmcluster.state.admin import ENABLED
from gtmcluster.state.store import Store

Emit = Callable[[Event], object]


@dataclass(frozen=True, slots=True)
class Where:
    """What every event of one node shares."""

    node: str
    group: str
    clock: Callable[[], float]

    def event(
        self,
        kind: str,
        obj: Mapping[str, object],
        reason: str,
        anchor: str,
        scope: str = GROUP,
        excluded: frozenset[str] = frozenset(),
    ) -> Event:
        if scope == OWN:
            anchor = f"{self.node}:{anchor}"
        return Event(kind, obj, reason, self.clock(), self.node, self.group, anchor, scope, excluded)


class HealthEvents:
    """Servers', pools', data centers' and links' changes, as events."""

    def __init__(self, where: Where, store: Store, snapshot: Callable[[], HealthSnapshot], emit: Emit):
        self.where = where
        self.store = store
        self.snapshot = snapshot
        self.emit = emit
        self.configure(None)

    def configure(self, config: Config | None) -> None:
        """Take *config* (None: none yet); the pools' and data centers' states are read
        again, silently."""
        self.config = config
        self._pools_of: dict[str, list[str]] = {}
        self._pool_up: dict[str, bool] = {}
        #: per pool, the index of the member last found usable: asked first (`_up`)
        self._witness: dict[str, int] = {}
        self._healthy_in: dict[str, int] = {}
        if config is None:
            return
        snapshot = self.snapshot()
        for name, pool in config.pools.items():
            for member in pool.members:
                self._pools_of.setdefault(member.vs.name, []).append(name)
            self._pool_up[name] = self._up(name, snapshot)
        for dc in config.datacenters:
            self._healthy_in[dc] = 0
        for name, vs in config.virtual_servers.items():
            status = snapshot.vs.get(name)
            if status is not None and status.healthy:
                self._healthy_in[vs.datacenter] = self._healthy_in.get(vs.datacenter, 0) + 1

    def vs_changed(self, name: str, before: VsStatus, after: VsStatus) -> None:
        config = self.config
        vs = config.virtual_servers.get(name) if config is not None else None
        if vs is None:
            return
        anchor = ""
        if before.healthy != after.healthy:
            anchor = self._anchor("vs", name, vs.link.name if vs.link is not None else None)
            obj = {"virtual_server": name, "datacenter": vs.datacenter}
            self.emit(self.where.event("vs_up" if after.healthy else "vs_down", obj, after.reason, anchor))
            count = self._healthy_in.get(vs.datacenter, 0) + (1 if after.healthy else -1)
            self._healthy_in[vs.datacenter] = max(count, 0)
            if after.healthy and count == 1:
                reason = f"{name} is healthy again"
                self.emit(self.where.event("datacenter_up", {"datacenter": vs.datacenter}, reason, anchor))
            elif not after.healthy and count == 0:
                reason = f"none of its servers is healthy (the last: {name}, {after.reason})"
                self.emit(self.where.event("datacenter_down", {"datacenter": vs.datacenter}, reason, anchor))
        if before.available != after.available:
            snapshot = self.snapshot()
            for pool in self._pools_of.get(name, ()):
                up = self._up(pool, snapshot)
                if up == self._pool_up.get(pool):
                    continue
                self._pool_up[pool] = up
                anchor = anchor or self._anchor("vs", name, vs.link.name if vs.link is not None else None)
                reason = (
                    f"{name} may take new clients" if up else f"no member may take new clients ({name}: {after.reason})"
                )
                self.emit(self.where.event("pool_up" if up else "pool_down", {"pool": pool}, reason, anchor))

    def link_changed(self, name: str, before: Observed, after: Observed) -> None:
        if (before.state == UP) == (after.state == UP):
            return
        kind = "link_up" if after.state == UP else "link_down"
        self.emit(self.where.event(kind, {"link": name}, after.reason, self._anchor("link", name, None)))

    def _up(self, pool: str, snapshot: HealthSnapshot) -> bool:
        """Whether a member of *pool* may take new clients (``gtm_pool_members_available``
        above 0). The member last found so is asked first, then the others from there on:
        while it stays usable a change of another member costs one look, and members going
        down one after another (an outage of a big pool) are passed over once each, not
        counted again at every change."""
        assert self.config is not None
        configured = self.config.admin_defaults
        members = self.config.pools[pool].members
        start = self._witness.get(pool, 0)
        for k in range(len(members)):
            i = (start + k) % len(members)
            member = members[i]
            status = snapshot.vs.get(member.vs.name)
            if status is None or not status.available:
                continue
            key = f"member/{pool}/{member.name}"
            admin = snapshot.admin.get(key) or configured.get(key)
            if admin is None or admin.state == ENABLED:
                self._witness[pool] = i
                return True
        return False

    def _anchor(self, kind: str, name: str, link: str | None) -> str:
        """The newest version among the verdicts on *name* (and on its *link*)."""
        held = verdicts(self.store, "vs" if kind == "vs" else "link", name, None)
        if link is not None:
            held += verdicts(self.store, "link", link, None)
        newest = max(((r.wall_ms, r.logical, r.origin) for r in held), default=(0, 0, ""))
        return f"{kind}:{name}@{newest[0]}.{newest[1]}.{newest[2]}"


class PeerEvents:
    """Peers leaving this node's reach and coming back, as events."""

    def __init__(self, where: Where, reached: Callable[[], Iterable[str]], emit: Emit):
        self.where = where
        self.reached = reached
        self.emit = emit
        self._before: frozenset[str] = frozenset()
        #: peers reached at some time since the node started (only those can be lost)
        self._known: set[str] = set()

    def changed(self) -> None:
        now = frozenset(self.reached()) - {self.where.node}
        minute = str(int(self.where.clock() // 60))
        for peer in sorted(self._before - now):
            reason = f"{self.where.node} no longer reaches {peer} (disconnected, or silent past heartbeat_timeout)"
            self.emit(self.where.event("peer_lost", {"peer": peer}, reason, minute, excluded=frozenset([peer])))
        for peer in sorted(now - self._before):
            if peer in self._known:
                reason = f"{self.where.node} reaches {peer} again"
                self.emit(self.where.event("peer_back", {"peer": peer}, reason, minute, excluded=frozenset([peer])))
            self._known.add(peer)
        self._before = now


def config_event(where: Where, generation: int, digest: str, publisher: str, problems: list[str]) -> Event:
    """``config_applied`` (no *problems*) or ``config_refused`` of the config this member ran
    or refused: bundle *generation* (0: its own file) with *digest*, by *publisher*."""
    obj = {"generation": generation, "digest": digest, "publisher": publisher}
    if problems:
        reason = "; ".join(problems)
        reason = reason if len(reason) <= 1000 else reason[:999] + "…"
        return where.event("config_refused", obj, reason, f"{generation}:{digest}", OWN)
    return where.event("config_applied", obj, "the member runs it", f"{generation}:{digest}", OWN)


class CertificateEvents:
    """Certificates nearing their end, as events (one per certificate and serial)."""

    def __init__(self, where: Where, emit: Emit):
        self.where = where
        self.emit = emit
        self._told: dict[str, str] = {}

    def check(self, expiries: Iterable[tuple[str, str, float]], days: int) -> None:
        """*expiries*: (certificate, serial, not-after in unix seconds) of each in use."""
        now = self.where.clock()
        for certificate, serial, not_after in expiries:
            left = not_after - now
            if left > days * 86400 or self._told.get(certificate) == serial:
                continue
            self._told[certificate] = serial
            obj = {"certificate": certificate, "serial": serial, "not_after": int(not_after)}
            reason = f"the {certificate} certificate ends in {max(left, 0) / 86400:.1f} days"
            scope = GROUP if certificate == "ca" else OWN
            self.emit(self.where.event("cert_expiring", obj, reason, serial, scope))
