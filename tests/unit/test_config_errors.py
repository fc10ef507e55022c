"""Config validation: every mistake is one problem `FILE: key.path: problem (line N)`, all reported at once."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.config.load import load
from gtmcluster.config.problems import ConfigError, Problem, format_path
from tests.support import configs

Mutation = Callable[[dict[str, Any]], None]
WIP = ("wideips", "gslb.example.test")
WIP_PATH = 'wideips."gslb.example.test"'
MEMBER = ("sync_group", "members", 0)


def _walk(config: dict[str, Any], path: tuple[str | int, ...]) -> Any:
    node: Any = config
    for part in path:
        node = node[part]
    return node


def put(*path: str | int, value: Any) -> Mutation:
    """Set the value at *path* (creating nothing but the last key)."""

    def apply(config: dict[str, Any]) -> None:
        _walk(config, path[:-1])[path[-1]] = value

    return apply


def drop(*path: str | int) -> Mutation:
    def apply(config: dict[str, Any]) -> None:
        del _walk(config, path[:-1])[path[-1]]

    return apply


def append(*path: str | int, value: Any) -> Mutation:
    def apply(config: dict[str, Any]) -> None:
        _walk(config, path).append(value)

    return apply


def combined(*mutations: Mutation) -> Mutation:
    def apply(config: dict[str, Any]) -> None:
        for m in mutations:
            m(config)

    return apply


def problems_of(directory: Path, mutation: Mutation, zone: str = configs.ZONE) -> tuple[Path, list[Problem]]:
    """Write the base config changed by *mutation*, load it and return (file, problems)."""
    config = configs.base()
    mutation(config)
    path = configs.write(directory, config, zone=zone)
    return path, problems_of_file(path)


def problems_of_file(path: Path) -> list[Problem]:
    with pytest.raises(ConfigError) as caught:
        load(path)
    problems = caught.value.problems
    assert problems, "ConfigError without problems"
    return problems


def described(problems: list[Problem]) -> str:
    return "\n".join(str(p) for p in problems)


def find(problems: list[Problem], path: str, fragment: str) -> Problem:
    """The one problem at *path* whose message contains *fragment* (fails with all problems shown)."""
    matching = [p for p in problems if format_path(p.path) == path and fragment in p.message]
    assert len(matching) == 1, f"expected one problem at {path} containing {fragment!r}, got:\n{described(problems)}"
    return matching[0]


def assert_form(problem: Problem, file: Path | str, path: str) -> str:
    """`FILE: key.path: problem` optionally followed by ` (line N)`; returns the problem text."""
    text = str(problem)
    match = re.fullmatch(re.escape(f"{file}: {path}: ") + r"(?P<message>.+?)(?: \(line (?P<line>\d+)\))?", text)
    assert match, f"not in the FILE: key.path: problem form: {text!r}"
    if problem.line is not None:
        assert match["line"] == str(problem.line)
    return match["message"]


# --- the table of single mistakes --------------------------------------------------------------
# (mutation of configs.base(), key path of the problem, a distinctive part of its message)

UNKNOWN_KEYS = [
    pytest.param(put("bogus", value=1), "bogus", "unknown key; known keys here: base_dir, sync_group", id="top"),
    pytest.param(put("wideip", value={}), "wideip", "unknown key (did you mean 'wideips'?)", id="top-typo"),
    pytest.param(
        put("sync_group", "memebrs", value=[]), "sync_group.memebrs", "(did you mean 'members'?)", id="sync_group"
    ),
    pytest.param(put(*MEMBER, "dsn", value=[]), "sync_group.members[0].dsn", "(did you mean 'dns'?)", id="member"),
    pytest.param(
        put("sync_group", "tls", value={"ca": "ca.pem", "crt": "x"}),
        "sync_group.tls.crt",
        "(did you mean 'cert'?)",
        id="tls",
    ),
    pytest.param(
        put("virtual_servers", "vs1", "prot", value=80),
        "virtual_servers.vs1.prot",
        "(did you mean 'port'?)",
        id="virtual_server",
    ),
    pytest.param(put("pools", "p", "tll", value=30), "pools.p.tll", "(did you mean 'ttl'?)", id="pool"),
    pytest.param(
        put("pools", "p", "load_balancing", "prefered", value="topology"),
        "pools.p.load_balancing.prefered",
        "(did you mean 'preferred'?)",
        id="load_balancing",
    ),
    pytest.param(
        put("pools", "p", "members", 0, value={"virtual_server": "vs1", "weight": 2}),
        "pools.p.members[0].weight",
        "unknown key; known keys here: virtual_server, ratio",
        id="pool-member",
    ),
    pytest.param(
        put(*WIP, "pool_lbb", value="ratio"), f"{WIP_PATH}.pool_lbb", "(did you mean 'pool_lb'?)", id="wideip"
    ),
    pytest.param(
        put(*WIP, "persistence", value={"tl": 30}),
        f"{WIP_PATH}.persistence.tl",
        "(did you mean 'ttl'?)",
        id="persistence",
    ),
    pytest.param(put("topology", 0, "scor", value=1), "topology[0].scor", "(did you mean 'score'?)", id="topology"),
    pytest.param(put("zones", 0, "fiel", value="x"), "zones[0].fiel", "(did you mean 'file'?)", id="zone"),
    pytest.param(
        put("dns_server", value={"tcp_idle": 3}),
        "dns_server.tcp_idle",
        "(did you mean 'tcp_idle_timeout'?)",
        id="dns_server",
    ),
    pytest.param(
        put("prober", value={"protocol": ["udp"]}), "prober.protocol", "(did you mean 'protocols'?)", id="prober"
    ),
    pytest.param(
        put("monitors", value={"web": {"type": "tcp", "intervall": 5}}),
        "monitors.web.intervall",
        "(did you mean 'interval'?)",
        id="monitor",
    ),
    pytest.param(
        put("regions", "r3", value=[{"fil": "x.txt"}]), "regions.r3[0].fil", "(did you mean 'file'?)", id="region-entry"
    ),
]

WRONG_TYPES = [
    pytest.param(
        put("virtual_servers", "vs1", "port", value="80"),
        "virtual_servers.vs1.port",
        "must be a whole number from 1 to 65535, not a string",
        id="string-for-port",
    ),
    pytest.param(
        put("topology", 0, "score", value="100"),
        "topology[0].score",
        "must be a whole number from 0 to 4294967295, not a string",
        id="string-for-score",
    ),
    pytest.param(
        put("pools", "p", "ttl", value="30"), "pools.p.ttl", "must be a whole number from 0 to", id="string-for-ttl"
    ),
    pytest.param(
        put("pools", "p", "load_balancing", value=["topology"]),
        "pools.p.load_balancing",
        "must be a mapping {preferred, alternate, fallback}, not a list",
        id="list-for-load_balancing",
    ),
    pytest.param(
        put("sync_group", value=["n1"]), "sync_group", "must be a mapping, not a list", id="list-for-sync_group"
    ),
    pytest.param(
        put("monitors", value=["web"]),
        "monitors",
        "must be a mapping of monitor names to settings, not a list",
        id="list-for-monitors",
    ),
    pytest.param(
        put("topology", value={"a": 1}),
        "topology",
        "must be a list of {ldns, server, score} records, not a mapping",
        id="mapping-for-topology",
    ),
    pytest.param(
        put(*MEMBER, "dns", value={"a": 1}),
        "sync_group.members[0].dns",
        "must be a list of ADDRESS:PORT, not a mapping",
        id="mapping-for-dns",
    ),
    pytest.param(
        put(*WIP, "persistence", value="yes"),
        f"{WIP_PATH}.persistence",
        "must be a mapping {ttl, ipv4_prefix, ipv6_prefix}, not a string",
        id="string-for-persistence",
    ),
    pytest.param(put("pools", "p6", "ttl", value=True), "pools.p6.ttl", "not a boolean", id="bool-for-ttl"),
    pytest.param(
        put("pools", "p", "max_answers", value=True), "pools.p.max_answers", "not a boolean", id="bool-for-max_answers"
    ),
    pytest.param(
        put("virtual_servers", "vs2", "enabled", value=1),
        "virtual_servers.vs2.enabled",
        "must be true or false, not a number",
        id="number-for-bool",
    ),
    pytest.param(
        put(*WIP, "type", value=4), f"{WIP_PATH}.type", "must be a non-empty string, not a number", id="number-for-type"
    ),
    pytest.param(
        put("prober", value={"path_ttl": "long"}), "prober.path_ttl", "not a string", id="string-for-path_ttl"
    ),
    pytest.param(
        put("base_dir", value=5), "base_dir", "must be a non-empty string, not a number", id="number-for-base_dir"
    ),
]

OUT_OF_RANGE = [
    pytest.param(
        put("sync_group", "heartbeat_interval", value=0.05),
        "sync_group.heartbeat_interval",
        "0.05 is out of range (0.1 to 60)",
        id="heartbeat-interval-too-small",
    ),
    pytest.param(
        put("sync_group", "heartbeat_timeout", value=1.5),
        "sync_group.heartbeat_timeout",
        "must be at least twice heartbeat_interval (1)",
        id="heartbeat-timeout-under-two-beats",
    ),
    pytest.param(
        put("sync_group", "idle_timeout", value=3),
        "sync_group.heartbeat_timeout",
        "must be less than idle_timeout (3)",
        id="heartbeat-timeout-not-under-idle",
    ),
    pytest.param(
        put("pools", "p", "ttl", value=2**31),
        "pools.p.ttl",
        "2147483648 is out of range (0 to 2147483647)",
        id="ttl-too-big",
    ),
    pytest.param(put("pools", "p6", "ttl", value=-1), "pools.p6.ttl", "-1 is out of range (0 to", id="ttl-negative"),
    pytest.param(
        put(*MEMBER, "peer", value="127.0.0.1:0"),
        "sync_group.members[0].peer",
        "port '0' is not a number from 1 to 65535",
        id="peer-port-0",
    ),
    pytest.param(
        put(*MEMBER, "peer", value="127.0.0.1:\u00b2"),
        "sync_group.members[0].peer",
        "port '\u00b2' is not a number from 1 to 65535",
        id="peer-port-superscript",
    ),
    pytest.param(
        put(*MEMBER, "dns", value=["127.0.0.1:70000"]),
        "sync_group.members[0].dns[0]",
        "port '70000' is not a number from 1 to 65535",
        id="dns-port-70000",
    ),
    pytest.param(
        put("virtual_servers", "vs1", "port", value=0),
        "virtual_servers.vs1.port",
        "0 is out of range (1 to 65535)",
        id="vs-port-0",
    ),
    pytest.param(
        put("virtual_servers", "vs1", "port", value=70000),
        "virtual_servers.vs1.port",
        "70000 is out of range (1 to 65535)",
        id="vs-port-70000",
    ),
    pytest.param(
        put("topology", 0, "score", value=-1),
        "topology[0].score",
        "-1 is out of range (0 to 4294967295)",
        id="score-neg",
    ),
    pytest.param(
        put("topology", 1, "score", value=2**32),
        "topology[1].score",
        "4294967296 is out of range (0 to 4294967295)",
        id="score-too-big",
    ),
    pytest.param(
        put("pools", "p", "members", 0, value={"virtual_server": "vs1", "ratio": -1}),
        "pools.p.members[0].ratio",
        "-1 is out of range (0 to 65535)",
        id="member-ratio-negative",
    ),
    pytest.param(
        put("pools", "p", "members", 1, value={"virtual_server": "vs2", "ratio": 65536}),
        "pools.p.members[1].ratio",
        "65536 is out of range (0 to 65535)",
        id="member-ratio-too-big",
    ),
    pytest.param(
        put(*WIP, "pools", value=[{"pool": "p", "ratio": 70000}, "p6"]),
        f"{WIP_PATH}.pools[0].ratio",
        "70000 is out of range (0 to 65535)",
        id="pool-ratio-too-big",
    ),
    pytest.param(
        put("pools", "p", "max_answers", value=0),
        "pools.p.max_answers",
        "0 is out of range (1 to 16)",
        id="max_answers-0",
    ),
    pytest.param(
        put("pools", "p", "max_answers", value=17),
        "pools.p.max_answers",
        "17 is out of range (1 to 16)",
        id="max_answers-17",
    ),
    pytest.param(
        put(*WIP, "persistence", value={"ipv4_prefix": 33}),
        f"{WIP_PATH}.persistence.ipv4_prefix",
        "33 is out of range (0 to 32)",
        id="persistence-ipv4-33",
    ),
    pytest.param(
        put(*WIP, "persistence", value={"ipv6_prefix": 129}),
        f"{WIP_PATH}.persistence.ipv6_prefix",
        "129 is out of range (0 to 128)",
        id="persistence-ipv6-129",
    ),
    pytest.param(
        put(*WIP, "persistence", value={"ttl": 0}),
        f"{WIP_PATH}.persistence.ttl",
        "0 is out of range (1 to 2592000)",
        id="persistence-ttl-0",
    ),
    pytest.param(
        put("pools", "p", "static_persist", value={"ipv4_prefix": 33}),
        "pools.p.static_persist.ipv4_prefix",
        "33 is out of range (0 to 32)",
        id="static_persist-33",
    ),
    pytest.param(
        put("dns_server", value={"udp_payload_size": 100}),
        "dns_server.udp_payload_size",
        "100 is out of range (512 to 1232)",
        id="udp_payload_size",
    ),
    pytest.param(
        put("dns_server", value={"udp_payload_size": 4096}),
        "dns_server.udp_payload_size",
        "4096 is out of range (512 to 1232)",
        id="udp_payload_size-fragments",
    ),
    pytest.param(
        put("dns_server", value={"version": "x" * 256}),
        "dns_server.version",
        "must be at most 255 printable ASCII characters (one TXT string)",
        id="version-too-long",
    ),
    pytest.param(
        put("dns_server", value={"version": "gtm\n1.0"}),
        "dns_server.version",
        "must be at most 255 printable ASCII characters",
        id="version-control-character",
    ),
    pytest.param(
        put("dns_server", value={"version": 1.0}),
        "dns_server.version",
        "must be a non-empty string, not",
        id="version-not-a-string",
    ),
    pytest.param(
        put("dns_server", value={"ecs_trusted": ["8.8.8.0/33"]}),
        "dns_server.ecs_trusted[0]",
        "8.8.8.0/33",
        id="ecs_trusted-bad-network",
    ),
    pytest.param(
        put("dns_server", value={"ecs_trusted": "8.8.8.0/24"}),
        "dns_server.ecs_trusted",
        "a list of resolver networks",
        id="ecs_trusted-not-a-list",
    ),
    pytest.param(
        put("persistence", value={"max_records": 0}),
        "persistence.max_records",
        "0 is out of range (1 to 1800000)",
        id="persistence-max_records-0",
    ),
    pytest.param(
        put("persistence", value={"max_entries": 10}),
        "persistence.max_entries",
        "unknown key",
        id="persistence-unknown-key",
    ),
    pytest.param(
        put("prober", value={"max_ldns": 0}),
        "prober.max_ldns",
        "0 is out of range (1 to 1800000)",
        id="prober-max_ldns-0",
    ),
    pytest.param(
        put("dns_server", value={"rate_limit": {"slip": -1}}),
        "dns_server.rate_limit.slip",
        "-1 is out of range (0 to 100)",
        id="rate_limit-slip",
    ),
    pytest.param(
        put("dns_server", value={"rate_limit": {"ipv6_prefix": 129}}),
        "dns_server.rate_limit.ipv6_prefix",
        "129 is out of range (16 to 128)",
        id="rate_limit-ipv6_prefix",
    ),
    pytest.param(
        put("dns_server", value={"rate_limit": {"exempt": ["192.0.2.1/24"]}}),
        "dns_server.rate_limit.exempt[0]",
        "has host bits set",
        id="rate_limit-exempt",
    ),
    pytest.param(
        put("dns_server", value={"rate_limit": {"response_per_second": 5}}),
        "dns_server.rate_limit.response_per_second",
        "(did you mean 'responses_per_second'?)",
        id="rate_limit-unknown",
    ),
    pytest.param(
        put("dns_server", value={"tcp_message_timeout": 0}),
        "dns_server.tcp_message_timeout",
        "0 is out of range (0.1 to 3600)",
        id="tcp_message_timeout",
    ),
    pytest.param(
        put("prober", value={"path_ttl": 1}), "prober.path_ttl", "1 is out of range (60 to 2147483647)", id="path_ttl"
    ),
    pytest.param(
        put("monitors", value={"web": {"type": "tcp", "interval": 0}}),
        "monitors.web.interval",
        "0 is out of range (0.1 to 86400)",
        id="monitor-interval",
    ),
    pytest.param(
        put("monitors", value={"web": {"type": "http", "expect_status": ["2xx", "6xx"]}}),
        "monitors.web.expect_status[1]",
        "'6xx' is neither a status (100 to 599) nor a class (1xx, 2xx, 3xx, 4xx, 5xx)",
        id="monitor-status-class",
    ),
    pytest.param(
        put("monitors", value={"web": {"type": "http", "reject_body_regex": "down("}}),
        "monitors.web.reject_body_regex",
        "bad regular expression: missing ), unterminated subpattern at position 4",
        id="monitor-reject-regex",
    ),
    pytest.param(
        put("monitors", value={"web": {"type": "tcp", "expect": "+OK", "reject": "-ERR"}}),
        "monitors.web.reject",
        "give 'expect' or 'reject', not both",
        id="monitor-expect-and-reject",
    ),
    pytest.param(
        put("monitors", value={"web": {"type": "udp", "send": "ping", "no_reply": "ok"}}),
        "monitors.web.no_reply",
        "'ok'",
        id="monitor-no-reply",
    ),
]

ADDRESSES = [
    pytest.param(
        put("virtual_servers", "vs1", "address", value="10.0.1.300"),
        "virtual_servers.vs1.address",
        "'10.0.1.300' is not an IPv4 or IPv6 address",
        id="vs-bad-ipv4",
    ),
    pytest.param(
        put("virtual_servers", "vs1", "address", value="www.example.com"),
        "virtual_servers.vs1.address",
        "'www.example.com' is not an IPv4 or IPv6 address",
        id="vs-hostname",
    ),
    pytest.param(
        put("regions", "r3", value=["10.0.0.1/8"]),
        "regions.r3[0]",
        "'10.0.0.1/8' has host bits set",
        id="cidr-host-bits",
    ),
    pytest.param(
        put("regions", "r3", value=["2001:db8::1/32"]),
        "regions.r3[0]",
        "'2001:db8::1/32' has host bits set",
        id="cidr6-host-bits",
    ),
    pytest.param(
        put("regions", "r3", value=["198.51.100.0/24", "garbage"]),
        "regions.r3[1]",
        "'garbage' is not an IPv4 or IPv6 network",
        id="cidr-garbage",
    ),
    pytest.param(
        put("regions", "r3", value=["10.0.0.0/33"]),
        "regions.r3[0]",
        "'10.0.0.0/33' is not an IPv4 or IPv6 network",
        id="cidr-prefix-33",
    ),
    pytest.param(
        put("topology", 0, "ldns", value="subnet 10.0.0.1/8"),
        "topology[0].ldns",
        "'10.0.0.1/8' has host bits set",
        id="topology-subnet-host-bits",
    ),
    pytest.param(
        put(*MEMBER, "peer", value="2001:db8:0:0:0:0:0:1:4353"),
        "sync_group.members[0].peer",
        "an IPv6 address goes in brackets",
        id="ipv6-port-without-brackets",
    ),
    pytest.param(
        put(*MEMBER, "dns", value=["::1:70000"]),
        "sync_group.members[0].dns[0]",
        "an IPv6 address goes in brackets",
        id="ipv6-dns-port-without-brackets",
    ),
    pytest.param(
        put(*MEMBER, "peer", value="[::1:4353"),
        "sync_group.members[0].peer",
        "is not ADDRESS:PORT",
        id="ipv6-unclosed-bracket",
    ),
    pytest.param(
        put(*MEMBER, "api", value="localhost:8053"),
        "sync_group.members[0].api",
        "'localhost:8053' is not ADDRESS:PORT",
        id="hostname-port",
    ),
    pytest.param(
        put(*MEMBER, "peer", value="127.0.0.1:http"),
        "sync_group.members[0].peer",
        "port 'http' is not a number from 1 to 65535",
        id="port-name",
    ),
    pytest.param(
        put("pools", "p", "fallback_ip", value=["192.0.2.1", "bad"]),
        "pools.p.fallback_ip[1]",
        "'bad' is not an IPv4 or IPv6 address",
        id="fallback_ip",
    ),
]

SECOND_MEMBER = {
    "name": "n2",
    "datacenter": "DC2",
    "peer": "127.0.0.2:4353",
    "dns": ["127.0.0.2:53"],
    "api": "127.0.0.2:8053",
}

DUPLICATES = [
    pytest.param(
        append("datacenters", value="DC1"), "datacenters[3]", "data center 'DC1' is listed twice", id="datacenter"
    ),
    pytest.param(
        append("sync_group", "members", value={**SECOND_MEMBER, "name": "n1"}),
        "sync_group.members[1].name",
        "member 'n1' is listed twice",
        id="member-name",
    ),
    pytest.param(
        combined(
            put(*MEMBER, "peer", value="198.51.100.1:4353"),
            append("sync_group", "members", value={**SECOND_MEMBER, "peer": "198.51.100.1:4353"}),
        ),
        "sync_group.members[1].peer",
        "peer address 198.51.100.1:4353 is also member 'n1'",
        id="member-peer-address",
    ),
    pytest.param(
        put(*MEMBER, "dns", value=["127.0.0.1:5353", "127.0.0.1:5353"]),
        "sync_group.members[0].dns[1]",
        "127.0.0.1:5353",
        id="member-dns-address-twice",
    ),
    pytest.param(
        append("pools", "p", "members", value="vs1"),
        "pools.p.members[3]",
        "virtual server 'vs1' is listed twice in this pool",
        id="vs-twice-in-pool",
    ),
    pytest.param(
        append(*WIP, "pools", value="p"), f"{WIP_PATH}.pools[2]", "pool 'p' is listed twice", id="pool-twice-in-wideip"
    ),
    pytest.param(
        put("wideips", "GSLB.Example.test", value={"type": ["A", "AAAA"], "pools": ["p", "p6"]}),
        'wideips."GSLB.Example.test"',
        "duplicate wide IP (same name as 'gslb.example.test')",
        id="wideip-case",
    ),
    pytest.param(
        append("zones", value={"origin": "EXAMPLE.test.", "file": "example.test.zone"}),
        "zones[1].origin",
        "zone 'EXAMPLE.test.' is listed twice (also zones[0])",
        id="zone-origin",
    ),
    pytest.param(
        put("virtual_servers", "vs4", value={"address": "10.0.1.1", "port": 80, "datacenter": "DC2"}),
        "virtual_servers.vs4",
        "same address and port as virtual server 'vs1'",
        id="vs-address-port",
    ),
    pytest.param(
        put("virtual_servers", "vs4", value={"address": "2001:DB8:1:0::1", "datacenter": "DC2"}),
        "virtual_servers.vs4",
        "same address and port as virtual server 'vs1-6'",
        id="vs-ipv6-address-port",
    ),
]

DANGLING = [
    pytest.param(
        append("pools", "p", "members", value="nope"),
        "pools.p.members[3]",
        "no virtual server named 'nope'",
        id="pool-member",
    ),
    pytest.param(
        append("pools", "p", "members", value={"virtual_server": "nope", "ratio": 2}),
        "pools.p.members[3].virtual_server",
        "no virtual server named 'nope'",
        id="pool-member-mapping",
    ),
    pytest.param(
        append(*WIP, "pools", value="nopool"), f"{WIP_PATH}.pools[2]", "no pool named 'nopool'", id="wideip-pool"
    ),
    pytest.param(
        put(*WIP, "last_resort_pool", value="nolr"),
        f"{WIP_PATH}.last_resort_pool",
        "no pool named 'nolr'",
        id="last_resort_pool",
    ),
    pytest.param(
        put("topology", 0, "ldns", value="region nor"),
        "topology[0].ldns",
        "no region named 'nor'",
        id="topology-region",
    ),
    pytest.param(
        put("topology", 0, "server", value="datacenter NODC"),
        "topology[0].server",
        "no datacenter named 'NODC'",
        id="topology-datacenter",
    ),
    pytest.param(
        put("topology", 0, "server", value="pool nop"), "topology[0].server", "no pool named 'nop'", id="topology-pool"
    ),
    pytest.param(
        put("topology", 0, "server", value="not virtual_server novs"),
        "topology[0].server",
        "no virtual server named 'novs'",
        id="topology-virtual_server",
    ),
    pytest.param(
        put("virtual_servers", "vs1", "datacenter", value="DC9"),
        "virtual_servers.vs1.datacenter",
        "'DC9' is not one of: DC1, DC2, DC3",
        id="vs-datacenter",
    ),
    pytest.param(
        put("virtual_servers", "vs1", "monitor", value="mon"),
        "virtual_servers.vs1.monitor",
        "no monitor named 'mon'",
        id="vs-monitor",
    ),
    pytest.param(
        put(*MEMBER, "datacenter", value="DCX"),
        "sync_group.members[0].datacenter",
        "'DCX' is not one of: DC1, DC2, DC3",
        id="member-datacenter",
    ),
    pytest.param(
        put("regions", "r3", value=[{"region": "nor"}]),
        "regions.r3[0].region",
        "no region named 'nor'",
        id="region-include",
    ),
    pytest.param(
        put("regions", "r3", value=[{"region": "r3"}]),
        "regions.r3[0].region",
        "regions include each other in a cycle: r3 -> r3",
        id="region-self-include",
    ),
]

METHODS = [
    pytest.param(
        put("pools", "p", "load_balancing", "preferred", value="topolgy"),
        "pools.p.load_balancing.preferred",
        "'topolgy' is not one of: round_robin, ratio, global_availability, topology",
        id="preferred",
    ),
    pytest.param(
        put("pools", "p", "load_balancing", "preferred", value="topolgy"),
        "pools.p.load_balancing.preferred",
        "(did you mean 'topology'?)",
        id="preferred-did-you-mean",
    ),
    pytest.param(
        put("pools", "p", "load_balancing", "alternate", value="round_robbin"),
        "pools.p.load_balancing.alternate",
        "(did you mean 'round_robin'?)",
        id="alternate",
    ),
    pytest.param(
        put("pools", "p", "load_balancing", "fallback", value="globl_availability"),
        "pools.p.load_balancing.fallback",
        "(did you mean 'global_availability'?)",
        id="fallback",
    ),
    pytest.param(
        put(*WIP, "pool_lb", value="round_robbin"), f"{WIP_PATH}.pool_lb", "(did you mean 'round_robin'?)", id="pool_lb"
    ),
    pytest.param(
        put(*WIP, "pool_lb", value="fallback_ip"),
        f"{WIP_PATH}.pool_lb",
        "'fallback_ip' is not one of: round_robin, ratio, global_availability, topology, random, static_persist, rtt",
        id="pool_lb-member-only-method",
    ),
    pytest.param(
        put("pools", "p", "load_balancing", "fallback", value="fallback_ip"),
        "pools.p.load_balancing.fallback",
        "fallback_ip needs the pool's 'fallback_ip' address(es)",
        id="fallback_ip-without-addresses",
    ),
    pytest.param(
        put("pools", "p6", "load_balancing", "preferred", value="fallback_ip"),
        "pools.p6.load_balancing.preferred",
        "fallback_ip needs the pool's 'fallback_ip' address(es)",
        id="preferred-fallback_ip-without-addresses",
    ),
]

WIDEIP_PLACEMENT = [
    pytest.param(
        put("wideips", "www.other.test", value={"pools": ["p"]}),
        'wideips."www.other.test"',
        "not inside any served zone (zones: example.test.)",
        id="outside-zones",
    ),
    pytest.param(
        put("wideips", "x.sub.example.test", value={"pools": ["p"]}),
        'wideips."x.sub.example.test"',
        "at or below the delegation sub.example.test. in zone example.test.",
        id="below-delegation",
    ),
    pytest.param(
        put("wideips", "sub.example.test", value={"pools": ["p"]}),
        'wideips."sub.example.test"',
        "at or below the delegation sub.example.test.",
        id="at-delegation",
    ),
    pytest.param(
        put("wideips", "alias.example.test", value={"pools": ["p"]}),
        'wideips."alias.example.test"',
        "zone example.test. has a CNAME at this name",
        id="at-cname",
    ),
    pytest.param(
        put("wideips", "ALIAS.Example.TEST", value={"pools": ["p"]}),
        'wideips."ALIAS.Example.TEST"',
        "has a CNAME at this name",
        id="at-cname-other-case",
    ),
    pytest.param(
        put("wideips", "web*.example.test", value={"pools": ["p"]}),
        'wideips."web*.example.test"',
        "a wildcard is '*' as the whole leftmost label, as in '*.apps.example.com'",
        id="wildcard-inside-a-label",
    ),
    pytest.param(
        put("wideips", "bad..name.example.test", value={"pools": ["p"]}),
        'wideips."bad..name.example.test"',
        "is not a domain name",
        id="bad-name",
    ),
    pytest.param(
        put("wideips", "v6.example.test", value={"type": "AAAA", "pools": ["p"]}),
        'wideips."v6.example.test".type',
        "type AAAA but no pool has an IPv6 virtual server or fallback_ip",
        id="aaaa-without-ipv6",
    ),
    pytest.param(
        put("wideips", "v4.example.test", value={"type": ["A"], "pools": ["p6"]}),
        'wideips."v4.example.test".type',
        "type A but no pool has an IPv4 virtual server or fallback_ip",
        id="a-without-ipv4",
    ),
    pytest.param(
        put(*WIP, "type", value=["A", "TXT"]),
        f"{WIP_PATH}.type[1]",
        "'TXT' is not one of: A, AAAA, CNAME, MX, SRV, NAPTR",
        id="type-txt",
    ),
]

MISSING = [
    pytest.param(drop("sync_group"), "(top level)", "missing key 'sync_group'", id="sync_group"),
    pytest.param(drop("datacenters"), "(top level)", "missing key 'datacenters'", id="datacenters"),
    pytest.param(drop("zones"), "(top level)", "missing key 'zones'", id="zones"),
    pytest.param(drop("sync_group", "name"), "sync_group", "missing key 'name'", id="sync_group-name"),
    pytest.param(drop("sync_group", "members"), "sync_group", "missing key 'members'", id="sync_group-members"),
    pytest.param(
        put("sync_group", "members", value=[]),
        "sync_group.members",
        "a sync group needs at least one member",
        id="sync_group-members-empty",
    ),
    pytest.param(drop(*MEMBER, "name"), "sync_group.members[0]", "missing key 'name'", id="member-name"),
    pytest.param(drop(*MEMBER, "peer"), "sync_group.members[0]", "missing key 'peer'", id="member-peer"),
    pytest.param(drop(*MEMBER, "dns"), "sync_group.members[0]", "missing key 'dns'", id="member-dns"),
    pytest.param(
        put(*MEMBER, "dns", value=[]),
        "sync_group.members[0].dns",
        "a member needs at least one DNS address",
        id="dns-empty",
    ),
    pytest.param(drop("pools", "p", "members"), "pools.p", "missing key 'members'", id="pool-members"),
    pytest.param(
        put("pools", "p", "members", value=[]), "pools.p.members", "a pool needs at least one member", id="pool-empty"
    ),
    pytest.param(
        append("pools", "p", "members", value={"ratio": 2}),
        "pools.p.members[3]",
        "missing key 'virtual_server'",
        id="pool-member-virtual_server",
    ),
    pytest.param(
        put("pools", "p", value={"members": [], "fallback_ip": "192.0.2.9"}),
        "pools.p.members",
        "a pool needs at least one member, or else 'fallback_ip' addresses and the method fallback_ip",
        id="pool-empty-fallback-not-a-method",
    ),
    pytest.param(
        put("pools", "p", value={"fallback_ip": "192.0.2.9", "load_balancing": {"preferred": "round_robin"}}),
        "pools.p",
        "a pool without members answers only by fallback_ip",
        id="pool-no-members-fallback-not-a-method",
    ),
    pytest.param(drop(*WIP, "pools"), WIP_PATH, "missing key 'pools'", id="wideip-pools"),
    pytest.param(
        put(*WIP, "pools", value=[]), f"{WIP_PATH}.pools", "a wide IP needs at least one pool", id="wideip-empty"
    ),
    pytest.param(
        drop("virtual_servers", "vs1", "address"), "virtual_servers.vs1", "missing key 'address'", id="vs-address"
    ),
    pytest.param(
        drop("virtual_servers", "vs1", "datacenter"),
        "virtual_servers.vs1",
        "missing key 'datacenter'",
        id="vs-datacenter",
    ),
    pytest.param(drop("topology", 0, "score"), "topology[0]", "missing key 'score'", id="topology-score"),
    pytest.param(drop("topology", 0, "ldns"), "topology[0]", "missing key 'ldns'", id="topology-ldns"),
    pytest.param(drop("zones", 0, "file"), "zones[0]", "missing key 'file'", id="zone-file"),
    pytest.param(
        put("monitors", value={"web": {"interval": 5}}), "monitors.web", "missing key 'type'", id="monitor-type"
    ),
]


ADMIN_STATES = [
    pytest.param(
        put("pools", "p", "admin_state", value="off"),
        "pools.p.admin_state",
        "'off' is not one of: enabled, disabled, drain",
        id="pool",
    ),
    pytest.param(
        put("pools", "p", "members", 0, value={"virtual_server": "vs1", "admin_state": "disable"}),
        "pools.p.members[0].admin_state",
        "'disable' is not one of: enabled, disabled, drain (did you mean 'disabled'?)",
        id="pool-member",
    ),
    pytest.param(
        put(*WIP, "admin_state", value=False),
        f"{WIP_PATH}.admin_state",
        "must be a non-empty string, not a boolean",
        id="wideip",
    ),
    pytest.param(
        put("pools", "p", "members", 0, value={"virtual_server": "vs1", "enabled": False}),
        "pools.p.members[0].enabled",
        "unknown key; known keys here: virtual_server, ratio, admin_state",
        id="pool-member-enabled",
    ),
]


def _prefixed(prefix: str, params: list[Any]) -> list[Any]:
    return [pytest.param(*p.values, id=f"{prefix}-{p.id}") for p in params]


SINGLE_MISTAKES = [
    *_prefixed("unknown-key", UNKNOWN_KEYS),
    *_prefixed("type", WRONG_TYPES),
    *_prefixed("range", OUT_OF_RANGE),
    *_prefixed("address", ADDRESSES),
    *_prefixed("duplicate", DUPLICATES),
    *_prefixed("dangling", DANGLING),
    *_prefixed("method", METHODS),
    *_prefixed("wideip", WIDEIP_PLACEMENT),
    *_prefixed("missing", MISSING),
    *_prefixed("admin-state", ADMIN_STATES),
]


@pytest.mark.parametrize(("mutation", "path", "fragment"), SINGLE_MISTAKES)
def test_mistake_is_reported(tmp_path: Path, mutation: Mutation, path: str, fragment: str) -> None:
    """Each mistake is reported at its key path, in the `FILE: key.path: problem (line N)` form."""
    file, problems = problems_of(tmp_path, mutation)
    problem = find(problems, path, fragment)
    assert problem.file == str(file)
    message = assert_form(problem, file, path)
    assert fragment in message
    assert problem.line is not None and problem.line >= 1


@pytest.mark.parametrize(("mutation", "path", "fragment"), SINGLE_MISTAKES)
def test_one_mistake_is_one_problem(tmp_path: Path, mutation: Mutation, path: str, fragment: str) -> None:
    """A config with one mistake yields exactly one problem: nothing else is reported as a consequence."""
    _, problems = problems_of(tmp_path, mutation)
    assert len(problems) == 1, f"one mistake, {len(problems)} problems:\n{described(problems)}"


def test_float_where_whole_number_names_the_value(tmp_path: Path) -> None:
    """A fractional number where a whole number is needed is reported with its value, not as "not a number"."""
    _, problems = problems_of(tmp_path, put("virtual_servers", "vs1", "port", value=80.5))
    problem = find(problems, "virtual_servers.vs1.port", "whole number")
    assert "80.5" in problem.message, problem.message


# --- several mistakes at once ------------------------------------------------------------------


def test_all_independent_mistakes_are_reported_together(tmp_path: Path) -> None:
    """Eight mistakes in different sections give exactly eight problems, in file order."""
    mutation = combined(
        put("bogus", value=1),
        put(*MEMBER, "peer", value="127.0.0.1:0"),
        append("datacenters", value="DC2"),
        put("virtual_servers", "vs2", "port", value=70000),
        put("regions", "r2", value=["203.0.113.0/24", "garbage"]),
        put("topology", 2, "score", value=-5),
        put("pools", "p", "load_balancing", "alternate", value="topolgy"),
        put(*WIP, "pool_lb", value="nope"),
    )
    file, problems = problems_of(tmp_path, mutation)
    expected = {
        "bogus",
        "sync_group.members[0].peer",
        "datacenters[3]",
        "virtual_servers.vs2.port",
        "regions.r2[1]",
        "topology[2].score",
        "pools.p.load_balancing.alternate",
        f"{WIP_PATH}.pool_lb",
    }
    assert sorted(format_path(p.path) for p in problems) == sorted(expected), described(problems)
    for p in problems:
        assert_form(p, file, format_path(p.path))
    lines = [p.line or 0 for p in problems]
    assert lines == sorted(lines)


def test_config_error_text_is_one_problem_per_line(tmp_path: Path) -> None:
    """The ConfigError message is the problems' text, one per line."""
    config = configs.base()
    config["pools"]["p"]["tll"] = 30
    config["virtual_servers"]["vs3"]["port"] = 0
    path = configs.write(tmp_path, config)
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert str(caught.value).splitlines() == [str(p) for p in caught.value.problems]
    assert len(caught.value.problems) == 2


def test_problem_text_form() -> None:
    """Problem text: file, dotted key path with [index] and quoted keys, message, then the line when known."""
    assert (
        str(Problem("c.yaml", ("pools", "web", "members", 1), "bad", 7)) == "c.yaml: pools.web.members[1]: bad (line 7)"
    )
    assert str(Problem("c.yaml", ("wideips", "www.a.b", "ttl"), "bad")) == 'c.yaml: wideips."www.a.b".ttl: bad'
    assert str(Problem("c.yaml", (), "bad", 1)) == "c.yaml: (top level): bad (line 1)"


# --- line numbers, from YAML written by hand ---------------------------------------------------

TEXT = """\
sync_group:
  name: test
  members:
    - name: n1
      datacenter: DC1
      peer: 127.0.0.1:4353
      dns: [127.0.0.1:5353]
datacenters: [DC1, DC2]
virtual_servers:
  vs1: {address: 10.0.1.1, datacenter: DC1}
  vs2:
    address: 10.0.2.1
    datacenter: DC2
regions:
  r1:
    - 198.51.100.0/24
topology:
  - {ldns: region r1, server: datacenter DC1, score: 100}
pools:
  p:
    members:
      - vs1
      - vs2
    ttl: 30
wideips:
  www.example.test:
    pools: [p]
zones:
  - {origin: example.test, file: example.test.zone}
"""


def write_text(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "example.test.zone").write_text(configs.ZONE)
    path = directory / "cluster.yaml"
    path.write_text(text)
    return path


def edited(old: str, new: str) -> str:
    assert TEXT.count(old) == 1, old
    return TEXT.replace(old, new)


def marked_lines(text: str) -> dict[str, int]:
    """Line numbers of the lines carrying a `#!NAME` marker comment."""
    out = {}
    for number, line in enumerate(text.splitlines(), 1):
        for name in re.findall(r"#!(\w+)", line):
            out[name] = number
    return out


def test_hand_written_text_is_valid(tmp_path: Path) -> None:
    """The YAML the line-number tests edit loads cleanly, so every problem below comes from the edit."""
    loaded = load(write_text(tmp_path, TEXT))
    assert set(loaded.pools) == {"p"}


@pytest.mark.parametrize(
    ("old", "new", "path", "fragment"),
    [
        pytest.param(
            "    ttl: 30\n", "    ttl: 30\n    tll: 5  #!here\n", "pools.p.tll", "unknown key", id="unknown-key-deep"
        ),
        pytest.param("    ttl: 30\n", "    ttl: -3  #!here\n", "pools.p.ttl", "out of range", id="block-value"),
        pytest.param(
            "  vs1: {address: 10.0.1.1, datacenter: DC1}\n",
            "  vs1: {address: 10.0.1.300, datacenter: DC1}  #!here\n",
            "virtual_servers.vs1.address",
            "not an IPv4 or IPv6 address",
            id="flow-mapping-value",
        ),
        pytest.param(
            "      - vs2\n",
            "      - vs2\n      - nope  #!here\n",
            "pools.p.members[2]",
            "no virtual server",
            id="list-item",
        ),
        pytest.param(
            "  vs2:\n    address: 10.0.2.1\n",
            "  vs2:  #!here\n",
            "virtual_servers.vs2",
            "missing key 'address'",
            id="missing-key",
        ),
        pytest.param(
            "    - 198.51.100.0/24\n",
            "    - 198.51.100.0/24\n    - 198.51.100.1/24  #!here\n",
            "regions.r1[1]",
            "host bits set",
            id="region-network",
        ),
        pytest.param(
            "  - {ldns: region r1, server: datacenter DC1, score: 100}\n",
            "  - ldns: region r1\n    server: datacenter DC9  #!here\n    score: 100\n",
            "topology[0].server",
            "no datacenter named 'DC9'",
            id="topology-server",
        ),
        pytest.param(
            "datacenters: [DC1, DC2]\n",
            "datacenters:\n  - DC1\n  - DC2\n  - DC1  #!here\n",
            "datacenters[2]",
            "listed twice",
            id="duplicate-datacenter",
        ),
        pytest.param(
            "    pools: [p]\n",
            "    pools: [p]\n    pool_lb: topolgy  #!here\n",
            'wideips."www.example.test".pool_lb',
            "did you mean 'topology'?",
            id="wideip-method",
        ),
    ],
)
def test_line_numbers_point_at_the_mistake(tmp_path: Path, old: str, new: str, path: str, fragment: str) -> None:
    """The line number of a problem is the line of the offending key or item (or of the mapping missing a key)."""
    text = edited(old, new)
    problems = problems_of_file(write_text(tmp_path, text))
    problem = find(problems, path, fragment)
    expected = marked_lines(text)["here"]
    assert problem.line == expected, str(problem)
    assert str(problem).endswith(f" (line {expected})")


def test_line_numbers_of_several_mistakes(tmp_path: Path) -> None:
    """Several mistakes: each problem carries its own line, and they come in file order."""
    text = edited("  name: test\n", "  name: test\n  nmae: x  #!a\n")
    text = text.replace("datacenters: [DC1, DC2]\n", "datacenters: [DC1, DC2]\nstate_dir: [x]  #!b\n")
    text = text.replace("      - vs1\n", "      - {virtual_server: vs1, ratio: -1}  #!c\n")
    text = text.replace("    pools: [p]\n", "    pools: [p]\n    type: TXT  #!d\n")
    marks = marked_lines(text)
    problems = problems_of_file(write_text(tmp_path, text))
    got = [(format_path(p.path), p.line) for p in problems]
    assert got == [
        ("sync_group.nmae", marks["a"]),
        ("state_dir", marks["b"]),
        ("pools.p.members[0].ratio", marks["c"]),
        ('wideips."www.example.test".type', marks["d"]),
    ]


# --- YAML itself -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        pytest.param("a: 1\nb:\n  name: x: y\nc: 2\n", 3, "mapping values are not allowed here", id="colon-in-value"),
        pytest.param("sync_group:\n  name: x\n\tmembers: []\n", 3, "'\\t' that cannot start any token", id="tab"),
        pytest.param("a: 1\nb: [1, 2\nc: 3\n", 3, "expected ',' or ']'", id="unclosed-flow-sequence"),
        pytest.param("a: &x 1\nb: *y\n", 2, "found undefined alias 'y'", id="undefined-alias"),
        pytest.param("a: 1\nb: 'unterminated\nc: 2\n", 2, "quoted scalar", id="unterminated-quote"),
        # found by fuzzing (fuzz/config_load.py): PyYAML's reader error escaped as a traceback
        pytest.param("a: 1\nb: x\x00y\n", 2, "special characters are not allowed (0x0)", id="control-character"),
    ],
)
def test_yaml_syntax_error(tmp_path: Path, text: str, line: int, fragment: str) -> None:
    """A YAML syntax error is one problem naming the file and the line where the mistake is."""
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    problems = problems_of_file(path)
    assert len(problems) == 1, described(problems)
    message = assert_form(problems[0], path, "(top level)")
    assert message.startswith("YAML syntax: ")
    assert fragment in message
    assert problems[0].line == line, str(problems[0])
    assert line <= len(text.splitlines())


LAUGHS = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}' if i else 'x'] * 10)}]\n" for i in range(7))


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        pytest.param("a: &x [1, *x]\n", 1, "an alias inside the value it names", id="recursive-alias"),
        pytest.param("a:\n  b: &x {c: [*x]}\n", 2, "an alias inside the value it names", id="recursive-mapping"),
        pytest.param("a: " + "[" * 3000 + "]" * 3000 + "\n", None, "nested too deeply", id="deep-nesting"),
        pytest.param(LAUGHS, 1, "expands to more than 500000 values", id="billion-laughs"),
    ],
)
def test_yaml_that_cannot_be_built_is_one_problem(tmp_path: Path, text: str, line: int | None, fragment: str) -> None:
    """Structures PyYAML would recurse on forever, or expand until memory runs out, are one
    problem each (found while writing fuzz/config_load.py; each was a traceback or a hang)."""
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    problems = problems_of_file(path)
    assert len(problems) == 1, described(problems)
    assert fragment in problems[0].message
    assert problems[0].line == line


def test_a_number_too_large_for_a_float_is_out_of_range(tmp_path: Path) -> None:
    """A number key given a 400-digit integer (formatting it raised OverflowError)."""
    _, problems = problems_of(tmp_path, put("dns_server", value={"tcp_idle_timeout": 10**400}))
    problem = find(problems, "dns_server.tcp_idle_timeout", "is out of range (0.1 to 3600)")
    assert problem.message.startswith("10000000000000000000...")


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        pytest.param("- sync_group\n- zones\n", "a list", id="list"),
        pytest.param("just a string\n", "a string", id="string"),
        pytest.param("42\n", "a number", id="number"),
        pytest.param("", "nothing (null)", id="empty-file"),
        pytest.param("# only a comment\n", "nothing (null)", id="only-comment"),
    ],
)
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str, kind: str) -> None:
    """A file whose top level is not a mapping is one problem saying what it is instead."""
    path = tmp_path / "top.yaml"
    path.write_text(text)
    problems = problems_of_file(path)
    assert len(problems) == 1, described(problems)
    message = assert_form(problems[0], path, "(top level)")
    assert message == f"must be a mapping of sections (sync_group, datacenters, ...), not {kind}"


def test_unreadable_config_file(tmp_path: Path) -> None:
    """A config that does not exist is one problem naming the file, not an exception trace."""
    path = tmp_path / "missing.yaml"
    problems = problems_of_file(path)
    assert [str(p) for p in problems] == [f"{path}: (top level): cannot read the config: No such file or directory"]


@pytest.mark.parametrize(
    ("old", "new", "path"),
    [
        pytest.param(
            "zones:\n",
            "datacenters: [DC3]  #!here\nzones:\n",
            "datacenters",
            id="top-level",
        ),
        pytest.param("  vs2:\n", "  vs1:  #!here\n", "virtual_servers.vs1", id="nested"),
        pytest.param(
            "  vs1: {address: 10.0.1.1, datacenter: DC1}\n",
            "  vs1: {address: 10.0.1.1, datacenter: DC1, address: 10.0.1.2}  #!here\n",
            "virtual_servers.vs1.address",
            id="flow-mapping",
        ),
        pytest.param(
            "      datacenter: DC1\n",
            "      datacenter: DC1\n      name: n2  #!here\n",
            "sync_group.members[0].name",
            id="in-list-item",
        ),
    ],
)
def test_duplicate_yaml_keys(tmp_path: Path, old: str, new: str, path: str) -> None:
    """Two equal keys in one mapping are a problem at the second one's line (YAML would silently keep one)."""
    text = edited(old, new)
    problems = problems_of_file(write_text(tmp_path, text))
    problem = find(problems, path, "duplicate key")
    assert problem.line == marked_lines(text)["here"]
    assert_form(problem, tmp_path / "cluster.yaml", path)


def test_duplicate_yaml_key_reported_with_other_problems(tmp_path: Path) -> None:
    """A duplicate key does not hide the config's other problems: both are reported at once."""
    text = edited("  vs2:\n", "  vs1:  #!dup\n").replace("    ttl: 30\n", "    ttl: -1  #!ttl\n")
    marks = marked_lines(text)
    problems = problems_of_file(write_text(tmp_path, text))
    assert {(format_path(p.path), p.line) for p in problems} >= {
        ("virtual_servers.vs1", marks["dup"]),
        ("pools.p.ttl", marks["ttl"]),
    }, described(problems)


def test_non_scalar_key(tmp_path: Path) -> None:
    """A key that is a list or mapping is a problem with its line, not a crash."""
    text = TEXT.replace("regions:\n", "? [a, b]  #!here\n: 1\nregions:\n")
    problems = problems_of_file(write_text(tmp_path, text))
    problem = find(problems, "(top level)", "a key must be a plain scalar")
    assert problem.line == marked_lines(text)["here"]


# --- zone files --------------------------------------------------------------------------------

ZONE_LINES = len(configs.ZONE.splitlines())


def _zone_problem(tmp_path: Path, zone: str, extra_files: dict[str, str] | None = None) -> tuple[Path, list[Problem]]:
    for name, text in (extra_files or {}).items():
        (tmp_path / name).write_text(text)
    return problems_of(tmp_path, lambda c: None, zone=zone)


@pytest.mark.parametrize(
    ("record", "fragment"),
    [
        pytest.param("bad IN A 1.2.3", "bad A data: Text input is malformed", id="bad-a"),
        pytest.param("bad IN A 999.1.1.1", "bad A data: Text input is malformed", id="bad-a-octet"),
        pytest.param("bad IN AAAA 1.2.3.4", "bad AAAA data: Text input is malformed", id="bad-aaaa"),
        pytest.param("bad IN MX mail", "bad MX data: expecting an integer", id="bad-mx"),
        pytest.param("bad IN FOO 1.2.3.4", "unknown record type", id="unknown-type"),
        pytest.param('txt IN TXT "unterminated', "unterminated quoted string", id="unterminated-quote"),
        pytest.param("bad 2147483648 IN A 192.0.2.1", "the TTL is over 2147483647", id="ttl-too-big"),
        pytest.param("bad IN A ( 192.0.2.1", "'(' is never closed", id="unclosed-parenthesis"),
        pytest.param("far.away.test. IN A 192.0.2.1", "is outside the zone example.test.", id="outside-zone"),
        pytest.param("$INCLUDE missing.inc", "cannot read", id="include-missing"),
        pytest.param("$GENERATE 1-2 a$ A 192.0.2.$", "unsupported directive: $GENERATE", id="unknown-directive"),
        pytest.param(
            "www2 IN CNAME www\nwww2 IN A 192.0.2.2",
            "a CNAME beside other data at this name (A)",
            id="cname-and-a",
        ),
    ],
)
def test_zone_file_problem_has_file_and_line(tmp_path: Path, record: str, fragment: str) -> None:
    """A zone file mistake is reported at zones[N].file with the zone file's name and line number."""
    file, problems = _zone_problem(tmp_path, configs.ZONE + record + "\n")
    zone_file = tmp_path.resolve() / "example.test.zone"
    problem = find(problems, "zones[0].file", fragment)
    message = assert_form(problem, file, "zones[0].file")
    assert message.startswith(f"{zone_file}:{ZONE_LINES + 1}: "), message
    if "missing.inc" in record:
        assert str(tmp_path.resolve() / "missing.inc") in message
    assert problem.line == _zone_file_key_line(file)


def _zone_file_key_line(config_file: Path) -> int:
    """The line of `file:` under zones[0] in a config written by configs.write."""
    lines = config_file.read_text().splitlines()
    start = lines.index("zones:")
    return next(n for n, line in enumerate(lines, 1) if n > start and line.strip().startswith("file:"))


@pytest.mark.parametrize(
    ("zone", "fragment"),
    [
        pytest.param(
            configs.ZONE.replace(
                "@        IN SOA ns1.example.test. hostmaster.example.test. 1 3600 600 86400 300\n",
                "@ IN A 192.0.2.9\n",
            ),
            "no SOA record at the zone apex example.test.",
            id="no-soa",
        ),
        pytest.param(
            configs.ZONE.replace("         IN NS  ns1\n         IN NS  ns2.other.test.\n", ""),
            "no NS records at the zone apex example.test.",
            id="no-ns",
        ),
    ],
)
def test_zone_without_soa_or_ns(tmp_path: Path, zone: str, fragment: str) -> None:
    """A zone without SOA or NS at its apex is reported with the zone file's name."""
    file, problems = _zone_problem(tmp_path, zone)
    problem = find(problems, "zones[0].file", fragment)
    message = assert_form(problem, file, "zones[0].file")
    assert message == f"{tmp_path.resolve() / 'example.test.zone'}: {fragment}"


def test_zone_include_problem_names_the_included_file(tmp_path: Path) -> None:
    """A mistake inside an $INCLUDEd file is reported with that file's name and its own line number."""
    file, problems = _zone_problem(
        tmp_path, configs.ZONE + "$INCLUDE part.inc\n", {"part.inc": "ok IN A 192.0.2.10\nbad IN A nope\n"}
    )
    problem = find(problems, "zones[0].file", "bad A data: Text input is malformed")
    assert assert_form(problem, file, "zones[0].file").startswith(f"{tmp_path.resolve() / 'part.inc'}:2: ")


def test_every_zone_file_mistake_is_reported(tmp_path: Path) -> None:
    """Several bad zone lines give one problem each, each with its own line."""
    _, problems = _zone_problem(tmp_path, configs.ZONE + "a1 IN A 1.2.3\na2 IN FOO x\na3 IN A 192.0.2.3\na4 IN MX x\n")
    zone_file = tmp_path.resolve() / "example.test.zone"
    zone_problems = [p.message for p in problems if format_path(p.path) == "zones[0].file"]
    n = ZONE_LINES
    assert [m.split(": ", 1)[0] for m in zone_problems] == [
        f"{zone_file}:{n + 1}",
        f"{zone_file}:{n + 2}",
        f"{zone_file}:{n + 4}",
    ]


@pytest.mark.parametrize(
    "record",
    [
        pytest.param("bad IN A 1.2.3", id="bad-a"),
        pytest.param('txt IN TXT "unterminated', id="unterminated-quote"),
        pytest.param("$INCLUDE missing.inc", id="include-missing"),
        pytest.param("bad 2147483648 IN A 192.0.2.1", id="ttl-too-big"),
        pytest.param("bad 1x IN A 192.0.2.1", id="ttl-garbage"),
    ],
)
def test_zone_mistake_is_one_problem(tmp_path: Path, record: str) -> None:
    """One bad zone line is one problem: neither a follow-on zone problem nor 'not inside any served zone'."""
    _, problems = _zone_problem(tmp_path, configs.ZONE + record + "\n")
    assert len(problems) == 1, described(problems)


def test_unreadable_zone_file_is_one_problem(tmp_path: Path) -> None:
    """A zone file that does not exist is reported once, without 'no SOA'/'no NS' follow-ons."""
    config = configs.base()
    config["zones"].append({"origin": "other.test", "file": "missing.zone"})
    problems = problems_of_file(configs.write(tmp_path, config))
    assert len(problems) == 1, described(problems)
    message = assert_form(problems[0], tmp_path / "cluster.yaml", "zones[1].file")
    assert "cannot read" in message
    assert str(tmp_path.resolve() / "missing.zone") in message


# --- address list files ------------------------------------------------------------------------


def test_address_list_bad_lines(tmp_path: Path) -> None:
    """Each bad line of an address list file is a problem naming the file and the line."""
    (tmp_path / "isp.txt").write_text("# ISP\n10.0.0.0/8\n\n10.0.0.1/8   # host bits\nbogus\n192.0.2.0/24\n")
    file, problems = problems_of(tmp_path, put("regions", "isp", value={"file": "isp.txt"}))
    list_file = tmp_path.resolve() / "isp.txt"
    messages = [assert_form(p, file, "regions.isp.file") for p in problems]
    assert messages == [
        f"{list_file}:4: '10.0.0.1/8' has host bits set",
        f"{list_file}:5: 'bogus' is not an IPv4 or IPv6 network",
    ]


def test_address_list_file_missing(tmp_path: Path) -> None:
    """A missing address list file is one problem at the `file` key."""
    file, problems = problems_of(tmp_path, put("regions", "isp", value=[{"file": "nope.txt"}]))
    assert len(problems) == 1, described(problems)
    message = assert_form(problems[0], file, "regions.isp[0].file")
    assert message.startswith(f"cannot read {tmp_path.resolve() / 'nope.txt'}")


# --- no cascades -------------------------------------------------------------------------------


def test_bad_vs_address_does_not_cascade_into_pool(tmp_path: Path) -> None:
    """A VS with a bad address is reported once; the pool naming it does not add 'no virtual server named'."""
    _, problems = problems_of(tmp_path, put("virtual_servers", "vs1", "address", value="10.0.1.300"))
    assert [format_path(p.path) for p in problems] == ["virtual_servers.vs1.address"], described(problems)


def test_vs_that_is_not_a_mapping_does_not_cascade_into_pool(tmp_path: Path) -> None:
    """A VS written as a list is reported once; pools naming it do not add 'no virtual server named'."""
    _, problems = problems_of(tmp_path, put("virtual_servers", "vs1", value=["10.0.1.1"]))
    assert [format_path(p.path) for p in problems] == ["virtual_servers.vs1"], described(problems)


def test_broken_vs_does_not_cascade_into_topology(tmp_path: Path) -> None:
    """A topology record naming a VS that is defined but invalid does not add 'no virtual server named'."""
    mutation = combined(
        put("virtual_servers", "vs1", "address", value="bad"),
        append("topology", value={"ldns": "any", "server": "virtual_server vs1", "score": 1}),
    )
    _, problems = problems_of(tmp_path, mutation)
    assert [format_path(p.path) for p in problems] == ["virtual_servers.vs1.address"], described(problems)


def test_broken_pool_does_not_cascade_into_wideip(tmp_path: Path) -> None:
    """A pool with a bad setting is reported once; wide IPs using it add neither 'no pool' nor 'type A but'."""
    mutation = combined(put("pools", "p", "ttl", value=-5), put(*WIP, "last_resort_pool", value="p"))
    _, problems = problems_of(tmp_path, mutation)
    assert [format_path(p.path) for p in problems] == ["pools.p.ttl"], described(problems)


def test_pool_that_is_not_a_mapping_does_not_cascade_into_wideip(tmp_path: Path) -> None:
    """A pool written as a list is reported once; the wide IP naming it adds nothing."""
    _, problems = problems_of(tmp_path, put("pools", "p", value=["vs1"]))
    assert [format_path(p.path) for p in problems] == ["pools.p"], described(problems)


def test_broken_ipv6_members_do_not_cascade_into_aaaa_check(tmp_path: Path) -> None:
    """When the IPv6 VSes are themselves invalid, the wide IP does not add 'type AAAA but no ... IPv6'."""
    mutation = combined(
        put("virtual_servers", "vs1-6", "address", value="x"),
        put("virtual_servers", "vs2-6", "address", value="y"),
    )
    _, problems = problems_of(tmp_path, mutation)
    assert [format_path(p.path) for p in problems] == [
        "virtual_servers.vs1-6.address",
        "virtual_servers.vs2-6.address",
    ], described(problems)


def test_broken_monitor_does_not_cascade_into_vs(tmp_path: Path) -> None:
    """A monitor with a bad setting is reported once; the VS using it does not add 'no monitor named'."""
    mutation = combined(
        put("monitors", value={"web": {"type": "http", "interval": -1}}),
        put("virtual_servers", "vs1", "monitor", value="web"),
    )
    _, problems = problems_of(tmp_path, mutation)
    assert [format_path(p.path) for p in problems] == ["monitors.web.interval"], described(problems)


def test_broken_zone_does_not_cascade_into_wideips(tmp_path: Path) -> None:
    """A zone whose origin is invalid is reported once; its wide IPs are not 'outside every served zone'."""
    _, problems = problems_of(tmp_path, put("zones", 0, "origin", value="a..b"))
    assert [format_path(p.path) for p in problems] == ["zones[0].origin"], described(problems)


def test_region_cycle_reported_once_per_include(tmp_path: Path) -> None:
    """A cycle a -> b -> a is reported once, at an include entry on the cycle, however many regions reach it."""

    def cycle(config: dict[str, Any]) -> None:
        config["regions"] = {
            "a": [{"region": "b"}],
            "b": [{"region": "a"}],
            "d": [{"region": "a"}],
        }
        config["topology"] = [{"ldns": "any", "server": "datacenter DC1", "score": 1}]

    _, problems = problems_of(tmp_path, cycle)
    paths = [format_path(p.path) for p in problems]
    assert all("cycle" in p.message for p in problems), described(problems)
    assert len(paths) == 1, described(problems)
    assert paths[0] in {"regions.a[0].region", "regions.b[0].region"}, described(problems)
    assert "a -> b -> a" in problems[0].message or "b -> a -> b" in problems[0].message
