"""Names a config may point at that are no regular file, for the tests of `runtime.files`:
a FIFO that nobody writes (opening it for reading blocks), ``/dev/zero`` (endless), sparse
files bigger than a cap, and guards so that code that does fall for them fails the test
rather than hanging it or eating the machine's memory."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import threading
from collections.abc import Iterator
from pathlib import Path

#: endless bytes
DEV_ZERO = Path("/dev/zero")


def make_fifo(path: Path) -> Path:
    os.mkfifo(path, 0o600)
    return path


def sparse(path: Path, size: int, mode: int = 0o600) -> Path:
    """A file of *size* bytes that takes no room on disk."""
    with open(path, "wb") as f:
        f.truncate(size)
    path.chmod(mode)
    return path


def release(fifo: Path) -> bool:
    """Open *fifo* for writing and close it at once: a reader blocked opening it goes on
    (and reads an empty file). False when no reader has it open."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno in (errno.ENXIO, errno.ENOENT):
            return False
        raise
    os.close(fd)
    return True


@contextlib.contextmanager
def released_after(fifo: Path, seconds: float) -> Iterator[None]:
    """After *seconds*, keep releasing whoever blocks opening *fifo* until the block ends:
    code that blocks on it fails the test's deadline instead of hanging it."""
    done = threading.Event()

    def keep_releasing() -> None:
        if done.wait(seconds):
            return
        while not done.wait(0.05):
            release(fifo)

    thread = threading.Thread(target=keep_releasing, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def address_space_limit(extra: int) -> int:
    """The current address space of this process (VmSize) plus *extra* bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024 + extra
    raise AssertionError("no VmSize in /proc/self/status")


@contextlib.contextmanager
def memory_capped(extra: int = 1 << 30) -> Iterator[None]:
    """Let this process grow by at most *extra* bytes of address space meanwhile (an
    endless read ends in MemoryError rather than in the machine's swap)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (address_space_limit(extra), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
