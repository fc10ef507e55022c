"""Path records: one data center's measured path to one LDNS, and what the methods see.

A path lives at ``path/<ldns>/<datacenter>``, written by the node of that data center that
probed it, replicated like any record. Its value holds the smoothed RTT and the last one
(microseconds), the completion rate over the last attempts (in 1/10000), hops (0 when
unknown), the protocol that answered, and the run of consecutive failures (for backoff).
A path's age is its record's age, which every node counts on its own clock.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gtmcluster.config.model import Prober
from gtmcluster.lb import linkload
from gtmcluster.lb.linkload import LinkLoad
from gtmcluster.proximity.clients import Chosen, ClientSources, IPAddress
from gtmcluster.state import keys, values
from gtmcluster.state.record import Record
from gtmcluster.state.store import Store

#: smoothing of the RTT: new = ALPHA * sample + (1 - ALPHA) * old
ALPHA = 0.3
#: attempts the completion rate is counted over
WINDOW = 10
#: a path that failed this many times in a row is probed again only after a backoff
BACKOFF_BASE = 60.0
BACKOFF_MAX = 86400.0

PATH_KIND = "path"


@dataclass(frozen=True, slots=True)
class PathInfo:
    ldns: str
    datacenter: str
    rtt_us: int  # smoothed; 0 while the LDNS never answered
    last_rtt_us: int
    hops: int  # 0 when unknown
    completion: int  # replies per 10000 attempts over the last WINDOW attempts
    protocol: str  # the protocol that answered last
    failures: int  # consecutive failed probes
    window: str  # the last attempts, oldest first: "1" replied, "0" did not
    by: str  # the node that measured it
    age: float  # seconds since it was measured (this node's clock)

    @property
    def usable(self) -> bool:
        return self.rtt_us > 0 and self.completion > 0

    def value(self) -> dict[str, Any]:
        return {
            "rtt": self.rtt_us,
            "last_rtt": self.last_rtt_us,
            "hops": self.hops,
            "completion": self.completion,
            "protocol": self.protocol,
            "failures": self.failures,
            "window": self.window,
            "by": self.by,
        }

    def backoff(self) -> float:
        """Seconds to wait before probing again after consecutive failures."""
        if self.failures == 0:
            return 0.0
        return float(min(BACKOFF_BASE * 2 ** (self.failures - 1), BACKOFF_MAX))


class PathValue(values.Compact):
    """A path record's value as the store keeps it: `PathInfo.value`'s eight fields in
    slots, its strings shared (see state.values). It reads, compares and travels as that
    dict; only a dict of exactly these fields, integers and strings, takes this form."""

    __slots__ = ("by", "completion", "failures", "hops", "last_rtt", "protocol", "rtt", "window")
    FIELDS = ("rtt", "last_rtt", "hops", "completion", "protocol", "failures", "window", "by")

    def __init__(
        self, rtt: int, last_rtt: int, hops: int, completion: int, protocol: str, failures: int, window: str, by: str
    ) -> None:
        self.rtt = rtt
        self.last_rtt = last_rtt
        self.hops = hops
        self.completion = completion
        self.protocol = protocol
        self.failures = failures
        self.window = window
        self.by = by

    @classmethod
    def of(cls, value: dict[str, Any]) -> PathValue | None:
        """The compact form of *value*, or None when it is not exactly a path value."""
        if len(value) != len(cls.FIELDS):
            return None
        try:
            rtt, last_rtt, hops, completion = value["rtt"], value["last_rtt"], value["hops"], value["completion"]
            protocol, failures, window, by = value["protocol"], value["failures"], value["window"], value["by"]
        except KeyError:
            return None
        if not (
            type(rtt) is type(last_rtt) is type(hops) is type(completion) is type(failures) is int
            and type(protocol) is type(window) is type(by) is str
        ):
            return None
        return cls(
            rtt,
            rtt if last_rtt == rtt else last_rtt,  # one object for both, as after one probe
            hops,
            values.shared(completion),
            values.shared_text(protocol),
            failures,
            values.shared_text(window),
            values.shared_text(by),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "rtt": self.rtt,
            "last_rtt": self.last_rtt,
            "hops": self.hops,
            "completion": self.completion,
            "protocol": self.protocol,
            "failures": self.failures,
            "window": self.window,
            "by": self.by,
        }

    def __getitem__(self, key: str) -> Any:
        if key not in _PATH_FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.FIELDS)

    def __len__(self) -> int:
        return len(self.FIELDS)


_PATH_FIELDS = frozenset(PathValue.FIELDS)
values.register(keys.PATH, PathValue.of)


def from_record(record: Record, now: float) -> PathInfo | None:
    parts = keys.path_parts(record.key)
    if parts is None:
        return None
    ldns, datacenter = parts
    v = record.value
    if type(v) is PathValue:
        return PathInfo(
            ldns,
            datacenter,
            v.rtt,
            v.last_rtt,
            v.hops,
            v.completion,
            v.protocol,
            v.failures,
            v.window,
            v.by,
            now - record.born,
        )
    try:
        return PathInfo(
            ldns,
            datacenter,
            int(v["rtt"]),
            int(v["last_rtt"]),
            int(v["hops"]),
            int(v["completion"]),
            str(v["protocol"]),
            int(v["failures"]),
            str(v["window"]),
            str(v["by"]),
            now - record.born,
        )
    except (KeyError, TypeError, ValueError):
        return None  # not a path record this version understands


def updated(
    previous: PathInfo | None, ok: bool, rtt_us: int, hops: int, protocol: str, by: str, ldns: str, dc: str
) -> PathInfo:
    """The path after one more probe (a reply of *rtt_us*, or none)."""
    window = ((previous.window if previous else "") + ("1" if ok else "0"))[-WINDOW:]
    completion = round(window.count("1") * 10000 / len(window))
    if ok:
        old = previous.rtt_us if previous and previous.rtt_us else 0
        smoothed = rtt_us if not old else round(ALPHA * rtt_us + (1 - ALPHA) * old)
        return PathInfo(
            ldns,
            dc,
            max(1, smoothed),
            max(1, rtt_us),
            hops or (previous.hops if previous else 0),
            completion,
            protocol,
            0,
            window,
            by,
            0.0,
        )
    return PathInfo(
        ldns,
        dc,
        previous.rtt_us if previous else 0,
        previous.last_rtt_us if previous else 0,
        previous.hops if previous else 0,
        completion,
        previous.protocol if previous else "",
        (previous.failures if previous else 0) + 1,
        window,
        by,
        0.0,
    )


class Measurements:
    """What the dynamic methods read: paths to the asking LDNS and servers' load figures.

    `ready` stays false until the node has reconciled with its peers after starting, so a
    restarted node does not decide from an empty table.
    """

    def __init__(
        self,
        store: Store,
        prober: Prober,
        ready: Callable[[], bool],
        probing_datacenters: frozenset[str] = frozenset(),
        clients: ClientSources | None = None,
    ):
        self.store = store
        self.prober = prober
        self._ready = ready
        #: the client sources before the LDNS's paths (`proximity.clients`); None: off
        self.clients = clients if clients is not None and clients.on else None
        #: data centers with a GTM to measure from: until each has measured a path to an
        #: LDNS, the path-based methods do not compare (see lb.dynamic)
        self.probing_datacenters = probing_datacenters

    @property
    def ready(self) -> bool:
        return self._ready()

    def path(self, ldns: str, datacenter: str) -> PathInfo | None:
        """The path from *datacenter* to *ldns*, if measured within path_ttl."""
        record = self.store.get(keys.path(ldns, datacenter))
        if record is None:
            return None
        info = from_record(record, self.store.clock())
        if info is None or info.age > self.prober.path_ttl:
            return None
        return info

    def client_paths(
        self, address: IPAddress, prefix: int, from_ecs: bool, ldns: str, datacenters: Iterable[str]
    ) -> Chosen | None:
        """The figures of the client source that decides for this client, if one does
        before the LDNS's own paths (`proximity.clients.ClientSources.paths`)."""
        clients = self.clients
        return None if clients is None else clients.paths(address, prefix, from_ecs, ldns, datacenters)

    def stale(self, info: PathInfo) -> bool:
        return info.age > self.prober.probe_interval

    def metrics(self, vs: str) -> Mapping[str, float] | None:
        record = self.store.get(keys.load_figures(vs))
        if record is None or not isinstance(record.value, dict):
            return None
        return {k: float(v) for k, v in record.value.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}

    def link_load(self, link: str) -> LinkLoad | None:
        """A link's measured traffic (`lb.linkload`), if a live figure is held."""
        record = self.store.get(keys.traffic(link))
        return None if record is None else linkload.from_value(record.value)

    def paths(
        self, ldns: str | None = None, datacenters: Iterable[str] = (), limit: int | None = None
    ) -> list[PathInfo]:
        """The paths held, for the ldns command and the API: to one LDNS, from each of
        *datacenters* (a lookup each), or the first of the whole table in the store's
        order, up to *limit* paths (a table may hold millions), sorted by address."""
        now = self.store.clock()
        if ldns:
            held = (self.store.get(keys.path(ldns, dc)) for dc in sorted(set(datacenters)))
            records: Iterable[Record] = (r for r in held if r is not None)
        else:
            records = itertools.islice(self.store.scan(keys.PATH), limit)
        out = [info for r in records if (info := from_record(r, now)) is not None]
        return sorted(out, key=lambda p: (_address_order(p.ldns), p.datacenter))


def _address_order(text: str) -> tuple[int, int]:
    try:
        a = ipaddress.ip_address(text)
    except ValueError:
        return (9, 0)
    return (a.version, int(a))
