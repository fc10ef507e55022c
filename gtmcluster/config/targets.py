"""Virtual servers that answer with a record instead of an address: ``cname``, ``mx``,
``srv`` and ``naptr`` (docs/wideip-types.md).

Each is read into a `RecordTarget` holding the record's RDATA ready for the wire writer:
CNAME targets and MX exchanges may be compressed (RFC 1035 types), SRV targets (RFC 2782)
and NAPTR replacements (RFC 3403) are written whole.
"""

from __future__ import annotations

import struct
from typing import Any

from gtmcluster.config.model import RecordTarget
from gtmcluster.config.problems import KeyPath
from gtmcluster.config.reader import Mapping, Reader
from gtmcluster.dnsdata import names
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import TYPE_CNAME, TYPE_MX, TYPE_NAPTR, TYPE_SRV

#: the virtual server keys that make it a record server, and the record type of each
TARGET_KEYS = {"cname": TYPE_CNAME, "mx": TYPE_MX, "srv": TYPE_SRV, "naptr": TYPE_NAPTR}
_U16 = struct.Struct("!H")
_SRV = struct.Struct("!HHH")
_NAPTR_FLAGS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")


def read_target(r: Reader, vs: Mapping, key: str) -> RecordTarget | None:
    """The record of virtual server *vs* under *key* (one of `TARGET_KEYS`), or None
    after reporting what is wrong with it."""
    at = vs.at(key)
    raw = vs.get(key)
    if key == "cname":
        target = _name(r, at, raw)
        return None if target is None else RecordTarget(TYPE_CNAME, target, (target,), names.to_text(target))
    m = r.mapping(at, raw, _SHAPES[key])
    if m is None:
        return None
    out: RecordTarget | None = None
    if key == "mx":
        preference = m.integer("preference", 10, 0, 65535)
        exchange = _name(r, m.at("exchange"), m.require("exchange", "the mail exchanger's host name"))
        if preference is not None and exchange is not None:
            text = f"{preference} {names.to_text(exchange)}"
            out = RecordTarget(TYPE_MX, exchange, (_U16.pack(preference), exchange), text)
    elif key == "srv":
        priority = m.integer("priority", 10, 0, 65535)
        weight = m.integer("weight", 10, 0, 65535)
        port = m.integer("port", None, 0, 65535) if m.has("port") else m.require("port", "the service's port")
        target = _name(r, m.at("target"), m.require("target", "the host name offering the service"))
        if priority is not None and weight is not None and isinstance(port, int) and target is not None:
            rdata = _SRV.pack(priority, weight, port) + _wire(target)
            out = RecordTarget(TYPE_SRV, target, (rdata,), f"{priority} {weight} {port} {names.to_text(target)}")
    else:
        out = _naptr(r, m)
    m.done()
    return out


def srv_port(target: RecordTarget) -> int:
    """The port an SRV target names (the default port its monitor checks)."""
    rdata = target.rdata[0]
    assert isinstance(rdata, bytes)
    return int(_SRV.unpack_from(rdata)[2])


_SHAPES = {
    "mx": "a mapping {exchange: HOST, preference: N}",
    "srv": "a mapping {target: HOST, port: N, priority: N, weight: N}",
    "naptr": "a mapping {order, preference, flags, service, regexp, replacement}",
}


def _naptr(r: Reader, m: Mapping) -> RecordTarget | None:
    order = m.integer("order", 100, 0, 65535)
    preference = m.integer("preference", 10, 0, 65535)
    strings = []
    texts = []
    for key in ("flags", "service", "regexp"):
        value = m.get(key, "")
        if not isinstance(value, str):
            r.error(m.at(key), f"must be a string, not {type(value).__name__}")
            return None
        data = value.encode()
        if len(data) > 255:
            r.error(m.at(key), f"is {len(data)} bytes long; a character-string holds at most 255")
            return None
        if key == "flags" and not set(value) <= _NAPTR_FLAGS:
            r.error(m.at(key), f"{value!r}: NAPTR flags are letters and digits (RFC 3403 4.1), e.g. S, A, U or P")
            return None
        strings.append(bytes([len(data)]) + data)
        texts.append('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"')
    raw_replacement = m.get("replacement", ".")
    replacement: Name | None = () if raw_replacement == "." else _name(r, m.at("replacement"), raw_replacement)
    if order is None or preference is None or replacement is None:
        return None
    if not strings[2][1:] and not replacement:
        r.error(m.path, "a NAPTR record needs a 'regexp' or a 'replacement' (RFC 3403 4.1)")
        return None
    rdata = _U16.pack(order) + _U16.pack(preference) + b"".join(strings) + _wire(replacement)
    text = f"{order} {preference} {' '.join(texts)} {names.to_text(replacement)}"
    return RecordTarget(TYPE_NAPTR, replacement, (rdata,), text)


def _name(r: Reader, at: KeyPath, raw: Any) -> Name | None:
    text = r.string(at, raw)
    if text is None:
        return None
    try:
        name = names.from_text(text)
    except names.BadName as e:
        r.error(at, str(e))
        return None
    if not name:
        r.error(at, "the root is no target here: give a host name")
        return None
    return name


def _wire(name: Name) -> bytes:
    """*name* uncompressed, as SRV and NAPTR carry it."""
    return b"".join(bytes([len(label)]) + label for label in name) + b"\x00"
