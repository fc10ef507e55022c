"""Run one fuzz target under atheris: ``python -m fuzz TARGET [libFuzzer options] [CORPUS ...]``.

Only the modules `fuzz.run.TARGETS` names for the target are instrumented for coverage,
as they are imported: instrumenting everything loaded takes minutes. A file
given instead of a corpus folder is replayed (``python -m fuzz dns_request var/fuzz/crash-...``).
"""

from __future__ import annotations

import importlib
import sys

import atheris
from atheris.import_hook import instrument_imports

from fuzz.run import TARGETS


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit(f"usage: python -m fuzz TARGET [libFuzzer options] [CORPUS ...]\n{__doc__}")
    target = sys.argv[1]
    name = f"fuzz.{target}" if target in TARGETS else target  # (or any module with a test_one_input)
    with instrument_imports(include=list(TARGETS.get(target, ("gtmcluster",))), enable_loader_override=False):
        module = importlib.import_module(name)
    atheris.Setup([sys.argv[0], *sys.argv[2:]], module.test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
