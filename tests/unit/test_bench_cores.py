"""bench/cores.py: the runs it asks of compare.py, and the table it makes of their figures."""

from __future__ import annotations

from pathlib import Path

from tests.support.benchmod import bench_module

cores = bench_module("cores")


def figures(qps: float, cpu: float) -> dict[str, float]:
    return {"qps": qps, "cpu_us_per_query": cpu}


def test_each_count_runs_ours_and_nsd_with_that_many_processes() -> None:
    """N processes for our node and NSD's server-count N; the pinning and compare.py's own
    options (after --) pass through."""
    args, rest = cores.parse(["--max", "2", "--pin-load", "0", "--also-unpinned", "--", "--ecs", "100000"])
    argv = cores.compare_argv(args, 2, Path("/tmp/n2.json"), rest)
    joined = " ".join(argv)
    assert "--servers ours,nsd --processes 2 --server-count 2" in joined
    assert "--pin-load 0 --also-unpinned" in joined and argv[-2:] == ["--ecs", "100000"]
    assert "--json /tmp/n2.json" in joined


def test_rows_give_queries_per_process_and_the_ratio_to_nsd() -> None:
    summary = {
        "pinned/wideip": {"ours": figures(60_000, 14.0), "nsd": figures(80_000, 8.0)},
        "unpinned/static": {"ours": figures(90_000, 10.0), "nsd": figures(90_000, 9.0), "floor": figures(1, 1)},
        "pinned/static": {"ours": figures(1, 1)},  # (no NSD figures: left out)
    }
    rows = cores.rows(2, summary)
    assert [(r["pinning"], r["mix"]) for r in rows] == [("pinned", "wideip"), ("unpinned", "static")]
    wide = rows[0]
    assert wide["ours_qps_per_process"] == 30_000 and wide["nsd_qps_per_process"] == 40_000
    assert wide["qps_ratio"] == 0.75
    text = cores.table(rows)
    assert "| 2 | pinned | wideip | 60.0k | 30.0k | 14.0 | 80.0k | 40.0k | 8.0 | 0.75x |" in text
