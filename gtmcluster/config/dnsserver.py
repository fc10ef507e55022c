"""The config's ``dns_server`` section and the zones' ``transfer`` settings, as values: the
answering limits, response rate limiting, the query log, zone transfers and their TSIG keys
(read by `config.load`, `config.querylog`, `config.transfer`; used by `gtmcluster.dns`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gtmcluster.config.addresses import IPAddress, IPNetwork


@dataclass(frozen=True, slots=True)
class RateLimit:
    """Response rate limiting of UDP answers per client prefix (see `dns.ratelimit`)."""

    responses_per_second: int = 0  # per prefix; 0 turns rate limiting off
    window: float = 5.0  # seconds the rate is averaged over (the burst is rate x window)
    slip: int = 2  # every slip-th limited answer goes out truncated (TC); 0: all dropped
    ipv4_prefix: int = 24
    ipv6_prefix: int = 56
    exempt: tuple[IPNetwork, ...] = ()  # clients never limited
    table_size: int = 100_000  # prefixes tracked at most (bounded memory)


@dataclass(frozen=True, slots=True)
class QueryLog:
    """``dns_server.query_log``: every query and its answer, in a dnstap file rotated by size
    (`gtmcluster.querylog`, docs/query-log.md)."""

    path: Path
    format: str = "dnstap"
    max_bytes: int = 100_000_000  # a file is rotated before it grows past this
    keep: int = 5  # rotated files kept: path.1 (the newest) to path.<keep>
    queue: int = 50_000  # queries waiting to be written at most; past it they are dropped (counted)
    #: the folder the log may write in (``log_dir``, or ``query_log.dir``): *path* is inside
    #: it; None: *path*'s own folder
    dir: Path | None = None


@dataclass(frozen=True, slots=True)
class TransferLimits:
    """``dns_server.transfer``: the limits of zone transfers out (AXFR, IXFR over TCP) for all
    zones together (`dns.xfrslots`, docs/zone-transfer.md)."""

    #: transfers being sent at once, from all sources (BIND's ``transfers-out`` default)
    max_in_flight: int = 10
    #: transfers being sent at once to one source address (BIND's ``transfers-per-ns``)
    max_per_source: int = 2
    #: seconds a transfer may go without the client taking what was sent (its send buffer
    #: not drained) before the connection is cut
    stall_timeout: float = 30.0
    #: the largest clock difference a TSIG-signed request is accepted with, whatever the
    #: fudge it states (RFC 8945 recommends a fudge of 300 s)
    tsig_max_fudge: int = 300


#: ``dns_server.tcp_max_per_source`` by default: TCP connections one source (an IPv4 address,
#: an IPv6 /64) may hold at once, over all the DNS addresses (`dns.tcpclients`)
TCP_MAX_PER_SOURCE = 64


@dataclass(frozen=True, slots=True)
class DNSServer:
    """Settings of the authoritative DNS listeners."""

    udp_payload_size: int  # the most a UDP response may carry with EDNS (RFC 6891 6.2.5)
    tcp_idle_timeout: float
    #: TCP connections on each DNS address at most; past it the one idle the longest there goes
    tcp_max_clients: int
    #: processes answering UDP queries (the node itself and processes - 1 workers sharing
    #: its DNS addresses with SO_REUSEPORT)
    processes: int = 1
    #: seconds a TCP client has to finish a message it has started (trickled bytes do not
    #: extend it, as they extend the idle timeout)
    tcp_message_timeout: float = 5.0
    rate_limit: RateLimit = RateLimit()
    #: the answer to CH TXT version.bind; None (the default): such queries are refused
    version: str | None = None
    #: resolvers whose EDNS client subnet option is used (topology, persistence); from any
    #: other source the option is echoed with scope 0 and the query decided by its address
    ecs_trusted: tuple[IPNetwork, ...] = ()
    #: the query log; None (the default): off
    query_log: QueryLog | None = None
    #: zone transfers out: caps, the stall deadline, the TSIG time window
    transfer: TransferLimits = TransferLimits()
    #: TCP connections one source may hold on all the DNS addresses together; past it the
    #: source's own connection idle the longest goes (never another source's)
    tcp_max_per_source: int = TCP_MAX_PER_SOURCE


@dataclass(frozen=True)
class TSIGKey:
    """A shared secret from ``tsig_keys`` (RFC 8945), for zone transfers and NOTIFY."""

    name: str  # the key name as configured: also its DNS name in the TSIG record
    algorithm: str  # a dnspython algorithm name, e.g. "hmac-sha256."
    secret: bytes = field(repr=False)


@dataclass(frozen=True)
class ZoneTransfer:
    """``zones[].transfer``: who may pull the zone by AXFR/IXFR, whom to NOTIFY, which key."""

    allow: tuple[IPNetwork, ...] = ()
    notify: tuple[tuple[IPAddress, int], ...] = ()
    tsig: TSIGKey | None = None
