"""Where an HTTP response's body ends: its ``Content-Length``, or its chunks, read as the
bytes arrive (`probe.http`'s reader, for the http checks, the load sources and a link's
counters over HTTP).

`Chunks` follows a chunked body through a buffer that grows: each call to `scan` looks
only at what is new, so a body of a megabyte read in 64 KiB pieces costs a pass over it,
not one per piece. It records where each chunk's data lies, says when the last chunk came
(the body is whole: no need to wait for the server to close), and names what is malformed
(a size line of more than 16 hex digits or `MAX_SIZE_LINE` bytes, a chunk not followed by
its line end). A chunk's declared size is believed only as far as the bytes arrive: a
chunk of 2**48 bytes is read up to the reader's cap like any other body. Pure: no I/O.
"""

from __future__ import annotations

import re

#: a chunk's size line: the size in hex (at most 16 digits: 2**64), extensions, the line end
SIZE_LINE = re.compile(rb"([0-9a-fA-F]{1,16})[ \t]*(?:;[^\r\n]*)?\r?\n")
#: the longest size line (with its extensions) read before the body is called malformed
MAX_SIZE_LINE = 1024
#: the most digits of a Content-Length taken (10**18 bytes: more than any cap)
MAX_LENGTH_DIGITS = 18
CONTENT_LENGTH = re.compile(rb"^content-length:[ \t]*(\d+)[ \t]*\r?$", re.IGNORECASE | re.MULTILINE)
CHUNKED = re.compile(rb"^transfer-encoding:[ \t]*chunked[ \t]*\r?$", re.IGNORECASE | re.MULTILINE)


class BadFraming(Exception):
    """The headers frame the body in a way that cannot be read; the message says how."""


def content_length(header: bytes) -> int | None:
    """The ``Content-Length`` of a response's *header*, None without one; raises
    `BadFraming` for one of more than `MAX_LENGTH_DIGITS` digits."""
    m = CONTENT_LENGTH.search(header)
    if m is None:
        return None
    digits = m.group(1).lstrip(b"0") or b"0"
    if len(digits) > MAX_LENGTH_DIGITS:
        raise BadFraming(f"Content-Length of more than {MAX_LENGTH_DIGITS} digits")
    return int(digits)


def is_chunked(header: bytes) -> bool:
    return CHUNKED.search(header) is not None


class Chunks:
    """The chunks of a body that starts at `start` in a buffer that only grows."""

    def __init__(self, start: int = 0) -> None:
        #: (start, end) of each chunk's data in the buffer (the last may end beyond it)
        self.spans: list[tuple[int, int]] = []
        #: the last (size 0) chunk came: the body is whole
        self.done = False
        #: what is malformed, or None
        self.problem: str | None = None
        self._start = start
        self._at = start  # where the next size line (or a chunk's line end) starts
        self._data_end: int | None = None  # inside a chunk: where its data ends

    def scan(self, buffer: bytes | bytearray) -> None:
        """Follow the chunks as far as *buffer* (the same buffer, grown) now reaches."""
        size = len(buffer)
        while not self.done and self.problem is None:
            if self._data_end is not None:  # a chunk's data, then its line end
                end = self._data_end
                if size < end + 1:
                    return
                if buffer[end : end + 1] == b"\n":
                    self._at = end + 1
                elif buffer[end : end + 2] == b"\r\n":
                    self._at = end + 2
                elif size < end + 2 and buffer[end : end + 1] == b"\r":
                    return
                else:
                    self.problem = f"chunk data not followed by a line end at byte {end - self._start} of the body"
                    return
                self._data_end = None
                continue
            newline = buffer.find(b"\n", self._at, self._at + MAX_SIZE_LINE)
            if newline < 0:
                if size - self._at >= MAX_SIZE_LINE:
                    self.problem = f"a chunk size line longer than {MAX_SIZE_LINE} bytes"
                return
            m = SIZE_LINE.fullmatch(buffer, self._at, newline + 1)
            if m is None:
                line = bytes(buffer[self._at : min(newline, self._at + 20)]).rstrip(b"\r")
                self.problem = f"a malformed chunk size line {line!r}"
                return
            length = int(m.group(1), 16)
            if length == 0:
                self.done = True
                return
            self.spans.append((m.end(), m.end() + length))
            self._data_end = m.end() + length

    def data(self, buffer: bytes | bytearray) -> bytes:
        """The chunks' data that *buffer* holds (the well-formed part)."""
        size = len(buffer)
        return b"".join(bytes(buffer[start : min(end, size)]) for start, end in self.spans if start < size)
