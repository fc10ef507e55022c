"""The peers of bench/compare.py (bench/peers.py, bench/floor.py): the PowerDNS and gdnsd
configs written for a topology choose, for any client address, the data center our node's
topology chooses; the floor answers the bench zone; the ratios against ours and the floor."""

from __future__ import annotations

import ipaddress
import re
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.benchmod import bench_module

peers: Any = bench_module("peers")
lib: Any = bench_module("comparelib")
floor: Any = bench_module("floor")

#: client addresses: mostly the benchmark's ECS range and LDNS addresses, some anywhere
addresses = st.one_of(
    st.integers(0x0A000000, 0x0A3FFFFF).map(ipaddress.IPv4Address),
    st.integers(0, 7).map(lambda i: ipaddress.IPv4Address(f"127.0.200.{i + 1}")),
    st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address),
)


def node_choice(address: ipaddress.IPv4Address, sources: int) -> str:
    """The data center our node's topology (comparelib.node_config) gives a new client."""
    config = lib.node_config(lib.Endpoint("127.0.0.1", 5300), 8053, sources)
    for rule in config["topology"]:
        region = rule["ldns"].removeprefix("region ")
        if rule["ldns"] == "any" or any(address in ipaddress.ip_network(n) for n in config["regions"][region]):
            return str(rule["server"].removeprefix("datacenter "))
    raise AssertionError("no topology rule matched")


def address_of(dc: str) -> str:
    return str(next(a for _, d, a in lib.POOL if d == dc))


def lua_choice(lua: str, address: ipaddress.IPv4Address) -> str:
    """What PowerDNS's view() returns: the address list of the first group holding *address*."""
    assert lua.startswith("view({") and lua.endswith("})")
    for networks, answer in re.findall(r"\{\{([^}]*)\}, \{'([^']*)'\}\}", lua.removeprefix("view({")):
        nets = [ipaddress.ip_network(n.strip(" '")) for n in networks.split(",")]
        if any(address.version == n.version and address in n for n in nets):
            return str(answer)
    raise AssertionError(f"no view holds {address}: {lua}")


def gdnsd_choice(config: str, address: ipaddress.IPv4Address) -> str:
    """What gdnsd's geoip map gives: the most specific `nets` entry holding *address*, else the
    first of `datacenters`, resolved through the resource's dcmap."""
    datacenters = re.search(r"datacenters => \[ ([^\]]*) \]", config)
    assert datacenters is not None
    nets = {ipaddress.ip_network(net): dc for net, dc in re.findall(r"^\s+([\d./]+) => \[ (\w+) \]$", config, re.M)}
    dcmap = dict(re.findall(r"^\s+(\w+) => ([\d.]+)$", config, re.M))
    holding = [net for net in nets if address in net]
    dc = nets[max(holding, key=lambda n: n.prefixlen)] if holding else datacenters.group(1).split(", ")[0]
    return str(dcmap[dc])


@given(addresses, st.integers(1, 12))
def test_the_lua_record_chooses_what_our_topology_chooses(address: ipaddress.IPv4Address, sources: int) -> None:
    assert lua_choice(peers.pdns_lua(sources), address) == address_of(node_choice(address, sources))


@given(addresses, st.integers(1, 12))
def test_gdnsd_nets_choose_what_our_topology_chooses(address: ipaddress.IPv4Address, sources: int) -> None:
    config = peers.gdnsd_config(Path("/w"), lib.Endpoint("127.0.0.245", 5300), 1, sources)
    assert gdnsd_choice(config, address) == address_of(node_choice(address, sources))


def test_gdnsd_config_listens_where_told_with_its_own_directories() -> None:
    config = peers.gdnsd_config(Path("/w"), lib.Endpoint("127.0.0.245", 5301), 2, 4)
    assert '"127.0.0.245:5301"' in config
    assert "udp_threads => 2" in config
    assert "run_dir => /w/gdnsd/run" in config and "state_dir => /w/gdnsd/state" in config
    assert "$" not in config  # every placeholder filled


def test_pdns_conf_with_and_without_caches() -> None:
    listen = lib.Endpoint("127.0.0.243", 5300)
    cached = peers.pdns_conf(Path("/w"), listen, 1, cache=True).splitlines()
    uncached = peers.pdns_conf(Path("/w"), listen, 1, cache=False).splitlines()
    for conf in (cached, uncached):
        for setting in (
            "launch=bind",
            "bind-config=/w/pdns/named.conf",
            "local-address=127.0.0.243",
            "local-port=5300",
            "enable-lua-records=shared",
            "edns-subnet-processing=yes",
            "receiver-threads=1",
            "distributor-threads=1",
            "security-poll-suffix=",
        ):
            assert setting in conf
        assert not any("$" in line for line in conf)
    assert not any(line.startswith("cache-ttl") for line in cached)
    assert {"cache-ttl=0", "query-cache-ttl=0", "negquery-cache-ttl=0"} <= set(uncached)


def test_the_peers_zones_differ_from_nsds_only_in_the_wide_ip() -> None:
    static = lib.zone_text().splitlines()
    for zone, wideip in ((peers.pdns_zone_text(4), " IN LUA A "), (peers.gdnsd_zone_text(), " DYNA geoip!gslb")):
        lines = zone.splitlines()
        assert [line for line in lines if line.startswith("gslb")] == [line for line in lines if wideip in line]
        assert len([line for line in lines if wideip in line]) == 1
        assert [line for line in lines if not line.startswith("gslb")] == [
            line for line in static if not line.startswith("gslb")
        ]


def test_written_files(tmp_path: Path) -> None:
    endpoints = {k: lib.Endpoint.parse(s.address) for k, s in peers.SPECS.items()}
    peers.write_files(tmp_path, ["pdns", "pdns-nocache", "gdnsd"], endpoints, 1, 4)
    named = (tmp_path / "pdns" / "named.conf").read_text()
    assert f'file "{tmp_path}/pdns/bench.test.zone"' in named
    assert "cache-ttl=0" in (tmp_path / "pdns" / "pdns-nocache.conf").read_text()
    assert "LUA A" in (tmp_path / "pdns" / "bench.test.zone").read_text()
    assert "geoip!gslb" in (tmp_path / "gdnsd" / "zones" / "bench.test").read_text()
    assert "127.0.0.245:5300" in (tmp_path / "gdnsd" / "config").read_text()


def test_parse_servers_keeps_the_report_order_and_names_the_unknown() -> None:
    assert peers.parse_servers("floor, ours,gdnsd") == ["ours", "gdnsd", "floor"]
    with pytest.raises(ValueError, match="unknown: bind9"):
        peers.parse_servers("ours,bind9")


def test_a_missing_program_is_named_with_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peers, "PATH", "/nonexistent")
    assert peers.unavailable(["ours", "gdnsd", "floor"]) == {"gdnsd": "gdnsd (Debian package gdnsd)"}
    assert peers.unavailable(["pdns"]) == {"pdns": "pdns_server (Debian package pdns-server)"}


def test_pdns_without_its_bind_backend_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "pdns_server").touch(mode=0o755)
    monkeypatch.setattr(peers, "PATH", str(tmp_path))
    monkeypatch.setattr(peers, "PDNS_BIND", str(tmp_path / "*" / "libbindbackend.so"))
    assert peers.unavailable(["pdns-nocache"]) == {
        "pdns-nocache": "the bind backend (Debian package pdns-backend-bind)"
    }
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libbindbackend.so").touch()
    assert peers.unavailable(["pdns-nocache"]) == {}


def test_ratios_against_ours_and_the_floor() -> None:
    summary = {
        "ours": {"qps": 50_000.0, "cpu_us_per_query": 20.0},
        "gdnsd": {"qps": 100_000.0, "cpu_us_per_query": 5.0},
        "floor": {"qps": 80_000.0, "cpu_us_per_query": 10.0},
    }
    r = peers.ratios(summary)
    assert r["gdnsd"] == {"qps_vs_ours": 2.0, "cpu_vs_ours": 0.25, "qps_vs_floor": 1.25, "cpu_vs_floor": 0.5}
    assert r["ours"]["cpu_vs_floor"] == 2.0
    without_floor = peers.ratios({k: v for k, v in summary.items() if k != "floor"})
    assert without_floor["gdnsd"]["qps_vs_floor"] is None
    assert without_floor["gdnsd"]["qps_vs_ours"] == 2.0
    lines = peers.ratio_lines(summary)
    assert lines[2].split() == ["gdnsd", "100.0k", "5.0", "2.00x", "0.25x", "1.25x", "0.50x"]


def test_the_wide_ip_check_per_kind_of_server() -> None:
    check = peers.gslb("DC2", "topology south")
    one = lib.Reply("NOERROR", 1, ("198.51.100.2",), True)
    three = lib.Reply("NOERROR", 3, tuple(a for _, _, a in lib.POOL), True)
    wrong = lib.Reply("NOERROR", 1, ("198.51.100.1",), True)
    assert check(one, "pdns") is None and check(one, "gdnsd") is None
    assert check(wrong, "gdnsd") == "198.51.100.1, expected 198.51.100.2 (DC2: topology south)"
    assert check(three, "gdnsd") is not None
    assert check(three, "nsd") is None and check(three, "floor") is None
    assert check(one, "floor") == "1 addresses, expected 3"


# --- the floor ---


def reply(query: bytes) -> Any:
    built = floor.build_reply(query, floor.zone_records())
    return None if built is None else lib.parse_reply(built)


def test_the_floor_answers_the_bench_zone() -> None:
    assert reply(lib.query("www.bench.test", "A")) == lib.Reply("NOERROR", 2, lib.WWW, True)
    assert reply(lib.query("HOST7.Bench.Test", "A")) == lib.Reply("NOERROR", 1, ("192.0.2.107",), True)
    assert reply(lib.query("nx1.bench.test", "A")).rcode == "NXDOMAIN"
    assert reply(lib.query("www.bench.test", "AAAA")) == lib.Reply("NOERROR", 0, (), True)
    assert reply(lib.query("bench.test", "SOA")).answers == 1
    ecs = reply(lib.query(lib.WIDEIP, "A", ipaddress.IPv4Network("10.1.2.0/24")))
    assert ecs.addresses == tuple(a for _, _, a in lib.POOL)
    assert reply(lib.query("xbench.test", "A")).rcode == "REFUSED"  # not below bench.test
    assert reply(lib.query("example.com", "A")).rcode == "REFUSED"


def test_the_floor_echoes_the_id_and_rd_and_drops_what_is_no_query() -> None:
    query = struct.pack("!H", 0xBEEF) + struct.pack("!H", 0x0100) + lib.query("www.bench.test", "A")[4:]
    built = floor.build_reply(query, floor.zone_records())
    assert built[:2] == b"\xbe\xef"
    assert struct.unpack("!H", built[2:4])[0] & 0x8500 == 0x8500  # QR, AA, RD
    records = floor.zone_records()
    assert floor.build_reply(b"\x00\x01", records) is None
    assert floor.build_reply(built, records) is None  # a reply
    assert floor.build_reply(lib.query("www.bench.test", "A")[:14], records) is None  # cut short


@given(st.binary(max_size=64))
def test_the_floor_never_fails_on_garbage(data: bytes) -> None:
    built = floor.build_reply(data, floor.zone_records())
    assert built is None or built[:2] == data[:2]


def test_the_floor_answers_below_its_static_wildcard_and_says_what_the_zone_holds() -> None:
    """With --names random the floor answers `*.apps` statically (as NSD does) and keeps no
    reply for a name the zone does not hold (beyond its first few)."""
    records = floor.zone_records()
    names = {name for name, _ in records}
    wild = floor.answer(lib.query(f"Xk3.{lib.APPS}", "A"), records, names)
    assert wild is not None and not wild[1]
    assert lib.parse_reply(wild[0]).addresses == tuple(a for _, _, a in lib.POOL)
    nx = floor.answer(lib.query("nx1.bench.test", "A"), records, names)
    assert nx is not None and not nx[1] and lib.parse_reply(nx[0]).rcode == "NXDOMAIN"
    www = floor.answer(lib.query("www.bench.test", "A"), records, names)
    assert www is not None and www[1]
