"""The HTTP API's routing and answers: routes, JSON answers and errors, and the slots of
answers in progress.

`Api` routes a request that its connection (`gtmcluster.api.connection`) has checked,
once it has a slot for its answer (`Slots`: apart for clients with and without the token,
in all and per source; 503 beyond, counted as refused "busy").

Every JSON answer, errors included, is ``application/json`` (``{"error": ...}`` with a
4xx status); a handler raises `ApiError` for bad input, and may answer later with a
Deferred (a reload reads the file over many reactor turns). Unexpected errors are logged
and answered 500 without a traceback. A large answer, and one sent from a file
(`FileAnswer`), is written at the pace its client reads (`gtmcluster.api.sending`); its
slot is held until its last byte is handed to the connection, and a client that stops
reading for ``stall_timeout`` seconds is cut.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from cryptography.x509.oid import NameOID
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import resource, server
from twisted.web.iweb import IRequest

from gtmcluster.api import guard, sending
from gtmcluster.api.apidoc import RouteDoc
from gtmcluster.api.audit import UNWRITABLE, Auditor, outcome
from gtmcluster.api.guard import Policy
from gtmcluster.api.identity import RANKS, Identity, Known
from gtmcluster.config.model import ApiLimits
from gtmcluster.nodelog.audit import AuditError
from gtmcluster.runtime import tokenhash
from gtmcluster.runtime.slots import Caps, Held, Slots
from gtmcluster.runtime.sources import source_of
from gtmcluster.runtime.tokenhash import Hash

log = Logger()

JSON = b"application/json"


class ApiError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class _Unwritable(ApiError):
    """A write refused because the audit log cannot be written (not recorded as a refusal:
    that cannot be written either)."""


@dataclass(frozen=True)
class Raw:
    """A non-JSON answer (the dashboard page, Prometheus text)."""

    content_type: bytes
    body: bytes


@dataclass(frozen=True)
class FileAnswer:
    """An answer read from an open file as it is sent (a config bundle): the file is
    closed once sent, or when the client goes."""

    content_type: bytes
    file: BinaryIO


@dataclass(frozen=True)
class Stream:
    """An answer written over time (the node's log): *start* takes the request, sets its
    headers, writes and finishes it when it will; it may raise `ApiError` before writing.
    *lasting*: it may stay open (a follower), under slots of its own, so it gives back its
    answer slot once started."""

    start: Callable[[Any], None]
    lasting: bool = False


#: a handler gets the query arguments and the path's named parts
Handler = Callable[..., Any]


@dataclass(frozen=True)
class Route:
    method: str  # GET or POST
    pattern: str  # a regular expression for the whole path, with named groups
    handler: Handler
    params: tuple[str, ...] = ()  # query parameters it accepts
    #: text fields a POST's JSON object body may give (passed with the query arguments,
    #: with who asks: `CALLER_ARGS`); empty: the body is not read
    body: tuple[str, ...] = ()
    #: the body is taken whole, up to this many bytes (over the policy's limit: a config
    #: bundle), and passed to the handler as a third argument; 0: not so
    raw_body: int = 0
    #: the role it needs (`identity.RANKS`): viewer, operator, admin; anyone for the
    #: dashboard page alone, which holds no data (it asks the API with the token from its
    #: #token=... fragment). Every route says which: the table is `routes.routes`
    role: str = field(kw_only=True)
    #: what it takes and answers, for the API's OpenAPI description (`gtmcluster.api.openapi`,
    #: which refuses a route without one): see `gtmcluster.api.apischema`
    doc: RouteDoc | None = field(default=None, kw_only=True, compare=False)
    #: a write's change in a few words, from its arguments and path's parts, for the audit
    #: log (`gtmcluster.api.audit`; None: the route says it)
    change: Callable[[dict[str, str], dict[str, str]], str] | None = field(default=None, kw_only=True)
    #: the handler gets who asks (`CALLER_ARGS`) with its arguments, as a route with a body
    #: does (``GET /api/v1/whoami``)
    who: bool = field(default=False, kw_only=True)

    def match(self, path: str) -> dict[str, str] | None:
        m = re.fullmatch(self.pattern, path)
        return None if m is None else m.groupdict()


#: what a route with a body gets of who asks, with its arguments: the identity's name, role
#: and proof, the source address, and the id of the write's audit entries ("" unaudited)
CALLER_ARGS = ("caller", "caller_role", "caller_proof", "caller_source", "change_id", "caller_certificate")


def dumps(body: Any) -> bytes:
    """*body* as the API's JSON."""
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def _json(request: IRequest, code: int, body: Any) -> bytes:
    request.setResponseCode(code)
    request.setHeader(b"content-type", JSON)
    request.setHeader(b"cache-control", b"no-store")
    return dumps(body)


def query_args(request: IRequest) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw_key, values in (request.args or {}).items():
        key = raw_key.decode(errors="replace")
        if len(values) != 1:
            raise ApiError(400, f"give {key!r} once")
        out[key] = values[0].decode(errors="replace")
    return out


def body_fields(request: IRequest, fields: tuple[str, ...]) -> dict[str, str]:
    """The text *fields* of a request's JSON object body (none when it is empty)."""
    content = getattr(request, "content", None)
    raw = content.getvalue() if isinstance(content, io.BytesIO) else b""
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the body is not JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the body is not a JSON object")
    out = {}
    for key, value in body.items():
        if key not in fields:
            raise ApiError(400, f"unknown field {key!r} (fields: {', '.join(fields)})")
        if not isinstance(value, str):
            raise ApiError(400, f"{key!r} must be text")
        out[key] = value
    return out


def token_shown(request: IRequest) -> bool:
    """Whether the request proved an identity (a valid token or client certificate), needed
    or not."""
    return bool(getattr(request, "token_shown", False))


def identity_of(request: IRequest) -> Identity | None:
    """Who made the request (`connection.ApiRequest.identity`): None only for the
    dashboard page asked by someone who showed nothing."""
    who = getattr(request, "identity", None)
    return who if isinstance(who, Identity) else None


def certificate_name(request: IRequest) -> str:
    """The common name of the TLS client certificate the request's connection showed (the
    handshake verified it: `api.tls`'s ``client_certificates: required`` or ``client_ca``);
    "" without one. With the shared token it says which operator holds it."""
    transport = getattr(getattr(request, "channel", None), "transport", None)
    get_certificate = getattr(transport, "getPeerCertificate", None)
    if get_certificate is None:
        return ""
    try:
        certificate = get_certificate()
        if certificate is None:
            return ""
        names = certificate.to_cryptography().subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    except Exception:  # not a TLS connection (yet): no certificate
        return ""
    name = names[0].value if names else ""
    return name if isinstance(name, str) else ""


def source_key(request: IRequest) -> str:
    """The source (`sources.source_of`: an IPv4 address, an IPv6 /64) the request's
    connection came from, which the per-source caps count."""
    source = getattr(getattr(request, "channel", None), "source", None)
    if isinstance(source, str):
        return source
    return source_of(str(getattr(request.getClientAddress(), "host", "")))


def _answer(request: IRequest, result: Any) -> bytes:
    if isinstance(result, Raw):
        request.setHeader(b"content-type", result.content_type)
        request.setHeader(b"cache-control", b"no-store")
        return result.body
    return _json(request, 200, result)


def _error(request: IRequest, e: BaseException, method: str, path: str) -> bytes:
    if isinstance(e, ApiError):
        return _json(request, e.code, {"error": e.message})
    log.failure("the API failed on {method} {path}", Failure(e), method=method, path=path)
    return _json(request, 500, {"error": "internal error (see the node's log)"})


def default_limits() -> ApiLimits:
    return ApiLimits()


class Api(resource.Resource):
    """Every path of the API, routed by method and path pattern; the role a request's route
    needs (`need_of`, asked by `connection.ApiChannel` before the body is read) and what is
    known of tokens (`known`); the answers in progress, by kind of client and source
    (`answers`)."""

    isLeaf = True

    def __init__(
        self,
        routes: list[Route],
        policy: Callable[[], Policy],
        refused: Counter[str] | None = None,
        limits: Callable[[], ApiLimits] = default_limits,
        closed: Counter[str] | None = None,
        check_token: Callable[[str, Hash], defer.Deferred[bool]] | None = None,
        clock: Callable[[], float] | None = None,
        auditor: Auditor | None = None,
    ):
        super().__init__()
        #: records every write and refusal (None: no audit log, as in tests of one part)
        self.auditor = auditor
        for route in routes:
            if route.role not in RANKS:
                raise ValueError(f"{route.method} {route.pattern}: no role {route.role!r} (roles: {', '.join(RANKS)})")
        self.routes = routes
        #: checks a token of the users file against its hash (slow: in a thread)
        self.check_token = check_token or (lambda token, h: defer.maybeDeferred(tokenhash.verify, token, h))
        #: the tokens of the users file checked already, and the bound on checks
        self.known = Known(clock or time.monotonic)
        self.policy = policy
        self.limits = limits
        #: requests refused by their checks or for want of a slot, by reason (see
        #: `guard.Refusal.reason`; "busy": no slot for the answer)
        self.refused: Counter[str] = refused if refused is not None else Counter()
        #: connections (and followers) the node closed, by why: displaced, idle, stalled,
        #: follow_time
        self.closed: Counter[str] = closed if closed is not None else Counter()
        #: answers in progress to clients that showed the token (True) and that did not
        self.answers = {True: Slots(), False: Slots()}

    def _routes_for(self, method: str, path: str) -> list[Route]:
        asked = "GET" if method == "HEAD" else method
        return [r for r in self.routes if r.method == asked and r.match(path) is not None]

    def need_of(self, incoming: guard.Incoming) -> str:
        """The role the route asked for needs (the highest of those matching); where none
        matches, what a read or a write needs at least: its 404 or 405 tells no more."""
        matching = self._routes_for(incoming.method, guard.path_of(incoming.target))
        if not matching:
            return "viewer" if guard.is_read(incoming) else "operator"
        return max((r.role for r in matching), key=RANKS.__getitem__)

    def tells_who(self, incoming: guard.Incoming) -> bool:
        """Whether the route asked for answers who asks (`Route.who`): its token is checked
        even where the read is open to all."""
        return any(r.who for r in self._routes_for(incoming.method, guard.path_of(incoming.target)))

    def policy_for(self, incoming: guard.Incoming) -> Policy:
        """The policy, with the body limit of the route asked for when it takes more."""
        policy = self.policy()
        for r in self._routes_for(incoming.method, guard.path_of(incoming.target)):
            if r.raw_body > policy.max_body:
                return dataclasses.replace(policy, max_body=r.raw_body)
        return policy

    def render(self, request: IRequest) -> bytes:
        method = request.method.decode(errors="replace") if request.method else "?"
        path = guard.path_of((request.path or b"/").decode(errors="replace"))
        begun: dict[str, Any] | None = None
        try:
            if not getattr(request, "admitted", False):
                # only requests that came through ApiChannel's checks are answered
                raise RuntimeError("a request reached the API without its checks")
            if method == "HEAD":
                method = "GET"
            found = [(r, parts) for r in self.routes if (parts := r.match(path)) is not None]
            if not found:
                raise ApiError(404, f"no such resource: {path}")
            allowed = sorted({r.method for r, _ in found})
            matching = [(r, parts) for r, parts in found if r.method == method]
            if not matching:
                request.setHeader(b"allow", ", ".join(allowed).encode())
                raise ApiError(405, f"{method} is not allowed here (allowed: {', '.join(allowed)})")
            route, parts = matching[0]
            args = query_args(request)
            unknown = sorted(set(args) - set(route.params))
            if unknown:
                known = ", ".join(route.params) or "none"
                raise ApiError(400, f"unknown parameter {unknown[0]!r} (parameters: {known})")
            if route.body:
                args.update(body_fields(request, route.body))
            held = self._hold(request)
            begun = self._begin(request, route, args, parts, f"{method} {path}")
            if route.body or route.who:
                who = identity_of(request)
                args.update(
                    zip(
                        CALLER_ARGS,
                        (
                            who.name if who else "",
                            who.role if who else "",
                            who.proof if who else "",
                            source_key(request),
                            begun["id"] if begun else "",
                            certificate_name(request),
                        ),
                        strict=True,
                    )
                )
            if route.raw_body:
                content = getattr(request, "content", None)
                raw = content.getvalue() if isinstance(content, io.BytesIO) else b""
                result = route.handler(args, parts, raw)
            else:
                result = route.handler(args, parts)
            if isinstance(result, Stream):
                result.start(request)
                if result.lasting:
                    held.release()
                return server.NOT_DONE_YET  # type: ignore[return-value]
            if isinstance(result, defer.Deferred):
                result.addCallbacks(
                    lambda value: self._late(request, lambda: self._result(request, self._ended(begun, value))),
                    lambda failure: self._late(request, lambda: self._failed(request, begun, failure.value, path)),
                )
                return server.NOT_DONE_YET  # type: ignore[return-value]  # twisted.web: bytes or NOT_DONE_YET
            return self._result(request, self._ended(begun, result))
        except Exception as e:
            if begun is None and method == "POST" and self.auditor is not None and not isinstance(e, _Unwritable):
                code, message = (e.code, e.message) if isinstance(e, ApiError) else (500, "internal error")
                self.auditor.refused(identity_of(request), source_key(request), f"{method} {path}", code, message)
            return self._failed(request, begun, e, path)

    def _begin(
        self, request: IRequest, route: Route, args: dict[str, str], parts: dict[str, str], asked: str
    ) -> dict[str, Any] | None:
        """Record a write about to be made (None for a read, or with no audit log); refused
        (503) when the audit log cannot be written."""
        if route.method != "POST" or self.auditor is None:
            return None
        change = route.change(args, parts) if route.change is not None else ""
        try:
            return self.auditor.begin(identity_of(request), source_key(request), asked, change, self.auditor.new_id())
        except AuditError as e:
            raise _Unwritable(503, UNWRITABLE.format(problem=e)) from None

    def _ended(self, begun: dict[str, Any] | None, result: Any) -> Any:
        if begun is not None and self.auditor is not None:
            self.auditor.end(begun, 200, detail=outcome(result))
        return result

    def _failed(self, request: IRequest, begun: dict[str, Any] | None, e: BaseException, path: str) -> bytes:
        method = request.method.decode(errors="replace") if request.method else "?"
        if begun is not None and self.auditor is not None:
            code, message = (e.code, e.message) if isinstance(e, ApiError) else (500, "internal error")
            self.auditor.end(begun, code, message)
        return _error(request, e, method, path)

    def _hold(self, request: IRequest) -> Held:
        """A slot for this request's answer, given back when it is finished or its client
        goes; ApiError 503 when its kind of client holds every one (in all or from its
        address)."""
        shown = token_shown(request)
        limits = self.limits()
        total = limits.answers if shown else limits.answers_without_token
        source = source_key(request)
        slots = self.answers[shown]
        why = slots.take(source, Caps(total, limits.answers_per_source))
        if why is not None:
            self.refused["busy"] += 1
            kind = "with the token" if shown else "without the token"
            raise ApiError(503, f"busy: as many answers {kind} as this node gives at once are in progress {why}")
        held = Held(slots, source)
        finished: Any = request
        finished.notifyFinish().addBoth(lambda _: held.release())
        return held

    def _result(self, request: IRequest, result: Any) -> bytes:
        """*result*'s body when it is small (twisted.web writes it); else NOT_DONE_YET, a
        `Sender` writing it."""
        if isinstance(result, FileAnswer):
            return self._send_file(request, result)
        body = _answer(request, result)
        if len(body) <= sending.SLICE or request.method == b"HEAD":
            return body
        request.setHeader(b"content-length", str(len(body)).encode())
        self._sender(request, io.BytesIO(body).read).start()
        return server.NOT_DONE_YET  # type: ignore[return-value]  # twisted.web: bytes or NOT_DONE_YET

    def _send_file(self, request: IRequest, answer: FileAnswer) -> bytes:
        request.setHeader(b"content-type", answer.content_type)
        request.setHeader(b"cache-control", b"no-store")
        try:
            size = os.fstat(answer.file.fileno()).st_size
        except OSError:
            answer.file.close()
            raise
        request.setHeader(b"content-length", str(size).encode())
        if request.method == b"HEAD":
            answer.file.close()
            request.write(b"")
            request.finish()
        else:
            self._sender(request, answer.file.read, answer.file.close).start()
        return server.NOT_DONE_YET  # type: ignore[return-value]

    def _sender(self, request: IRequest, read: Callable[[int], bytes], done: Callable[[], None] = lambda: None) -> Any:
        channel: Any = getattr(request, "channel", None)
        call_later = channel.callLater if channel is not None else None
        assert call_later is not None, "an answer is sent on a connection"

        def stalled() -> None:
            self.closed["stalled"] += 1

        return sending.Sender(request, read, call_later, self.limits().stall_timeout, stalled, done)

    def _late(self, request: IRequest, body: Callable[[], bytes]) -> None:
        """Write a late answer, unless the client has gone meanwhile."""
        if getattr(request, "_disconnected", False):
            return
        method = request.method.decode(errors="replace") if request.method else "?"
        try:
            data = body()
        except Exception as e:
            data = _error(request, e, method, (request.path or b"/").decode(errors="replace"))
        if not isinstance(data, bytes):  # NOT_DONE_YET: a Sender writes it
            return
        request.setHeader(b"content-length", str(len(data)).encode())
        request.write(data)
        request.finish()
