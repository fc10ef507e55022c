"""The loaded configuration's health checks and load figures' sources: what a monitor
checks and how its verdicts combine (`health.checker`, `health.monitors`), where a body's
load figures are (`probe.loadread`), and where a link's traffic is read
(`health.linktraffic`). Built by `config.load` like the rest of `config.model`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gtmcluster.config.addresses import HostPort, IPAddress


@dataclass(frozen=True, slots=True)
class TcpCheck:
    """Connect; optionally send bytes and expect bytes in the reply (send/receive), or
    `reject` bytes: the check fails when the reply holds them, and passes when a reply
    ends (the peer closes, or the timeout comes) without them."""

    send: bytes | None = None
    expect: bytes | None = None
    reject: bytes | None = None


@dataclass(frozen=True, slots=True)
class HttpCheck:
    """One HTTP/1.0 request; the status and (optionally) the body decide."""

    tls: bool
    method: str = "GET"
    path: str = "/"
    host: str | None = None  # Host header (and TLS server name); default: the address
    expect_status: tuple[int, ...] = (200,)
    expect_body: str | None = None  # a substring of the body
    expect_body_regex: str | None = None
    max_response_bytes: int = 65536
    verify_tls: bool = True
    ca_file: Path | None = None  # trust these CAs instead of the system's
    #: the body also gives the server's load figures, for the load-based methods
    load: LoadSource | None = None
    #: the check fails when the body matches (F5's ``reverse``)
    reject_body_regex: str | None = None


#: the statuses of a class (``2xx``) in `HttpCheck.expect_status`
STATUS_CLASSES = {f"{n}xx": range(n * 100, n * 100 + 100) for n in range(1, 6)}


def status_classes(codes: tuple[int, ...] | list[int]) -> list[int | str]:
    """*codes* with each whole class written as ``2xx``: ``[200, ..., 299, 304]`` ->
    ``["2xx", 304]`` (the config's form, and the reasons')."""
    present = set(codes)
    out: list[int | str] = []
    for name, whole in STATUS_CLASSES.items():
        if present.issuperset(whole):
            out.append(name)
            present.difference_update(whole)
    return out + sorted(present)


@dataclass(frozen=True, slots=True)
class Sample:
    """Prometheus samples to read: those named `metric` with every label in `labels`."""

    metric: str
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class LoadSource:
    """Where a body's load figures are (docs/load-sources.md; read by `probe.loadread`).

    `format`: prometheus, haproxy (stats CSV), nginx (stub_status) or json. Prometheus
    names its samples: gauges summed for `connections` and `capacity`, counters summed for
    `packets` and `bytes` (their rates give packets_per_second and kbps). HAProxy reads the
    row of `proxy` and `server`. `capacity` set as a number is used as given.
    """

    format: str
    connections: tuple[Sample, ...] = ()
    capacity: tuple[Sample, ...] = ()
    packets: tuple[Sample, ...] = ()
    bytes: tuple[Sample, ...] = ()
    proxy: str = ""
    server: str = "BACKEND"
    fixed_capacity: float | None = None


@dataclass(frozen=True, slots=True)
class UdpCheck:
    """Send a datagram; any reply (or one containing `expect`) is a success. With
    `up_without_reply`, so is no reply within the timeout (only a reply without `expect`,
    or an ICMP port unreachable, fails)."""

    send: bytes
    expect: bytes | None = None
    up_without_reply: bool = False


@dataclass(frozen=True, slots=True)
class DnsCheck:
    """Ask the server a question; the rcode (and optionally an address) decide."""

    query_name: str
    query_type: int = 1
    expect_rcode: int = 0
    expect_address: IPAddress | None = None


@dataclass(frozen=True, slots=True)
class IcmpCheck:
    """An echo request; the reply is the success."""


Check = TcpCheck | HttpCheck | UdpCheck | DnsCheck | IcmpCheck


@dataclass(frozen=True, slots=True)
class HealthRule:
    """How observations of several GTM nodes combine: up if `any`, `all`, or at least
    `quorum` of them see it up."""

    kind: str  # "any" | "all" | "quorum"
    quorum: int = 1

    def __str__(self) -> str:
        return f"quorum {self.quorum}" if self.kind == "quorum" else self.kind


@dataclass(frozen=True, slots=True)
class Monitor:
    """A health monitor: what to check, how often, and the anti-flap thresholds."""

    name: str
    type: str
    interval: float
    timeout: float
    up_after: int  # consecutive successes before a down (or unknown) target is up
    down_after: int  # consecutive failures before an up (or unknown) target is down
    check: Check
    rule: HealthRule = HealthRule("any")
    unknown_as_up: bool = True  # before the first verdict
    port: int | None = None  # check this port instead of the virtual server's


@dataclass(frozen=True, slots=True)
class SnmpSource:
    """A link's traffic from an interface's 64-bit octet counters (ifHCInOctets and
    ifHCOutOctets of interface `if_index`), read with SNMP v2c."""

    host: IPAddress
    port: int
    community: str
    if_index: int

    def __str__(self) -> str:
        return f"snmp {HostPort(self.host, self.port)} ifIndex {self.if_index}"


@dataclass(frozen=True, slots=True)
class HttpCounterSource:
    """A link's traffic from two octet counters in a page fetched over HTTP(S): a Prometheus
    exposition (`received` and `sent` name the samples, summed) or HAProxy's stats CSV (the
    ``bin`` and ``bout`` of the row `proxy`/`server`); read by `probe.httpcounters`."""

    url: str  # http:// or https://, the host an IP address
    load: LoadSource  # the format, and for haproxy its row
    received: tuple[Sample, ...] = ()  # prometheus: octets received (ifHCInOctets' like)
    sent: tuple[Sample, ...] = ()  # and sent
    max_response_bytes: int = 4 * 1024 * 1024  # the most of a response read (headers too)

    def __str__(self) -> str:
        return f"{self.load.format} {self.url}"


@dataclass(frozen=True, slots=True)
class TrafficSource:
    """Where and how often a link's traffic is read (by the members of its data center)."""

    source: SnmpSource | HttpCounterSource
    interval: float = 10.0
    timeout: float = 2.0


@dataclass(frozen=True, slots=True)
class MonitorRule:
    """How the verdicts of a virtual server's monitors, each on one node, combine into that
    node's verdict (`gtmcluster.health.monitors`): up if `all` of them say up
    (`at_least` None), or at least `at_least` of them."""

    at_least: int | None = None

    def needed(self, count: int) -> int:
        """How many of *count* monitors must say up."""
        return count if self.at_least is None else self.at_least

    def __str__(self) -> str:
        return "all" if self.at_least is None else f"at_least {self.at_least}"
