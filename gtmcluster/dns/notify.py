"""NOTIFY out (RFC 1996): tell a zone's secondaries (``zones[].transfer.notify``) that a
reload gave it a new serial, so they transfer it now rather than at their refresh timer.

Each secondary gets a NOTIFY over UDP with the zone's SOA in the answer section, signed
with the zone's ``tsig`` key when it has one, sent again after 2, 4, 8 and 16 seconds
until it answers (a reply with our ID, the NOTIFY opcode and QR; RFC 1996 3.6), then given
up and logged. A newer change to the same zone replaces the pending one. Nothing is sent
when a node starts: a secondary asks for the SOA itself when it starts or refreshes.
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rdataclass
import dns.rdatatype
import dns.tsig
from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IDelayedCall, IListeningPort, IReactorTime
from twisted.internet.protocol import DatagramProtocol
from twisted.logger import Logger

from gtmcluster.config.addresses import IPAddress
from gtmcluster.config.dnsserver import TSIGKey
from gtmcluster.config.model import Config
from gtmcluster.dns.transfer import serial_of, to_dnspython
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import Zone
from gtmcluster.runtime.reactors import TimeUDP, as_time

log = Logger()

#: seconds before each retry (RFC 1996 3.6: a few, growing); after the last, given up
RETRIES = (2.0, 4.0, 8.0, 16.0)

Target = tuple[IPAddress, int]
Send = Callable[[bytes, tuple[str, int]], None]


@dataclass
class _Pending:
    origin: Name
    serial: int
    wire: bytes
    query_id: int
    tries: int = 0
    timer: IDelayedCall | None = field(default=None, repr=False)


class Notifier:
    """Sends NOTIFY for zones whose serial a reload changed; *send* puts a datagram on the
    wire (`NotifyProtocol`), `received` takes the replies."""

    def __init__(self, clock: IReactorTime, send: Send, rng: random.Random | None = None):
        self.clock = clock
        self.send = send
        self.rng = rng or random.SystemRandom()
        #: (zone origin, secondary) -> the NOTIFY not yet answered
        self.pending: dict[tuple[Name, Target], _Pending] = {}
        #: what happened, for tests and status: sent, answered, given up
        self.counts = {"sent": 0, "answered": 0, "given_up": 0}

    def reloaded(self, old: Config | None, new: Config) -> None:
        """Notify the secondaries of every zone with ``notify`` whose serial changed."""
        if old is None:
            return
        for origin, settings in new.transfers.items():
            zone = new.zones.by_origin.get(origin)
            before = old.zones.by_origin.get(origin)
            if zone is None or not settings.notify or before is None or serial_of(before) == serial_of(zone):
                continue
            for target in settings.notify:
                self.notify(zone, target, settings.tsig)

    def notify(self, zone: Zone, target: Target, key: TSIGKey | None) -> None:
        """Send a NOTIFY for *zone* to *target* and keep it until answered or given up."""
        slot = (zone.origin_key, target)
        old = self.pending.pop(slot, None)
        if old is not None and old.timer is not None and old.timer.active():
            old.timer.cancel()
        query_id = self.rng.randrange(65536)
        soa = to_dnspython(zone.soa)
        message = dns.message.Message(id=query_id)
        message.set_opcode(dns.opcode.NOTIFY)
        message.flags |= dns.flags.AA
        message.find_rrset(message.question, soa.name, dns.rdataclass.IN, dns.rdatatype.SOA, create=True)
        message.answer.append(soa)
        if key is not None:
            secret = dns.tsig.Key(key.name, key.secret, key.algorithm)
            message.use_tsig(secret, dns.name.from_text(key.name), algorithm=key.algorithm)
        pending = _Pending(zone.origin_key, serial_of(zone), message.to_wire(), query_id)
        self.pending[slot] = pending
        self._send(slot, pending)

    def _send(self, slot: tuple[Name, Target], pending: _Pending) -> None:
        address, port = slot[1]
        try:
            self.send(pending.wire, (str(address), port))
        except OSError as e:
            log.warn("NOTIFY to {address}:{port} not sent: {error}", address=address, port=port, error=e)
        self.counts["sent"] += 1
        if pending.tries < len(RETRIES):
            pending.timer = self.clock.callLater(RETRIES[pending.tries], self._retry, slot, pending)
        else:
            pending.timer = self.clock.callLater(RETRIES[-1], self._give_up, slot, pending)
        pending.tries += 1

    def _retry(self, slot: tuple[Name, Target], pending: _Pending) -> None:
        if self.pending.get(slot) is pending:
            self._send(slot, pending)

    def _give_up(self, slot: tuple[Name, Target], pending: _Pending) -> None:
        if self.pending.get(slot) is not pending:
            return
        del self.pending[slot]
        self.counts["given_up"] += 1
        address, port = slot[1]
        log.warn(
            "NOTIFY for serial {serial} to {address}:{port}: no answer after {tries} tries",
            serial=pending.serial,
            address=address,
            port=port,
            tries=pending.tries,
            event="notify_given_up",
        )

    def received(self, data: bytes, source: tuple[str, int]) -> None:
        """A datagram from *source*: the answer to a pending NOTIFY, or ignored."""
        if len(data) < 12 or not data[2] & 0x80 or (data[2] >> 3) & 0xF != dns.opcode.NOTIFY:
            return
        query_id = int.from_bytes(data[:2], "big")
        for slot, pending in list(self.pending.items()):
            address, port = slot[1]
            if pending.query_id == query_id and _same(address, source[0]) and port == source[1]:
                del self.pending[slot]
                if pending.timer is not None and pending.timer.active():
                    pending.timer.cancel()
                self.counts["answered"] += 1
                return

    def stop(self) -> None:
        for pending in self.pending.values():
            if pending.timer is not None and pending.timer.active():
                pending.timer.cancel()
        self.pending.clear()


class NotifyProtocol(DatagramProtocol):
    """The UDP socket NOTIFYs leave by and their answers come back to."""

    noisy = False

    def __init__(self) -> None:
        self.notifier: Notifier | None = None

    def datagramReceived(self, datagram: bytes, addr: Any) -> None:
        if self.notifier is not None:
            self.notifier.received(datagram, (addr[0], addr[1]))

    def sendto(self, data: bytes, addr: tuple[str, int]) -> None:
        if self.transport is not None:
            self.transport.write(data, addr)


def _same(address: IPAddress, source: str) -> bool:
    try:
        seen = ipaddress.ip_address(source.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(seen, ipaddress.IPv6Address) and seen.ipv4_mapped is not None:
        return seen.ipv4_mapped == address
    return seen == address


class NotifyService(Service):
    """Owns the NOTIFY sockets (one IPv4, one IPv6, on ports the system picks) and the
    `Notifier` that uses them."""

    def __init__(self, reactor: TimeUDP):
        self.reactor = reactor
        self.protocols = {4: NotifyProtocol(), 6: NotifyProtocol()}
        self.notifier = Notifier(as_time(reactor), self._sendto)
        self.ports: list[IListeningPort] = []

    def _sendto(self, data: bytes, addr: tuple[str, int]) -> None:
        family = ipaddress.ip_address(addr[0]).version
        self.protocols[family].sendto(data, addr)

    def startService(self) -> None:
        super().startService()
        for family, interface in ((4, "0.0.0.0"), (6, "::")):
            proto = self.protocols[family]
            proto.notifier = self.notifier
            try:
                self.ports.append(self.reactor.listenUDP(0, proto, interface=interface))
            except CannotListenError as e:  # (a host without IPv6 notifies over IPv4 only)
                log.info("no IPv{family} socket for NOTIFY: {error}", family=family, error=e)

    def stopService(self) -> defer.Deferred[None]:
        super().stopService()
        self.notifier.stop()
        ports, self.ports = self.ports, []
        return defer.gatherResults([defer.maybeDeferred(p.stopListening) for p in ports]).addCallback(lambda _: None)
