"""Round trip: each F5 sample imported by the real CLI, checked by `gtmcluster check`, then
asked the questions F5 would answer in a known way (topology, global availability, ratio,
fallback IP), with the decision engine on the imported config."""

from __future__ import annotations

import collections

import pytest

from gtmcluster.config.model import Config
from gtmcluster.dnsdata.zone import TYPE_AAAA, TYPE_CNAME
from gtmcluster.lb.trace import Action
from tests.support.f5asker import Asker, imported

# -- tmsh bigip_gtm.conf ---------------------------------------------------------------------

CNC_LDNS, TEL_LDNS, CMCC_LDNS, OTHER_LDNS = "202.106.1.53", "219.172.9.53", "211.136.4.53", "8.8.8.8"


@pytest.fixture(scope="module")
def tmsh(tmp_path_factory: pytest.TempPathFactory) -> Config:
    return imported(tmp_path_factory.mktemp("tmsh"), "bigip_gtm.conf")


def test_tmsh_topology_sends_each_isp_to_its_data_center(tmsh: Config) -> None:
    """web_pool prefers rtt (no paths measured yet), so its alternate, topology, decides:
    the LDNS's region or subnet picks the data center; the 0.0.0.0/0 record sends the rest
    to TEL."""
    asker = Asker(tmsh)
    assert asker.answer("www.wip.example.com", CNC_LDNS) == ["202.106.83.177"]
    assert asker.answer("www.wip.example.com", "61.136.178.229") == ["219.17.66.100"]  # tel_nets
    assert asker.answer("www.wip.example.com", TEL_LDNS) == ["219.17.66.100"]
    assert asker.answer("www.wip.example.com", CMCC_LDNS) == ["211.136.20.80"]
    assert asker.answer("www.wip.example.com", OTHER_LDNS) == ["219.17.66.100"]
    d = asker.ask("www.wip.example.com", CNC_LDNS)
    assert (d.pool, d.method, d.ttl) == ("web_pool", "topology", 30)


def test_tmsh_down_data_center_moves_its_clients(tmsh: Config) -> None:
    """With CNC's server down, a CNC resolver gets what topology scores next (TEL, by 0/0)."""
    asker = Asker(tmsh)
    asker.availability.down = {"bigip_cnc.vs_www_cnc"}
    assert asker.answer("www.wip.example.com", CNC_LDNS) == ["219.17.66.100"]


def test_tmsh_global_availability_across_pools(tmsh: Config) -> None:
    """pool-lb-mode global-availability: web_pool while any member of it is up (here CNC,
    by its own fallback, global availability); with all of them down, the next pool,
    backup_pool, answers with its first available member; with none, the zone answers."""
    asker = Asker(tmsh)
    asker.availability.down = {"host_cmcc.vs_www_cmcc", "bigip_tel.vs_www_tel"}
    d = asker.ask("www.wip.example.com", TEL_LDNS)
    assert (d.pool, d.members, d.method) == ("web_pool", ("bigip_cnc.vs_www_cnc",), "global_availability")
    asker.availability.down |= {"bigip_cnc.vs_www_cnc"}
    d = asker.ask("www.wip.example.com", CNC_LDNS)
    assert (d.pool, d.members, d.method) == ("backup_pool", ("bigip_tel.vs_backup_tel",), "global_availability")
    asker.availability.down |= {"bigip_tel.vs_backup_tel"}
    assert asker.ask("www.wip.example.com", CNC_LDNS).action == Action.RETURN_TO_DNS  # as F5 does


def test_tmsh_aaaa_comes_from_the_aaaa_pool(tmsh: Config) -> None:
    asker = Asker(tmsh)
    d = asker.ask("www.wip.example.com", CNC_LDNS, TYPE_AAAA)
    assert ([str(a) for a in d.addresses], d.pool) == (["2001:db8:c::80"], "web_pool-aaaa")


def test_tmsh_ratio_three_to_one(tmsh: Config) -> None:
    """api_pool: ratio 3 (CNC) to 1 (TEL), over new resolvers (persistence is per /24)."""
    asker = Asker(tmsh)
    counts = collections.Counter(asker.answer("api.wip.example.com", f"198.18.{i}.53")[0] for i in range(40))
    assert counts == {"202.106.83.178": 30, "219.17.66.101": 10}


def test_tmsh_fallback_ip_when_every_member_is_down(tmsh: Config) -> None:
    asker = Asker(tmsh)
    asker.availability.down = {"bigip_cnc.vs_api_cnc", "bigip_tel.vs_api_tel"}
    d = asker.ask("api.wip.example.com", OTHER_LDNS)
    assert (d.action, [str(a) for a in d.addresses], d.method) == (Action.ANSWER, ["192.0.2.53"], "fallback_ip")


def test_tmsh_cname_pool_round_robin(tmsh: Config) -> None:
    asker = Asker(tmsh)
    targets = [asker.ask("cdn.wip.example.com", OTHER_LDNS, TYPE_CNAME).members for _ in range(4)]
    assert targets == [
        ("cname-www.cdn-a.example.net",),
        ("cname-www.cdn-b.example.net",),
        ("cname-www.cdn-a.example.net",),
        ("cname-www.cdn-b.example.net",),
    ]


# -- 3-DNS wideip.conf -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def threedns(tmp_path_factory: pytest.TempPathFactory) -> Config:
    return imported(tmp_path_factory.mktemp("threedns"), "wideip.conf")


def test_threedns_topology_block_as_seed_001(threedns: Config) -> None:
    """Topology preferred: 202.106/16 and 200.100/16 to CNC, 219.172/16 to TEL, the rest
    (0/0, score 1) to TEL."""
    asker = Asker(threedns)
    assert asker.answer("www.wip.example.com", CNC_LDNS) == ["202.106.83.177"]
    assert asker.answer("www.wip.example.com", "200.100.3.3") == ["202.106.83.177"]
    assert asker.answer("www.wip.example.com", TEL_LDNS) == ["219.17.66.100"]
    assert asker.answer("www.wip.example.com", OTHER_LDNS) == ["219.17.66.100"]
    assert asker.ask("www.wip.example.com", CNC_LDNS).method == "topology"


def test_threedns_failover_then_global_availability(threedns: Config) -> None:
    """CNC down: a CNC resolver gets TEL (its 0/0 record). An LDNS no record matches, with
    TEL down: topology and rtt have nothing, ga answers the first available (CNC)."""
    asker = Asker(threedns)
    asker.availability.down = {"bigip-cnc.www-cnc"}
    assert asker.answer("www.wip.example.com", CNC_LDNS) == ["219.17.66.100"]
    asker.availability.down = {"bigip-tel.www-tel"}
    d = asker.ask("www.wip.example.com", TEL_LDNS)
    assert ([str(a) for a in d.addresses], d.method) == (["202.106.83.177"], "global_availability")


def test_threedns_ratio(threedns: Config) -> None:
    asker = Asker(threedns)
    counts = collections.Counter(asker.answer("shop.wip.example.com", f"198.18.0.{i}")[0] for i in range(1, 41))
    assert counts == {"219.17.66.100": 30, "219.17.66.101": 10}


def test_threedns_ratio_member_down_leaves_the_other(threedns: Config) -> None:
    """Ratio with the heavy member down: the other answers; with both down, the alternate
    (null) and the fallback (return_to_dns) leave the answer to the zone."""
    asker = Asker(threedns)
    asker.availability.down = {"bigip-tel.www-tel"}
    assert asker.answer("shop.wip.example.com", OTHER_LDNS) == ["219.17.66.101"]
    asker.availability.down = {"bigip-tel.www-tel", "bigip-tel.www-tel-2"}
    assert asker.ask("shop.wip.example.com", OTHER_LDNS).action == Action.RETURN_TO_DNS
