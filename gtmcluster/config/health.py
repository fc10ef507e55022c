"""The health half of the config: monitors (their common keys; each kind's own are read by
its `config.monitorkinds.MonitorKind`), links and node-wide health settings."""

from __future__ import annotations

import math
from collections.abc import Callable
from collections.abc import Mapping as MappingT
from pathlib import Path
from typing import Any

from gtmcluster.config.addresses import HostPort
from gtmcluster.config.links import read_capacity
from gtmcluster.config.model import Health, Link, VirtualServer
from gtmcluster.config.monitoring import HealthRule, Monitor, MonitorRule
from gtmcluster.config.monitorkinds import KINDS, UNSUPPORTED
from gtmcluster.config.problems import KeyPath
from gtmcluster.config.reader import Mapping, Reader

MONITOR_TYPES = tuple(KINDS)
#: the checks in flight if every target hung until its timeout, times this, must fit in
#: health.max_in_flight: a slot is held a little longer than the timeout, and rounds
#: delayed by a busy reactor catch up (more at once for a moment)
IN_FLIGHT_HEADROOM = 1.25


def read_monitors(r: Reader, raw: Any, resolve: Callable[[str], Path]) -> dict[str, Monitor]:
    out: dict[str, Monitor] = {}
    section = r.mapping(("monitors",), raw, "a mapping of monitor names to settings")
    if section is None:
        return out
    for name, value in section.items():
        path = section.at(name)
        m = r.mapping(path, value)
        if r.name(path, name, "monitor name") is None or m is None:
            r.broken.add(("monitor", name))
            continue
        before = len(r.problems.found)
        kind = m.require("type", f"one of {', '.join(MONITOR_TYPES)}")
        if isinstance(kind, str) and kind in UNSUPPORTED:
            r.error(m.at("type"), UNSUPPORTED[kind])
            kind = None
        else:
            kind = r.string(m.at("type"), kind, choices=MONITOR_TYPES)
        interval = m.number("interval", 5.0, 0.1, 86400)
        timeout = m.number("timeout", 2.0, 0.01, 3600)
        up_after = m.integer("up_after", 2, 1, 100)
        down_after = m.integer("down_after", 3, 1, 100)
        rule = _rule(r, m)
        unknown_as = m.string("unknown_as", "up", ("up", "down"))
        port = m.integer("port", None, 1, 65535) if m.has("port") else None
        check = KINDS[kind].read(r, m, resolve) if kind is not None else None
        m.done()
        if interval is not None and timeout is not None and timeout > interval:
            r.error(m.at("timeout"), f"{timeout:g} is longer than the interval ({interval:g}): checks would overlap")
        if len(r.problems.found) > before or None in (kind, interval, timeout, up_after, down_after, check):
            r.broken.add(("monitor", name))
            continue
        assert kind and interval and timeout and up_after and down_after and check is not None and rule
        out[name] = Monitor(name, kind, interval, timeout, up_after, down_after, check, rule, unknown_as == "up", port)
    return out


def _rule(r: Reader, m: Mapping) -> HealthRule | None:
    """``rule: any`` (default), ``rule: all`` or ``rule: {quorum: N}``."""
    if not m.has("rule"):
        return HealthRule("any")
    value = m.get("rule")
    if isinstance(value, dict):
        q = Mapping(r, m.at("rule"), value)
        quorum = q.integer("quorum", None, 1, 1000) if q.has("quorum") else q.require("quorum", "how many nodes")
        q.done()
        return HealthRule("quorum", quorum) if isinstance(quorum, int) else None
    kind = r.string(m.at("rule"), value, choices=("any", "all"))
    return None if kind is None else HealthRule(kind)


def read_vs_monitors(
    r: Reader, vs: Mapping, monitors: MappingT[str, Monitor]
) -> tuple[tuple[Monitor, ...], MonitorRule]:
    """A virtual server's ``monitor`` (one name or a list of names) and ``monitor_rule``
    (``all``, the default, or ``{at_least: N}``). Problems are reported; what is usable is
    returned (a name that is not, left out)."""
    if not vs.has("monitor"):
        return (), _monitor_rule(r, vs, 0)
    raw = vs.get("monitor")
    names = r.list(vs.at("monitor"), raw, "a monitor name or a list of them", allow_scalar=True) or []
    if isinstance(raw, list) and not raw:
        r.error(vs.at("monitor"), "an empty list: give at least one monitor name, or leave 'monitor' out")
    found: list[Monitor] = []
    for i, value in enumerate(names):
        at: KeyPath = (*vs.at("monitor"), i) if isinstance(raw, list) else vs.at("monitor")
        name = r.known(at, value, "monitor", monitors, "monitor")
        if name is None:
            continue
        if any(m.name == name for m in found):
            r.error(at, f"monitor {name!r} is given twice")
            continue
        found.append(monitors[name])
    rule = _monitor_rule(r, vs, len(names))
    if len(found) > 1 and len({(m.rule, m.unknown_as_up) for m in found}) > 1:
        described = ", ".join(
            f"{m.name} (rule {m.rule}, unknown_as {'up' if m.unknown_as_up else 'down'})" for m in found
        )
        r.error(
            vs.at("monitor"),
            f"its monitors combine the GTM nodes' verdicts differently: {described}; "
            "give them the same 'rule' and 'unknown_as'",
        )
    return tuple(found), rule


def _monitor_rule(r: Reader, vs: Mapping, count: int) -> MonitorRule:
    """``monitor_rule: all`` or ``monitor_rule: {at_least: N}``, 1 <= N <= *count*."""
    if not vs.has("monitor_rule"):
        return MonitorRule()
    at = vs.at("monitor_rule")
    value = vs.get("monitor_rule")
    if count == 0:
        r.error(at, "a monitor rule needs monitors: give 'monitor' a list of names")
        return MonitorRule()
    if not isinstance(value, dict):
        r.string(at, value, choices=("all",))
        return MonitorRule()
    m = Mapping(r, at, value)
    n = m.integer("at_least", None, 1, 1000) if m.has("at_least") else m.require("at_least", "how many monitors")
    m.done()
    if not isinstance(n, int):
        return MonitorRule()
    if n > count:
        r.error(m.at("at_least"), f"{n} is more than the {count} monitor{'s' if count > 1 else ''} given")
        return MonitorRule()
    return MonitorRule(n)


def read_links(
    r: Reader, raw: Any, datacenter: Callable[[KeyPath, Any], str | None], monitors: dict[str, Monitor]
) -> dict[str, Link]:
    out: dict[str, Link] = {}
    section = r.mapping(("links",), raw, "a mapping of link names to {datacenter, targets, monitor}")
    if section is None:
        return out
    for name, value in section.items():
        path = section.at(name)
        m = r.mapping(path, value)
        if r.name(path, name, "link name") is None or m is None:
            r.broken.add(("link", name))
            continue
        dc = datacenter(m.at("datacenter"), m.require("datacenter", "the data center this link serves"))
        monitor_name = r.known(
            m.at("monitor"), m.require("monitor", "how to check its targets"), "monitor", monitors, "monitor"
        )
        monitor = monitors.get(monitor_name or "")
        needs_port = monitor is not None and KINDS[monitor.type].ported and monitor.port is None
        targets: list[HostPort] = []
        raw_targets = r.list(m.at("targets"), m.require("targets", "addresses reached through the link"))
        if raw_targets is not None and not raw_targets:
            r.error(m.at("targets"), "a link needs at least one target")
        for i, t in enumerate(raw_targets or []):
            parsed = r.hostport((*m.at("targets"), i), t, None if needs_port else 0)
            if parsed is not None:
                targets.append(HostPort(*parsed))
        bandwidth, cost, limit, traffic, capacity_ok = read_capacity(r, m)
        m.done()
        if dc is None or monitor is None or not targets or len(targets) != len(raw_targets or []) or not capacity_ok:
            r.broken.add(("link", name))
            continue
        out[name] = Link(name, dc, tuple(targets), monitor, bandwidth, cost, limit, traffic)
    return out


def read_health(r: Reader, raw: Any) -> Health:
    if raw is None:
        return Health()
    m = r.mapping(("health",), raw, "a mapping {max_in_flight, max_checks_per_second}")
    if m is None:
        return Health()
    default = Health()
    in_flight = m.integer("max_in_flight", default.max_in_flight, 1, 100000)
    rate = m.number("max_checks_per_second", default.max_checks_per_second, 1, 100000)
    m.done()
    return Health(in_flight or default.max_in_flight, rate or default.max_checks_per_second)


def check_budget(r: Reader, settings: Health, vss: dict[str, VirtualServer], links: dict[str, Link]) -> None:
    """The monitors must fit the node's budget: their checks a second within
    `max_checks_per_second`, and the checks that would run at once if every target hung
    until its timeout, with `IN_FLIGHT_HEADROOM`, within `max_in_flight`. Otherwise checks
    would be skipped round after round."""
    rate = 0.0
    hanging = 0.0
    monitored = 0
    for vs in vss.values():
        monitored += bool(vs.monitors)
        for m in vs.monitors:  # each monitor of a server is a check of its own
            rate += 1 / m.interval
            hanging += m.timeout / m.interval
    targets = 0
    for link in links.values():
        n = len(link.targets)
        targets += n
        rate += n / link.monitor.interval
        hanging += n * link.monitor.timeout / link.monitor.interval
    what = f"{monitored} monitored virtual servers" + (f" and {targets} link targets" if links else "")
    if rate > settings.max_checks_per_second * (1 + 1e-9):
        r.error(
            ("health", "max_checks_per_second"),
            f"the monitors need {amount(rate)} checks a second ({what}), more than "
            f"{settings.max_checks_per_second:g}: raise it (see bench/checker.py for what a node "
            "sustains) or lengthen the intervals",
        )
    at_once = math.ceil(hanging - 1e-9)
    needed = math.ceil(hanging * IN_FLIGHT_HEADROOM - 1e-9)
    if needed > settings.max_in_flight:
        r.error(
            ("health", "max_in_flight"),
            f"if every target hung until its timeout, {at_once:,} checks would run at once ({what}); "
            f"with a quarter more to spare it must be at least {needed:,}, not {settings.max_in_flight}: "
            "raise it (each check in flight holds a socket) or shorten the timeouts",
        )


def amount(value: float) -> str:
    """``1000.2`` -> ``"1,000.2"``, ``6.0`` -> ``"6"``."""
    return f"{value:,.1f}".removesuffix(".0")
