"""Who may ask the HTTP API what: the checks a request passes before its body is read.

Pure policy (nothing from Twisted): from a request's method, target and headers, and the
address its connection reached, decide whether to refuse it, with which status and why.
`gtmcluster.api.connection` runs this as soon as a request's headers are in, so a refused
request's body is never read.

- **Host** must name this node: an IP literal of the address the connection reached (or of
  the member's ``api`` address), ``localhost`` when that address is loopback, one of
  ``api.names``, or over HTTPS the member's name (the one its certificate proves);
  anything else is 421 (a page whose name was rebound to the node's address sends its own
  name). A request-target must be a path (``/...``).
- **Writes** (any method but GET and HEAD, and any request with a body) must be
  ``application/json`` (which no page can send to another origin without a CORS preflight,
  which the API never grants), must carry no ``Origin`` but the node's own and no
  ``Sec-Fetch-Site`` but same-origin (or none), and hold at most `MAX_BODY` bytes.
- **Who**: each route needs a role (``Route.role``, `identity.RANKS`). The request's
  identity (`identify`) is the bearer token's when it gives one (the config's single
  ``api.token``, or the node's own, is the identity ``api-token``, an admin; a token of the
  users file is ``NAME.SECRET``, checked against NAME's hash, which may take a check off
  the reactor: `Pending`), else its client certificate's (``api.tls.client_ca``), else none.
  A wrong token is 403; no identity is 401, but for the dashboard page (``anyone``) and for
  reads needing ``viewer`` on loopback where ``token_for_reads`` is off (the identity
  ``anonymous``, a viewer); a role below the route's is 403 naming the role needed.

The identity a request proved (not ``anonymous``) counts its answer and connection among
the token holders' (`gtmcluster.api.slots`).
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from gtmcluster.api.identity import ANONYMOUS, SINGLE_TOKEN, UNKNOWN, Identity, Known
from gtmcluster.config.addresses import IPAddress
from gtmcluster.config.model import ApiSettings, Member
from gtmcluster.config.users import NO_USERS, ApiUser, ApiUsers
from gtmcluster.runtime import tokenhash

#: bytes a request body may hold (admin actions and reloads send next to nothing)
MAX_BODY = 64 * 1024

#: where the token comes from, for the 401 and 403 answers
TOKEN_HELP = (
    "Authorization: Bearer TOKEN, with a token of the users file (api.users_file), the config's "
    "api.token (or api.token_file), or when the config sets none the token the node made in its "
    "state_dir (file api-token); `gtmcluster dashboard-url` prints the dashboard's address with it"
)

# (ASCII digits: \d would take any Unicode digit, which int() reads or refuses)
_BRACKETED = re.compile(r"\[([0-9A-Fa-f:.]+)\](?::([0-9]{1,5}))?")
_PLAIN = re.compile(r"([A-Za-z0-9._-]+)(?::([0-9]{1,5}))?")
READS = frozenset({"GET", "HEAD"})


@dataclass(frozen=True)
class Policy:
    """What this node's API accepts, from its config."""

    token: str
    #: reads need the token too (the API listens beyond loopback, or api.token_for_reads)
    token_for_reads: bool
    #: host names (lowercase) a Host header may give besides IP literals of the node
    names: frozenset[str]
    #: the member's api address (the connection's own address counts too: a wildcard bind)
    address: IPAddress
    max_body: int = MAX_BODY
    #: the identities of the users file, and the operators' CA (PEM) of client certificates
    users: ApiUsers = NO_USERS
    client_ca_pem: bytes = b""


@dataclass(frozen=True)
class Incoming:
    """A request as its headers describe it (header values as sent, every one of them)."""

    method: str
    target: str
    hosts: Sequence[str]
    local: str  # the address the connection reached
    length: int | None  # of the body: 0 without one, None when chunked
    secure: bool = False
    origin: Sequence[str] = ()
    fetch_site: Sequence[str] = ()
    content_type: Sequence[str] = ()
    authorization: Sequence[str] = ()


@dataclass(frozen=True)
class Refusal:
    code: int
    #: short label for /metrics: host, origin, token, role, token_checks, content_type,
    #: too_large, bad_request
    reason: str
    message: str
    #: the role the route needs, for a request whose identity has a lower one
    role_needed: str = ""


@dataclass(frozen=True)
class Pending:
    """A token of the users file not checked yet: *user*'s, if it matches the hash."""

    token: str
    user: ApiUser


def policy(settings: ApiSettings, member: Member, generated: str) -> Policy:
    """The policy of *member*'s API under *settings*; *generated* is the node's own token,
    used when the config sets none."""
    return _policy(settings, member, generated)


@lru_cache(maxsize=4)
def _policy(settings: ApiSettings, member: Member, generated: str) -> Policy:
    names = frozenset(n.replace("{node}", member.name).lower() for n in settings.names)
    if settings.tls:
        # over HTTPS the member's name is the one its certificate proves (a client that
        # reached it under that name has checked it): no rebound page can give it
        names |= {member.name.lower()}
    beyond_loopback = not member.api.host.is_loopback
    return Policy(
        settings.token or generated,
        beyond_loopback or settings.token_for_reads,
        names,
        member.api.host,
        users=settings.users,
        client_ca_pem=settings.client_ca_pem,
    )


def path_of(target: str) -> str:
    """The path of a request-target (no query), as routes match it."""
    path = target.split("?", 1)[0].split("#", 1)[0] or "/"
    return path if path == "/" else path.rstrip("/") or "/"


def is_read(r: Incoming) -> bool:
    return r.method in READS and r.length == 0


def screen(r: Incoming, p: Policy) -> Refusal | None:
    """Why *r* is refused under *p* whoever sends it (its target, Host, a write's origin),
    or None."""
    if not r.target.startswith("/"):
        return Refusal(400, "bad_request", "the request-target must be a path (/...)")
    if len(r.hosts) != 1:
        return Refusal(400, "bad_request", "give one Host header")
    host = _host(r.hosts[0])
    if host is None or not _names_node(host[0], r.local, p):
        shown = r.hosts[0][:100]
        return Refusal(421, "host", f"Host {shown!r} does not name this node (a name of its API goes in api.names)")
    if is_read(r):
        return None
    if len(r.origin) > 1 or (r.origin and not _same_origin(r.origin[0], host, r.secure)):
        return Refusal(403, "origin", "cross-origin requests are refused: a write must come from this node's own pages")
    if any(site.lower() not in ("same-origin", "none") for site in r.fetch_site):
        return Refusal(403, "origin", "cross-site requests are refused: a write must come from this node's own pages")
    return None


def bearer(r: Incoming) -> Refusal | str | None:
    """The bearer token *r* gives (None: none)."""
    if len(r.authorization) > 1:
        return Refusal(400, "bad_request", "give one Authorization header")
    header = r.authorization[0] if r.authorization else ""
    scheme, _, given = header.partition(" ")
    given = given.strip()
    if scheme.lower() != "bearer" or not given:
        return None
    return given


def identify(given: str, p: Policy, known: Known | None = None) -> Identity | Refusal | Pending:
    """Who bearer token *given* is under *p*, as far as is known now (*known*: the tokens
    of the users file checked already): an identity, a refusal (a wrong token), or a token
    of the users file to check against its hash."""
    if hmac.compare_digest(given.encode(errors="replace"), p.token.encode()):
        return SINGLE_TOKEN
    wrong = Refusal(403, "token", f"wrong bearer token ({TOKEN_HELP})")
    name = tokenhash.name_of(given)
    user = p.users.by_name.get(name) if name is not None else None
    if user is None or user.token_hash is None:
        return wrong
    if known is not None:
        found = known.lookup(given, p.users)
        if found is None:
            return wrong
        if isinstance(found, Identity):
            return found
        assert found is UNKNOWN
    return Pending(given, user)


def open_to_all(r: Incoming, p: Policy, need: str) -> bool:
    """Whether *r* may go on without an identity: the dashboard page, or a read needing
    ``viewer`` on loopback where ``token_for_reads`` is off (a wrong token is not looked at
    there, nor a token of the users file not checked yet: it goes on as ``anonymous``)."""
    return need == "anyone" or (is_read(r) and need == "viewer" and not p.token_for_reads)


def authorize(r: Incoming, p: Policy, need: str, who: Identity | None, why_none: str = "") -> Refusal | None:
    """Why *r*, from *who* (None: it proved no identity; *why_none*: why its certificate did
    not count), is refused for a route needing *need*, or None."""
    if who is None and not open_to_all(r, p, need):
        return Refusal(
            401,
            "token",
            f"this needs the bearer token (or client certificate) of an identity with the {need} role "
            f"({TOKEN_HELP}){why_none}",
        )
    if who is not None and not who.allowed(need):
        return Refusal(
            403,
            "role",
            f"this needs the {need} role; {who.name} is {_article(who.role)} {who.role}",
            role_needed=need,
        )
    if is_read(r):
        return None
    if len(r.content_type) != 1 or r.content_type[0].split(";", 1)[0].strip().lower() != "application/json":
        return Refusal(415, "content_type", "a write must be Content-Type: application/json")
    if r.length is not None and r.length > p.max_body:
        return Refusal(413, "too_large", f"the request body is over {p.max_body} bytes")
    return None


def who_asks(r: Incoming, p: Policy, certificate: Identity | None, known: Known | None = None) -> Identity | None:
    """The identity a request proved, its bearer token known already, else *certificate*'s;
    a loopback read that needs none is ``anonymous`` (see `authorize`)."""
    given = bearer(r)
    if isinstance(given, Refusal):
        return None
    if isinstance(given, str):
        found = identify(given, p, known)
        return found if isinstance(found, Identity) else None
    if certificate is not None:
        return certificate
    return ANONYMOUS if is_read(r) and not p.token_for_reads else None


def check(r: Incoming, p: Policy, need: str | None = None, certificate: Identity | None = None) -> Refusal | None:
    """Why *r* is refused under *p* for a route needing *need* (None: viewer for a read,
    admin for a write), or None when it may go on. A token of the users file is checked
    against its hash here (slow: the API checks it in a thread, see `ApiChannel`)."""
    need = need or ("viewer" if is_read(r) else "admin")
    refused = screen(r, p)
    if refused is not None:
        return refused
    given = bearer(r)
    if isinstance(given, Refusal):
        return given
    who: Identity | None = certificate
    if given is not None and need != "anyone":
        found = identify(given, p)
        if isinstance(found, Refusal | Pending) and open_to_all(r, p, need):
            return None
        if isinstance(found, Refusal):
            return found
        if isinstance(found, Pending):
            assert found.user.token_hash is not None
            if not tokenhash.verify(found.token, found.user.token_hash):
                return Refusal(403, "token", f"wrong bearer token ({TOKEN_HELP})")
            found = Identity(found.user.name, found.user.role, "token")
        who = found
    return authorize(r, p, need, who)


def _article(role: str) -> str:
    return "an" if role[0] in "aeiou" else "a"


def _host(value: str) -> tuple[str, int | None] | None:
    """(host, port) of a Host header value: the host lowercased, without brackets or a
    final dot; None when it is not a host[:port]."""
    m = _BRACKETED.fullmatch(value) or _PLAIN.fullmatch(value)
    if m is None:
        return None
    name = m.group(1).lower()
    if name.endswith(".") and len(name) > 1:
        name = name[:-1]
    port = int(m.group(2)) if m.group(2) else None
    if port is not None and not 0 < port < 65536:
        return None
    return name, port


def _address(text: str) -> IPAddress | None:
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _names_node(host: str, local: str, p: Policy) -> bool:
    if host in p.names:
        return True
    here = _address(local)
    if host == "localhost":
        return here is not None and here.is_loopback
    asked = _address(host)
    return asked is not None and asked in (here, p.address)


def _same_origin(origin: str, host: tuple[str, int | None], secure: bool) -> bool:
    """Whether *origin* (an Origin header) is the origin of the node's own pages, as this
    request's Host names them."""
    scheme = "https" if secure else "http"
    default = 443 if secure else 80
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:
        return False
    if parts.scheme.lower() != scheme or parts.hostname is None or parts.path or parts.query:
        return False
    name = parts.hostname.lower().rstrip(".") or parts.hostname
    return (name, port or default) == (host[0], host[1] or default)
