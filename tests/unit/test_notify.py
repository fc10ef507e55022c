"""NOTIFY out (RFC 1996) on a fake clock: sent only when a reload changes a zone's serial,
to every listed secondary, signed when the zone has a key, retried until answered, given
up after the last retry; a newer change replaces a pending one."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rdatatype
import dns.tsig
from twisted.internet.task import Clock

from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.dns.notify import RETRIES, Notifier
from tests.support import configs

SECRET = base64.b64encode(bytes(range(32))).decode()
KEY = "xfr-key"
RING = {dns.name.from_text(KEY): dns.tsig.Key(KEY, SECRET, "hmac-sha256")}
SECONDARIES = ["192.0.2.53:5300", "[2001:db8::53]:53"]


def config_with(tmp_path: Path, serial: int, tsig: bool = True, notify: list[str] | None = None) -> Config:
    raw = configs.base()
    raw["tsig_keys"] = {KEY: {"secret": SECRET}}
    transfer: dict[str, Any] = {"allow": ["192.0.2.0/24"], "notify": SECONDARIES if notify is None else notify}
    if tsig:
        transfer["tsig"] = KEY
    raw["zones"][0]["transfer"] = transfer
    folder = tmp_path / str(serial)
    zone = configs.ZONE.replace(" 1 3600 600", f" {serial} 3600 600")
    return load(configs.write(folder, raw, zone=zone))


class Wire:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, tuple[str, int]]] = []

    def __call__(self, data: bytes, addr: tuple[str, int]) -> None:
        self.sent.append((data, addr))


def setup(tmp_path: Path, **kw: Any) -> tuple[Clock, Wire, Notifier, Config, Config]:
    clock, wire = Clock(), Wire()
    return clock, wire, Notifier(clock, wire), config_with(tmp_path, 1, **kw), config_with(tmp_path, 2, **kw)


def answer(data: bytes, ring: Any = RING) -> bytes:
    query = dns.message.from_wire(data, keyring=ring)
    return dns.message.make_response(query).to_wire()


def test_a_new_serial_notifies_every_secondary_signed(tmp_path: Path) -> None:
    _, wire, notifier, old, new = setup(tmp_path)
    notifier.reloaded(old, new)
    assert [addr for _, addr in wire.sent] == [("192.0.2.53", 5300), ("2001:db8::53", 53)]
    for data, _ in wire.sent:
        message = dns.message.from_wire(data, keyring=RING)  # the signature verifies
        assert message.opcode() == dns.opcode.NOTIFY and message.flags & dns.flags.AA
        assert message.had_tsig
        assert message.question[0].rdtype == dns.rdatatype.SOA
        assert str(message.question[0].name) == "example.test."
        assert message.answer[0][0].serial == 2


def test_no_notify_at_start_or_for_the_same_serial(tmp_path: Path) -> None:
    _, wire, notifier, old, _ = setup(tmp_path)
    notifier.reloaded(None, old)
    notifier.reloaded(old, config_with(tmp_path / "again", 1))
    assert wire.sent == []


def test_retried_until_answered(tmp_path: Path) -> None:
    clock, wire, notifier, old, new = setup(tmp_path, notify=["192.0.2.53:53"])
    notifier.reloaded(old, new)
    clock.advance(RETRIES[0])
    clock.advance(RETRIES[1])
    assert len(wire.sent) == 3
    first_id = wire.sent[0][0][:2]
    assert all(data[:2] == first_id for data, _ in wire.sent)  # the same NOTIFY again
    notifier.received(answer(wire.sent[-1][0]), ("192.0.2.53", 53))
    clock.advance(sum(RETRIES) * 2)
    assert len(wire.sent) == 3 and notifier.counts["answered"] == 1 and not notifier.pending


def test_answers_from_elsewhere_or_with_another_id_do_not_count(tmp_path: Path) -> None:
    _, wire, notifier, old, new = setup(tmp_path, notify=["192.0.2.53:53"])
    notifier.reloaded(old, new)
    reply = answer(wire.sent[0][0])
    notifier.received(reply, ("192.0.2.54", 53))
    notifier.received(reply, ("192.0.2.53", 54))
    notifier.received(bytes([reply[0] ^ 1]) + reply[1:], ("192.0.2.53", 53))
    notifier.received(wire.sent[0][0], ("192.0.2.53", 53))  # a query (QR clear), not an answer
    assert notifier.pending and notifier.counts["answered"] == 0
    notifier.received(reply, ("::ffff:192.0.2.53", 53))  # (an IPv4-mapped source is the same)
    assert not notifier.pending and notifier.counts["answered"] == 1


def test_given_up_after_the_last_retry(tmp_path: Path) -> None:
    clock, wire, notifier, old, new = setup(tmp_path, notify=["192.0.2.53:53"])
    notifier.reloaded(old, new)
    for delay in RETRIES:
        clock.advance(delay)
    assert len(wire.sent) == 1 + len(RETRIES)
    clock.advance(RETRIES[-1])
    assert not notifier.pending and notifier.counts["given_up"] == 1
    clock.advance(100)
    assert len(wire.sent) == 1 + len(RETRIES)


def test_a_newer_change_replaces_the_pending_notify(tmp_path: Path) -> None:
    clock, wire, notifier, old, new = setup(tmp_path, notify=["192.0.2.53:53"], tsig=False)
    notifier.reloaded(old, new)
    notifier.reloaded(new, config_with(tmp_path / "3", 3, tsig=False, notify=["192.0.2.53:53"]))
    assert len(notifier.pending) == 1
    clock.advance(RETRIES[0])
    serials = [dns.message.from_wire(d).answer[0][0].serial for d, _ in wire.sent]
    assert serials == [2, 3, 3]  # the timer of serial 2's NOTIFY was cancelled
    assert not dns.message.from_wire(wire.sent[-1][0]).had_tsig
