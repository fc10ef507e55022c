"""The queries of query log files (dnstap, `gtmcluster.querylog`), as the replay needs them:
who asked (the LDNS address, the client subnet option sent), what (name, type), when, and
what the node that logged them decided (the extra field). `Logs` reads the files a frame at
a time, twice: once to find the last query's time, once to hand the queries over one by
one; none is kept."""

from __future__ import annotations

import contextlib
import ipaddress
import resource
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from gtmcluster.dns import wire
from gtmcluster.dnsdata import names
from gtmcluster.dnsdata.names import Name
from gtmcluster.querylog import dnstap, read

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


class Logs:
    """The query log files of a replay, read twice, a frame at a time: `scan` reads them
    all to find when the last query was (the replay's clock stands there) and counts the
    records it cannot use; `queries` then reads the same bytes again and yields the queries
    one by one, in order. Nothing grows with the number of queries.

    Each file is opened once (a regular file only; `read.LogFile`) and read no further
    than its size when opened, and the second reading no further than the first: a file
    that is being written, or is rotated (renamed, removed) between the two, gives the
    queries the first reading saw, with a note (`notes`). A file cut or rewritten between
    the two readings is refused (`BadLog`)."""

    def __init__(self, paths: Iterable[Path]):
        self.paths = list(paths)
        self._files: list[tuple[read.LogFile, int, int]] = []  # (file, end, frames) of each
        #: the time of the last query (None: the files hold none)
        self.last_time: float | None = None
        #: records that are not queries the replay can use, by why
        self.skipped: dict[str, int] = {}
        #: what an operator should know of the files read (a record cut at the end, a file
        #: that grew while read)
        self.notes: list[str] = []

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    def scan(self) -> None:
        """Open and read every file: `last_time`, `skipped`, `notes`. Raises `BadLog` for a
        file that cannot be read at all."""
        _room_for(len(self.paths))
        for path in self.paths:
            try:
                log = read.LogFile(path)
            except OSError as e:
                raise BadLog(f"{path}: cannot read the query log: {e.strerror or e}") from None
            self._files.append((log, 0, 0))
            count = 0
            with _reading(path):
                reader = log.frames()
                for payload in reader:
                    count += 1
                    record = dnstap.decode(payload)  # (a fault here: not a query log)
                    try:
                        query = query_of(record)
                    except ValueError:
                        self.skip("malformed query")
                        continue
                    if self.last_time is None or query.time > self.last_time:
                        self.last_time = query.time
            self._files[-1] = (log, reader.end, count)
            self.notes.extend(log.notes(reader))

    def queries(self) -> Iterator[LoggedQuery]:
        """The queries `scan` read, in order, read again. Raises `BadLog` when a file
        changed in between."""
        for log, end, count in self._files:
            with _reading(log.path):
                reader = log.frames(end)
                seen = 0
                for payload in reader:
                    seen += 1
                    record = dnstap.decode(payload)
                    try:
                        query = query_of(record)
                    except ValueError:
                        continue
                    yield query
                if reader.cut or reader.end != end or seen != count:
                    raise BadLog(f"{log.path}: changed while it was read (cut or written over): replay it again")

    def close(self) -> None:
        for log, _, _ in self._files:
            log.close()
        self._files = []

    def __enter__(self) -> Logs:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _room_for(files: int) -> None:
    """Raise the soft limit on open files, up to the hard one, when *files* (held open
    together, with some to spare) would not fit under it: a node keeps up to 1,001 files
    of its log (`keep` 1000), more than the usual soft limit of 1,024 leaves room for."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = files + 64
    if soft != resource.RLIM_INFINITY and soft < wanted:
        room = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (room, hard))


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[None]:
    """Faults of reading *path* as `BadLog`."""
    try:
        yield
    except OSError as e:
        raise BadLog(f"{path}: cannot read the query log: {e.strerror or e}") from None
    except ValueError as e:  # (FrameError, DecodeError)
        raise BadLog(f"{path}: not a dnstap query log: {e}") from None
