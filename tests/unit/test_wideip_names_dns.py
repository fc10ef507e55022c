"""Wildcard wide IPs and aliases as a node answers them: through the fast path (as UDP
gets them) compared byte for byte with the general path, and what the answers say."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import pytest
from twisted.internet.testing import MemoryReactorClock

from gtmcluster.api import admin as api_admin
from gtmcluster.config.load import load
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.node import Node
from gtmcluster.service import Sockets, make_service
from tests.support import configs
from tests.support.dnsclient import addresses, answers, parse, query
from tests.support.twins import Twins, make_query
from tests.unit.test_api_admin import ask as admin_ask

#: static records under the wildcards: overridden for A, kept for other types; and a
#: delegation under *.wild (its names are referred, not answered)
ZONE = configs.ZONE + (
    'x.apps IN A 192.0.2.70\nx.apps IN TXT "static x"\nd.wild IN NS ns.d.wild\nns.d.wild IN A 192.0.2.55\n'
)
WIDEIPS: dict[str, Any] = {
    "*.apps.example.test": {"pools": ["two"]},
    "api.apps.example.test": {"pools": ["three"]},
    "*.eu.apps.example.test": {"pools": ["one"]},
    "*.wild.example.test": {"pools": ["one"]},
}


def names_config(raw: dict[str, Any]) -> None:
    for n in (1, 2, 3):
        word = ("one", "two", "three")[n - 1]
        raw["pools"][word] = {"members": [f"vs{n}"], "ttl": 20}
    raw["pools"]["both"] = {"members": ["vs1", "vs2"], "load_balancing": {"preferred": "round_robin"}}
    raw["wideips"].update(WIDEIPS)
    raw["wideips"]["gslb.example.test"]["aliases"] = ["glb.example.test", "www.example.test", "*.glb.example.test"]


class Asker:
    """A node answering as UDP does: the fast path first (`FastPath`)."""

    def __init__(self, tmp_path: Path):
        raw = configs.base()
        names_config(raw)
        self.node = Node(load(configs.write(tmp_path, raw, ZONE)), "n1", clock=lambda: 1000.0, rng=random.Random(7))
        self.fast = FastPath(self.node.responder)

    def __call__(self, name: str, rdtype: str = "A", source: str = "127.0.0.1") -> dns.message.Message:
        reply = self.fast.handle(query(name, rdtype), source)
        assert reply is not None
        return parse(reply)


@pytest.fixture
def ask(tmp_path: Path) -> Asker:
    return Asker(tmp_path)


def test_a_wildcard_answers_names_below_it_with_the_queried_name(ask: Asker) -> None:
    """Two names, one label and three labels below the wildcard: the wide IP's answer,
    authoritative, owned by the name asked (in its case)."""
    for name in ("web.apps.example.test", "A.b.C.apps.example.test"):
        msg = ask(name)
        assert answers(msg) == [f"{name}. A 10.0.2.1"]
        assert msg.flags & dns.flags.AA and msg.answer[0].ttl == 20


def test_the_wildcard_wins_over_the_zones_records_for_its_types(ask: Asker) -> None:
    """x.apps has a static A: the wide IP answers A there; the zone's TXT stays, and a
    type neither has is NODATA. Names only the wildcard makes exist are NODATA for other
    types, not NXDOMAIN; the wildcard's parent itself is not covered."""
    assert addresses(ask("x.apps.example.test")) == ["10.0.2.1"]
    assert addresses(ask("q.x.apps.example.test")) == ["10.0.2.1"]
    assert answers(ask("x.apps.example.test", "TXT")) == ['x.apps.example.test. TXT "static x"']
    for name, rdtype in [
        ("x.apps.example.test", "AAAA"),
        ("new.apps.example.test", "TXT"),
        ("a.b.apps.example.test", "MX"),
        ("q.x.apps.example.test", "TXT"),  # (the zone alone: NXDOMAIN, below the existing x.apps)
    ]:
        msg = ask(name, rdtype)
        assert msg.rcode() == dns.rcode.NOERROR and not msg.answer, name
        assert msg.authority[0].rdtype == dns.rdatatype.SOA
    parent = ask("apps.example.test")
    assert parent.rcode() == dns.rcode.NOERROR and not parent.answer  # (it exists: names below it do)


def test_the_zones_own_wildcard_is_overridden_and_a_delegation_still_refers(ask: Asker) -> None:
    """*.wild.example.test is also a wildcard of the zone (192.0.2.99): the wide IP answers
    A; below the delegation d.wild the answer is the referral, as without the wide IP."""
    assert addresses(ask("any.wild.example.test")) == ["10.0.1.1"]
    assert answers(ask("any.wild.example.test", "TXT")) == []
    referral = ask("host.d.wild.example.test")
    assert not referral.flags & dns.flags.AA and not referral.answer
    assert referral.authority[0].rdtype == dns.rdatatype.NS


def test_the_most_specific_wide_ip_wins(ask: Asker) -> None:
    """An exact wide IP below a wildcard answers its name; names below it go to the
    closest wildcard; a deeper wildcard wins over the shallower one."""
    assert addresses(ask("api.apps.example.test")) == ["10.0.3.1"]
    assert addresses(ask("v1.api.apps.example.test")) == ["10.0.2.1"]
    assert addresses(ask("web.eu.apps.example.test")) == ["10.0.1.1"]
    assert addresses(ask("eu.apps.example.test")) == ["10.0.2.1"]


def test_an_alias_answers_exactly_as_its_wide_ip(ask: Asker) -> None:
    """glb, www and *.glb are aliases of gslb: the same decisions (topology by the source),
    both types; www's static TXT still answers TXT."""
    for source, v4 in [("127.0.1.9", "10.0.1.1"), ("127.0.2.9", "10.0.2.1"), ("192.0.2.200", "10.0.3.1")]:
        for name in ("gslb.example.test", "glb.example.test", "www.example.test", "a.b.glb.example.test"):
            assert addresses(ask(name, source=source)) == [v4], (name, source)
    assert addresses(ask("glb.example.test", "AAAA", "127.0.2.9")) == ["2001:db8:2::1"]
    assert answers(ask("www.example.test", "TXT")) == ['www.example.test. TXT "static text"']


def test_counters_and_persistence_are_the_wide_ips(tmp_path: Path) -> None:
    """Queries count under the wide IP's configured name, whatever name was asked; a
    persistence record made through one name holds for every name of the wide IP."""

    def persist(raw: dict[str, Any]) -> None:
        names_config(raw)
        raw["wideips"]["*.apps.example.test"] = {"pools": ["both"], "persistence": {"ttl": 600}}

    raw = configs.base()
    persist(raw)
    node = Node(load(configs.write(tmp_path, raw, ZONE)), "n1", clock=lambda: 1000.0, rng=random.Random(7))
    node.ready = True
    fast = FastPath(node.responder)
    first = addresses(parse(fast.handle(query("one.apps.example.test"), "127.0.1.9") or b""))
    for name in ("two.apps.example.test", "x.y.apps.example.test", "one.apps.example.test"):
        assert addresses(parse(fast.handle(query(name), "127.0.1.9") or b"")) == first
    other = addresses(parse(fast.handle(query("one.apps.example.test"), "127.0.2.9") or b""))
    assert other != first  # (round robin: without persistence the names would alternate too)
    counted = {k: v for k, v in node.stats.queries.items() if k[0]}
    assert {k[0] for k in counted} == {"*.apps.example.test"} and sum(counted.values()) == 5


def test_wildcard_answers_are_the_general_paths_byte_for_byte(tmp_path: Path) -> None:
    """The fast path answers names under a wildcard from the decision kept for the wide IP
    (a name it never saw included), the same bytes as the general path; names where a
    delegation lies below the wildcard are left to the general path, and still agree."""
    twins = Twins(tmp_path, names_config)
    questions = [
        ("a.apps.example.test", 1),
        ("x.apps.example.test", 1),
        ("x.apps.example.test", 16),
        ("api.apps.example.test", 1),
        ("b.eu.apps.example.test", 1),
        ("glb.example.test", 1),
        ("glb.example.test", 28),
        ("www.example.test", 1),
        ("www.example.test", 16),
        ("q.wild.example.test", 1),
        ("h.d.wild.example.test", 1),
    ]
    for name, qtype in questions * 2:
        twins.ask(make_query(name, qtype), "127.0.1.9")
    twins.ask(make_query("z.apps.example.test", 1), "127.0.1.9")
    hits = twins.node.stats.kept_hits
    twins.general_path_off()
    for name in ("new.apps.example.test", "NEW.Apps.example.test", "v2.api.apps.example.test", "WWW.example.test"):
        assert twins.ask(make_query(name, 1), "127.0.1.9") is not None
    assert twins.node.stats.kept_hits == hits + 4


def test_admin_states_take_a_wide_ips_name_or_alias_not_a_covered_name(tmp_path: Path) -> None:
    """An alias names its wide IP (the record is the wide IP's own); a wildcard by its own
    name; a name a wildcard only covers is refused, naming the wildcard."""
    raw = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    names_config(raw)
    service = make_service(load(configs.write(tmp_path, raw, ZONE)), "n1", MemoryReactorClock(), Sockets(dns=[]))
    service.snapshots = None
    for name, record in [
        ("GLB.example.test.", "admin/wideip/gslb.example.test"),
        ("*.apps.example.test", "admin/wideip/*.apps.example.test"),
        ("*.glb.example.test", "admin/wideip/gslb.example.test"),  # a wildcard alias
    ]:
        code, answer = admin_ask(service, "POST", f"/api/v1/admin/wideip/{name}/disable")
        assert code == 200, answer
        held = service.node.store.get(record)
        assert held is not None and held.value["state"] == "disabled"
    listed = api_admin.wideips(service.node)["wideips"]
    assert listed["gslb.example.test"]["aliases"] == ["glb.example.test", "www.example.test", "*.glb.example.test"]
    assert set(listed) == {"gslb.example.test", *WIDEIPS}  # each wide IP once, by its own name
    code, answer = admin_ask(service, "POST", "/api/v1/admin/wideip/web.apps.example.test/disable")
    assert code == 404
    assert "'web.apps.example.test' is a name wildcard wide IP '*.apps.example.test' answers" in str(answer)


def test_a_wildcard_does_not_answer_inside_a_child_zone(tmp_path: Path) -> None:
    """kid.apps.example.test is a zone of its own on this node: its names are its own, not
    the parent zone's wildcard's; the fast path agrees with the general path there."""
    (tmp_path / "kid.zone").write_text(
        "$TTL 60\n@ IN SOA ns1.example.test. h.example.test. 1 3600 600 86400 30\n  IN NS ns1.example.test.\n"
        "www IN A 192.0.2.9\n"
    )

    def with_kid(raw: dict[str, Any]) -> None:
        names_config(raw)
        raw["zones"].append({"origin": "kid.apps.example.test", "file": "kid.zone"})

    twins = Twins(tmp_path, with_kid)
    for _ in range(2):
        www = parse(twins.ask(make_query("www.kid.apps.example.test", 1)) or b"")
        assert addresses(www) == ["192.0.2.9"]
        assert parse(twins.ask(make_query("new.kid.apps.example.test", 1)) or b"").rcode() == dns.rcode.NXDOMAIN
        assert addresses(parse(twins.ask(make_query("web.apps.example.test", 1), "127.0.1.9") or b"")) == ["10.0.2.1"]
