"""Honest clients during a DO=1 random-name flood of a signed zone (issue 34 item 3).

    PYTHONPATH=. .venv/bin/python bench/signedflood.py [--seconds 20] [--rate QPS] [--keep]

Starts our node (twistd gtm, one process) on 127.0.0.248:5300 with bench/compare.py's zone
and wide IP, the zone signed (bench/signedmix.py: a CSK, `zones[].dnssec`). An honest client
(tests/support/pacedclient.py, from 127.0.201.1) asks the wide IP `gslb.bench.test A` every
20 ms throughout; after `--quiet` seconds, four dnsperf processes (127.0.200.1-4) flood the
node with DO=1 queries for 200,000 random names (signed NXDOMAINs) for `--seconds`, at
unlimited rate or `--rate`. Reported: the honest client's answers, loss and latency before and
during the flood, and the flood's rate, its RCODEs (TC answers show as NOERROR with no
records; dnsperf does not retry over TCP) and the node's CPU per flood query (from /proc).
Run it with PYTHONPATH at another checkout to measure that checkout's node. Not a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import comparelib as lib  # bench/ is not a package: its folder is on sys.path
import signedmix

from tests.support.pacedclient import PacedClient

NODE = lib.Endpoint.parse("127.0.0.248:5300")
HONEST = "127.0.201.1"
SOURCES = 4


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=20.0, help="seconds of flood (20)")
    p.add_argument("--quiet", type=float, default=5.0, help="seconds of the honest client alone first (5)")
    p.add_argument("--rate", type=float, help="the flood's queries/s (default: as fast as the node answers)")
    p.add_argument("--python", default=sys.executable, help="the Python that runs twistd")
    p.add_argument("--keep", action="store_true", help="keep the work folder")
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gtm-signedflood-"))
    lib.write_files(work, lib.Endpoint.parse("127.0.0.241:5300"), NODE, 8058, 1, SOURCES)
    mix = signedmix.prepare(work, SOURCES)["dnssec"]
    argv = [a.python, "-c", "from twisted.scripts.twistd import run; run()", "--nodaemon"]
    argv += [f"--logfile={work}/node.log", f"--pidfile={work}/node.pid", "gtm", f"--config={work}/cluster.yaml"]
    node = lib.Server("ours", "ours", NODE, [*argv, "--node=bench"], work / "node.log", work)
    try:
        node.start(lib.query(lib.ORIGIN, "SOA"))
        honest = PacedClient((NODE.host, NODE.port), [lib.WIDEIP], source=HONEST).start()
        begun = time.monotonic()
        time.sleep(a.quiet)  # (a bench: the honest client alone, on the clock)
        flood_start = time.monotonic()
        before = node.cpu_seconds()
        result = lib.run_dnsperf(NODE, mix, work, a.seconds, 2, 200, qps=a.rate)
        cpu = node.cpu_seconds() - before
        flood_end = time.monotonic()
        honest.stop()
        quiet, flooded = honest.figures(begun, flood_start), honest.figures(flood_start, flood_end)
        print(f"node: {' '.join(argv)} (PYTHONPATH {os.environ.get('PYTHONPATH', '')})")
        asked = f"{a.rate:g} qps" if a.rate else "unlimited"
        print(f"flood: {result.qps:,.0f} qps for {a.seconds:g} s ({asked}), rcodes {result.rcodes}")
        per_query = cpu * 1e6 / max(result.completed, 1)
        print(f"  node CPU {per_query:.1f} us per flood query ({cpu / a.seconds:.0%} of a core)")
        for label, f in (("honest client alone", quiet), ("honest client during the flood", flooded)):
            print(
                f"{label}: {f.answered} of {f.sent} answered ({f.answered / max(f.sent, 1):.1%}), lost {f.lost},"
                f" p50 {f.p50 * 1000:.2f} ms, p99 {f.p99 * 1000:.2f} ms, slowest {f.slowest * 1000:.1f} ms"
            )
        return 0
    finally:
        node.stop()
        if a.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
