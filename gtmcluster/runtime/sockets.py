"""Binding the node's listening sockets before the reactor adopts them.

Binding early (in the twistd options step, while still privileged) turns "address in use"
into a clear usage error instead of a traceback, and keeps port 53 working with ``--uid``.
The reactor adopts the bound sockets (``adoptDatagramPort``/``adoptStreamPort``). With
several answering processes, every DNS address gets one UDP socket per process, all with
SO_REUSEPORT (the kernel spreads the queries over them); the workers inherit theirs.
Without them SO_REUSEPORT stays off, so a second node on the same address is an error.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

UDP_RECEIVE_BUFFER = 4 * 1024 * 1024
TCP_BACKLOG = 256


class Endpoint(Protocol):
    """An address and port to bind (the config's `HostPort` is one)."""

    @property
    def host(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address: ...

    @property
    def port(self) -> int: ...


class ListenError(Exception):
    """An address could not be bound; the message says which and why."""


@dataclass(slots=True)
class Listener:
    address: Endpoint
    family: socket.AddressFamily
    udp: socket.socket
    tcp: socket.socket
    #: the UDP sockets of the answering workers (same address, SO_REUSEPORT), by worker
    workers: list[socket.socket] = field(default_factory=list)

    def close(self) -> None:
        self.udp.close()
        self.tcp.close()
        for sock in self.workers:
            sock.close()


def _socket(family: socket.AddressFamily, kind: socket.SocketKind) -> socket.socket:
    sock = socket.socket(family, kind)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    return sock


def _udp(family: socket.AddressFamily, where: tuple[str, int], shared: bool) -> socket.socket:
    udp = _socket(family, socket.SOCK_DGRAM)
    try:
        with contextlib.suppress(OSError):  # the kernel caps it; smaller still works
            udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UDP_RECEIVE_BUFFER)
        if shared:
            udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        udp.bind(where)
    except OSError:
        udp.close()
        raise
    udp.setblocking(False)
    return udp


def bind(addresses: Iterable[Endpoint], processes: int = 1) -> list[Listener]:
    """Bind UDP and TCP (listening) sockets on every address, and the UDP sockets of
    *processes* - 1 workers; all or nothing."""
    listeners: list[Listener] = []
    try:
        for hp in addresses:
            family = socket.AddressFamily.AF_INET6 if hp.host.version == 6 else socket.AddressFamily.AF_INET
            where = (str(hp.host), hp.port)
            udp = tcp = None
            workers: list[socket.socket] = []
            proto = "UDP"
            try:
                udp = _udp(family, where, processes > 1)
                proto = "TCP"
                tcp = _socket(family, socket.SOCK_STREAM)
                tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                tcp.bind(where)
                tcp.listen(TCP_BACKLOG)
                proto = "UDP, for the answering processes"
                for _ in range(processes - 1):
                    workers.append(_udp(family, where, True))
            except OSError as e:
                for s in (udp, tcp, *workers):
                    if s is not None:
                        s.close()
                raise ListenError(f"cannot listen for DNS on {hp} ({proto}): {e.strerror or e}") from None
            tcp.setblocking(False)
            listeners.append(Listener(hp, family, udp, tcp, workers))
    except ListenError:
        for listener in listeners:
            listener.close()
        raise
    return listeners


def bind_tcp(address: Endpoint, what: str) -> socket.socket:
    """A listening TCP socket on *address* (for the peer listener, the API)."""
    family = socket.AddressFamily.AF_INET6 if address.host.version == 6 else socket.AddressFamily.AF_INET
    sock = _socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((str(address.host), address.port))
        sock.listen(TCP_BACKLOG)
    except OSError as e:
        sock.close()
        raise ListenError(f"cannot listen for {what} on {address} (TCP): {e.strerror or e}") from None
    sock.setblocking(False)
    return sock
