"""The F5 mappers: names, addresses, methods, monitors, tmsh and 3-DNS objects, findings."""

from __future__ import annotations

import ipaddress
import os
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gtmcluster.cli import main as cli
from gtmcluster.cli.importcmd import render_findings
from gtmcluster.config.lbmethods import MEMBER_METHODS
from gtmcluster.importers import f5import, f5methods, f5monitors, f5names
from gtmcluster.importers.f5names import NAME_RE, Namespace
from gtmcluster.importers.f5parse import parse
from gtmcluster.importers.model import Imported

DATA = Path(__file__).parent.parent / "data" / "f5"


def imported(tmp_path: Path, text: str, name: str = "in.conf", **kw: object) -> f5import.Result:
    path = tmp_path / name
    path.write_text(text)
    return f5import.run([str(path)], **kw)  # type: ignore[arg-type]


def findings(result: f5import.Result) -> list[tuple[int, bool, str]]:
    return [(int(f.where.rsplit(":", 1)[1]), f.essential, f.what) for f in result.imported.findings]


# -- names and addresses ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("f5", "ours"),
    [
        ("/Common/web_pool", "web_pool"),
        ("/Prod/web", "Prod.web"),
        ("/Common/bigip1:/Common/vs_http", "bigip1.vs_http"),
        ("pool with spaces", "pool_with_spaces"),
        ("_hidden", "x_hidden"),
        ("a" * 70, "a" * 54 + "-"),
    ],
)
def test_sanitise(f5: str, ours: str) -> None:
    assert f5names.sanitise(f5).startswith(ours)
    assert NAME_RE.match(f5names.sanitise(f5))


@given(st.text(min_size=1, max_size=100))
def test_any_f5_name_becomes_a_valid_unique_name(text: str) -> None:
    ns = Namespace("pool")
    first = ns.name(text)
    second = ns.name(text + "\x00other", "aaaa")
    assert NAME_RE.match(first) and NAME_RE.match(second)
    assert first != second
    assert ns.name(text) == first  # kept


def test_collisions_get_the_qualifier_then_numbers() -> None:
    ns = Namespace("pool")
    assert [ns.name("/Common/web", "a"), ns.name("/Common/web", "aaaa"), ns.name("web!", "a")] == [
        "web",
        "web-aaaa",
        "web_",
    ]
    assert ns.name("web?", "a") == "web_-a"


@pytest.mark.parametrize(
    ("text", "address", "port"),
    [
        ("10.1.1.1:80", "10.1.1.1", 80),
        ("10.1.1.1:http", "10.1.1.1", 80),
        ("10.1.1.1%2:443", "10.1.1.1", 443),
        ("2001:db8::10.80", "2001:db8::10", 80),
        ("2001:db8::10.https", "2001:db8::10", 443),
        ("10.1.1.1:any", "10.1.1.1", None),
        ("10.1.1.1", "10.1.1.1", None),
    ],
)
def test_address_port(text: str, address: str, port: int | None) -> None:
    assert f5names.address_port(text) == (ipaddress.ip_address(address), port)


def test_address_port_rejects_names() -> None:
    assert f5names.address_port("www.example.com:80") is None


# -- methods ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("f5", "ours"),
    [
        ("round-robin", "round_robin"),
        ("rr", "round_robin"),
        ("ratio", "ratio"),
        ("global-availability", "global_availability"),
        ("ga", "global_availability"),
        ("topology", "topology"),
        ("static-persistence", "static_persist"),
        ("round-trip-time", "rtt"),
        ("lowest-round-trip-time", "rtt"),
        ("rtt", "rtt"),
        ("completion-rate", "completion_rate"),
        ("hops", "hops"),
        ("fewest-hops", "hops"),
        ("drop-packet", "drop_packet"),
        ("fallback-ip", "fallback_ip"),
        ("return-to-dns", "return_to_dns"),
        ("return_to_dns", "return_to_dns"),
        ("none", "none"),
        ("null", "none"),
    ],
)
def test_member_methods(f5: str, ours: str) -> None:
    assert f5methods.member_method(f5) == (ours, "")


def test_every_mapped_method_is_one_of_ours() -> None:
    assert set(f5methods.METHODS.values()) <= set(MEMBER_METHODS)


@pytest.mark.parametrize(
    "f5",
    [
        "quality-of-service",
        "qos",
        "least-connections",
        "packet-rate",
        "kilobytes-per-second",
        "virtual-server-capacity",
    ],
)
def test_methods_whose_namesake_differs_are_not_mapped(f5: str) -> None:
    """F5 takes these figures from the BIG-IPs over iQuery (and QoS has a link term):
    ours would never have them after an import, so the mode is not mapped, with why."""
    ours, why = f5methods.member_method(f5)
    assert ours is None and "iQuery" in why and "load source" in why
    assert f5methods.pool_method(f5) == (None, why)


def test_methods_without_equivalent_say_why() -> None:
    assert f5methods.member_method("virtual-server-score") == (None, f5methods.NO_EQUIVALENT["virtual-server-score"])
    assert f5methods.member_method("bogus")[0] is None
    assert f5methods.pool_method("return-to-dns")[0] is None  # not a way of choosing pools here
    assert f5methods.pool_method("ga") == ("global_availability", "")


# -- monitors --------------------------------------------------------------------------------


def test_http_monitor_send_recv_interval_timeout() -> None:
    values = {
        "interval": "10",
        "timeout": "31",
        "send": "HEAD /status HTTP/1.1\\r\\nHost: a.example\\r\\n\\r\\n",
        "recv": "200 OK",
    }
    mapped = f5monitors.to_ours("http", values)
    assert mapped.monitor == {
        "type": "http",
        "interval": 10,
        "timeout": 5,
        "up_after": 1,
        "down_after": 3,
        "method": "HEAD",
        "path": "/status",
        "host": "a.example",
        "expect_status": [200],
    }
    assert (mapped.notes, mapped.changes) == ([], [])


def test_monitor_recv_pattern_is_a_body_regex_with_any_status() -> None:
    """A body pattern is searched in the body, whatever the status (as F5 did)."""
    mapped = f5monitors.to_ours("https", {"recv": "up|ok"})
    ours = mapped.monitor
    assert ours is not None
    assert ours["expect_body_regex"] == "up|ok" and ours["verify_tls"] is False
    assert ours["expect_status"] == ["1xx", "2xx", "3xx", "4xx", "5xx"]
    assert ours["down_after"] == 4  # F5 defaults: 120 / 30
    assert (mapped.notes, mapped.changes) == ([], [])


def test_tmsh_monitor_inherits_defaults_from_another(tmp_path: Path) -> None:
    text = (
        "gtm monitor tcp /Common/base {\n    interval 7\n    timeout 22\n}\n"
        "gtm monitor tcp /Common/child {\n    defaults-from /Common/base\n    timeout 50\n}\n"
    )
    mons = imported(tmp_path, text).imported.monitors
    assert mons["child"].value["interval"] == 7 and mons["child"].value["down_after"] == 7


# -- tmsh objects ----------------------------------------------------------------------------


def test_tmsh_sample_maps_every_section() -> None:
    result = f5import.run([str(DATA / "bigip_gtm.conf")])
    imp = result.imported
    assert list(imp.datacenters) == ["CNC", "TEL", "CMCC"]
    assert imp.virtual_servers["bigip_tel.vs_www_tel"].value == {
        "address": "219.17.66.100",
        "port": 80,
        "datacenter": "TEL",
        "monitor": "web_health",
    }
    assert imp.virtual_servers["bigip_cnc.vs_api_cnc"].value["monitor"] == "tcp_quick"  # the pool's monitor
    assert imp.pools["web_pool"].value["load_balancing"] == {
        "preferred": "rtt",
        "alternate": "topology",
        "fallback": "global_availability",
    }
    assert imp.pools["api_pool"].value["members"][0] == {"virtual_server": "bigip_cnc.vs_api_cnc", "ratio": 3}
    assert imp.pools["api_pool"].value["fallback_ip"] == "192.0.2.53"
    assert imp.pools["backup_pool"].value["load_balancing"]["fallback"] == "return_to_dns"  # tmsh default
    assert imp.wideips["www.wip.example.com"].value["type"] == ["A", "AAAA"]
    assert imp.wideips["api.wip.example.com"].value["persistence"] == {
        "ttl": 1800,
        "ipv4_prefix": 24,
        "ipv6_prefix": 128,
    }
    assert imp.topology[0].value == {"ldns": "region cnc_nets", "server": "datacenter CNC", "score": 100}
    assert imp.regions["tel_nets"].value == ["219.172.0.0/16", "61.136.0.0/16"]
    assert imp.wideips["www.wip.example.com"].where.endswith("bigip_gtm.conf:176")
    assert not imp.failed


def test_comments_name_the_f5_source_line() -> None:
    text = f5import.run([str(DATA / "bigip_gtm.conf")]).text
    lines = text.splitlines()
    at = lines.index("  api_pool:")
    assert lines[at - 1].endswith("bigip_gtm.conf:127: gtm pool a /Common/api_pool")


def test_topology_records_follow_their_order_not_the_file(tmp_path: Path) -> None:
    text = (
        "gtm datacenter A { }\ngtm datacenter B { }\n"
        "gtm topology ldns: subnet 10.0.0.0/8 server: datacenter B {\n    order 2\n    score 5\n}\n"
        "gtm topology ldns: subnet 10.0.0.0/8 server: datacenter A {\n    order 1\n    score 9\n}\n"
    )
    imp = imported(tmp_path, text).imported
    assert [(e.value["server"], e.value["score"], e.where.rsplit(":", 1)[1]) for e in imp.topology] == [
        ("datacenter A", 9, "7"),
        ("datacenter B", 5, "3"),
    ]


def test_server_side_region_of_data_centers_becomes_one_record_each(tmp_path: Path) -> None:
    text = (
        "gtm datacenter A { }\ngtm datacenter B { }\n"
        "gtm region /Common/east {\n    region-members {\n        datacenter /Common/A { }\n"
        "        datacenter /Common/B { }\n    }\n}\n"
        "gtm region /Common/nets {\n    region-members {\n        subnet 10.0.0.0/8 { }\n"
        "        region /Common/east { }\n    }\n}\n"
        "gtm topology ldns: region /Common/nets server: region /Common/east {\n    score 50\n}\n"
    )
    imp = imported(tmp_path, text).imported
    assert list(imp.regions) == ["nets"]
    assert imp.regions["nets"].value == ["10.0.0.0/8"]
    assert [e.value for e in imp.topology] == [
        {"ldns": "region nets", "server": "datacenter A", "score": 50},
        {"ldns": "region nets", "server": "datacenter B", "score": 50},
    ]


def test_country_selectors_need_a_geoip_database(tmp_path: Path) -> None:
    text = "gtm datacenter A { }\ngtm topology ldns: country CN server: datacenter A {\n    score 1\n}\n"
    without = imported(tmp_path, text)
    assert findings(without) == [(2, True, "topology record gtm topology ldns: country CN server: datacenter A")]
    with_db = imported(tmp_path, text, geoip_country="GeoLite2-Country.mmdb")
    assert [e.value["ldns"] for e in with_db.imported.topology] == ["country CN"]
    assert "geoip:\n  country: GeoLite2-Country.mmdb" in with_db.text


# -- 3-DNS -----------------------------------------------------------------------------------


# -- findings and the exit code --------------------------------------------------------------


def test_unmapped_items_are_listed_with_their_lines() -> None:
    result = f5import.run([str(DATA / "unmapped_gtm.conf")])
    assert findings(result) == [
        (13, True, "pool a /Common/scored: load-balancing-mode virtual-server-score"),
        (19, True, "pool a /Common/plain: alternate-mode cpu"),
        (39, True, "topology record gtm topology ldns: isp /Common/ChinaTelecom server: datacenter /Common/DC1"),
        (31, True, "wideip a /Common/ghost.example.com pool /Common/missing"),
        (29, True, "wideip a /Common/ghost.example.com"),
        (34, True, "wideip w?ld.example.com"),
    ]
    assert result.imported.pools["scored"].value["load_balancing"]["preferred"] == "none"
    assert list(result.imported.wideips) == ["good.example.com"]


def test_exit_code_and_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out" / "cluster.yaml"
    assert cli.main(["import", "f5", str(DATA / "unmapped_gtm.conf"), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{DATA / 'unmapped_gtm.conf'}:13: LOST: pool a /Common/scored" in err
    assert f"{DATA / 'unmapped_gtm.conf'}:19: CHANGED: pool a /Common/plain: alternate-mode cpu" in err
    assert err.rstrip().endswith("6 findings, 5 LOST, 1 CHANGED (exit 1: the result does not behave as on F5)")
    assert out.exists() and (out.parent / "zones" / "example.com.zone").exists()
    # only cosmetic findings: exit 0
    assert cli.main(["import", "f5", str(DATA / "bigip_gtm.conf"), "-o", str(tmp_path / "ok.yaml")]) == 0
    err = capsys.readouterr().err
    assert "not mapped: gtm prober-pool /Common/cnc_probers" in err
    assert "LOST:" not in err and "CHANGED:" not in err


def test_a_malformed_tmsh_object_is_lost_with_file_and_line(capsys: pytest.CaptureFixture[str]) -> None:
    """tmsh is read object by object: one that does not parse is LOST (file:line, the
    problem), the others are imported, exit 1."""
    assert cli.main(["import", "f5", str(DATA / "broken_gtm.conf")]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines()[0] == (
        f"{DATA / 'broken_gtm.conf'}:8: LOST: gtm pool a /Common/web (line 3): a quoted string is never closed: "
        "not imported"
    )
    assert "  - DC1\n" in captured.out


def test_names_are_given_in_time_linear_in_their_number() -> None:
    """3,000 distinct names take well under a second (each name tried its first suffix, not
    all 100,000 made: an import of 1,000 wide IPs took 51 s that way)."""
    names = Namespace("pool")
    start = time.monotonic()
    given = {names.name(f"/Common/pool{n}") for n in range(3000)}
    assert len(given) == 3000 and time.monotonic() - start < 2.0


def test_an_input_over_the_size_limit_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file larger than `f5import.MAX_INPUT` (4,096 bytes here) is refused by its size
    before it is read: one line naming it, exit 1, nothing written."""
    monkeypatch.setattr(f5import, "MAX_INPUT", 4096, raising=False)
    big = DATA / "bigip_gtm.conf"  # (5,148 bytes)
    out = tmp_path / "cluster.yaml"
    assert cli.main(["import", "f5", str(big), "-o", str(out)]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"gtmcluster import f5: {big}: 5,148 bytes, over the limit of 4,096 for an input file\n"
    assert not out.exists()


def test_an_input_without_a_size_is_read_no_further_than_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FIFO (or a device) has no size to tell: it is read up to the limit and refused
    there, the writer cut off."""
    monkeypatch.setattr(f5import, "MAX_INPUT", 4096, raising=False)
    fifo = tmp_path / "endless.conf"
    os.mkfifo(fifo)
    written = []

    def writer() -> None:
        try:
            with open(fifo, "wb") as f:
                for _ in range(256):  # 256 KiB at most, then it ends by itself
                    f.write(b"# a comment line\n" * 1024)
                    written.append(1)
        except BrokenPipeError:
            pass

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    assert cli.main(["import", "f5", str(fifo)]) == 1
    thread.join(10)
    err = capsys.readouterr().err
    assert err == f"gtmcluster import f5: {fifo}: more than 4,096 bytes, over the limit of 4,096 for an input file\n"
    assert len(written) < 256


def test_unknown_input_and_bad_site_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = imported(tmp_path, "hello world\n")
    assert findings(result) == [(1, True, str(tmp_path / "in.conf"))]
    assert cli.main(["import", "f5", str(DATA / "wideip.conf"), "--site", "CNC"]) == 2
    assert "give DATACENTER=ADDRESS" in capsys.readouterr().err


def test_sites_make_the_members(tmp_path: Path) -> None:
    result = f5import.run([str(DATA / "wideip.conf")], sites={"CNC": "202.106.83.125", "TEL": "219.172.65.109"})
    assert [m.value() for m in result.members] == [
        {
            "name": "gtm-cnc",
            "datacenter": "CNC",
            "peer": "202.106.83.125:4353",
            "dns": ["202.106.83.125:53"],
            "api": "127.0.0.1:8053",
        },
        {
            "name": "gtm-tel",
            "datacenter": "TEL",
            "peer": "219.172.65.109:4353",
            "dns": ["219.172.65.109:53"],
            "api": "127.0.0.1:8053",
        },
    ]
    assert "PLACEHOLDERS" not in result.text


def test_findings_do_not_depend_on_imported_state() -> None:
    """Two imports of one file give the same findings (no state shared between runs)."""
    a = f5import.run([str(DATA / "unmapped_gtm.conf")]).imported.findings
    b = f5import.run([str(DATA / "unmapped_gtm.conf")]).imported.findings
    assert a == b and isinstance(Imported().findings, list)


def test_parse_tree_of_the_samples() -> None:
    """Every sample but the broken one parses."""
    for path in DATA.iterdir():
        if path.is_file() and path.name != "broken_gtm.conf":  # (corpus/: its own tests)
            assert parse(path.read_text(), str(path))


def test_a_server_of_the_wrong_family_is_not_a_member(tmp_path: Path) -> None:
    """An a pool holds IPv4 servers only: an IPv6 one is LOST (and the wide IP with it)."""
    text = (
        "gtm datacenter A { }\n"
        "gtm server s {\n    datacenter A\n    virtual-servers {\n        v6 {\n"
        "            destination 2001:db8::1.80\n        }\n    }\n}\n"
        "gtm pool a p {\n    members {\n        s:v6 { }\n    }\n}\n"
        "gtm wideip a www.example.com {\n    pools {\n        p { }\n    }\n}\n"
    )
    result = imported(tmp_path, text)
    assert findings(result)[0] == (12, True, "pool a p member s:v6")
    assert result.imported.findings[0].why == "an IPv6 server cannot answer a queries"
    assert result.imported.failed and not result.imported.wideips


def test_an_output_that_would_not_load_is_an_essential_finding() -> None:
    """The import loads what it wrote, as `gtmcluster check` would; each problem is LOST,
    with the key path and the output line (the header then counts it)."""
    imp = Imported()
    text = "sync_group: {name: x, members: []}\ndatacenters: [A]\nzones: []\nbogus: 1\n"
    assert f5import.verify(text, {}, imp)
    lost = [(f.where, f.what, f.essential) for f in imp.findings]
    assert ("output line 4", "bogus", True) in lost
    assert all("the imported config does not load: " in f.why for f in imp.findings)
    good = f5import.run([str(DATA / "wideip.conf")])
    assert not f5import.verify(good.text, good.zone_files, Imported())


def test_repeated_findings_are_listed_once_with_their_places(tmp_path: Path) -> None:
    server = "gtm server s{n} {{\n    datacenter A\n    product bigip\n}}\n"
    text = "gtm datacenter A { }\n" + "".join(server.format(n=n) for n in range(3))
    result = imported(tmp_path, text)
    (line,) = render_findings(result.imported.findings)
    path = tmp_path / "in.conf"
    assert line.startswith(f"{path}:4: not mapped: gtm server product: ")
    assert line.endswith("(virtual servers carry theirs) (also lines 8, 12)")


def test_pool_members_named_by_address(tmp_path: Path) -> None:
    """Older listings name a pool member by its address and port."""
    text = (
        "gtm datacenter A { }\n"
        "gtm server s {\n    datacenter A\n    virtual-servers {\n        v {\n"
        "            destination 192.0.2.10:80\n        }\n    }\n}\n"
        "gtm pool web {\n    members {\n        192.0.2.10:80 {\n            order 0\n        }\n    }\n}\n"
    )
    imp = imported(tmp_path, text).imported
    assert imp.pools["web"].value["members"] == ["s.v"]


def test_numbers_in_digits_other_than_ascii_are_findings_not_tracebacks(tmp_path: Path) -> None:
    """A "²" passes str.isdigit() and fails int(): an order, a ratio or a TTL written with it
    is a number F5 did not write, a finding like any other word."""
    text = (
        "gtm datacenter A { }\n"
        "gtm server s {\n    datacenter A\n    virtual-servers {\n        v {\n"
        "            destination 192.0.2.10:80\n        }\n    }\n}\n"
        "gtm pool web {\n    ttl \u00b2\n    members {\n        s:v {\n            order \u00b2\n"
        "            ratio \u00b9\n        }\n    }\n}\n"
    )
    imp = imported(tmp_path, text).imported
    assert imp.pools["web"].value["members"] == ["s.v"]
    assert any("\u00b2" in f.what for f in imp.findings), imp.findings


def test_two_f5_virtual_servers_on_one_address_become_one(tmp_path: Path) -> None:
    """Ours are told apart by address and port: a second F5 virtual server there stands
    for the first (a pool naming both has it once)."""
    text = (
        "gtm datacenter A { }\n"
        "gtm server s {\n    datacenter A\n    virtual-servers {\n"
        "        v1 {\n            destination 192.0.2.10:80\n        }\n"
        "        v2 {\n            destination 192.0.2.10:80\n        }\n    }\n}\n"
        "gtm pool p {\n    members {\n        s:v1 { }\n        s:v2 { }\n    }\n}\n"
    )
    result = imported(tmp_path, text)
    assert list(result.imported.virtual_servers) == ["s.v1"]
    assert result.imported.pools["p"].value["members"] == ["s.v1"]
    assert findings(result) == [(8, False, "virtual server s:v2"), (16, False, "pool a p member s:v2")]


def test_numbers_beyond_our_range_are_cut_with_a_finding(tmp_path: Path) -> None:
    text = (
        "gtm datacenter A { }\n"
        "gtm server s {\n    datacenter A\n    virtual-servers {\n"
        "        v1 {\n            destination 192.0.2.10:80\n        }\n    }\n}\n"
        "gtm pool p {\n    ttl soon\n    members {\n        s:v1 {\n            ratio 70000\n        }\n    }\n}\n"
    )
    result = imported(tmp_path, text)
    assert result.imported.pools["p"].value["members"] == [{"virtual_server": "s.v1", "ratio": 65535}]
    assert result.imported.pools["p"].value["ttl"] == 30
    assert [(f.where.rsplit(":", 1)[1], f.what, f.why) for f in result.imported.findings] == [
        ("13", "pool a p member s:v1 ratio 70000", "out of our range (0 to 65535): 65535 is used"),
        ("11", "pool a p: ttl soon", "not a whole number: 30 is used"),
    ]


def test_a_name_two_wide_ips_claim_is_kept_by_the_first(tmp_path: Path) -> None:
    pool = '  pool {\n    name "p"\n    address 192.0.2.7:80\n  }\n'
    text = (
        f'wideip {{\n  name "a.example.com"\n  alias "b.example.com"\n{pool}}}\n'
        f'wideip {{\n  name "B.example.com"\n  alias "a.example.com"\n{pool}}}\n'
    )
    result = imported(tmp_path, text)
    assert list(result.imported.wideips) == ["a.example.com", "B.example.com"]
    assert "aliases" not in result.imported.wideips["B.example.com"].value
    assert findings(result) == [
        (6, False, "pool member 192.0.2.7:80"),  # (no server lists it)
        (1, True, "wideip a.example.com alias b.example.com"),
        (9, True, "wideip B.example.com alias a.example.com"),
    ]


@pytest.mark.parametrize(
    "monitor",
    [
        "monitor min 1 of { /Common/http /Common/tcp }",
        "monitor min 1 of {\n                /Common/http\n                /Common/tcp\n            }",
    ],
)
def test_monitor_min_of(tmp_path: Path, monitor: str) -> None:
    text = (
        "gtm datacenter A { }\n"
        "gtm server s {\n    datacenter A\n    virtual-servers {\n        v {\n"
        f"            destination 192.0.2.10:80\n            {monitor}\n        }}\n    }}\n}}\n"
    )
    vs = imported(tmp_path, text).imported.virtual_servers["s.v"].value
    assert (vs["monitor"], vs["monitor_rule"]) == (["http", "tcp"], {"at_least": 1})


def test_monitors_joined_by_and(tmp_path: Path) -> None:
    text = (
        "gtm datacenter A { }\n"
        "gtm server s {\n    datacenter A\n    virtual-servers {\n        v {\n"
        "            destination 192.0.2.10:80\n            monitor /Common/http and /Common/gateway_icmp\n"
        "        }\n    }\n}\n"
    )
    result = imported(tmp_path, text)
    vs = result.imported.virtual_servers["s.v"].value
    assert vs["monitor"] == ["http", "gateway_icmp"] and "monitor_rule" not in vs
    assert result.imported.monitors["gateway_icmp"].value["type"] == "icmp"


def test_a_server_side_region_with_nothing_imported_is_lost(tmp_path: Path) -> None:
    text = (
        "gtm datacenter A { }\n"
        "gtm region /Common/isps {\n    region-members {\n        isp /Common/x { }\n    }\n}\n"
        "gtm topology ldns: subnet 10.0.0.0/8 server: region /Common/isps {\n    score 1\n}\n"
    )
    result = imported(tmp_path, text)
    assert not result.imported.topology
    assert [(line, essential) for line, essential, _ in findings(result)] == [(4, True), (7, True)]
    assert result.imported.findings[1].why == "region /Common/isps has nothing that could be imported"


def test_a_setting_not_read_is_changed_and_fails_the_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A setting the importer does not read is one F5 applied: CHANGED, exit 1 (in either
    form); one that changes no answer (a server's device list) is listed only."""
    tmsh = tmp_path / "gtm.conf"
    tmsh.write_text(
        "gtm datacenter /Common/DC1 { }\n"
        "gtm server /Common/lb1 {\n    datacenter /Common/DC1\n    devices {\n        lb1 { }\n    }\n"
        "    virtual-servers {\n        /Common/vs1 {\n            destination 192.0.2.1:80\n"
        "            limit-max-connections 10\n            limit-max-connections-status enabled\n        }\n    }\n}\n"
        "gtm pool a /Common/p {\n    members {\n        /Common/lb1:/Common/vs1 { }\n    }\n}\n"
        "gtm wideip a /Common/www.example.com {\n    pools {\n        /Common/p { }\n    }\n}\n"
    )
    assert cli.main(["import", "f5", str(tmsh), "-o", str(tmp_path / "a.yaml")]) == 1
    err = capsys.readouterr().err
    assert f"{tmsh}:10: CHANGED: virtual server lb1:vs1: limit-max-connections 10: not read" in err
    assert f"{tmsh}:4: not mapped: server /Common/lb1: devices" in err
    threedns = tmp_path / "wideip.conf"
    threedns.write_text('wideip {\n  name "a.example.com"\n  qos_coeff { rtt 50 }\n  pool {\n    name "p"\n'
                        "    address 192.0.2.7:80\n  }\n}\n")  # fmt: skip
    assert cli.main(["import", "f5", str(threedns), "-o", str(tmp_path / "b.yaml")]) == 1
    assert f'{threedns}:3: CHANGED: wideip "a.example.com": qos_coeff' in capsys.readouterr().err
