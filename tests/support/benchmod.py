"""The benchmark's scripts as modules for tests: bench/ is not a package (its scripts import
each other by their plain names), so its folder goes on sys.path first."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench_module(name: str) -> Any:
    """bench/NAME.py, imported (once)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module(name)
