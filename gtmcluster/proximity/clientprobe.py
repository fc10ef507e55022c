"""Probing client subnets on request (issue 36, ``proximity.client_probe``): each data
center measures its own round trip to a subnet a request names, and writes it as that
subnet's client figure from its data center (``client/<subnet>/<dc>``, source "probe").

A request (``cprobe/<subnet>``, filed by `proximity.clientrequests`) is taken, in each data
center, by one node: among the data center's members this node hears from (and itself),
the one a hash of the subnet picks, so a data center with two members probes a subnet once.
That node probes unless its data center holds a figure for the subnet already.

It tries a few addresses of the subnet, one probe each (`probe.hosts.HostProber`: ICMP
echo, then TCP to 443 and 80): the address of it that answered this node before, if any
(kept in memory only, for `REMEMBERED` subnets at most: no host address is written to the
store, which knows clients by their /24 or /48), then the subnet's first host (``.1``, or
``::1`` of the /48) and, for IPv4, ``.254``. An address the prober may not probe (`proximity.budget.Budget.allowed`:
reserved ranges, ``prober.allow``/``deny``/``only``) is skipped. The first answer is the
figure (merged into the record as a sample, `proximity.clients.merge_sample`). When none
answers, the request is rewritten as the subnet's silent mark, which holds further
requests back for its back-off (`proximity.clientrequests`).

Every probe takes its start and its in-flight slot from the LDNS prober's budget
(`prober.max_per_second`, `max_in_flight`): client subnets and LDNSes share one rate. At
most `MAX_WAITING` subnets wait for it; past that a request is ignored (counted): the group
files at most ``subnets_per_interval`` per interval, so that happens only when the prober
is far slower than the requests.
"""

from __future__ import annotations

import ipaddress
import zlib
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from twisted.application.service import Service
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from gtmcluster.config.model import Config
from gtmcluster.config.rum import Rum
from gtmcluster.proximity.budget import Budget
from gtmcluster.proximity.clientrequests import mark, subnet_wanted
from gtmcluster.proximity.clients import merge_sample
from gtmcluster.proximity.scheduler import Prober, Sample
from gtmcluster.state import keys
from gtmcluster.state.record import Record
from gtmcluster.state.store import Store

log = Logger()

#: the hosts of a subnet tried (after the one that answered before), by IP version
HOSTS = {4: (1, 254), 6: (1,)}
#: subnets waiting for the budget at most
MAX_WAITING = 1024
#: subnets whose answering address this node remembers (least recently used forgotten)
REMEMBERED = 10_000
#: a probed figure lives this long without a ``rum`` section (`config.rum.Rum.sample_ttl`)
DEFAULT_SAMPLE_TTL = Rum(MappingProxyType({})).sample_ttl


@dataclass(slots=True)
class _Job:
    """One subnet being probed: the addresses left to try and the silent rounds so far."""

    subnet: str
    addresses: list[str]
    failures: int


#: the scheduler's name among the node's services (for /metrics)
SERVICE_NAME = "client probes"


@dataclass(slots=True)
class ClientProbeStats:
    requests: int = 0  # requests taken (this node's to probe)
    probes: int = 0  # probes started (one per address tried)
    measured: int = 0  # subnets that answered (a figure written)
    silent: int = 0  # subnets none of whose addresses answered (a mark written)
    ignored: int = 0  # requests not taken: MAX_WAITING subnets were waiting


def settings(config: Config, node: str) -> tuple[list[str], float, bool]:
    """`ClientProbeScheduler.configure`'s arguments from *config*, for member *node*."""
    datacenter = config.member(node).datacenter
    members = [m.name for m in config.sync_group.members if m.datacenter == datacenter]
    sample_ttl = float(config.rum.sample_ttl if config.rum is not None else DEFAULT_SAMPLE_TTL)
    return members, sample_ttl, config.proximity.client_probe.enabled


def candidates(subnet: str, remembered: str | None) -> list[str]:
    """The addresses of *subnet* to try, in order: *remembered* (the one that answered
    before), then `HOSTS` (where routers usually are: ``.1`` and ``.254`` of a /24, ``::1``
    of a /48)."""
    network = subnet_wanted(subnet)
    if network is None:
        return []
    hosts = [str(network.network_address + n) for n in HOSTS[network.version]]
    if remembered is None or ipaddress.ip_address(remembered) not in network:
        return hosts
    return [remembered, *(h for h in hosts if h != remembered)]


class ClientProbeScheduler(Service):
    """Takes client probe requests for this node's data center and probes them.

    *budget* gives the LDNS prober's budget (it is replaced on a reload); *datacenter_members*
    the members of this node's data center; *live* the members heard from now (None: all).
    """

    def __init__(
        self,
        store: Store,
        budget: Callable[[], Budget],
        prober: Prober,
        node: str,
        datacenter: str,
        reactor: IReactorTime,
        datacenter_members: Sequence[str],
        sample_ttl: float,
        enabled: bool = True,
        live: Callable[[], Iterable[str]] | None = None,
    ):
        self.store = store
        self.budget = budget
        self.prober = prober
        self.node = node
        self.datacenter = datacenter
        self.reactor = reactor
        self.live = live
        self.configure(datacenter_members, sample_ttl, enabled)
        self.waiting: deque[_Job] = deque()
        self.queued: set[str] = set()
        #: subnet -> the address of it that answered this node last
        self.remembered: OrderedDict[str, str] = OrderedDict()
        self.stats = ClientProbeStats()
        self._incoming: list[tuple[str, int]] = []
        self._taking: Any = None
        self._wake: Any = None
        store.subscribe(self._changed)

    def configure(self, datacenter_members: Sequence[str], sample_ttl: float, enabled: bool) -> None:
        """New settings: probes in flight finish."""
        self.members = sorted(set(datacenter_members) | {self.node})
        self.sample_ttl = sample_ttl
        self.enabled = enabled

    def reconfigure(self, config: Config) -> None:
        """The settings of *config* (a reload)."""
        self.configure(*settings(config, self.node))

    def _changed(self, record: Record) -> None:
        """A request record: noted, and taken on the next reactor turn (it may have been
        written while answering a query: no socket is opened inside a datagram handler)."""
        if not record.key.startswith(keys.CPROBE) or not self.running or not self.enabled:
            return
        value = record.value
        if value is None or value.get("silent") or not record.live(self.store.clock()):
            return
        subnet = keys.client_probe_subnet(record.key)
        if subnet is None:
            return
        self._incoming.append((subnet, int(value.get("failures", 0))))
        if self._taking is None:
            self._taking = self.reactor.callLater(0, self._take)

    def _take(self) -> None:
        self._taking = None
        incoming, self._incoming = self._incoming, []
        for subnet, failures in incoming:
            self.want(subnet, failures)

    def mine(self, subnet: str) -> bool:
        """Whether this node probes *subnet* for its data center."""
        members = self.members
        if len(members) > 1 and self.live is not None:
            heard = set(self.live())
            members = [m for m in members if m == self.node or m in heard]
        return members[zlib.crc32(subnet.encode()) % len(members)] == self.node

    def want(self, subnet: str, failures: int = 0) -> None:
        """Probe *subnet* soon, unless it is not this node's to probe, its figure from this
        data center is held, or it may not be probed."""
        if subnet in self.queued or subnet_wanted(subnet) is None or not self.mine(subnet):
            return
        if self.store.get(keys.client(subnet, self.datacenter)) is not None:
            return
        addresses = candidates(subnet, self.remembered.get(subnet))
        if self.budget().allowed(str(ipaddress.ip_network(subnet).network_address)) is not None:
            return
        if len(self.waiting) >= MAX_WAITING:
            self.stats.ignored += 1
            return
        self.stats.requests += 1
        self.queued.add(subnet)
        self.waiting.append(_Job(subnet, addresses, failures))
        self._drain()

    def _drain(self) -> None:
        self._wake = None
        budget = self.budget()
        while self.waiting and self.running:
            job = self.waiting[0]
            while job.addresses and budget.allowed(job.addresses[0]) is not None:
                job.addresses.pop(0)  # (a deny finer than the subnet)
            if not job.addresses:
                self.waiting.popleft()
                self._silent(job)
                continue
            if not budget.take():
                break
            self.waiting.popleft()
            self._start(job, job.addresses.pop(0))
        if self.waiting and self.running and self._wake is None:
            self._wake = self.reactor.callLater(max(0.01, budget.next_start()), self._drain)

    def _start(self, job: _Job, address: str) -> None:
        self.stats.probes += 1
        d = self.prober.probe(ipaddress.ip_address(address))

        def measured(sample: Sample) -> None:
            if sample.ok:
                self._answered(job.subnet, address, sample.rtt_us)
            elif self.remembered.get(job.subnet) == address:
                del self.remembered[job.subnet]

        def finished(result: Any) -> None:
            self.budget().done()
            if job.subnet in self.queued:  # (not answered)
                if job.addresses:
                    self.waiting.appendleft(job)  # its next address, before the other subnets
                else:
                    self._silent(job)
            if self.waiting:
                self._drain()

        d.addCallback(measured)
        d.addErrback(lambda f: log.failure("probing client subnet {subnet} failed", f, subnet=job.subnet))
        d.addBoth(finished)

    def _answered(self, subnet: str, address: str, rtt_us: int) -> None:
        self.queued.discard(subnet)
        self.stats.measured += 1
        self.remembered[subnet] = address
        self.remembered.move_to_end(subnet)
        while len(self.remembered) > REMEMBERED:
            self.remembered.popitem(last=False)
        key = keys.client(subnet, self.datacenter)
        held = self.store.get(key)
        value = merge_sample(None if held is None else held.value, rtt_us, "probe", self.node)
        self.store.put(key, value, ttl=self.sample_ttl)

    def _silent(self, job: _Job) -> None:
        """No address of the subnet answered: its mark holds requests back (`mark`)."""
        self.queued.discard(job.subnet)
        self.stats.silent += 1
        value, ttl = mark(self.node, job.failures + 1)
        self.store.put(keys.client_probe(job.subnet), value, ttl=ttl)

    def stopService(self) -> None:
        super().stopService()
        for call in (self._wake, self._taking):
            if call is not None and call.active():
                call.cancel()
        self._wake = self._taking = None
        self._incoming = []
        self.prober.close()
