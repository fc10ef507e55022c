"""Reading what answers at a node's API address: every request within a deadline, every body
within a size cap, every line within a length cap.

Whatever answers at a member's API address may not be the node (a local process that took
the port while the node was down, an address given to another host), so nothing it sends is
trusted to end or to stay small:

- `Deadline` bounds a whole request in time: connecting, the TLS handshake, the status line
  and headers, and every read of the body, together. A server that trickles one byte every
  few seconds keeps each socket read short but is cut at the deadline all the same. With an
  *idle* limit (a followed log) the deadline moves that far ahead each time a whole line
  came, so a stream lives as long as it keeps sending lines, and no longer.
- `Answer.body` reads a body up to a cap (an announced length over it is refused before a
  byte of the body is read); `lines` reads lines up to a length, leaving out longer ones
  (`LongLine`) without holding them.
- `decode_json` turns a body into JSON no deeper than `MAX_DEPTH`, or refuses it.

Each problem is an `AnswerError`, a sentence for the caller to begin with the node's name.

The deadline is kept by a watchdog thread that shuts the connection's socket down when time
runs out, through a duplicate of its descriptor (so it never touches a descriptor that the
request closed and the system gave to something else); whatever read was waiting then ends,
and every read checks afterwards whether the deadline is what ended it.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from gtmcluster.cli.terminal import escape

#: bytes asked of the socket at a time while reading a body
CHUNK = 64 * 1024
#: the deepest JSON accepted (the API's answers nest a few levels; rendering and --json
#: output recurse over what is accepted)
MAX_DEPTH = 64


class AnswerError(Exception):
    """What went wrong with an answer: a sentence that follows the node's name and address
    ("... sent more than 16,777,216 bytes")."""


class Deadline:
    """A time limit on one request: *seconds* from now, moved *idle* seconds ahead of each
    whole line read when *idle* is given (`renew`). `watch` a connection before it connects;
    `close` when done with it (the answer's `close` does)."""

    def __init__(self, seconds: float, idle: float | None = None):
        self.seconds = seconds
        self.idle = idle
        self._due = time.monotonic() + seconds
        self._lock = threading.Lock()
        #: duplicates of the connection's socket, to shut down at the deadline
        self._held: list[socket.socket] = []
        self._closed = threading.Event()
        #: whether time ran out (the connection was shut down)
        self.expired = False
        self._watchdog = threading.Thread(target=self._watch, name="gtmcluster-deadline", daemon=True)
        self._watchdog.start()

    def watch(self, connection: http.client.HTTPConnection) -> None:
        """Hold *connection*'s socket once it is made, to shut it down at the deadline."""
        # (http.client makes every socket through this attribute: plain HTTP, and the
        # HTTPS connection of `nodetls`, which wraps it for TLS after)
        make: Callable[..., socket.socket] = connection._create_connection  # type: ignore[attr-defined]

        def made(address: tuple[str, int], timeout: Any, *more: Any) -> socket.socket:
            sock = make(address, timeout, *more)
            self._hold(sock)
            return sock

        connection._create_connection = made  # type: ignore[attr-defined]

    def _hold(self, sock: socket.socket) -> None:
        with self._lock:
            if self._closed.is_set():
                return
            copy = sock.dup()
            self._held.append(copy)
            if self.expired:
                _shut(copy)

    def renew(self) -> None:
        """A whole line came: with an *idle* limit, the deadline is now that far ahead."""
        if self.idle is not None:
            self._due = time.monotonic() + self.idle

    def exceeded(self) -> str:
        """Why the request ended when `expired`, as `AnswerError` words it."""
        if self.idle is not None:
            return f"sent no whole line for {self.idle:g} s"
        return f"sent no whole answer within {self.seconds:g} s"

    def _watch(self) -> None:
        while True:
            left = self._due - time.monotonic()
            if left <= 0:
                break
            if self._closed.wait(left):
                return
        with self._lock:
            if self._closed.is_set():
                return
            self.expired = True
            for sock in self._held:
                _shut(sock)

    def close(self) -> None:
        """Done with the request: stop watching, let go of the socket."""
        with self._lock:
            self._closed.set()
            held, self._held = self._held, []
        for sock in held:
            sock.close()
        if threading.current_thread() is not self._watchdog:
            self._watchdog.join()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # (closed by the other side meanwhile)
        sock.shutdown(socket.SHUT_RDWR)


class Answer:
    """A node's answer, its status line and headers read: its body to read within a cap
    (`body`) or line by line (`readline`, `lines`), all within its *deadline*; `close` (or
    `with`) closes the connection and ends the deadline."""

    def __init__(self, response: http.client.HTTPResponse, deadline: Deadline, where: str = ""):
        #: where it came from (the URL asked), for messages
        self.where = where
        self.status = response.status
        #: the HTTP reason phrase, escaped for a terminal
        self.reason = escape(response.reason)
        self.response = response
        self.deadline = deadline

    def _read(self, read: Callable[[int], bytes], size: int) -> bytes:
        try:
            data = read(size)
        except (OSError, http.client.HTTPException, ValueError) as e:
            if self.deadline.expired:
                raise AnswerError(self.deadline.exceeded()) from None
            raise AnswerError(f"broke off its answer: {escape(str(e)) or type(e).__name__}") from None
        if self.deadline.expired:
            raise AnswerError(self.deadline.exceeded())
        return data

    def body(self, cap: int) -> bytes:
        """The whole body, at most *cap* bytes."""
        announced = self.response.length  # (Content-Length, when not chunked)
        if announced is not None and announced > cap:
            raise AnswerError(f"announced an answer of {announced:,} bytes, over the limit of {cap:,}")
        parts: list[bytes] = []
        size = 0
        while True:
            want = min(CHUNK, cap + 1 - size)
            part = self._read(self.response.read, want)
            if not part:
                return b"".join(parts)
            parts.append(part)
            size += len(part)
            if size > cap:
                raise AnswerError(f"sent more than {cap:,} bytes, over the limit for this answer")

    def readline(self, limit: int) -> bytes:
        """The next line (with its newline), or its first *limit* bytes; b"" at the end."""
        line = self._read(self.response.readline, limit)
        if line.endswith(b"\n"):
            self.deadline.renew()
        return line

    def close(self) -> None:
        self.deadline.close()
        self.response.close()

    def __enter__(self) -> Answer:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class Readable(Protocol):
    def readline(self, limit: int, /) -> bytes: ...


@dataclass(frozen=True)
class LongLine:
    """A line over the length limit, left out: how long it was (bytes, to its newline or the
    end of the answer)."""

    size: int


def lines(stream: Readable, limit: int) -> Iterator[bytes | LongLine]:
    """The lines of *stream* without their line ends; a line longer than *limit* bytes is a
    `LongLine`, read to its end without being kept."""
    while True:
        line = stream.readline(limit + 2)
        if not line:
            return
        ended = line.endswith(b"\n")
        text = line.rstrip(b"\r\n") if ended else line
        if len(text) <= limit:
            yield text
            continue
        size = len(text)
        while not ended:
            more = stream.readline(CHUNK)
            if not more:
                break
            ended = more.endswith(b"\n")
            size += len(more.rstrip(b"\r\n")) if ended else len(more)
        yield LongLine(size)


def decode_json(data: bytes) -> Any:
    """*data* as JSON, refused (`AnswerError`) when it is not JSON or nests deeper than
    `MAX_DEPTH`."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise AnswerError(f"answered with JSON nested too deeply (more than {MAX_DEPTH} levels)") from None
    except ValueError:
        raise AnswerError("answered with something that is not JSON") from None
    if depth_over(value, MAX_DEPTH):
        raise AnswerError(f"answered with JSON nested too deeply (more than {MAX_DEPTH} levels)")
    return value


def depth_over(value: Any, limit: int) -> bool:
    """Whether *value* (lists and dicts) nests deeper than *limit* (without recursing)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        elif not isinstance(item, list):
            continue
        if level > limit:
            return True
        stack.extend((x, level + 1) for x in item if isinstance(x, (list, dict)))
    return False
