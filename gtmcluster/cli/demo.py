"""`gtmcluster demo`: the local demo sync group, narrated.

Starts three GTM nodes (CNC, TEL, CMCC) from the sample config as real twistd processes on
127.0.0.11-13, with generated certificates, one small HTTP backend per data center as its
virtual server, and stand-in resolvers whose answers are delayed by data center (standing
in for the WAN, so RTT has something to measure). Then it shows, as it happens: answers by
topology, the probes and the shared proximity table, answers by RTT, the group agreeing on
its state, a backend stopped and the answers moving within the monitor's bound, and the
backend back. It prints the dashboard URLs and the logs command, and runs until Ctrl-C (or
stops after the story with --once), then stops every process it started.
"""

from __future__ import annotations

import argparse
import io
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from gtmcluster.config.problems import ConfigError
from gtmcluster.demo.prepare import DemoError, prepare
from gtmcluster.demo.processes import Processes
from gtmcluster.demo.story import Story
from gtmcluster.sync.certs import CertError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="run the local demo sync group, narrated", description=__doc__)
    p.add_argument("--config", "-c", default="etc/cluster.yaml", metavar="FILE", help="sample (default: %(default)s)")
    p.add_argument("--once", action="store_true", help="stop after the story instead of waiting for Ctrl-C")
    p.set_defaults(run=run)


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # a `kill` stops everything the same way Ctrl-C does


def run(args: argparse.Namespace) -> int:
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    signal.signal(signal.SIGTERM, _terminate)
    # Ctrl-C stops the demo even when a shell started it in the background (which ignores it)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if shutil.which("dig") is None:
        print("gtmcluster demo: 'dig' is missing; install bind9-dnsutils (make demo does)", file=sys.stderr)
        return 1
    try:
        files = prepare(Path(args.config))
    except (ConfigError, DemoError, CertError) as e:
        print(f"gtmcluster demo: {e}", file=sys.stderr)
        return 1
    procs = Processes(files.config, files.directory)
    try:
        story = Story(files, procs)
        if not story.start():
            return 1
        story.run()
        story.epilogue()
        if args.once:
            return 0
        print("Press Ctrl-C to stop.", flush=True)
        while all(p.poll() is None for p in procs.nodes.values()):
            time.sleep(0.5)
        print("a node exited; stopping", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping", flush=True)
        return 0
    finally:
        procs.stop_all()
