"""Roles on the node's real routes and site (bytes in, bytes out, no socket): the table of
routes walked, each route refusing every role below its own (403 naming the role needed)
and a request without an identity (401); the identity on the request; a token of the users
file checked once against its hash, off the connection's reading (what the client sent
meanwhile is kept), then remembered; and checks past the bound refused at once (429)
without hashing."""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure

from gtmcluster.api import connection, guard
from gtmcluster.api.connection import ApiChannel, Site
from gtmcluster.api.identity import ANONYMOUS, RANKS, Identity
from gtmcluster.api.routes import api_site
from gtmcluster.api.server import Route
from gtmcluster.config.load import load
from gtmcluster.nodeservice import NodeService
from gtmcluster.runtime import tokenhash
from gtmcluster.service import Sockets, make_service
from tests.support import configs
from tests.unit.test_api_server import JSON_TYPE, Transport, parse

SINGLE = "the-single-api-token-0123456789"
HOST = "127.0.0.1:8053"
#: a token of each role, as `gtmcluster users add` makes them
TOKENS = {role: tokenhash.new_token(f"{role}-1") for role in ("viewer", "operator", "admin")}
#: a value for each named part of a route's path
SAMPLE = {"name": "vs1", "action": "disable", "target": "datacenter", "generation": "1", "script": "main.js"}


def users_file(path: Path, tokens: dict[str, str]) -> Path:
    lines = [
        f'{tokenhash.name_of(token)}: {{role: {role}, token_hash: "{tokenhash.make(token, log_n=10)}"}}'
        for role, token in tokens.items()
    ]
    configs.write_secret(path, "\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return users_file(tmp_path_factory.mktemp("users") / "users.yaml", TOKENS)


@pytest.fixture
def service(tmp_path: Path, users: Path) -> NodeService:
    raw = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    configs.write_secret(tmp_path / "api-token", SINGLE + "\n")
    raw["api"] = {"token_file": "api-token", "token_for_reads": True, "users_file": str(users)}
    top = make_service(load(configs.write(tmp_path, raw)), "n1", MemoryReactorClock(), Sockets(dns=[]))
    top.snapshots = None
    top.node.ready = True
    return top


def connect(site: Site, source: str = "127.0.0.9") -> tuple[ApiChannel, Transport]:
    channel = site.buildProtocol(IPv4Address("TCP", source, 40000))
    assert isinstance(channel, ApiChannel)
    transport = Transport(IPv4Address("TCP", "127.0.0.1", 8053), IPv4Address("TCP", source, 40000))
    channel.makeConnection(transport)
    return channel, transport


def send(method: str, path: str, token: str | None, body: bytes = b"") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {HOST}"]
    if method == "POST":
        lines += [JSON_TYPE, f"Content-Length: {len(body)}"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def ask(site: Site, method: str, path: str, token: str | None, body: bytes = b"") -> tuple[int | None, Any]:
    """The status and JSON answer (None, None: admitted, its answer still being made)."""
    channel, transport = connect(site)
    channel.dataReceived(send(method, path, token, body))
    code, answer = parse(transport.value())[::2] if transport.value() else (None, None)
    channel.connectionLost(Failure(ConnectionDone()))
    return code, answer


def sample_path(pattern: str) -> str:
    return re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: SAMPLE[m.group(1)], pattern)


def test_every_route_refuses_each_role_below_its_own(service: NodeService) -> None:
    """The table walked: every route of `routes.routes` says its role; asked by each role
    below it, 403 naming the role needed; with no identity, 401; by its own role, neither."""
    site = api_site(service, SINGLE)
    table = site.api.routes
    assert len(table) >= 19 and all(r.role in RANKS for r in table)
    assert {r.role for r in table} == {"anyone", "viewer", "operator", "admin"}
    for route in table:
        path = sample_path(route.pattern)
        body = b"{}" if route.method == "POST" else b""
        for role, token in TOKENS.items():
            code, answer = ask(site, route.method, path, token, body)
            if RANKS[role] < RANKS[route.role]:
                assert code == 403, (route.method, path, role, answer)
                assert answer["role_needed"] == route.role, answer
                assert f"this needs the {route.role} role; {role}-1 is" in answer["error"], answer
            elif route.method == "GET":  # (writes by their role would change the node: below)
                assert code not in (401, 403), (route.method, path, role, answer)
        code, answer = ask(site, route.method, path, None, body)
        if route.role == "anyone":
            assert code == 200
        else:
            assert code == 401 and f"with the {route.role} role" in answer["error"], (route.method, path, answer)


def test_an_operator_changes_admin_state_and_the_single_token_is_an_admin(service: NodeService) -> None:
    """An operator's token disables a data center (on the record under its identity, for whom
    it says it acts); it may not reload; the config's single api.token may (an admin: the small-site form)."""
    site = api_site(service, SINGLE)
    code, answer = ask(site, "POST", "/api/v1/admin/datacenter/DC2/disable", TOKENS["operator"], b'{"by": "op"}')
    assert code == 200 and answer["admin"] == "disabled", answer
    assert ask(site, "POST", "/api/v1/reload", TOKENS["operator"], b"{}")[0] == 403
    assert ask(site, "GET", "/api/v1/config/history", SINGLE)[0] not in (401, 403)
    code, answer = ask(site, "GET", "/api/v1/status", "viewer-1.not-the-token-at-all-0123456789")
    assert code == 403 and "wrong bearer token" in answer["error"]


def test_the_request_carries_its_identity(service: NodeService) -> None:
    """`ApiRequest.identity`: name, role and how it was proven, for the handler (and the
    record of changes); a loopback read needing no token is ``anonymous``."""
    never: defer.Deferred[Any] = defer.Deferred()
    site = connection.site(
        [Route("GET", "/api/v1/wait", lambda a, p: never, role="viewer")],
        lambda: guard.policy(service.node.config.api, service.node.member, SINGLE),
    )
    seen = []
    for token in (TOKENS["viewer"], SINGLE):
        channel, _ = connect(site)
        channel.dataReceived(send("GET", "/api/v1/wait", token))
        seen.append(channel.requests[-1].identity)
    assert seen == [Identity("viewer-1", "viewer", "token"), Identity("api-token", "admin", "api.token")]
    open_reads = connection.site(
        [Route("GET", "/api/v1/wait", lambda a, p: never, role="viewer")],
        lambda: guard.Policy(SINGLE, False, frozenset(), ipaddress.ip_address("127.0.0.1")),
    )
    channel, _ = connect(open_reads)
    channel.dataReceived(send("GET", "/api/v1/wait", None))
    assert channel.requests[-1].identity == ANONYMOUS


def test_a_token_is_checked_once_off_the_connection_then_remembered(service: NodeService) -> None:
    """The hash check runs apart (here a Deferred the test fires): the connection reads
    nothing meanwhile and what the client sent (the body) is kept; the answer comes once the
    check is done; the same token again is not checked again, and a reload of the users file
    forgets it."""
    checks: list[defer.Deferred[bool]] = []

    def check_token(token: str, stored: tokenhash.Hash) -> defer.Deferred[bool]:
        d: defer.Deferred[bool] = defer.Deferred()
        checks.append(d)
        return d.addCallback(lambda _: tokenhash.verify(token, stored))

    site = api_site(service, SINGLE)
    site.api.check_token = check_token
    channel, transport = connect(site)
    channel.dataReceived(send("POST", "/api/v1/admin/datacenter/DC2/drain", TOKENS["operator"], b'{"by": "op"}'))
    assert len(checks) == 1 and transport.value() == b"" and transport.producerState == "paused"
    checks[0].callback(True)
    code, _, answer = parse(transport.value())
    assert code == 200 and answer["admin"] == "drain" and answer["by"] == "operator-1 (for op)", answer
    assert transport.producerState == "producing"
    assert ask(site, "GET", "/api/v1/status", TOKENS["operator"])[0] == 200
    assert len(checks) == 1 and site.api.known.counts["remembered"] == 1
    # a wrong token of a known name: checked once, refused, then refused from memory
    wrong = "operator-1." + "x" * 43
    channel, transport = connect(site)
    channel.dataReceived(send("GET", "/api/v1/status", wrong))
    checks[1].callback(True)
    assert parse(transport.value())[0] == 403
    assert ask(site, "GET", "/api/v1/status", wrong)[0] == 403 and len(checks) == 2


def test_checks_past_the_bound_are_refused_at_once_without_hashing(service: NodeService) -> None:
    """Unknown tokens from one source: its burst is checked, the next refused 429 (with
    Retry-After) before any hash; a second later one more may be checked. Checks in
    progress are bounded too."""
    hashed: list[str] = []

    def check_token(token: str, stored: tokenhash.Hash) -> defer.Deferred[bool]:
        hashed.append(token)
        return defer.succeed(False)

    site = api_site(service, SINGLE)
    site.api.check_token = check_token
    clock = service.reactor
    codes = [ask(site, "GET", "/api/v1/status", f"viewer-1.wrong-{i:040d}")[0] for i in range(6)]
    assert codes == [403, 403, 403, 403, 429, 429] and len(hashed) == 4
    channel, transport = connect(site)
    channel.dataReceived(send("GET", "/api/v1/status", "viewer-1.wrong-again-0123456789012345678901234"))
    assert b"Retry-After: 2" in transport.value()
    clock.advance(0.5)  # (2 a second per source)
    assert ask(site, "GET", "/api/v1/status", "viewer-1.wrong-later-012345678901234567890123456")[0] == 403
    assert len(hashed) == 5 and site.api.known.counts["bounded"] == 3
    # a name the users file does not hold, or a hash of another kind: refused, never hashed
    assert ask(site, "GET", "/api/v1/status", "nobody." + "y" * 43)[0] == 403 and len(hashed) == 5


def test_a_check_in_progress_holds_the_bound_in_all(service: NodeService) -> None:
    site = api_site(service, SINGLE)
    pending: list[defer.Deferred[bool]] = []
    site.api.check_token = lambda token, stored: pending.append(defer.Deferred()) or pending[-1]  # type: ignore[func-returns-value]
    for i in range(2):
        connect(site, f"127.0.0.{20 + i}")[0].dataReceived(send("GET", "/api/v1/status", TOKENS["viewer"] + str(i)))
    channel, transport = connect(site, "127.0.0.30")
    channel.dataReceived(send("GET", "/api/v1/status", TOKENS["viewer"]))
    code, _, answer = parse(transport.value())
    assert code == 429 and "in progress" in answer["error"] and len(pending) == 2
    json.dumps(answer)


def test_a_reload_keeps_the_tokens_known_whose_hash_is_unchanged(tmp_path: Path) -> None:
    """A reload reads the users file again: a token checked before stays known (no hash
    check again, so a flood of bad tokens from the operators' address meanwhile cannot lock
    them out with 429s), with the role the file now gives; a token whose identity's hash
    changed, or that went, and every refusal, are checked again."""
    from gtmcluster.api.identity import UNKNOWN, Identity, Known
    from gtmcluster.config.users import ApiUser, ApiUsers
    from gtmcluster.runtime import tokenhash

    def parsed(text: str) -> tokenhash.Hash:
        found = tokenhash.parse(text)
        assert isinstance(found, tokenhash.Hash), found
        return found

    def file(**users: tuple[str, str]) -> ApiUsers:
        by_name = {name: ApiUser(name, role, token_hash=parsed(h)) for name, (role, h) in users.items()}
        return ApiUsers(by_name, {}, {})

    vera, olga, gone = tokenhash.new_token("vera"), tokenhash.new_token("olga"), tokenhash.new_token("gone")
    hashes = {t: tokenhash.make(t, log_n=10) for t in (vera, olga, gone)}
    before = file(vera=("viewer", hashes[vera]), olga=("operator", hashes[olga]), gone=("admin", hashes[gone]))
    known = Known(lambda: 0.0)
    for token, role in ((vera, "viewer"), (olga, "operator"), (gone, "admin")):
        assert known.lookup(token, before) is UNKNOWN
        known.learn(token, before, Identity(tokenhash.name_of(token) or "", role, "token"))
    wrong = "vera.not-her-token"
    known.learn(wrong, before, None)
    olga_again = tokenhash.new_token("olga")
    after = file(vera=("operator", hashes[vera]), olga=("operator", tokenhash.make(olga_again, log_n=10)))
    assert known.lookup(vera, after) == Identity("vera", "operator", "token")  # promoted, not checked again
    assert known.lookup(olga, after) is UNKNOWN  # her hash changed: checked again (and refused)
    assert known.lookup(gone, after) is UNKNOWN
    assert known.lookup(wrong, after) is UNKNOWN


def test_whoami_tells_each_identity_its_own_name_and_role(service: NodeService) -> None:
    """``GET /api/v1/whoami`` (what the dashboard asks to show only what a role may do): each
    identity of the users file, and the single token, an admin; no identity is 401 here
    (reads need the token); a query naming a caller is refused, not believed."""
    site = api_site(service, SINGLE)
    for role, token in TOKENS.items():
        code, answer = ask(site, "GET", "/api/v1/whoami", token)
        assert (code, answer) == (200, {"node": "n1", "name": f"{role}-1", "role": role, "proof": "token"})
    assert ask(site, "GET", "/api/v1/whoami", SINGLE) == (
        200,
        {"node": "n1", "name": "api-token", "role": "admin", "proof": "api.token"},
    )
    assert ask(site, "GET", "/api/v1/whoami", None)[0] == 401
    assert ask(site, "GET", "/api/v1/whoami?caller_role=admin", TOKENS["viewer"])[0] == 400


def test_whoami_checks_a_token_where_reads_are_open_to_all(tmp_path: Path, users: Path) -> None:
    """On loopback with ``token_for_reads`` off (reads open to all, no token looked at),
    whoami still checks the token it is given: a users-file token answers that identity (the
    dashboard then offers what its role may do), not anonymous; a request with none is
    anonymous, and a wrong token is refused."""
    raw = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    configs.write_secret(tmp_path / "api-token", SINGLE + "\n")
    raw["api"] = {"token_file": "api-token", "token_for_reads": False, "users_file": str(users)}
    top = make_service(load(configs.write(tmp_path, raw)), "n1", MemoryReactorClock(), Sockets(dns=[]))
    top.snapshots = None
    top.node.ready = True
    site = api_site(top, SINGLE)
    assert ask(site, "GET", "/api/v1/status", None)[0] == 200  # (reads are open here)
    for role, token in TOKENS.items():
        assert ask(site, "GET", "/api/v1/whoami", token) == (
            200,
            {"node": "n1", "name": f"{role}-1", "role": role, "proof": "token"},
        )
    code, answer = ask(site, "GET", "/api/v1/whoami", None)
    assert code == 200 and answer["role"] == ANONYMOUS.role and answer["name"] == ANONYMOUS.name, answer
    assert ask(site, "GET", "/api/v1/whoami", "operator-1." + "x" * 43)[0] == 403
