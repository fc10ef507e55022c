"""The health half of the config: monitors, links and node-wide health settings."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from collections.abc import Mapping as MappingT
from pathlib import Path
from typing import Any

import dns.rcode
import dns.rdatatype

from gtmcluster.config.addresses import HostPort
from gtmcluster.config.links import read_capacity
from gtmcluster.config.loadsource import read_load
from gtmcluster.config.model import Health, Link, VirtualServer
from gtmcluster.config.monitoring import (
    STATUS_CLASSES,
    Check,
    DnsCheck,
    HealthRule,
    HttpCheck,
    IcmpCheck,
    LoadSource,
    Monitor,
    MonitorRule,
    TcpCheck,
    UdpCheck,
)
from gtmcluster.config.problems import KeyPath
from gtmcluster.config.reader import Mapping, Reader
from gtmcluster.dnsdata import names

MONITOR_TYPES = ("tcp", "http", "https", "udp", "dns", "icmp", "metrics")
HTTP_METHODS = ("GET", "HEAD", "POST", "OPTIONS")
DNS_RCODES = ("NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED")
DNS_QTYPES = ("A", "AAAA", "SOA", "NS", "MX", "TXT", "CNAME", "SRV", "PTR")
#: checks that connect to a port (icmp does not)
PORTED = ("tcp", "http", "https", "udp", "dns", "metrics")
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
        if kind == "tcp_half_open":
            r.error(m.at("type"), "tcp_half_open is not supported (it needs raw TCP); use tcp")
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
        check = _check(r, m, kind, resolve)
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


def _payload(r: Reader, m: Mapping, key: str, required: bool) -> bytes | None:
    """Bytes from ``KEY`` (text, sent as UTF-8) or ``KEY_hex`` (hex digits)."""
    hex_key = f"{key}_hex"
    if m.has(key) and m.has(hex_key):
        r.error(m.at(hex_key), f"give {key!r} or {hex_key!r}, not both")
        return None
    if m.has(hex_key):
        text = r.string(m.at(hex_key), m.get(hex_key))
        if text is None:
            return None
        try:
            return bytes.fromhex(text)
        except ValueError:
            r.error(m.at(hex_key), f"{text!r} is not hex digits")
            return None
    if m.has(key):
        text = r.string(m.at(key), m.get(key))
        return None if text is None else text.encode()
    if required:
        m.require(key, "the bytes to send (or KEY_hex)")
    return None


def _check(r: Reader, m: Mapping, kind: str | None, resolve: Callable[[str], Path]) -> Check | None:
    if kind == "tcp":
        send = _payload(r, m, "send", required=False)
        expect = _payload(r, m, "expect", required=False)
        reject = _payload(r, m, "reject", required=False)
        if reject is not None and expect is not None:
            r.error(m.at("reject_hex" if m.has("reject_hex") else "reject"), "give 'expect' or 'reject', not both")
            return None
        return TcpCheck(send, expect, reject)
    if kind == "icmp":
        return IcmpCheck()
    if kind == "udp":
        send = _payload(r, m, "send", required=True)
        expect = _payload(r, m, "expect", required=False)
        no_reply = m.string("no_reply", "down", ("down", "up"))
        return None if send is None or no_reply is None else UdpCheck(send, expect, no_reply == "up")
    if kind in ("http", "https"):
        return _http(r, m, kind == "https", resolve)
    if kind == "metrics":
        path = m.string("path", "/metrics.json")
        if path is not None and not path.startswith("/"):
            r.error(m.at("path"), f"{path!r} must start with '/'")
        host = m.string("host", None) if m.has("host") else None
        cap = m.integer("max_response_bytes", 65536, 64, 16 * 1024 * 1024)
        if path is None or cap is None:
            return None
        # the first form of a load source: the same as type http with load {format: json}
        return HttpCheck(False, "GET", path, host, (200,), max_response_bytes=cap, load=LoadSource("json"))
    if kind == "dns":
        query_name = r.string(m.at("query_name"), m.require("query_name", "the name to ask the server for"))
        if query_name is not None:
            try:
                names.from_text(query_name)
            except names.BadName as e:
                r.error(m.at("query_name"), str(e))
                query_name = None
        qtype = m.string("query_type", "A", DNS_QTYPES)
        rcode = m.string("expect_rcode", "NOERROR", DNS_RCODES)
        address = r.address(m.at("expect_address"), m.get("expect_address")) if m.has("expect_address") else None
        if query_name is None or qtype is None or rcode is None:
            return None
        return DnsCheck(query_name, int(dns.rdatatype.from_text(qtype)), int(dns.rcode.from_text(rcode)), address)
    return None


def _http(r: Reader, m: Mapping, tls: bool, resolve: Callable[[str], Path]) -> HttpCheck | None:
    method = m.string("method", "GET", HTTP_METHODS)
    path = m.string("path", "/")
    if path is not None and not path.startswith("/"):
        r.error(m.at("path"), f"{path!r} must start with '/'")
    host = m.string("host", None) if m.has("host") else None
    statuses: list[int] = []
    raw = m.get("expect_status", [200])
    for i, s in enumerate(r.list(m.at("expect_status"), raw, allow_scalar=True) or []):
        at: KeyPath = (*m.at("expect_status"), i) if isinstance(raw, list) else m.at("expect_status")
        if isinstance(s, str):  # a class: 2xx
            if s in STATUS_CLASSES:
                statuses.extend(c for c in STATUS_CLASSES[s] if c not in statuses)
            else:
                r.error(at, f"{s!r} is neither a status (100 to 599) nor a class ({', '.join(STATUS_CLASSES)})")
            continue
        code = r.integer(at, s, 100, 599)
        if code is not None and code not in statuses:
            statuses.append(code)
    body = m.string("expect_body", None) if m.has("expect_body") else None
    regex = _regex(r, m, "expect_body_regex")
    reject = _regex(r, m, "reject_body_regex")
    cap = m.integer("max_response_bytes", 65536, 64, 16 * 1024 * 1024)
    verify = True
    ca_file = None
    if tls:
        verify = m.boolean("verify_tls", True)
        if m.has("ca_file"):
            text = r.string(m.at("ca_file"), m.get("ca_file"))
            if text is not None:
                ca_file = resolve(text)
                if not ca_file.is_file():
                    r.error(m.at("ca_file"), f"{ca_file} is not a readable file")
    load = read_load(r, m) if m.has("load") else None
    if method is None or path is None or cap is None or (m.has("load") and load is None):
        return None
    return HttpCheck(tls, method, path, host, tuple(statuses), body, regex, cap, verify, ca_file, load, reject)


def _regex(r: Reader, m: Mapping, key: str) -> str | None:
    """A regular expression at *key* (None without one); a bad one is a problem."""
    regex = m.string(key, None) if m.has(key) else None
    if regex is not None:
        try:
            re.compile(regex)
        except re.error as e:
            r.error(m.at(key), f"bad regular expression: {e}")
    return regex


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
        needs_port = monitor is not None and monitor.type in PORTED and monitor.port is None
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
