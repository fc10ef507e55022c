"""The 3-DNS Controller form (``wideip.conf``): its sample, generic data centers, pools, topology
and malformed input."""

from __future__ import annotations

from pathlib import Path

import pytest

from gtmcluster.cli import main as cli
from gtmcluster.importers import f5import

DATA = Path(__file__).parent.parent / "data" / "f5"


def imported(tmp_path: Path, text: str, name: str = "in.conf", **kw: object) -> f5import.Result:
    path = tmp_path / name
    path.write_text(text)
    return f5import.run([str(path)], **kw)  # type: ignore[arg-type]


def findings(result: f5import.Result) -> list[tuple[int, bool, str]]:
    return [(int(f.where.rsplit(":", 1)[1]), f.essential, f.what) for f in result.imported.findings]


def test_threedns_sample() -> None:
    imp = f5import.run([str(DATA / "wideip.conf")]).imported
    assert list(imp.datacenters) == ["CNC", "TEL"]
    assert imp.pools["web"].value == {
        "members": ["bigip-cnc.www-cnc", "bigip-tel.www-tel"],
        "load_balancing": {"preferred": "topology", "alternate": "rtt", "fallback": "global_availability"},
        "ttl": 30,
    }
    assert imp.pools["shop"].value["load_balancing"] == {
        "preferred": "ratio",
        "alternate": "none",
        "fallback": "return_to_dns",
    }
    assert imp.wideips["shop.wip.example.com"].value["pool_lb"] == "global_availability"
    assert [e.value for e in imp.topology][:2] == [
        {"ldns": "subnet 202.106.0.0/16", "server": "datacenter CNC", "score": 100},
        {"ldns": "subnet 219.172.0.0/16", "server": "datacenter TEL", "score": 100},
    ]
    assert [e.where.rsplit(":", 1)[1] for e in imp.topology] == ["79", "80", "81", "82"]


def test_threedns_member_no_server_lists_goes_to_a_generic_data_center(tmp_path: Path) -> None:
    text = 'wideip {\n  name "a.example.com"\n  pool {\n    name "p"\n    address 192.0.2.7:8080\n  }\n}\n'
    result = imported(tmp_path, text)
    assert result.imported.virtual_servers["generic-192.0.2.7.192.0.2.7-8080"].value == {
        "address": "192.0.2.7",
        "port": 8080,
        "datacenter": "generic-192.0.2.7",
    }
    assert findings(result) == [(5, False, "pool member 192.0.2.7:8080")]


def test_threedns_pools_of_two_wide_ips_with_one_name_are_told_apart(tmp_path: Path) -> None:
    pool = '  pool {\n    name "web"\n    address 192.0.2.7:80\n  }\n'
    text = f'wideip {{\n  name "a.example.com"\n{pool}}}\nwideip {{\n  name "b.example.com"\n{pool}}}\n'
    imp = imported(tmp_path, text).imported
    assert list(imp.pools) == ["web", "web-b.example.com"]
    assert imp.wideips["b.example.com"].value["pools"] == ["web-b.example.com"]


def test_malformed_threedns_input_is_one_line_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 3-DNS wideip.conf is read whole: malformed, it stops the import in one line."""
    path = tmp_path / "wideip.conf"
    path.write_text('wideip {\n  name "www.example.com\n}\n')
    assert cli.main(["import", "f5", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"gtmcluster import f5: {path}:2: a quoted string is never closed\n"
    assert captured.out == ""


def test_threedns_topology_by_pool_and_region(tmp_path: Path) -> None:
    """3-DNS selectors ``pool."web"`` and ``region."cnc"`` (a region_db region) map to ours;
    a record naming a pool that was not imported is LOST."""
    text = (
        'region_db user {\n  region {\n    name "cnc"\n    202.106.0.0/16\n  }\n}\n'
        'wideip {\n  name "a.example.com"\n  pool {\n    name "web"\n    address 192.0.2.7:80\n  }\n'
        '  pool {\n    name "empty"\n  }\n}\n'
        'topology {\n  pool."web" region."cnc" 50\n  pool."empty" 10.0.0.0/8 10\n}\n'
    )
    result = imported(tmp_path, text)
    assert result.imported.regions["cnc"].value == ["202.106.0.0/16"]
    assert [e.value for e in result.imported.topology] == [{"ldns": "region cnc", "server": "pool web", "score": 50}]
    assert (19, True, 'topology record pool."empty" 10.0.0.0/8 10') in findings(result)
