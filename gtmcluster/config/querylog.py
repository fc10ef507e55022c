"""Reading ``dns_server.query_log`` (the query log: `gtmcluster.querylog`, docs/query-log.md).

dns_server:
  query_log:
    path: var/log/queries.dnstap   # required; relative to base_dir; inside dir
    dir: var/log                   # the folder the log writes in (default: log_dir)
    format: dnstap                 # the only format so far
    max_bytes: 100000000           # rotated before it grows past this (64 KiB to 1 TiB)
    keep: 5                        # rotated files kept (0 to 1000)
    queue: 50000                   # queries waiting to be written at most (100 to 10,000,000)

The log writes only its own files (``path`` and ``path.1`` .. ``path.<keep>``) inside its
folder: a ``path`` outside it (after ``..`` are taken away) is refused here, and what
is in the folder at run time is `querylog.logfile`'s to check.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from gtmcluster.config.dnsserver import QueryLog
from gtmcluster.config.reader import Mapping, Reader

FORMATS = ("dnstap",)


def read_query_log(r: Reader, parent: Mapping, resolve: Callable[[str], Path], log_dir: Path) -> QueryLog | None:
    """The query log settings under *parent* (``dns_server``), None when off or broken;
    *log_dir* is the folder it writes in unless ``dir`` names another. (With
    ``dns_server.processes`` above 1 each answering worker writes a file of its own beside
    ``path``: `querylog.logfile.worker_path`.)"""
    if not parent.has("query_log"):
        return None
    m = r.mapping(
        parent.at("query_log"), parent.get("query_log"), "a mapping {path, dir, format, max_bytes, keep, queue}"
    )
    if m is None:
        return None
    default = QueryLog(Path("."))
    path = r.string(m.at("path"), m.require("path", "the file the query log is written to"))
    folder_text = m.string("dir", None)
    fmt = m.string("format", default.format, choices=FORMATS)
    max_bytes = m.integer("max_bytes", default.max_bytes, 65_536, 2**40)
    keep = m.integer("keep", default.keep, 0, 1000)
    queue = m.integer("queue", default.queue, 100, 10_000_000)
    m.done()
    if path is None or fmt is None or max_bytes is None or keep is None or queue is None:
        return None
    folder = _plain(resolve(folder_text)) if folder_text is not None else _plain(log_dir)
    file = _plain(resolve(path))
    where = f"query_log.dir ({folder})" if folder_text is not None else f"log_dir ({folder})"
    if file == folder or not file.is_relative_to(folder):
        hint = "name a file inside it"
        if folder_text is None:
            hint += ", or give the log a folder: query_log.dir"
        r.error(m.at("path"), f"{path!r} is not a file inside {where}: the query log writes only there ({hint})")
        return None
    return QueryLog(file, fmt, max_bytes, keep, queue, folder)


def _plain(path: Path) -> Path:
    """*path* with ``.`` and ``..`` taken away (by the text: a link is never followed later)."""
    return Path(os.path.normpath(path))
