"""A link's measured traffic as the sync group shares it, and what it means for the link.

The members in a link's data center read its traffic (`health.linktraffic`) and write it
as ``traffic/link/<link>`` {"bps_in": number, "bps_out": number, "by": member}, with a TTL
of a few intervals: every member of the group holds the same figure, so all decide alike,
and a figure nobody renews goes away. The link's *utilisation* is the larger direction over
its `bandwidth_mbps`; above its `max_utilisation` the link takes no new clients (its
servers drain: `health.status`) and the link-aware methods count what is left of its
bandwidth (`lb.links`). A value and pure policy, below the engines: no Twisted, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gtmcluster.config.links import MAX_MBPS
from gtmcluster.config.model import Link
from gtmcluster.state import keys

#: the most traffic a figure may say (the largest bandwidth a link may have): a figure
#: over it counts for nothing, as a malformed one does
MAX_BPS = MAX_MBPS * 1e6


@dataclass(frozen=True, slots=True)
class LinkLoad:
    """A link's traffic in bits a second, each way, as measured by member `by`."""

    bps_in: float
    bps_out: float
    by: str = ""

    @property
    def bps(self) -> float:
        """The busier direction (a link is full when either way is)."""
        return max(self.bps_in, self.bps_out)

    def value(self) -> dict[str, Any]:
        return {"bps_in": round(self.bps_in), "bps_out": round(self.bps_out), "by": self.by}


def from_value(value: Any) -> LinkLoad | None:
    """The load a ``traffic/link/...`` record holds, or None for a value of another shape
    (a tombstone, a newer version's, a bad peer's) or a figure over `MAX_BPS`: it counts
    for nothing."""
    if not isinstance(value, Mapping):
        return None
    numbers: list[float] = []
    for field in ("bps_in", "bps_out"):
        number = value.get(field)
        if not isinstance(number, (int, float)) or isinstance(number, bool) or not 0 <= number <= MAX_BPS:
            return None
        numbers.append(float(number))
    by = value.get("by", "")
    return LinkLoad(numbers[0], numbers[1], by if isinstance(by, str) else "")


def utilisation(link: Link, load: LinkLoad | None) -> float | None:
    """The busier direction's share of the link's bandwidth (may exceed 1), or None
    without a bandwidth or a figure."""
    if load is None or not link.bandwidth_mbps:
        return None
    return load.bps / (link.bandwidth_mbps * 1e6)


def free_bps(link: Link, load: LinkLoad | None) -> float | None:
    """Bandwidth left (bits a second, at least 0), or None without a bandwidth or a figure."""
    if load is None or not link.bandwidth_mbps:
        return None
    return max(0.0, link.bandwidth_mbps * 1e6 - load.bps)


def over_limit(link: Link, load: LinkLoad | None) -> str:
    """Why *link* takes no new clients ("link X at 93% of 1000 Mbps (max 90%)"), or "" when
    it may (under its `max_utilisation`, none set, or not measured)."""
    share = utilisation(link, load)
    if share is None or link.max_utilisation is None or share <= link.max_utilisation:
        return ""
    return f"link {link.name} at {percent(share)} of {link.bandwidth_mbps:g} Mbps (max {percent(link.max_utilisation)})"


def percent(share: float) -> str:
    """0.934 -> "93%", 0.9 -> "90%", 0.905 -> "90.5%"."""
    return f"{round(share * 100, 1):g}%"


def summary(link: Link, load: LinkLoad | None) -> dict[str, Any]:
    """What the API shows of a link's capacity and traffic (None where not known or set)."""
    share = utilisation(link, load)
    return {
        "bandwidth_mbps": link.bandwidth_mbps,
        "cost": link.cost,
        "max_utilisation": link.max_utilisation,
        "bps_in": load.bps_in if load is not None else None,
        "bps_out": load.bps_out if load is not None else None,
        "measured_by": load.by if load is not None else None,
        "utilisation": round(share, 4) if share is not None else None,
        "full": over_limit(link, load) or None,
    }


class Records(Protocol):
    """What `load_held` reads: a `state.store.Store`."""

    def get(self, key: str) -> Any: ...


def load_held(store: Records, link: str) -> LinkLoad | None:
    """The live figure *store* holds for *link*."""
    record = store.get(keys.traffic(link))
    return None if record is None else from_value(record.value)
