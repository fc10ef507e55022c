"""bench/clientsources.py at a tiny size: every case is decided by the source it names (the
script checks it before timing and raises otherwise), and its JSON line holds the figures
docs/performance.md quotes, with the compact client values and with dicts."""

from __future__ import annotations

import gc
import json
import sys
from typing import Any

import pytest

from gtmcluster.state import keys, values
from tests.support.benchmod import bench_module

bench: Any = bench_module("clientsources")


@pytest.mark.parametrize("form", ["compact", "dict"])
def test_a_tiny_run_reports_every_figure(form: str, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    registered = dict(values._forms)
    argv = ["clientsources.py", "--subnets", "600", "--populations", "60", "--bare", "20", "--rounds", "1"]
    argv += ["--answers", "40", "--repeat", "10", "--beacons", "20"]
    monkeypatch.setattr(sys, "argv", argv + (["--dict-values"] if form == "dict" else []))
    try:
        assert bench.main() == 0
    finally:
        values._forms.clear()
        values._forms.update(registered)
        gc.unfreeze()  # (the bench freezes the heap as a node does: other tests count what they freeze)
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["client_values"] == form
    assert report["memory"]["client_value_type"] == ("ClientValue" if form == "compact" else "dict")
    assert {row["case"] for row in report["answers"]} == {"ldns-ecs", "ldns", "client", "population", "unknown"}
    assert all(row["fresh_us"] > 0 and row["kept_us"] > 0 for row in report["answers"])
    assert [r["subnets"] for r in report["reaction"]] == [600]
    assert 0 < report["reaction"][0]["store_reads_per_beacon"] <= 1 + 3 + 1 + 32 * 3 + 2
    assert keys.CLIENT in values._forms
