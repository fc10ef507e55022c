"""The public RUM listener: a node's own HTTP(S) port for browsers, apart from the admin API.

Routes (anything else is 404 JSON, another method 405 JSON):

- ``GET /rum/v1/snippet.js[?zone=ZONE]``: the measuring script (`gtmcluster.rum.snippet`),
  cacheable for an hour, its one-use names under ``rum.zone`` (or ZONE, one of `Settings.zones`);
- ``POST /rum/v1/beacon``: one beacon (`gtmcluster.rum.beacon`), answered 204 when kept and
  4xx JSON ``{"error": reason, "message": ...}`` when not; ``OPTIONS`` answers the CORS
  preflight (any origin, no credentials);
- ``GET /rum/v1/object``: a few bytes with ``Timing-Allow-Origin: *``, so a node can itself be
  a data center's measurement target.

Nothing here trusts the client. A connection is counted when it opens (`Limits.connections`
in all, `Limits.connections_per_source` from one source: an IPv4 address or an IPv6 /64,
`runtime.sources`), past either refused 503. It has `Limits.read_timeout` seconds to send a
whole request, head and body (and again after each answer), else it is cut: a client
dribbling its headers holds a slot that long at most. The request line and headers are
capped (`Limits.head_bytes`, `Limits.headers`); a beacon's source subnet, its rate
(`gtmcluster.rum.limits`) and its ``Content-Length`` (``max_body``) are judged as soon as
its headers are in, before a byte of its body is read; a chunked body is cut at
``max_body``. A refused request is answered at once with ``Connection: close`` and what its
client still sends is dropped for at most `DRAIN_SECONDS`.

A kept beacon is handed to *keep* (the wiring's: it writes the store records); this module
keeps nothing of it. Counts by outcome (`RumSite.beacons`: ``kept`` and each reason of
`beacon.REASONS`) and of connections closed (`RumSite.closed`) are for ``/metrics``.
"""

from __future__ import annotations

import io
import json
import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http, resource, server

from gtmcluster.proximity.clients import IPNetwork, Ranges
from gtmcluster.rum import beacon, snippet
from gtmcluster.rum.beacon import Beacon, Rejected
from gtmcluster.rum.limits import BeaconRate, Rates
from gtmcluster.runtime.httpclose import end_after_refusal
from gtmcluster.runtime.slots import Caps, Held, Slots
from gtmcluster.runtime.sources import source_of

log = Logger()

SNIPPET = b"/rum/v1/snippet.js"
BEACON = b"/rum/v1/beacon"
OBJECT = b"/rum/v1/object"
#: the methods each route answers
ROUTES: dict[bytes, tuple[bytes, ...]] = {
    SNIPPET: (b"GET", b"HEAD"),
    BEACON: (b"POST", b"OPTIONS"),
    OBJECT: (b"GET", b"HEAD", b"OPTIONS"),
}
#: what a measurement target answers
OBJECT_BODY = b"gtmcluster rum\n"
#: seconds a refused request's client may go on sending (dropped) before the connection closes
DRAIN_SECONDS = 2.0
_REASONS = {429: "Too Many Requests", 431: "Request Header Fields Too Large"}


@dataclass(frozen=True)
class Limits:
    """The listener's own caps: *connections* open in all and *connections_per_source*;
    *read_timeout* seconds for a whole request; *head_bytes* for the request line and
    headers together, at most *headers* of them."""

    connections: int = 1024
    connections_per_source: int = 16
    read_timeout: float = 10.0
    head_bytes: int = 8192
    headers: int = 64


@dataclass(frozen=True)
class Settings:
    """What the listener serves and takes, from the config (``rum:``): each DC's target URL
    (the beacon's DC names are these), the special-purpose source networks accepted, the
    beacon rates, the bound on a beacon's body; *zone*: the zone of the one-use names
    (``rum.zone``; none when empty); *zones*: the zones a snippet may be asked for instead
    (``?zone=``: the wide IPs' zones; any DNS name when empty); *origin*: the listener's
    public origin as browsers reach it (``https://rum.example.net``; when empty the snippet
    posts to where it was loaded from)."""

    targets: Mapping[str, str]
    allow: tuple[IPNetwork, ...] = ()
    rates: Rates = field(default_factory=Rates)
    max_body: int = 4096
    zone: str = ""
    zones: frozenset[str] = frozenset()
    origin: str = ""
    limits: Limits = field(default_factory=Limits)
    #: the operator's reverse proxies (``rum.trusted_proxies``): a beacon they relay counts
    #: for the client their ``X-Forwarded-For`` names (the last address not theirs)
    proxies: tuple[IPNetwork, ...] = ()


Keep = Callable[[IPNetwork, Beacon], None]


def _dumps(body: Any) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode() + b"\n"


@lru_cache(maxsize=64)
def _snippet(targets: tuple[tuple[str, str], ...], zone: str, origin: str) -> bytes:
    return snippet.render(dict(targets), zone, origin)


class RumRequest(server.Request):
    """A request whose body is kept in memory up to the listener's ``max_body`` (a chunked
    body beyond it is cut: 413); a beacon carries the subnet it counts for."""

    subnet: IPNetwork | None = None
    _received = 0
    _body: io.BytesIO

    def gotLength(self, length: int | None) -> None:
        self.content = self._body = io.BytesIO()
        self._received = 0

    def handleContentChunk(self, data: bytes) -> None:
        channel = self.channel
        if not isinstance(channel, RumChannel) or channel.refused:
            return
        self._received += len(data)
        max_body = channel.site.settings.max_body
        if self._received > max_body:
            channel.refuse(beacon.too_large(max_body), counted=self.subnet is not None)
            return
        self._body.write(data)


class RumChannel(http.HTTPChannel):
    """One connection to the listener: counted (or refused) when it opens, given
    `Limits.read_timeout` for each whole request, each request judged when its headers are in."""

    site: RumSite
    refused = False
    source = ""
    _held: Held | None = None
    _deadline: IDelayedCall | None = None
    _drain: IDelayedCall | None = None

    def connectionMade(self) -> None:
        super().connectionMade()
        self.setTimeout(None)  # (our own deadline instead of twisted.web's idle timeout)
        limits = self.site.settings.limits
        self.MAX_LENGTH = limits.head_bytes
        self.totalHeadersSize = limits.head_bytes
        self.maxHeaders = limits.headers
        transport: Any = self.transport
        self.source = source_of(str(getattr(transport.getPeer(), "host", "")))
        why = self.site.slots.take(self.source, Caps(limits.connections, limits.connections_per_source))
        if why is not None:
            self.site.closed["connections"] += 1
            self.refuse(Rejected(503, "connections", f"too many connections to this listener {why}"), counted=False)
            return
        self._held = Held(self.site.slots, self.source)
        self._expect_request()

    def _expect_request(self) -> None:
        self._stop_deadline()
        self._deadline = self.callLater(self.site.settings.limits.read_timeout, self._late)

    def _stop_deadline(self) -> None:
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None

    def _late(self) -> None:
        """No whole request in time: cut the connection."""
        self._deadline = None
        self.site.closed["deadline"] += 1
        self.refused = True
        transport: Any = self.transport
        transport.abortConnection()

    def allHeadersReceived(self) -> None:
        method: bytes = self._command
        path = self._path.split(b"?", 1)[0]
        request = self.requests[-1]
        settings = self.site.settings
        is_beacon = method == b"POST" and path == BEACON
        if is_beacon:
            transport: Any = self.transport
            peer = str(getattr(transport.getPeer(), "host", ""))
            if settings.proxies:
                peer = beacon.forwarded_for(
                    peer, request.requestHeaders.getRawHeaders(b"x-forwarded-for"), settings.proxies
                )
            subnet = beacon.subnet_of(peer, self.site.ranges)
            if isinstance(subnet, Rejected):
                self.refuse(subnet)
                return
            over = self.site.rate.take(subnet)
            if over is not None:
                self.refuse(over)
                return
            request.subnet = subnet
        if self.length is not None and self.length > settings.max_body:
            self.refuse(beacon.too_large(settings.max_body), counted=is_beacon)
            return
        super().allHeadersReceived()

    def allContentReceived(self) -> None:
        if self.refused:
            return
        self._stop_deadline()  # (the request is all in: answered now)
        super().allContentReceived()

    def requestDone(self, request: Any) -> None:
        if not self.refused:
            self._expect_request()
        super().requestDone(request)

    def refuse(self, why: Rejected, counted: bool = True) -> None:
        """Answer *why* now and read nothing more: what the client still sends is dropped,
        and the connection closes once it stops or after DRAIN_SECONDS. *counted*: a
        beacon's refusal (``gtm_rum_beacons_total``)."""
        if self.refused:
            return
        self.refused = True
        if counted:
            self.site.beacons[why.reason] += 1
        self._stop_deadline()
        self.setRawMode()
        body = _dumps(why.body())
        head = [
            f"HTTP/1.1 {why.status} {_REASONS.get(why.status) or http.RESPONSES[why.status].decode()}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            "Cache-Control: no-store",
            "Access-Control-Allow-Origin: *",
            "X-Content-Type-Options: nosniff",
            "Connection: close",
        ]
        if why.status == 429:
            head.append(f"Retry-After: {max(1, math.ceil(why.retry))}")
        transport: Any = self.transport
        transport.write("\r\n".join(head).encode() + b"\r\n\r\n" + body)
        self.setTimeout(None)
        self._drain = end_after_refusal(transport, self.isSecure(), self.callLater, DRAIN_SECONDS)

    def lineLengthExceeded(self, line: bytes) -> None:
        """A request line or header over `Limits.head_bytes`."""
        limit = self.site.settings.limits.head_bytes
        if getattr(self, "_HTTPChannel__first_line", 1):
            self.refuse(Rejected(414, "bad_request", f"the request line is over {limit} bytes"), counted=False)
        else:
            self.refuse(Rejected(431, "bad_request", f"a request header is over {limit} bytes"), counted=False)

    def _respondToBadRequestAndDisconnect(self) -> None:
        """twisted.web's answer to a malformed request (or headers past the caps), as JSON."""
        self.refuse(Rejected(400, "bad_request", "a malformed request (its line, headers or length)"), counted=False)

    def lineReceived(self, line: bytes) -> None:
        if not self.refused:
            super().lineReceived(line)

    def rawDataReceived(self, data: bytes) -> None:
        if not self.refused:
            super().rawDataReceived(data)

    def connectionLost(self, reason: Failure) -> None:  # type: ignore[override]
        self._stop_deadline()
        if self._drain is not None and self._drain.active():
            self._drain.cancel()
        self._drain = None
        if self._held is not None:
            self._held.release()
        super().connectionLost(reason)


def _json(request: server.Request, status: int, body: Any) -> bytes:
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"application/json")
    request.setHeader(b"cache-control", b"no-store")
    return _dumps(body)


class Routes(resource.Resource):
    """The listener's routes (`ROUTES`)."""

    isLeaf = True

    def __init__(self, site: Callable[[], RumSite]):
        super().__init__()
        self._site = site

    def render(self, request: server.Request) -> bytes:
        request.setHeader(b"server", b"gtmcluster")
        request.setHeader(b"x-content-type-options", b"nosniff")
        request.setHeader(b"access-control-allow-origin", b"*")
        path: bytes = request.path
        method: bytes = request.method
        allowed = ROUTES.get(path)
        if allowed is None:
            return _json(request, 404, {"error": "not_found", "message": "no such route on the RUM listener"})
        if method not in allowed:
            request.setHeader(b"allow", b", ".join(allowed))
            return _json(request, 405, {"error": "method", "message": "this route does not take that method"})
        if method == b"OPTIONS":
            request.setResponseCode(204)
            request.setHeader(b"access-control-allow-methods", b", ".join(m for m in allowed if m != b"OPTIONS"))
            request.setHeader(b"access-control-allow-headers", b"content-type")
            request.setHeader(b"access-control-max-age", b"86400")
            return b""
        if path == OBJECT:
            request.setHeader(b"timing-allow-origin", b"*")
            request.setHeader(b"content-type", b"text/plain")
            request.setHeader(b"cache-control", b"no-store")
            return OBJECT_BODY
        if path == SNIPPET:
            return self._snippet(request)
        return self._beacon(request)

    def _snippet(self, request: server.Request) -> bytes:
        settings = self._site().settings
        asked = (request.args or {}).get(b"zone", [])
        zone = settings.zone
        if asked:
            named = snippet.zone_name(asked[0].decode("utf-8", "replace")) if len(asked) == 1 else None
            if named is None or (settings.zones and named not in settings.zones):
                return _json(request, 400, {"error": "zone", "message": "zone= names no zone this group serves"})
            zone = named
        request.setHeader(b"content-type", b"application/javascript; charset=utf-8")
        request.setHeader(b"cache-control", b"public, max-age=3600")
        return _snippet(tuple(sorted(settings.targets.items())), zone, settings.origin)

    def _beacon(self, request: server.Request) -> bytes:
        site = self._site()
        subnet = getattr(request, "subnet", None)
        if subnet is None:  # (judged when its headers came in; never absent)
            return _json(request, 400, {"error": beacon.REFUSED_SOURCE, "message": "no source subnet"})
        body = request.content.getvalue() if isinstance(request.content, io.BytesIO) else b""
        parsed = beacon.parse(body, site.settings.targets, site.settings.max_body)
        if isinstance(parsed, Rejected):
            site.beacons[parsed.reason] += 1
            return _json(request, parsed.status, parsed.body())
        try:
            site.keep(subnet, parsed)
        except Exception:
            log.failure("a beacon could not be kept")
            return _json(request, 503, {"error": "not_kept", "message": "the node could not keep the beacon"})
        site.beacons[beacon.KEPT] += 1
        request.setResponseCode(204)
        request.setHeader(b"cache-control", b"no-store")
        return b""


class RumSite(server.Site):
    """The listener's site: its settings (`configure` on a reload), its counts, and the
    beacon rates and connection slots it keeps."""

    protocol = RumChannel  # type: ignore[assignment]
    requestFactory = RumRequest

    def __init__(self, settings: Settings, keep: Keep, reactor: IReactorTime | None = None):
        super().__init__(Routes(lambda: self), reactor=reactor, timeout=None)
        clock: Any = self.reactor  # (the global reactor when None)
        self.noisy = False
        self.displayTracebacks = False
        self.keep = keep
        self.clock = clock
        self.slots = Slots()
        #: beacons by outcome: "kept" and each reason of beacon.REASONS
        self.beacons: Counter[str] = Counter()
        #: connections refused ("connections") or cut at the deadline ("deadline")
        self.closed: Counter[str] = Counter()
        self.settings = settings
        self.ranges = Ranges(settings.allow)
        self.rate = BeaconRate(settings.rates, clock.seconds)

    def configure(self, settings: Settings) -> None:
        """Take new settings (a reload): new requests judge by them; the rate buckets stay."""
        if settings.allow != self.settings.allow:
            self.ranges = Ranges(settings.allow)
        if settings.rates != self.settings.rates:
            self.rate.configure(settings.rates)
        self.settings = settings

    def log(self, request: Any) -> None:
        pass


def rum_site(
    targets: Mapping[str, str],
    keep: Keep,
    *,
    allow: Iterable[IPNetwork] = (),
    rates: Rates | None = None,
    max_body: int = 4096,
    zone: str = "",
    zones: Collection[str] = (),
    origin: str = "",
    limits: Limits | None = None,
    reactor: IReactorTime | None = None,
    proxies: tuple[IPNetwork, ...] = (),
) -> RumSite:
    """The listener's site (serve it on the member's ``rum`` address; over TLS through
    `gtmcluster.rum.tls.wrap`): beacons for the DCs of *targets* handed to *keep*."""
    settings = Settings(
        targets=dict(targets),
        allow=tuple(allow),
        rates=rates or Rates(),
        max_body=max_body,
        zone=zone,
        zones=frozenset(zones),
        origin=origin,
        limits=limits or Limits(),
        proxies=proxies,
    )
    return RumSite(settings, keep, reactor)
