"""From records to availability: a pure evaluation of every virtual server and link.

For each virtual server with a monitor, the verdicts of the observers (records
``obs/vs/<vs>/<observer>``: this node's, and those of the peers it is connected to; a
disconnected peer's last word is stale and does not count) combine by the monitor's rule: `any` observer seeing it up,
`all` of the reporting observers, or at least `quorum` of them; with no verdict yet it is
`unknown`, counted as the monitor's `unknown_as`. A server without a monitor is up. Then:

- its link (if any) must be up (a link's verdicts combine the same way);
- every server it `depends_on` must be serving;
- a `held` record (manual resume after going down) keeps it out;
- its admin state (an ``admin/vs/<vs>`` record, else the config's) decides the rest:
  `disabled` takes it out, `drain` keeps it only for clients held by persistence.

`serving` means it may answer clients held by persistence; `available` means it may also
take new ones. The result is an immutable `HealthSnapshot` the answer path reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gtmcluster.config.model import Config, HealthRule, Monitor, VirtualServer
from gtmcluster.health.flap import DOWN, UNKNOWN, UP
from gtmcluster.state.store import Record, Store


@dataclass(frozen=True, slots=True)
class Observed:
    """The observers' verdicts on one server or link, combined."""

    state: str  # up | down | unknown
    ups: tuple[str, ...] = ()  # observers that see it up
    downs: tuple[str, ...] = ()  # observers that see it down
    reason: str = ""

    def counted_up(self, monitor: Monitor) -> bool:
        return self.state == UP or (self.state == UNKNOWN and monitor.unknown_as_up)


def combine(rule: HealthRule, records: Iterable[Record]) -> Observed:
    ups: list[str] = []
    downs: list[str] = []
    reasons: list[str] = []
    for record in sorted(records, key=lambda r: r.origin):
        value = record.value
        (ups if value.get("up") else downs).append(record.origin)
        if not value.get("up"):
            reasons.append(f"{record.origin}: {value.get('reason', 'down')}")
    if not ups and not downs:
        return Observed(UNKNOWN, reason="no verdict yet")
    if rule.kind == "any":
        up = bool(ups)
    elif rule.kind == "all":
        up = not downs
    else:
        up = len(ups) >= rule.quorum
    if up:
        reason = f"up for {', '.join(ups)}"
    else:
        reason = "; ".join(reasons) or f"up for {len(ups)} of {rule.quorum} needed"
    return Observed(UP if up else DOWN, tuple(ups), tuple(downs), reason)


@dataclass(frozen=True, slots=True)
class VsStatus:
    name: str
    health: str  # the monitor's verdicts combined: up | down | unknown
    admin: str  # enabled | disabled | drain
    held: bool  # kept out for manual resume
    healthy: bool  # monitor, link and dependencies say it works (admin state aside)
    serving: bool  # may answer clients held by persistence
    available: bool  # may take new clients
    reason: str  # why it is not available, or what makes it up


@dataclass(frozen=True)
class HealthSnapshot:
    """Availability of every virtual server at one moment, plus slow-start ramps."""

    vs: Mapping[str, VsStatus] = field(default_factory=dict)
    links: Mapping[str, Observed] = field(default_factory=dict)
    #: virtual server -> (ramp start, ramp end) for slow start
    ramps: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def vs_up(self, vs: VirtualServer) -> bool:
        status = self.vs.get(vs.name)
        return status.available if status is not None else vs.admin_state == "enabled"

    def vs_serving(self, vs: VirtualServer) -> bool:
        status = self.vs.get(vs.name)
        return status.serving if status is not None else vs.admin_state != "disabled"

    def weight(self, vs: VirtualServer, now: float) -> float:
        """Slow start: the share of a returning server, rising in tenths to 1."""
        ramp = self.ramps.get(vs.name)
        if ramp is None or now >= ramp[1]:
            return 1.0
        start, end = ramp
        steps = int(10 * (now - start) / (end - start)) + 1
        return max(0.1, min(1.0, steps / 10))


def evaluate(
    config: Config, store: Store, observers: frozenset[str] | None = None
) -> tuple[dict[str, VsStatus], dict[str, Observed]]:
    """Availability of every server and link. *observers*: the nodes whose verdicts count
    (this node and the peers it is connected to); None counts every verdict held."""

    def verdicts(prefix: str) -> list[Record]:
        return [r for r in store.scan(prefix) if observers is None or r.origin in observers]

    links = {name: combine(link.monitor.rule, verdicts(f"obs/link/{name}/")) for name, link in config.links.items()}
    out: dict[str, VsStatus] = {}

    def status(vs: VirtualServer) -> VsStatus:
        if vs.name in out:
            return out[vs.name]
        observed = combine(vs.monitor.rule, verdicts(f"obs/vs/{vs.name}/")) if vs.monitor else Observed(UP)
        problems = []
        if vs.monitor is not None and not observed.counted_up(vs.monitor):
            problems.append(f"monitor {vs.monitor.name}: {observed.reason}")
        if vs.link is not None:
            link = links[vs.link.name]
            if not link.counted_up(vs.link.monitor):
                problems.append(f"link {vs.link.name} down: {link.reason}")
        for dep in vs.depends_on:
            dep_status = status(config.virtual_servers[dep])
            if not dep_status.serving:
                problems.append(f"depends on {dep}, which is out ({dep_status.reason})")
        healthy = not problems
        held = store.get(f"held/vs/{vs.name}")
        if held is not None:
            problems.append(f"held for manual resume since it went down ({held.value.get('reason', '')})")
        admin_record = store.get(f"admin/vs/{vs.name}")
        admin = admin_record.value.get("state", vs.admin_state) if admin_record else vs.admin_state
        if admin == "disabled":
            problems.append("disabled by an operator" if admin_record else "disabled in the config")
        serving = not problems
        available = serving and admin == "enabled"
        if serving and not available:
            reason = "draining: only clients held by persistence"
        elif problems:
            reason = "; ".join(problems)
        else:
            reason = observed.reason if vs.monitor else "no monitor"
        result = VsStatus(vs.name, observed.state, admin, held is not None, healthy, serving, available, reason)
        out[vs.name] = result
        return result

    for vs in config.virtual_servers.values():
        status(vs)
    return out, links


def snapshot(
    config: Config,
    store: Store,
    ramps: Mapping[str, tuple[float, float]] | None = None,
    observers: frozenset[str] | None = None,
) -> HealthSnapshot:
    vs, links = evaluate(config, store, observers)
    return HealthSnapshot(MappingProxyType(vs), MappingProxyType(links), MappingProxyType(dict(ramps or {})))


__all__ = ["DOWN", "UNKNOWN", "UP", "HealthSnapshot", "Observed", "VsStatus", "combine", "evaluate", "snapshot"]
