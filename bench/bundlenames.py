"""What finding a bundle's files by parsing its YAML costs at size (issue 30, defect 8).

    .venv/bin/python bench/bundlenames.py [--scale 1] [--repeat 3]

On bench/bigconfig.py's config (`tests.support.bigconfig`, 5,000 servers at ``--scale 1``),
in one process, best of ``--repeat``:

- ``parse_whole``: `yamlsrc.parse`, the YAML as the config reader reads it (what `make`
  does when nothing parsed it before);
- ``after_load``: `load.config_value` right after `load` read the file (the CLI's push and
  a member's start: the reader's memory of the same text, its sections' shas compared);
- ``names``, ``make``, ``check``: the files named (zone includes scanned), the bundle made
  from the parsed value, the bundle checked;
- ``sighup_child`` and ``sighup_again``: `shared.parsed_beside`, the YAML child a SIGHUP
  uses, on a real reactor: wall time, and the reactor's longest turn meanwhile (a 5 ms
  probe), first with nothing in memory (a changed file) then with the same text (the
  publication's own read of its bundle: every section named, none parsed);
- ``receipt_run_only_s`` and ``receipt_check_then_run_s``: a bundle received, read to run
  it (`config.reload.read`: the YAML child and the build, overlapped) at once, as before
  issue 30, or first checked (`parsed_beside`, then `bundle.check`) and then read to run it
  (its sections taken from memory): what checking before keeping adds to each member.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from twisted.internet import defer, reactor, task  # noqa: E402

from gtmcluster.config import reload, sharing  # noqa: E402
from gtmcluster.config.load import config_value, load  # noqa: E402
from gtmcluster.config.source import yamlchild, yamlsrc  # noqa: E402
from gtmcluster.groupconfig import bundle  # noqa: E402
from gtmcluster.groupconfig.shared import parsed_beside  # noqa: E402
from tests.support import bigconfig  # noqa: E402


def best(repeat: int, work: Callable[[], Any]) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return round(min(times), 4)


async def beside(path: Path, text: bytes) -> dict[str, float]:
    """parsed_beside on the running reactor, its longest turn measured by a 5 ms probe."""
    longest = [0.0]
    last = [time.perf_counter()]

    def probe() -> None:
        now = time.perf_counter()
        longest[0] = max(longest[0], now - last[0] - 0.005)
        last[0] = now

    loop = task.LoopingCall(probe)
    loop.start(0.005)
    started = time.perf_counter()
    await parsed_beside(reactor, str(path), text)
    took = time.perf_counter() - started
    loop.stop()
    return {"wall_s": round(took, 3), "longest_turn_s": round(longest[0], 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    default = bigconfig.Shape()
    shape = bigconfig.Shape(
        servers=round(default.servers * args.scale),
        pools=round(default.pools * args.scale),
        wideips=round(default.wideips * args.scale),
        topology=round(default.topology * args.scale),
        regions=max(1, round(default.regions * args.scale)),
    )
    folder = Path(tempfile.mkdtemp(prefix="bundlenames-"))
    path = bigconfig.write(folder, shape, [f"127.0.9.{i + 1}" for i in range(shape.members)], make_certs=False)
    text = path.read_bytes()
    out: dict[str, Any] = {"servers": shape.servers, "config_bytes": len(text)}
    out["parse_whole_s"] = best(args.repeat, lambda: yamlsrc.parse(str(path), text))
    load(path)  # what the CLI and a member's start did just before
    out["after_load_s"] = best(args.repeat, lambda: config_value(str(path), text))
    raw = config_value(str(path), text)
    out["names_s"] = best(args.repeat, lambda: sharing.names(raw, path.name, base=folder))
    out["make_s"] = best(args.repeat, lambda: bundle.from_text(path, text, raw, 1, 0, "n1", 0.0))
    made = bundle.from_text(path, text, raw, 1, 0, "n1", 0.0)
    out["check_s"] = best(args.repeat, lambda: bundle.check(made, raw))

    async def child() -> None:
        yamlchild.MEMORY.keep(yamlchild.Parsed())  # nothing held: a changed file
        out["sighup_child"] = await beside(path, text)
        out["sighup_again"] = await beside(path, text)  # all of it in memory now
        # a bundle received: read to run it at once (as before issue 30), or checked first
        # (its YAML parsed in the child) and then read to run it (its sections in memory)
        for _ in range(args.repeat):
            yamlchild.MEMORY.keep(yamlchild.Parsed())
            started = time.perf_counter()
            await reload.read(reactor, str(path))
            run_only = time.perf_counter() - started
            yamlchild.MEMORY.keep(yamlchild.Parsed())
            started = time.perf_counter()
            await parsed_beside(reactor, str(path), text)
            await reload.read(reactor, str(path))
            vet_then_run = time.perf_counter() - started
            out.setdefault("receipt_run_only_s", []).append(round(run_only, 2))
            out.setdefault("receipt_check_then_run_s", []).append(round(vet_then_run, 2))

    running = defer.ensureDeferred(child())
    running.addErrback(lambda f: print(f.getTraceback(), file=sys.stderr))
    running.addBoth(lambda _: reactor.stop())
    reactor.run()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
