#!/usr/bin/env python3
"""wanem: a WAN emulator between Linux network namespaces, built on TUN devices (stdlib only).

This kernel has no ``netem`` qdisc, so the multi-site tests bring their own WAN. Each *host*
is a network namespace with one TUN interface ``wan0`` holding an address in a common WAN
subnet and a default route through ``wan0``: whatever leaves the namespace reaches the
emulator, which holds every TUN file descriptor in the root namespace. It reads raw IP
packets (UDP, TCP and ICMP alike, IPv4 and IPv6), looks the destination address up to find
the destination host, and writes the packet to that host's TUN after the link's one-way
delay. Every *ordered* pair of hosts is a link with its own delay (default 0), loss share
(random per packet from a seeded RNG), cut flag (a silent black hole, one way or both) and
hop count (the TTL/hop limit is lowered by that much, so hop measurements see a distance;
default 0 leaves packets untouched). Packets to addresses of no host are dropped. Packets on
one link always keep their order: a packet is never due before the one ahead of it.

Use it in four ways:

* imported, in-process (pytest fixtures)::

      with Wan("gtmt-", subnet="10.99.0.0/16") as wan:
          wan.add_host("a")                      # namespace gtmt-a, 10.99.0.1/16 on wan0
          wan.add_host("b", "10.99.0.2")
          wan.set_delay("a", "b", 0.060)         # both ways; symmetric=False for one way
          wan.ping("a", wan.address("b"))         # RTTs measured inside namespace gtmt-a
          proc = wan.popen("b", ["python3", "server.py"])   # = netns_exec("gtmt-b", ...)

* standalone: ``python3 tests/tools/wanem.py run --prefix gtmt- --host a --host b=10.99.0.2
  --delay a:b=0.06 --control /tmp/wan.sock`` builds the namespaces, prints one JSON line
  ``{"ready": ..., "hosts": {...}}`` and takes line commands on stdin and on the UNIX socket
  (``python3 tests/tools/wanem.py ctl /tmp/wan.sock cut a b``). It tears everything down on
  SIGTERM/SIGINT, on ``quit``, or at the end of stdin when it has no control socket;
* imported, with the emulator in a child process (:class:`WanProcess`: the same methods,
  driven over the control socket; its timing does not suffer from busy threads of the
  caller)::

      with WanProcess("gtmt-", ["a", "b"]) as wan:
          wan.set_delay("a", "b", 0.060)

* the pieces alone: :class:`LinkTable` and :class:`Forwarder` (pure logic, no root needed),
  :class:`WanEmulator` (the forwarding thread over file descriptors), and the namespace
  helpers (:func:`create_namespace`, :func:`setup_tun_host`, :func:`cleanup`,
  :func:`netns_exec`, ...).

Control commands (one per line, one reply line each: ``ok``, ``error: ...`` or JSON)::

    delay A B SECONDS [oneway]     loss A B SHARE [oneway]     hops A B N [oneway]
    cut A B [oneway]               heal A B [oneway]           reset
    add NAME [ADDRESS]             stats                       hosts
    links                          help                        quit

Without ``oneway`` a command applies to A->B and B->A. Use a prefix of your own
(:func:`run_prefix` gives ``BASE<pid>-``): starting and closing a WAN deletes every
namespace with its prefix. Timing: each packet leaves about 0.3-0.5 ms after it is due
(the RTT through the emulator with no delay is about 0.4 ms), so RTTs read about 1 ms above
twice the delay, with rare outliers of a few ms on a busy machine.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import heapq
import ipaddress
import itertools
import json
import os
import queue
import random
import re
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from types import TracebackType
from typing import Any

__all__ = [
    "DEFAULT_LINK",
    "Forwarder",
    "Host",
    "Link",
    "LinkStats",
    "LinkTable",
    "PingResult",
    "Wan",
    "WanEmulator",
    "WanProcess",
    "cleanup",
    "create_namespace",
    "delete_namespace",
    "destination",
    "handle_command",
    "ip",
    "list_namespaces",
    "lower_ttl",
    "netns_exec",
    "netns_run",
    "open_tun",
    "ping",
    "run_prefix",
    "setup_tun_host",
]

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
TUN_DEVICE = "/dev/net/tun"
WAN_DEV = "wan0"
TXQUEUELEN = 10000
READ_SIZE = 65536
#: packets read from one TUN per readiness event before the loop looks at the timers again
READ_BURST = 64

LinkKey = tuple[str, str]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


# ---------------------------------------------------------------------------------------------
# Packets


def destination(packet: bytes) -> bytes | None:
    """The packed destination address of a raw IPv4 or IPv6 packet, None when it is neither."""
    if not packet:
        return None
    version = packet[0] >> 4
    if version == 4 and len(packet) >= 20:
        return packet[16:20]
    if version == 6 and len(packet) >= 40:
        return packet[24:40]
    return None


def ipv4_checksum(header: bytes) -> int:
    """The Internet checksum of *header* (its checksum field must be zero)."""
    if len(header) % 2:
        header += b"\0"
    total: int = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def lower_ttl(packet: bytes, hops: int) -> bytes | None:
    """*packet* with its IPv4 TTL (header checksum fixed) or IPv6 hop limit lowered by *hops*;
    None when it would reach zero (the packet expires on the way)."""
    if hops <= 0:
        return packet
    version = packet[0] >> 4
    if version == 4:
        ttl = packet[8]
        if ttl <= hops:
            return None
        ihl = (packet[0] & 0x0F) * 4
        header = bytearray(packet[:ihl])
        header[8] = ttl - hops
        header[10:12] = b"\0\0"
        header[10:12] = struct.pack("!H", ipv4_checksum(bytes(header)))
        return bytes(header) + packet[ihl:]
    if version == 6:
        limit = packet[7]
        if limit <= hops:
            return None
        return packet[:7] + bytes([limit - hops]) + packet[8:]
    return packet


# ---------------------------------------------------------------------------------------------
# The link table


@dataclass(frozen=True)
class Link:
    """One direction between two hosts."""

    delay: float = 0.0  # seconds, one way
    loss: float = 0.0  # share of packets dropped, 0..1
    cut: bool = False  # drop everything, silently
    hops: int = 0  # lower the TTL / hop limit by this much


DEFAULT_LINK = Link()


@dataclass(frozen=True)
class _Snapshot:
    """What the forwarding loop reads per packet: replaced whole by writers, never mutated."""

    by_address: Mapping[bytes, str]
    links: Mapping[LinkKey, Link]


class LinkTable:
    """Hosts with their addresses, and the link of every ordered pair of hosts.

    Writers (any thread) build new dicts under a lock and swap in a new snapshot; the
    forwarding loop reads :attr:`snapshot` once per packet, so it always sees a consistent
    table without locking.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hosts: dict[str, tuple[IPAddress, ...]] = {}
        self.snapshot = _Snapshot({}, {})

    def add_host(self, name: str, *addresses: str) -> None:
        """Register *name* with its addresses (IPv4 or IPv6, without prefix length)."""
        parsed = tuple(ipaddress.ip_address(a) for a in addresses)
        with self._lock:
            if name in self._hosts:
                raise ValueError(f"host {name!r} exists")
            by_address = dict(self.snapshot.by_address)
            for address in parsed:
                if address.packed in by_address:
                    raise ValueError(f"address {address} belongs to host {by_address[address.packed]!r}")
                by_address[address.packed] = name
            self._hosts[name] = parsed
            self.snapshot = _Snapshot(by_address, self.snapshot.links)

    def hosts(self) -> dict[str, list[str]]:
        """Every host with its addresses."""
        with self._lock:
            return {name: [str(a) for a in addresses] for name, addresses in self._hosts.items()}

    def host_for(self, packed: bytes) -> str | None:
        """The host that holds the packed address, or None."""
        return self.snapshot.by_address.get(packed)

    def link(self, a: str, b: str) -> Link:
        """The link a->b (the default link when it was never set)."""
        return self.snapshot.links.get((a, b), DEFAULT_LINK)

    def links(self) -> dict[LinkKey, Link]:
        """Every link that differs from the default."""
        return {key: link for key, link in self.snapshot.links.items() if link != DEFAULT_LINK}

    def update(self, a: str, b: str, both: bool, **changes: Any) -> None:
        """Change fields of the link a->b (and b->a when *both*) in one atomic swap."""
        with self._lock:
            for name in (a, b):
                if name not in self._hosts:
                    raise KeyError(f"unknown host {name!r}")
            links = dict(self.snapshot.links)
            for key in [(a, b), (b, a)] if both else [(a, b)]:
                links[key] = replace(links.get(key, DEFAULT_LINK), **changes)
            self.snapshot = _Snapshot(self.snapshot.by_address, links)

    def set_delay(self, a: str, b: str, seconds: float, symmetric: bool = True) -> None:
        """One-way delay of a->b (and b->a when *symmetric*), in seconds."""
        if not seconds >= 0:
            raise ValueError(f"delay must be >= 0, not {seconds}")
        self.update(a, b, symmetric, delay=float(seconds))

    def set_loss(self, a: str, b: str, share: float, symmetric: bool = True) -> None:
        """Share (0..1) of the packets a->b (and b->a when *symmetric*) that are dropped."""
        if not 0 <= share <= 1:
            raise ValueError(f"loss must be within 0..1, not {share}")
        self.update(a, b, symmetric, loss=float(share))

    def set_hops(self, a: str, b: str, hops: int, symmetric: bool = True) -> None:
        """Hops a->b (and b->a when *symmetric*): the TTL is lowered by that much."""
        if hops < 0 or hops > 254:
            raise ValueError(f"hops must be within 0..254, not {hops}")
        self.update(a, b, symmetric, hops=int(hops))

    def cut(self, a: str, b: str, both: bool = True) -> None:
        """Drop everything a->b (and b->a when *both*), silently."""
        self.update(a, b, both, cut=True)

    def heal(self, a: str, b: str, both: bool = True) -> None:
        """Undo :meth:`cut` on a->b (and b->a when *both*); delay and loss stay."""
        self.update(a, b, both, cut=False)

    def reset(self) -> None:
        """Every link back to the default (no delay, no loss, no cut, no hops)."""
        with self._lock:
            self.snapshot = _Snapshot(self.snapshot.by_address, {})


# ---------------------------------------------------------------------------------------------
# The forwarding logic (no file descriptors: testable without root)


@dataclass
class LinkStats:
    """Packet counters of one link."""

    forwarded: int = 0  # written to the destination's TUN
    lost: int = 0  # dropped by the loss share
    cut: int = 0  # dropped because the link was cut
    expired: int = 0  # TTL / hop limit ran out on the link's hops
    errors: int = 0  # the write to the destination's TUN failed

    @property
    def dropped(self) -> int:
        return self.lost + self.cut + self.expired + self.errors


class Forwarder:
    """Decides each packet's fate and keeps the delayed ones in a heap until they are due.

    :meth:`submit` takes a packet read from host *src*'s TUN; :meth:`deliver_due` hands the
    packets whose time has come to a callback. Only the forwarding thread calls those two;
    :meth:`stats` may be called from any thread.
    """

    def __init__(self, table: LinkTable, seed: int | None = 0) -> None:
        self.table = table
        self.rng = random.Random(seed)
        self._heap: list[tuple[float, int, str, str, bytes]] = []
        self._seq = itertools.count()
        self._last_due: dict[LinkKey, float] = {}
        self._stats: dict[LinkKey, LinkStats] = {}
        self._unroutable: dict[str, int] = {}
        self._stats_lock = threading.Lock()

    def _count(self, key: LinkKey, what: str) -> None:
        with self._stats_lock:
            stats = self._stats.get(key)
            if stats is None:
                stats = self._stats[key] = LinkStats()
            setattr(stats, what, getattr(stats, what) + 1)

    def submit(self, src: str, packet: bytes, now: float) -> str | None:
        """Take a packet sent by host *src* at *now*; the destination host when it was queued,
        None when it was dropped (unknown destination, cut, loss or expired)."""
        snapshot = self.table.snapshot
        address = destination(packet)
        dst = snapshot.by_address.get(address) if address is not None else None
        if dst is None:
            with self._stats_lock:
                self._unroutable[src] = self._unroutable.get(src, 0) + 1
            return None
        key = (src, dst)
        link = snapshot.links.get(key, DEFAULT_LINK)
        if link.cut:
            self._count(key, "cut")
            return None
        if link.loss > 0 and self.rng.random() < link.loss:
            self._count(key, "lost")
            return None
        if link.hops:
            lowered = lower_ttl(packet, link.hops)
            if lowered is None:
                self._count(key, "expired")
                return None
            packet = lowered
        due = now + link.delay
        last = self._last_due.get(key)
        if last is not None and last > due:
            due = last  # the delay was lowered: never overtake the packets already on the link
        self._last_due[key] = due
        heapq.heappush(self._heap, (due, next(self._seq), src, dst, packet))
        return dst

    def next_due(self) -> float | None:
        """When the earliest queued packet is due, None when nothing is queued."""
        return self._heap[0][0] if self._heap else None

    def pending(self) -> int:
        """Packets queued on the links."""
        return len(self._heap)

    def deliver_due(self, now: float, write: Callable[[str, bytes], bool]) -> int:
        """Hand every packet due at *now* to ``write(dst, packet)`` in due order (ties in
        submission order); *write* tells whether it went out. Returns how many were due."""
        heap = self._heap
        count = 0
        while heap and heap[0][0] <= now:
            _, _, src, dst, packet = heapq.heappop(heap)
            self._count((src, dst), "forwarded" if write(dst, packet) else "errors")
            count += 1
        return count

    def stats(self) -> dict[LinkKey, LinkStats]:
        """A copy of the counters of every link that saw a packet."""
        with self._stats_lock:
            return {key: replace(stats) for key, stats in self._stats.items()}

    def unroutable(self) -> dict[str, int]:
        """Per source host, the packets dropped for want of a destination host."""
        with self._stats_lock:
            return dict(self._unroutable)


# ---------------------------------------------------------------------------------------------
# The emulator: a thread forwarding between TUN file descriptors


class _LinkControl:
    """The link-control methods, delegated to :attr:`table`."""

    table: LinkTable

    def set_delay(self, a: str, b: str, seconds: float, symmetric: bool = True) -> None:
        """One-way delay a->b (and b->a when *symmetric*), in seconds."""
        self.table.set_delay(a, b, seconds, symmetric)

    def set_loss(self, a: str, b: str, share: float, symmetric: bool = True) -> None:
        """Loss share (0..1) a->b (and b->a when *symmetric*)."""
        self.table.set_loss(a, b, share, symmetric)

    def set_hops(self, a: str, b: str, hops: int, symmetric: bool = True) -> None:
        """TTL decrement a->b (and b->a when *symmetric*)."""
        self.table.set_hops(a, b, hops, symmetric)

    def cut(self, a: str, b: str, both: bool = True) -> None:
        """Black-hole a->b (and b->a when *both*)."""
        self.table.cut(a, b, both)

    def heal(self, a: str, b: str, both: bool = True) -> None:
        """Undo a cut a->b (and b->a when *both*)."""
        self.table.heal(a, b, both)

    def reset(self) -> None:
        """All links back to the default."""
        self.table.reset()

    def link(self, a: str, b: str) -> Link:
        """The current link a->b."""
        return self.table.link(a, b)


class WanEmulator(_LinkControl):
    """The forwarding loop over the TUN file descriptors of the hosts, in a thread.

    ``attach(name, fd, *addresses)`` hands a host's TUN to it (before or after :meth:`start`;
    it takes ownership of the fd and closes it in :meth:`stop`). The loop waits with a
    selector on every TUN and a wakeup pipe, with the time of the next due packet as timeout.
    """

    def __init__(self, seed: int | None = 0, table: LinkTable | None = None) -> None:
        self.table = table if table is not None else LinkTable()
        self.forwarder = Forwarder(self.table, seed)
        self._fds: dict[str, int] = {}
        self._new: queue.SimpleQueue[tuple[str, int]] = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._closed = False
        self.error: BaseException | None = None

    # -- hosts

    def attach(self, name: str, fd: int, *addresses: str) -> None:
        """Forward for host *name*, whose TUN is *fd* and who holds *addresses*."""
        self.table.add_host(name, *addresses)
        os.set_blocking(fd, False)
        self._new.put((name, fd))
        self._wake()

    def hosts(self) -> dict[str, list[str]]:
        return self.table.hosts()

    # -- life cycle

    def start(self) -> None:
        """Run the forwarding loop in a daemon thread."""
        if self._thread is not None:
            raise RuntimeError("already started")
        self._thread = threading.Thread(target=self._run, name="wanem", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop, drop what is still queued, close every TUN fd (idempotent)."""
        self._stopping = True
        if self._thread is not None:
            self._wake()
            self._thread.join()
        if self._closed:
            return
        self._closed = True
        while True:
            try:
                name, fd = self._new.get_nowait()
            except queue.Empty:
                break
            self._fds[name] = fd
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> WanEmulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- stats

    def stats(self) -> dict[LinkKey, LinkStats]:
        """Counters per ordered pair of hosts (only the pairs that saw packets)."""
        return self.forwarder.stats()

    def stats_json(self) -> dict[str, Any]:
        """The counters as plain data: ``{"links": {"a->b": {...}}, "unroutable": {...}}``."""
        return {
            "links": {f"{a}->{b}": asdict(s) for (a, b), s in sorted(self.stats().items())},
            "unroutable": self.forwarder.unroutable(),
            "pending": self.forwarder.pending(),
        }

    # -- the loop

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"!")

    def _write(self, dst: str, packet: bytes) -> bool:
        fd = self._fds.get(dst)
        if fd is None:
            return False
        try:
            os.write(fd, packet)
        except OSError:
            return False
        return True

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # surfaced to callers through .error and running
            self.error = exc
            raise

    def _loop(self) -> None:
        forwarder = self.forwarder
        monotonic = time.monotonic
        read = os.read
        # select(2), not epoll: its timeout has microseconds where epoll's has milliseconds
        # (rounded up: up to 1 ms late per packet), and there are only a few descriptors
        with selectors.SelectSelector() as selector:
            selector.register(self._wake_r, selectors.EVENT_READ, None)
            registered: set[str] = set()
            while not self._stopping:
                while True:
                    try:
                        name, fd = self._new.get_nowait()
                    except queue.Empty:
                        break
                    self._fds[name] = fd
                    selector.register(fd, selectors.EVENT_READ, name)
                    registered.add(name)
                forwarder.deliver_due(monotonic(), self._write)
                due = forwarder.next_due()
                timeout = None if due is None else max(0.0, due - monotonic())
                for key, _ in selector.select(timeout):
                    src = key.data
                    if src is None:
                        with contextlib.suppress(BlockingIOError):
                            read(self._wake_r, 4096)
                        continue
                    for _ in range(READ_BURST):
                        try:
                            packet = read(key.fd, READ_SIZE)
                        except BlockingIOError:
                            break
                        except OSError as exc:
                            if exc.errno in (errno.EIO, errno.EBADFD, errno.EBADF):
                                # the device went away (its namespace was deleted)
                                selector.unregister(key.fd)
                                break
                            raise
                        if not packet:
                            break
                        forwarder.submit(src, packet, monotonic())
                        # a zero-delay packet goes out at once, before the next read
                        if forwarder.next_due() is not None:
                            forwarder.deliver_due(monotonic(), self._write)


# ---------------------------------------------------------------------------------------------
# Namespaces and TUN devices (root only)


def ip(*args: str, namespace: str | None = None, check: bool = True, stdin: str | None = None) -> str:
    """Run ``ip [-n NAMESPACE] ARGS...``; its stdout. Raises with ip's message on failure."""
    cmd = ["ip", *(["-n", namespace] if namespace else []), *args]
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def list_namespaces(prefix: str = "") -> list[str]:
    """The names from ``ip netns list`` that start with *prefix*."""
    names = []
    for line in ip("netns", "list").splitlines():
        parts = line.split()
        if parts and parts[0].startswith(prefix):
            names.append(parts[0])
    return names


def create_namespace(name: str) -> None:
    """``ip netns add NAME`` (a namespace of that name left over is deleted first)."""
    if name in list_namespaces(name):
        delete_namespace(name)
    ip("netns", "add", name)
    ip("link", "set", "lo", "up", namespace=name)


def namespace_pids(name: str) -> list[int]:
    """The processes running in namespace *name*."""
    out = ip("netns", "pids", name, check=False)
    return [int(p) for p in out.split() if p.isdigit()]


def delete_namespace(name: str, timeout: float = 5.0) -> None:
    """Kill the processes left in namespace *name* (SIGTERM, then SIGKILL after *timeout*),
    then ``ip netns delete`` it. Does nothing when it does not exist."""
    if name not in list_namespaces(name):
        return
    pids = namespace_pids(name)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while pids and time.monotonic() < deadline:
            pids = [pid for pid in pids if _alive(pid)]
            if pids:
                time.sleep(0.02)  # polling for the processes' exit, with a deadline
        if not pids:
            break
    ip("netns", "delete", name, check=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours still answers signal 0: reap it if it is ours
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def cleanup(prefix: str) -> list[str]:
    """Delete every namespace whose name starts with *prefix* (what a crashed run left)."""
    if not prefix:
        raise ValueError("cleanup needs a non-empty prefix")
    names = list_namespaces(prefix)
    for name in names:
        delete_namespace(name)
    return names


def run_prefix(base: str) -> str:
    """A namespace prefix of this process, ``BASE<pid>-``, so concurrent runs never touch each
    other's namespaces; namespaces ``BASE<pid>-*`` of processes that are gone (a crashed run)
    are deleted on the way."""
    pattern = re.compile(re.escape(base) + r"(\d+)-")
    for name in list_namespaces(base):
        match = pattern.match(name)
        if match and int(match.group(1)) != os.getpid() and not _alive(int(match.group(1))):
            delete_namespace(name)
    return f"{base}{os.getpid()}-"


def open_tun(name: str = "wanem%d") -> tuple[int, str]:
    """Create a TUN device (IFF_TUN | IFF_NO_PI) in the current namespace; its fd and name.

    The device lives as long as the fd (it is not persistent). A ``%d`` in *name* lets the
    kernel pick a free number."""
    if len(name.encode()) > 15:
        raise ValueError(f"interface name too long: {name!r}")
    fd = os.open(TUN_DEVICE, os.O_RDWR | os.O_CLOEXEC)
    try:
        ifr = struct.pack("16sH22x", name.encode(), IFF_TUN | IFF_NO_PI)
        result = fcntl.ioctl(fd, TUNSETIFF, ifr)
    except BaseException:
        os.close(fd)
        raise
    return fd, result[:16].rstrip(b"\0").decode()


def setup_tun_host(
    namespace: str,
    address: str,
    dev: str = WAN_DEV,
    address6: str | None = None,
    txqueuelen: int = TXQUEUELEN,
) -> int:
    """Give *namespace* a TUN interface *dev* with *address* (``A.B.C.D/LEN``) and a default
    route through it; the TUN's fd (kept by the caller: the device dies with it).

    The TUN is created in the root namespace, moved into *namespace* (which clears its
    addresses), renamed to *dev*, and there: IPv6 disabled on it (or, with *address6*
    ``X::Y/LEN``, only that address: no link-local, no DAD), txqueuelen raised, addressed,
    brought up, default route; ``lo`` up."""
    fd, temp = open_tun()
    try:
        ip("link", "set", temp, "netns", namespace)
        ip("link", "set", temp, "name", dev, namespace=namespace)
        conf = f"/proc/sys/net/ipv6/conf/{dev}"
        if address6 is None:
            settings = f"echo 1 > {conf}/disable_ipv6"
        else:
            settings = f"echo 1 > {conf}/addr_gen_mode && echo 0 > {conf}/accept_dad && echo 0 > {conf}/accept_ra"
        netns_run(namespace, ["sh", "-c", settings], check=True, capture_output=True)
        batch = [
            f"link set {dev} txqueuelen {txqueuelen}",
            f"addr add {address} dev {dev}",
            f"link set {dev} up",
            "link set lo up",
            f"route add default dev {dev}",
        ]
        if address6 is not None:
            batch += [f"addr add {address6} dev {dev} nodad", f"route add ::/0 dev {dev}"]
        ip("-batch", "-", namespace=namespace, stdin="\n".join(batch) + "\n")
    except BaseException:
        os.close(fd)
        raise
    return fd


def netns_exec(namespace: str, argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
    """Start *argv* inside *namespace* (``ip netns exec NAMESPACE ARGV...``)."""
    return subprocess.Popen(["ip", "netns", "exec", namespace, *argv], **popen_kwargs)


def netns_run(namespace: str, argv: Sequence[str], **run_kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """Run *argv* inside *namespace* to its end (``subprocess.run`` arguments; check=False
    unless given)."""
    run_kwargs.setdefault("check", False)
    return subprocess.run(["ip", "netns", "exec", namespace, *argv], **run_kwargs)  # noqa: PLW1510


# ---------------------------------------------------------------------------------------------
# ICMP echo (the tests need no `ping` binary): run inside a namespace by ping()


@dataclass
class PingResult:
    """Echo round-trip times in seconds, None for each request left unanswered."""

    rtts: list[float | None]

    @property
    def received(self) -> list[float]:
        return [r for r in self.rtts if r is not None]

    @property
    def sent(self) -> int:
        return len(self.rtts)

    @property
    def avg(self) -> float | None:
        got = self.received
        return sum(got) / len(got) if got else None


def icmp_echo(address: str, count: int = 3, interval: float = 0.2, timeout: float = 1.0) -> PingResult:
    """Send *count* ICMP echo requests to *address* (raw socket: root), *interval* apart, and
    wait up to *timeout* after the last for the replies. In the current namespace."""
    target = ipaddress.ip_address(address)
    v6 = target.version == 6
    family = socket.AF_INET6 if v6 else socket.AF_INET
    proto = socket.IPPROTO_ICMPV6 if v6 else socket.IPPROTO_ICMP
    request_type, reply_type = (128, 129) if v6 else (8, 0)
    ident = os.getpid() & 0xFFFF
    payload = b"wanem-ping-" + os.urandom(8)
    sent_at: dict[int, float] = {}
    rtts: list[float | None] = [None] * count
    with socket.socket(family, socket.SOCK_RAW, proto) as sock:
        sock.setblocking(False)
        selector = selectors.DefaultSelector()
        selector.register(sock, selectors.EVENT_READ)
        start = time.monotonic()
        seq = 0
        end = start + (count - 1) * interval + timeout
        while True:
            now = time.monotonic()
            if seq < count and now >= start + seq * interval:
                header = struct.pack("!BBHHH", request_type, 0, 0, ident, seq)
                checksum = 0 if v6 else ipv4_checksum(header + payload)  # the kernel sums ICMPv6
                packet = struct.pack("!BBHHH", request_type, 0, checksum, ident, seq) + payload
                sent_at[seq] = time.monotonic()
                sock.sendto(packet, (str(target), 0))
                seq += 1
                continue
            if seq == count and (now >= end or all(r is not None for r in rtts)):
                break
            wake = end if seq == count else min(end, start + seq * interval)
            for _ in selector.select(max(0.0, wake - now)):
                while True:
                    try:
                        data, peer = sock.recvfrom(READ_SIZE)
                    except BlockingIOError:
                        break
                    received = time.monotonic()
                    icmp = data if v6 else data[(data[0] & 0x0F) * 4 :]
                    if len(icmp) < 8 or ipaddress.ip_address(peer[0]) != target:
                        continue
                    kind, _, _, rid, rseq = struct.unpack("!BBHHH", icmp[:8])
                    ours = kind == reply_type and rid == ident and icmp[8:] == payload
                    if ours and rseq in sent_at and rtts[rseq] is None:
                        rtts[rseq] = received - sent_at[rseq]
        selector.close()
    return PingResult(rtts)


def ping(
    namespace: str,
    address: str,
    count: int = 3,
    interval: float = 0.2,
    timeout: float = 1.0,
    python: str = sys.executable,
) -> PingResult:
    """ICMP echo from inside *namespace* to *address* (runs this file's ``ping`` command)."""
    argv = [python, os.path.abspath(__file__), "ping", address]
    argv += ["--count", str(count), "--interval", str(interval), "--timeout", str(timeout), "--json"]
    proc = netns_run(namespace, argv, capture_output=True, text=True, timeout=count * interval + timeout + 30)
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(f"ping in {namespace} failed ({proc.returncode}): {proc.stderr.strip()}")
    return PingResult(json.loads(lines[-1])["rtts"])


# ---------------------------------------------------------------------------------------------
# A whole WAN: namespaces + emulator


@dataclass
class Host:
    """A host of the WAN: its namespace, its WAN address(es) and prefix length."""

    name: str
    namespace: str
    address: str
    prefixlen: int
    address6: str | None = None
    prefixlen6: int | None = None


class _HostAccess:
    """Per-host helpers over :attr:`hosts`."""

    hosts: dict[str, Host]

    def namespace(self, name: str) -> str:
        """The namespace of host *name*."""
        return self.hosts[name].namespace

    def address(self, name: str, version: int = 4) -> str:
        """The WAN address of host *name* (``version=6``: its IPv6 address)."""
        host = self.hosts[name]
        if version == 6:
            if host.address6 is None:
                raise KeyError(f"host {name!r} has no IPv6 address")
            return host.address6
        return host.address

    def popen(self, name: str, argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
        """Start *argv* in host *name*'s namespace (see :func:`netns_exec`)."""
        return netns_exec(self.namespace(name), argv, **popen_kwargs)

    def run(self, name: str, argv: Sequence[str], **run_kwargs: Any) -> subprocess.CompletedProcess[Any]:
        """Run *argv* to its end in host *name*'s namespace (see :func:`netns_run`)."""
        return netns_run(self.namespace(name), argv, **run_kwargs)

    def ping(self, src: str, address: str, count: int = 3, interval: float = 0.2, timeout: float = 1.0) -> PingResult:
        """ICMP echo from host *src* to *address* (an address, or a host name)."""
        if address in self.hosts:
            address = self.hosts[address].address
        return ping(self.namespace(src), address, count, interval, timeout)


class Wan(_LinkControl, _HostAccess):
    """Namespaces named ``PREFIX + host`` joined by a :class:`WanEmulator`.

    As a context manager: entering deletes leftovers with *prefix* and starts the emulator;
    leaving (also on error) stops it and deletes every namespace it made. :meth:`close` is
    idempotent. Link control (:meth:`set_delay`, :meth:`set_loss`, :meth:`cut`,
    :meth:`heal`, :meth:`set_hops`, :meth:`reset`) goes to the emulator's table."""

    def __init__(
        self, prefix: str, subnet: str = "10.99.0.0/16", seed: int | None = 0, subnet6: str | None = None
    ) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", prefix):
            raise ValueError(f"bad namespace prefix {prefix!r}")
        self.prefix = prefix
        self.network = ipaddress.IPv4Network(subnet)
        self.network6 = ipaddress.IPv6Network(subnet6) if subnet6 else None
        self.hosts: dict[str, Host] = {}
        self.emulator = WanEmulator(seed)
        self.table = self.emulator.table
        self._made: list[str] = []
        self._lock = threading.Lock()  # add_host from several control connections

    def start(self) -> Wan:
        """Clean leftovers of an earlier run with this prefix and start forwarding."""
        cleanup(self.prefix)
        self.emulator.start()
        return self

    def __enter__(self) -> Wan:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def add_host(self, name: str, address: str | None = None, address6: str | None = None) -> Host:
        """Make namespace ``PREFIX+name`` with ``wan0`` on *address* (default: the next free
        one in the subnet) and attach it to the emulator. With ``subnet6`` set, the host also
        gets *address6* (default: the IPv6 address numbered like its IPv4 one)."""
        with self._lock:
            return self._add_host(name, address, address6)

    def _add_host(self, name: str, address: str | None, address6: str | None) -> Host:
        if name in self.hosts:
            raise ValueError(f"host {name!r} exists")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ValueError(f"bad host name {name!r}")
        used = {ipaddress.IPv4Address(h.address) for h in self.hosts.values()}
        if address is None:
            ip4 = next(a for a in self.network.hosts() if a not in used)
        else:
            ip4 = ipaddress.IPv4Address(address)
            if ip4 not in self.network:
                raise ValueError(f"{ip4} is not in {self.network}")
        ip6: ipaddress.IPv6Address | None = None
        if self.network6 is not None:
            offset = int(ip4) - int(self.network.network_address)
            ip6 = ipaddress.IPv6Address(address6) if address6 else self.network6.network_address + offset
        elif address6 is not None:
            raise ValueError("address6 needs a Wan with subnet6")
        namespace = self.prefix + name
        create_namespace(namespace)
        self._made.append(namespace)
        fd = setup_tun_host(
            namespace,
            f"{ip4}/{self.network.prefixlen}",
            address6=f"{ip6}/{self.network6.prefixlen}" if ip6 is not None and self.network6 else None,
        )
        try:
            self.emulator.attach(name, fd, str(ip4), *([str(ip6)] if ip6 is not None else []))
        except BaseException:
            os.close(fd)
            raise
        host = Host(
            name,
            namespace,
            str(ip4),
            self.network.prefixlen,
            str(ip6) if ip6 is not None else None,
            self.network6.prefixlen if self.network6 else None,
        )
        self.hosts[name] = host
        return host

    def stats(self) -> dict[LinkKey, LinkStats]:
        """Counters per ordered pair of hosts (only the pairs that saw packets)."""
        return self.emulator.stats()

    def close(self) -> None:
        """Stop forwarding and delete the namespaces made (and any left with the prefix)."""
        self.emulator.stop()
        for namespace in self._made:
            delete_namespace(namespace)
        self._made.clear()
        cleanup(self.prefix)


# ---------------------------------------------------------------------------------------------
# The line-based control protocol


HELP = (
    "commands: delay A B SECONDS [oneway] | loss A B SHARE [oneway] | hops A B N [oneway] | "
    "cut A B [oneway] | heal A B [oneway] | reset | add NAME [ADDRESS] | stats | hosts | links | help | quit"
)


def handle_command(target: WanEmulator | Wan, line: str) -> str:
    """Apply one control line to *target*; the reply line (``ok``, ``error: ...`` or JSON).
    ``add NAME [ADDRESS]`` needs a :class:`Wan`. ``quit`` is the caller's business: it
    answers ``ok``."""
    emulator = target.emulator if isinstance(target, Wan) else target
    words = line.split()
    if not words:
        return "error: empty command"
    cmd, args = words[0].lower(), words[1:]
    oneway = bool(args) and args[-1].lower() in ("oneway", "one-way", "->")
    if oneway:
        args = args[:-1]
    try:
        if cmd in ("delay", "loss", "hops") and len(args) == 3:
            a, b, value = args
            if cmd == "delay":
                emulator.set_delay(a, b, float(value), symmetric=not oneway)
            elif cmd == "loss":
                emulator.set_loss(a, b, float(value), symmetric=not oneway)
            else:
                emulator.set_hops(a, b, int(value), symmetric=not oneway)
            return "ok"
        if cmd in ("cut", "heal") and len(args) == 2:
            a, b = args
            if cmd == "cut":
                emulator.cut(a, b, both=not oneway)
            else:
                emulator.heal(a, b, both=not oneway)
            return "ok"
        if cmd == "reset" and not args:
            emulator.reset()
            return "ok"
        if cmd == "stats" and not args:
            return json.dumps(emulator.stats_json(), sort_keys=True)
        if cmd == "hosts" and not args:
            if isinstance(target, Wan):
                return json.dumps({name: asdict(host) for name, host in target.hosts.items()}, sort_keys=True)
            return json.dumps(emulator.hosts(), sort_keys=True)
        if cmd == "add" and isinstance(target, Wan) and 1 <= len(args) <= 2 and not oneway:
            return json.dumps(asdict(target.add_host(args[0], args[1] if len(args) == 2 else None)))
        if cmd == "links" and not args:
            links = {f"{a}->{b}": asdict(link) for (a, b), link in sorted(emulator.table.links().items())}
            return json.dumps(links, sort_keys=True)
        if cmd == "help":
            return HELP
        if cmd == "quit":
            return "ok"
    except (KeyError, ValueError, RuntimeError) as exc:
        return f"error: {exc}"
    return f"error: bad command {line.strip()!r}; {HELP}"


class WanProcess(_HostAccess):
    """The same WAN run by this file's ``run`` command in a child process, driven over its
    control socket: the forwarding gets a process (and GIL) of its own, so busy threads of
    the caller cannot delay packets (in-process, a thread spinning in Python adds up to the
    interpreter's 5 ms switch interval per packet). Same methods as :class:`Wan`.

    *hosts*: names (addresses picked in order) or a mapping name -> address or None."""

    def __init__(
        self,
        prefix: str,
        hosts: Iterable[str] | Mapping[str, str | None] = (),
        subnet: str = "10.99.0.0/16",
        subnet6: str | None = None,
        seed: int = 0,
        python: str = sys.executable,
        startup_timeout: float = 30.0,
    ) -> None:
        self.prefix = prefix
        self.hosts = {}
        self._hosts = dict(hosts) if isinstance(hosts, Mapping) else dict.fromkeys(hosts)
        self._argv = [python, os.path.abspath(__file__), "run", "--prefix", prefix, "--subnet", subnet]
        self._argv += ["--seed", str(seed), "--no-stdin"]
        if subnet6:
            self._argv += ["--subnet6", subnet6]
        for name, address in self._hosts.items():
            self._argv += ["--host", f"{name}={address}" if address else name]
        self._startup_timeout = startup_timeout
        self._dir: str | None = None
        self.proc: subprocess.Popen[str] | None = None
        self._conn: socket.socket | None = None
        self._file: Any = None
        self._lock = threading.Lock()

    def start(self) -> WanProcess:
        """Start the program and wait for its ready line (raises with its stderr if it fails)."""
        self._dir = tempfile.mkdtemp(prefix="wanem-")
        control = os.path.join(self._dir, "control.sock")
        stderr = open(os.path.join(self._dir, "stderr"), "w")  # noqa: SIM115 - the child keeps it
        with stderr:
            self.proc = subprocess.Popen(
                [*self._argv, "--control", control], stdout=subprocess.PIPE, stderr=stderr, text=True
            )
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            line = self.proc.stdout.readline() if selector.select(self._startup_timeout) else ""
        if not line.startswith("{"):
            self.close()
            raise RuntimeError(f"wanem run did not start: {self.stderr_text()}")
        ready = json.loads(line)
        self.hosts = {name: Host(**host) for name, host in ready["hosts"].items()}
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._conn.connect(control)
        self._file = self._conn.makefile("rw", encoding="utf-8", newline="\n")
        return self

    def __enter__(self) -> WanProcess:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stderr_text(self) -> str:
        """What the program wrote to stderr."""
        if self._dir is None:
            return ""
        try:
            with open(os.path.join(self._dir, "stderr")) as f:
                return f.read()
        except OSError:
            return ""

    def command(self, line: str) -> str:
        """Send one control line; its reply (raises RuntimeError on ``error: ...``)."""
        if self._file is None:
            raise RuntimeError("not started")
        with self._lock:
            self._file.write(line.strip() + "\n")
            self._file.flush()
            reply: str = self._file.readline().strip()
        if not reply:
            raise RuntimeError(f"wanem run went away: {self.stderr_text()}")
        if reply.startswith("error:"):
            raise RuntimeError(f"{line.strip()}: {reply}")
        return reply

    def add_host(self, name: str, address: str | None = None) -> Host:
        """Add a host while running (see :meth:`Wan.add_host`)."""
        host = Host(**json.loads(self.command(f"add {name} {address or ''}")))
        self.hosts[name] = host
        return host

    def set_delay(self, a: str, b: str, seconds: float, symmetric: bool = True) -> None:
        self.command(f"delay {a} {b} {seconds!r}" + ("" if symmetric else " oneway"))

    def set_loss(self, a: str, b: str, share: float, symmetric: bool = True) -> None:
        self.command(f"loss {a} {b} {share!r}" + ("" if symmetric else " oneway"))

    def set_hops(self, a: str, b: str, hops: int, symmetric: bool = True) -> None:
        self.command(f"hops {a} {b} {hops}" + ("" if symmetric else " oneway"))

    def cut(self, a: str, b: str, both: bool = True) -> None:
        self.command(f"cut {a} {b}" + ("" if both else " oneway"))

    def heal(self, a: str, b: str, both: bool = True) -> None:
        self.command(f"heal {a} {b}" + ("" if both else " oneway"))

    def reset(self) -> None:
        self.command("reset")

    def link(self, a: str, b: str) -> Link:
        """The current link a->b."""
        links = json.loads(self.command("links"))
        return Link(**links[f"{a}->{b}"]) if f"{a}->{b}" in links else DEFAULT_LINK

    def stats(self) -> dict[LinkKey, LinkStats]:
        """Counters per ordered pair of hosts (only the pairs that saw packets)."""
        stats: dict[LinkKey, LinkStats] = {}
        for key, value in json.loads(self.command("stats"))["links"].items():
            a, b = key.split("->", 1)
            stats[a, b] = LinkStats(**value)
        return stats

    def close(self, timeout: float = 20.0) -> None:
        """Stop the program (SIGTERM: it deletes its namespaces), then delete any namespace
        left with the prefix (idempotent)."""
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        cleanup(self.prefix)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


class _Stop(Exception):
    pass


def _serve_control(path: str, wan: Wan, quit_event: threading.Event) -> socket.socket:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)

    def client(conn: socket.socket) -> None:
        with conn, conn.makefile("rw", encoding="utf-8", newline="\n") as f:
            for line in f:
                if not line.strip():
                    continue
                f.write(handle_command(wan, line) + "\n")
                f.flush()
                if line.split()[0].lower() == "quit":
                    quit_event.set()
                    return

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=client, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, name="wanem-control", daemon=True).start()
    return server


def _read_stdin(wan: Wan, quit_event: threading.Event, quit_at_eof: bool) -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        print(handle_command(wan, line), flush=True)
        if line.split()[0].lower() == "quit":
            break
    else:
        if not quit_at_eof:
            return
    quit_event.set()


def _parse_pair(spec: str) -> tuple[str, str, str]:
    match = re.fullmatch(r"([^:=]+):([^:=]+)=(.+)", spec)
    if not match:
        raise argparse.ArgumentTypeError(f"expected A:B=VALUE, not {spec!r}")
    return match.group(1), match.group(2), match.group(3)


def _cmd_run(args: argparse.Namespace) -> int:
    if args.no_stdin and not args.control:
        print("error: --no-stdin needs --control", file=sys.stderr)
        return 2
    quit_event = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        raise _Stop

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    wan = Wan(args.prefix, subnet=args.subnet, seed=args.seed, subnet6=args.subnet6)
    control: socket.socket | None = None
    try:
        wan.start()
        for spec in args.host:
            name, _, address = spec.partition("=")
            wan.add_host(name, address or None)
        for option, setter in (("delay", wan.set_delay), ("loss", wan.set_loss)):
            for a, b, value in getattr(args, option):
                setter(a, b, float(value))
        for a, b in (pair.split(":", 1) for pair in args.cut):
            wan.cut(a, b)
        if args.control:
            control = _serve_control(args.control, wan, quit_event)
        hosts = {name: asdict(host) for name, host in wan.hosts.items()}
        print(json.dumps({"ready": True, "pid": os.getpid(), "control": args.control, "hosts": hosts}), flush=True)
        if not args.no_stdin:
            threading.Thread(target=_read_stdin, args=(wan, quit_event, not args.control), daemon=True).start()
        while not quit_event.wait(1.0):
            if not wan.emulator.running:
                print(f"error: forwarding loop died: {wan.emulator.error!r}", file=sys.stderr)
                return 1
    except _Stop:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if control is not None:
            control.close()
            with contextlib.suppress(OSError):
                os.unlink(args.control)
        wan.close()
    return 0


def _cmd_ctl(args: argparse.Namespace) -> int:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(args.socket)
        with sock.makefile("rw", encoding="utf-8", newline="\n") as f:
            f.write(" ".join(args.command) + "\n")
            f.flush()
            reply = f.readline().strip()
    print(reply)
    return 1 if reply.startswith("error") else 0


def _cmd_ping(args: argparse.Namespace) -> int:
    result = icmp_echo(args.address, args.count, args.interval, args.timeout)
    if args.json:
        print(json.dumps({"address": args.address, "rtts": result.rtts}))
    else:
        for seq, rtt in enumerate(result.rtts):
            print(f"seq={seq} " + (f"time={rtt * 1000:.2f} ms" if rtt is not None else "timeout"))
        print(f"{result.sent} sent, {len(result.received)} received")
    return 0 if result.received else 1


def _cmd_cleanup(args: argparse.Namespace) -> int:
    for name in cleanup(args.prefix):
        print(f"deleted namespace {name}")
    return 0


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wanem", description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="build the namespaces and forward until told to stop")
    run.add_argument("--prefix", required=True, help="namespace name prefix (host NAME -> PREFIX+NAME)")
    run.add_argument("--subnet", default="10.99.0.0/16", help="IPv4 WAN subnet (default %(default)s)")
    run.add_argument("--subnet6", default=None, help="IPv6 WAN subnet (none by default)")
    run.add_argument("--host", action="append", default=[], metavar="NAME[=ADDR]", help="a host (repeat)")
    run.add_argument("--delay", action="append", default=[], type=_parse_pair, metavar="A:B=SECONDS")
    run.add_argument("--loss", action="append", default=[], type=_parse_pair, metavar="A:B=SHARE")
    run.add_argument("--cut", action="append", default=[], metavar="A:B")
    run.add_argument("--seed", type=int, default=0, help="loss RNG seed (default %(default)s)")
    run.add_argument("--control", default=None, metavar="SOCKET", help="also take commands on this UNIX socket")
    run.add_argument("--no-stdin", action="store_true", help="ignore stdin (needs --control)")
    run.set_defaults(func=_cmd_run)
    ctl = sub.add_parser("ctl", help="send one command to a running emulator's control socket")
    ctl.add_argument("socket")
    ctl.add_argument("command", nargs="+")
    ctl.set_defaults(func=_cmd_ctl)
    png = sub.add_parser("ping", help="ICMP echo (raw socket) from the current namespace")
    png.add_argument("address")
    png.add_argument("--count", "-c", type=int, default=3)
    png.add_argument("--interval", "-i", type=float, default=0.2)
    png.add_argument("--timeout", "-W", type=float, default=1.0)
    png.add_argument("--json", action="store_true")
    png.set_defaults(func=_cmd_ping)
    clean = sub.add_parser("cleanup", help="delete the namespaces whose names start with PREFIX")
    clean.add_argument("--prefix", required=True)
    clean.set_defaults(func=_cmd_cleanup)
    args = parser.parse_args(list(argv) if argv is not None else None)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
