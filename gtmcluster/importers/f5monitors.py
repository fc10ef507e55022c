"""F5 GTM monitors (``gtm monitor http|https|tcp|gateway-icmp``) made into ours.

F5's ``interval`` is how often it checks and ``timeout`` how long a resource may fail to
answer before it is marked down; ours check every ``interval``, each check waiting at most
``timeout`` (no longer than the interval), and mark a server down after ``down_after``
failures in a row. So F5's timeout T becomes ``down_after = T // interval`` (at least 1),
a check waits ``min(probe-timeout, interval)`` (F5's probe-timeout, 5 s by default), and a
server is up again after one good check (``up_after: 1``), as on F5.

An http(s) ``send`` string's request line gives our method and path, its Host header our
host. A ``recv`` that is a status (``200 OK``, ``HTTP/1.1 200``) becomes ``expect_status``;
any other ``recv`` is a regular expression F5 matched anywhere in the response, kept as
``expect_body_regex`` (ours match the body only). The built-in monitors ``http``,
``https``, ``tcp``, ``gateway_icmp`` (and ``tcp_half_open``, as tcp) are made on first use.
"""

from __future__ import annotations

import re
from typing import Any

from gtmcluster.importers.f5parse import Node

#: F5 GTM's defaults for its built-in monitor types
DEFAULTS = {"interval": 30, "timeout": 120, "probe-timeout": 5}
TYPES = {"http": "http", "https": "https", "tcp": "tcp", "gateway-icmp": "icmp", "gateway_icmp": "icmp"}
BUILTIN = {"http": "http", "https": "https", "tcp": "tcp", "gateway_icmp": "gateway-icmp", "tcp_half_open": "tcp"}
#: settings we read; the others are findings
HANDLED = {"defaults-from", "interval", "timeout", "probe-timeout", "send", "recv", "destination", "description"}
#: the statuses an http(s) check without ``recv`` accepts (F5 took any answer; ours, a
#: success or a redirect)
ANY_STATUS = [200, 201, 202, 203, 204, 205, 206, 300, 301, 302, 303, 304, 307, 308]
_STATUS = re.compile(r"^(?:HTTP/1\.[01] )?([1-5][0-9][0-9])(?: [A-Za-z ]*)?$")
_REQUEST = re.compile(r"^(GET|HEAD|POST|OPTIONS) (\S+)")


def unescape(text: str) -> str:
    """F5's escapes in send and recv strings (``\\r``, ``\\n``, ``\\t``) as characters."""
    return text.replace("\\r", "\r").replace("\\n", "\n").replace("\\t", "\t")


def settings(node: Node) -> dict[str, str]:
    """A monitor block's ``key value`` settings (values as written)."""
    out: dict[str, str] = {}
    for child in node.children():
        if child.words:
            out[child.key] = " ".join(child.words[1:])
    return out


def to_ours(f5_type: str, values: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """Our monitor for F5's *f5_type* with *values* (inherited ones merged in): the YAML
    mapping and what could not be kept (messages)."""
    problems: list[str] = []
    kind = TYPES[f5_type]
    interval = _int(values.get("interval"), DEFAULTS["interval"], problems, "interval")
    timeout = _int(values.get("timeout"), DEFAULTS["timeout"], problems, "timeout")
    probe = _int(values.get("probe-timeout"), DEFAULTS["probe-timeout"], problems, "probe-timeout")
    interval = max(1, min(interval, 86400))
    out: dict[str, Any] = {
        "type": kind,
        "interval": interval,
        "timeout": max(1, min(probe, interval)),
        "up_after": 1,
        "down_after": max(1, min(100, timeout // interval)),
    }
    destination = values.get("destination", "*:*")
    if destination not in ("*:*", "*.*", "*:0", "*"):
        port = destination.rpartition(":")[2] if ":" in destination else destination.rpartition(".")[2]
        if destination.startswith("*") and port.isdigit() and 0 < int(port) < 65536:
            out["port"] = int(port)
        else:
            problems.append(f"destination {destination!r}: ours check each virtual server's own address")
    if kind in ("http", "https"):
        _http(values, out, problems)
        if kind == "https":
            out["verify_tls"] = False  # F5 does not check the server's certificate
    elif kind == "tcp":
        if values.get("send"):
            out["send"] = unescape(values["send"])
        if values.get("recv"):
            problems.append(f"recv {values['recv']!r}: a tcp check's reply is matched literally, not as a pattern")
            out["expect"] = values["recv"]
    return out, problems


def _http(values: dict[str, str], out: dict[str, Any], problems: list[str]) -> None:
    send = unescape(values.get("send", "GET /"))
    request = _REQUEST.match(send)
    if request is None:
        problems.append(f"send {values.get('send')!r}: not an HTTP request line; GET / is used")
    else:
        out["method"], out["path"] = request.group(1), request.group(2)
        if not out["path"].startswith("/"):
            problems.append(f"send {values.get('send')!r}: path must start with '/'; / is used")
            out["path"] = "/"
    for header in send.split("\r\n")[1:]:
        name, colon, value = header.partition(":")
        if colon and name.strip().lower() == "host":
            out["host"] = value.strip()
    recv = values.get("recv", "")
    if not recv:
        out["expect_status"] = ANY_STATUS
        problems.append("no recv: F5 took any answer as up; ours take a 2xx or 3xx status")
        return
    status = _STATUS.match(recv.strip())
    if status is not None:
        out["expect_status"] = [int(status.group(1))]
        return
    try:
        re.compile(recv)
    except re.error as e:
        problems.append(f"recv {recv!r} is no regular expression we read ({e}); a 2xx or 3xx status is up")
        out["expect_status"] = ANY_STATUS
        return
    out["expect_status"] = ANY_STATUS
    out["expect_body_regex"] = recv
    problems.append(f"recv {recv!r} is matched against the body only (F5 also searched the headers)")


def _int(text: str | None, default: int, problems: list[str], key: str) -> int:
    if text is None:
        return default
    if text.isdigit():
        return int(text)
    problems.append(f"{key} {text!r} is not a number; {default} is used")
    return default
