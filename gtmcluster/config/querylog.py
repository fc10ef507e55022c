"""Reading ``dns_server.query_log`` (the query log: `gtmcluster.querylog`, docs/query-log.md).

dns_server:
  query_log:
    path: var/log/queries.dnstap   # required; relative to base_dir
    format: dnstap                 # the only format so far
    max_bytes: 100000000           # rotated before it grows past this (64 KiB to 1 TiB)
    keep: 5                        # rotated files kept (0 to 1000)
    queue: 50000                   # queries waiting to be written at most (100 to 10,000,000)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gtmcluster.config.model import QueryLog
from gtmcluster.config.reader import Mapping, Reader

FORMATS = ("dnstap",)


def read_query_log(r: Reader, parent: Mapping, resolve: Callable[[str], Path], processes: int) -> QueryLog | None:
    """The query log settings under *parent* (``dns_server``), None when off or broken."""
    if not parent.has("query_log"):
        return None
    m = r.mapping(parent.at("query_log"), parent.get("query_log"), "a mapping {path, format, max_bytes, keep, queue}")
    if m is None:
        return None
    default = QueryLog(Path("."))
    path = r.string(m.at("path"), m.require("path", "the file the query log is written to"))
    fmt = m.string("format", default.format, choices=FORMATS)
    max_bytes = m.integer("max_bytes", default.max_bytes, 65_536, 2**40)
    keep = m.integer("keep", default.keep, 0, 1000)
    queue = m.integer("queue", default.queue, 100, 10_000_000)
    m.done()
    if processes > 1:
        # (workers answer on their own sockets and do not write the log yet)
        r.error(parent.at("query_log"), "is not written with dns_server.processes above 1 (yet): set processes: 1")
        return None
    if path is None or fmt is None or max_bytes is None or keep is None or queue is None:
        return None
    return QueryLog(resolve(path), fmt, max_bytes, keep, queue)
