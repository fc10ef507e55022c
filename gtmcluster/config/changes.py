"""What a reload changes: the definitions that differ between two configs, by name; and
what a running node cannot take (`restart_needed`).

Comparing thousands of definitions takes a while (tens of milliseconds at 5,000 virtual
servers), so a reload compares in the thread that read the new config, and the parts that
react in the reactor thread (health checks, health evaluation) look names up instead: what
they do costs what changed, not the size of the config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gtmcluster.config.model import Config


@dataclass(frozen=True)
class Changes:
    """The names of the virtual servers and links added, removed or changed."""

    virtual_servers: frozenset[str]
    links: frozenset[str]


def between(old: Config, new: Config) -> Changes:
    """What differs from *old* to *new*."""
    return Changes(_differ(old.virtual_servers, new.virtual_servers), _differ(old.links, new.links))


def _differ(old: Mapping[str, object], new: Mapping[str, object]) -> frozenset[str]:
    changed = {name for name, definition in new.items() if old.get(name) != definition}
    changed.update(name for name in old if name not in new)
    return frozenset(changed)


def restart_needed(old: Config, new: Config, node: str) -> list[str]:
    """Changes a running node cannot take (its sockets and credentials are set at start)."""
    problems = []
    names = [m.name for m in new.sync_group.members]
    if node not in names:
        return [f"{node} is no longer a member of the sync group: stop it instead"]
    before, after = old.member(node), new.member(node)
    for what in ("dns", "peer", "api", "probe_source"):
        if getattr(before, what) != getattr(after, what):
            problems.append(f"{node}'s {what} address changed: restart the node to apply it")
    if old.api.tls != new.api.tls:
        problems.append("api.tls changed: restart the node to switch its API between HTTP and HTTPS")
    if old.sync_group.name != new.sync_group.name:
        problems.append("the sync group's name changed: restart every node")
    if (len(old.sync_group.members) > 1) != (len(new.sync_group.members) > 1):
        problems.append("the group changed between one member and several: restart to open or close the peer port")
    if old.dns_server.processes != new.dns_server.processes:
        problems.append("dns_server.processes changed: restart the node to start or stop answering processes")
    if old.log_dir != new.log_dir:
        problems.append("log_dir changed: restart the node to write its log there")
    return problems
