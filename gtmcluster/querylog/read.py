"""Reading a query log file: its records, and one line each for an operator.

    python -m gtmcluster.querylog.read [--merge] FILE [FILE ...]

prints, per record (file after file; with --merge, the records of all the files as one
stream in the order of their query times, as the files of a node's answering workers are
read together: each file is in time order, so the merge holds one record per file): the
query's time (UTC), the client's address and port, the transport, the question, the
response's rcode and answer records, and the extra field (which wide IP decided, and how)
as written: what BIND's ``dnstap-read`` does not show. A file that is
being written (no STOP frame yet) is read up to its last whole record, and no further than
its size when opened; a note on stderr says so when a record was cut there or the file
grew meanwhile. The file is read a frame at a time (`LogFile`, `dnstap.FrameReader`):
memory does not grow with its size. Exit 1, with the file and the fault on stderr, for a
file that is not a regular file, cannot be read, or is not a dnstap query log (after the
records before the fault); a frame longer than `dnstap.MAX_FRAME` (1 MiB) is such a fault.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import errno
import heapq
import io
import ipaddress
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

import dns.exception
import dns.message
import dns.rcode
import dns.rdatatype

from gtmcluster.querylog import dnstap

#: the buffer a file is read through (a frame longer than this is read in one piece)
BUFFER = 1 << 16


class NotAFile(OSError):
    """The path names something other than a regular file (a FIFO, a device, a folder)."""


class LogFile:
    """A query log file opened for reading (`open`): a regular file only (a FIFO would
    block the reader, a device such as /dev/zero would never end), read no further than its
    size when opened (`size`: a file being written keeps growing), a frame at a time
    (`frames`), as often as wanted from the same open file (a rotation that renames or
    removes the path meanwhile changes nothing read)."""

    def __init__(self, path: Path):
        self.path = path
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise NotAFile(errno.EINVAL, "not a regular file (a FIFO, a device or a folder)")
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        self.file: BinaryIO = os.fdopen(fd, "rb", buffering=BUFFER)
        #: the file's size when it was opened: what is read of it
        self.size = st.st_size

    def frames(self, limit: int | None = None) -> dnstap.FrameReader:
        """A reader of the file's frames from its start, to *limit* bytes (default: `size`).
        Raises FrameError for a file that is not a dnstap query log."""
        self.file.seek(0)
        return frames(self.file, self.size if limit is None else limit)

    def notes(self, reader: dnstap.FrameReader) -> list[str]:
        """What an operator should know of a read that *reader* ended: a record cut at the
        end (still being written, or the file cut), records written after it was opened."""
        out = []
        if reader.cut:
            out.append(
                f"{self.path}: read to its last whole record (byte {reader.end}); the {reader.cut} bytes"
                " after it are not a whole record (one being written, or the file was cut)"
            )
        try:
            now = os.fstat(self.file.fileno()).st_size
        except OSError:
            now = self.size
        if now > self.size:
            out.append(
                f"{self.path}: {now - self.size} bytes were written to it after it was opened; only its first"
                f" {self.size} are read"
            )
        return out

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> LogFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def frames(file: BinaryIO, limit: int | None = None) -> dnstap.FrameReader:
    """A reader of the frames of a query log read from *file* (see `dnstap.FrameReader`):
    raises FrameError when it does not begin with a START frame of dnstap's content type."""
    reader = dnstap.FrameReader(file, limit)
    if reader.content_type != dnstap.CONTENT_TYPE:
        raise dnstap.FrameError(f"content type {reader.content_type!r}, not {dnstap.CONTENT_TYPE.decode()}")
    return reader


def records(source: bytes | BinaryIO) -> Iterator[dnstap.Record]:
    """The records of a query log (its bytes, or a binary file object read a frame at a
    time), in order; a file still being written is read up to its last whole frame. Raises
    dnstap.FrameError or DecodeError when malformed (after the records before the fault)."""
    for payload in frames(io.BytesIO(source) if isinstance(source, bytes) else source):
        yield dnstap.decode(payload)


def describe(record: dnstap.Record) -> str:
    """One line for *record*."""
    when = datetime.datetime.fromtimestamp(record.query_time[0], datetime.UTC)
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S") + f".{record.query_time[1] // 1_000_000:03d}Z"
    client = ipaddress.ip_address(record.query_address) if record.query_address else "?"
    transport = {dnstap.UDP: "UDP", dnstap.TCP: "TCP"}.get(record.protocol, str(record.protocol))
    question = _question(record.query_message)
    if record.response_message is None:
        outcome = "no response"
    else:
        try:
            response = dns.message.from_wire(record.response_message)
            answers = [f"{rr}" for rrset in response.answer for rr in rrset]
            outcome = dns.rcode.to_text(response.rcode()) + (" " + ",".join(answers) if answers else "")
        except dns.exception.DNSException:
            outcome = "a malformed response"
    extra = f" [{_printable(record.extra)}]" if record.extra else ""
    return f"{stamp} {client}:{record.query_port} {transport} {question} {outcome}{extra}"


def _printable(data: bytes) -> str:
    """*data* as ASCII text, anything else than printable ASCII as \\xNN (the node writes
    the extra field so; a file from elsewhere could hold terminal controls)."""
    return "".join(chr(b) if 0x20 <= b < 0x7F else f"\\x{b:02x}" for b in data)


def _question(wire: bytes) -> str:
    try:
        query = dns.message.from_wire(wire)
    except dns.exception.DNSException:
        return "(a malformed query)"
    if not query.question:
        return "(no question)"
    q = query.question[0]
    return f"{q.name} {dns.rdatatype.to_text(q.rdtype)}"


class _Fault(Exception):
    """A file's fault met while merging: *path* and the error."""

    def __init__(self, path: Path, error: Exception):
        super().__init__(path, error)
        self.path = path
        self.error = error


def _timed(log: LogFile, index: int, notes: list[str]) -> Iterator[tuple[tuple[int, int], int, int, dnstap.Record]]:
    """The records of *log* keyed by their query time, then *index* (the file's place on
    the command line: equal times keep the files' order), then their place in the file;
    its notes added to *notes* at its end."""
    try:
        reader = log.frames()
        for n, payload in enumerate(reader):
            record = dnstap.decode(payload)
            yield record.query_time, index, n, record
        notes.extend(log.notes(reader))
    except (OSError, ValueError) as e:
        raise _Fault(log.path, e) from e


def merged(logs: list[LogFile], notes: list[str]) -> Iterator[dnstap.Record]:
    """The records of *logs* as one stream in query time order (each file is written in
    time order: a worker's, or the node's, one writer each); raises `_Fault`."""
    for *_, record in heapq.merge(*(_timed(log, i, notes) for i, log in enumerate(logs))):
        yield record


def _merge(paths: list[Path]) -> int:
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        logs = []
        for path in paths:
            try:
                logs.append(stack.enter_context(LogFile(path)))
            except OSError as e:
                print(f"{path}: {e.strerror or e}", file=sys.stderr)
                return 1
        try:
            for record in merged(logs, notes):
                print(describe(record))
        except BrokenPipeError:  # (whoever read the output has gone: `| head`)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        except _Fault as e:
            error = e.error
            text = (error.strerror or error) if isinstance(error, OSError) else error
            print(f"{e.path}: {text}", file=sys.stderr)
            return 1
        finally:
            for note in notes:
                print(note, file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print the records of query log files (dnstap).")
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument(
        "--merge",
        action="store_true",
        help="one stream in query time order (the node's file and its answering workers' files read together)",
    )
    args = parser.parse_args(argv)
    if args.merge:
        return _merge(args.files)
    for path in args.files:
        try:
            with LogFile(path) as log:
                reader = log.frames()
                for payload in reader:
                    print(describe(dnstap.decode(payload)))
                for note in log.notes(reader):
                    print(note, file=sys.stderr)
        except BrokenPipeError:  # (whoever read the output has gone: `| head`)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        except OSError as e:
            print(f"{path}: {e.strerror or e}", file=sys.stderr)
            return 1
        except ValueError as e:  # (FrameError, DecodeError)
            print(f"{path}: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
