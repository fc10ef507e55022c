"""Several monitors on one virtual server: their verdicts, on one node, combined into that
node's one verdict by the server's monitor rule (``monitor_rule: all`` or
``{at_least: N}``), with a reason that names each monitor's.

The checker (`health.checker`) keeps one subject, with its own anti-flap state, per
(virtual server, monitor) and writes the combination as the node's observation record
``obs/vs/<vs>/<node>``, as it does for a server with one monitor: the sync group and the
combination of the GTM nodes' verdicts (`health.status.combine`) see one verdict per node
whatever the number of monitors. A monitor without a verdict yet counts as its
`unknown_as` says.

    http_check: down (status 503); tcp_check: up; rule all: down
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gtmcluster.config.monitoring import MonitorRule
from gtmcluster.health.flap import DOWN, UNKNOWN, UP


@dataclass(frozen=True, slots=True)
class MonitorVerdict:
    """One monitor's verdict on a server, on this node."""

    monitor: str  # its name
    state: str  # up | down | unknown
    reason: str = ""  # what its last check said
    unknown_as_up: bool = True

    @property
    def counted_up(self) -> bool:
        return self.state == UP or (self.state == UNKNOWN and self.unknown_as_up)

    def describe(self) -> str:
        if self.state == UP:
            return f"{self.monitor}: up"
        if self.state == DOWN:
            return f"{self.monitor}: down ({self.reason})" if self.reason else f"{self.monitor}: down"
        return f"{self.monitor}: unknown (no verdict yet, counted {'up' if self.unknown_as_up else 'down'})"


def decide(rule: MonitorRule, verdicts: Iterable[MonitorVerdict]) -> tuple[bool, str]:
    """Whether the server is up by *rule* given its monitors' *verdicts*, and the reason:
    each monitor's verdict, then the rule's."""
    listed = list(verdicts)
    up = sum(v.counted_up for v in listed) >= rule.needed(len(listed))
    parts = [v.describe() for v in listed]
    parts.append(f"rule {rule}: {'up' if up else 'down'}")
    return up, "; ".join(parts)


__all__ = ["MonitorVerdict", "decide"]
