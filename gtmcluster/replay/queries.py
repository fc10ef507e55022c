"""The queries of query log files (dnstap, `gtmcluster.querylog`), as the replay needs them:
who asked (the LDNS address, the client subnet option sent), what (name, type), when, and
what the node that logged them decided (the extra field)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gtmcluster.dns import names, wire
from gtmcluster.dns.names import Name
from gtmcluster.querylog import dnstap
from gtmcluster.querylog.read import records

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class BadLog(Exception):
    """A query log that cannot be read (missing, unreadable, not a dnstap file)."""


@dataclass(frozen=True, slots=True)
class LoggedQuery:
    """One logged query."""

    time: float  # when it was read (seconds since the epoch)
    ldns: IPAddress  # the address it came from
    qname: Name
    qtype: int
    ecs: wire.ClientSubnet | None  # the client subnet option it carried
    #: what decided the logged answer (None: no wide IP did, or no extra field)
    decided: dnstap.Decided | None = None

    @property
    def name(self) -> str:
        return names.to_text(self.qname).rstrip(".") if self.qname else "."

    @property
    def subnet(self) -> str | None:
        """The client subnet sent, as text ("198.51.100.0/24"), or None."""
        if self.ecs is None or self.ecs.source_prefix == 0:
            return None
        return str(self.ecs.network)

    @property
    def client(self) -> str:
        """Who asked, for a report: the LDNS address, with the client subnet it sent."""
        subnet = self.subnet
        return str(self.ldns) if subnet is None else f"{self.ldns} ecs {subnet}"


@dataclass
class Log:
    """The queries of one or more files, in the order read, and what was left out."""

    queries: list[LoggedQuery] = field(default_factory=list)
    #: records that are not queries the replay can use, by why
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    @property
    def last_time(self) -> float | None:
        return max((q.time for q in self.queries), default=None)


def query_of(record: dnstap.Record) -> LoggedQuery:
    """The query of *record*; raises ValueError when its query message or extra field is
    malformed or it has no client address."""
    try:
        query = wire.parse_query(record.query_message)
    except wire.BadQuery as e:
        raise ValueError(f"malformed query message ({e})") from None
    if not record.query_address:
        raise ValueError("no client address")
    ldns = ipaddress.ip_address(record.query_address)
    if isinstance(ldns, ipaddress.IPv6Address) and ldns.ipv4_mapped is not None:
        ldns = ldns.ipv4_mapped
    decided = dnstap.parse_extra(record.extra) if record.extra else None
    seconds, nanos = record.query_time
    ecs = query.edns.ecs if query.edns is not None else None
    return LoggedQuery(seconds + nanos / 1e9, ldns, query.qname, query.qtype, ecs, decided)


def read(paths: Iterable[Path]) -> Log:
    """The queries of the files at *paths*, in order; raises `BadLog` for a file that
    cannot be read at all. Records that hold no usable query are counted in `Log.skipped`."""
    log = Log()
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError as e:
            raise BadLog(f"{path}: cannot read the query log: {e.strerror or e}") from None
        try:
            for record in records(data):
                try:
                    log.queries.append(query_of(record))
                except ValueError:
                    log.skip("malformed query")
        except ValueError as e:  # (FrameError, DecodeError)
            raise BadLog(f"{path}: not a dnstap query log: {e}") from None
    return log
