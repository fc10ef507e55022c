"""The API's request rules (`gtmcluster.api.guard`), alone: which Host names the node, which
writes a web page cannot make, where the token is needed, what is too long. Each row is a
request as its headers describe it and the status it gets (None: admitted)."""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.api.guard import MAX_BODY, Incoming, Policy, check, path_of, policy, who_asks
from gtmcluster.api.identity import ANONYMOUS, SINGLE_TOKEN
from gtmcluster.config.addresses import HostPort
from gtmcluster.config.model import ApiSettings, Member

TOKEN = "the-node-token-0123456789"
LOOPBACK = Policy(TOKEN, False, frozenset({"gtm1.example.com"}), ipaddress.ip_address("127.0.0.11"))
HERE = "127.0.0.11"
OWN = "http://127.0.0.11:8053"


def read(**given: Any) -> Incoming:
    base: dict[str, Any] = {"method": "GET", "target": "/api/v1/status", "hosts": ["127.0.0.11:8053"], "local": HERE}
    return Incoming(**{"length": 0, **base, **given})


def write(**given: Any) -> Incoming:
    base: dict[str, Any] = {
        "method": "POST",
        "target": "/api/v1/virtual-servers/vs-b/disable",
        "hosts": ["127.0.0.11:8053"],
        "local": HERE,
        "length": 2,
        "content_type": ["application/json"],
        "authorization": [f"Bearer {TOKEN}"],
    }
    return Incoming(**{**base, **given})


@pytest.mark.parametrize(
    ("incoming", "code"),
    [
        # Host: the node's address, localhost on loopback, a configured name; nothing else
        (read(), None),
        (read(hosts=["127.0.0.11"]), None),
        (read(hosts=["localhost:8053"]), None),
        (read(hosts=["LOCALHOST"]), None),
        (read(hosts=["gtm1.example.com:8053"]), None),
        (read(hosts=["GTM1.Example.COM.:8053"]), None),
        (read(hosts=["attacker.example:8053"]), 421),
        (read(hosts=["attacker.example"]), 421),
        (read(hosts=["127.0.0.12:8053"]), 421),
        (read(hosts=["127.0.0.11.attacker.example"]), 421),
        (read(hosts=["gtm1.example.com.attacker.example"]), 421),
        (read(hosts=["127.0.0.11:99999"]), 421),
        # a port of other digits than ASCII's ("²" made int() raise: a traceback, no answer)
        (read(hosts=["127.0.0.11:²"]), 421),
        (read(hosts=["127.0.0.11:\uff18\uff10\uff15\uff13"]), 421),
        (read(hosts=["[::1]:\u0668\u0660"]), 421),
        (read(hosts=["127.0.0.11@evil"]), 421),
        (read(hosts=[""]), 421),
        (read(hosts=[]), 400),
        (read(hosts=["127.0.0.11", "attacker.example"]), 400),
        (read(target="http://127.0.0.11:8053/api/v1/status"), 400),
        (read(target="*"), 400),
        # reads on loopback: no token needed (a wrong one is not looked at)
        (read(authorization=["Bearer nope"]), None),
        # writes: the token always, JSON, the node's own origin or none, a short body
        (write(), None),
        (write(origin=[OWN]), None),
        (write(origin=["HTTP://127.0.0.11:8053"]), None),
        (write(origin=[OWN], fetch_site=["same-origin"]), None),
        (write(content_type=["application/json; charset=utf-8"]), None),
        (write(authorization=["bearer " + TOKEN]), None),
        (write(length=0), None),
        (write(length=None), None),  # chunked: cut at the limit as it comes
        (write(length=MAX_BODY), None),
        (write(authorization=[]), 401),
        (write(authorization=["Basic " + TOKEN]), 401),
        (write(authorization=["Bearer wrong-token-0123456789"]), 403),
        (write(authorization=["Bearer " + TOKEN, "Bearer " + TOKEN]), 400),
        (write(content_type=["text/plain"]), 415),
        (write(content_type=[]), 415),
        (write(content_type=["application/x-www-form-urlencoded"]), 415),
        (write(content_type=["multipart/form-data; boundary=x"]), 415),
        (write(content_type=["application/json", "text/plain"]), 415),
        (write(origin=["http://evil.example"]), 403),
        (write(origin=["null"]), 403),
        (write(origin=["http://127.0.0.11:8054"]), 403),
        (write(origin=["https://127.0.0.11:8053"]), 403),
        (write(origin=["http://127.0.0.11:8053/path"]), 403),
        (write(origin=[OWN, "http://evil.example"]), 403),
        (write(fetch_site=["cross-site"]), 403),
        (write(fetch_site=["same-site"]), 403),
        (write(length=MAX_BODY + 1), 413),
        (write(length=300_000_000), 413),
        (write(length=300_000_000, authorization=[]), 401),
        # the page a browser would send from another site: refused whatever the token
        (write(origin=["http://evil.example"], content_type=["text/plain"], authorization=[]), 403),
        # any method other than GET and HEAD is a write, and so is a read with a body
        (write(method="PUT"), None),
        (write(method="DELETE", authorization=[]), 401),
        (write(method="OPTIONS", authorization=[], content_type=[]), 401),
        (read(length=5), 401),
        (read(length=None), 401),
        (read(method="HEAD"), None),
        # Host is checked before anything else
        (write(hosts=["attacker.example:8053"], origin=["http://attacker.example:8053"]), 421),
    ],
)
def test_rules(incoming: Incoming, code: int | None) -> None:
    refusal = check(incoming, LOOPBACK)
    assert (refusal.code if refusal else None) == code, refusal


def test_reads_need_the_token_beyond_loopback_but_for_the_page() -> None:
    """Where reads need the token (api.token_for_reads, or an API beyond loopback), every
    read does, but for the dashboard page (public: it holds no data)."""
    guarded = replace(LOOPBACK, token_for_reads=True)
    assert check(read(), guarded).code == 401  # type: ignore[union-attr]
    assert check(read(authorization=["Bearer nope-nope-nope-nope"]), guarded).code == 403  # type: ignore[union-attr]
    assert check(read(authorization=[f"Bearer {TOKEN}"]), guarded) is None
    assert check(read(target="/"), guarded, need="anyone") is None
    assert check(read(target="/", hosts=["attacker.example"]), guarded, need="anyone").code == 421  # type: ignore[union-attr]


def test_secret_reads_need_the_token_on_loopback_too() -> None:
    """A read of a secret route (the group's config) needs the token even on a loopback API
    that opens other reads; who_asks says who gave it (valid), needed or not."""
    assert check(read(target="/api/v1/config"), LOOPBACK) is None
    assert check(read(target="/api/v1/config"), LOOPBACK, need="admin").code == 401  # type: ignore[union-attr]
    assert check(read(method="HEAD"), LOOPBACK, need="admin").code == 401  # type: ignore[union-attr]
    wrong = read(authorization=["Bearer nope-nope-nope-nope"])
    assert check(wrong, LOOPBACK, need="admin").code == 403  # type: ignore[union-attr]
    given = read(authorization=[f"Bearer {TOKEN}"])
    assert check(given, LOOPBACK, need="admin") is None
    assert who_asks(given, LOOPBACK, None) == SINGLE_TOKEN and who_asks(wrong, LOOPBACK, None) is None
    assert who_asks(read(), LOOPBACK, None) == ANONYMOUS
    assert who_asks(read(authorization=[f"Bearer {TOKEN}"] * 2), LOOPBACK, None) is None


def test_localhost_only_on_loopback_and_the_connection_address_counts() -> None:
    """``localhost`` names the node only when the connection reached a loopback address;
    an IP literal names it when it is the address the connection reached (an API bound to
    a wildcard address) or the member's api address."""
    wildcard = replace(LOOPBACK, address=ipaddress.ip_address("0.0.0.0"))
    assert check(read(hosts=["localhost"], local="192.0.2.7"), wildcard).code == 421  # type: ignore[union-attr]
    assert check(read(hosts=["192.0.2.7:8053"], local="192.0.2.7"), wildcard) is None
    assert check(read(hosts=["192.0.2.7:8053"], local="::ffff:192.0.2.7"), wildcard) is None
    assert check(read(hosts=["192.0.2.8:8053"], local="192.0.2.7"), wildcard).code == 421  # type: ignore[union-attr]
    v6 = replace(LOOPBACK, address=ipaddress.ip_address("::1"))
    assert check(read(hosts=["[::1]:8053"], local="::1"), v6) is None
    assert check(write(hosts=["[::1]:8053"], local="::1", origin=["http://[::1]:8053"]), v6) is None
    assert check(read(hosts=["[::2]:8053"], local="::1"), v6).code == 421  # type: ignore[union-attr]


def test_policy_from_the_config() -> None:
    """The config's token wins over the generated one; {node} in api.names is the member's
    name; an API beyond loopback needs the token for reads."""
    loop = Member("gtm-cnc", "CNC", HostPort(ipaddress.ip_address("127.0.0.11"), 4353), (), api_at("127.0.0.11"))
    p = policy(ApiSettings(names=("{node}.gtm.example.com",)), loop, "generated-token-0123456789")
    assert p.token == "generated-token-0123456789" and not p.token_for_reads
    assert p.names == frozenset({"gtm-cnc.gtm.example.com"})
    wide = Member("gtm-tel", "TEL", HostPort(ipaddress.ip_address("192.0.2.1"), 4353), (), api_at("192.0.2.1"))
    p = policy(ApiSettings(token="configured-token-0123456789"), wide, "generated-token-0123456789")
    assert p.token == "configured-token-0123456789" and p.token_for_reads


def api_at(address: str) -> HostPort:
    return HostPort(ipaddress.ip_address(address), 8053)


@pytest.mark.parametrize(
    ("target", "path"),
    [("/", "/"), ("/api/v1/status?x=1", "/api/v1/status"), ("/api/v1/status/", "/api/v1/status"), ("//", "/")],
)
def test_path_of(target: str, path: str) -> None:
    assert path_of(target) == path


HEADER_TEXT = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=40)
HEADERS = st.lists(HEADER_TEXT, max_size=2)


@settings(max_examples=500, deadline=None)
@given(
    method=st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"]),
    target=st.sampled_from(["/", "/api/v1/status", "/api/v1/reload", "/metrics", "*"]),
    hosts=st.one_of(HEADERS, st.just(["127.0.0.11:8053"]), st.just(["gtm1.example.com"])),
    length=st.one_of(st.none(), st.integers(0, 10**9)),
    origin=HEADERS,
    fetch_site=HEADERS,
    content_type=st.one_of(HEADERS, st.just(["application/json"])),
    authorization=st.one_of(HEADERS, st.just([f"Bearer {TOKEN}"])),
)
def test_what_gets_through(
    method: str,
    target: str,
    hosts: list[str],
    length: int | None,
    origin: list[str],
    fetch_site: list[str],
    content_type: list[str],
    authorization: list[str],
) -> None:
    """Whatever the headers: nothing is admitted under a Host that does not name the node,
    and no write without the exact token, a JSON type, no foreign origin and a body within
    the limit."""
    incoming = Incoming(method, target, hosts, HERE, length, False, origin, fetch_site, content_type, authorization)
    if check(incoming, LOOPBACK) is not None:
        return
    assert target.startswith("/") and len(hosts) == 1
    assert hosts[0].split(":")[0].lower().rstrip(".") in ("127.0.0.11", "localhost", "gtm1.example.com")
    if method in ("GET", "HEAD") and length == 0:
        return
    assert authorization == [f"Bearer {TOKEN}"] or authorization[0].lower() == f"bearer {TOKEN}"
    assert content_type[0].split(";")[0].strip().lower() == "application/json"
    assert origin in ([], [OWN]) or origin[0].lower() in (OWN, "http://localhost:8053", "http://gtm1.example.com")
    assert length is None or length <= MAX_BODY
