"""TCP and many clients in bench/compare.py (bench/manyclients.py, bench/comparelib.py): the
client subnets for --ecs 100000 are distinct /24s and the report says which lie in a topology
region; connections split over the dnsperf processes; the kept-decision figures read from
/metrics text and their hit rate; dnsperf's TCP output parsed from its query statistics."""

from __future__ import annotations

import importlib
import ipaddress
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.support.benchmod import bench_module

lib: Any = bench_module("comparelib")
many: Any = bench_module("manyclients")

REGION_NETS = [ipaddress.IPv4Network(n) for n in lib.REGIONS.values()]


def test_a_hundred_thousand_client_subnets_are_distinct_slash_24s() -> None:
    subnets = [lib.ecs_network(i) for i in range(100_000)]
    assert len(set(subnets)) == 100_000
    assert all(n.prefixlen == 24 for n in subnets)
    # the first 65,536 are 10.0.0.0/8 as before (so --ecs 10000 asks what it asked), then 11.0.0.0/8
    assert subnets[0] == ipaddress.IPv4Network("10.0.0.0/24")
    assert subnets[65_535] == ipaddress.IPv4Network("10.255.255.0/24")
    assert subnets[65_536] == ipaddress.IPv4Network("11.0.0.0/24")
    assert all(n.subnet_of(ipaddress.IPv4Network("10.0.0.0/7")) for n in subnets)


def test_the_count_inside_the_regions_is_what_the_networks_say() -> None:
    inside = sum(any(lib.ecs_network(i).subnet_of(r) for r in REGION_NETS) for i in range(100_000))
    assert lib.ecs_inside_regions(100_000) == inside == 16_384  # all of 10.0.0.0/10
    assert lib.ecs_inside_regions(10_000) == 10_000  # the default: every subnet in a region


@given(st.integers(min_value=0, max_value=20_000))
def test_the_count_inside_for_any_count(count: int) -> None:
    expected = sum(any(lib.ecs_network(i).subnet_of(r) for r in REGION_NETS) for i in range(count))
    assert lib.ecs_inside_regions(count) == expected


def test_the_wide_ip_mix_for_a_hundred_thousand_says_how_many_are_in_no_region(tmp_path: Path) -> None:
    mix = lib.write_mixes(tmp_path, 4, 100_000)["wideip"]
    assert "100000 subnets (10.0.0.0/24 .. 11.134.159.0/24)" in mix.description
    assert "16384 in the topology regions, 83616 in none" in mix.description
    packets = 0
    for file in mix.files:
        data = file.read_bytes()
        at = 0
        while at < len(data):
            at += 2 + int.from_bytes(data[at : at + 2], "big")
            packets += 1
        assert at == len(data)
    assert packets == 100_000


def test_connections_split_over_the_processes_over_tcp_only() -> None:
    assert many.clients_per_process("tcp", 64, 4, 2) == 16
    assert many.clients_per_process("tcp", 66, 4, 2) == 16
    assert many.clients_per_process("tcp", 2, 4, 2) == 1
    assert many.clients_per_process("udp", 64, 4, 2) == 2


def test_the_floor_is_left_out_over_tcp() -> None:
    assert many.left_out("tcp", ["ours", "nsd", "floor"]) == {"floor": many.UDP_ONLY["floor"]}
    assert many.left_out("tcp", ["ours", "nsd"]) == {}
    assert many.left_out("udp", ["ours", "floor"]) == {}


METRICS = """\
# HELP gtm_kept_decision_lookups_total wide IP answers looked up among kept decisions
# TYPE gtm_kept_decision_lookups_total counter
gtm_kept_decision_lookups_total{result="hit"} 51998.0
gtm_kept_decision_lookups_total{result="miss"} 2.0
# HELP gtm_kept_decisions decisions kept for reuse
# TYPE gtm_kept_decisions gauge
gtm_kept_decisions 200000.0
gtm_store_records{kind="persist"} 100008.0
"""


def test_kept_figures_from_metrics_text() -> None:
    assert many.parse_kept(METRICS) == {"hits": 51998.0, "misses": 2.0, "kept": 200000.0}
    assert many.parse_kept('gtm_store_records{kind="persist"} 3.0\n') == {}


def test_the_hit_rate_is_over_the_runs_between_the_readings() -> None:
    before = {"hits": 100.0, "misses": 50.0, "kept": 10.0}
    after = {"hits": 190.0, "misses": 60.0, "kept": 10.0}
    assert many.hit_rate(before, after) == 0.9
    assert many.hit_rate(after, after) is None  # no lookup in between (e.g. over TCP)
    assert many.hit_rate({}, {}) is None  # no cache
    lines, figures = many.kept_report(1024, 3072, before, after, 57.7)
    assert figures["kept_hits"] == 90 and figures["kept_misses"] == 10 and figures["hit_rate"] == 0.9
    assert "1.0 MiB after start, 3.0 MiB after the runs (+2.0 MiB)" in lines[0]
    assert "hit rate 90.0%" in lines[1]


def test_resident_memory_of_this_process_and_a_gone_one() -> None:
    assert many.rss_kib([0x7FFFFFFF]) == 0
    assert many.rss_kib([importlib.import_module("os").getpid()]) > 1000


TCP_OUTPUT = """\
Statistics:

  Queries sent:         3000
  Queries completed:    3000 (100.00%)
  Queries lost:         0 (0.00%)

  Response codes:       NOERROR 2910 (97.00%), NXDOMAIN 90 (3.00%)
  Average packet size:  request 32, response 63
  Run time (s):         1.060611
  Queries per second:   2828.558256

  Average Latency (s):  0.016736 (min 0.005004, max 0.063655)
  Latency StdDev (s):   0.006901

Connection Statistics:

  Reconnections:        0

  Average Latency (s):  0.007742 (min 0.004040, max 0.011235)
  Latency StdDev (s):   0.002070
"""


def test_dnsperf_over_tcp_is_read_from_its_query_statistics() -> None:
    figures = lib.parse_dnsperf(lib.final_statistics("[Status] Testing complete\n\n" + TCP_OUTPUT))
    assert figures["sent"] == 3000 and figures["qps"] == 2828.558256
    assert figures["avg_latency"] == 0.016736  # the queries', not the connections' latency
    assert figures["rcodes"] == {"NOERROR": 2910, "NXDOMAIN": 90}
