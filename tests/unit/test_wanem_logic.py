"""The WAN emulator's logic without root: the link table, the forwarding decisions and the
delay heap of ``tests/tools/wanem.py``, fed with raw IP packets built here with struct."""

from __future__ import annotations

import ipaddress
import os
import struct
import threading

import pytest

from tests.support.poll import until
from tests.tools.wanem import (
    DEFAULT_LINK,
    Forwarder,
    Link,
    LinkTable,
    WanEmulator,
    destination,
    handle_command,
    ipv4_checksum,
    lower_ttl,
)

A, B, C = "10.99.0.1", "10.99.0.2", "10.99.0.3"
A6 = "fd99::1"
B6 = "fd99::2"


def ipv4(src: str, dst: str, payload: bytes = b"", ttl: int = 64, proto: int = 17) -> bytes:
    """A raw IPv4 packet with a correct header checksum."""
    header = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + len(payload),
        0,
        0,
        ttl,
        proto,
        0,
        ipaddress.IPv4Address(src).packed,
        ipaddress.IPv4Address(dst).packed,
    )
    header = header[:10] + struct.pack("!H", ipv4_checksum(header)) + header[12:]
    return header + payload


def ipv6(src: str, dst: str, payload: bytes = b"", hop_limit: int = 64) -> bytes:
    """A raw IPv6 packet (next header UDP)."""
    return (
        struct.pack("!IHBB", 6 << 28, len(payload), 17, hop_limit)
        + ipaddress.IPv6Address(src).packed
        + ipaddress.IPv6Address(dst).packed
        + payload
    )


@pytest.fixture
def table() -> LinkTable:
    t = LinkTable()
    t.add_host("a", A, A6)
    t.add_host("b", B, B6)
    t.add_host("c", C)
    return t


class Sink:
    """A write callback that records (destination, packet) and succeeds."""

    def __init__(self) -> None:
        self.out: list[tuple[str, bytes]] = []

    def __call__(self, dst: str, packet: bytes) -> bool:
        self.out.append((dst, packet))
        return True


def test_destination_from_ipv4_and_ipv6_headers() -> None:
    """The destination address is read from bytes 16..20 (IPv4) or 24..40 (IPv6); anything
    else (too short, other versions, empty) has none."""
    assert destination(ipv4(A, B, b"x")) == ipaddress.IPv4Address(B).packed
    assert destination(ipv6(A6, B6, b"x")) == ipaddress.IPv6Address(B6).packed
    assert destination(b"") is None
    assert destination(ipv4(A, B)[:19]) is None
    assert destination(ipv6(A6, B6)[:39]) is None
    assert destination(b"\x50" + bytes(40)) is None


def test_lookup_maps_addresses_to_hosts(table: LinkTable) -> None:
    """Each registered address, v4 or v6, leads to its host; others to nothing; an address
    or a name cannot be registered twice."""
    assert table.host_for(ipaddress.IPv4Address(B).packed) == "b"
    assert table.host_for(ipaddress.IPv6Address(A6).packed) == "a"
    assert table.host_for(ipaddress.IPv4Address("10.99.0.9").packed) is None
    assert table.hosts() == {"a": [A, A6], "b": [B, B6], "c": [C]}
    with pytest.raises(ValueError, match="belongs to host 'b'"):
        table.add_host("d", B)
    with pytest.raises(ValueError, match="exists"):
        table.add_host("a", "10.99.0.7")


def test_delay_per_direction_and_symmetric(table: LinkTable) -> None:
    """set_delay sets both directions by default and one with symmetric=False; the other
    links keep the default."""
    table.set_delay("a", "b", 0.06)
    assert table.link("a", "b").delay == table.link("b", "a").delay == 0.06
    table.set_delay("a", "b", 0.1, symmetric=False)
    assert table.link("a", "b").delay == 0.1
    assert table.link("b", "a").delay == 0.06
    assert table.link("a", "c") == DEFAULT_LINK
    assert table.links() == {("a", "b"): Link(delay=0.1), ("b", "a"): Link(delay=0.06)}


def test_settings_are_validated(table: LinkTable) -> None:
    """Negative delays, loss outside 0..1, bad hop counts and unknown hosts are refused."""
    with pytest.raises(ValueError):
        table.set_delay("a", "b", -0.1)
    with pytest.raises(ValueError):
        table.set_loss("a", "b", 1.5)
    with pytest.raises(ValueError):
        table.set_hops("a", "b", -1)
    with pytest.raises(KeyError):
        table.cut("a", "zz")
    assert table.links() == {}


def test_writers_replace_the_snapshot_never_mutate_it(table: LinkTable) -> None:
    """A reader holding a snapshot keeps seeing it unchanged while writers change the table
    (the forwarding loop reads one snapshot per packet, without a lock)."""
    before = table.snapshot
    table.set_delay("a", "b", 0.5)
    table.cut("a", "c")
    assert before.links == {}
    assert table.snapshot is not before
    assert table.snapshot.links[("a", "b")].delay == 0.5


def test_delayed_packets_are_due_after_their_link_delay(table: LinkTable) -> None:
    """A packet a->b with 60 ms one way is delivered to b at t+0.06, not before; b->a with
    10 ms at t+0.01; a zero-delay link delivers at once."""
    table.set_delay("a", "b", 0.06, symmetric=False)
    table.set_delay("b", "a", 0.01, symmetric=False)
    fwd = Forwarder(table)
    sink = Sink()
    ab, ba, ac = ipv4(A, B, b"ab"), ipv4(B, A, b"ba"), ipv4(A, C, b"ac")
    assert fwd.submit("a", ab, 100.0) == "b"
    assert fwd.submit("b", ba, 100.0) == "a"
    assert fwd.submit("a", ac, 100.0) == "c"
    assert fwd.deliver_due(100.0, sink) == 1
    assert sink.out == [("c", ac)]
    assert fwd.next_due() == pytest.approx(100.01)
    assert fwd.deliver_due(100.0099, sink) == 0
    assert fwd.deliver_due(100.01, sink) == 1
    assert fwd.deliver_due(100.0599, sink) == 0
    assert fwd.deliver_due(100.06, sink) == 1
    assert sink.out == [("c", ac), ("a", ba), ("b", ab)]
    assert fwd.next_due() is None
    assert fwd.stats()[("a", "b")].forwarded == 1


def test_order_is_kept_on_a_link(table: LinkTable) -> None:
    """Packets of one link leave in the order they came, also those submitted at the same
    instant, and also when the delay is lowered while packets are on the link."""
    table.set_delay("a", "b", 0.05)
    fwd = Forwarder(table)
    sink = Sink()
    packets = [ipv4(A, B, bytes([i])) for i in range(10)]
    for p in packets[:5]:
        fwd.submit("a", p, 1.0)
    table.set_delay("a", "b", 0.0)
    for i, p in enumerate(packets[5:]):
        fwd.submit("a", p, 1.001 + i * 0.001)
    fwd.deliver_due(1.2, sink)
    assert [p for _, p in sink.out] == packets


def test_loss_drops_the_configured_share_reproducibly(table: LinkTable) -> None:
    """Loss 0.3 drops about 30% of 10000 packets (within 2 points), only in the direction
    set, and the same seed drops the same packets."""
    table.set_loss("a", "b", 0.3, symmetric=False)

    def run(seed: int) -> list[bool]:
        fwd = Forwarder(table, seed=seed)
        kept = [fwd.submit("a", ipv4(A, B, struct.pack("!I", i)), 0.0) is not None for i in range(10000)]
        stats = fwd.stats()[("a", "b")]
        assert stats.lost == kept.count(False)
        assert fwd.submit("b", ipv4(B, A), 0.0) == "a"
        return kept

    first = run(7)
    assert 0.28 < first.count(False) / len(first) < 0.32
    assert run(7) == first
    assert run(8) != first
    table.set_loss("a", "b", 1.0)
    fwd = Forwarder(table)
    assert all(fwd.submit("a", ipv4(A, B), 0.0) is None for _ in range(100))
    assert all(fwd.submit("b", ipv4(B, A), 0.0) is None for _ in range(100))


def test_one_way_cut_and_heal(table: LinkTable) -> None:
    """cut(a, b, both=False) drops a->b only; b->a and a->c still pass; heal restores a->b
    and keeps its delay; drops are counted as cut."""
    table.set_delay("a", "b", 0.02)
    table.cut("a", "b", both=False)
    fwd = Forwarder(table)
    assert fwd.submit("a", ipv4(A, B), 0.0) is None
    assert fwd.submit("b", ipv4(B, A), 0.0) == "a"
    assert fwd.submit("a", ipv4(A, C), 0.0) == "c"
    assert fwd.stats()[("a", "b")].cut == 1
    table.heal("a", "b")
    assert table.link("a", "b") == Link(delay=0.02)
    assert fwd.submit("a", ipv4(A, B), 0.0) == "b"


def test_cut_both_ways(table: LinkTable) -> None:
    """cut(a, b) drops both directions (IPv4 and IPv6 alike) until healed."""
    table.cut("a", "b")
    fwd = Forwarder(table)
    assert fwd.submit("a", ipv4(A, B), 0.0) is None
    assert fwd.submit("b", ipv4(B, A), 0.0) is None
    assert fwd.submit("a", ipv6(A6, B6), 0.0) is None
    table.heal("b", "a")
    assert fwd.submit("a", ipv4(A, B), 0.0) == "b"
    assert fwd.submit("b", ipv6(B6, A6), 0.0) == "a"


def test_unknown_destination_is_dropped(table: LinkTable) -> None:
    """A packet to an address no host holds, a non-IP packet and a truncated one go nowhere
    and are counted per source."""
    fwd = Forwarder(table)
    assert fwd.submit("a", ipv4(A, "10.99.0.200"), 0.0) is None
    assert fwd.submit("a", ipv4(A, "127.0.0.1"), 0.0) is None
    assert fwd.submit("a", b"\x00garbage", 0.0) is None
    assert fwd.pending() == 0
    assert fwd.unroutable() == {"a": 3}
    assert fwd.stats() == {}


def test_hops_lower_the_ttl_and_fix_the_checksum(table: LinkTable) -> None:
    """With hops set, the IPv4 TTL is lowered (header checksum still valid) and the IPv6
    hop limit too; a packet whose TTL runs out is dropped as expired."""
    table.set_hops("a", "b", 5)
    fwd = Forwarder(table)
    sink = Sink()
    fwd.submit("a", ipv4(A, B, b"data", ttl=64), 0.0)
    fwd.submit("a", ipv6(A6, B6, b"data", hop_limit=64), 0.0)
    assert fwd.submit("a", ipv4(A, B, ttl=5), 0.0) is None
    fwd.deliver_due(0.0, sink)
    (_, v4), (_, v6) = sink.out
    assert v4[8] == 59
    assert ipv4_checksum(v4[:20]) == 0  # a valid header sums to 0xffff: its complement is 0
    assert v4[20:] == b"data"
    assert v6[7] == 59
    assert fwd.stats()[("a", "b")].expired == 1
    assert lower_ttl(ipv4(A, B, ttl=10), 0) == ipv4(A, B, ttl=10)


def test_failed_writes_are_counted_as_errors(table: LinkTable) -> None:
    """A write the destination refused counts as an error, not as forwarded."""
    fwd = Forwarder(table)
    fwd.submit("a", ipv4(A, B), 0.0)
    fwd.deliver_due(0.0, lambda dst, packet: False)
    stats = fwd.stats()[("a", "b")]
    assert (stats.forwarded, stats.errors, stats.dropped) == (0, 1, 1)


def test_control_commands() -> None:
    """The control lines set the same links as the API (both ways unless `oneway`), and
    errors come back as `error: ...` lines."""
    emulator = WanEmulator()
    try:
        emulator.table.add_host("a", A)
        emulator.table.add_host("b", B)
        assert handle_command(emulator, "delay a b 0.120") == "ok"
        assert handle_command(emulator, "delay b a 0.010 oneway") == "ok"
        assert handle_command(emulator, "loss a b 0.1 oneway") == "ok"
        assert handle_command(emulator, "cut a b oneway") == "ok"
        assert emulator.link("a", "b") == Link(delay=0.12, loss=0.1, cut=True)
        assert emulator.link("b", "a") == Link(delay=0.01)
        assert handle_command(emulator, "heal a b") == "ok"
        assert not emulator.link("a", "b").cut
        assert handle_command(emulator, "stats").startswith("{")
        assert handle_command(emulator, "links").startswith('{"a->b"')
        assert handle_command(emulator, "loss a b 2").startswith("error:")
        assert handle_command(emulator, "cut a zz").startswith("error:")
        assert handle_command(emulator, "frobnicate").startswith("error: bad command")
        assert handle_command(emulator, "reset") == "ok"
        assert emulator.table.links() == {}
    finally:
        emulator.stop()


def test_emulator_forwards_between_pipes() -> None:
    """The forwarding thread reads packets from one descriptor and writes them to the one of
    the destination host after the delay (pipes stand in for TUN devices here)."""
    emulator = WanEmulator()
    # a pipe is one-directional: host a's "TUN" is only read from, host b's only written to
    a_in_r, a_in_w = os.pipe()  # what host a sends (the emulator reads a_in_r)
    b_out_r, b_out_w = os.pipe()  # what host b receives (the emulator writes b_out_w)
    emulator.attach("a", a_in_r, A)
    emulator.attach("b", b_out_w, B)
    emulator.set_delay("a", "b", 0.05)
    done = threading.Event()
    got: list[bytes] = []

    def reader() -> None:
        got.append(os.read(b_out_r, 4096))
        done.set()

    threading.Thread(target=reader, daemon=True).start()
    emulator.start()
    try:
        packet = ipv4(A, B, b"hello")
        os.write(a_in_w, packet)
        assert not done.wait(0.03), "delivered before the delay"
        assert done.wait(2.0)
        assert got == [packet]
        # (the thread counts a packet once written, so the reader may see it first)
        until(lambda: (s := emulator.stats().get(("a", "b"))) is not None and s.forwarded == 1, 2.0, "the count")
    finally:
        emulator.stop()
        for fd in (a_in_w, b_out_r):
            os.close(fd)
    assert not emulator.running
