"""`gtmcluster check --config FILE`: validate a config; every problem, one per line.

With config sync on (``sync_group.config_sync``, the default) the config is also checked
as the bundle a SIGHUP or `gtmcluster config push` publishes (`groupconfig.bundle.check`):
the files it names and its zones include must be in its folder, and it holds no inline
secret. So what `check` accepts, a push is not refused for.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gtmcluster.config.load import config_value, load
from gtmcluster.config.model import Config
from gtmcluster.config.problems import ConfigError, Problem
from gtmcluster.groupconfig import bundle


def add_parser(sub: Any) -> None:
    p = sub.add_parser("check", help="validate a config file", description=__doc__)
    p.add_argument("--config", "-c", required=True, metavar="FILE", help="the sync group's YAML config")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        config = load(args.config)
        problems = as_shared(args.config, config)
    except ConfigError as e:
        problems = e.problems
    if problems:
        for problem in problems:
            print(problem, file=sys.stderr)
        count = len(problems)
        print(f"{args.config}: {count} problem{'s' if count != 1 else ''}", file=sys.stderr)
        return 1
    print(
        f"{args.config}: OK: sync group {config.sync_group.name!r}, "
        f"{len(config.sync_group.members)} members, {len(config.datacenters)} data centers, "
        f"{len(config.virtual_servers)} virtual servers, {len(config.pools)} pools, "
        f"{len(config.wideips)} wide IPs, {len(list(config.zones))} zones"
    )
    return 0


def as_shared(path: str, config: Config) -> list[Problem]:
    """Why the config at *path* (read as *config*) cannot be published to its group, when
    config sync is on."""
    if not config.sync_group.settings.config_sync:
        return []
    # (what `load` read: not parsed again)
    made, raw = bundle.read_and_make(path, 1, 0, config.sync_group.members[0].name, 0.0, parse=config_value)
    return bundle.check(made, raw)
