"""F5 GTM monitors made into ours, by what they mean on F5.

Types: ``http``, ``https`` (``verify_tls: false``: F5 does not check the certificate),
``tcp``, ``tcp-half-open`` (our tcp connect: the same verdict, see `to_ours`), ``udp``,
``gateway-icmp`` (icmp) and ``dns`` are mapped; every other type is LOST with the closest
check of ours named (`CLOSEST`). The built-in monitors (``/Common/http``, ``tcp``,
``udp``, ``gateway_icmp``, ``tcp_half_open``, ``bigip`` ...) are made on first use with
F5's values (`BUILTIN`), and ``defaults-from`` chains end in them.

Timing: F5's ``interval`` is how often it checks and ``timeout`` how long a resource may
fail to answer before it is marked down; ours check every ``interval``, each check waiting
at most ``timeout`` (no longer than the interval), and mark a server down after
``down_after`` failures in a row. So F5's timeout T becomes ``down_after = T // interval``
(at least 1), a check waits ``min(probe-timeout, interval)`` (F5's probe-timeout, 5 s by
default), and a server is up again after one good check (``up_after: 1``), as on F5.

Strings: tmsh lists an empty string as ``none``: it is empty in every setting. ``send`` and
``recv`` keep F5's escapes (``\\r\\n``): a tcp or udp ``send`` is sent with them as bytes;
``recv`` is a regular expression. An http ``send``'s request line gives our method and
path, its ``Host:`` header our host. An http ``recv`` is read by meaning (`f5recv`): a
status-line form becomes ``expect_status``, a body form ``expect_body_regex``; without
``recv`` any HTTP reply is up. ``reverse`` inverts it (the other statuses, or
``reject_body_regex``; a tcp ``reject``). A tcp or udp ``recv`` must be literal text for our
``expect`` (F5 searched it as a pattern). A udp monitor without ``recv`` is up unless an
ICMP port unreachable comes back (``no_reply: up``).

`to_ours` says what it could not keep at two levels: notes (the verdicts are the same) and
changes (a verdict can differ: the operator decides), or why the monitor is lost. Whether
those matter depends on whether anything uses the monitor, which the caller knows.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any

from gtmcluster.config.monitoring import status_classes
from gtmcluster.importers import f5names, f5recv
from gtmcluster.importers.f5parse import Node

#: F5 GTM's defaults for its monitors
DEFAULTS = {"interval": 30, "timeout": 120, "probe-timeout": 5}
#: F5 monitor types and our check for each
TYPES = {
    "http": "http", "https": "https", "tcp": "tcp", "tcp-half-open": "tcp", "udp": "udp",
    "gateway-icmp": "icmp", "dns": "dns",
}  # fmt: skip
_TCP_GREETING = "a tcp monitor on the service port with expect {!r} (the server's greeting)"
#: F5 monitor types with no equivalent here: what they check, and the closest of ours
CLOSEST = {
    "bigip": "reads the virtual server's status from the LTM over iQuery; closest here: "
    "a tcp monitor on the virtual server's port (or an http monitor of its service)",
    "bigip-link": "reads a link's status from the LTM; closest here: a link's own monitor (docs/links.md)",
    "snmp-link": "reads a link's traffic over SNMP; closest here: a link's traffic source (docs/links.md)",
    "external": "runs a script; closest here: a tcp or http monitor checking what the script checked",
    "scripted": "plays a send/expect dialogue; closest here: a tcp monitor with send and expect",
    "ftp": "logs in over FTP; closest here: " + _TCP_GREETING.format("220"),
    "smtp": "greets the server over SMTP; closest here: " + _TCP_GREETING.format("220"),
    "nntp": "logs in over NNTP; closest here: " + _TCP_GREETING.format("200"),
    "pop3": "logs in over POP3; closest here: " + _TCP_GREETING.format("+OK"),
    "imap": "logs in over IMAP; closest here: " + _TCP_GREETING.format("* OK"),
    "ldap": "binds and searches over LDAP; closest here: a tcp monitor on the LDAP port",
    "sip": "sends a SIP request; closest here: a udp or tcp monitor with send 'OPTIONS ...' and expect 'SIP/2.0'",
    "radius": "authenticates over RADIUS; closest here: a udp monitor on the RADIUS port",
    "radius-accounting": "sends RADIUS accounting; closest here: a udp monitor on the accounting port",
    "snmp": "reads SNMP figures; closest here: a udp monitor on port 161",
    "mssql": "logs in and queries the database; closest here: a tcp monitor on the database port",
    "mysql": "logs in and queries the database; closest here: a tcp monitor on the database port",
    "oracle": "logs in and queries the database; closest here: a tcp monitor on the database port",
    "postgresql": "logs in and queries the database; closest here: a tcp monitor on the database port",
    "real-server": "reads load figures from the server; closest here: an http monitor with a load source "
    "(docs/load-sources.md)",
    "wmi": "reads load figures over WMI; closest here: an http monitor with a load source (docs/load-sources.md)",
    "soap": "calls a SOAP method; closest here: an http monitor of the service (its request has no body)",
    "firepass": "checks a FirePass system; closest here: an https monitor",
    "wap": "checks a WAP gateway; closest here: a udp or http monitor of it",
    "gtp": "sends a GTP echo; closest here: a udp monitor with send and expect",
    "none": "checks nothing",
}
#: F5's built-in monitors: type and the values that differ from `DEFAULTS`
BUILTIN: dict[str, tuple[str, dict[str, str]]] = {
    "http": ("http", {"send": "GET /\\r\\n"}),
    "https": ("https", {"send": "GET /\\r\\n"}),
    "tcp": ("tcp", {}),
    "tcp_half_open": ("tcp-half-open", {}),
    "udp": ("udp", {"send": "default send string"}),
    "gateway_icmp": ("gateway-icmp", {}),
    **{t.replace("-", "_"): (t, {}) for t in CLOSEST if t != "none"},
}
#: the built-in monitor a type's monitors default from
BUILTIN_OF_TYPE = {f5_type: name for name, (f5_type, _) in BUILTIN.items()}
#: settings that change nothing here
QUIET = {"defaults-from", "description", "app-service", "partition", "debug", "ignore-down-response"}
#: settings and the values at which they change nothing (tmsh ``list all-properties`` shows them)
AT_DEFAULT = {
    "reverse": ("disabled",), "transparent": ("disabled",), "ip-dscp": ("0",), "compatibility": ("enabled",),
    "probe-attempts": ("3",), "probe-interval": ("1",), "cipherlist": ("DEFAULT:+SHA:+3DES:+kEDH",),
}  # fmt: skip
#: settings read for each of our kinds (beyond the timing and destination ones)
READ = {
    "http": {"send", "recv", "recv-disable", "reverse", "username", "password"},
    "https": {"send", "recv", "recv-disable", "reverse", "username", "password", "cert", "key", "cipherlist",
              "compatibility"},
    "tcp": {"send", "recv", "recv-disable", "reverse"},
    "udp": {"send", "recv", "recv-disable", "reverse"},
    "icmp": set(),
    "dns": {"qname", "qtype", "recv", "accept-rcode", "answer-contains", "reverse"},
}  # fmt: skip
COMMON_SETTINGS = {"interval", "timeout", "probe-timeout", "destination", "transparent", "ip-dscp",
                   "probe-attempts", "probe-interval"}  # fmt: skip
#: request headers that change no verdict (ours send their own, or close anyway)
QUIET_HEADERS = {"host", "connection", "accept", "accept-encoding", "accept-language", "cache-control", "pragma"}
_REQUEST = re.compile(r"^([A-Z]+) (\S+)(?: HTTP/\d\.\d)?$")
HTTP_METHODS = ("GET", "HEAD", "POST", "OPTIONS")


@dataclass
class Mapped:
    """Our monitor for an F5 one (None when it is lost), and what could not be kept."""

    monitor: dict[str, Any] | None = None
    #: what differs but gives the same verdicts (plain findings)
    notes: list[str] = field(default_factory=list)
    #: what can make a verdict differ from F5's (CHANGED where the monitor is used)
    changes: list[str] = field(default_factory=list)
    #: why it is not imported, and the closest check of ours
    lost: str = ""


def unescape(text: str) -> str:
    """F5's escapes in send strings (``\\r``, ``\\n``, ``\\t``) as characters."""
    return text.replace("\\r", "\r").replace("\\n", "\n").replace("\\t", "\t")


def settings(node: Node) -> dict[str, str]:
    """A monitor block's ``key value`` settings (values as written; tmsh's ``none``, an
    empty string, as ``""``)."""
    out: dict[str, str] = {}
    for child in node.children():
        if child.words:
            text = " ".join(child.words[1:])
            out[child.key] = "" if text == "none" else text
    return out


def resolve(f5_type: str, own: dict[str, str], defs: dict[str, dict[str, str]]) -> tuple[dict[str, str], str]:
    """*own* settings with those of its ``defaults-from`` chain (monitors in *defs*, by
    name without ``/Common/``, ending in a built-in one) merged in; and a problem when the
    chain names a monitor that is not there."""
    values = dict(own)
    parent = _parent(f5_type, own)
    seen: set[str] = set()
    while parent in defs and parent not in seen:
        seen.add(parent)
        values = {**defs[parent], **values}
        parent = _parent(f5_type, defs[parent])
    if parent in BUILTIN:
        return {**BUILTIN[parent][1], **values}, ""
    if not parent:
        return values, ""
    if parent in seen:
        return values, f"defaults-from {parent} is a loop"
    return values, f"defaults-from {parent}: not in the input, so its settings are not known (F5's defaults are used)"


def _parent(f5_type: str, values: dict[str, str]) -> str:
    """The monitor *values* default from: ``defaults-from``, else the type's built-in one."""
    return f5names.strip_partition(values.get("defaults-from") or BUILTIN_OF_TYPE.get(f5_type, ""))


def to_ours(f5_type: str, values: dict[str, str]) -> Mapped:
    """Our monitor for F5's *f5_type* with *values* (inherited ones merged in)."""
    if f5_type not in TYPES:
        why = CLOSEST.get(f5_type, "has no equivalent here")
        return Mapped(lost=f"F5's {f5_type} monitor {why}")
    kind = TYPES[f5_type]
    out = Mapped({"type": kind})
    _timing(values, out)
    _destination(values, out)
    for key, text in values.items():
        if key in QUIET or key in READ[kind] or text in AT_DEFAULT.get(key, ()):
            continue
        if key == "transparent":
            out.changes.append(
                "transparent: F5 checked through the virtual server to the destination; ours check directly"
            )
        elif key == "ip-dscp":
            out.notes.append(f"ip-dscp {text}: ours send checks unmarked (only a network that routes by DSCP cares)")
        elif key in ("probe-attempts", "probe-interval"):
            why = "ours send one probe per check; a server is down after down_after checks without an answer"
            out.notes.append(f"{key} {text}: {why}")
        elif key not in COMMON_SETTINGS:
            out.changes.append(f"{key} {text}: not read (F5 applied it, this import does not)")
    if kind in ("http", "https"):
        _http(values, out)
        if kind == "https":
            _tls(values, out)
    elif kind == "tcp":
        _stream(f5_type, values, out)
    elif kind == "udp":
        _datagram(values, out)
    elif kind == "dns":
        _dns(values, out)
    if f5_type == "tcp-half-open":
        out.notes.append(
            "tcp-half-open: ours complete the TCP handshake and close at once (F5 sent a SYN and a reset"
            " after the SYN-ACK): the same verdict, but the server's application sees a short connection"
        )
    return out


def _timing(values: dict[str, str], out: Mapped) -> None:
    assert out.monitor is not None
    interval = _int(values, "interval", out)
    timeout = _int(values, "timeout", out)
    probe = _int(values, "probe-timeout", out)
    interval = max(1, min(interval, 86400))
    out.monitor.update(
        interval=interval,
        timeout=max(1, min(probe, interval)),
        up_after=1,
        down_after=max(1, min(100, timeout // interval)),
    )


def _int(values: dict[str, str], key: str, out: Mapped) -> int:
    text = values.get(key)
    if text is None or text == "":
        return DEFAULTS[key]
    if text.isascii() and text.isdigit():
        return int(text)
    out.notes.append(f"{key} {text!r} is not a number; {DEFAULTS[key]} is used")
    return DEFAULTS[key]


def _destination(values: dict[str, str], out: Mapped) -> None:
    """``*:*`` (the server's address and port), ``*:PORT`` (``port``), or a fixed address."""
    assert out.monitor is not None
    destination = values.get("destination") or "*:*"
    port: int | None = None
    if destination.startswith("*"):
        text = destination[2:]
        port = f5names.port(text)
        if port is None and text not in ("*", "0", "any", ""):
            out.changes.append(f"destination {destination}: port {text!r} is not one we read (the server's is used)")
    else:
        parsed = f5names.address_port(destination)
        port = parsed[1] if parsed is not None else None
        out.changes.append(
            f"destination {destination}: F5 checked that address for every server using the monitor;"
            " ours check each virtual server's own address"
        )
    if port is not None:
        out.monitor["port"] = port


def _http(values: dict[str, str], out: Mapped) -> None:
    m = out.monitor
    assert m is not None
    send = unescape(values.get("send", BUILTIN["http"][1]["send"]))
    head, _, body = send.partition("\r\n\r\n") if "\r\n\r\n" in send else send.partition("\n\n")
    lines = head.replace("\r\n", "\n").split("\n")
    request = _REQUEST.match(lines[0].strip())
    if not send.strip():
        out.changes.append(
            "send is empty: F5 sent no request (and a server that waits never answered); ours send GET /"
        )
    elif request is None:
        out.changes.append(f"send {values.get('send')!r}: not an HTTP request line; ours send GET /")
    elif request.group(1) not in HTTP_METHODS:
        out.changes.append(f"send {values.get('send')!r}: ours send GET (methods: {', '.join(HTTP_METHODS)})")
        m["path"] = request.group(2) if request.group(2).startswith("/") else "/"
    else:
        m["method"], m["path"] = request.group(1), request.group(2)
        if not m["path"].startswith("/"):
            out.changes.append(f"send {values.get('send')!r}: ours need a path that starts with '/'; / is used")
            m["path"] = "/"
    for header in lines[1:]:
        name, colon, value = header.partition(":")
        name = name.strip()
        if not colon or not name:
            continue
        if name.lower() == "host" and not value.strip():
            out.changes.append(f"send header {header.strip()!r}: empty; ours send the server's address as Host")
        elif name.lower() == "host":
            m["host"] = value.strip()
        elif name.lower() == "user-agent":
            out.notes.append(f"send header {header.strip()!r}: ours send User-Agent: gtmcluster-monitor")
        elif name.lower() not in QUIET_HEADERS:
            out.changes.append(f"send header {header.strip()!r}: ours do not send it (a server may answer otherwise)")
    if body.strip():
        out.changes.append(f"send has a request body ({len(body)} bytes): ours send none")
    if values.get("username") or values.get("password"):
        out.changes.append("username/password: ours send no credentials (a server that wants them answers 401)")
    recv = values.get("recv", "")
    found = f5recv.meaning(recv) if recv else f5recv.Meaning()
    reverse = values.get("reverse") == "enabled"
    if reverse and not recv:
        out.changes.append("reverse without recv: F5 refuses it; ignored")
        reverse = False
    if found.problem is not None:
        out.changes.append(found.problem)
    if reverse:
        found = f5recv.reversed_meaning(found)
        if found.body is not None:
            m["reject_body_regex"] = found.body
        elif found.problem is not None:
            out.changes.append("reverse: F5 was down when that matched; ours cannot invert it")
    elif found.body is not None:
        m["expect_body_regex"] = found.body
    if not found.statuses:
        out.notes.append(f"recv {recv!r} with reverse matches every status line: F5 was never up; ours neither")
    m["expect_status"] = status_classes(sorted(found.statuses))
    disable = values.get("recv-disable", "")
    if disable and recv:
        why = "a match when recv did not match made F5 show the server disabled, ours down: neither answers with it"
        out.notes.append(f"recv-disable {disable!r}: {why}")
    elif disable:
        out.changes.append(f"recv-disable {disable!r} without recv: not imported (F5 uses it only with recv)")


def _tls(values: dict[str, str], out: Mapped) -> None:
    assert out.monitor is not None
    out.monitor["verify_tls"] = False  # F5 does not check the server's certificate
    if values.get("cert") or values.get("key"):
        out.changes.append("cert/key: F5 showed a client certificate; ours show none (a server that wants one refuses)")
    if values.get("cipherlist") and values["cipherlist"] not in AT_DEFAULT["cipherlist"]:
        why = "ours use the system's TLS defaults: a server F5 reached may refuse ours, or the other way round"
        out.changes.append(f"cipherlist {values['cipherlist']}: {why}")
    if values.get("compatibility") == "disabled":
        out.notes.append(
            "compatibility disabled: ours keep OpenSSL's usual workarounds (no server is refused for them)"
        )


def _literal(pattern: str) -> str | None:
    """The text a regular expression matches when it is a plain string (``a\\.b`` ->
    ``a.b``), with F5's ``\\r\\n`` escapes; None when it is a real pattern."""
    text = unescape(pattern)
    if re.search(r"(?<!\\)[.^$*+?{}\[\]|()]|\\[A-Za-z0-9]", text):
        return None
    return re.sub(r"\\(.)", r"\1", text)


def _stream(f5_type: str, values: dict[str, str], out: Mapped) -> None:
    """tcp: send bytes, then expect (or with reverse, reject) the recv text."""
    m = out.monitor
    assert m is not None
    if values.get("send"):
        m["send"] = unescape(values["send"])
    recv = values.get("recv", "")
    reverse = values.get("reverse") == "enabled"
    if reverse and not recv:
        out.changes.append("reverse without recv: F5 refuses it; ignored")
    if values.get("recv-disable"):
        out.notes.append("recv-disable: a match made F5 show the server disabled, ours down: neither answers with it")
    if not recv:
        return
    text = _literal(recv)
    if text is None:
        why = "a pattern: ours match text literally, so only the connection is checked"
        out.changes.append(f"recv {recv!r}: {why}" + (" (and reverse is not applied)" if reverse else ""))
    elif reverse:
        m["reject"] = text
    else:
        m["expect"] = text


def _datagram(values: dict[str, str], out: Mapped) -> None:
    """udp: send a datagram; with recv wait for it, without it up unless port unreachable."""
    m = out.monitor
    assert m is not None
    m["send"] = unescape(values.get("send", BUILTIN["udp"][1]["send"]))
    if not m["send"]:
        out.monitor = None
        out.lost = "send none: an empty datagram; ours send at least one byte; closest here: a udp monitor with send"
        return
    recv = values.get("recv", "")
    if values.get("reverse") == "enabled" and recv:
        out.monitor = None
        out.lost = "reverse enabled: ours cannot invert a udp check; closest here: a udp monitor with expect"
        return
    if not recv:
        m["no_reply"] = "up"
        return
    text = _literal(recv)
    if text is None:
        out.changes.append(f"recv {recv!r}: a pattern: ours match text literally, so any reply is up")
    else:
        m["expect"] = text


def _dns(values: dict[str, str], out: Mapped) -> None:
    m = out.monitor
    assert m is not None
    qname, qtype = values.get("qname", ""), values.get("qtype", "a").upper()
    if not qname:
        out.monitor, out.lost = None, "a dns monitor without qname: nothing to ask; closest here: a dns monitor"
        return
    if values.get("reverse") == "enabled":
        out.monitor = None
        out.lost = "reverse enabled: ours cannot invert a dns check; closest here: a dns monitor with expect_address"
        return
    problem = f5names.domain_problem(qname)
    if problem:
        out.monitor, out.lost = None, f"qname: {problem}; closest here: a dns monitor"
        return
    m.update(query_name=qname.rstrip(".") or ".", query_type=qtype if qtype in ("A", "AAAA") else "A")
    if qtype not in ("A", "AAAA"):
        out.changes.append(f"qtype {qtype}: ours ask A")
    accept = values.get("accept-rcode", "no-error")
    m["expect_rcode"] = "NOERROR"
    if accept != "no-error":
        out.changes.append(f"accept-rcode {accept}: ours are up only for NOERROR")
    recv = values.get("recv", "")
    try:
        m["expect_address"] = str(ipaddress.ip_address(recv))
        return
    except ValueError:
        pass
    if recv:
        out.changes.append(f"recv {recv!r}: not an address; ours check the rcode only")
    answer = values.get("answer-contains", "query-type")
    if answer != "anything":
        out.changes.append(
            f"answer-contains {answer}: F5 also needed a record in the answer; ours check the rcode only"
            " (give expect_address to check for one)"
        )
