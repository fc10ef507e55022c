"""Hostile input to `gtmcluster import f5` (what `fuzz/f5_import.py` found): whatever a file
holds, the import gives findings one line each at a line of the file, and a config that
loads; each test here failed before its fix."""

from __future__ import annotations

from pathlib import Path

from gtmcluster.cli.importcmd import render_findings
from gtmcluster.config.load import load
from gtmcluster.importers import f5import
from gtmcluster.importers.model import Finding

BASE = """gtm datacenter /Common/DC1 { }
gtm server /Common/lb1 {
    datacenter /Common/DC1
    virtual-servers {
        /Common/vs { destination 192.0.2.1:80 }
    }
}
gtm pool a /Common/p {
    members { /Common/lb1:/Common/vs { member-order 0 } }
}
gtm wideip a /Common/www.example.com {
    pools { /Common/p { order 0 } }
}
"""


def imported(tmp_path: Path, text: str) -> f5import.Result:
    path = tmp_path / "bigip_gtm.conf"
    path.write_text(text, encoding="utf-8")
    return f5import.run([str(path)])


def loaded(tmp_path: Path, result: f5import.Result) -> list[str]:
    """The imported config written out and loaded as `gtmcluster check` does: its wide IPs."""
    for relative, text in result.zone_files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    (tmp_path / "cluster.yaml").write_text(result.text)
    config = load(tmp_path / "cluster.yaml")
    return sorted(w.name for w in config.wideips.values())


def test_a_control_character_in_an_object_name_leaves_the_config_loadable(tmp_path: Path) -> None:
    """A data center's name holding a control character (quoted, as tmsh may print it) is
    renamed, and the comment above it, which quotes F5's statement, stays a comment: the
    config loads and the wide IP answers (it broke YAML: "special characters are not
    allowed")."""
    text = BASE.replace("/Common/DC1", '"/Common/DC\x01one"')
    result = imported(tmp_path, text)
    assert not [f for f in result.imported.findings if "does not load" in f.why]
    assert loaded(tmp_path, result) == ["www.example.com"]
    assert list(result.imported.datacenters) == ["DC_one"]


def test_a_wide_ip_name_with_a_line_break_is_lost_and_the_rest_loads(tmp_path: Path) -> None:
    """A wide IP whose quoted name holds a line break (no name F5 serves) is LOST with its
    line; the other wide IP is imported and the config loads (the name was written into a
    YAML comment, and its second line broke the config)."""
    text = BASE + 'gtm wideip a "/Common/x\nq: 1\n.example.com" {\n    pools { /Common/p { order 0 } }\n}\n'
    result = imported(tmp_path, text)
    lost = [f for f in result.imported.findings if f.essential]
    assert [(f.where.rsplit(":", 1)[1], f.what) for f in lost] == [("14", "wideip x\nq: 1\n.example.com")]
    assert "holds a blank, a control character" in lost[0].why
    assert loaded(tmp_path, result) == ["www.example.com"]


def test_findings_render_on_one_line_each(tmp_path: Path) -> None:
    """A setting whose quoted value holds line breaks (and other characters that do not
    print) is shown on one line, those characters escaped: the command prints one finding
    a line (the value's second line looked like a finding of its own)."""
    pools = "pools { /Common/p { order 0 } }"
    text = BASE.replace(pools, pools + '\n    foo "a\nb\x85c\u2028d"')
    lines = render_findings(imported(tmp_path, text).imported.findings)
    assert lines == [
        f"{tmp_path}/bigip_gtm.conf:13: CHANGED: wideip a /Common/www.example.com: "
        'foo "a\\nb\\x85c\\u2028d": not read: F5 applied it, this import does not (decide whether it matters)'
    ]
    assert Finding("f:1", "a\x00b", "c\nd").render() == "f:1: not mapped: a\\x00b: c\\nd"


def test_a_cname_member_that_is_no_host_name_is_lost_and_the_rest_loads(tmp_path: Path) -> None:
    """A CNAME pool member whose target IDNA cannot encode (undecodable bytes read as U+FFFD)
    is LOST at its line; the other member is imported and the config loads with the wide IP
    answering the good target (the target was written as it was and the loader refused the
    whole config)."""
    text = (
        "gtm pool cname /Common/c {\n    members {\n        web.example.net { member-order 0 }\n"
        "        www.cd\ufffd\u049dple.net { member-order 1 }\n    }\n}\n"
        "gtm wideip cname /Common/alias.example.com {\n    pools { /Common/c { order 0 } }\n}\n"
    )
    result = imported(tmp_path, text)
    lost = [(f.where.rsplit(":", 1)[1], f.what) for f in result.imported.findings if f.essential]
    assert lost == [("4", "pool cname /Common/c member www.cd\ufffd\u049dple.net")]
    assert loaded(tmp_path, result) == ["alias.example.com"]
    assert [vs["cname"] for vs in (e.value for e in result.imported.virtual_servers.values())] == ["web.example.net"]


def test_a_pool_listed_twice_in_a_wide_ip_is_imported_once(tmp_path: Path) -> None:
    """A wide IP listing one pool twice (tmsh holds a pool once: a listing joined or edited
    by hand) imports it once; the same settings twice are a plain finding, other settings a
    CHANGED one; the config loads (the loader refused "pool 'p' is listed twice")."""
    pools = "pools { /Common/p { order 0 } }"
    same = imported(tmp_path, BASE.replace(pools, "pools {\n /Common/p { order 0 }\n /Common/p { order 0 }\n }"))
    assert [(f.level, f.why) for f in same.imported.findings] == [("not mapped", "listed twice: imported once")]
    assert loaded(tmp_path, same) == ["www.example.com"]
    assert same.imported.wideips["www.example.com"].value["pools"] == ["p"]
    other = imported(tmp_path, BASE.replace(pools, "pools {\n /Common/p { order 0 }\n /Common/p { ratio 3 }\n }"))
    assert [(f.level, f.where.rsplit(":", 1)[1]) for f in other.imported.findings] == [("CHANGED", "14")]
    assert loaded(tmp_path, other) == ["www.example.com"]


def test_a_fallback_ip_that_is_no_address_is_a_finding_and_the_rest_loads(tmp_path: Path) -> None:
    """A pool with members whose fallback-ip is no IP address (406.0.113.53) is imported
    without it: a finding at its line, and the mode that answers by it is CHANGED ('none' is
    used); the config loads and the wide IP answers its member (the address was written as
    it was and the loader refused the whole config)."""
    head = "gtm pool a /Common/p {\n"
    text = BASE.replace(head, head + "    fallback-ip 406.0.113.53\n    fallback-mode fallback-ip\n")
    result = imported(tmp_path, text)
    found = [(f.where.rsplit(":", 1)[1], f.level, f.what) for f in result.imported.findings]
    assert found == [
        ("9", "not mapped", "pool a /Common/p: fallback-ip 406.0.113.53"),
        ("10", "CHANGED", "pool a /Common/p: fallback-mode fallback-ip"),
    ]
    assert loaded(tmp_path, result) == ["www.example.com"]
    assert "fallback_ip" not in result.imported.pools["p"].value


def test_a_udp_monitor_that_sends_nothing_is_lost_and_the_rest_loads(tmp_path: Path) -> None:
    """A udp monitor with ``send none`` (an empty datagram, which ours cannot send) is LOST
    naming what uses it, and the config loads (it was written with an empty send, and the
    loader refused the whole config)."""
    monitor = 'gtm monitor udp /Common/udp_pattern {\n    recv "pong"\n    send none\n}\n'
    text = monitor + BASE.replace("/Common/DC1\n", "/Common/DC1\n    monitor /Common/udp_pattern\n")
    result = imported(tmp_path, text)
    lost = [(f.where.rsplit(":", 1)[1], f.level, f.what) for f in result.imported.findings if f.essential]
    assert lost == [("1", "LOST", "monitor /Common/udp_pattern")]
    assert loaded(tmp_path, result) == ["www.example.com"]


def test_an_empty_host_header_in_an_http_send_is_changed_and_the_rest_loads(tmp_path: Path) -> None:
    """An http monitor whose send has an empty ``Host:`` header: CHANGED (ours send the
    server's address), the config loads (it was written with ``host: ''``, which the loader
    refuses)."""
    monitor = 'gtm monitor http /Common/m {\n    send "GET / HTTP/1.1\\r\\nHost:\\r\\n\\r\\n"\n}\n'
    text = monitor + BASE.replace("datacenter /Common/DC1\n", "datacenter /Common/DC1\n    monitor /Common/m\n")
    result = imported(tmp_path, text)
    essential = [(f.level, f.why) for f in result.imported.findings if f.essential]
    why = "send header 'Host:': empty; ours send the server's address as Host (used by server /Common/lb1)"
    assert essential == [("CHANGED", why)]
    assert loaded(tmp_path, result) == ["www.example.com"]


def test_a_dns_monitor_asking_no_domain_name_is_lost_and_the_rest_loads(tmp_path: Path) -> None:
    """A dns monitor whose qname IDNA cannot encode (undecodable bytes read as U+FFFD) is
    LOST naming what uses it, and the config loads (it was written with that query_name,
    and the loader refused the whole config)."""
    monitor = "gtm monitor dns /Common/d {\n    qname www.exam\ufffdle.com\n}\n"
    text = monitor + BASE.replace("/Common/DC1\n", "/Common/DC1\n    monitor /Common/d\n")
    result = imported(tmp_path, text)
    lost = [(f.where.rsplit(":", 1)[1], f.level, f.what) for f in result.imported.findings if f.essential]
    assert lost == [("1", "LOST", "monitor /Common/d")]
    assert loaded(tmp_path, result) == ["www.example.com"]


CNAME_POOL = "gtm pool cname /Common/cdn {\n    members {\n        www.cdn.example.net { member-order 0 }\n    }\n}\n"


def test_a_cname_wide_ip_at_a_zone_apex_is_lost_and_the_rest_loads(tmp_path: Path) -> None:
    """A CNAME wide IP at a zone's apex (where the zone's SOA and NS are) is LOST, saying
    what to do; no zone of its own is made for it, and the config loads with the other
    wide IP (the zone and the CNAME were both written, and the loader refused the config)."""
    apex = "gtm wideip cname /Common/example.com {\n    pools { /Common/cdn { order 0 } }\n}\n"
    result = imported(tmp_path, BASE + CNAME_POOL + apex)
    lost = [(f.where.rsplit(":", 1)[1], f.why) for f in result.imported.findings if f.essential]
    why = "a CNAME at the apex of zone example.com, where its SOA and NS are: give --zone of a parent: not imported"
    assert lost == [("19", why)]
    assert loaded(tmp_path, result) == ["www.example.com"]
    alone = imported(tmp_path, CNAME_POOL + apex)
    lost = [(f.where.rsplit(":", 1)[1], f.why) for f in alone.imported.findings if f.essential]
    why = "a CNAME below com, a public suffix: a zone of its own would hold its SOA and NS there: not imported"
    assert lost == [("6", why)]
    assert (alone.zone_files, loaded(tmp_path, alone)) == ({}, [])


def test_a_cname_pool_monitor_is_changed_not_applied_and_the_config_loads(tmp_path: Path) -> None:
    """A CNAME pool with a monitor: ours check a CNAME member only at a ``check_address``
    it does not have, so the monitor is not applied, CHANGED at its line; the config loads
    (the monitor was given to the CNAME members, and the loader refused the config)."""
    pool = CNAME_POOL.replace("    members", "    monitor /Common/tcp\n    members")
    wideip = "gtm wideip cname /Common/cdn.example.com {\n    pools { /Common/cdn { order 0 } }\n}\n"
    result = imported(tmp_path, BASE + pool + wideip)
    essential = [(f.where.rsplit(":", 1)[1], f.level, f.what) for f in result.imported.findings if f.essential]
    assert essential == [("15", "CHANGED", "pool cname /Common/cdn: monitor /Common/tcp")]
    assert loaded(tmp_path, result) == ["cdn.example.com", "www.example.com"]
