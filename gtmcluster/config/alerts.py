"""The config's ``alerts`` section: the webhooks a node tells of what it notices (a server,
pool, data center or link down or back, a peer lost or back, a config run or refused, a
certificate about to expire), how their deliveries retry, and the networks they may reach.

    alerts:
      allow: [10.20.0.0/16]          # special-purpose networks (RFC 6890) a webhook may reach
      webhooks:
        - url: https://hooks.example.com/gtm
          secret_file: secrets/webhook.key     # the member's own, readable by its owner only
          events: [vs_down, vs_up, pool_down]  # absent: every kind (`EVENTS`)
      max_attempts: 8        # deliveries of one event to one webhook, in all
      max_queue: 1000        # deliveries waiting, all webhooks together (beyond: the oldest go)
      backoff: 2             # seconds before the first retry, doubled for each next one ...
      backoff_max: 300       # ... up to this
      connect_timeout: 5
      timeout: 10            # the whole of one attempt: connect, send, read the answer
      cert_expiring_days: 21

A webhook may reach what the path prober may (`config.ranges`): never the ranges of
`NEVER`, and the special-purpose ranges (loopback, private use, link local: a cloud's
metadata service) only where ``alerts.allow`` opens them. A URL whose host is such an
address is refused here (`refusal`); a host name is checked again on every address it
resolves to when a delivery is sent (`gtmcluster.alerts.delivery`), and only a checked
address is connected to. The secret is the member's own file (named relative to its own
base folder), so it never travels in a config sync bundle.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gtmcluster.config.addresses import IPAddress, IPNetwork
from gtmcluster.config.ranges import NEVER, SPECIAL_PURPOSE, read_allow
from gtmcluster.config.reader import Mapping, Reader
from gtmcluster.runtime import files

#: the event kinds a webhook may ask for (`gtmcluster.alerts.events` makes them)
EVENTS = (
    "vs_down",
    "vs_up",
    "pool_down",
    "pool_up",
    "datacenter_down",
    "datacenter_up",
    "link_down",
    "link_up",
    "peer_lost",
    "peer_back",
    "config_applied",
    "config_refused",
    "cert_expiring",
)
#: webhooks at most (each event is queued once per webhook that asks for it)
MAX_WEBHOOKS = 16
#: the longest URL taken (as browsers and most servers take)
MAX_URL = 2048
#: the shortest secret taken (as the API's token): a signature is only as good as its key
MIN_SECRET = 16

_NEVER = tuple(ipaddress.ip_network(n) for n in NEVER)
_SPECIAL = tuple(ipaddress.ip_network(n) for n in SPECIAL_PURPOSE)


@dataclass(frozen=True, slots=True)
class Webhook:
    """One receiver: its URL, its secret (read from *secret_file*) and the kinds it hears."""

    url: str
    secret_file: Path
    secret: bytes = field(repr=False)
    events: tuple[str, ...] = EVENTS

    @property
    def label(self) -> str:
        """The URL without its query (a query may hold a receiver's token): the metrics' label."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}{parts.path}"


@dataclass(frozen=True, slots=True)
class Alerts:
    """The ``alerts`` section (none by default: no webhook, nothing sent)."""

    webhooks: tuple[Webhook, ...] = ()
    allow: tuple[IPNetwork, ...] = ()
    max_attempts: int = 8
    max_queue: int = 1000
    backoff: float = 2.0
    backoff_max: float = 300.0
    connect_timeout: float = 5.0
    timeout: float = 10.0
    cert_expiring_days: int = 21


def refusal(address: IPAddress, allow: tuple[IPNetwork, ...]) -> str | None:
    """Why a webhook may not reach *address* under ``alerts.allow`` *allow*, if so."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if any(address in n for n in _NEVER if n.version == address.version):
        return f"{address} is never reached (unspecified, multicast or reserved)"
    if any(address in n for n in _SPECIAL if n.version == address.version) and not any(
        address in n for n in allow if n.version == address.version
    ):
        return f"{address} is a special-purpose address (RFC 6890) that alerts.allow does not open"
    return None


def read(r: Reader, top: Mapping, resolve: Callable[[str], Path]) -> Alerts:
    """The ``alerts`` section; *resolve* names a file of the member's own."""
    default = Alerts()
    if not top.has("alerts"):
        return default
    m = r.mapping(("alerts",), top.get("alerts"), "a mapping {webhooks, allow, max_attempts, ...}")
    if m is None:
        return default
    allow = read_allow(r, m)
    hooks: list[Webhook] = []
    raw_hooks = r.list(m.at("webhooks"), m.get("webhooks", []), "a list of {url, secret_file, events}") or []
    if len(raw_hooks) > MAX_WEBHOOKS:
        r.error(m.at("webhooks"), f"{len(raw_hooks)} webhooks: at most {MAX_WEBHOOKS}")
        raw_hooks = []
    for i, raw in enumerate(raw_hooks):
        hook = _webhook(r, (*m.at("webhooks"), i), raw, tuple(allow), resolve)
        if hook is not None:
            hooks.append(hook)
    attempts = m.integer("max_attempts", default.max_attempts, 1, 50)
    queue = m.integer("max_queue", default.max_queue, 1, 100_000)
    backoff = m.number("backoff", default.backoff, 0.1, 3600)
    backoff_max = m.number("backoff_max", default.backoff_max, 0.1, 86400)
    connect = m.number("connect_timeout", default.connect_timeout, 0.1, 60)
    timeout = m.number("timeout", default.timeout, 0.1, 300)
    days = m.integer("cert_expiring_days", default.cert_expiring_days, 1, 3650)
    m.done()
    if None in (attempts, queue, backoff, backoff_max, connect, timeout, days):
        return default
    assert attempts and queue and backoff and backoff_max and connect and timeout and days
    if backoff_max < backoff:
        r.error(m.at("backoff_max"), f"{backoff_max:g} is less than backoff ({backoff:g})")
    if timeout < connect:
        r.error(m.at("timeout"), f"{timeout:g} is less than connect_timeout ({connect:g}): it bounds the whole attempt")
    return Alerts(tuple(hooks), tuple(allow), attempts, queue, backoff, backoff_max, connect, timeout, days)


def _webhook(
    r: Reader, at: tuple[Any, ...], raw: Any, allow: tuple[IPNetwork, ...], resolve: Callable[[str], Path]
) -> Webhook | None:
    m = r.mapping(at, raw, "a mapping {url, secret_file, events}")
    if m is None:
        return None
    url = _url(r, m, allow)
    secret: bytes | None = None
    file: Path | None = None
    name = r.string(m.at("secret_file"), m.require("secret_file", "the file of the secret that signs its deliveries"))
    if name is not None:
        file = resolve(name)
        try:
            text = files.read_text(file, files.SECRET).strip()  # (a FIFO here would hold a reload)
        except OSError as e:
            r.error(m.at("secret_file"), f"cannot read {file}: {e.strerror or e}")
        else:
            if len(text) < MIN_SECRET:
                r.error(m.at("secret_file"), f"the secret in {file} is {len(text)} characters: at least {MIN_SECRET}")
            else:
                secret = text.encode()
    events: list[str] = []
    if m.has("events"):
        raw_events = r.list(m.at("events"), m.get("events"), "a list of event kinds", allow_scalar=True) or []
        for i, kind in enumerate(raw_events):
            if not isinstance(kind, str) or kind not in EVENTS:
                r.error((*m.at("events"), i), f"{kind!r} is not an event kind (one of {', '.join(EVENTS)})")
            elif kind not in events:
                events.append(kind)
        if isinstance(raw_events, list) and not raw_events:
            r.error(m.at("events"), "names no event: leave 'events' out for every kind")
    m.done()
    if url is None or secret is None or file is None:
        return None
    return Webhook(url, file, secret, tuple(events) or EVENTS)


def _url(r: Reader, m: Mapping, allow: tuple[IPNetwork, ...]) -> str | None:
    at = m.at("url")
    url = r.string(at, m.require("url", "the receiver's http:// or https:// URL"))
    if url is None:
        return None
    if len(url) > MAX_URL:
        r.error(at, f"a URL of {len(url)} characters: at most {MAX_URL}")
        return None
    problem = url_problem(url, allow)
    if problem is not None:
        r.error(at, problem)
        return None
    return url


def url_problem(url: str, allow: tuple[IPNetwork, ...]) -> str | None:
    """What is wrong with webhook *url* (None: nothing), its host's address checked when it
    is one (a name is checked on each address it resolves to, at send time)."""
    if any(c.isspace() or ord(c) < 0x20 for c in url):
        return f"{url!r} is not a URL: it holds white space or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        return f"{url!r} is not a URL: {e}"
    if parts.scheme not in ("http", "https"):
        return f"{url!r}: the scheme must be http or https"
    host = parts.hostname
    if not host:
        return f"{url!r} names no host"
    if parts.username is not None or parts.password is not None:
        return f"{url!r} holds a user name or password: the secret_file signs deliveries"
    if parts.fragment:
        return f"{url!r} has a fragment (#...), which is never sent"
    if port == 0:
        return f"{url!r}: port 0"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if host.lower().rstrip(".") in ("localhost", "localhost.localdomain") or host.lower().endswith(".localhost"):
            address = ipaddress.ip_address("127.0.0.1")
        elif not all(label and len(label) <= 63 for label in host.rstrip(".").split(".")) or len(host) > 253:
            return f"{url!r}: {host!r} is not a host name"
        else:
            return None
    why = refusal(address, allow)
    return f"{url!r} is refused: {why}" if why is not None else None
