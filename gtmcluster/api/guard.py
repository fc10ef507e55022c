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
- **Writes** (any method but GET and HEAD, and any request with a body) always need the
  bearer token, must be ``application/json`` (which no page can send to another origin
  without a CORS preflight, which the API never grants), must carry no ``Origin`` but the
  node's own and no ``Sec-Fetch-Site`` but same-origin (or none), and hold at most
  `MAX_BODY` bytes.
- **Reads** need the token where ``token_for_reads`` says so (beyond loopback, or set),
  but for the dashboard page itself, which holds no data; reads of a *secret* route (the
  group's config and its bundles: config text, names of files, inline secrets) need it on
  every address, loopback included.

`shows_token` says whether a request carries the valid token even where it needs none: its
answer and its connection are then counted among the token holders' (`gtmcluster.api.slots`).
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from gtmcluster.config.addresses import IPAddress
from gtmcluster.config.model import ApiSettings, Member

#: bytes a request body may hold (admin actions and reloads send next to nothing)
MAX_BODY = 64 * 1024

#: where the token comes from, for the 401 and 403 answers
TOKEN_HELP = (
    "Authorization: Bearer TOKEN, with the config's api.token (or api.token_file), or when the "
    "config sets none the token the node made in its state_dir (file api-token); "
    "`gtmcluster dashboard-url` prints the dashboard's address with it"
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
    #: short label for /metrics: host, origin, token, content_type, too_large, bad_request
    reason: str
    message: str


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
    return Policy(settings.token or generated, beyond_loopback or settings.token_for_reads, names, member.api.host)


def path_of(target: str) -> str:
    """The path of a request-target (no query), as routes match it."""
    path = target.split("?", 1)[0].split("#", 1)[0] or "/"
    return path if path == "/" else path.rstrip("/") or "/"


def check(r: Incoming, p: Policy, public: bool = False, secret: bool = False) -> Refusal | None:
    """Why *r* is refused under *p*, or None when it may go on. *public*: the target is the
    dashboard page, which reads may fetch without the token; *secret*: the target holds
    config text, which reads may fetch only with the token, wherever they come from."""
    if not r.target.startswith("/"):
        return Refusal(400, "bad_request", "the request-target must be a path (/...)")
    if len(r.hosts) != 1:
        return Refusal(400, "bad_request", "give one Host header")
    host = _host(r.hosts[0])
    if host is None or not _names_node(host[0], r.local, p):
        shown = r.hosts[0][:100]
        return Refusal(421, "host", f"Host {shown!r} does not name this node (a name of its API goes in api.names)")
    if r.method in READS and r.length == 0:
        if (p.token_for_reads or secret) and not public:
            return _token(r, p)
        return None
    if len(r.origin) > 1 or (r.origin and not _same_origin(r.origin[0], host, r.secure)):
        return Refusal(403, "origin", "cross-origin requests are refused: a write must come from this node's own pages")
    if any(site.lower() not in ("same-origin", "none") for site in r.fetch_site):
        return Refusal(403, "origin", "cross-site requests are refused: a write must come from this node's own pages")
    refused = _token(r, p)
    if refused is not None:
        return refused
    if len(r.content_type) != 1 or r.content_type[0].split(";", 1)[0].strip().lower() != "application/json":
        return Refusal(415, "content_type", "a write must be Content-Type: application/json")
    if r.length is not None and r.length > p.max_body:
        return Refusal(413, "too_large", f"the request body is over {p.max_body} bytes")
    return None


def shows_token(r: Incoming, p: Policy) -> bool:
    """Whether *r* carries *p*'s token (once, valid), needed or not."""
    return len(r.authorization) == 1 and _token(r, p) is None


def _token(r: Incoming, p: Policy) -> Refusal | None:
    if len(r.authorization) > 1:
        return Refusal(400, "bad_request", "give one Authorization header")
    header = r.authorization[0] if r.authorization else ""
    scheme, _, given = header.partition(" ")
    given = given.strip()
    if scheme.lower() != "bearer" or not given:
        return Refusal(401, "token", f"this needs the API's bearer token ({TOKEN_HELP})")
    if not hmac.compare_digest(given.encode(errors="replace"), p.token.encode()):
        return Refusal(403, "token", f"wrong bearer token ({TOKEN_HELP})")
    return None


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
