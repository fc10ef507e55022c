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

from gtmcluster.cli import dashboard, ldns
from gtmcluster.cli.nodeapi import CliError, Tokens, get
from gtmcluster.config.model import Config, Member
from gtmcluster.config.problems import ConfigError
from gtmcluster.demo.prepare import DemoError, prepare
from gtmcluster.demo.processes import Processes
from gtmcluster.demo.story import Story
from gtmcluster.sync.certs import CertError


class CliOperator:
    """The story's `demo.story.Operator`: the node API, the LDNS table and the dashboard's
    address as this command's other subcommands read and print them."""

    def __init__(self, config: Config):
        self.tokens = Tokens(config)

    def get(self, member: Member, path: str, params: dict[str, str] | None = None) -> Any:
        try:
            return get(member, path, params, self.tokens)
        except CliError:
            return None

    def ldns_table(self, table: Any) -> str:
        return ldns.render(table)

    def dashboard_url(self, member: Member) -> str | None:
        return dashboard.dashboard_url(self.tokens, member)


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
        story = Story(files, procs, CliOperator(files.config))
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
