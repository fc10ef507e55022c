"""The audit log on the node's real routes and site (bytes in, bytes out, no socket), with a
real audit file: each write recorded before it is made and again with how it ended (who,
role, proof, source, route, change, result), the admin record carrying the same id; a
write the audit log cannot take (a full device) refused with 503 and not made; refused
requests recorded, at most so many per source a minute and then one summary; an admin
change made on another member recorded when taken, not when loaded from the snapshot;
``GET /api/v1/audit`` for viewers and up, by who and limit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock

from gtmcluster.api.metrics import metrics_steps
from gtmcluster.api.routes import api_site
from gtmcluster.config.load import load
from gtmcluster.nodelog.audit import AuditFile, audit_path
from gtmcluster.nodeservice import NodeService
from gtmcluster.runtime import slices
from gtmcluster.service import Sockets, make_service
from gtmcluster.state import admin
from gtmcluster.state.record import Record, Version
from tests.support import configs
from tests.unit.test_api_roles import SINGLE, TOKENS, ask, users_file

T0 = 1_800_000_000.0
DISABLE_DC2 = "/api/v1/admin/datacenter/DC2/disable"


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return users_file(tmp_path_factory.mktemp("users") / "users.yaml", TOKENS)


@pytest.fixture
def service(tmp_path: Path, users: Path) -> NodeService:
    raw = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    raw["log_dir"] = str(tmp_path / "log")
    configs.write_secret(tmp_path / "api-token", SINGLE + "\n")
    raw["api"] = {"token_file": "api-token", "token_for_reads": True, "users_file": str(users)}
    reactor = MemoryReactorClock()
    reactor.advance(T0)
    config = load(configs.write(tmp_path, raw))
    audit = AuditFile(config.log_dir, "n1", reactor.seconds)
    top = make_service(config, "n1", reactor, Sockets(dns=[]), audit_log=audit)
    top.snapshots = None
    top.node.ready = True
    return top


def entries(service: NodeService) -> list[dict[str, Any]]:
    path = audit_path(service.node.config.log_dir, "n1")
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_write_is_recorded_before_it_is_made_and_with_how_it_ended(service: NodeService) -> None:
    site = api_site(service, SINGLE)
    code, answer = ask(site, "POST", DISABLE_DC2, TOKENS["operator"], b'{"reason": "maintenance"}')
    assert code == 200, answer
    requested, applied = entries(service)
    assert requested == {
        "time": "2027-01-15T08:00:00.000000Z",
        "node": "n1",
        "origin": "n1",
        "id": requested["id"],
        "who": "operator-1",
        "role": "operator",
        "proof": "token",
        "source": "127.0.0.9",
        "route": f"POST {DISABLE_DC2}",
        "change": "disable data center DC2 (maintenance)",
        "result": "requested",
    }
    assert requested["id"].startswith("n1-") and len(requested["id"]) == 15
    assert applied == {**requested, "result": "applied", "status": 200, "message": "", "detail": applied["detail"]}
    assert json.loads(applied["detail"]) == {"admin": "disabled", "by": "operator-1"}
    # the record carries who, for the other members' audit
    record = service.node.store.get("admin/datacenter/DC2")
    assert record is not None and record.value["id"] == requested["id"] and record.value["who"] == "operator-1"
    # refused by its handler: recorded as refused, with the status and why
    code, _ = ask(site, "POST", "/api/v1/admin/datacenter/DC9/disable", TOKENS["operator"], b"{}")
    assert code == 404
    assert [(e["result"], e.get("status"), e.get("message")) for e in entries(service)[2:]] == [
        ("requested", None, None),
        ("refused", 404, "no data center named 'DC9'"),
    ]


def test_a_write_the_audit_log_cannot_take_is_refused_and_not_made(service: NodeService) -> None:
    path = audit_path(service.node.config.log_dir, "n1")
    path.parent.mkdir(parents=True)
    path.symlink_to("/dev/full")  # a full disk: every write ENOSPC
    site = api_site(service, SINGLE)
    code, answer = ask(site, "POST", DISABLE_DC2, TOKENS["operator"], b"{}")
    assert code == 503
    assert answer == {"error": f"the audit log cannot be written: {path}: No space left on device; nothing was changed"}
    assert service.node.store.get("admin/datacenter/DC2") is None
    code, _ = ask(site, "POST", "/api/v1/reload", SINGLE, b"{}")
    assert code == 503
    assert ask(site, "GET", "/api/v1/status", TOKENS["viewer"])[0] == 200  # reads go on
    path.unlink()  # room again
    assert ask(site, "POST", DISABLE_DC2, TOKENS["operator"], b"{}")[0] == 200
    assert [e["result"] for e in entries(service)] == ["requested", "applied"]
    text = slices.whole(metrics_steps(service, {}, {})).body.decode()
    assert 'gtm_audit_writes_total{outcome="failed"} 2.0' in text
    assert 'gtm_audit_writes_total{outcome="ok"} 2.0' in text


def test_refused_requests_are_recorded_at_most_so_many_per_source_a_minute(service: NodeService) -> None:
    site = api_site(service, SINGLE)
    assert ask(site, "POST", DISABLE_DC2, TOKENS["viewer"], b"{}")[0] == 403  # a role too low
    assert ask(site, "GET", "/api/v1/config", TOKENS["operator"])[0] == 403  # a read too
    assert ask(site, "GET", "/api/v1/status", None)[0] == 401
    assert ask(site, "GET", "/api/v1/status", TOKENS["viewer"])[0] == 200  # (not recorded)
    role, read, none = entries(service)
    assert (role["who"], role["role"], role["result"], role["status"]) == ("viewer-1", "viewer", "refused", 403)
    assert role["message"] == "this needs the operator role; viewer-1 is a viewer" and role["route"].startswith("POST")
    assert (read["who"], read["status"], read["route"]) == ("operator-1", 403, "GET /api/v1/config")
    assert (none["who"], none["proof"], none["status"]) == ("", "", 401)
    for _ in range(30):  # a flood of wrong tokens
        assert ask(site, "POST", DISABLE_DC2, SINGLE + "x", b"{}")[0] == 403
    assert len(entries(service)) == 10  # 10 from one source a minute
    reactor: Any = service.reactor
    reactor.advance(60)  # the window's end: one summary of what it left out
    summary = entries(service)[-1]
    assert summary["result"] == "refused" and summary["detail"] == "since 2027-01-15T08:00:00.000000Z"
    assert summary["message"] == ("and 23 more refused requests not recorded one by one, from 1 source (127.0.0.9 23)")
    assert ask(site, "POST", DISABLE_DC2, SINGLE + "x", b"{}")[0] == 403  # a new window
    assert len(entries(service)) == 12


def test_an_admin_change_of_another_member_is_recorded_when_taken(service: NodeService) -> None:
    api_site(service, SINGLE)  # (subscribes the audit to the store)
    store = service.node.store
    value = {
        **admin.value("disabled", "alice", "maintenance", T0 - 5, "n2"),
        **{"who": "alice", "role": "operator", "proof": "token", "source": "192.0.2.7", "id": "n2-00000000abcd"},
    }
    assert store.merge(Record("admin/datacenter/DC1", value, Version(int(T0 * 1000), 0, "n2"), None, T0))
    (taken,) = entries(service)
    assert taken == {
        "time": "2027-01-15T08:00:00.000000Z",
        "node": "n1",
        "origin": "n2",
        "id": "n2-00000000abcd",
        "who": "alice",
        "role": "operator",
        "proof": "token",
        "source": "192.0.2.7",
        "route": "POST /api/v1/admin/datacenter/DC1/disable",
        "change": "disable data center DC1 (maintenance)",
        "result": "applied",
        "detail": "taken from n2; made there at 2027-01-15T07:59:55.000000Z",
    }
    # the same again (relayed by another peer) is not taken again; a record of an older
    # member (no identity carried) says who by its "by"; the node's own saved state is no news
    assert not store.merge(Record("admin/datacenter/DC1", value, Version(int(T0 * 1000), 0, "n2"), None, T0))
    older = admin.value("drain", "bob", "", T0, "n3")
    store.merge(Record("admin/pool/p", older, Version(int(T0 * 1000), 1, "n3"), None, T0))
    assert (entries(service)[-1]["who"], entries(service)[-1]["role"]) == ("bob", "")
    store.load([Record("admin/datacenter/DC2", value, Version(int(T0 * 1000), 2, "n2"), None, T0)])
    assert len(entries(service)) == 2


def test_the_audit_route_reads_by_who_and_limit_for_viewers_and_up(service: NodeService) -> None:
    site = api_site(service, SINGLE)
    for action in ("disable", "enable"):
        assert ask(site, "POST", f"/api/v1/admin/datacenter/DC2/{action}", TOKENS["operator"], b"{}")[0] == 200
    assert ask(site, "POST", "/api/v1/admin/pool/p/drain", SINGLE, b"{}")[0] == 200
    lines = ask_lines(site, "/api/v1/audit?who=operator-1", TOKENS["viewer"])
    assert [(e["who"], e["change"], e["result"]) for e in lines] == [
        ("operator-1", "disable data center DC2", "requested"),
        ("operator-1", "disable data center DC2", "applied"),
        ("operator-1", "enable data center DC2", "requested"),
        ("operator-1", "enable data center DC2", "applied"),
    ]
    assert [e["who"] for e in ask_lines(site, "/api/v1/audit?limit=1", TOKENS["viewer"])] == ["api-token"]
    assert ask(site, "GET", "/api/v1/audit", None)[0] == 401
    code, answer = ask(site, "GET", "/api/v1/audit?limit=x", TOKENS["viewer"])
    assert code == 400 and answer == {"error": "limit: not a number: 'x'"}


def ask_lines(site: Any, path: str, token: str) -> list[dict[str, Any]]:
    from tests.unit.test_api_roles import connect, send

    channel, transport = connect(site)
    channel.dataReceived(send("GET", path, token))
    head, _, body = transport.value().partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return [json.loads(line) for line in _unchunk(body).decode().splitlines() if line]


def _unchunk(body: bytes) -> bytes:
    out = b""
    while body:
        size_text, _, rest = body.partition(b"\r\n")
        size = int(size_text, 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    return out
