"""Binding the node's listening sockets before the reactor adopts them.

Binding early (in the twistd options step, while still privileged) turns "address in use"
into a clear usage error instead of a traceback, and keeps port 53 working with ``--uid``.
The reactor adopts the bound sockets (``adoptDatagramPort``/``adoptStreamPort``), which is
also how several answering processes can share them later.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from gtmcluster.config.model import HostPort

UDP_RECEIVE_BUFFER = 4 * 1024 * 1024
TCP_BACKLOG = 256


class ListenError(Exception):
    """An address could not be bound; the message says which and why."""


@dataclass(slots=True)
class Listener:
    address: HostPort
    family: socket.AddressFamily
    udp: socket.socket
    tcp: socket.socket

    def close(self) -> None:
        self.udp.close()
        self.tcp.close()


def _socket(family: socket.AddressFamily, kind: socket.SocketKind) -> socket.socket:
    sock = socket.socket(family, kind)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    return sock


def bind(addresses: Iterable[HostPort]) -> list[Listener]:
    """Bind UDP and TCP (listening) sockets on every address; all or nothing."""
    listeners: list[Listener] = []
    try:
        for hp in addresses:
            family = socket.AddressFamily.AF_INET6 if hp.host.version == 6 else socket.AddressFamily.AF_INET
            where = (str(hp.host), hp.port)
            udp = tcp = None
            try:
                udp = _socket(family, socket.SOCK_DGRAM)
                with contextlib.suppress(OSError):  # the kernel caps it; smaller still works
                    udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UDP_RECEIVE_BUFFER)
                udp.bind(where)
                tcp = _socket(family, socket.SOCK_STREAM)
                tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                tcp.bind(where)
                tcp.listen(TCP_BACKLOG)
            except OSError as e:
                proto = "TCP" if udp is not None and tcp is not None else "UDP"
                for s in (udp, tcp):
                    if s is not None:
                        s.close()
                raise ListenError(f"cannot listen for DNS on {hp} ({proto}): {e.strerror or e}") from None
            udp.setblocking(False)
            tcp.setblocking(False)
            listeners.append(Listener(hp, family, udp, tcp))
    except ListenError:
        for listener in listeners:
            listener.close()
        raise
    return listeners


def bind_tcp(address: HostPort, what: str) -> socket.socket:
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
