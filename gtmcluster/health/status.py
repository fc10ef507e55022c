"""From records to availability: pure evaluations of one virtual server or link, or of all.

For each virtual server with a monitor, the verdicts of the observers (records
``obs/vs/<vs>/<observer>``: this node's, and those of the peers it is connected to and has
heard from within `heartbeat_timeout`; a disconnected or silent peer's last word is stale
and does not count) combine by the monitor's rule: `any` observer seeing it up,
`all` of the reporting observers, or at least `quorum` of them; with no verdict yet it is
`unknown`, counted as the monitor's `unknown_as`. A server without a monitor is up. Then:

- its link (if any) must be up (a link's verdicts combine the same way), and under its
  `max_utilisation` (its ``traffic/link/<link>`` figure: `lb.linkload`) to take new
  clients: over it, the server drains (clients held by persistence keep it);
- every server it `depends_on` must be serving;
- a `held` record (manual resume after going down) keeps it out;
- its admin state (an ``admin/vs/<vs>`` record, else the config's), made more restrictive
  by its data center's (``admin/datacenter/<dc>``) and its link's (``admin/link/<link>``),
  decides the rest: `disabled` takes it out, `drain` keeps it only for clients held by
  persistence (see `state.admin`; pools, pool members and wide IPs are the balancer's).

`serving` means it may answer clients held by persistence; `available` means it may also
take new ones. A verdict, hold or admin record whose value has another shape (written by a
newer version, or a bad peer) counts for nothing; it never stops the evaluation.

Each subject reads only its own records (`Store.children`), so evaluating one server costs
the same whatever the size of the config and the store: the tracker (`health.tracker`)
re-evaluates just the subjects whose records changed. `evaluate` does them all, as the
reference the tracker must always equal. The answer path reads a `HealthSnapshot`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from gtmcluster.config.model import Config, Link, VirtualServer
from gtmcluster.config.monitoring import HealthRule
from gtmcluster.health.flap import DOWN, UNKNOWN, UP
from gtmcluster.lb import linkload
from gtmcluster.state import admin as admin_mod
from gtmcluster.state import keys
from gtmcluster.state.record import Record
from gtmcluster.state.store import Store


@dataclass(frozen=True, slots=True)
class Observed:
    """The observers' verdicts on one server or link, combined."""

    state: str  # up | down | unknown
    ups: tuple[str, ...] = ()  # observers that see it up
    downs: tuple[str, ...] = ()  # observers that see it down
    reason: str = ""
    #: a link over its max_utilisation: why it takes no new clients ("" when it may)
    busy: str = ""

    def counted_up(self, unknown_as_up: bool) -> bool:
        """Up, or no verdict yet and *unknown_as_up* (the monitor's `unknown_as`, or for a
        virtual server `VirtualServer.unknown_as_up`)."""
        return self.state == UP or (self.state == UNKNOWN and unknown_as_up)


def combine(rule: HealthRule, records: Iterable[Record], detail: bool = False) -> Observed:
    """The verdicts *records* combined by *rule*. The reason names the observers that see
    it down, with theirs; when up, those that see it up, with theirs only if *detail* (a
    server with several monitors: each one's verdict, `health.monitors`)."""
    ups: list[str] = []
    downs: list[str] = []
    reasons: list[str] = []
    up_reasons: dict[str, list[str]] = {}
    for record in sorted(records, key=_origin):
        value = record.value
        if type(value) is not dict and not isinstance(value, Mapping):
            continue  # not a verdict this version understands: it counts for nothing
        if value.get("up"):
            ups.append(record.origin)
            if detail:
                up_reasons.setdefault(str(value.get("reason", "up")), []).append(record.origin)
        else:
            downs.append(record.origin)
            reasons.append(f"{record.origin}: {value.get('reason', 'down')}")
    if not ups and not downs:
        return NO_VERDICT
    if rule.kind == "any":
        up = bool(ups)
    elif rule.kind == "all":
        up = not downs
    else:
        up = len(ups) >= rule.quorum
    if up and detail:
        reason = "up for " + "; ".join(f"{', '.join(who)} ({why})" for why, who in up_reasons.items())
    elif up:
        reason = f"up for {', '.join(ups)}"
    else:
        reason = "; ".join(reasons) or f"up for {len(ups)} of {rule.quorum} needed"
    return Observed(UP if up else DOWN, tuple(ups), tuple(downs), reason)


_origin = operator.attrgetter("origin")
#: no verdict (yet): a server or link before its first verdict
NO_VERDICT = Observed(UNKNOWN, reason="no verdict yet")


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
    #: operators' admin states of pools, pool members and wide IPs, by "<level>/<name>"
    #: (those of data centers, links and servers are in each server's status)
    admin: Mapping[str, admin_mod.AdminState] = field(default_factory=dict)

    def vs_up(self, vs: VirtualServer) -> bool:
        status = self.vs.get(vs.name)
        return status.available if status is not None else vs.admin_state == "enabled"

    def vs_serving(self, vs: VirtualServer) -> bool:
        status = self.vs.get(vs.name)
        return status.serving if status is not None else vs.admin_state != "disabled"

    def admin_states(self) -> Mapping[str, admin_mod.AdminState]:
        return self.admin

    def weight(self, vs: VirtualServer, now: float) -> float:
        """Slow start: the share of a returning server, rising in tenths to 1."""
        ramp = self.ramps.get(vs.name)
        if ramp is None or now >= ramp[1]:
            return 1.0
        start, end = ramp
        steps = int(10 * (now - start) / (end - start)) + 1
        return max(0.1, min(1.0, steps / 10))


def verdicts(store: Store, kind: keys.Subject, name: str, observers: frozenset[str] | None) -> list[Record]:
    """The verdicts on one server (*kind* "vs") or link ("link") that count: those of
    *observers*, or all held when None. Reads that subject's records only."""
    held = store.children(keys.observations(kind, name))
    return held if observers is None else [r for r in held if r.origin in observers]


def link_status(link: Link, store: Store, observers: frozenset[str] | None) -> Observed:
    observed = combine(link.monitor.rule, verdicts(store, "link", link.name, observers))
    if link.max_utilisation is None:
        return observed
    record = store.get(keys.traffic(link.name))
    busy = linkload.over_limit(link, linkload.from_value(record.value) if record is not None else None)
    return replace(observed, busy=busy) if busy else observed


def vs_status(
    vs: VirtualServer,
    store: Store,
    links: Mapping[str, Observed],
    dependency: Callable[[str], VsStatus],
    observers: frozenset[str] | None,
) -> VsStatus:
    """One server's availability from its records, its link's state (*links*) and the
    status of each server it depends on (*dependency*)."""
    monitors = vs.monitors
    if monitors:
        observed = combine(vs.health_rule, verdicts(store, "vs", vs.name, observers), len(monitors) > 1)
    else:
        observed = Observed(UP)
    problems = []
    if monitors and not observed.counted_up(vs.unknown_as_up):
        problems.append(f"{_monitors_named(vs)}: {observed.reason}")
    busy = ""
    if vs.link is not None:
        link = links.get(vs.link.name, NO_VERDICT)
        if not link.counted_up(vs.link.monitor.unknown_as_up):
            problems.append(f"link {vs.link.name} down: {link.reason}")
        busy = link.busy
    for dep in vs.depends_on:
        dep_status = dependency(dep)
        if not dep_status.serving:
            problems.append(f"depends on {dep}, which is out ({dep_status.reason})")
    healthy = not problems
    held = store.get(keys.held(vs.name))
    if held is not None:
        why = held.value.get("reason", "") if isinstance(held.value, Mapping) else ""
        problems.append(f"held for manual resume since it went down ({why})")
    own = _admin_of(store, "vs", vs.name)  # None: not one this version understands, the config's holds
    admin = own.state if own is not None else vs.admin_state
    above = admin_mod.worst(
        [
            s
            for s in (
                _admin_of(store, "datacenter", vs.datacenter),
                _admin_of(store, "link", vs.link.name) if vs.link is not None else None,
            )
            if s is not None
        ]
    )
    if above is not None and admin_mod.RANK[above.state] > admin_mod.RANK[admin]:
        admin = above.state
    else:
        above = None
    if admin == "disabled":
        if above is not None:
            problems.append(above.describe())
        elif own is not None:
            detail = ": ".join(t for t in (own.by, own.reason) if t)
            problems.append("disabled by an operator" + (f" ({detail})" if detail else ""))
        else:
            problems.append("disabled in the config")
    serving = not problems
    available = serving and admin == "enabled" and not busy
    if serving and busy and admin != "disabled":
        reason = f"{busy}: only clients held by persistence"
    elif serving and not available:
        why = f" ({above.describe()})" if above is not None else ""
        reason = f"draining: only clients held by persistence{why}"
    elif problems:
        reason = "; ".join(problems)
    else:
        reason = observed.reason if monitors else "no monitor"
    return VsStatus(vs.name, observed.state, admin, held is not None, healthy, serving, available, reason)


def _monitors_named(vs: VirtualServer) -> str:
    """``monitor NAME``, or ``monitors A, B (rule all)``."""
    if len(vs.monitors) == 1:
        return f"monitor {vs.monitors[0].name}"
    return f"monitors {', '.join(m.name for m in vs.monitors)} (rule {vs.monitor_rule})"


def _admin_of(store: Store, level: str, name: str) -> admin_mod.AdminState | None:
    record = store.get(keys.admin(level, name))
    return None if record is None else admin_mod.from_value(level, name, record.value)


#: the admin levels the balancer applies (kept in `HealthSnapshot.admin`)
BALANCER_LEVELS = ("pool", "member", "wideip")


def balancer_admin(store: Store) -> dict[str, admin_mod.AdminState]:
    """The admin states of pools, pool members and wide IPs held, by "<level>/<name>"."""
    out = {}
    for record in store.scan(keys.ADMIN):
        parsed = admin_mod.parse_key(record.key)
        if parsed is not None and parsed[0] in BALANCER_LEVELS:
            state = admin_mod.from_value(parsed[0], parsed[1], record.value)
            if state is not None:
                out[f"{parsed[0]}/{parsed[1]}"] = state
    return out


def record_keys(config: Config) -> list[str]:
    """The keys of every record the evaluation (and the load-based methods) may read for
    *config*: each member's verdict on each server and link (as `health.checker` writes
    them), admin and held states, load figures."""
    members = [m.name for m in config.sync_group.members]
    out: list[str] = []
    for vs in config.virtual_servers:
        out += [keys.observation("vs", vs, member) for member in members]
        out += [keys.admin("vs", vs), keys.held(vs), keys.load_figures(vs)]
    for link in config.links:
        out += [keys.observation("link", link, member) for member in members]
        out += [keys.admin("link", link), keys.traffic(link)]
    out += [keys.admin("datacenter", dc) for dc in config.datacenters]
    for pool in config.pools.values():
        out.append(keys.admin("pool", pool.name))
        out += [keys.admin("member", f"{pool.name}/{m.name}") for m in pool.members]
    out += [keys.admin("wideip", w.name) for w in config.wideips.values()]
    return out


def evaluate(
    config: Config, store: Store, observers: frozenset[str] | None = None
) -> tuple[dict[str, VsStatus], dict[str, Observed]]:
    """Availability of every server and link, evaluated whole. *observers*: the nodes whose
    verdicts count (this node and the peers it is connected to); None counts every verdict
    held. (The tracker evaluates only what changed; this is the reference it must equal.)"""
    links = {name: link_status(link, store, observers) for name, link in config.links.items()}
    evaluation = _Evaluation(config, store, links, observers)
    for name in config.virtual_servers:
        evaluation.status(name)
    return evaluation.out, links


class _Evaluation:
    """Servers evaluated once each, those they depend on first. (An object, not a nested
    function calling itself by name: that is a reference cycle, which a freeze of the heap
    keeps for good: `gtmcluster.runtime.heap`.)"""

    def __init__(
        self, config: Config, store: Store, links: dict[str, Observed], observers: frozenset[str] | None
    ) -> None:
        self.config = config
        self.store = store
        self.links = links
        self.observers = observers
        self.out: dict[str, VsStatus] = {}

    def status(self, name: str) -> VsStatus:
        result = self.out.get(name)
        if result is None:
            vs = self.config.virtual_servers[name]
            result = self.out[name] = vs_status(vs, self.store, self.links, self.status, self.observers)
        return result


def snapshot(
    config: Config,
    store: Store,
    ramps: Mapping[str, tuple[float, float]] | None = None,
    observers: frozenset[str] | None = None,
) -> HealthSnapshot:
    vs, links = evaluate(config, store, observers)
    return HealthSnapshot(
        MappingProxyType(vs),
        MappingProxyType(links),
        MappingProxyType(dict(ramps or {})),
        MappingProxyType(balancer_admin(store)),
    )


__all__ = [
    "BALANCER_LEVELS",
    "DOWN",
    "UNKNOWN",
    "UP",
    "HealthSnapshot",
    "Observed",
    "VsStatus",
    "balancer_admin",
    "combine",
    "evaluate",
    "link_status",
    "record_keys",
    "snapshot",
    "verdicts",
    "vs_status",
]
