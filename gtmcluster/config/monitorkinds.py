"""The kinds of monitor (``type:`` of a monitor), the config's side: each kind declares
how its settings are read from the config (into its value of `config.monitoring`) and the
facts the rest of the config needs of it (whether it checks a port). `KINDS` is the one
list of them; `config.health` reads a monitor's common keys and hands the rest to its
kind. The probe's side of each kind (which checker runs it, whether it needs the node's
ICMP socket) is `probe.kinds`, keyed by the same names; a test holds the two lists equal.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import dns.rcode
import dns.rdatatype

from gtmcluster.config.loadsource import read_load
from gtmcluster.config.monitoring import (
    STATUS_CLASSES,
    Check,
    DnsCheck,
    HttpCheck,
    IcmpCheck,
    LoadSource,
    TcpCheck,
    UdpCheck,
)
from gtmcluster.config.problems import KeyPath
from gtmcluster.config.reader import Mapping, Reader
from gtmcluster.dnsdata import names

HTTP_METHODS = ("GET", "HEAD", "POST", "OPTIONS")
DNS_RCODES = ("NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED")
DNS_QTYPES = ("A", "AAAA", "SOA", "NS", "MX", "TXT", "CNAME", "SRV", "PTR")

#: reads a kind's own keys of monitor mapping *m* (the common ones are read already);
#: relative file names are resolved with the last argument. None after reporting problems.
ReadSettings = Callable[[Reader, Mapping, Callable[[str], Path]], Check | None]


@dataclass(frozen=True, slots=True)
class MonitorKind:
    """One kind of monitor as the config knows it."""

    name: str  # its ``type:``
    read: ReadSettings
    #: its checks connect to a port: a link target needs one unless the monitor sets it
    ported: bool = True


def _tcp(r: Reader, m: Mapping, resolve: Callable[[str], Path]) -> TcpCheck | None:
    send = _payload(r, m, "send", required=False)
    expect = _payload(r, m, "expect", required=False)
    reject = _payload(r, m, "reject", required=False)
    if reject is not None and expect is not None:
        r.error(m.at("reject_hex" if m.has("reject_hex") else "reject"), "give 'expect' or 'reject', not both")
        return None
    return TcpCheck(send, expect, reject)


def _icmp(r: Reader, m: Mapping, resolve: Callable[[str], Path]) -> IcmpCheck:
    return IcmpCheck()


def _udp(r: Reader, m: Mapping, resolve: Callable[[str], Path]) -> UdpCheck | None:
    send = _payload(r, m, "send", required=True)
    expect = _payload(r, m, "expect", required=False)
    no_reply = m.string("no_reply", "down", ("down", "up"))
    return None if send is None or no_reply is None else UdpCheck(send, expect, no_reply == "up")


def _metrics(r: Reader, m: Mapping, resolve: Callable[[str], Path]) -> HttpCheck | None:
    """The first form of a load source: the same as type http with load {format: json}."""
    path = m.string("path", "/metrics.json")
    if path is not None and not path.startswith("/"):
        r.error(m.at("path"), f"{path!r} must start with '/'")
    host = m.string("host", None) if m.has("host") else None
    cap = m.integer("max_response_bytes", 65536, 64, 16 * 1024 * 1024)
    if path is None or cap is None:
        return None
    return HttpCheck(False, "GET", path, host, (200,), max_response_bytes=cap, load=LoadSource("json"))


def _dns(r: Reader, m: Mapping, resolve: Callable[[str], Path]) -> DnsCheck | None:
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


def _http(r: Reader, m: Mapping, resolve: Callable[[str], Path]) -> HttpCheck | None:
    return read_http(r, m, False, resolve)


def _https(r: Reader, m: Mapping, resolve: Callable[[str], Path]) -> HttpCheck | None:
    return read_http(r, m, True, resolve)


def read_http(r: Reader, m: Mapping, tls: bool, resolve: Callable[[str], Path]) -> HttpCheck | None:
    """The keys of an http (*tls* False) or https monitor."""
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


def _regex(r: Reader, m: Mapping, key: str) -> str | None:
    """A regular expression at *key* (None without one); a bad one is a problem."""
    regex = m.string(key, None) if m.has(key) else None
    if regex is not None:
        try:
            re.compile(regex)
        except re.error as e:
            r.error(m.at(key), f"bad regular expression: {e}")
    return regex


#: every kind of monitor, by its ``type:`` (in the order the config's problems list them)
KINDS: dict[str, MonitorKind] = {
    kind.name: kind
    for kind in (
        MonitorKind("tcp", _tcp),
        MonitorKind("http", _http),
        MonitorKind("https", _https),
        MonitorKind("udp", _udp),
        MonitorKind("dns", _dns),
        MonitorKind("icmp", _icmp, ported=False),
        MonitorKind("metrics", _metrics),
    )
}

#: types a config may name that no kind implements, and why (the problem says so)
UNSUPPORTED = {"tcp_half_open": "tcp_half_open is not supported (it needs raw TCP); use tcp"}
