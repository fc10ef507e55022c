"""CNAME, MX, SRV and NAPTR wide IPs: their config, the engine's choice, the wire answers."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dns.flags
import dns.message
import dns.rcode
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.api import admin as api_admin
from gtmcluster.api.proximity import explain
from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.dnsdata.zone import TYPE_A, TYPE_AAAA, TYPE_CNAME, TYPE_MX, TYPE_NAPTR, TYPE_SRV
from gtmcluster.lb.engine import Balancer
from gtmcluster.lb.trace import Action
from gtmcluster.node import Node
from gtmcluster.runtime import slices
from gtmcluster.state.persistence import StorePersistence
from gtmcluster.state.store import Store
from tests.support import configs
from tests.support.dnsclient import answers, parse, query
from tests.support.lbfakes import FakeAvailability, FakeClock, client
from tests.unit.test_config_errors import assert_form, find, problems_of
from tests.unit.test_responder import ask, handle

CDN = "cdn.example.test"
MAIL = "mail.example.test"
SIP = "_sip._udp.svc.example.test"
ZONE = configs.ZONE + 'edge IN A 192.0.2.44\nedge IN TXT "edge"\nmx1 IN A 192.0.2.61\n'


def cname_config() -> dict[str, Any]:
    """The base config with a CNAME wide IP over two targets: one out of zone, one in it."""
    config = configs.base()
    config["virtual_servers"].update(
        {
            "cdn-a": {"cname": "site.cdn-a.example.net", "datacenter": "DC1"},
            "cdn-b": {"cname": "edge.example.test", "datacenter": "DC2"},
        }
    )
    config["pools"]["cdns"] = {
        "members": ["cdn-a", "cdn-b"],
        "load_balancing": {"preferred": "topology", "alternate": "round_robin"},
    }
    config["wideips"][CDN] = {"type": "CNAME", "pools": ["cdns"]}
    return config


def mail_config() -> dict[str, Any]:
    """MX, SRV and NAPTR wide IPs next to the base config's A wide IP."""
    config = configs.base()
    config["virtual_servers"].update(
        {
            "mx1": {"mx": {"exchange": "mx1.example.test", "preference": 10}, "datacenter": "DC1"},
            "mx2": {"mx": {"exchange": "gslb.example.test", "preference": 20}, "datacenter": "DC2"},
            "mx3": {"mx": {"exchange": "mx.elsewhere.test", "preference": 30}, "datacenter": "DC3"},
            "sip1": {
                "srv": {"target": "sip1.example.net", "port": 5060, "priority": 10, "weight": 60},
                "datacenter": "DC1",
            },
            "sip2": {"srv": {"target": "sip2.example.net", "port": 5061, "priority": 20}, "datacenter": "DC2"},
            "np1": {
                "naptr": {"order": 100, "preference": 10, "flags": "S", "service": "SIP+D2U", "replacement": SIP},
                "datacenter": "DC1",
            },
        }
    )
    config["pools"].update(
        {
            "mx": {"members": ["mx1", "mx2", "mx3"], "max_answers": 3, "ttl": 300},
            "sip": {"members": ["sip1", "sip2"], "max_answers": 2},
            "np": {"members": ["np1"]},
        }
    )
    config["wideips"].update(
        {
            MAIL: {"type": "MX", "pools": ["mx"]},
            SIP: {"type": ["SRV", "NAPTR"], "pools": ["sip", "np"]},
        }
    )
    return config


def node_of(tmp_path: Path, config: dict[str, Any], zone: str = ZONE) -> Node:
    return Node(load(configs.write(tmp_path, config, zone)), "n1", clock=lambda: 1000.0, rng=random.Random(7))


def both_config() -> dict[str, Any]:
    """The CNAME wide IP and the MX, SRV and NAPTR ones in one config."""
    config, mail = cname_config(), mail_config()
    for section in ("virtual_servers", "pools", "wideips"):
        config[section].update(mail[section])
    return config


# -- config ----------------------------------------------------------------------------------


def test_record_servers_load(tmp_path: Path) -> None:
    """cname/mx/srv/naptr servers carry their record; an SRV server's check port is its port."""
    config = load(configs.write(tmp_path, both_config(), ZONE))
    vss = config.virtual_servers
    assert vss["cdn-a"].address is None and vss["cdn-a"].rtype == TYPE_CNAME
    assert vss["cdn-a"].target is not None and vss["cdn-a"].target.text == "site.cdn-a.example.net."
    assert vss["mx1"].target is not None and vss["mx1"].target.text == "10 mx1.example.test."
    assert vss["sip1"].target is not None and vss["sip1"].target.text == "10 60 5060 sip1.example.net."
    assert vss["sip1"].port == 5060 and vss["sip2"].port == 5061
    assert vss["np1"].target is not None
    assert vss["np1"].target.text == f'100 10 "S" "SIP+D2U" "" {SIP}.'
    types = {w.name: w.types for w in config.wideips.values()}
    assert types[MAIL] == {TYPE_MX} and types[SIP] == {TYPE_SRV, TYPE_NAPTR}


def _with(*changes: tuple[tuple[str, ...], Any]) -> Any:
    def apply(config: dict[str, Any]) -> None:
        for path, value in changes:
            node = config
            for part in path[:-1]:
                node = node[part]
            if value is None:
                del node[path[-1]]
            else:
                node[path[-1]] = value

    return apply


VS = ("virtual_servers",)
CDN_W = ("wideips", CDN)


@pytest.mark.parametrize(
    ("change", "path", "fragment"),
    [
        pytest.param(
            _with(((*VS, "cdn-a", "address"), "10.9.9.9")),
            "virtual_servers.cdn-a.address",
            "a cname virtual server has no address (see 'check_address')",
            id="cname-and-address",
        ),
        pytest.param(
            _with(((*VS, "cdn-a", "mx"), {"exchange": "m.example.test"})),
            "virtual_servers.cdn-a.mx",
            "give one of cname, mx, srv, naptr, not 'cname' and 'mx'",
            id="cname-and-mx",
        ),
        pytest.param(
            _with(((*VS, "cdn-a", "monitor"), "tcp")),
            "virtual_servers.cdn-a.monitor",
            "a cname virtual server's monitor needs 'check_address'",
            id="monitor-without-check-address",
        ),
        pytest.param(
            _with(((*VS, "vs1", "check_address"), "10.0.0.1")),
            "virtual_servers.vs1.check_address",
            "only for virtual servers with cname, mx, srv, naptr",
            id="check-address-on-address-server",
        ),
        pytest.param(
            _with(((*VS, "cdn-a", "cname"), "bad..name")),
            "virtual_servers.cdn-a.cname",
            "is not a domain name",
            id="bad-cname",
        ),
        pytest.param(
            _with(((*VS, "cdn-a", "cname"), None), ((*VS, "cdn-a", "srv"), {"target": "x.example.net"})),
            "virtual_servers.cdn-a.srv",
            "missing key 'port'",
            id="srv-without-port",
        ),
        pytest.param(
            _with(((*VS, "cdn-a", "cname"), None), ((*VS, "cdn-a", "naptr"), {"flags": "S!", "replacement": "x.test"})),
            "virtual_servers.cdn-a.naptr.flags",
            "NAPTR flags are letters and digits",
            id="naptr-flags",
        ),
        pytest.param(
            _with(((*VS, "cdn-a", "cname"), None), ((*VS, "cdn-a", "naptr"), {"flags": "U"})),
            "virtual_servers.cdn-a.naptr",
            "needs a 'regexp' or a 'replacement'",
            id="naptr-without-regexp-or-replacement",
        ),
        pytest.param(
            _with(((*VS, "cdn-a", "cname"), None), ((*VS, "cdn-a", "mx"), {"exchange": "m.test", "preference": 70000})),
            "virtual_servers.cdn-a.mx.preference",
            "65535",
            id="mx-preference-range",
        ),
        pytest.param(
            _with(((*CDN_W, "type"), ["CNAME", "A"])),
            'wideips."cdn.example.test".type',
            "a CNAME wide IP has no other type",
            id="cname-with-a",
        ),
        pytest.param(
            _with(((*CDN_W, "pools"), ["p"])),
            'wideips."cdn.example.test".type',
            "type CNAME but no pool has a virtual server with 'cname'",
            id="cname-without-cname-servers",
        ),
        pytest.param(
            _with((("wideips", "www.example.test"), {"type": "CNAME", "pools": ["cdns"]})),
            'wideips."www.example.test"',
            "type CNAME, but zone example.test. has records at this name (types A, TXT)",
            id="cname-over-static-records",
        ),
    ],
)
def test_record_server_mistakes(tmp_path: Path, change: Any, path: str, fragment: str) -> None:
    """Each mistake is one problem naming the file, the key path and what is wrong."""
    config_dict = cname_config()
    config_dict["monitors"] = {"tcp": {"type": "tcp", "interval": 5}}

    def mutate(config: dict[str, Any]) -> None:
        config.clear()
        config.update(config_dict)
        change(config)

    file, problems = problems_of(tmp_path, mutate, zone=ZONE)
    assert_form(find(problems, path, fragment), file, path)


# -- engine ----------------------------------------------------------------------------------

#: kind -> (the virtual server's settings for number i, the type it answers)
KINDS: dict[str, tuple[Callable[[int], dict[str, Any]], int]] = {
    "a": (lambda i: {"address": f"10.7.0.{i}"}, TYPE_A),
    "aaaa": (lambda i: {"address": f"2001:db8:7::{i}"}, TYPE_AAAA),
    "cname": (lambda i: {"cname": f"t{i}.cdn.example.net"}, TYPE_CNAME),
    "mx": (lambda i: {"mx": {"exchange": f"mx{i}.example.net", "preference": 10}}, TYPE_MX),
}

_CONFIGS: dict[tuple[str, ...], Config] = {}


def _mixed(tmp_path_factory: pytest.TempPathFactory, kinds: tuple[str, ...]) -> Config:
    """A config with one pool of servers of *kinds* (in order) and wide IPs of each type."""
    if kinds not in _CONFIGS:
        config = configs.base()
        servers = {}
        for i, kind in enumerate(kinds, 1):
            servers[f"s{i}"] = {**KINDS[kind][0](i), "datacenter": ["DC1", "DC2", "DC3"][i % 3]}
        config["virtual_servers"].update(servers)
        config["pools"]["mixed"] = {
            "members": list(servers),
            "max_answers": 16,
            "load_balancing": {"preferred": "round_robin"},
        }
        present = {KINDS[k][1] for k in kinds}
        names = {TYPE_A: "A", TYPE_AAAA: "AAAA", TYPE_MX: "MX"}
        for t, tname in names.items():
            if t in present:
                config["wideips"][f"{tname.lower()}.example.test"] = {"type": tname, "pools": ["mixed"]}
        if TYPE_CNAME in present:
            config["wideips"]["c.example.test"] = {"type": "CNAME", "pools": ["mixed"]}
        _CONFIGS[kinds] = load(configs.write(tmp_path_factory.mktemp("mixed"), config))
    return _CONFIGS[kinds]


@settings(max_examples=60, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=6).map(tuple),
    down_mask=st.integers(0, 63),
    seed=st.integers(0, 1000),
)
def test_answers_hold_only_available_servers_of_the_asked_type(
    tmp_path_factory: pytest.TempPathFactory, kinds: tuple[str, ...], down_mask: int, seed: int
) -> None:
    """Whatever the mix of servers in a pool, a wide IP of type T answers with available
    servers answering T, all of them (max_answers 16, round robin; one for CNAME), and
    only their records."""
    config = _mixed(tmp_path_factory, kinds)
    down = {f"s{i}" for i in range(1, len(kinds) + 1) if down_mask >> (i - 1) & 1}
    clock = FakeClock()
    balancer = Balancer(
        config.topology, FakeAvailability(down=down), StorePersistence(Store("n1", clock)), clock, random.Random(seed)
    )
    for wideip in config.wideips.values():
        if "mixed" not in {r.name for r in wideip.pools}:
            continue
        (qtype,) = wideip.types
        decision = balancer.decide(wideip, qtype, client("192.0.2.9"))
        want = {f"s{i}" for i, k in enumerate(kinds, 1) if KINDS[k][1] == qtype and f"s{i}" not in down}
        if not want:
            assert decision.action is Action.RETURN_TO_DNS
            continue
        assert decision.action is Action.ANSWER
        if qtype == TYPE_CNAME:  # one CNAME, whatever max_answers says
            assert len(decision.members) == 1 and set(decision.members) <= want
        else:
            assert set(decision.members) == want
        vss = [config.virtual_servers[m] for m in decision.members]
        if qtype in (TYPE_A, TYPE_AAAA):
            assert set(decision.addresses) == {vs.address for vs in vss} and not decision.targets
        else:
            assert set(decision.targets) == {vs.target for vs in vss} and not decision.addresses


def test_cname_topology_works_by_data_center(tmp_path: Path) -> None:
    """Topology picks a cname server by its data center (it has no address); when that one
    goes down, the alternate method answers with the other target."""
    config_dict = cname_config()
    config = load(configs.write(tmp_path, config_dict, ZONE))
    wideip = next(w for w in config.wideips.values() if w.name == CDN)
    clock = FakeClock()
    availability = FakeAvailability()
    b = Balancer(config.topology, availability, StorePersistence(Store("n1", clock)), clock, random.Random(1))
    r1, r2 = client("198.51.100.7"), client("203.0.113.9")
    assert [t.text for t in b.decide(wideip, TYPE_CNAME, r1).targets] == ["site.cdn-a.example.net."]
    assert [t.text for t in b.decide(wideip, TYPE_CNAME, r2).targets] == ["edge.example.test."]
    availability.down.add("cdn-a")
    failed_over = b.decide(wideip, TYPE_CNAME, r1)
    assert failed_over.members == ("cdn-b",) and failed_over.method == "round_robin"


# -- wire answers ----------------------------------------------------------------------------


def test_cname_wide_ip_answers_every_type_with_its_cname(tmp_path: Path) -> None:
    """A, TXT, MX ... at a CNAME wide IP get the CNAME; an out-of-zone target ends the answer."""
    node = node_of(tmp_path, cname_config())
    for rdtype in ("A", "AAAA", "TXT", "MX", "SRV"):
        msg = ask(node, query(CDN, rdtype), "198.51.100.7")
        assert answers(msg) == [f"{CDN}. CNAME site.cdn-a.example.net."], rdtype
        assert msg.flags & dns.flags.AA and msg.rcode() == dns.rcode.NOERROR


def test_one_cname_whatever_max_answers(tmp_path: Path) -> None:
    """A CNAME RRset holds one record (RFC 2181 10.1): max_answers does not add more."""
    config = cname_config()
    config["pools"]["cdns"]["max_answers"] = 2
    config["pools"]["cdns"]["load_balancing"] = {"preferred": "round_robin"}
    node = node_of(tmp_path, config)
    for _ in range(2):
        assert len(ask(node, query(CDN, "CNAME"), "203.0.113.9").answer[0]) == 1


def test_cname_and_any_queries_get_the_cname_alone(tmp_path: Path) -> None:
    """Asked for CNAME (or ANY), the CNAME is the answer; its in-zone target is not chased."""
    node = node_of(tmp_path, cname_config())
    for rdtype in ("CNAME", "ANY"):
        msg = ask(node, query(CDN, rdtype), "203.0.113.9")
        assert answers(msg) == [f"{CDN}. CNAME edge.example.test."], rdtype


def test_in_zone_cname_target_records_are_added(tmp_path: Path) -> None:
    """A target inside our zone is followed: its records of the asked type come after the CNAME."""
    node = node_of(tmp_path, cname_config())
    msg = ask(node, query(CDN, "A"), "203.0.113.9")
    assert answers(msg) == [f"{CDN}. CNAME edge.example.test.", "edge.example.test. A 192.0.2.44"]
    txt = ask(node, query(CDN, "TXT"), "203.0.113.9")
    assert answers(txt) == [f"{CDN}. CNAME edge.example.test.", 'edge.example.test. TXT "edge"']
    nodata = ask(node, query(CDN, "AAAA"), "203.0.113.9")
    assert answers(nodata) == [f"{CDN}. CNAME edge.example.test."] and nodata.authority[0].rdtype == 6


def test_cname_target_that_is_a_wide_ip_gets_its_answer(tmp_path: Path) -> None:
    """A target that is itself a wide IP is answered by load balancing, for the same client."""
    config = cname_config()
    config["virtual_servers"]["cdn-b"]["cname"] = "gslb.example.test"
    node = node_of(tmp_path, config)
    msg = ask(node, query(CDN, "A"), "203.0.113.9")
    assert answers(msg) == [f"{CDN}. CNAME gslb.example.test.", "gslb.example.test. A 10.0.2.1"]
    msg6 = ask(node, query(CDN, "AAAA"), "203.0.113.9")
    assert answers(msg6) == [f"{CDN}. CNAME gslb.example.test.", "gslb.example.test. AAAA 2001:db8:2::1"]


def test_cname_failover_to_the_other_target(tmp_path: Path) -> None:
    """With the topology choice disabled, the other target answers; with both out, the wide
    IP returns to DNS: the name exists but holds nothing (NODATA)."""
    config = cname_config()
    config["virtual_servers"]["cdn-a"]["admin_state"] = "disabled"
    msg = ask(node_of(tmp_path / "one", config), query(CDN, "A"), "198.51.100.7")
    assert answers(msg)[0] == f"{CDN}. CNAME edge.example.test."
    config["virtual_servers"]["cdn-b"]["admin_state"] = "disabled"
    nodata = ask(node_of(tmp_path / "both", config), query(CDN, "A"), "198.51.100.7")
    assert nodata.rcode() == dns.rcode.NOERROR and not nodata.answer and nodata.authority[0].rdtype == 6


def test_mx_answer_with_in_zone_addresses_as_additional_data(tmp_path: Path) -> None:
    """An MX wide IP answers the available exchanges with their preferences; addresses of
    those in our zones (static, or their own wide IP's answer) are additional data."""
    node = node_of(tmp_path, mail_config())
    msg = ask(node, query(MAIL, "MX", edns=0), "198.51.100.7")
    assert sorted(answers(msg)) == [
        f"{MAIL}. MX 10 mx1.example.test.",
        f"{MAIL}. MX 20 gslb.example.test.",
        f"{MAIL}. MX 30 mx.elsewhere.test.",
    ]
    assert msg.answer[0].ttl == 300
    extra = sorted(f"{r.name} {r.rdtype} {rd}" for r in msg.additional for rd in r)
    assert extra == [
        "gslb.example.test. 1 10.0.1.1",
        "gslb.example.test. 28 2001:db8:1::1",
        "mx1.example.test. 1 192.0.2.61",
    ]
    # other types come from the zone, as at an A wide IP
    assert answers(ask(node, query(MAIL, "A"), "198.51.100.7")) == [f"{MAIL}. A 192.0.2.25"]


def test_srv_and_naptr_at_one_name(tmp_path: Path) -> None:
    """SRV answers carry priority, weight, port and target; NAPTR its fields."""
    node = node_of(tmp_path, mail_config())
    srv = ask(node, query(SIP, "SRV"), "203.0.113.9")
    assert sorted(answers(srv)) == [
        f"{SIP}. SRV 10 60 5060 sip1.example.net.",
        f"{SIP}. SRV 20 10 5061 sip2.example.net.",
    ]
    naptr = ask(node, query(SIP, "NAPTR"), "203.0.113.9")
    assert answers(naptr) == [f'{SIP}. NAPTR 100 10 "S" "SIP+D2U" "" {SIP}.']


def test_srv_targets_are_not_compressed(tmp_path: Path) -> None:
    """RFC 2782: the SRV target is written whole, even when an earlier name would compress it."""
    config = mail_config()
    config["virtual_servers"]["sip1"]["srv"]["target"] = SIP
    raw = handle(node_of(tmp_path, config), query(SIP, "SRV"), "198.51.100.7")
    assert raw is not None
    whole = b"\x04_sip\x04_udp\x03svc\x07example\x04test\x00"
    assert raw.count(whole) == 2  # the question's and the target's


def test_big_mx_answers_truncate_over_udp_and_fit_over_tcp(tmp_path: Path) -> None:
    """Sixteen exchanges with long names exceed 512 bytes: TC and no partial RRset over UDP
    without EDNS; all of them over TCP."""
    config = configs.base()
    long = "x" * 60
    for i in range(16):
        config["virtual_servers"][f"m{i}"] = {
            "mx": {"exchange": f"{long}.{long}.m{i}.example.net", "preference": i},
            "datacenter": "DC1",
        }
    config["pools"]["mx"] = {"members": [f"m{i}" for i in range(16)], "max_answers": 16}
    config["wideips"][MAIL] = {"type": "MX", "pools": ["mx"]}
    node = node_of(tmp_path, config)
    raw = handle(node, query(MAIL, "MX"))
    assert raw is not None and len(raw) <= 512
    udp = parse(raw)
    assert udp.flags & dns.flags.TC and not udp.answer
    tcp = ask(node, query(MAIL, "MX"), tcp=True)
    assert not tcp.flags & dns.flags.TC and len(tcp.answer[0]) == 16


def test_additional_addresses_that_do_not_fit_are_left_out_without_tc(tmp_path: Path) -> None:
    """The exchanges' addresses are optional: when they do not fit, the MX answer goes
    without them and without TC."""
    config = mail_config()
    zone = ZONE + "".join(f"mx1 IN A 192.0.2.{i}\n" for i in range(100, 160))
    msg = ask(node_of(tmp_path, config, zone), query(MAIL, "MX"), "198.51.100.7")
    assert len(msg.answer[0]) == 3 and not msg.flags & dns.flags.TC
    assert all(r.name.to_text() != "mx1.example.test." for r in msg.additional)


def test_the_fast_path_leaves_record_wide_ips_to_the_general_path(tmp_path: Path) -> None:
    """Repeated UDP queries (the fast path keeps what it can) give the same record answers,
    and an A wide IP next to them is still answered."""
    node = node_of(tmp_path, both_config())
    for _ in range(3):
        assert answers(ask(node, query(CDN, "CNAME"), "198.51.100.7")) == [f"{CDN}. CNAME site.cdn-a.example.net."]
        assert len(ask(node, query(MAIL, "MX"), "198.51.100.7").answer[0]) == 3
        assert answers(ask(node, query("gslb.example.test", "A"), "198.51.100.7")) == ["gslb.example.test. A 10.0.1.1"]


@settings(max_examples=200, deadline=None)
@given(qtype=st.integers(1, 65535))
def test_every_type_at_a_cname_wide_ip(tmp_path_factory: pytest.TempPathFactory, qtype: int) -> None:
    """Any QTYPE at a CNAME wide IP: the CNAME (alone for CNAME and ANY, with the in-zone
    target's data otherwise), or the error every name gives that type (meta types)."""
    if "cname" not in _NODES:
        _NODES["cname"] = node_of(tmp_path_factory.mktemp("cname"), cname_config())
    node = _NODES["cname"]
    msg = ask(node, query(CDN, qtype), "203.0.113.9")
    static = ask(node, query("www.example.test", qtype), "203.0.113.9")
    if static.rcode() != dns.rcode.NOERROR or qtype == 41:
        assert msg.rcode() == static.rcode() and not msg.answer
        return
    assert msg.rcode() == dns.rcode.NOERROR and msg.flags & dns.flags.AA
    assert answers(msg)[0] == f"{CDN}. CNAME edge.example.test."
    assert all(r.name.to_text() == "edge.example.test." and r.rdtype == qtype for r in msg.answer[1:])
    if qtype in (5, 255):
        assert len(msg.answer) == 1


_NODES: dict[str, Node] = {}


def test_api_lists_and_explains_record_servers(tmp_path: Path) -> None:
    """The health and wide IP listings show a record server's record; explain its answer."""
    node = node_of(tmp_path, both_config())
    health = slices.whole(api_admin.health_steps(node))
    assert health["virtual_servers"]["mx1"]["record"] == "10 mx1.example.test."
    assert health["virtual_servers"]["mx1"]["address"] is None
    assert health["virtual_servers"]["vs1"]["address"] == "10.0.1.1:80"
    wideips = slices.whole(api_admin.wideips_steps(node))
    assert wideips["wideips"][SIP]["types"] == ["NAPTR", "SRV"]
    assert wideips["wideips"][MAIL]["pools"][0]["members"][0]["record"] == "10 mx1.example.test."
    explained = explain(node, {"wideip": CDN, "ldns": "203.0.113.9"})
    assert explained["type"] == "CNAME" and explained["answer"] == ["edge.example.test."]
    srv = explain(node, {"wideip": SIP, "ldns": "203.0.113.9", "type": "SRV"})
    assert sorted(srv["answer"]) == ["10 60 5060 sip1.example.net.", "20 10 5061 sip2.example.net."]


def test_persistence_holds_a_client_to_its_cname_for_every_query_type(tmp_path: Path) -> None:
    """With persistence, round robin's first choice for a client stays its answer, whatever
    type it asks next (the record is per CNAME, not per query type); another client moves on."""
    config = cname_config()
    config["pools"]["cdns"]["load_balancing"] = {"preferred": "round_robin"}
    config["wideips"][CDN]["persistence"] = {"ttl": 600}
    node = node_of(tmp_path, config)
    first = answers(ask(node, query(CDN, "CNAME"), "198.51.100.7"))[0]
    for rdtype in ("A", "AAAA", "TXT", "CNAME", "MX"):
        assert answers(ask(node, query(CDN, rdtype), "198.51.100.7"))[0] == first, rdtype
    assert answers(ask(node, query(CDN, "CNAME"), "203.0.113.9"))[0] != first
