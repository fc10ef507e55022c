"""The API's connections: counted when they open, given deadlines, and each request checked
before its body is read.

A connection is counted when it opens (`gtmcluster.api.slots.Connections`, caps in
``api.limits``): past a cap it displaces the least recently active connection that never
showed the token, or is refused (503) when every one there did. It then has
``idle_timeout`` seconds to send a whole request head (and again after each answer), else
it is closed.

A request is checked (`gtmcluster.api.guard`: Host, Origin, Content-Type, bearer token,
length) by `ApiChannel` as soon as its headers are in. A refused one is answered at once
(``Connection: close``) and its body, if any, is never read: what the client still sends is
dropped for at most `DRAIN_SECONDS`, then the connection is closed. An admitted body is
kept in memory, and a chunked one is cut at the limit (413). Only then does `Api` route it.
What twisted.web refuses itself (a line over 16 KiB, a malformed header) is answered as
JSON too.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http, server

from gtmcluster.api import clientcert, guard, sending
from gtmcluster.api.audit import Auditor
from gtmcluster.api.guard import Policy, Refusal
from gtmcluster.api.identity import ANONYMOUS, Identity
from gtmcluster.api.server import Api, Route, default_limits, dumps
from gtmcluster.api.slots import Connections
from gtmcluster.config.model import ApiLimits
from gtmcluster.runtime.httpclose import end_after_refusal
from gtmcluster.runtime.slots import Caps
from gtmcluster.runtime.sources import source_of
from gtmcluster.runtime.tokenhash import Hash

#: seconds a refused request's client may go on sending (dropped) before the connection is
#: closed: time to finish sending a small body and read the answer, never to hold on
DRAIN_SECONDS = 2.0
#: status texts twisted.web does not know
_REASONS = {421: "Misdirected Request", 429: "Too Many Requests", 431: "Request Header Fields Too Large"}
log = Logger()
#: the refusals of reads that the audit log records too (of writes: every one): those of
#: their credentials (`guard.Refusal.reason`)
AUDITED = frozenset({"token", "role", "token_checks"})
#: what a connection over a cap is told
BUSY_CONNECTIONS = "too many connections to this node's API{where}; try again shortly"


class ApiRequest(server.Request):
    """A request whose body is kept in memory, up to the policy's limit (a chunked body
    beyond it is cut: 413)."""

    #: set by ApiChannel once the request passed its checks
    admitted = False
    #: it proved an identity (a valid token, a client certificate), needed or not
    token_shown = False
    #: who made it (`identity.Identity`: name, role, how proven), for its handler and the
    #: record of changes; None only for the dashboard page asked with nothing shown
    identity: Identity | None = None
    max_body = guard.MAX_BODY
    _received = 0
    _body: io.BytesIO

    def gotLength(self, length: int | None) -> None:
        self.content = self._body = io.BytesIO()
        self._received = 0

    def handleContentChunk(self, data: bytes) -> None:
        channel = self.channel
        if not isinstance(channel, ApiChannel) or channel.refused:
            return
        self._received += len(data)
        if self._received > self.max_body:
            channel.refuse(Refusal(413, "too_large", f"the request body is over {self.max_body} bytes"))
            return
        self._body.write(data)


class ApiChannel(http.HTTPChannel):
    """An HTTP connection to the API: counted among the connections (or refused) when it
    opens, given `ApiLimits.idle_timeout` to send each request head, and checking each
    request when its headers are in."""

    site: Site
    #: a request was refused: nothing more is read from this connection
    refused = False
    #: the source it came from (`sources.source_of`: an IPv4 address, an IPv6 /64), which
    #: every per-source cap counts
    source = ""
    _drain: IDelayedCall | None = None
    _deadline: IDelayedCall | None = None
    #: a token of the users file is being checked: what the client sends meanwhile waits
    #: in _held (reading is paused), and the end of a request without a body is noted
    _pending = False
    _held: list[bytes]
    _content_done = False
    _gone = False
    #: the identity the client certificate proves (or why none), by users file and CA
    _certified: tuple[Any, Identity | str | None] | None = None

    def connectionMade(self) -> None:
        super().connectionMade()
        transport: Any = self.transport
        self.source = source_of(str(getattr(transport.getPeer(), "host", "")))
        api = self.site.api
        limits = api.limits()
        # (twisted.web's own, in whole seconds: between reads of a request body)
        self.timeOut = max(1, round(limits.idle_timeout))
        self.setTimeout(self.timeOut)
        caps = Caps(limits.connections, limits.connections_per_source)
        admitted, displaced = self.site.connections.admit(self, self.source, caps)
        for other in displaced:
            api.closed["displaced"] += 1
            sending.abort(other.transport)
        if not admitted:
            api.refused["connections"] += 1
            where = " from this address" if self.site.connections.by_source[self.source] >= caps.per_source else ""
            self.refuse(Refusal(503, "connections", BUSY_CONNECTIONS.format(where=where)))
            return
        self._expect_head()

    def _expect_head(self) -> None:
        """Start the time the client has to send a whole request head."""
        self._stop_deadline()
        self._deadline = self.callLater(self.site.api.limits().idle_timeout, self._idle)

    def _stop_deadline(self) -> None:
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None

    def timeoutConnection(self) -> None:
        """twisted.web's own idle timeout (a request body that stopped coming)."""
        self._idle()

    def _idle(self) -> None:
        """No whole request head in time: close (what is still unsent may go for
        `ApiLimits.stall_timeout` more, then the connection is aborted)."""
        self._stop_deadline()
        self.setTimeout(None)
        if self._drain is not None:  # closing already
            return
        self.site.api.closed["idle"] += 1
        transport: Any = self.transport
        self.refused = True  # read nothing more
        self.loseConnection()
        self._drain = self.callLater(self.site.api.limits().stall_timeout, lambda: sending.abort(transport))

    def requestDone(self, request: Any) -> None:
        # (before twisted.web reads a pipelined request it kept: its head stops the clock)
        if not self.refused:
            self._expect_head()
        super().requestDone(request)

    def allHeadersReceived(self) -> None:
        self._stop_deadline()
        request = self.requests[-1]
        headers = request.requestHeaders

        def values(name: bytes) -> list[str]:
            return [v.decode("latin-1") for v in headers.getRawHeaders(name, [])]

        # (HTTPChannel keeps the request line in these until the body is in)
        method: bytes = self._command
        target: bytes = self._path
        transport: Any = self.transport
        incoming = guard.Incoming(
            method=method.decode("latin-1"),
            target=target.decode("latin-1"),
            hosts=values(b"host"),
            local=str(getattr(transport.getHost(), "host", "")),
            length=self.length,
            secure=self.isSecure(),
            origin=values(b"origin"),
            fetch_site=values(b"sec-fetch-site"),
            content_type=values(b"content-type"),
            authorization=values(b"authorization"),
        )
        api = self.site.api
        policy = api.policy_for(incoming)
        need = api.need_of(incoming)
        given = guard.bearer(incoming)
        refusal = guard.screen(incoming, policy) or (given if isinstance(given, Refusal) else None)
        if refusal is not None:
            self._refused(refusal, incoming)
            return
        who: Identity | None = None
        why_none = ""
        if isinstance(given, str) and need != "anyone":
            found = guard.identify(given, policy, api.known)
            if isinstance(found, Identity):
                who = found
            elif guard.open_to_all(incoming, policy, need) and not api.tells_who(incoming):
                pass  # (not looked at: anonymous; but whoami looks, its answer is who)
            elif isinstance(found, Refusal):
                self._refused(found, incoming)
                return
            else:
                self._check_token(found, incoming, policy, need)
                return
        elif given is None:
            who, why_none = self._certificate(policy)
        self._admit(incoming, policy, need, who, why_none)

    def _refused(self, refusal: Refusal, incoming: guard.Incoming, who: Identity | None = None) -> None:
        """Refuse *incoming* (from *who*, when known) for *refusal*: counted, recorded in the
        audit log when it was a write or refused for its credentials, and answered."""
        api = self.site.api
        api.refused[refusal.reason] += 1
        if api.auditor is not None and (not guard.is_read(incoming) or refusal.reason in AUDITED):
            asked = f"{incoming.method[:10]} {guard.path_of(incoming.target)}"
            api.auditor.refused(who, self.source, asked, refusal.code, refusal.message)
        self.refuse(refusal)

    def _certificate(self, policy: Policy) -> tuple[Identity | None, str]:
        """The identity this connection's client certificate proves (None and why not, when
        it shows none that counts), found once per connection and users file."""
        if not self.isSecure() or not policy.client_ca_pem:
            return None, ""
        key = (policy.users, policy.client_ca_pem)
        if self._certified is None or self._certified[0][0] is not key[0] or self._certified[0][1] != key[1]:
            transport: Any = self.transport
            try:
                shown = transport.getPeerCertificate()
            except Exception:  # no TLS connection (yet)
                shown = None
            found = None if shown is None else clientcert.identify(shown.to_cryptography(), key[1], key[0])
            self._certified = (key, found)
        found = self._certified[1]
        if found is None:
            return None, ""
        return (found, "") if isinstance(found, Identity) else (None, found)

    def _check_token(self, pending: guard.Pending, incoming: guard.Incoming, policy: Policy, need: str) -> None:
        """Check a token of the users file against its hash, in a thread, reading nothing
        more of the connection meanwhile; refused at once (429) past the bound on checks."""
        api = self.site.api
        why = api.known.may_check(self.source)
        if why is not None:
            self._refused(Refusal(429, "token_checks", f"{why}: try again in a few seconds"), incoming)
            return
        self._pending = True
        self._held = []
        self._content_done = False
        self.setRawMode()  # what follows the head waits in _held
        self._networkProducer.pauseProducing()
        user = pending.user
        assert user.token_hash is not None

        def checked(good: object) -> None:
            api.known.done()
            identity = Identity(user.name, user.role, "token") if good is True else None
            api.known.learn(pending.token, policy.users, identity)
            if self._gone:
                return
            self._pending = False
            self._networkProducer.resumeProducing()
            if identity is None:
                self._refused(Refusal(403, "token", f"wrong bearer token ({guard.TOKEN_HELP})"), incoming)
                return
            if not self._admit(incoming, policy, need, identity, ""):
                return
            if self._content_done:
                super(ApiChannel, self).allContentReceived()
            held, self._held = b"".join(self._held), []
            if held:
                self.rawDataReceived(held)

        def failed(failure: Failure) -> bool:
            log.failure("checking a token of the users file failed", failure)
            return False

        api.check_token(pending.token, user.token_hash).addErrback(failed).addCallback(checked)

    def _admit(self, incoming: guard.Incoming, policy: Policy, need: str, who: Identity | None, why_none: str) -> bool:
        """Go on with a request from *who* (its route needing *need*), or refuse it."""
        refusal = guard.authorize(incoming, policy, need, who, why_none)
        if refusal is not None:
            self._refused(refusal, incoming, who)
            return False
        request = self.requests[-1]
        request.admitted = True
        request.max_body = policy.max_body
        request.identity = who if who is not None or need == "anyone" else ANONYMOUS
        connections = self.site.connections
        connections.touch(self)
        if who is not None and who.proof != "none":
            request.token_shown = True
            connections.trust(self)
        super().allHeadersReceived()
        return True

    def refuse(self, refusal: Refusal) -> None:
        """Answer *refusal* now and read nothing more: what the client still sends is
        dropped, and the connection closes once it stops sending or after DRAIN_SECONDS."""
        if self.refused:
            return
        self.refused = True
        self._stop_deadline()
        self.setRawMode()
        shown = {"error": refusal.message}
        if refusal.role_needed:
            shown["role_needed"] = refusal.role_needed
        body = dumps(shown)
        head = [
            f"HTTP/1.1 {refusal.code} {_REASONS.get(refusal.code) or http.RESPONSES[refusal.code].decode()}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            "Cache-Control: no-store",
            "Connection: close",
        ]
        if refusal.code == 401:
            head.append('WWW-Authenticate: Bearer realm="gtmcluster"')
        if refusal.code == 429:
            head.append("Retry-After: 2")
        transport: Any = self.transport
        transport.write("\r\n".join(head).encode() + b"\r\n\r\n" + body)
        self.setTimeout(None)
        self._drain = end_after_refusal(transport, self.isSecure(), self.callLater, DRAIN_SECONDS)

    def lineLengthExceeded(self, line: bytes) -> None:
        """A request line or header over 16 KiB (twisted.web's limit): 414 or 431, as JSON."""
        if getattr(self, "_HTTPChannel__first_line", 1):
            self.refuse(Refusal(414, "bad_request", "the request line is over 16 KiB"))
        else:
            self.refuse(Refusal(431, "bad_request", "a request header is over 16 KiB"))

    def _respondToBadRequestAndDisconnect(self) -> None:
        """twisted.web's answer to a malformed request (a header without a colon, too many
        headers, a bad length), as JSON."""
        self.refuse(Refusal(400, "bad_request", "a malformed request (its line, a header or its length)"))

    def lineReceived(self, line: bytes) -> None:
        if not self.refused:
            super().lineReceived(line)

    def rawDataReceived(self, data: bytes) -> None:
        if self._pending:
            self._held.append(data)
        elif not self.refused:
            super().rawDataReceived(data)

    def allContentReceived(self) -> None:
        if self._pending:
            self._content_done = True
        elif not self.refused:
            super().allContentReceived()

    def connectionLost(self, reason: Failure) -> None:  # type: ignore[override]
        self._gone = True
        self._stop_deadline()
        if self._drain is not None and self._drain.active():
            self._drain.cancel()
        self._drain = None
        self.site.connections.remove(self)
        super().connectionLost(reason)


class Site(server.Site):
    """The API's site: its connections check requests early and are counted
    (`connections`); no per-request access lines in the node's log."""

    protocol = ApiChannel  # type: ignore[assignment]
    requestFactory = ApiRequest

    def __init__(self, api: Api, reactor: IReactorTime | None = None):
        super().__init__(api, reactor=reactor)
        self.api = api
        self.connections: Connections[ApiChannel] = Connections()

    def log(self, request: Any) -> None:
        pass


def site(
    routes: list[Route],
    policy: Callable[[], Policy],
    refused: Counter[str] | None = None,
    limits: Callable[[], ApiLimits] = default_limits,
    reactor: IReactorTime | None = None,
    closed: Counter[str] | None = None,
    check_token: Callable[[str, Hash], defer.Deferred[bool]] | None = None,
    auditor: Auditor | None = None,
) -> Site:
    """The API of *routes* under *policy* and *limits* (each asked again for every
    connection and request: a reload changes them); *refused* and *closed*: where refusals
    and closings are counted; *reactor*: its timers' (the global one when None);
    *check_token*: checks a token of the users file against its hash, off the reactor's
    thread (in it when None: tests); *auditor*: records writes and refusals in the audit log
    (none when None)."""
    clock = reactor.seconds if reactor is not None else None
    s = Site(Api(routes, policy, refused, limits, closed, check_token, clock, auditor), reactor)
    s.noisy = False
    s.displayTracebacks = False
    return s
