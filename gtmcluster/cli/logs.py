"""`gtmcluster logs --config FILE [-f] [--since WHEN] [--lines N] [NODE ...]`: the nodes' logs.

Reads ``<log_dir>/<node>.log`` of every member (or of the NODEs named), the files that
``twistd --logfile`` writes, and prints each line prefixed with its node, coloured per node
on a terminal (not when piped, with --no-color, or when NO_COLOR is set). The lines already
written are merged across nodes in timestamp order: the last --lines entries of each node
(20 by default), or everything since --since (a duration such as 30s, 10m, 2h, 1d or 1h30m,
or a time such as 2026-11-30T08:00, local time unless it has an offset). An entry is a line
with its timestamp and the lines that continue it (a traceback), which always stay together;
when the current file holds too little, the rotated ones (NODE.log.1, .2 ...) are read too.

With -f it then keeps following every file until Ctrl-C: across log rotation (the file
renamed and a new one opened), truncation, and files that do not exist yet.

Exit status: 0, also when stopped with Ctrl-C; 1 for a config problem, a NODE that is not a
member, a missing log directory, no log file at all (without -f) or a --since not understood.
"""

from __future__ import annotations

import argparse
import heapq
import os
import re
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any, TextIO

from gtmcluster.cli.nodeapi import CliError, load_config

#: seconds between two looks at the files when following
POLL_INTERVAL = 0.2
DEFAULT_LINES = 20
READ_SIZE = 65536
#: for entries with no timestamp of their own and none before them in their file
BEGINNING = datetime.min.replace(tzinfo=UTC)

#: twistd's ``2026-11-30T08:32:47+0000``; fractions, ``Z``, ``+00:00`` or no offset accepted too
TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)(?=\s|$)")
DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

#: ANSI colours given to the nodes in the config's member order
COLORS = (36, 33, 35, 32, 34, 31, 96, 93, 95, 92, 94, 91)
RESET = "\x1b[0m"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "logs",
        help="show and follow the nodes' log files, each line prefixed with its node",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", "-c", required=True, metavar="FILE", help="the sync group's YAML config (log_dir)")
    p.add_argument("--follow", "-f", action="store_true", help="keep following the files until Ctrl-C")
    p.add_argument(
        "--since", metavar="WHEN", help="entries since a duration ago (10m, 2h) or a time (2026-11-30T08:00)"
    )
    p.add_argument(
        "--lines",
        "-n",
        type=non_negative,
        metavar="N",
        help=f"the last N entries of each node (default {DEFAULT_LINES}, or all since --since)",
    )
    p.add_argument("--no-color", action="store_true", help="no ANSI colours, even on a terminal")
    p.add_argument("nodes", nargs="*", metavar="NODE", help="only these members (default: every member)")
    p.set_defaults(run=run)


def non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text}")
    return value


# -- timestamps ------------------------------------------------------------------------------


def parse_time(text: str) -> datetime:
    """An ISO 8601 time as an aware datetime; one without an offset is local time."""
    value = datetime.fromisoformat(text.replace(",", "."))
    return value if value.tzinfo is not None else value.astimezone()


def line_time(line: str) -> datetime | None:
    """The timestamp a log line starts with, or None for a continuation line."""
    m = TIMESTAMP.match(line)
    if m is None:
        return None
    try:
        return parse_time(m.group(1))
    except ValueError:
        return None


def parse_since(text: str, now: datetime) -> datetime:
    """``--since``: a duration before *now* (``90s``, ``10m``, ``2h``, ``1d``, ``1h30m``) or a
    time (``2026-11-30T08:00``, ``2026-11-30 08:00:00+0000``, ``2026-11-30``)."""
    text = text.strip()
    parts = DURATION_PART.findall(text)
    if parts and "".join(n + u for n, u in parts) == text:
        return now - timedelta(seconds=sum(float(n) * UNIT_SECONDS[u] for n, u in parts))
    try:
        return parse_time(text)
    except ValueError:
        raise ValueError(
            f"--since {text!r}: not a duration (30s, 10m, 2h, 1d, 1h30m) nor a time (2026-11-30T08:00)"
        ) from None


# -- entries ---------------------------------------------------------------------------------


@dataclass
class Entry:
    """One log event: its first line (with the timestamp) and the lines continuing it."""

    node: str
    time: datetime
    lines: list[str] = field(default_factory=list)


class EntryParser:
    """Groups one node's lines into entries. A line without a timestamp continues the entry
    before it; one with no entry before it (a file starting mid-traceback) gets the last
    time seen, so it still sorts in place."""

    def __init__(self, node: str):
        self.node = node
        self.last_time = BEGINNING
        self.pending: Entry | None = None

    def feed(self, lines: Iterable[str]) -> Iterator[Entry]:
        """The entries that *lines* complete (a new timestamped line completes the one before)."""
        for line in lines:
            stamp = line_time(line)
            if stamp is None and self.pending is not None:
                self.pending.lines.append(line)
                continue
            if self.pending is not None:
                yield self.pending
            if stamp is not None:
                self.last_time = stamp
            self.pending = Entry(self.node, self.last_time, [line])

    def flush(self) -> list[Entry]:
        """The entry still open, if any (when no more lines are coming for now)."""
        entry, self.pending = self.pending, None
        return [entry] if entry is not None else []


def merge(batches: Iterable[Iterable[Entry]]) -> list[Entry]:
    """Entries of several nodes in timestamp order; each node's own order is kept, and
    entries with equal times come in the order of *batches*."""
    return list(heapq.merge(*batches, key=lambda e: e.time))


# -- files -----------------------------------------------------------------------------------


class FileTail:
    """Reads one log file as it grows, across rotation (the file renamed and a new one made
    in its place), truncation, and a file that does not exist yet. Only complete lines are
    returned; a partial last line waits for its newline."""

    def __init__(self, path: Path):
        self.path = path
        self._file: IO[bytes] | None = None
        self._ident: tuple[int, int] | None = None
        self._partial = b""

    @property
    def is_open(self) -> bool:
        return self._file is not None

    def open(self) -> bool:
        """Open the file (from its start) unless already open; False when it does not exist."""
        if self._file is not None:
            return True
        try:
            f = self.path.open("rb")
        except (FileNotFoundError, NotADirectoryError):
            return False
        st = os.fstat(f.fileno())
        self._file, self._ident, self._partial = f, (st.st_dev, st.st_ino), b""
        return True

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file = None
        self._ident = None

    def lines(self) -> Iterator[str]:
        """The complete lines from where reading stopped to the current end, read in chunks."""
        if self._file is None:
            return
        while True:
            data = self._file.read(READ_SIZE)
            if not data:
                return
            parts = (self._partial + data).split(b"\n")
            self._partial = parts.pop()
            for part in parts:
                yield decode(part)

    def take_partial(self) -> list[str]:
        """The unfinished last line as a line of its own (at rotation, or when not following)."""
        partial, self._partial = self._partial, b""
        return [decode(partial)] if partial else []

    def poll(self) -> list[str]:
        """The lines written since the last call. Noticing that the path now names another
        file (rotated: a new inode) it drains the old file first, then reads the new one from
        its start; noticing that the file shrank (truncated) it starts over from its start."""
        if not self.open():
            return []
        assert self._file is not None
        out = list(self.lines())
        try:
            st = os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError):
            return out  # renamed away and not recreated yet: the writer may still append to the old one
        if (st.st_dev, st.st_ino) != self._ident:
            out.extend(self.lines())
            out.extend(self.take_partial())
            self.close()
            if self.open():
                out.extend(self.lines())
        elif st.st_size < self._file.tell():
            self._file.seek(0)
            self._partial = b""
            out.extend(self.lines())
        return out


def decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").rstrip("\r")


def rotated(path: Path) -> Iterator[Path]:
    """twistd's rotated files of *path*, newest first: ``X.log.1``, ``X.log.2`` ..."""
    n = 1
    while True:
        older = path.with_name(f"{path.name}.{n}")
        if not older.exists():
            return
        yield older
        n += 1


def history(tail: FileTail, node: str, since: datetime | None, count: int | None, partial: bool = False) -> list[Entry]:
    """*node*'s entries already written: those since *since* and/or the last *count*. Reads
    the current file through *tail* (which then stays at its end, ready to follow; with
    *partial* an unfinished last line is taken too), and the rotated ones, newest first, for
    as long as the files read so far do not reach back far enough."""
    parser = EntryParser(node)
    kept: deque[Entry] = deque(maxlen=count)
    first: datetime | None = None

    def take(entries: Iterable[Entry]) -> None:
        nonlocal first
        for e in entries:
            if first is None:
                first = e.time
            if since is None or e.time >= since:
                kept.append(e)

    if tail.open():
        take(parser.feed(tail.lines()))
        if partial:
            take(parser.feed(tail.take_partial()))
    take(parser.flush())

    def need_more() -> bool:
        if count is not None and len(kept) >= count:
            return False
        return since is None or first is None or first > since

    for older in rotated(tail.path):
        if not need_more():
            break
        first = None
        before = kept
        kept = deque(maxlen=count)
        older_parser = EntryParser(node)
        with older.open("rb") as f:
            take(older_parser.feed(decode(raw.rstrip(b"\n")) for raw in f))
        take(older_parser.flush())
        kept.extend(before)
    return list(kept)


# -- output ----------------------------------------------------------------------------------


class Printer:
    """Writes entries with a prefix per node: its name padded to the longest, and a bar."""

    def __init__(self, nodes: Sequence[str], out: TextIO, color: bool, palette_order: Sequence[str] | None = None):
        self.out = out
        self.width = max((len(n) for n in nodes), default=0)
        order = list(palette_order) if palette_order is not None else list(nodes)
        self.prefixes = {}
        for node in nodes:
            text = f"{node.ljust(self.width)} |"
            if color:
                code = COLORS[(order.index(node) if node in order else 0) % len(COLORS)]
                text = f"\x1b[{code}m{text}{RESET}"
            self.prefixes[node] = text

    def format(self, entry: Entry) -> str:
        prefix = self.prefixes[entry.node]
        return "".join(f"{prefix} {line}\n" for line in entry.lines)

    def write(self, entries: Iterable[Entry]) -> None:
        for entry in entries:
            self.out.write(self.format(entry))
        self.out.flush()


def use_color(no_color: bool, out: TextIO, environ: Mapping[str, str] = os.environ) -> bool:
    """Colour only on a terminal, unless --no-color or a non-empty NO_COLOR says otherwise."""
    if no_color or environ.get("NO_COLOR"):
        return False
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty())


class Follower:
    """Follows several nodes' files. Each `poll` returns the entries completed since the last
    one, merged by time; an entry is held until its node writes the next entry or a poll
    finds nothing new for it, so a traceback arriving in two reads stays in one piece."""

    def __init__(self, tails: dict[str, FileTail], parsers: dict[str, EntryParser] | None = None):
        self.tails = tails
        self.parsers = parsers if parsers is not None else {node: EntryParser(node) for node in tails}

    def poll(self) -> list[Entry]:
        batches = []
        for node, tail in self.tails.items():
            parser = self.parsers[node]
            lines = tail.poll()
            batches.append(list(parser.feed(lines)) if lines else parser.flush())
        return merge(batches)

    def close(self) -> None:
        for tail in self.tails.values():
            tail.close()


def follow(
    follower: Follower,
    printer: Printer,
    interval: float = POLL_INTERVAL,
    running: Callable[[], bool] = lambda: True,
) -> None:
    """Print what the files gain, looking every *interval* seconds, until interrupted."""
    while running():
        printer.write(follower.poll())
        time.sleep(interval)


# -- the command -----------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    try:
        return show(args)
    except CliError as e:
        print(f"gtmcluster logs: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        # the reader went away (| head): stop quietly, and keep Python from complaining at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def show(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    members = [m.name for m in config.sync_group.members]
    unknown = [n for n in args.nodes if n not in members]
    if unknown:
        raise CliError(
            f"not a member of sync group {config.sync_group.name!r}: {', '.join(unknown)} "
            f"(members: {', '.join(members)})"
        )
    nodes = list(dict.fromkeys(args.nodes)) or members
    log_dir = config.log_dir
    if not log_dir.is_dir():
        raise CliError(
            f"log directory {log_dir} does not exist (log_dir in {args.config}; "
            "nodes write <log_dir>/<node>.log when started with twistd --logfile)"
        )
    try:
        since = parse_since(args.since, datetime.now().astimezone()) if args.since else None
    except ValueError as e:
        raise CliError(str(e)) from None
    count = args.lines if args.lines is not None else (None if since is not None else DEFAULT_LINES)

    tails = {node: FileTail(log_dir / f"{node}.log") for node in nodes}
    missing = [node for node, tail in tails.items() if not tail.path.exists()]
    for node in missing:
        note = "waiting for it" if args.follow else "skipped"
        print(f"gtmcluster logs: no log file {tails[node].path} for {node} yet ({note})", file=sys.stderr)
    if len(missing) == len(nodes) and not args.follow:
        raise CliError(f"none of the log files exist in {log_dir}")

    printer = Printer(nodes, sys.stdout, use_color(args.no_color, sys.stdout), palette_order=members)
    follower = Follower(tails)
    try:
        past = []
        for node, tail in tails.items():
            # an unfinished last line is shown too when not waiting for its end
            past.append(history(tail, node, since, count, partial=not args.follow))
        printer.write(merge(past))
        if args.follow:
            # Ctrl-C stops following, even when started with SIGINT ignored (a background job)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            follow(follower, printer)
    finally:
        follower.close()
    return 0
