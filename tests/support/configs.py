"""Build small, valid configs for tests, as YAML files on disk (the way users write them)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

ZONE = """\
$TTL 3600
@        IN SOA ns1.example.test. hostmaster.example.test. 1 3600 600 86400 300
         IN NS  ns1
         IN NS  ns2.other.test.
         IN MX  10 mail
ns1      IN A   192.0.2.1
mail     IN A   192.0.2.25
www      IN TXT "static text"
www      IN A   192.0.2.80
alias    IN CNAME www
chain    IN CNAME alias
outside  IN CNAME www.elsewhere.test.
loop1    IN CNAME loop2
loop2    IN CNAME loop1
*.wild   IN A   192.0.2.99
a.b.c    IN A   192.0.2.3
sub      IN NS  ns.sub
ns.sub   IN A   192.0.2.53
_sip._udp IN SRV 0 5 5060 www
rev      IN PTR www
"""


#: the special-purpose networks (RFC 6890) the tests' LDNSes live in, which a prober leaves
#: alone unless its config opens them (prober.allow)
TEST_NETWORKS = [
    "127.0.0.0/8",
    "10.0.0.0/8",
    "192.0.2.0/24",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "2001:db8::/32",
]


#: the resolvers whose client subnet option the tests' nodes use (dns_server.ecs_trusted):
#: the tests ask from loopback
ECS_TRUSTED = ["127.0.0.0/8", "::1/128"]


def base(address: str = "127.0.0.1", port: int = 5353) -> dict[str, Any]:
    """A one-node config: zone example.test with wide IPs over three data centers."""
    return {
        "sync_group": {
            "name": "test",
            "members": [
                {
                    "name": "n1",
                    "datacenter": "DC1",
                    "peer": f"{address}:4353",
                    "dns": [f"{address}:{port}"],
                    "api": f"{address}:8053",
                },
            ],
        },
        "datacenters": ["DC1", "DC2", "DC3"],
        "virtual_servers": {
            "vs1": {"address": "10.0.1.1", "datacenter": "DC1"},
            "vs2": {"address": "10.0.2.1", "datacenter": "DC2"},
            "vs3": {"address": "10.0.3.1", "datacenter": "DC3"},
            "vs1-6": {"address": "2001:db8:1::1", "datacenter": "DC1"},
            "vs2-6": {"address": "2001:db8:2::1", "datacenter": "DC2"},
        },
        "regions": {
            "r1": ["198.51.100.0/24", "127.0.1.0/24", "2001:db8:aaaa::/48"],
            "r2": ["203.0.113.0/24", "127.0.2.0/24"],
        },
        "topology": [
            {"ldns": "region r1", "server": "datacenter DC1", "score": 100},
            {"ldns": "region r2", "server": "datacenter DC2", "score": 100},
            {"ldns": "any", "server": "datacenter DC3", "score": 1},
        ],
        "pools": {
            "p": {"members": ["vs1", "vs2", "vs3"], "load_balancing": {"preferred": "topology"}, "ttl": 30},
            "p6": {"members": ["vs1-6", "vs2-6"], "load_balancing": {"preferred": "topology"}, "ttl": 60},
        },
        "wideips": {
            "gslb.example.test": {"type": ["A", "AAAA"], "pools": ["p", "p6"], "pool_lb": "global_availability"},
        },
        "zones": [{"origin": "example.test", "file": "example.test.zone"}],
        "prober": {"allow": list(TEST_NETWORKS)},
        "dns_server": {"ecs_trusted": list(ECS_TRUSTED)},
    }


def add_member(config: dict[str, Any], name: str, datacenter: str, address: str) -> dict[str, Any]:
    """Add sync group member *name* on *address* (the usual ports) to *config*; returns it."""
    config["sync_group"]["members"].append(
        {
            "name": name,
            "datacenter": datacenter,
            "peer": f"{address}:4353",
            "dns": [f"{address}:5353"],
            "api": f"{address}:8053",
        }
    )
    return config


def write(directory: Path, config: dict[str, Any], zone: str = ZONE, name: str = "cluster.yaml") -> Path:
    """Write *config* (and the zone file it names, when missing) into *directory*."""
    directory.mkdir(parents=True, exist_ok=True)
    zone_file = directory / "example.test.zone"
    if not zone_file.exists():
        zone_file.write_text(zone)
    path = directory / name
    path.write_text(yaml.safe_dump(copy.deepcopy(config), sort_keys=False))
    return path


def write_secret(path: Path, text: str) -> Path:
    """A secret file (api.token_file, a TSIG secret_file) as the config reader takes one:
    readable by its owner only (`runtime.files.SECRET`)."""
    path.write_text(text)
    path.chmod(0o600)
    return path
