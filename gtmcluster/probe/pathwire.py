"""What the LDNS path probers read off a reply: hop counts, reverse names and ancillary data.

Pure functions, no sockets. A UDP socket of a path probe asks Linux for the received IP TTL
(``IP_RECVTTL`` / ``IPV6_RECVHOPLIMIT``), for a receive timestamp (``SO_TIMESTAMPNS``) and
for the ICMP errors about its datagrams (``IP_RECVERR`` / ``IPV6_RECVERR``, read with
``MSG_ERRQUEUE``); `parse_ancillary` turns the control messages of one ``recvmsg`` into an
`Ancillary`. Python's socket module does not name most of these options, so their Linux
numbers are here.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from gtmcluster.probe import icmpwire
from gtmcluster.probe.base import IPAddress

#: the initial TTLs / hop limits senders use; a received TTL is counted down from the nearest one above it
INITIAL_TTLS = (32, 64, 128, 255)

# Linux socket options and control message types (include/uapi/linux/in.h, in6.h, socket.h)
SOL_IP = socket.IPPROTO_IP
SOL_IPV6 = socket.IPPROTO_IPV6
IP_TTL = 2
IP_RECVERR = 11
IP_RECVTTL = 12
IPV6_RECVERR = 25
IPV6_RECVHOPLIMIT = 51
IPV6_HOPLIMIT = 52
SO_TIMESTAMPNS = 35
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
MSG_ERRQUEUE = 0x2000

# sock_extended_err.ee_origin
SO_EE_ORIGIN_NONE = 0
SO_EE_ORIGIN_LOCAL = 1
SO_EE_ORIGIN_ICMP = 2
SO_EE_ORIGIN_ICMP6 = 3

#: struct sock_extended_err: errno, origin, type, code, pad, info, data
_EXTENDED_ERR = struct.Struct("=IBBBBII")
_TIMESPEC = {16: struct.Struct("=qq"), 8: struct.Struct("=ii")}
_INT = struct.Struct("=i")
_AF_INET = socket.AF_INET
_AF_INET6 = socket.AF_INET6


def hops_from_ttl(ttl: int | None) -> int:
    """Hops a packet took, from its received TTL: the nearest initial TTL at or above it
    minus it (``57`` -> 64 - 57 = 7, ``250`` -> 5, ``1`` -> 31); 0 when unknown."""
    if ttl is None or ttl < 0 or ttl > INITIAL_TTLS[-1]:
        return 0
    initial = next(t for t in INITIAL_TTLS if t >= ttl)
    return initial - ttl


def reverse_name(address: IPAddress) -> str:
    """The absolute PTR name of *address*: ``4.3.2.1.in-addr.arpa.``, nibbles under ``ip6.arpa.``."""
    return address.reverse_pointer + "."


@dataclass(frozen=True, slots=True)
class QueuedError:
    """An error about one of our datagrams, from the socket's error queue."""

    errno: int
    origin: int  # SO_EE_ORIGIN_*
    icmp_type: int
    icmp_code: int
    offender: IPAddress | None  # who sent the ICMP error (None for local errors)

    @property
    def from_icmp(self) -> bool:
        return self.origin in (SO_EE_ORIGIN_ICMP, SO_EE_ORIGIN_ICMP6)

    def describe(self) -> str:
        """``port unreachable``, ``host unreachable``, ``time exceeded in transit``, or the
        errno's text for a local error."""
        if not self.from_icmp:
            return os.strerror(self.errno).lower() if self.errno else "socket error"
        version = 6 if self.origin == SO_EE_ORIGIN_ICMP6 else 4
        if self.icmp_type == icmpwire.UNREACHABLE[version]:
            codes = icmpwire.UNREACHABLE_CODES[version]
            return codes.get(self.icmp_code, f"destination unreachable (code {self.icmp_code})")
        if self.icmp_type == icmpwire.TIME_EXCEEDED[version]:
            return "time exceeded in transit"
        return f"ICMP{'v6' if version == 6 else ''} type {self.icmp_type} code {self.icmp_code}"


@dataclass(frozen=True, slots=True)
class Ancillary:
    """What the control messages of one received datagram (or queued error) said."""

    ttl: int | None = None  # received IP TTL / IPv6 hop limit
    stamp_ns: int | None = None  # kernel receive time, CLOCK_REALTIME nanoseconds
    error: QueuedError | None = None


def parse_ancillary(ancdata: Iterable[tuple[int, int, bytes]]) -> Ancillary:
    """The TTL, receive timestamp and queued error in ``recvmsg``'s ancillary data."""
    ttl: int | None = None
    stamp: int | None = None
    error: QueuedError | None = None
    for level, kind, data in ancdata:
        if (level, kind) in ((SOL_IP, IP_TTL), (SOL_IPV6, IPV6_HOPLIMIT)) and len(data) >= _INT.size:
            ttl = _INT.unpack_from(data)[0]
        elif (level, kind) == (socket.SOL_SOCKET, SCM_TIMESTAMPNS) and len(data) in _TIMESPEC:
            seconds, nanoseconds = _TIMESPEC[len(data)].unpack(data)
            stamp = seconds * 1_000_000_000 + nanoseconds
        elif (level, kind) in ((SOL_IP, IP_RECVERR), (SOL_IPV6, IPV6_RECVERR)):
            error = _extended_error(data)
    return Ancillary(ttl, stamp, error)


def _extended_error(data: bytes) -> QueuedError | None:
    """A ``struct sock_extended_err`` and the offender's address after it (SO_EE_OFFENDER)."""
    if len(data) < _EXTENDED_ERR.size:
        return None
    errno, origin, kind, code, _pad, _info, _data = _EXTENDED_ERR.unpack_from(data)
    return QueuedError(errno, origin, kind, code, _sockaddr(data[_EXTENDED_ERR.size :]))


def _sockaddr(data: bytes) -> IPAddress | None:
    """The address in a ``sockaddr_in`` / ``sockaddr_in6`` (None for AF_UNSPEC or short data)."""
    if len(data) < 2:
        return None
    family = struct.unpack_from("=H", data)[0]
    if family == _AF_INET and len(data) >= 8:
        return ipaddress.IPv4Address(data[4:8])
    if family == _AF_INET6 and len(data) >= 24:
        return ipaddress.IPv6Address(data[8:24])
    return None
