"""An event a webhook is told of, its id, its JSON body and its signature.

The body is one JSON object: ``event`` (the kind, one of `config.alerts.EVENTS`), ``id``,
``time`` (when this node noticed it, RFC 3339 UTC), ``node`` (the member that noticed it),
``group`` and ``object`` (what it is about: ``{"virtual_server": ..., "datacenter": ...}``,
``{"pool": ...}``, ``{"peer": ...}``, ...), and ``reason`` (why, in words).

The id is the same on every member that notices the same event: a hash of the group, the
kind, the object and an *anchor*, something every member holds alike (the newest version of
the replicated verdicts that decided a server's or link's state; a config bundle's
generation and digest; a certificate's serial). A receiver drops a repeat by it.

The signature is Stripe's and GitHub's form: HMAC-SHA256 with the webhook's secret over
``"<unix seconds>.<body>"``, sent as ``X-Gtmcluster-Signature: t=<unix seconds>,v1=<hex>``;
the time is the attempt's, so a receiver can refuse an old replay.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: the header carrying the signature
SIGNATURE_HEADER = "X-Gtmcluster-Signature"
#: events about the group's shared state (every member notices them alike): one member sends
GROUP = "group"
#: events only the member that noticed them knows of (its own config run, its certificate):
#: that member sends
OWN = "own"


@dataclass(frozen=True, slots=True)
class Event:
    """One event, as the node noticed it."""

    kind: str
    object: Mapping[str, Any]
    reason: str
    time: float  # unix seconds, this node's clock
    node: str
    group: str
    #: what every member that notices this event holds alike (see the module's doc)
    anchor: str
    #: `GROUP` or `OWN`
    scope: str = GROUP
    #: members that may not send it (a peer event: the peer it is about)
    excluded: frozenset[str] = field(default_factory=frozenset)

    @property
    def id(self) -> str:
        return event_id(self.group, self.kind, self.object, self.anchor)

    def body(self) -> bytes:
        """The JSON body sent (keys in a fixed order; the same bytes on every attempt)."""
        stamp = datetime.datetime.fromtimestamp(self.time, datetime.UTC)
        return json.dumps(
            {
                "event": self.kind,
                "id": self.id,
                "time": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "node": self.node,
                "group": self.group,
                "object": dict(self.object),
                "reason": self.reason,
            },
            separators=(",", ":"),
        ).encode()


def event_id(group: str, kind: str, obj: Mapping[str, Any], anchor: str) -> str:
    """The id of an event (32 hex digits): the same for the same inputs on every member."""
    text = json.dumps([group, kind, sorted(obj.items()), anchor], separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    """The ``X-Gtmcluster-Signature`` value for *body* sent at *timestamp*."""
    mac = hmac.new(secret, str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(secret: bytes, header: str, body: bytes, now: float, tolerance: float = 300.0) -> bool:
    """Whether *header* signs *body* with *secret* within *tolerance* seconds of *now* (a
    receiver's check, as the docs show it; the tests' receiver uses it)."""
    fields: dict[str, list[str]] = {}
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        fields.setdefault(key, []).append(value)
    try:
        timestamp = int(fields.get("t", [""])[0])
    except ValueError:
        return False
    if abs(now - timestamp) > tolerance:
        return False
    expected = signature(secret, timestamp, body).partition(",v1=")[2]
    return any(hmac.compare_digest(expected, got) for got in fields.get("v1", []))
