"""`gtmcluster check --config FILE`: validate a config; every problem, one per line."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gtmcluster.config.load import load
from gtmcluster.config.problems import ConfigError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("check", help="validate a config file", description=__doc__)
    p.add_argument("--config", "-c", required=True, metavar="FILE", help="the sync group's YAML config")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        config = load(args.config)
    except ConfigError as e:
        for problem in e.problems:
            print(problem, file=sys.stderr)
        count = len(e.problems)
        print(f"{args.config}: {count} problem{'s' if count != 1 else ''}", file=sys.stderr)
        return 1
    print(
        f"{args.config}: OK: sync group {config.sync_group.name!r}, "
        f"{len(config.sync_group.members)} members, {len(config.datacenters)} data centers, "
        f"{len(config.virtual_servers)} virtual servers, {len(config.pools)} pools, "
        f"{len(config.wideips)} wide IPs, {len(list(config.zones))} zones"
    )
    return 0
