"""Client-subnet probe requests (issue 36, ``proximity.client_probe``): which ECS subnets the
group probes, how many per interval across the group, and which never answer.

A path method that decides for a client subnet from a trusted resolver (an ECS of /24 or
/48 at least) without that subnet's own figures names the subnet in its decision
(`lb.trace.Decision.probe_subnet`); the node that answered files a request for it here. The
request is a record ``cprobe/<subnet>`` (`state.keys.client_probe`), one at a time per
subnet across the group: every data center's probing node takes it (`proximity.clientprobe`).

**The group-wide cap.** At most ``subnets_per_interval`` requests are filed per
``interval`` by the whole group, with no coordination: the intervals are the same windows
of the wall clock on every member (window *k* is [k × interval, (k+1) × interval)), and each
member files at most its share of the window's requests. The shares are dealt like cards
to the members in name order, starting one member further each window, so they add up to
exactly ``subnets_per_interval`` and, when there are fewer requests than members, each
member's turn comes round. A member that sees no client subnet leaves its share unused
(the cap is a bound, never exceeded, rather than a quota the group fills); a member that
sees more queues nothing: the subnet asks again with its next query.

**Silent subnets.** A probing node whose every try went unanswered rewrites the request as
a *silent mark* (``"silent": true``, its run of silent rounds in ``failures``). While the
mark's back-off lasts (`backoff`: 60 s doubling to a day, as a silent LDNS's) no request is
filed for the subnet, so it costs the group's cap nothing; after it, a query files a new
request that carries the count on. The mark is a record, not a node's memory, because the
members that file must see it (else each would spend its share on subnets that never
answer), and it outlives its back-off by a day so that a subnet asked about every few hours
backs off further each time.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gtmcluster.config.rum import ClientProbe
from gtmcluster.proximity.budget import Budget
from gtmcluster.proximity.table import BACKOFF_BASE, BACKOFF_MAX
from gtmcluster.state import keys
from gtmcluster.state.record import Record
from gtmcluster.state.schema import MAX_CPROBE_FAILURES, MAX_CPROBE_TTL
from gtmcluster.state.store import Store

#: a silent mark lives this long past its back-off, carrying the count to the next request
KEEP_COUNT = BACKOFF_MAX


def backoff(failures: int) -> float:
    """Seconds a subnet silent *failures* rounds in a row is left alone."""
    if failures <= 0:
        return 0.0
    return float(min(BACKOFF_BASE * 2 ** (min(failures, MAX_CPROBE_FAILURES) - 1), BACKOFF_MAX))


def mark(node: str, failures: int) -> tuple[dict[str, Any], float]:
    """A silent mark's value and TTL after *failures* silent rounds."""
    failures = min(max(1, failures), MAX_CPROBE_FAILURES)
    return {"by": node, "failures": failures, "silent": True}, min(backoff(failures) + KEEP_COUNT, MAX_CPROBE_TTL)


def waits(record: Record | None, now: float) -> bool:
    """Whether *record* (a live ``cprobe/`` record, or None) keeps a new request from being
    filed: a request is live, or the subnet's back-off is not over."""
    if record is None:
        return False
    value = record.value
    if not value.get("silent"):
        return True
    return now - record.born < backoff(int(value.get("failures", 1)))


def carried(record: Record | None) -> int:
    """The silent rounds a new request carries on from the mark *record* (0 without one)."""
    if record is None or not record.value.get("silent"):
        return 0
    return int(record.value.get("failures", 0))


def subnet_wanted(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """*text* as the client subnet a request names (a /24 or a /48), or None."""
    try:
        network = ipaddress.ip_network(text)
    except ValueError:
        return None
    return network if network.prefixlen == keys.CLIENT_PREFIX[network.version] else None


def share(members: int, index: int, per_interval: int, window: int) -> int:
    """Requests the member at *index* (of *members*, in name order) may file in *window*:
    the window's *per_interval* requests dealt round the members from member *window*."""
    if members <= 0:
        return 0
    first = (index - window) % members  # the first request dealt to it
    return 0 if first >= per_interval else (per_interval - 1 - first) // members + 1


class ClientRequests:
    """What this node files: its share of each window's requests, never a refused subnet.

    *clock* is the wall clock the members share (within NTP's error: a member whose clock is
    far off deals in another window, which the cap does not foresee).
    """

    def __init__(
        self,
        settings: ClientProbe,
        members: Sequence[str],
        node: str,
        clock: Callable[[], float],
        request_ttl: float,
        before: ClientRequests | None = None,
    ):
        self.settings = settings
        names = sorted(set(members) | {node})
        self.members = len(names)
        self.index = names.index(node)
        self.node = node
        self.clock = clock
        self.request_ttl = request_ttl
        #: the window counted in, and the requests filed in it
        self.window: int = before.window if before is not None else -1
        self.filed: int = before.filed if before is not None else 0
        #: counters (they outlive a reload): requests filed, and those not filed because
        #: this node's share of the window was spent
        self.total: int = before.total if before is not None else 0
        self.over_share: int = before.over_share if before is not None else 0

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    def file(self, store: Store, budget: Budget, subnet: str) -> bool:
        """Ask the group to probe *subnet* (``10.1.2.0/24``), unless a request or a silent
        mark within its back-off is held, this node's share of the window is spent, or the
        subnet lies in a range the prober leaves alone (its network address is refused by
        `Budget.allowed`: reserved, special-purpose not opened by ``prober.allow``,
        ``prober.deny``, outside ``prober.only``)."""
        if not self.settings.enabled:
            return False
        key = keys.client_probe(subnet)
        held = store.get(key)
        now = self.clock()
        if waits(held, now):
            return False  # (the cheapest test first: every query of the subnet asks)
        window = int(now // self.settings.interval)
        if window != self.window:
            self.window, self.filed = window, 0
        if self.filed >= share(self.members, self.index, self.settings.subnets_per_interval, window):
            self.over_share += 1
            return False
        network = subnet_wanted(subnet)
        if network is None or budget.allowed(str(network.network_address)) is not None:
            return False
        self.filed += 1
        self.total += 1
        value = {"by": self.node, "failures": carried(held), "silent": False}
        store.put(key, value, ttl=self.request_ttl)
        return True

    def counters(self) -> Mapping[str, int]:
        return {"filed": self.total, "over_share": self.over_share}
