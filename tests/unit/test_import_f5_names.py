"""F5 names, zones and regions as F5 has them, shown by what the imported config answers.

Each corpus file (tests/data/f5/corpus/names-*.conf, regions-*.conf, written from F5's tmsh
reference) is imported by the real CLI; the exit code says whether it behaves as on F5, and
the decision engine answers the questions F5 would answer in a known way: the DNS name a
wide IP answers (the last component of its path, in any partition: AS3's
/Tenant/App/name), the zone inferred for an apex wide IP (never a top-level domain), who
gets what from regions with a ``not`` member (mapped only where F5's readings agree, never
widened), nested regions named before they are defined, and data centers a fragment names
without defining them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.dnsdata import names
from gtmcluster.importers import assemble, f5import
from tests.support.f5asker import Asker, gtmcluster

CORPUS = Path(__file__).parent.parent / "data" / "f5" / "corpus"
PRIVATE, PUBLIC = "10.10.0.80", "203.0.113.80"
#: resolvers inside the private networks, and outside them
INSIDE = ["10.0.0.53", "10.1.2.3", "10.255.255.254"]
OUTSIDE = ["8.8.8.8", "1.1.1.1", "203.0.113.53", "11.0.0.1", "9.255.255.255"]


def run_import(tmp_path: Path, *files: str | Path, zones: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``gtmcluster import f5 FILES -o cluster.yaml`` (zone files beside it), the real CLI."""
    args = ["import", "f5", *map(str, files), "-o", "cluster.yaml"]
    for zone in zones:
        args += ["--zone", zone]
    done = gtmcluster(*args, cwd=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def imported(tmp_path: Path, name: str, exit_code: int = 0) -> tuple[Config, str]:
    """Import corpus file *name*: it exits *exit_code*, and what it wrote passes `gtmcluster
    check` (even where findings made it exit 1: the rest is imported); the config and stderr."""
    done = run_import(tmp_path, CORPUS / name)
    assert done.returncode == exit_code, done.stderr
    checked = gtmcluster("check", "--config", "cluster.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    return load(tmp_path / "cluster.yaml"), done.stderr


def lines(stderr: str, level: str) -> list[str]:
    """The findings of *level* (LOST, CHANGED, not mapped), as ``file:line: what: why``."""
    return [line for line in stderr.splitlines() if f": {level}: " in line]


def every_time(asker: Asker, name: str, resolvers: list[str], times: int = 20) -> set[str]:
    """Every address the wide IP *name* answers to these resolvers, asked *times* each."""
    return {a for ldns in resolvers for _ in range(times) for a in asker.answer(name, ldns)}


# -- 1. partition paths in DNS names ---------------------------------------------------------


def test_as3_wide_ip_answers_the_last_component_of_its_path(tmp_path: Path) -> None:
    """/Shop/Storefront/www.example.com answers www.example.com, as on F5; its aliases
    (bare, or with a path) too; pools keep their partition in our name."""
    config, stderr = imported(tmp_path, "names-as3.conf")
    assert sorted(w.name for w in config.wideips.values()) == ["api.example.org", "www.example.com"]
    asker = Asker(config)
    assert asker.answer("www.example.com", "8.8.8.8") == ["198.51.100.10"]
    for alias in ("shop.example.com", "store.example.com"):  # (the responder's lookup by any name)
        found = config.wideip_names.find(names.key(names.from_text(alias)))
        assert found is not None and found.name == "www.example.com"
    assert asker.answer("api.example.org", "8.8.8.8") == ["203.0.113.20"]
    assert asker.ask("www.example.com", "8.8.8.8").pool == "Shop.Storefront.web_pool"
    assert lines(stderr, "LOST") == lines(stderr, "CHANGED") == []


def test_one_dns_name_in_two_partitions_is_lost_with_both_places(tmp_path: Path) -> None:
    """F5 refuses a second wide IP of one DNS name in another partition: ours keeps the
    first, and the second is LOST naming both places (exit 1)."""
    config, stderr = imported(tmp_path, "names-partition-clash.conf", exit_code=1)
    assert [w.name for w in config.wideips.values()] == ["www.example.com"]
    assert Asker(config).answer("www.example.com", "8.8.8.8") == ["192.0.2.10"]  # /Blue/App's
    [lost] = lines(stderr, "LOST")
    assert lost.startswith(f"{CORPUS / 'names-partition-clash.conf'}:30: LOST: gtm wideip a /Green/App/www.example.com")
    assert "names-partition-clash.conf:25" in lost and "/Blue/App/www.example.com" in lost


# -- 2. no single-label zone inferred --------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "zone"),
    [
        ("www.example.com", "example.com"),
        ("example.com", "example.com"),  # an apex: never com
        ("example.io", "example.io"),
        ("gslb.example.test", "example.test"),
        ("example.test", "example.test"),
        ("a.b.example.com", "b.example.com"),
        ("*.example.com", "example.com"),
        ("example.co.uk", "example.co.uk"),  # never co.uk
        ("www.example.co.uk", "example.co.uk"),
        ("example.com.au", "example.com.au"),
        ("shop.example.ne.jp", "example.ne.jp"),
        ("www.example.co", "example.co"),  # (.co is a top-level domain)
        ("www.wide.ip", "wide.ip"),
        ("*.com", None),  # no zone of ours can hold it: --zone decides
        ("*.co.uk", None),
    ],
)
def test_inferred_zone_is_never_a_public_suffix(name: str, zone: str | None) -> None:
    assert assemble.inferred_zone(name) == zone


def test_apex_wide_ip_gets_its_own_zone(tmp_path: Path) -> None:
    """example.com and example.co.uk, wide IPs at their apex, make zones of their own
    names, and answer there (www.example.com joins example.com's zone)."""
    config, stderr = imported(tmp_path, "names-apex.conf")
    assert sorted(names.to_text(z.origin) for z in config.zones) == ["example.co.uk.", "example.com."]
    asker = Asker(config)
    assert asker.answer("example.com", "8.8.8.8") == ["192.0.2.80"]
    assert asker.answer("www.example.com", "8.8.8.8") == ["192.0.2.80"]
    assert asker.answer("example.co.uk", "8.8.8.8") == ["192.0.2.81"]
    assert lines(stderr, "LOST") == []


def test_wildcard_below_a_public_suffix_needs_a_zone(tmp_path: Path) -> None:
    """*.com cannot be given a zone of its own: LOST, saying to give --zone; with --zone com
    (the operator's choice) it is imported."""
    (tmp_path / "wild.conf").write_text((CORPUS / "names-apex.conf").read_text().replace("example.co.uk", "*.com"))
    done = run_import(tmp_path, "wild.conf")
    assert done.returncode == 1
    [lost] = lines(done.stderr, "LOST")
    assert "wideip *.com: no zone is inferred at com, a public suffix: give --zone ORIGIN" in lost
    again = run_import(tmp_path, "wild.conf", zones=("com",))
    assert again.returncode == 0, again.stderr


# -- 6. 'not' region members -----------------------------------------------------------------


def test_split_dns_recipe_imports_exactly(tmp_path: Path) -> None:
    """F5's split-DNS recipe (region internal, records 'region internal' and 'not region
    internal'): every private resolver gets the private address, everyone else the public
    one, every time."""
    config, stderr = imported(tmp_path, "regions-split-dns.conf")
    asker = Asker(config)
    private_resolvers = [*INSIDE, "172.16.0.1", "172.31.255.1", "192.168.1.1"]
    assert every_time(asker, "app.example.com", private_resolvers) == {PRIVATE}
    assert every_time(asker, "app.example.com", [*OUTSIDE, "172.32.0.1", "192.169.0.1"]) == {PUBLIC}
    assert lines(stderr, "LOST") == lines(stderr, "CHANGED") == []


def test_region_of_one_not_member_is_its_opposite(tmp_path: Path) -> None:
    """Region outside = 'not subnet 10.0.0.0/8' (F5's readings agree): ours holds 10/8 and
    the records say the opposite: 'region outside' becomes 'not region outside-excluded',
    'not region outside' becomes 'region outside-excluded'. Exact: exit 0."""
    config, _ = imported(tmp_path, "regions-not-member.conf")
    asker = Asker(config)
    assert every_time(asker, "app.example.com", INSIDE) == {PRIVATE}
    assert every_time(asker, "app.example.com", OUTSIDE) == {PUBLIC}
    written = (tmp_path / "cluster.yaml").read_text()
    assert "outside-excluded: [10.0.0.0/8]" in written
    assert "{ldns: not region outside-excluded, server: pool public_pool, score: 100}" in written


def test_not_members_the_readings_disagree_on_are_lost_never_widened(tmp_path: Path) -> None:
    """'subnet 0/0 + not subnet 10/8', two 'not' members, a 'not' region inside another:
    each region LOST with every record that uses it (exit 1). A 10.x resolver never gets the
    public address (it did half the time when 'not 10/8' was dropped, widening to 0/0)."""
    config, stderr = imported(tmp_path, "regions-not-mixed.conf", exit_code=1)
    assert every_time(Asker(config), "app.example.com", INSIDE) == {PRIVATE}
    lost = lines(stderr, "LOST")
    for region, why in (
        ("public", "it mixes 'not' members with others: our regions cannot exclude"),
        ("neither", "it has several 'not' members: our regions cannot exclude"),
        ("offices", "it names region /Common/outside, a 'not' member: our regions cannot exclude"),
    ):
        assert any(f"LOST: region /Common/{region}: {why}" in line for line in lost), (region, lost)
        assert any(f"ldns: region /Common/{region} server:" in line for line in lost), (region, lost)
    assert "write the exclusion as topology records with 'not region'" in stderr
    assert [str(t.ldns) for t in config.topology.records] == ["region internal"]


def test_negated_region_on_the_server_side_is_its_opposite(tmp_path: Path) -> None:
    """A region of one 'not datacenter' member, as a record's server: every data center
    but that one (ours: 'not datacenter'), so the resolvers it names avoid it."""
    text = (CORPUS / "names-no-datacenter.conf").read_text()
    text += (
        "gtm region /Common/not-a {\n    region-members {\n        not datacenter /Common/site-a { }\n    }\n}\n"
        "gtm topology ldns: subnet 10.0.0.0/8 server: region /Common/not-a {\n    score 100\n}\n"
    )
    text = text.replace("load-balancing-mode global-availability", "load-balancing-mode topology")
    (tmp_path / "fragment.conf").write_text(text)
    assert run_import(tmp_path, "fragment.conf").returncode == 0
    asker = Asker(load(tmp_path / "cluster.yaml"))
    assert every_time(asker, "www.fragment.example.com", INSIDE) == {"198.51.100.1"}


# -- 9. regions named before they are defined ------------------------------------------------


def test_nested_regions_defined_later_import(tmp_path: Path) -> None:
    """all-offices names branch and west, branch names east: all defined after it (tmsh's
    alphabetical order). Resolved in a second pass: exit 0, and each office's resolvers go
    to the private pool, the rest to the public one."""
    config, _ = imported(tmp_path, "regions-nested.conf")
    asker = Asker(config)
    offices = ["10.1.0.1", "10.1.255.254", "10.2.3.4", "192.168.7.7"]
    assert every_time(asker, "app.example.com", offices) == {PRIVATE}
    assert every_time(asker, "app.example.com", ["10.3.0.1", *OUTSIDE]) == {PUBLIC}


def test_region_cycle_is_lost_naming_it(tmp_path: Path) -> None:
    """a names b and b names a: both LOST naming the cycle, with the record that uses a;
    c beside them imports and answers."""
    config, stderr = imported(tmp_path, "regions-cycle.conf", exit_code=1)
    cycle = "nested regions form a cycle (/Common/a -> /Common/b -> /Common/a)"
    lost = lines(stderr, "LOST")
    assert [line.split(": LOST: ")[1] for line in lost] == [
        f"region /Common/a: {cycle}: not imported",
        f"region /Common/b: {cycle}: not imported",
        f"topology record gtm topology ldns: region /Common/a server: pool /Common/public_pool: "
        f"region /Common/a was not imported: {cycle}",
    ]
    assert [str(t.ldns) for t in config.topology.records] == ["region c"]
    assert every_time(Asker(config), "app.example.com", ["192.168.0.1", "192.168.255.1"]) == {PRIVATE}


def test_a_long_chain_of_nested_regions_resolves(tmp_path: Path) -> None:
    """3,000 regions, each naming the next (defined after it): no recursion limit, and a
    resolver in the last one's subnet is in the first."""
    count = 3000
    regions = [
        f"gtm region /Common/r{i:04} {{\n    region-members {{\n        region /Common/r{i + 1:04} {{ }}\n    }}\n}}"
        for i in range(count - 1)
    ]
    regions.append(
        f"gtm region /Common/r{count - 1:04} {{\n    region-members {{\n        subnet 10.9.0.0/16 {{ }}\n    }}\n}}"
    )
    topology = "gtm topology ldns: region /Common/r0000 server: pool /Common/private_pool {\n    score 100\n}\n"
    text = (CORPUS / "regions-split-dns.conf").read_text().split("gtm region")[0] + "\n".join(regions) + "\n" + topology
    text += "gtm wideip a /Common/app.example.com {\n    pool-lb-mode topology\n    pools {\n"
    text += "        /Common/public_pool {\n            order 0\n        }\n"
    text += "        /Common/private_pool {\n            order 1\n        }\n    }\n}\n"
    (tmp_path / "chain.conf").write_text(text)
    done = run_import(tmp_path, "chain.conf")
    assert done.returncode == 0, done.stderr[-2000:]
    asker = Asker(load(tmp_path / "cluster.yaml"))
    assert every_time(asker, "app.example.com", ["10.9.0.1", "10.9.255.254"]) == {PRIVATE}


# -- 10. data centers named but not defined --------------------------------------------------


def test_data_center_named_but_not_defined_is_created_once(tmp_path: Path) -> None:
    """Servers name site-a and site-b, which the fragment does not define: both are
    created, one finding each (not one per server or virtual server), nothing lost; the
    pool's global availability answers as on F5."""
    config, stderr = imported(tmp_path, "names-no-datacenter.conf")
    assert sorted(config.datacenters) == ["site-a", "site-b"]
    found = lines(stderr, "not mapped")
    assert [line.split(": not mapped: ")[1].split(":")[0] for line in found] == [
        "datacenter /Common/site-a",
        "datacenter /Common/site-b",
    ]
    assert "created, enabled, from the servers that name it" in found[0]
    asker = Asker(config)
    assert asker.answer("www.fragment.example.com", "8.8.8.8") == ["192.0.2.1"]
    asker.availability.down = {"lb-a1.web", "lb-a2.web"}
    assert asker.answer("www.fragment.example.com", "8.8.8.8") == ["198.51.100.1"]
    assert {v.datacenter for v in config.virtual_servers.values()} == {"site-a", "site-b"}


# -- other forward references (a guard: these resolved before too) --------------------------


def test_forward_references_across_files(tmp_path: Path) -> None:
    """The first file names what the second defines (the servers, their data center, a
    monitor's parent), and a pool defined after the wide IP that names it, a last-resort
    pool, a depends-on: all resolved."""
    (tmp_path / "a.conf").write_text(
        "gtm monitor http /Common/child {\n    defaults-from /Common/parent\n    interval 10\n}\n"
        "gtm pool a /Common/main {\n    monitor /Common/child\n    members {\n"
        "        /Common/lb2:/Common/web {\n            member-order 0\n        }\n    }\n}\n"
        "gtm server /Common/lb1 {\n    datacenter /Common/dc1\n    virtual-servers {\n"
        "        /Common/front {\n            destination 192.0.2.9:80\n"
        "            depends-on {\n                /Common/lb2:/Common/web { }\n            }\n        }\n    }\n}\n"
        "gtm wideip a /Common/www.example.com {\n    last-resort-pool a /Common/spare\n    pools {\n"
        "        /Common/main {\n            order 0\n        }\n    }\n}\n"
        "gtm pool a /Common/spare {\n    members {\n        /Common/lb1:/Common/front { }\n    }\n}\n"
    )
    (tmp_path / "b.conf").write_text(
        "gtm datacenter /Common/dc1 { }\n"
        'gtm monitor http /Common/parent {\n    send "GET /health HTTP/1.0\\r\\n\\r\\n"\n}\n'
        "gtm server /Common/lb2 {\n    datacenter /Common/dc1\n    virtual-servers {\n"
        "        /Common/web {\n            destination 192.0.2.1:80\n        }\n    }\n}\n"
    )
    done = run_import(tmp_path, "a.conf", "b.conf")
    assert lines(done.stderr, "LOST") == [], done.stderr
    config = load(tmp_path / "cluster.yaml")
    assert config.virtual_servers["lb1.front"].depends_on == ("lb2.web",)
    asker = Asker(config)
    assert asker.answer("www.example.com", "8.8.8.8") == ["192.0.2.1"]
    asker.availability.down = {"lb2.web"}
    assert asker.answer("www.example.com", "8.8.8.8") == ["192.0.2.9"]  # the last-resort pool
    written = (tmp_path / "cluster.yaml").read_text()
    assert "path: /health" in written  # (the child monitor took its parent's send)


def test_imported_zone_of_an_apex_wide_ip_loads_with_its_records() -> None:
    """The zone inferred for an apex wide IP is served with its SOA and NS, and the wide IP
    at its apex: the import's own load check passes (no LOST), for either form of --zone."""
    result = f5import.run([str(CORPUS / "names-apex.conf")])
    assert [f for f in result.imported.findings if f.essential] == []
    assert sorted(result.zone_files) == ["zones/example.co.uk.zone", "zones/example.com.zone"]
