"""The admin API on the node's real routes and site (bytes in, bytes out, no socket):
``POST /api/v1/admin/TARGET/NAME/ACTION`` at every level, its JSON errors for unknown
targets, names and actions and for bad bodies, its need for the token, who/why/when in
``/api/v1/admin`` and ``/api/v1/status``; and the change reaching another member of the
sync group (in-memory TLS cluster) and moving its answers.

(The service's snapshot writer is taken out here: it writes in a thread, which the memory
reactor has not. That an acknowledged write is on disk is the process tests'.)"""

from __future__ import annotations

import ipaddress
import json
import random
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock

from gtmcluster.api import admin as api_admin
from gtmcluster.api.audit import Caller
from gtmcluster.api.connection import ApiChannel
from gtmcluster.api.routes import api_site
from gtmcluster.config.load import load
from gtmcluster.lb.context import Client
from gtmcluster.node import Node
from gtmcluster.nodeservice import NodeService
from gtmcluster.service import Sockets, make_service
from tests.support import configs
from tests.support.cluster import MemoryCluster
from tests.unit.test_api_server import JSON_TYPE, Transport, parse

TOKEN = "a-generated-token-0123456789"
HOST = "127.0.0.1:8053"


@pytest.fixture
def service(tmp_path: Path) -> NodeService:
    raw = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    raw["wideips"]["gslb.example.test"]["persistence"] = {"ttl": 600}
    top = make_service(load(configs.write(tmp_path, raw)), "n1", MemoryReactorClock(), Sockets(dns=[]))
    top.snapshots = None
    top.node.ready = True
    return top


def ask(service: NodeService, method: str, path: str, body: Any = None, token: str | None = TOKEN) -> tuple[int, Any]:
    site = api_site(service, TOKEN)
    channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.9", 40000))
    assert isinstance(channel, ApiChannel)
    transport = Transport(IPv4Address("TCP", "127.0.0.1", 8053), IPv4Address("TCP", "127.0.0.9", 40000))
    channel.makeConnection(transport)
    data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    lines = [f"{method} {path} HTTP/1.1", f"Host: {HOST}"]
    if method == "POST":
        lines += [JSON_TYPE, f"Content-Length: {len(data)}"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    channel.dataReceived(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
    code, _, answer = parse(transport.value())
    return code, answer


@pytest.mark.parametrize(
    ("target", "name", "record"),
    [
        ("datacenter", "DC2", "admin/datacenter/DC2"),
        ("pool", "p", "admin/pool/p"),
        ("pool-member", "p/vs1", "admin/member/p/vs1"),
        ("pool-member", "p%2Fvs1", "admin/member/p/vs1"),
        ("wideip", "gslb.example.test", "admin/wideip/gslb.example.test"),
        ("virtual-server", "vs3", "admin/vs/vs3"),
    ],
)
def test_each_target_takes_a_change_with_who_and_why(service: NodeService, target: str, name: str, record: str) -> None:
    service.reactor.advance(1_800_000_000)
    code, answer = ask(service, "POST", f"/api/v1/admin/{target}/{name}/drain", {"reason": "upgrade", "by": "bob"})
    assert code == 200, answer
    assert (answer["admin"], answer["by"], answer["why"], answer["node"]) == ("drain", "bob", "upgrade", "n1")
    held = service.node.store.get(record)
    assert held is not None
    assert dict(held.value) == {
        "state": "drain",
        "by": "bob",  # (what the caller says: the single token is no person's)
        "reason": "upgrade",
        "at": 1_800_000_000.0,
        "node": "n1",
        # who asked, as the API proved it, for every member's audit
        "who": "api-token",
        "role": "admin",
        "proof": "api.token",
        "source": "127.0.0.9",
        "id": "",  # (no audit log here: test_audit_api.py has one)
    }


def test_who_is_api_when_the_caller_says_nothing(service: NodeService) -> None:
    code, answer = ask(service, "POST", "/api/v1/admin/datacenter/DC1/disable")
    assert code == 200 and answer["by"] == "api" and answer["why"] == ""
    assert answer["virtual_servers"] == {
        "vs1": {"available": False, "serving": False},
        "vs1-6": {"available": False, "serving": False},
    }


def test_the_older_virtual_server_path_takes_a_reason_too(service: NodeService) -> None:
    code, answer = ask(service, "POST", "/api/v1/virtual-servers/vs1/disable", {"reason": "patching"})
    assert code == 200 and answer["virtual_server"] == "vs1" and answer["available"] is False
    assert answer["reason"] == "disabled by an operator (api: patching)"


@pytest.mark.parametrize(
    ("path", "body", "code", "words"),
    [
        ("/api/v1/admin/region/r1/disable", None, 404, "no admin target 'region'"),
        ("/api/v1/admin/datacenter/DC9/disable", None, 404, "no data center named 'DC9'"),
        ("/api/v1/admin/link/l9/disable", None, 404, "no link named 'l9'"),
        ("/api/v1/admin/pool/nope/disable", None, 404, "no pool named 'nope'"),
        ("/api/v1/admin/pool-member/p/disable", None, 404, "give POOL/VIRTUAL-SERVER"),
        ("/api/v1/admin/pool-member/p/vs2-6/disable", None, 404, "pool 'p' has no member 'vs2-6'"),
        ("/api/v1/admin/wideip/nothing.example.test/disable", None, 404, "no wide IP named"),
        ("/api/v1/admin/virtual-server/vs9/disable", None, 404, "no virtual server named 'vs9'"),
        ("/api/v1/admin/datacenter/DC1/switch-off", None, 404, "no action 'switch-off'"),
        ("/api/v1/admin/datacenter/DC1/disable", {"why": "x"}, 400, "unknown field 'why'"),
        ("/api/v1/admin/datacenter/DC1/disable", {"reason": 7}, 400, "'reason' must be text"),
        ("/api/v1/admin/datacenter/DC1/disable", {"reason": "x" * 501}, 400, "longer than 500"),
        ("/api/v1/admin/datacenter/DC1/disable", {"by": "x" * 254}, 400, "longer than 253"),
        ("/api/v1/admin/datacenter/DC1/disable", b"[1]", 400, "not a JSON object"),
        ("/api/v1/admin/datacenter/DC1/disable", b"{no", 400, "not JSON"),
    ],
)
def test_bad_changes_are_clear_json_errors_and_change_nothing(
    service: NodeService, path: str, body: Any, code: int, words: str
) -> None:
    got, answer = ask(service, "POST", path, body)
    assert got == code and words in answer["error"], answer
    assert list(service.node.store.scan("admin/")) == []


def test_a_change_needs_the_token(service: NodeService) -> None:
    for token in (None, "not-the-token-0123456789"):
        code, answer = ask(service, "POST", "/api/v1/admin/datacenter/DC1/disable", token=token)
        assert code in (401, 403) and "token" in answer["error"]
    assert list(service.node.store.scan("admin/")) == []
    assert ask(service, "GET", "/api/v1/admin/datacenter/DC1/disable")[0] == 405


def test_status_and_the_admin_list_show_who_why_and_when(service: NodeService) -> None:
    ask(service, "POST", "/api/v1/admin/pool-member/p/vs2/disable", {"reason": "disk", "by": "carol"})
    expected = {
        "level": "member",
        "name": "p/vs2",
        "state": "disabled",
        "by": "carol",
        "reason": "disk",
        "at": service.reactor.seconds(),
        "node": "n1",
    }
    code, answer = ask(service, "GET", "/api/v1/admin", token=None)
    assert code == 200 and answer["admin"] == [expected]
    service.reactor.advance(0)  # (status answers in slices)
    code, status = ask(service, "GET", "/api/v1/status", token=None)
    assert code == 200 and status["admin"] == [expected]


def test_a_datacenter_disabled_on_one_member_moves_the_answers_of_another(tmp_path: Path) -> None:
    """Two nodes over the in-memory TLS sync group: DC1 disabled through n1's API code moves
    n2's answer for an r1 client from vs1 to vs3 as soon as the record arrives; enabled, it
    comes back. n2 knows who did it and why."""
    raw = configs.add_member(configs.base(), "n2", "DC2", "127.0.0.2")
    config = load(configs.write(tmp_path, raw))
    cluster = MemoryCluster(["n1", "n2"], tmp_path / "certs")
    nodes = {}
    for name in ("n1", "n2"):
        node = Node(config, name, clock=cluster.clock.seconds, rng=random.Random(1))
        node.ready = True
        cluster.add(name, store=node.store)
        nodes[name] = node
    cluster.connect("n1", "n2")
    wideip = next(iter(config.wideips.values()))
    r1 = Client.from_ldns(ipaddress.ip_address("198.51.100.53"))
    assert nodes["n2"].decide(wideip, 1, r1, key="r1").members == ("vs1",)
    api_admin.change(nodes["n1"], "datacenter", "DC1", "disable", by="alice", reason="maintenance")
    cluster.settle()
    kept = nodes["n2"].cached(wideip, 1, "r1")
    assert kept is None
    assert nodes["n2"].decide(wideip, 1, r1, key="r1").members == ("vs3",)
    assert nodes["n2"].health.snapshot.vs["vs1"].reason == "data center DC1 disabled by alice (maintenance)"
    api_admin.change(nodes["n1"], "datacenter", "DC1", "enable", by="alice")
    cluster.settle()
    assert nodes["n2"].decide(wideip, 1, r1, key="r1").members == ("vs1",)


def test_who_is_the_proven_identity_when_it_is_a_persons(service: NodeService) -> None:
    """A person's identity (a token of the users file, a client certificate) is who made the
    change (what the caller says it acts for in brackets); with the shared single token,
    what it says. The record carries the identity, its role and proof, the source and the
    audit entries' id, for every member's audit."""
    node = service.node
    carol = Caller("carol", "admin", "certificate", "192.0.2.7", "n1-0123456789ab")
    assert api_admin.change(node, "pool", "p", "drain", by="bob", caller=carol)["by"] == "carol (for bob)"
    assert api_admin.change(node, "pool", "p", "drain", by="carol", caller=carol)["by"] == "carol"
    record = node.store.get("admin/pool/p")
    assert record is not None and record.value == {
        "state": "drain",
        "by": "carol",
        "reason": "",
        "at": record.value["at"],
        "node": "n1",
        "who": "carol",
        "role": "admin",
        "proof": "certificate",
        "source": "192.0.2.7",
        "id": "n1-0123456789ab",
    }
    shared = Caller("api-token", "admin", "api.token", "127.0.0.1", "n1-1")
    assert api_admin.change(node, "pool", "p", "drain", by="root", caller=shared)["by"] == "root"
    assert api_admin.change(node, "pool", "p", "drain", caller=shared)["by"] == "api"
