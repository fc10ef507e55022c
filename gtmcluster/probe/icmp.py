"""The ``icmp`` check: echo requests from one `IcmpPinger` per node.

`open_pinger` opens one socket per address family and keeps it for the life of the node:
a raw ICMP/ICMPv6 socket when the process may (root or CAP_NET_RAW), else an unprivileged
ping socket (``SOCK_DGRAM``, allowed when ``net.ipv4.ping_group_range`` covers the process's
group), else it raises `IcmpUnavailable` saying both ways. Every icmp check shares it: each
echo request gets its own sequence number and a random payload token, and a reply is matched
on (source address, identifier, sequence) and the token. On a ping socket the kernel
chooses the identifier, so the token stands in for it. Raw sockets also see ICMP errors
(destination unreachable, time exceeded) about our requests, which fail a check at once.
The sockets are read through ``reactor.addReader``; nothing blocks.
"""

from __future__ import annotations

import ipaddress
import os
import random
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from twisted.internet.abstract import FileDescriptor
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorFDSet
from twisted.logger import Logger

from gtmcluster.probe import icmpwire
from gtmcluster.probe.attempt import Attempt
from gtmcluster.probe.base import IcmpUnavailable, IPAddress, Result, Target
from gtmcluster.runtime.reactors import TimeFDSet, as_fdset, as_time

log = Logger()

TOKEN_BYTES = 16
#: datagrams read per wake-up before yielding to the reactor
READS_PER_WAKEUP = 64
PING_GROUP_RANGE = Path("/proc/sys/net/ipv4/ping_group_range")
FAMILIES = {4: (socket.AF_INET, socket.IPPROTO_ICMP), 6: (socket.AF_INET6, socket.IPPROTO_ICMPV6)}
#: Linux: let only echo replies and errors through to a raw socket (ICMP_FILTER / ICMP6_FILTER)
SOL_RAW = 255
ICMP_FILTER = 1
ICMP6_FILTER = 1


class IcmpSocket(Protocol):
    """What the pinger needs of a socket (a `socket.socket`; a fake in tests)."""

    def fileno(self) -> int: ...
    def sendto(self, data: bytes, address: tuple[Any, ...], /) -> int: ...
    def recvfrom(self, bufsize: int, /) -> tuple[bytes, Any]: ...
    def close(self) -> None: ...


SocketFactory = Callable[[int, int, int], Any]


@dataclass(slots=True)
class Channel:
    """One family's socket and how it behaves."""

    version: int
    sock: IcmpSocket
    raw: bool  # raw socket: our identifier is kept, and (IPv4) the IP header comes first

    @property
    def description(self) -> str:
        kind = "raw socket" if self.raw else "ping socket"
        return f"ICMPv{self.version} {kind}" if self.version == 6 else f"ICMP {kind}"


@dataclass(slots=True)
class _Pending:
    address: IPAddress
    token: bytes
    attempt: Attempt


class _Reader(FileDescriptor):
    """Hands every datagram of one ICMP socket to the pinger."""

    def __init__(
        self, reactor: IReactorFDSet, channel: Channel, deliver: Callable[[Channel, bytes, str], None]
    ) -> None:
        super().__init__(reactor)
        self._channel = channel
        self._deliver = deliver

    def fileno(self) -> int:
        return self._channel.sock.fileno()

    def doRead(self) -> None:
        for _ in range(READS_PER_WAKEUP):
            try:
                data, source = self._channel.sock.recvfrom(65535)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                log.warn("reading {socket}: {error}", socket=self._channel.description, error=e)
                return
            self._deliver(self._channel, data, str(source[0]))

    def logPrefix(self) -> str:
        return self._channel.description


class IcmpPinger:
    """Echo requests for every icmp check of a node, over one socket per address family."""

    def __init__(
        self,
        reactor: TimeFDSet,
        channels: Mapping[int, Channel],
        rng: random.Random | None = None,
        missing: Mapping[int, str] | None = None,
    ) -> None:
        self._reactor = reactor
        self._channels = dict(channels)
        self._missing = dict(missing or {})  # version -> why there is no socket
        self._rng = rng or random.SystemRandom()
        self.identifier = self._rng.randrange(1, 0x10000)
        self._sequence = self._rng.randrange(0x10000)
        self._pending: dict[tuple[int, int], _Pending] = {}
        self._closed = False
        self._readers: list[_Reader] = []
        fds = as_fdset(reactor)
        for channel in self._channels.values():
            reader = _Reader(fds, channel, self._received)
            fds.addReader(reader)
            self._readers.append(reader)

    @property
    def description(self) -> str:
        return ", ".join(c.description for c in self._channels.values()) or "no sockets"

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def ping(self, target: Target, timeout: float) -> Deferred[Result]:
        """One echo request to *target*; the reply (or its absence) is the result."""
        clock = as_time(self._reactor)
        attempt = Attempt(clock, timeout, "echo reply")
        version = target.address.version
        channel = self._channels.get(version)
        if self._closed:
            attempt.finish(False, "pinger closed")
            return attempt.deferred
        if channel is None:
            why = self._missing.get(version, "not opened")
            attempt.finish(False, f"no ICMPv{version} socket: {why}" if version == 6 else f"no ICMP socket: {why}")
            return attempt.deferred
        sequence = self._next_sequence(version)
        if sequence is None:
            attempt.finish(False, "too many echo requests in flight")
            return attempt.deferred
        key = (version, sequence)
        token = self._rng.randbytes(TOKEN_BYTES)
        self._pending[key] = _Pending(target.address, token, attempt)
        attempt.closing(lambda: self._pending.pop(key, None))
        packet = icmpwire.echo_request(version, self.identifier, sequence, token)
        address: tuple[Any, ...] = (str(target.address), 0) if version == 4 else (str(target.address), 0, 0, 0)
        try:
            channel.sock.sendto(packet, address)
        except OSError as e:
            attempt.finish(False, f"send failed: {(e.strerror or str(e)).lower()}")
        return attempt.deferred

    def close(self) -> None:
        """Stop reading, close the sockets, and fail the echo requests still waiting."""
        if self._closed:
            return
        self._closed = True
        fds = self._reactor
        for reader in self._readers:
            fds.removeReader(reader)
        self._readers.clear()
        for channel in self._channels.values():
            channel.sock.close()
        for pending in list(self._pending.values()):
            pending.attempt.finish(False, "pinger closed")

    def _next_sequence(self, version: int) -> int | None:
        for _ in range(0x10000):
            self._sequence = (self._sequence + 1) & 0xFFFF
            if (version, self._sequence) not in self._pending:
                return self._sequence
        return None

    def _received(self, channel: Channel, data: bytes, source_text: str) -> None:
        message = icmpwire.parse(channel.version, data, ip_header=channel.raw and channel.version == 4)
        if message is None:
            return
        try:
            source = ipaddress.ip_address(source_text.partition("%")[0])
        except ValueError:
            return
        pending = self._pending.get((channel.version, message.sequence))
        if pending is None or (channel.raw and message.identifier != self.identifier):
            return
        if isinstance(message, icmpwire.Echo):
            if source == pending.address and message.payload.startswith(pending.token):
                pending.attempt.finish(True, "echo reply")
        elif message.destination == pending.address:
            pending.attempt.finish(False, f"{message.reason} (from {source})")


def open_pinger(
    reactor: TimeFDSet, socket_factory: SocketFactory = socket.socket, rng: random.Random | None = None
) -> IcmpPinger:
    """The node's pinger: raw sockets where allowed, else ping sockets, else `IcmpUnavailable`."""
    channels: dict[int, Channel] = {}
    missing: dict[int, str] = {}
    denied: list[int] = []
    for version, (family, protocol) in FAMILIES.items():
        try:
            channel = _open(version, family, protocol, socket_factory)
        except PermissionError:
            denied.append(version)
            continue
        except OSError as e:  # EAFNOSUPPORT: this host has no IPv6 (or no IPv4)
            missing[version] = (e.strerror or str(e)).lower()
            continue
        channels[version] = channel
    if denied or not channels:
        for channel in channels.values():
            channel.sock.close()
        raise IcmpUnavailable(_denied_message(denied, missing))
    pinger = IcmpPinger(reactor, channels, rng, missing)
    log.info("icmp checks use {sockets}", sockets=pinger.description)
    return pinger


def _open(version: int, family: int, protocol: int, socket_factory: SocketFactory) -> Channel:
    """A raw socket, or if that is not permitted a ping socket (PermissionError if neither)."""
    try:
        sock = socket_factory(family, socket.SOCK_RAW, protocol)
        raw = True
    except PermissionError:
        sock = socket_factory(family, socket.SOCK_DGRAM, protocol)
        raw = False
    sock.setblocking(False)
    if raw:
        _filter(sock, version)
    return Channel(version, sock, raw)


def _filter(sock: Any, version: int) -> None:
    """Ask Linux to pass only echo replies and errors to a raw socket (an optimisation)."""
    wanted = (icmpwire.ECHO_REPLY[version], icmpwire.UNREACHABLE[version], icmpwire.TIME_EXCEEDED[version])
    try:
        if version == 4:
            # ICMP_FILTER: a set bit blocks that type (types 0-31)
            mask = 0xFFFFFFFF
            for kind in wanted:
                mask &= ~(1 << kind)
            sock.setsockopt(SOL_RAW, ICMP_FILTER, mask.to_bytes(4, "little"))
        else:
            # ICMP6_FILTER: 256 bits, a set bit blocks that type
            words = [0xFFFFFFFF] * 8
            for kind in wanted:
                words[kind >> 5] &= ~(1 << (kind & 31))
            sock.setsockopt(socket.IPPROTO_ICMPV6, ICMP6_FILTER, b"".join(w.to_bytes(4, "little") for w in words))
    except OSError:
        pass  # not Linux: every ICMP message is read and ignored unless it is ours


def _denied_message(denied: list[int], missing: Mapping[int, str]) -> str:
    gid = os.getegid()
    try:
        now = " ".join(PING_GROUP_RANGE.read_text().split())
    except OSError:
        now = "unreadable"
    families = " and ".join("ICMPv6" if v == 6 else "ICMP" for v in denied) or "ICMP"
    extra = "".join(f"; IPv{v}: {why}" for v, why in missing.items())
    return (
        f"cannot open an {families} socket: icmp checks need root (CAP_NET_RAW) or "
        f"net.ipv4.ping_group_range including gid {gid} (it is {now!r}){extra}"
    )
