"""The chaos run: three GTM sites on an emulated WAN under a nemesis, checked from its history.

    sudo .venv/bin/python bench/chaos.py [--seconds 300] [--seed 1] [--kinds loss,kill] [--history FILE] [--keep]
    .venv/bin/python bench/chaos.py --check FILE         # check a recorded history again
    make chaos ARGS='--seconds 120 --seed 7'              # installs faketime when missing

Builds (as root: network namespaces and TUN devices) three data centers CNC, TEL and CMCC,
each a namespace with a GTM node (real twistd, sync over mutual TLS) and the HTTP backend of
its virtual server, and a client namespace, joined by the tests' WAN emulator
(tests/tools/wanem.py). While a load generator asks every node all the time and an observer
records every node's view, a seeded nemesis cuts and heals links (both ways, one way, a node
isolated), drops 20% of packets, SIGKILLs and restarts nodes, restarts one under `faketime`
with its clock skewed, and stops and starts backends; an admin writer changes admin states.
Everything goes to a JSON-lines history (--history; default var/chaos/history-SEED.jsonl),
then the invariants are checked (tests/chaos/invariants.py) and the figures printed. Exits 0
when every invariant held, 1 when one failed, 2 when the run could not be made.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the harness lives in the tests package of this checkout

from tests.chaos import invariants, schedule  # noqa: E402
from tests.chaos.run import ChaosRun, History, Options, read_history  # noqa: E402
from tests.chaos.world import NODES, ChaosWorld, faketime_works, node_server  # noqa: E402
from tests.tools import wanem  # noqa: E402


def report_lines(report: invariants.Report) -> list[str]:
    lines = invariants.summary(report)
    if report.ok:
        lines.append("every invariant held")
    else:
        lines.append(f"{len(report.failures)} invariant failures:")
        lines += [f"  FAILED: {f}" for f in report.failures]
    return lines


def interrupt(signum: int, frame: object) -> None:
    """SIGTERM stops the run as Ctrl-C does: everything started is stopped, namespaces deleted."""
    raise KeyboardInterrupt


def preflight(seconds: float, seed: int, kinds: tuple[str, ...]) -> str | None:
    """Why the run cannot be made here, or None."""
    if os.geteuid() != 0:
        return "the chaos run needs root (network namespaces and TUN devices)"
    if not os.path.exists("/dev/net/tun"):
        return "/dev/net/tun is missing (no TUN support)"
    if shutil.which("ip") is None:
        return "`ip` is not installed (Debian package iproute2)"
    steps = schedule.plan(seed, seconds, list(NODES), {n: node_server(n) for n in NODES}, kinds)
    if any(s.action == "start" and s.args.get("skew") for s in steps):
        return faketime_works()
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=300.0, help="the nemesis's time (setup and the end come on top)")
    p.add_argument("--seed", type=int, default=1, help="seeds the nemesis's plan and the admin writer")
    p.add_argument("--history", type=Path, help="the JSON-lines history (default var/chaos/history-SEED.jsonl)")
    p.add_argument("--json", type=Path, help="also write the figures and failures to this file")
    p.add_argument("--rate", type=float, default=10.0, help="queries per second to each node (default 10)")
    p.add_argument(
        "--kinds",
        default=",".join(schedule.KINDS),
        help=f"the nemesis's episode kinds, comma-separated (default: all: {','.join(schedule.KINDS)})",
    )
    p.add_argument("--keep", action="store_true", help="keep the work folder (configs, logs, state)")
    p.add_argument("--check", type=Path, metavar="HISTORY", help="only check a recorded history")
    args = p.parse_args(argv)
    if args.seconds < 30:
        p.error("--seconds must be at least 30")
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    unknown = sorted(set(kinds) - set(schedule.KINDS))
    if unknown or not kinds:
        p.error(f"--kinds: {', '.join(unknown) or 'none given'}; choose from {', '.join(schedule.KINDS)}")

    if args.check:
        report = invariants.check(read_history(args.check))
    else:
        problem = preflight(args.seconds, args.seed, kinds)
        if problem:
            print(f"chaos: {problem}", file=sys.stderr)
            return 2
        history_path = args.history or ROOT / "var" / "chaos" / f"history-{args.seed}.jsonl"
        workdir = Path(tempfile.mkdtemp(prefix="gtm-chaos-"))
        prefix = wanem.run_prefix("chaos")
        world = ChaosWorld(workdir, prefix)
        history = History(history_path)
        signal.signal(signal.SIGTERM, interrupt)
        failed = True
        try:
            print(f"chaos: seed {args.seed}, {args.seconds:g} s; work folder {workdir}; history {history_path}")
            try:
                world.start()
            except AssertionError as e:  # a process that did not come up: its output says why
                print(f"chaos: the world did not come up: {e}", file=sys.stderr)
                return 2
            print("chaos: three nodes up and agreeing; the nemesis starts")
            run = ChaosRun(world, Options(seconds=args.seconds, seed=args.seed, rate=args.rate, kinds=kinds), history)
            report = run.run(workdir / "loadgen.jsonl")
            failed = not report.ok
        except KeyboardInterrupt:
            print("chaos: interrupted", file=sys.stderr)
            return 2
        finally:
            history.close()
            world.close()
            if args.keep or failed:
                print(f"chaos: work folder kept: {workdir}")
            else:
                shutil.rmtree(workdir, ignore_errors=True)
        print(f"chaos: load average at the end {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    for line in report_lines(report):
        print(line)
    if args.json:
        args.json.write_text(json.dumps({"figures": report.figures, "failures": report.failures}, indent=1))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
