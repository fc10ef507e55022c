"""Asking a running node's HTTP API from the command line."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from gtmcluster.config.load import load
from gtmcluster.config.model import Config, Member
from gtmcluster.config.problems import ConfigError

TIMEOUT = 5.0


class CliError(Exception):
    """A problem to print (one line, no traceback) before exiting with status 1."""


def load_config(path: str) -> Config:
    try:
        return load(path)
    except ConfigError as e:
        raise CliError(f"the config has problems:\n{e}") from None


def member(config: Config, name: str | None) -> Member:
    if name is None:
        if len(config.sync_group.members) == 1:
            return config.sync_group.members[0]
        names = ", ".join(m.name for m in config.sync_group.members)
        raise CliError(f"--node NAME is required; members: {names}")
    try:
        return config.member(name)
    except KeyError as e:
        raise CliError(str(e.args[0])) from None


def get(m: Member, path: str, params: dict[str, str] | None = None) -> Any:
    """GET the node's JSON resource at *path*; clear errors when it cannot be reached."""
    host = f"[{m.api.host}]" if m.api.host.version == 6 else str(m.api.host)
    url = f"http://{host}:{m.api.port}{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
            return json.load(response)
    except urllib.error.HTTPError as e:
        try:
            message = json.load(e).get("error", e.reason)
        except ValueError:
            message = e.reason
        raise CliError(f"{m.name}: {message}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise CliError(f"cannot reach {m.name}'s API at {url}: {reason} (is the node running?)") from None
