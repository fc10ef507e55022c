"""What a browser's beacon says, checked: its body, and the client subnet it counts for.

A beacon is the JSON object ``{"samples": {DC: ms, ...}, "id": "..."}``: each data center's
round-trip time as one browser measured it, and optionally the one-use id whose name that
browser's resolver asked for (`<id>.rum.<zone>`). `parse` takes it or says why not as a
`Rejected`: an HTTP status, a reason out of `REASONS` (also the label of
``gtm_rum_beacons_total``) and a sentence an operator understands.

The client is the POST's source address, never anything the body says: `subnet_of` gives its
/24 (IPv4) or /48 (IPv6), refusing the addresses the prober leaves alone
(`gtmcluster.proximity.clients.Ranges`: multicast, broadcast and unspecified always; the
special-purpose ranges, loopback and private use among them, unless ``rum.allow`` opens them).

Pure: nothing from Twisted. A hostile body costs at most a parse of `max_body` bytes and
never raises.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from gtmcluster.proximity.clients import IPNetwork, Ranges, Refused
from gtmcluster.runtime.sources import plain

#: a kept beacon's figures are in (0, MAX_MS) milliseconds
MAX_MS = 60_000.0
#: a one-use id: 16 to 32 lowercase letters and digits (the label a resolver asked for)
ID = re.compile(r"[a-z0-9]{16,32}\Z")

#: why a beacon is refused: the ``reason`` label of gtm_rum_beacons_total (with "kept")
MALFORMED = "malformed"
TOO_LARGE = "too_large"
UNKNOWN_DC = "unknown_dc"
BAD_VALUE = "bad_value"
BAD_ID = "bad_id"
REFUSED_SOURCE = "refused_source"
RATE = "rate"
BUSY = "busy"
REASONS = (MALFORMED, TOO_LARGE, UNKNOWN_DC, BAD_VALUE, BAD_ID, REFUSED_SOURCE, RATE, BUSY)
KEPT = "kept"


@dataclass(frozen=True)
class Beacon:
    """One browser's figures: each DC's RTT in milliseconds, and the one-use id it resolved."""

    samples: dict[str, float]
    id: str | None = None


@dataclass(frozen=True)
class Rejected:
    """A beacon not kept: the HTTP *status* answered, the *reason* (one of `REASONS`) and
    a *message* saying why in words; *retry*: seconds after which it may be taken (429)."""

    status: int
    reason: str
    message: str
    retry: float = 0.0

    def body(self) -> dict[str, str]:
        """The JSON answer: ``{"error": reason, "message": ...}``."""
        return {"error": self.reason, "message": self.message}


class _Malformed(ValueError):
    pass


def _no_constant(name: str) -> Any:
    raise _Malformed(f"{name} is not a number JSON allows")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Malformed(f"the key {key[:40]!r} appears twice")
        out[key] = value
    return out


def too_large(max_body: int) -> Rejected:
    return Rejected(413, TOO_LARGE, f"the beacon is over {max_body} bytes")


def parse(body: bytes, known: Collection[str], max_body: int) -> Beacon | Rejected:
    """The beacon *body* is, its DC names among *known*, or why it is refused."""
    if len(body) > max_body:
        return too_large(max_body)
    try:
        text = body.decode("utf-8")
        value = json.loads(text, object_pairs_hook=_object, parse_constant=_no_constant)
    except UnicodeDecodeError:
        return Rejected(400, MALFORMED, "the beacon is not UTF-8 text")
    except _Malformed as e:
        return Rejected(400, MALFORMED, f"the beacon is not plain JSON: {e}")
    except (ValueError, RecursionError):
        # (JSONDecodeError; an integer of too many digits; nesting past the stack)
        return Rejected(400, MALFORMED, "the beacon is not JSON")
    if not isinstance(value, dict):
        return Rejected(400, MALFORMED, "the beacon is not a JSON object")
    extra = sorted(set(value) - {"samples", "id"})
    if extra:
        return Rejected(400, MALFORMED, f"the beacon has keys other than samples and id ({len(extra)} of them)")
    samples = value.get("samples")
    if not isinstance(samples, dict):
        return Rejected(400, MALFORMED, "the beacon's samples are not an object of DC names and milliseconds")
    if not samples:
        return Rejected(400, MALFORMED, "the beacon carries no samples")
    if len(samples) > len(known):
        return Rejected(400, UNKNOWN_DC, f"the beacon has {len(samples)} samples but there are {len(known)} DCs")
    kept: dict[str, float] = {}
    for dc, ms in samples.items():
        if dc not in known:
            return Rejected(400, UNKNOWN_DC, "the beacon names a data center that rum.targets does not")
        if isinstance(ms, bool) or not isinstance(ms, int | float):
            return Rejected(400, BAD_VALUE, f"the sample of {dc} is not a number")
        try:
            figure = float(ms)
        except OverflowError:  # (an integer past a float's range)
            figure = math.inf
        if not (math.isfinite(figure) and 0 < figure < MAX_MS):
            return Rejected(400, BAD_VALUE, f"the sample of {dc} is not between 0 and {MAX_MS:.0f} ms")
        kept[dc] = figure
    one_use = value.get("id")
    if one_use is not None and not (isinstance(one_use, str) and ID.match(one_use)):
        return Rejected(400, BAD_ID, "the beacon's id is not 16 to 32 lowercase letters and digits")
    return Beacon(kept, one_use)


#: X-Forwarded-For addresses read at most (the header a proxy relays may be long)
MAX_FORWARDED = 32


def forwarded_for(peer: str, headers: list[bytes] | None, proxies: tuple[IPNetwork, ...]) -> str:
    """The address a beacon counts for: *peer* (the TCP source), or, when *peer* is one of
    the operator's *proxies*, the last address of its ``X-Forwarded-For`` *headers* that is
    not one of theirs (each proxy appends the address it took the request from, so the
    addresses left of the last untrusted one are the client's own claims, never read). A
    proxy that names no address yields "" (the beacon then counts for none)."""
    if not _within(peer, proxies):
        return peer
    named = [a.strip() for h in (headers or ())[-MAX_FORWARDED:] for a in h.decode("latin-1").split(",")]
    for address in reversed(named[-MAX_FORWARDED:]):
        if not _within(address, proxies):
            return address
    return ""


def _within(address: str, networks: tuple[IPNetwork, ...]) -> bool:
    try:
        parsed = ipaddress.ip_address(plain(address))
    except ValueError:
        return False
    return any(parsed in n for n in networks if n.version == parsed.version)


def subnet_of(host: str, ranges: Ranges) -> IPNetwork | Rejected:
    """The client subnet of a POST from *host* (as Twisted gives the peer: an IPv4-mapped
    address counts as IPv4, an IPv6 zone is dropped), or why it counts for none."""
    try:
        return ranges.subnet(plain(host))
    except Refused as e:
        return Rejected(403, REFUSED_SOURCE, f"the source address counts for no client subnet: {e}")
