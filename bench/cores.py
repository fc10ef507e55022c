"""Cores (issue 19): our node's `dns_server.processes` from 1 to the core count against NSD's
`server-count` at the same number, as queries/s per process.

    .venv/bin/python bench/cores.py [--max N] [--pin-load CPU [--also-unpinned]]
                                    [--rounds 3] [--seconds 6] [--mixes static,wideip] [--json FILE]

For each N in 1..--max (default: the cores), `bench/compare.py --servers ours,nsd
--processes N --server-count N` runs in a process of its own (same schedule, warm-up and
checks as there), and the medians are put side by side: queries/s, per process, CPU µs per
query, and ours against NSD. Everything else is compare.py's (`--ecs`, `--sources`, ...:
pass them after `--`).

The limits, said with the figures: dnsperf needs a core of its own to load a server that
uses every other core. With `--pin-load`, dnsperf keeps one CPU and the servers share the
rest, so on a 2-core machine N=2 runs two processes on one core: it shows the cost of the
fan-out, not a gain. Unpinned, dnsperf and the servers share all the cores: N=cores shows
what the machine gives, with the load generator's own CPU taken out of it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--max", type=int, default=os.cpu_count() or 1, help="processes up to this many (the cores)")
    p.add_argument("--pin-load", type=int, default=None, metavar="CPU", help="dnsperf on this CPU (taskset)")
    p.add_argument("--also-unpinned", action="store_true", help="with --pin-load: unpinned as well")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--mixes", default="static,wideip")
    p.add_argument("--json", type=Path, default=None, help="write every N's figures here")
    p.add_argument("--python", default=sys.executable, help="the Python that runs compare.py")
    args, rest = p.parse_known_args(argv)
    return args, [a for a in rest if a != "--"]


def compare_argv(args: argparse.Namespace, n: int, out: Path, rest: list[str]) -> list[str]:
    argv = [args.python, str(HERE / "compare.py"), "--servers", "ours,nsd", "--processes", str(n)]
    argv += ["--server-count", str(n), "--rounds", str(args.rounds), "--seconds", str(args.seconds)]
    argv += ["--fixed-seconds", str(max(1.0, args.seconds / 3)), "--mixes", args.mixes, "--json", str(out)]
    if args.pin_load is not None:
        argv += ["--pin-load", str(args.pin_load)] + (["--also-unpinned"] if args.also_unpinned else [])
    return argv + rest


def rows(n: int, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (pinning, mix) of one run of compare.py with N processes."""
    out = []
    for where, servers in sorted(summary.items()):
        pinning, _, mix = where.partition("/")
        ours, nsd = servers.get("ours"), servers.get("nsd")
        if ours is None or nsd is None:
            continue
        out.append(
            {
                "processes": n,
                "pinning": pinning,
                "mix": mix,
                "ours_qps": ours["qps"],
                "nsd_qps": nsd["qps"],
                "ours_qps_per_process": ours["qps"] / n,
                "nsd_qps_per_process": nsd["qps"] / n,
                "ours_cpu_us": ours["cpu_us_per_query"],
                "nsd_cpu_us": nsd["cpu_us_per_query"],
                "qps_ratio": ours["qps"] / nsd["qps"] if nsd["qps"] else None,
            }
        )
    return out


def table(all_rows: list[dict[str, Any]]) -> str:
    lines = [
        "| N | load | mix | ours qps | per process | CPU µs/q | NSD qps | per process | CPU µs/q | ours/NSD qps |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in sorted(all_rows, key=lambda r: (r["pinning"], r["mix"], r["processes"])):
        ratio = f"{r['qps_ratio']:.2f}x" if r["qps_ratio"] else "-"
        lines.append(
            f"| {r['processes']} | {r['pinning']} | {r['mix']} | {r['ours_qps'] / 1000:.1f}k"
            f" | {r['ours_qps_per_process'] / 1000:.1f}k | {r['ours_cpu_us']:.1f} | {r['nsd_qps'] / 1000:.1f}k"
            f" | {r['nsd_qps_per_process'] / 1000:.1f}k | {r['nsd_cpu_us']:.1f} | {ratio} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args, rest = parse(sys.argv[1:] if argv is None else argv)
    all_rows: list[dict[str, Any]] = []
    documents = {}
    with tempfile.TemporaryDirectory(prefix="gtm-cores-") as tmp:
        for n in range(1, args.max + 1):
            out = Path(tmp) / f"n{n}.json"
            argv_n = compare_argv(args, n, out, rest)
            print(f"== {n} process{'es' if n > 1 else ''}: {' '.join(argv_n[1:])}", flush=True)
            done = subprocess.run(argv_n, check=False)
            if done.returncode != 0 or not out.exists():
                print(f"compare.py failed with {n} processes (exit {done.returncode})", file=sys.stderr)
                return 1
            document = json.loads(out.read_text())
            documents[n] = document
            all_rows += rows(n, document["summary"])
    print("\n" + table(all_rows))
    if args.pin_load is not None:
        print(
            f"\npinned: dnsperf on CPU {args.pin_load}, both servers on the other {(os.cpu_count() or 1) - 1} CPU(s);"
            " more processes than those CPUs share them."
        )
    if args.json:
        args.json.write_text(json.dumps({"rows": all_rows, "runs": documents}, indent=1))
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
