"""Loading valid configs: the sample file, the frozen model it builds, path resolution and defaults."""

from __future__ import annotations

import dataclasses
import ipaddress
from pathlib import Path
from typing import Any, cast

import pytest

from gtmcluster.config.addresses import HostPort
from gtmcluster.config.dnsserver import DNSServer, RateLimit
from gtmcluster.config.load import load
from gtmcluster.config.model import Config, Methods, Persistence, PersistenceTable, Prefixes, Prober, TLSFiles
from gtmcluster.dnsdata import names
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import TYPE_A, TYPE_AAAA
from tests.support import configs

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "etc" / "cluster.yaml"


def _load(directory: Path, config: dict[str, Any]) -> Config:
    return load(configs.write(directory, config))


def _key(text: str) -> Name:
    return names.key(names.from_text(text))


def _net(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(text)


def _address_list(path: Path) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The networks of an address list file, read independently of the loader."""
    out = []
    for line in path.read_text().splitlines():
        entry = line.split("#", 1)[0].strip()
        if entry:
            out.append(ipaddress.ip_network(entry))
    return out


# --- the sample config -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample() -> Config:
    return load(SAMPLE)


def test_sample_config_loads(sample: Config) -> None:
    """etc/cluster.yaml, the documented sample, loads and holds every object it declares."""
    assert sample.sync_group.name == "prod"
    assert [m.name for m in sample.sync_group.members] == ["gtm-cnc", "gtm-tel", "gtm-cmcc"]
    assert sample.datacenters == ("CNC", "TEL", "CMCC")
    assert set(sample.virtual_servers) == {
        *("vs-cnc", "vs-tel", "vs-cmcc", "vs-cnc-v6", "vs-tel-v6", "vs-spare"),
        *("cdn-cnc", "cdn-tel"),
    }
    assert set(sample.pools) == {"web", "web-v6", "api", "sticky", "cdn"}
    assert {w.name for w in sample.wideips.values()} == {
        "www.wip.example.com",
        "dual.wip.example.com",
        "api.wip.example.com",
        "sticky.wip.example.com",
        "cdn.wip.example.com",
    }
    assert [z.origin for z in sample.zones] == [_key("wip.example.com")]
    assert len(sample.topology.records) == 6
    assert sample.virtual_servers["vs-spare"].enabled is False


def test_sample_base_dir_is_the_checkout(sample: Config) -> None:
    """The sample's `base_dir: ..` is taken relative to etc/, so relative paths read from the checkout."""
    assert sample.base_dir == ROOT
    assert sample.log_dir == ROOT / "var" / "log"
    assert sample.tls_for("gtm-tel") == TLSFiles(
        ROOT / "certs" / "ca.pem", ROOT / "certs" / "gtm-tel.pem", ROOT / "certs" / "gtm-tel.key"
    )
    assert sample.state_dir_for("gtm-cnc") == ROOT / "var" / "state" / "gtm-cnc"


def test_sample_member_addresses(sample: Config) -> None:
    """Member listeners parse to address and port, including a bracketed IPv6 DNS address."""
    cnc = sample.member("gtm-cnc")
    assert cnc.datacenter == "CNC"
    assert cnc.peer == HostPort(ipaddress.ip_address("127.0.0.11"), 4353)
    assert cnc.dns == (
        HostPort(ipaddress.ip_address("127.0.0.11"), 5353),
        HostPort(ipaddress.ip_address("::1"), 5353),
    )
    assert cnc.api == HostPort(ipaddress.ip_address("127.0.0.11"), 8053)


def test_sample_regions_from_files_and_other_regions(sample: Config) -> None:
    """Regions read address list files and include other regions, in order."""
    cnc_file = _address_list(ROOT / "etc" / "isp" / "cnc.txt")
    assert cnc_file, "the sample address list should not be empty"
    assert list(sample.regions["cnc-isp"].networks) == cnc_file
    assert sample.regions["demo-cnc"].networks == (_net("127.0.1.0/24"), _net("fd00:c::/48"))
    assert sample.regions["cnc"].networks == sample.regions["cnc-isp"].networks + sample.regions["demo-cnc"].networks


def test_sample_wideips(sample: Config) -> None:
    """Wide IPs of the sample: types, pools, pool_lb, persistence and last resort pool as written."""
    www = sample.wideips[_key("www.wip.example.com")]
    assert www.types == frozenset({TYPE_A})
    assert [ref.name for ref in www.pools] == ["web"]
    assert www.pool_lb == "round_robin"
    assert www.persistence is None
    assert www.failure_response == "return_to_dns"
    api = sample.wideips[_key("api.wip.example.com")]
    assert api.persistence == Persistence(3600, Prefixes(24, 56))
    assert www.last_resort is not None
    assert www.last_resort.pool is sample.pools["api"]
    dual = sample.wideips[_key("dual.wip.example.com")]
    assert dual.types == frozenset({TYPE_A, TYPE_AAAA})
    assert [ref.name for ref in dual.pools] == ["web", "web-v6"]
    assert dual.pool_lb == "global_availability"


def test_sample_pools(sample: Config) -> None:
    """Pools of the sample: methods, ratios, fallback_ip, max_answers and static_persist as written."""
    web = sample.pools["web"]
    assert web.methods == Methods("rtt", "topology", "global_availability")
    api = sample.pools["api"]
    assert [(m.name, m.ratio) for m in api.members] == [("vs-cnc", 3), ("vs-tel", 1)]
    assert api.fallback_ips == (ipaddress.ip_address("192.0.2.53"),)
    assert api.max_answers == 2
    assert api.methods == Methods("ratio", "none", "fallback_ip")
    assert sample.pools["sticky"].static_persist == Prefixes(24, 56)


# --- the model is frozen and resolved ----------------------------------------------------------


def _frozen_targets(config: Config) -> list[tuple[object, str, object]]:
    pool = config.pools["p"]
    return [
        (config, "pools", {}),
        (config.sync_group, "name", "other"),
        (config.sync_group.members[0], "name", "other"),
        (config.virtual_servers["vs1"], "port", 81),
        (pool, "ttl", 5),
        (pool.members[0], "ratio", 9),
        (pool.methods, "preferred", "random"),
        (config.wideips[_key("gslb.example.test")], "pool_lb", "random"),
        (config.regions["r1"], "networks", ()),
        (config.dns_server, "udp_payload_size", 4096),
    ]


def test_model_is_frozen(tmp_path: Path) -> None:
    """Assigning to any field of the loaded model raises; the sections cannot be changed in place."""
    config = _load(tmp_path, configs.base())
    for target, field, value in _frozen_targets(config):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(target, field, value)
        assert getattr(target, field) != value
    with pytest.raises(TypeError):
        cast(Any, config.pools)["new"] = config.pools["p"]
    with pytest.raises(TypeError):
        cast(Any, config.virtual_servers)["vs1"] = None
    assert isinstance(config.pools["p"].members, tuple)
    assert isinstance(config.datacenters, tuple)


def test_names_are_resolved_to_objects(tmp_path: Path) -> None:
    """References are objects: a pool member holds its VirtualServer, a wide IP its Pools, a VS its Monitor."""
    config = configs.base()
    config["monitors"] = {"web": {"type": "http"}}
    config["virtual_servers"]["vs1"]["monitor"] = "web"
    config["wideips"]["gslb.example.test"]["last_resort_pool"] = "p"
    loaded = _load(tmp_path, config)
    pool = loaded.pools["p"]
    assert [m.vs for m in pool.members] == [loaded.virtual_servers[n] for n in ("vs1", "vs2", "vs3")]
    assert pool.members[0].vs is loaded.virtual_servers["vs1"]
    assert pool.members[0].vs.monitors == (loaded.monitors["web"],)
    wideip = loaded.wideips[_key("gslb.example.test")]
    assert wideip.pools[0].pool is loaded.pools["p"]
    assert wideip.pools[1].pool is loaded.pools["p6"]
    assert wideip.last_resort is not None
    assert wideip.last_resort.pool is loaded.pools["p"]
    record = loaded.topology.records[0]
    assert record.ldns.kind == "region"
    assert record.ldns.networks == loaded.regions["r1"].networks


def test_member_lookup_names_the_members(tmp_path: Path) -> None:
    """Config.member finds a member by name; an unknown name raises KeyError listing the members."""
    loaded = _load(tmp_path, configs.base())
    assert loaded.member("n1").name == "n1"
    with pytest.raises(KeyError, match="n1"):
        loaded.member("nx")


# --- base_dir and paths ------------------------------------------------------------------------


def test_paths_default_to_the_config_folder(tmp_path: Path) -> None:
    """Without base_dir, relative paths (zones, log_dir, tls, state_dir) resolve against the config's folder."""
    folder = tmp_path / "conf"
    loaded = _load(folder, configs.base())
    here = folder.resolve()
    assert loaded.base_dir == here
    assert loaded.log_dir == here / "var" / "log"
    assert loaded.sync_group.tls.ca == here / "certs" / "ca.pem"
    assert loaded.state_dir_for("n1") == here / "var" / "state" / "n1"
    assert loaded.path == folder / "cluster.yaml"


def test_base_dir_is_relative_to_the_config_folder(tmp_path: Path) -> None:
    """A relative base_dir is taken from the config's folder; zone and address list files resolve against it."""
    top = tmp_path / "top"
    (top / "zones").mkdir(parents=True)
    (top / "zones" / "example.test.zone").write_text(configs.ZONE)
    (top / "lists").mkdir()
    (top / "lists" / "r3.txt").write_text("192.0.2.0/25\n")
    config = configs.base()
    config["base_dir"] = ".."
    config["zones"] = [{"origin": "example.test", "file": "zones/example.test.zone"}]
    config["regions"]["r3"] = {"file": "lists/r3.txt"}
    config["log_dir"] = "logs"
    loaded = _load(top / "etc", config)
    assert loaded.base_dir == top.resolve()
    assert loaded.log_dir == top.resolve() / "logs"
    assert loaded.regions["r3"].networks == (_net("192.0.2.0/25"),)
    assert [z.origin for z in loaded.zones] == [_key("example.test")]


def test_absolute_paths_are_kept(tmp_path: Path) -> None:
    """Absolute paths are used as written, whatever base_dir is."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    zone = elsewhere / "abs.zone"
    zone.write_text(configs.ZONE)
    config = configs.base()
    config["base_dir"] = "sub"
    config["zones"] = [{"origin": "example.test", "file": str(zone)}]
    config["log_dir"] = str(elsewhere / "log")
    config["state_dir"] = str(elsewhere / "state" / "{node}")
    config["sync_group"]["tls"] = {"ca": str(elsewhere / "ca.pem")}
    loaded = _load(tmp_path / "conf", config)
    assert loaded.base_dir == (tmp_path / "conf").resolve() / "sub"
    assert loaded.log_dir == elsewhere / "log"
    assert loaded.state_dir_for("n1") == elsewhere / "state" / "n1"
    assert loaded.tls_for("n1").ca == elsewhere / "ca.pem"
    assert [z.origin for z in loaded.zones] == [_key("example.test")]


def test_node_is_substituted_in_tls_and_state_dir(tmp_path: Path) -> None:
    """`{node}` in tls paths and state_dir is kept as a template and replaced per node."""
    config = configs.base()
    config["sync_group"]["tls"] = {"ca": "pki/ca.pem", "cert": "pki/{node}/cert.pem", "key": "/keys/{node}.key"}
    config["state_dir"] = "state/{node}/db"
    loaded = _load(tmp_path, config)
    base = tmp_path.resolve()
    assert loaded.sync_group.tls.cert == base / "pki" / "{node}" / "cert.pem"
    assert loaded.tls_for("n1") == TLSFiles(base / "pki" / "ca.pem", base / "pki/n1/cert.pem", Path("/keys/n1.key"))
    assert loaded.tls_for("gtm-tel").key == Path("/keys/gtm-tel.key")
    assert loaded.state_dir == "state/{node}/db"
    assert loaded.state_dir_for("n1") == base / "state" / "n1" / "db"
    assert loaded.state_dir_for("n2") == base / "state" / "n2" / "db"


def test_tls_defaults(tmp_path: Path) -> None:
    """Without a tls block the group uses certs/ca.pem, certs/{node}.pem and certs/{node}.key."""
    loaded = _load(tmp_path, configs.base())
    base = tmp_path.resolve()
    assert loaded.tls_for("n1") == TLSFiles(base / "certs/ca.pem", base / "certs/n1.pem", base / "certs/n1.key")


def test_partial_tls_block_keeps_other_defaults(tmp_path: Path) -> None:
    """A tls block naming only the CA keeps the default cert and key templates."""
    config = configs.base()
    config["sync_group"]["tls"] = {"ca": "other-ca.pem"}
    loaded = _load(tmp_path, config)
    base = tmp_path.resolve()
    assert loaded.tls_for("n1") == TLSFiles(base / "other-ca.pem", base / "certs/n1.pem", base / "certs/n1.key")


# --- defaults ----------------------------------------------------------------------------------


def test_pool_defaults(tmp_path: Path) -> None:
    """A pool with only members: ttl 30, max_answers 1, round_robin/none/none, ratio 1, no fallback_ip."""
    config = configs.base()
    config["pools"]["p"] = {"members": ["vs1", "vs2"]}
    pool = _load(tmp_path, config).pools["p"]
    assert pool.ttl == 30
    assert pool.max_answers == 1
    assert pool.methods == Methods("round_robin", "none", "none")
    assert [m.ratio for m in pool.members] == [1, 1]
    assert pool.fallback_ips == ()
    assert pool.static_persist == Prefixes(32, 128)


def test_load_balancing_slots_default_separately(tmp_path: Path) -> None:
    """Naming only the preferred method leaves alternate and fallback at none."""
    config = configs.base()
    config["pools"]["p"]["load_balancing"] = {"preferred": "ratio"}
    config["pools"]["p6"]["load_balancing"] = {"alternate": "topology"}
    loaded = _load(tmp_path, config)
    assert loaded.pools["p"].methods == Methods("ratio", "none", "none")
    assert loaded.pools["p6"].methods == Methods("round_robin", "topology", "none")


def test_server_and_prober_defaults(tmp_path: Path) -> None:
    """Without dns_server and prober sections the documented defaults apply."""
    config = configs.base()
    del config["prober"]
    del config["dns_server"]
    loaded = _load(tmp_path, config)
    assert loaded.dns_server == DNSServer(udp_payload_size=1232, tcp_idle_timeout=10.0, tcp_max_clients=1000)
    assert loaded.dns_server.ecs_trusted == ()  # no resolver's client subnet is used unless listed
    assert loaded.prober == Prober(("dns_dot", "dns_rev", "udp", "tcp", "icmp"), 2419200)
    assert loaded.prober.max_ldns == 1_000_000
    assert loaded.persistence == PersistenceTable(max_records=200_000)
    assert loaded.state_dir == "var/state/{node}"


def test_server_and_prober_settings(tmp_path: Path) -> None:
    """dns_server and prober settings given in the file replace the defaults; unnamed ones keep them."""
    config = configs.base()
    config["dns_server"] = {
        "udp_payload_size": 1200,
        "tcp_idle_timeout": 2.5,
        "tcp_message_timeout": 1.5,
        "rate_limit": {"responses_per_second": 50, "slip": 0, "ipv4_prefix": 32, "exempt": ["192.0.2.0/24"]},
        "version": "gtmcluster",
        "ecs_trusted": ["8.8.8.0/24", "2001:4860::/32"],
    }
    config["prober"] = {"protocols": ["udp", "dns_dot"], "path_ttl": 3600, "max_ldns": 5000}
    config["persistence"] = {"max_records": 1234}
    loaded = _load(tmp_path, config)
    limit = RateLimit(responses_per_second=50, slip=0, ipv4_prefix=32, exempt=(ipaddress.ip_network("192.0.2.0/24"),))
    trusted = (ipaddress.ip_network("8.8.8.0/24"), ipaddress.ip_network("2001:4860::/32"))
    assert loaded.dns_server == DNSServer(
        1200, 2.5, 1000, tcp_message_timeout=1.5, rate_limit=limit, version="gtmcluster", ecs_trusted=trusted
    )
    assert loaded.prober == Prober(("udp", "dns_dot"), 3600, max_ldns=5000)
    assert loaded.persistence == PersistenceTable(max_records=1234)


def test_virtual_server_and_member_defaults(tmp_path: Path) -> None:
    """A VS defaults to port 80, enabled, no monitor; a member's api to 127.0.0.1:8053."""
    loaded = _load(tmp_path, configs.base())
    vs = loaded.virtual_servers["vs1"]
    assert (vs.port, vs.enabled, vs.monitors, vs.datacenter) == (80, True, (), "DC1")
    config = configs.base()
    del config["sync_group"]["members"][0]["api"]
    assert _load(tmp_path / "b", config).member("n1").api == HostPort(ipaddress.ip_address("127.0.0.1"), 8053)


def test_monitor_defaults(tmp_path: Path) -> None:
    """A monitor with only a type gets interval 5, timeout 2, up_after 2, down_after 3."""
    config = configs.base()
    config["monitors"] = {"m": {"type": "tcp"}}
    monitor = _load(tmp_path, config).monitors["m"]
    assert (monitor.type, monitor.interval, monitor.timeout, monitor.up_after, monitor.down_after) == (
        "tcp",
        5.0,
        2.0,
        2,
        3,
    )


def test_wideip_defaults(tmp_path: Path) -> None:
    """A wide IP with only pools answers A, uses round_robin among pools, no persistence, no last resort."""
    config = configs.base()
    config["wideips"] = {"w.example.test": {"pools": ["p"]}}
    wideip = _load(tmp_path, config).wideips[_key("w.example.test")]
    assert wideip.types == frozenset({TYPE_A})
    assert wideip.pool_lb == "round_robin"
    assert wideip.persistence is None
    assert wideip.last_resort is None
    assert [(ref.name, ref.ratio) for ref in wideip.pools] == [("p", 1)]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (("pools", "p", "ttl"), 0),
        (("pools", "p", "ttl"), 2**31 - 1),
        (("pools", "p", "max_answers"), 16),
        (("topology", 0, "score"), 2**32 - 1),
        (("topology", 0, "score"), 0),
        (("virtual_servers", "vs1", "port"), 65535),
        (("virtual_servers", "vs1", "port"), 1),
    ],
)
def test_range_limits_are_inclusive(tmp_path: Path, key: tuple[str | int, ...], value: int) -> None:
    """The documented limits themselves are accepted and kept."""
    config = configs.base()
    node: Any = config
    for part in key[:-1]:
        node = node[part]
    node[key[-1]] = value
    loaded = _load(tmp_path, config)
    if key[0] == "pools":
        assert getattr(loaded.pools["p"], str(key[2])) == value
    elif key[0] == "topology":
        assert loaded.topology.records[0].score == value
    else:
        assert loaded.virtual_servers["vs1"].port == value


def test_ratio_limits_are_inclusive(tmp_path: Path) -> None:
    """Member and pool ratios of 0 and 65535 are accepted."""
    config = configs.base()
    config["pools"]["p"]["members"] = [{"virtual_server": "vs1", "ratio": 0}, {"virtual_server": "vs2", "ratio": 65535}]
    config["wideips"]["gslb.example.test"]["pools"] = [{"pool": "p", "ratio": 65535}, {"pool": "p6", "ratio": 0}]
    loaded = _load(tmp_path, config)
    assert [m.ratio for m in loaded.pools["p"].members] == [0, 65535]
    assert [ref.ratio for ref in loaded.wideips[_key("gslb.example.test")].pools] == [65535, 0]


# --- wide IPs ----------------------------------------------------------------------------------


def test_wideip_type_a_and_aaaa(tmp_path: Path) -> None:
    """`type: [A, AAAA]` answers both address types; `type: AAAA` only AAAA."""
    config = configs.base()
    config["wideips"]["v6.example.test"] = {"type": "AAAA", "pools": ["p6"]}
    loaded = _load(tmp_path, config)
    assert loaded.wideips[_key("gslb.example.test")].types == frozenset({TYPE_A, TYPE_AAAA})
    assert loaded.wideips[_key("v6.example.test")].types == frozenset({TYPE_AAAA})


def test_wideip_names_are_case_insensitive(tmp_path: Path) -> None:
    """A wide IP written with capitals and a trailing dot is stored lowercased without the dot."""
    config = configs.base()
    config["wideips"] = {"GSLB.Example.Test.": {"pools": ["p"]}}
    loaded = _load(tmp_path, config)
    assert list(loaded.wideips) == [_key("gslb.example.test")]
    assert loaded.wideips[_key("gslb.example.test")].name == "gslb.example.test"


def test_persistence_block(tmp_path: Path) -> None:
    """persistence: ttl and prefixes as written; an empty block means 3600 s and full addresses."""
    config = configs.base()
    config["wideips"]["gslb.example.test"]["persistence"] = {"ttl": 600, "ipv4_prefix": 24, "ipv6_prefix": 48}
    config["wideips"]["a.example.test"] = {"pools": ["p"], "persistence": {}}
    config["wideips"]["b.example.test"] = {"pools": ["p"], "persistence": {"enabled": False, "ttl": 60}}
    loaded = _load(tmp_path, config)
    assert loaded.wideips[_key("gslb.example.test")].persistence == Persistence(600, Prefixes(24, 48))
    assert loaded.wideips[_key("a.example.test")].persistence == Persistence(3600, Prefixes(32, 128))
    assert loaded.wideips[_key("b.example.test")].persistence is None


def test_last_resort_pool(tmp_path: Path) -> None:
    """last_resort_pool names a pool (or {pool, ratio}) that is held apart from the listed pools."""
    config = configs.base()
    config["wideips"]["gslb.example.test"]["last_resort_pool"] = "p6"
    config["wideips"]["w.example.test"] = {"pools": ["p"], "last_resort_pool": {"pool": "p", "ratio": 4}}
    loaded = _load(tmp_path, config)
    last = loaded.wideips[_key("gslb.example.test")].last_resort
    assert last is not None
    assert last.pool is loaded.pools["p6"]
    other = loaded.wideips[_key("w.example.test")].last_resort
    assert other is not None
    assert (other.pool, other.ratio) == (loaded.pools["p"], 4)


def test_wideip_pool_ratios(tmp_path: Path) -> None:
    """Wide IP pools may be names or {pool, ratio} mappings, in the order written."""
    config = configs.base()
    config["wideips"]["gslb.example.test"]["pools"] = [{"pool": "p6", "ratio": 3}, "p"]
    loaded = _load(tmp_path, config)
    refs = loaded.wideips[_key("gslb.example.test")].pools
    assert [(ref.name, ref.ratio) for ref in refs] == [("p6", 3), ("p", 1)]


# --- regions -----------------------------------------------------------------------------------


def test_regions_inline_file_and_nested(tmp_path: Path) -> None:
    """Regions mix inline networks, address list files ({file}) and other regions ({region})."""
    (tmp_path / "isp.txt").write_text(
        "# an ISP\n10.10.0.0/16   # trailing comment\n\n2001:db8:10::/48\n192.0.2.7\n  172.16.0.0/12\n"
    )
    config = configs.base()
    config["regions"] = {
        "inline": ["198.51.100.0/24", "2001:db8:aaaa::/48"],
        "listed": {"file": "isp.txt"},
        "mixed": [{"region": "inline"}, "203.0.113.0/24", {"file": "isp.txt"}],
        "outer": [{"region": "mixed"}],
        "single": {"region": "inline"},
    }
    config["topology"] = [{"ldns": "region outer", "server": "datacenter DC1", "score": 1}]
    loaded = _load(tmp_path, config)
    inline = (_net("198.51.100.0/24"), _net("2001:db8:aaaa::/48"))
    listed = (_net("10.10.0.0/16"), _net("2001:db8:10::/48"), _net("192.0.2.7/32"), _net("172.16.0.0/12"))
    assert loaded.regions["inline"].networks == inline
    assert loaded.regions["listed"].networks == listed
    assert loaded.regions["mixed"].networks == (_net("203.0.113.0/24"), *listed, *inline)
    assert set(loaded.regions["outer"].networks) == set(loaded.regions["mixed"].networks)
    assert loaded.regions["single"].networks == inline
    assert set(loaded.topology.records[0].ldns.networks) == set(loaded.regions["outer"].networks)


def test_region_networks_are_not_repeated(tmp_path: Path) -> None:
    """A network reached twice (inline and through an included region) appears once."""
    config = configs.base()
    config["regions"]["both"] = ["198.51.100.0/24", {"region": "r1"}, {"region": "r1"}]
    loaded = _load(tmp_path, config)
    networks = loaded.regions["both"].networks
    assert len(networks) == len(set(networks))
    assert set(networks) == set(loaded.regions["r1"].networks)


# --- host:port ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "text", "address", "port"),
    [
        ("dns", "[::1]:5353", "::1", 5353),
        ("dns", "[2001:db8::53]", "2001:db8::53", 53),
        ("dns", "127.0.0.1", "127.0.0.1", 53),
        ("dns", " 127.0.0.1:5300 ", "127.0.0.1", 5300),
        ("peer", "127.0.0.1", "127.0.0.1", 4353),
        ("peer", "[::1]:9999", "::1", 9999),
        ("api", "127.0.0.2", "127.0.0.2", 8053),
        ("api", "127.0.0.2:65535", "127.0.0.2", 65535),
    ],
)
def test_hostport_parsing(tmp_path: Path, key: str, text: str, address: str, port: int) -> None:
    """ADDRESS:PORT fields take IPv4, bracketed IPv6 and a missing port (the field's default port)."""
    config = configs.base()
    member = config["sync_group"]["members"][0]
    member[key] = [text] if key == "dns" else text
    loaded = _load(tmp_path, config).member("n1")
    parsed = loaded.dns[0] if key == "dns" else getattr(loaded, key)
    assert parsed == HostPort(ipaddress.ip_address(address), port)


def test_dns_may_be_one_address(tmp_path: Path) -> None:
    """`dns` may be a single ADDRESS:PORT instead of a list."""
    config = configs.base()
    config["sync_group"]["members"][0]["dns"] = "127.0.0.1:5300"
    loaded = _load(tmp_path, config)
    assert loaded.member("n1").dns == (HostPort(ipaddress.ip_address("127.0.0.1"), 5300),)


def test_hostport_text_form() -> None:
    """A HostPort prints as ADDRESS:PORT, with IPv6 addresses in brackets."""
    assert str(HostPort(ipaddress.ip_address("192.0.2.1"), 53)) == "192.0.2.1:53"
    assert str(HostPort(ipaddress.ip_address("::1"), 5353)) == "[::1]:5353"


# --- YAML features -----------------------------------------------------------------------------


def test_yaml_merge_keys_with_overrides(tmp_path: Path) -> None:
    """YAML anchors and merge keys work, and keys written beside `<<` override the merged ones (YAML 1.1)."""
    text = configs.write(tmp_path, configs.base()).read_text()
    text = text.replace(
        "virtual_servers:\n",
        "virtual_servers:\n  vs-template: &vs {address: 10.0.9.1, datacenter: DC1, port: 8080}\n"
        "  vs9:\n    <<: *vs\n    address: 10.0.9.9\n",
    )
    path = tmp_path / "merge.yaml"
    path.write_text(text)
    loaded = load(path)
    vs9 = loaded.virtual_servers["vs9"]
    assert (str(vs9.address), vs9.port, vs9.datacenter) == ("10.0.9.9", 8080, "DC1")


def test_members_on_different_hosts_may_share_loopback_listeners(tmp_path: Path) -> None:
    """An API on 127.0.0.1:8053 on every node is no clash: each node is its own host."""
    config = configs.base()
    second = {
        **config["sync_group"]["members"][0],
        "name": "n2",
        "peer": "198.51.100.2:4353",
        "dns": ["198.51.100.2:53"],
    }
    config["sync_group"]["members"][0]["api"] = second["api"] = "127.0.0.1:8053"
    config["sync_group"]["members"].append(second)
    loaded = _load(tmp_path, config)
    assert {str(m.api) for m in loaded.sync_group.members} == {"127.0.0.1:8053"}


@pytest.mark.parametrize("name", ["cluster.yaml", "two-datacenters.yaml"])
def test_every_example_in_etc_is_valid(name: str) -> None:
    """The configs shipped in etc/ load without a problem."""
    loaded = load(Path(__file__).resolve().parents[2] / "etc" / name)
    assert loaded.wideips
