"""What checking a received bundle costs the reactor, its zone large and with an ``$INCLUDE``.

    PYTHONPATH=. .venv/bin/python bench/bundlevet.py [--mb 4] [--repeat 3]

A member checks a bundle a peer sent before it keeps or relays it (`GroupConfig.vet`): its
YAML parsed in the reload's YAML child, then `bundle.check`, which splits every bundled
zone that has an ``$INCLUDE`` into entries to find the files it includes (some 0.17 s a
megabyte). This runs `vet` on a real reactor (the node's services as `make_service`
builds them, its thread pool started) for a bundle whose zone is ``--mb`` megabytes with
one ``$INCLUDE``, and reports, best of ``--repeat``, its wall time and the reactor's
longest turn meanwhile (a 5 ms probe; the YAML's sections not held from an earlier
read, as for a bundle new to this member); ``check_s`` is `bundle.check` alone, in this
thread; ``extra_files_s``: the bundle written out and read to run it (`load` with the
member's own folder), the time of its step that refuses files the config does not name
(`load._extra_files`, one step on the reactor in a reload).
Run from a checkout (``PYTHONPATH=.`` picks the code measured).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from twisted.internet import defer, reactor, task  # noqa: E402

from gtmcluster.config import load as loading  # noqa: E402
from gtmcluster.config.load import load  # noqa: E402
from gtmcluster.config.source import yamlchild, yamlsrc  # noqa: E402
from gtmcluster.groupconfig import bundle  # noqa: E402
from gtmcluster.groupconfig.shared import at_start  # noqa: E402
from gtmcluster.service import Sockets, make_service  # noqa: E402
from tests.support import configs  # noqa: E402


def written(folder: Path, megabytes: float) -> Path:
    """A config whose zone is about *megabytes* MB of A records and includes hosts.inc."""
    raw = configs.base()
    raw["state_dir"] = str(folder / "state")
    lines = [f"h{i} IN A 192.0.2.{i % 250 + 1}\n" for i in range(int(megabytes * 1e6 / 26))]
    path = configs.write(folder, raw, zone=configs.ZONE + "".join(lines) + "$INCLUDE hosts.inc\n")
    (folder / "hosts.inc").write_text("near IN A 192.0.2.8\n")
    return path


async def vetted(group: Any, got: bundle.Bundle) -> dict[str, float]:
    """`vet` on the running reactor, its longest turn measured by a 5 ms probe."""
    longest = [0.0]
    last = [time.perf_counter()]

    def probe() -> None:
        now = time.perf_counter()
        longest[0] = max(longest[0], now - last[0] - 0.005)
        last[0] = now

    yamlchild.MEMORY.keep(yamlchild.Parsed())  # nothing held: a bundle not read here before
    loop = task.LoopingCall(probe)
    loop.start(0.005)
    started = time.perf_counter()
    problems = await group.vet(got)
    took = time.perf_counter() - started
    probe()  # (the turn it ended in, if it ended in the one it began in)
    loop.stop()
    assert problems == [], problems
    return {"wall_s": round(took, 3), "longest_turn_s": round(longest[0], 4)}


def extra_files(got: bundle.Bundle, own_dir: Path, repeat: int) -> float:
    """The best time of `load._extra_files` while bundle *got*, written out, is read to run."""
    spent: list[float] = []
    measured = loading._extra_files

    def timed(*args: Any) -> None:
        started = time.perf_counter()
        measured(*args)
        spent.append(time.perf_counter() - started)

    path = bundle.write(got, Path(tempfile.mkdtemp(prefix="bundlevet-out-")))
    loading._extra_files = timed  # type: ignore[assignment]
    try:
        for _ in range(repeat):
            load(path, own_dir)
    finally:
        loading._extra_files = measured
    return round(min(spent), 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=4.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bundlevet-"))
    path = written(folder, args.mb)
    config = load(path)
    top = make_service(config, "n1", reactor, Sockets(dns=[]), str(path), start=at_start(config, str(path), "n1"))
    group = top.group_config
    got = bundle.make(path, 1, 0, "n2", 1.0)
    raw = yamlsrc.parse(str(path), got.config_text)
    started = time.perf_counter()
    bundle.check(got, raw)
    out: dict[str, Any] = {"zone_bytes": len(got.files["example.test.zone"]), "check_s": time.perf_counter() - started}
    out["extra_files_s"] = extra_files(got, folder, args.repeat)

    async def run() -> None:
        runs = [await vetted(group, got) for _ in range(args.repeat)]
        out["vet_wall_s"] = min(r["wall_s"] for r in runs)
        out["vet_longest_turn_s"] = min(r["longest_turn_s"] for r in runs)

    running = defer.ensureDeferred(run())
    running.addErrback(lambda f: print(f.getTraceback(), file=sys.stderr))
    running.addBoth(lambda _: reactor.stop())
    reactor.run()
    out["check_s"] = round(out["check_s"], 3)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
