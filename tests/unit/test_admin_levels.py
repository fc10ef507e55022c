"""Operators' admin states at every level, on a real node (its store, health tracker,
balancer and decision cache) with a fake clock: what each level takes out, drain against
disable, kept decisions ending at once, and only the concerned ones being re-evaluated."""

from __future__ import annotations

import ipaddress
import random
from pathlib import Path
from typing import Any

from gtmcluster.api import admin as api_admin
from gtmcluster.cli import status as status_cli
from gtmcluster.config.model import WideIP
from gtmcluster.health.status import evaluate
from gtmcluster.lb.context import Client
from gtmcluster.lb.trace import Action, Decision
from gtmcluster.node import Node
from gtmcluster.state import admin
from tests.support import configs
from tests.support.lbfakes import FakeClock, load_config

A = 1
#: in region r1: topology sends it to DC1 (vs1), else DC3 (score 1)
R1 = "198.51.100.53"
#: in region r2: DC2 (vs2)
R2 = "203.0.113.53"


def config() -> dict[str, Any]:
    """Pool p (vs1, vs2, vs3 by topology), then pool backup (vs2) for gslb.example.test, with
    persistence; wide IP other.example.test on pool solo (vs2 only: no server of DC1); wide
    IP one.example.test on pool one (vs1, whose link is l1); plain.example.test on pool p,
    without persistence (its decisions are kept)."""
    raw = configs.base()
    raw["monitors"] = {"tcp": {"type": "tcp", "interval": 5, "timeout": 2, "port": 80}}
    raw["links"] = {"l1": {"datacenter": "DC1", "monitor": "tcp", "targets": ["192.0.2.9:80"]}}
    raw["virtual_servers"]["vs1"]["link"] = "l1"
    raw["pools"]["backup"] = {"members": ["vs2"], "load_balancing": {"preferred": "global_availability"}, "ttl": 30}
    raw["pools"]["solo"] = {"members": ["vs2"], "load_balancing": {"preferred": "global_availability"}, "ttl": 30}
    raw["pools"]["one"] = {"members": ["vs1"], "load_balancing": {"preferred": "global_availability"}, "ttl": 30}
    wideip = raw["wideips"]["gslb.example.test"]
    wideip["pools"] = ["p", "backup", "p6"]
    wideip["persistence"] = {"ttl": 600, "ipv4_prefix": 24}
    raw["wideips"]["other.example.test"] = {"type": "A", "pools": ["solo"]}
    raw["wideips"]["one.example.test"] = {"type": "A", "pools": ["one"]}
    raw["wideips"]["plain.example.test"] = {"type": "A", "pools": ["p"]}
    return raw


def make_node(tmp_path: Path, clock: FakeClock | None = None) -> Node:
    node = Node(load_config(tmp_path, config()), "n1", clock=clock or FakeClock(), rng=random.Random(1))
    node.ready = True
    return node


def wip(node: Node, name: str) -> WideIP:
    return next(w for w in node.config.wideips.values() if w.name == name)


def client(address: str) -> Client:
    return Client.from_ldns(ipaddress.ip_address(address))


def ask(node: Node, name: str, ldns: str = R1) -> Decision:
    """The node's decision for *ldns*, as the responder asks it: a kept one when it holds."""
    wideip = wip(node, name)
    kept = node.cached(wideip, A, ldns, lambda: client(ldns))
    return kept if kept is not None else node.decide(wideip, A, client(ldns), key=ldns)


def set_state(node: Node, target: str, name: str, action: str, reason: str = "test") -> dict[str, Any]:
    return api_admin.change(node, target, name, action, by="alice", reason=reason)


def test_a_disabled_datacenter_sends_its_traffic_elsewhere_within_one_decision(tmp_path: Path) -> None:
    """plain's kept answer (vs1 in DC1) ends the moment DC1 is disabled: the very next query
    is answered from DC3; enabling DC1 brings it back at the next query. The servers of DC1
    say why they are out (who, why)."""
    node = make_node(tmp_path)
    assert ask(node, "plain.example.test").members == ("vs1",)
    assert ask(node, "plain.example.test").members == ("vs1",)
    assert node.stats.kept_hits == 1  # the second answer was the kept one
    set_state(node, "datacenter", "DC1", "disable", "maintenance")
    assert ask(node, "plain.example.test").members == ("vs3",)
    assert ask(node, "gslb.example.test").members == ("vs3",)
    status = node.health.snapshot.vs["vs1"]
    assert not status.serving and status.admin == "disabled"
    assert status.reason == "data center DC1 disabled by alice (maintenance)"
    assert node.health.snapshot.vs["vs1-6"].admin == "disabled"
    assert node.health.snapshot.vs["vs2"].available
    set_state(node, "datacenter", "DC1", "enable")
    assert ask(node, "plain.example.test").members == ("vs1",)
    assert node.health.snapshot.vs["vs1"].available


def test_a_datacenter_change_evaluates_only_its_servers_and_keeps_other_wideips_decisions(tmp_path: Path) -> None:
    """Disabling DC1 evaluates DC1's two servers (vs1, vs1-6) and nothing else; the kept
    decision of other.example.test (no server in DC1) still holds."""
    node = make_node(tmp_path)
    ask(node, "other.example.test")
    ask(node, "plain.example.test")
    before = node.health.evaluations
    set_state(node, "datacenter", "DC1", "disable")
    node.health.settle()
    assert node.health.evaluations - before == 2
    assert node.cached(wip(node, "other.example.test"), A, R1) is not None
    assert node.cached(wip(node, "plain.example.test"), A, R1) is None


def test_a_draining_datacenter_keeps_persisted_clients_and_takes_no_new_ones(tmp_path: Path) -> None:
    """Drain (F5's smooth exit): the client held on vs1 by persistence keeps it; a new
    client of the same region goes to DC3."""
    node = make_node(tmp_path)
    first = node.decide(wip(node, "gslb.example.test"), A, client(R1))
    assert first.members == ("vs1",) and first.persist is not None
    set_state(node, "datacenter", "DC1", "drain")
    held = node.decide(wip(node, "gslb.example.test"), A, client(R1))
    assert held.members == ("vs1",) and held.method == "persistence"
    neighbour = node.decide(wip(node, "gslb.example.test"), A, client("198.51.100.7"))
    assert neighbour.members == ("vs1",)  # the same /24: held by the same record
    newcomer = node.decide(wip(node, "gslb.example.test"), A, client("127.0.1.5"))  # r1, another network
    assert newcomer.members == ("vs3",)
    assert node.health.snapshot.vs["vs1"].reason == (
        "draining: only clients held by persistence (data center DC1 draining by alice (test))"
    )


def test_a_disabled_link_takes_out_only_the_servers_bound_to_it(tmp_path: Path) -> None:
    """Disabling link l1 takes out vs1 (bound to it) and not vs1-6 (same data center, no
    link); one.example.test (vs1 only) then has nothing and returns to DNS."""
    node = make_node(tmp_path)
    assert ask(node, "one.example.test").members == ("vs1",)
    set_state(node, "link", "l1", "disable")
    assert not node.health.snapshot.vs["vs1"].serving
    assert node.health.snapshot.vs["vs1-6"].available
    assert ask(node, "one.example.test").action is Action.RETURN_TO_DNS
    assert ask(node, "gslb.example.test").members == ("vs3",)


def test_a_disabled_pool_is_skipped_for_the_next_pool(tmp_path: Path) -> None:
    """Pool p disabled: gslb answers from the next pool (backup: vs2), and the trace says
    who took p out; vs1 stays available (one.example.test still answers with it)."""
    node = make_node(tmp_path)
    assert ask(node, "gslb.example.test").pool == "p"
    set_state(node, "pool", "p", "disable", "rebuild")
    decision = ask(node, "gslb.example.test")
    assert (decision.pool, decision.members) == ("backup", ("vs2",))
    assert any(s.slot == "admin" and "pool p disabled by alice (rebuild)" in s.note for s in decision.trace)
    assert ask(node, "one.example.test").members == ("vs1",)
    set_state(node, "pool", "p", "enable")
    assert ask(node, "gslb.example.test", "127.0.1.5").pool == "p"  # (R1 is held on backup now)


def test_a_draining_pool_keeps_its_persisted_clients(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    assert node.decide(wip(node, "gslb.example.test"), A, client(R1)).pool == "p"
    set_state(node, "pool", "p", "drain")
    held = node.decide(wip(node, "gslb.example.test"), A, client(R1))
    assert (held.pool, held.method) == ("p", "persistence")
    assert node.decide(wip(node, "gslb.example.test"), A, client("127.0.1.5")).pool == "backup"
    set_state(node, "pool", "p", "disable")  # disabled: the held client moves too
    assert node.decide(wip(node, "gslb.example.test"), A, client(R1)).pool == "backup"


def test_a_disabled_pool_member_is_out_of_that_pool_only(tmp_path: Path) -> None:
    """p/vs1 disabled: gslb's r1 clients get vs3 (topology's next) from pool p, while pool
    one still answers with vs1."""
    node = make_node(tmp_path)
    assert ask(node, "gslb.example.test").members == ("vs1",)
    set_state(node, "pool-member", "p/vs1", "disable")
    decision = ask(node, "gslb.example.test")
    assert (decision.pool, decision.members) == ("p", ("vs3",))
    assert any(s.slot == "admin" and "pool member p/vs1 disabled" in s.note for s in decision.trace)
    assert ask(node, "one.example.test").members == ("vs1",)
    assert node.health.snapshot.vs["vs1"].available


def test_a_draining_pool_member_keeps_its_persisted_clients(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    assert node.decide(wip(node, "gslb.example.test"), A, client(R1)).members == ("vs1",)
    set_state(node, "pool-member", "p/vs1", "drain")
    assert node.decide(wip(node, "gslb.example.test"), A, client(R1)).members == ("vs1",)
    assert node.decide(wip(node, "gslb.example.test"), A, client("127.0.1.5")).members == ("vs3",)


def test_a_disabled_wideip_answers_its_failure_response(tmp_path: Path) -> None:
    """A disabled wide IP answers as when no pool has an available member: its
    failure_response (return_to_dns by default), even for a client held by persistence;
    other wide IPs' kept decisions hold."""
    node = make_node(tmp_path)
    assert node.decide(wip(node, "gslb.example.test"), A, client(R1)).members == ("vs1",)
    ask(node, "other.example.test")
    set_state(node, "wideip", "GSLB.example.test.", "disable", "retired")
    decision = node.decide(wip(node, "gslb.example.test"), A, client(R1))
    assert decision.action is Action.RETURN_TO_DNS
    assert decision.trace[0].slot == "admin" and "wide IP gslb.example.test disabled by alice" in decision.trace[0].note
    assert node.cached(wip(node, "other.example.test"), A, R1) is not None
    set_state(node, "wideip", "gslb.example.test", "enable")
    assert node.decide(wip(node, "gslb.example.test"), A, client(R1)).members == ("vs1",)


def test_a_draining_wideip_answers_persisted_clients_only(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    node.decide(wip(node, "gslb.example.test"), A, client(R1))
    set_state(node, "wideip", "gslb.example.test", "drain")
    assert node.decide(wip(node, "gslb.example.test"), A, client(R1)).method == "persistence"
    assert node.decide(wip(node, "gslb.example.test"), A, client("127.0.1.5")).action is Action.RETURN_TO_DNS


def test_a_virtual_server_disabled_says_by_whom_and_why(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    set_state(node, "virtual-server", "vs1", "disable", "patching")
    assert node.health.snapshot.vs["vs1"].reason == "disabled by an operator (alice: patching)"
    assert ask(node, "gslb.example.test").members == ("vs3",)


def test_a_server_is_as_restricted_as_the_most_restricted_above_it(tmp_path: Path) -> None:
    """vs1 enabled by its own record, its data center draining, its link disabled: it is
    disabled; the tracker's incremental evaluation equals the whole evaluation."""
    node = make_node(tmp_path)
    set_state(node, "virtual-server", "vs1", "enable")
    set_state(node, "datacenter", "DC1", "drain")
    assert node.health.snapshot.vs["vs1"].admin == "drain"
    set_state(node, "link", "l1", "disable")
    assert node.health.snapshot.vs["vs1"].admin == "disabled"
    assert node.health.snapshot.vs["vs1-6"].admin == "drain"
    whole, _ = evaluate(node.config, node.store)
    assert dict(node.health.snapshot.vs) == whole


def test_each_change_records_who_why_when_and_where(tmp_path: Path) -> None:
    """The record of a change: state, by, reason, at (the node's clock), node; an enable is
    a record too (who enabled, when)."""
    clock = FakeClock(1_800_000_000.0)
    node = make_node(tmp_path, clock)
    set_state(node, "pool-member", "p/vs1", "disable", "bad disk")
    clock.advance(60)
    set_state(node, "datacenter", "DC2", "enable")
    states = {(s["level"], s["name"]): s for s in api_admin.admin_states(node)}
    assert states[("member", "p/vs1")] == {
        "level": "member",
        "name": "p/vs1",
        "state": "disabled",
        "by": "alice",
        "reason": "bad disk",
        "at": 1_800_000_000.0,
        "node": "n1",
    }
    assert states[("datacenter", "DC2")]["state"] == "enabled"
    assert states[("datacenter", "DC2")]["at"] == 1_800_000_060.0


def test_admin_states_survive_a_reload_and_apply_to_the_new_config(tmp_path: Path) -> None:
    """The balancer's admin states are read again from the store for a new config."""
    node = make_node(tmp_path)
    set_state(node, "pool", "p", "disable")
    node.reload(load_config(tmp_path / "again", config()))
    assert ask(node, "gslb.example.test").pool == "backup"


def test_an_admin_record_of_another_shape_counts_for_nothing(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    node.store.put("admin/datacenter/DC1", {"state": "off"})
    node.store.put("admin/pool/p", {"state": ["disabled"]})
    assert node.health.snapshot.vs["vs1"].available
    assert ask(node, "gslb.example.test").members == ("vs1",)
    assert admin.from_value("pool", "p", {"state": "drain", "at": True}) == admin.AdminState("pool", "p", "drain")


# -- admin states in the config: the default an operator's record overrides ------------------


def configured_node(tmp_path: Path, change: dict[tuple[str, str], dict[str, Any]]) -> Node:
    """A node of `config()` with *change* applied: {("pools", "p"): {"admin_state": ...}}."""
    raw = config()
    for path, settings in change.items():
        target = raw
        for key in path:
            target = target[key]
        target.update(settings)
    node = Node(load_config(tmp_path, raw), "n1", clock=FakeClock(), rng=random.Random(1))
    node.ready = True
    return node


def test_a_pool_disabled_in_the_config_is_skipped_until_an_operator_enables_it(tmp_path: Path) -> None:
    """Pool p `admin_state: disabled`: gslb answers from backup, the trace saying the config
    took p out; its servers stay available elsewhere. `gtmcluster enable pool p` (a record)
    overrides the config at the next query; a later disable record takes it out again."""
    node = configured_node(tmp_path, {("pools", "p"): {"admin_state": "disabled"}})
    decision = ask(node, "plain.example.test")
    assert decision.action is Action.RETURN_TO_DNS  # (plain's only pool)
    decision = ask(node, "gslb.example.test")
    assert (decision.pool, decision.members) == ("backup", ("vs2",))
    assert any(
        s.slot == "admin" and s.note == "pool p disabled in the config: out for every client" for s in decision.trace
    )
    assert ask(node, "one.example.test").members == ("vs1",)
    set_state(node, "pool", "p", "enable")
    assert ask(node, "plain.example.test").members == ("vs1",)
    assert ask(node, "gslb.example.test", "127.0.1.5").pool == "p"
    set_state(node, "pool", "p", "disable")
    assert ask(node, "plain.example.test").action is Action.RETURN_TO_DNS


def test_a_pool_member_disabled_in_the_config_is_out_of_that_pool_only(tmp_path: Path) -> None:
    """p's member vs1 `admin_state: disabled`: r1 clients get vs3 (topology's next) from p;
    pool one still answers with vs1; an operator's enable gives vs1 back to p."""
    member = {"virtual_server": "vs1", "admin_state": "disabled"}
    node = configured_node(tmp_path, {("pools", "p"): {"members": [member, "vs2", "vs3"]}})
    assert node.config.pools["p"].members[0].admin_state == "disabled"
    decision = ask(node, "plain.example.test")
    assert (decision.pool, decision.members) == ("p", ("vs3",))
    assert any("pool member p/vs1 disabled in the config" in s.note for s in decision.trace)
    assert ask(node, "one.example.test").members == ("vs1",)
    set_state(node, "pool-member", "p/vs1", "enable")
    assert ask(node, "plain.example.test").members == ("vs1",)


def test_a_wideip_disabled_in_the_config_answers_its_failure_response(tmp_path: Path) -> None:
    """A wide IP `admin_state: disabled` answers as one disabled by an operator: its
    failure_response (here return_to_dns: the zone answers); enabled by an operator, it
    answers from its pools."""
    node = configured_node(tmp_path, {("wideips", "plain.example.test"): {"admin_state": "disabled"}})
    decision = ask(node, "plain.example.test")
    assert decision.action is Action.RETURN_TO_DNS
    assert decision.trace[0].note == "wide IP plain.example.test disabled in the config: out for every client"
    assert ask(node, "gslb.example.test").members == ("vs1",)
    set_state(node, "wideip", "plain.example.test", "enable")
    assert ask(node, "plain.example.test").members == ("vs1",)


def test_a_last_resort_pool_disabled_in_the_config_is_not_used(tmp_path: Path) -> None:
    """other.example.test's pool solo (vs2) down: its last resort pool one would answer,
    but not while the config disables it."""
    wideip = {"last_resort_pool": "one"}
    node = configured_node(tmp_path, {("wideips", "other.example.test"): wideip})
    set_state(node, "virtual-server", "vs2", "disable")
    assert ask(node, "other.example.test").pool == "one"
    node = configured_node(
        tmp_path / "off", {("wideips", "other.example.test"): wideip, ("pools", "one"): {"admin_state": "disabled"}}
    )
    set_state(node, "virtual-server", "vs2", "disable")
    assert ask(node, "other.example.test").action is Action.RETURN_TO_DNS


def test_a_pool_draining_in_the_config_takes_no_new_clients(tmp_path: Path) -> None:
    node = configured_node(tmp_path, {("pools", "p"): {"admin_state": "drain"}})
    assert node.decide(wip(node, "gslb.example.test"), A, client(R1)).pool == "backup"


def test_the_admin_list_shows_the_configs_states_until_a_record_overrides_them(tmp_path: Path) -> None:
    """`GET /api/v1/admin` (and `status`) list the config's states other than enabled, marked
    configured; an operator's record takes the place of the config's in the list. The wide
    IP listing shows the state that applies to each wide IP, pool and member."""
    member = {"virtual_server": "vs2", "admin_state": "drain"}
    node = configured_node(
        tmp_path,
        {
            ("pools", "p"): {"admin_state": "disabled"},
            ("pools", "backup"): {"members": [member]},
            ("wideips", "plain.example.test"): {"admin_state": "disabled"},
        },
    )
    listed = {(s["level"], s["name"]): s for s in api_admin.admin_states(node)}
    assert listed == {
        ("pool", "p"): {
            "level": "pool", "name": "p", "state": "disabled", "by": "", "reason": "", "at": None, "node": "",
            "configured": True,
        },
        ("member", "backup/vs2"): {
            "level": "member", "name": "backup/vs2", "state": "drain", "by": "", "reason": "", "at": None,
            "node": "", "configured": True,
        },
        ("wideip", "plain.example.test"): {
            "level": "wideip", "name": "plain.example.test", "state": "disabled", "by": "", "reason": "",
            "at": None, "node": "", "configured": True,
        },
    }  # fmt: skip
    lines = status_cli.admin_lines({"n1": {"admin": api_admin.admin_states(node)}})
    assert "  pool p disabled in the config" in lines
    assert "  pool member backup/vs2 draining in the config" in lines
    set_state(node, "pool", "p", "enable")
    listed = {(s["level"], s["name"]): s for s in api_admin.admin_states(node)}
    assert listed[("pool", "p")]["state"] == "enabled" and "configured" not in listed[("pool", "p")]
    wideips = api_admin.wideips(node)["wideips"]
    assert wideips["plain.example.test"]["admin"] == "disabled"
    pools = {p["name"]: p for p in wideips["gslb.example.test"]["pools"]}
    assert (pools["p"]["admin"], pools["backup"]["admin"], pools["backup"]["members"][0]["admin"]) == (
        "enabled",
        "enabled",
        "drain",
    )


def test_nothing_configured_other_than_enabled_adds_nothing_to_decide(tmp_path: Path) -> None:
    """With no admin_state in the config, no wide IP carries configured states (the
    balancer then looks up only operators' records, as before)."""
    node = make_node(tmp_path)
    assert all(not w.configured_admin for w in node.config.wideips.values())
    assert node.config.admin_defaults == {}


def test_a_reload_applies_the_new_configs_admin_states(tmp_path: Path) -> None:
    node = configured_node(tmp_path, {("pools", "p"): {"admin_state": "disabled"}})
    assert ask(node, "plain.example.test").action is Action.RETURN_TO_DNS
    node.reload(load_config(tmp_path / "again", config()))
    assert ask(node, "plain.example.test").members == ("vs1",)
