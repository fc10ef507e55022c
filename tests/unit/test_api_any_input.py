"""No input makes the API answer 500 (issue 30, rule 7): for every route the router has
(taken from the router itself, so a new route is covered without a change here),
hypothesis sends requests with the token to the node's real API (its real routes on a
node with config sync, its own log and a bundle held; bytes in, bytes out, no socket):
any method, path segments of Unicode digits, huge and negative numbers, text of any kind;
query strings with the route's parameters and others, given once or twice, with hostile
values; bodies of every JSON shape (NaN, huge numbers, wrong types, nesting), and bytes
that are not JSON. Every answer must be a status below 500, JSON whenever it is an error
(and for every route but the few that answer HTML, Prometheus text or log lines), and
nothing may be logged as a failure."""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet import defer
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import LogLevel, capturedLogs

from gtmcluster.api import guard
from gtmcluster.api.connection import ApiChannel, Site
from gtmcluster.api.dashboard import SCRIPT_PATH
from gtmcluster.api.routes import api_site
from gtmcluster.api.server import Route
from gtmcluster.config.load import load
from gtmcluster.groupconfig import bundle
from gtmcluster.groupconfig.shared import at_start
from gtmcluster.nodelog.writer import NodeLog
from gtmcluster.nodeservice import NodeService
from gtmcluster.service import Sockets, make_service
from tests.support import configs
from tests.unit.test_api_server import Transport

TOKEN = "a-generated-token-0123456789"
HOST = "127.0.0.1:8053"
#: routes whose answer (when not an error) is not JSON: the dashboard page, Prometheus
#: text, the log's JSON lines
NOT_JSON = ("/", SCRIPT_PATH, "/metrics", "/api/v1/logs")
EXAMPLES_PER_ROUTE = 150
#: what no input may have logged
BAD = (LogLevel.error, LogLevel.critical)

#: what a path segment or a value may be besides random text: digits of other scripts
#: (which str.isdigit() takes and int() may refuse), huge and odd numbers, names the
#: node knows (to reach deeper), escapes
HOSTILE = [
    "²",
    "١٢٣",
    "٣",
    "0",
    "1",
    "-1",
    "+1",
    " 1",
    "1_000",
    "9" * 19,
    "9" * 5000,
    "1e308",
    "-1e308",
    "nan",
    "inf",
    "true",
    "maybe",
    "",
    "%00",
    "%2F",
    "..",
    "vs1",
    "DC1",
    "p",
    "p/vs1",
    "p%2Fvs1",
    "gslb.example.test",
    "*.example.test",
    "enable",
    "disable",
    "drain",
    "virtual-server",
    "datacenter",
    "pool",
    "pool-member",
    "wideip",
    "link",
    "192.0.2.1",
    "::1",
    "10.0.0.0/8",
    "2001:db8::/300",
    "A",
    "AAAA",
    "TXT",
    "2026-12-01T15:00:00Z",
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59-01:00",
    "\x00",
    "\u202e",
    "x" * 300,
]

#: what the node knows by the name of a path part, parameter or body field: a request
#: made of these reaches deep into its route, and each part is then made hostile or not
#: (a name not here gets what its pattern matches, or any text)
KNOWN = {
    "generation": "1",
    "script": "main.js",
    "name": "vs1",
    "action": "disable",
    "target": "virtual-server",
    "wideip": "gslb.example.test",
    "ldns": "192.0.2.1",
    "address": "192.0.2.1",
    "limit": "10",
    "subnet": "10.0.0.0/8",
    "type": "A",
    "since": "2026-01-01T00:00:00Z",
    "lines": "5",
    "follow": "0",
    "force": "false",
    "by": "ops",
    "reason": "a test",
    "based_on": "1",
}
#: the inputs that broke the API before (str.isdigit() takes "²", int() refuses it)
TRICKY = ["²", "¹²", "①", "٣", "-1", "9" * 19, "0001-01-01T00:00:00+01:00", "1e999"]

#: digits of any script, and other numerals ("²", "Ⅻ", "١٢٣")
NUMERALS = st.text(alphabet=st.characters(categories=["Nd", "No", "Nl"]), min_size=1, max_size=3)
#: what a text value may be
TEXTS = st.one_of(st.sampled_from(TRICKY), st.sampled_from(HOSTILE), NUMERALS, st.text(max_size=12))

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from(HOSTILE),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeService, Site]]:
    """A member keeping the group's bundles (one published), with its own log, its API's
    site; its configs are read at once (the memory reactor has no threads)."""
    tmp_path = tmp_path_factory.mktemp("any-input")
    raw = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    path = configs.write(tmp_path, raw)
    config = load(path)
    reactor = MemoryReactorClock()
    node_log = NodeLog(tmp_path / "log", "n1", reactor.seconds)
    node_log.startService()
    top = make_service(
        config, "n1", reactor, Sockets(dns=[]), str(path), start=at_start(config, str(path), "n1"), node_log=node_log
    )
    top.read_config = lambda path, own_dir: defer.succeed(load(path, own_dir))
    top.snapshots = None
    top.node.ready = True
    assert top.group_config is not None
    top.group_config.publish(bundle.make(path, 1, 0, "n1", 1.0), None, False)
    reactor.advance(0)
    assert top.group_config.shelf.history(), "a bundle is held"
    yield top, api_site(top, TOKEN)
    node_log.stopService()


def template(pattern: str) -> tuple[str, dict[str, str]]:
    """A route's path pattern as a format string, and each named part's own pattern."""
    parts = dict(re.findall(r"\(\?P<(\w+)>([^)]*)\)", pattern))
    return re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", pattern), parts


def known(name: str, pattern: str = "") -> st.SearchStrategy[str]:
    """What the node knows by the name of a path part, parameter or field (else what the
    part's *pattern* matches, or "1")."""
    if name in KNOWN:
        return st.just(KNOWN[name])
    return st.from_regex(pattern, fullmatch=True) if pattern else st.just("1")


def on_the_wire(text: str) -> str:
    """*text* as a request-target can hold it: what would end or split the request line,
    or start the query or fragment, escaped; anything else as it is (UTF-8 bytes)."""
    return "".join(urllib.parse.quote(c, safe="") if c in " ?#" or ord(c) < 33 or ord(c) == 127 else c for c in text)


METHODS = ["GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH"]


@st.composite
def requests(draw: st.DrawFn, route: Route) -> tuple[str, str, bytes]:
    """(method, target, body) aimed at *route*: a request it would take (what the node
    knows), with one of its parts made hostile, or (one time in four) any of them."""
    form, parts = template(route.pattern)
    elements = [
        "method",
        *(f"path:{name}" for name in parts),
        *(f"param:{name}" for name in route.params),
        *(f"field:{name}" for name in route.body),
        "extra",
        "body",
    ]
    every = draw(st.integers(min_value=0, max_value=3)) == 0
    chosen = draw(st.sampled_from(elements))

    def hostile(element: str) -> bool:
        return draw(st.booleans()) if every else element == chosen

    method = draw(st.sampled_from(METHODS)) if hostile("method") else route.method
    if re.search(r"[\\\[\](){}*+?|^$]", form.replace("{", "").replace("}", "")):
        path = draw(st.from_regex(route.pattern, fullmatch=True))
    else:
        path = form.format(
            **{name: draw(TEXTS if hostile(f"path:{name}") else known(name, p)) for name, p in parts.items()}
        )
    pairs = []
    for name in route.params:
        if hostile(f"param:{name}"):
            pairs += [(name, draw(TEXTS)) for _ in range(draw(st.integers(min_value=1, max_value=2)))]
        elif draw(st.booleans()):
            pairs.append((name, draw(known(name))))
    if hostile("extra"):
        if draw(st.booleans()):
            pairs.append((draw(st.sampled_from(["x", "lines", "force", "%00", ""])), draw(TEXTS)))
        else:
            path = path.rstrip("/") + draw(st.sampled_from(["/", "/x", "//", "/²"]))
    query = urllib.parse.urlencode(pairs)
    target = on_the_wire(path) + ("?" + query if query else "")
    if hostile("body"):
        body = draw(st.one_of(JSON_VALUES.map(lambda v: json.dumps(v).encode()), st.binary(max_size=64)))
    elif route.body:
        fields = {}
        for name in route.body:
            if hostile(f"field:{name}"):
                fields[name] = draw(st.one_of(TEXTS, JSON_VALUES))
            elif draw(st.booleans()):
                fields[name] = draw(known(name))
        body = json.dumps(fields).encode()
    else:
        body = b""
    return method, target, body


def ask(service: NodeService, site: Site, method: str, target: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and body of the answer to one request on a new connection."""
    channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.9", 40000))
    assert isinstance(channel, ApiChannel)
    transport = Transport(IPv4Address("TCP", "127.0.0.1", 8053), IPv4Address("TCP", "127.0.0.9", 40000))
    channel.makeConnection(transport)
    head = [f"{method} {target} HTTP/1.1", f"Host: {HOST}", f"Authorization: Bearer {TOKEN}", "Connection: close"]
    if body or method in ("POST", "PUT"):
        head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    channel.dataReceived("\r\n".join(head).encode("utf-8") + b"\r\n\r\n" + body)
    reactor: Any = service.reactor
    for _ in range(200):  # sliced answers take reactor turns
        if transport.disconnecting or transport.aborted:
            break
        reactor.advance(0)
    raw = transport.value()
    assert raw.startswith(b"HTTP/1.1 "), f"no answer to {method} {target!r}: {raw[:200]!r}"
    top, _, rest = raw.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    channel.connectionLost(Exception("done"))  # type: ignore[arg-type]
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line, 16)
            body, rest = body + rest[:size], rest[size + 2 :]
        rest = body
    elif "content-length" in headers:
        rest = rest[: int(headers["content-length"])]
    return int(lines[0].split()[1]), headers, rest


def search(service: NodeService, site: Site, route: Route, events: Sequence[dict[str, Any]]) -> None:
    """Hypothesis's search for an input that *route* answers 500 (or not as JSON), or that
    has a failure logged (in *events*)."""
    routes = site.api.routes

    @settings(
        max_examples=EXAMPLES_PER_ROUTE,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(asked=requests(route))
    def check(asked: tuple[str, str, bytes]) -> None:
        method, target, body = asked
        seen = len(events)
        code, headers, answer = ask(service, site, method, target, body)
        assert code < 500, (method, target, body[:100], code, answer[:300])
        failures = [e for e in events[seen:] if e.get("log_failure") is not None or e.get("log_level") in BAD]
        assert not failures, (method, target, [e.get("log_format") for e in failures])
        asked_for = "GET" if method == "HEAD" else method
        path = guard.path_of(target)
        by = next((r for r in routes if r.method == asked_for and r.match(path) is not None), None)
        if method != "HEAD" and (code >= 400 or (by is not None and by.pattern not in NOT_JSON)):
            assert headers.get("content-type") == "application/json", (method, target, code, headers)
            json.loads(answer)

    check()


def test_no_input_makes_any_route_answer_500(node: tuple[NodeService, Site]) -> None:
    service, site = node
    assert len(site.api.routes) >= 18, "the router's own routes"
    with capturedLogs() as events:
        for route in site.api.routes:
            search(service, site, route, events)


def test_the_examples_reach_every_route(node: tuple[NodeService, Site]) -> None:
    """Each route's template gives a path the route matches (so the search is aimed)."""
    _, site = node
    for route in site.api.routes:
        form, parts = template(route.pattern)
        path = form.format(**dict.fromkeys(parts, "1"))
        assert route.match(path) is not None or re.search(r"[\[\]*+?|]", form), route.pattern
