"""Fuzz target: the byte stream of a TCP connection asking zone transfers (AXFR, IXFR).

A node's TCP listener (`dns.stream.DNSStreamFactory`) serving example.test, 1,200
records at serial 2 with a journal step from serial 1 (IXFR has a difference to send),
transfers allowed to the client, unsigned; big transfers are encoded a message per turn
of a fake clock, as on the reactor. The transport is `tests.support.sendbuffer.SendBuffer`
with a 4 KiB send buffer: it pauses the protocol as Twisted does, and the client's reads
resume it.

The input's first byte is the size of each read, less one. The rest is cut into reads,
each after one control byte saying what happens before it is delivered: bit 0, the client
takes what was sent; bit 1, a second passes (encoding turns, timeouts); bit 2, a reactor
turn (requests left for the next turn); bit 3, the client closes the connection (the end
of the input); bit 4, no read follows (the next byte is a control byte again). A read is
delivered only while the protocol reads the connection (as the reactor does not read a
paused transport); the rest wait for it. Invariants:

- nothing raises out of the protocol's entry points, and no traceback is logged;
- at most one transfer in flight (one connection, so one slot at most);
- the bytes waiting to be sent never pass the send buffer and one message;
- what the client takes is whole framed messages, every one a DNS response that parses;
- once the connection is gone its slot is back, and, the clock run on, nothing of it is
  left scheduled.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import dns.message
from twisted.internet.task import Clock, Cooperator

from fuzz.harness import Finding, no_tracebacks
from gtmcluster.config.dnsserver import TransferLimits
from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.dns.responder import Responder
from gtmcluster.dns.stream import DNSStreamFactory
from gtmcluster.dns.transfer import Transfers
from tests.support import configs
from tests.support.sendbuffer import SendBuffer, frames

HOSTS = "".join(f"host{i} IN A 10.0.{i // 256}.{i % 256}\n" for i in range(1200))
#: the zone at serial 2: host7 changed, new added (a journal step from serial 1)
SERIAL_2 = (
    configs.ZONE.replace(" 1 3600 600", " 2 3600 600")
    + HOSTS.replace("host7 IN A 10.0.0.7\n", "host7 IN A 10.9.0.7\n")
    + "new IN A 192.0.2.77\n"
)
SIZE = 4096
#: the most bytes that may wait: the send buffer, and the message that went past it
BOUND = SIZE + 2 + 65535
CLIENT = "127.0.0.1"


def _versions() -> tuple[Config, Config]:
    folder = Path(tempfile.mkdtemp(prefix="fuzz-xfr-"))
    config = configs.base()
    config["zones"][0]["transfer"] = {"allow": ["127.0.0.0/8"]}
    first = load(configs.write(folder / "v1", config, zone=configs.ZONE + HOSTS))
    second = load(configs.write(folder / "v2", config, zone=SERIAL_2))
    return first, second


_loaded: tuple[Config, Config] | None = None


def versions() -> tuple[Config, Config]:
    global _loaded  # noqa: PLW0603 - loaded once per process: parsing the zones is slow
    if _loaded is None:
        _loaded = _versions()
    return _loaded


def _no_wideips(*args: Any) -> Any:
    raise Finding("a wide IP was asked: the zone has none")


def listener(clock: Clock) -> DNSStreamFactory:
    """A TCP listener with the transfers of serial 2 (the journal from serial 1), big ones
    encoded a message per tick of *clock*: made per input, so each encodes anew."""
    v1, v2 = versions()
    cooperator = Cooperator(terminationPredicateFactory=lambda: lambda: True, scheduler=lambda f: clock.callLater(1, f))
    previous = Transfers(v1.zones, v1.transfers)
    transfers = Transfers(v2.zones, v2.transfers, previous, cooperator.cooperate)
    responder = Responder(v2.zones, {}, _no_wideips, transfers=transfers)
    return DNSStreamFactory(responder, clock, 10, 100, 5.0, TransferLimits(stall_timeout=30))


def check_taken(data: bytes) -> None:
    try:
        messages = frames(data)
    except ValueError as e:
        raise Finding(f"the client took a broken stream: {e}") from None
    for wire in messages:
        if len(wire) < 12 or not wire[2] & 0x80:
            raise Finding(f"not a response: {wire[:12]!r}")
        try:  # (as a QUERY: dnspython reads other opcodes' sections by their own rules)
            dns.message.from_wire(wire[:2] + bytes([wire[2] & 0x87]) + wire[3:], keyring=False)
        except Exception as e:
            raise Finding(f"a reply that does not parse: {type(e).__name__}: {e}") from None


def test_one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    step = data[0] + 1
    clock = Clock()
    factory = listener(clock)
    transport = SendBuffer(CLIENT, SIZE)
    waiting = b""
    with no_tracebacks():
        proto = factory.buildProtocol(transport.getPeer())
        transport.protocol = proto
        proto.makeConnection(transport)
        rest = data[1:]
        while rest and transport.connected:
            control = rest[0]
            size = 0 if control & 16 else step
            chunk, rest = rest[1 : 1 + size], rest[1 + size :]
            try:
                if control & 1:
                    check_taken(transport.take())
                if control & 2:
                    clock.advance(1)
                if control & 4:
                    clock.advance(0)
                if control & 8:
                    break
                waiting += chunk
                if transport.connected and transport.producerState == "producing" and waiting:
                    delivered, waiting = waiting, b""
                    proto.dataReceived(delivered)
            except Finding:
                raise
            except Exception as e:
                raise Finding(f"the protocol raised {type(e).__name__}: {e}") from e
            if factory.slots.in_flight > 1:
                raise Finding(f"{factory.slots.in_flight} transfers in flight on one connection")
            if transport.most > BOUND:
                raise Finding(f"{transport.most} bytes waited to be sent (at most {BOUND})")
        check_taken(transport.take())
        if transport.connected:
            transport.loseConnection()
        if factory.slots.in_flight:
            raise Finding("a closed connection kept its transfer slot")
        for _ in range(200):
            if not clock.getDelayedCalls():
                break
            clock.advance(1)
        if clock.getDelayedCalls():
            raise Finding(f"calls left scheduled after the connection went: {clock.getDelayedCalls()}")
