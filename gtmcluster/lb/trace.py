"""The outcome of a load-balancing decision and the trace of how it was reached."""

from __future__ import annotations

import enum
import ipaddress
import math
from dataclasses import dataclass

from gtmcluster.config.model import RecordTarget
from gtmcluster.runtime.stats import Tally
from gtmcluster.state.persistence import PersistRecord

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class Action(enum.Enum):
    ANSWER = "answer"  # answer with `addresses` (A, AAAA) or `targets` (CNAME, MX, SRV, NAPTR)
    RETURN_TO_DNS = "return_to_dns"  # answer from the static zone as if there were no wide IP
    DROP = "drop"  # send no reply
    RCODE = "rcode"  # answer with `rcode` (NXDOMAIN, SERVFAIL, REFUSED) and no records
    NOTHING = "nothing"  # every pool and method yielded nothing


@dataclass(frozen=True, slots=True)
class Step:
    """One method tried: on what, with which scores, and what it returned."""

    subject: str  # "wideip www.example.com" or "pool web"
    slot: str  # pool_lb, preferred, alternate, fallback, last_resort, persistence
    method: str
    candidates: tuple[str, ...]
    result: tuple[str, ...]
    scores: tuple[tuple[str, float], ...] = ()
    note: str = ""

    def describe(self) -> str:
        scores = ", ".join(f"{n}={s:g}" for n, s in self.scores)
        out = f"{self.subject} {self.slot}={self.method}: candidates [{', '.join(self.candidates)}]"
        if scores:
            out += f" scores [{scores}]"
        out += f" -> [{', '.join(self.result)}]" if self.result else " -> nothing"
        return out + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    addresses: tuple[IPAddress, ...] = ()
    ttl: int = 0
    pool: str | None = None
    members: tuple[str, ...] = ()
    #: RFC 7871 scope: how many leading bits of the client address this decision depends on
    scope: int = 0
    trace: tuple[Step, ...] = ()
    #: a persistence record to store (new, or refreshed)
    persist: PersistRecord | None = None
    #: the records a CNAME, MX, SRV or NAPTR answer holds (`addresses` is then empty)
    targets: tuple[RecordTarget, ...] = ()
    #: the method that produced the answer ("persistence" for a persistence hit)
    method: str = ""
    #: where in the search the answer came from: a pool's ``preferred``, ``alternate`` or
    #: ``fallback`` method, ``last_resort`` (the wide IP's last resort pool),
    #: ``persistence`` or ``failure_response`` (the per-object statistics count by it)
    slot: str = ""
    #: for Action.RCODE
    rcode: int = 0
    #: an LDNS whose paths are missing or stale: the node asks the group to probe it
    probe: str | None = None
    #: a client subnet (``10.1.2.0/24``) with no figures of its own: the node asks the group
    #: to probe it (``proximity.client_probe``)
    probe_subnet: str | None = None
    #: it took a turn of a rotation or a random draw: the next query may be answered
    #: otherwise, so it is not reused
    varies: bool = False
    #: it holds, all else equal, until this moment of the node's clock (see lb.cache)
    until: float = math.inf
    #: the proximity source whose figures decided (`SOURCES`): ``client`` (the ECS client
    #: subnet's own RTT), ``population`` (the LDNS's measured clients), ``ldns`` (the LDNS's
    #: own paths); "" when no path method decided (static methods, load, persistence)
    proximity: str = ""


#: the proximity sources a decision names (`Decision.proximity`), "" aside
SOURCES = ("client", "population", "ldns")


def tally(wideip: str, decision: Decision) -> Tally:
    """How the per-object statistics count an answer of *wideip* by *decision*."""
    return (wideip, decision.pool or "", decision.slot, decision.method, decision.members)
