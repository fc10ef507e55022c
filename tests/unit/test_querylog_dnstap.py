"""The query log's encodings: dnstap protobuf records, Frame Streams files, the extra field."""

from __future__ import annotations

import contextlib
import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gtmcluster.querylog import dnstap
from gtmcluster.querylog.dnstap import Decided, Record

u32 = st.integers(0, 2**32 - 1)
moments = st.tuples(st.integers(0, 2**40), st.integers(0, 999_999_999))
addresses4 = st.binary(min_size=4, max_size=4)
addresses6 = st.binary(min_size=16, max_size=16)


@st.composite
def records(draw: st.DrawFn) -> Record:
    family = draw(st.sampled_from([dnstap.INET, dnstap.INET6]))
    address = addresses4 if family == dnstap.INET else addresses6
    answered = draw(st.booleans())
    return Record(
        type=dnstap.AUTH_RESPONSE if answered else dnstap.AUTH_QUERY,
        family=family,
        protocol=draw(st.sampled_from([dnstap.UDP, dnstap.TCP])),
        query_address=draw(address),
        query_port=draw(st.integers(0, 65535)),
        response_address=draw(address),
        response_port=draw(st.integers(0, 65535)),
        query_time=draw(moments),
        query_message=draw(st.binary(max_size=600)),
        response_time=draw(moments) if answered else None,
        response_message=draw(st.binary(max_size=2000)) if answered else None,
        identity=draw(st.binary(max_size=40)),
        version=draw(st.binary(max_size=40)),
        extra=draw(st.binary(max_size=300)),
    )


@given(records())
def test_a_record_reads_back_as_written(record: Record) -> None:
    assert dnstap.decode(dnstap.encode(record)) == record


def test_the_protobuf_bytes_follow_dnstap_proto() -> None:
    """Field numbers and wire types as dnstap.proto has them, checked against bytes worked out
    by hand (a key is field number << 3 | wire type)."""
    record = Record(
        type=dnstap.AUTH_RESPONSE,
        family=dnstap.INET,
        protocol=dnstap.UDP,
        query_address=bytes([192, 0, 2, 1]),
        query_port=300,
        response_address=bytes([127, 0, 0, 1]),
        response_port=53,
        query_time=(1, 2),
        query_message=b"Q",
        response_time=(1, 2),
        response_message=b"R",
        identity=b"n1",
        extra=b"x",
    )
    message = (
        b"\x08\x02"  # 1 type: AUTH_RESPONSE
        b"\x10\x01"  # 2 socket_family: INET
        b"\x18\x01"  # 3 socket_protocol: UDP
        b"\x22\x04\xc0\x00\x02\x01"  # 4 query_address
        b"\x2a\x04\x7f\x00\x00\x01"  # 5 response_address
        b"\x30\xac\x02"  # 6 query_port 300 (a two-byte varint)
        b"\x38\x35"  # 7 response_port 53
        b"\x40\x01"  # 8 query_time_sec
        b"\x4d\x02\x00\x00\x00"  # 9 query_time_nsec (fixed32, little-endian)
        b"\x52\x01Q"  # 10 query_message
        b"\x60\x01"  # 12 response_time_sec
        b"\x6d\x02\x00\x00\x00"  # 13 response_time_nsec
        b"\x72\x01R"  # 14 response_message
    )
    expected = b"\x0a\x02n1" + b"\x1a\x01x" + b"\x72" + bytes([len(message)]) + message + b"\x78\x01"
    assert dnstap.encode(record) == expected


@given(st.binary(max_size=200))
def test_any_bytes_decode_or_are_refused(data: bytes) -> None:
    with contextlib.suppress(dnstap.DecodeError):
        dnstap.decode(data)


@pytest.mark.parametrize(
    ("address", "family", "packed"),
    [
        ("192.0.2.7", dnstap.INET, bytes([192, 0, 2, 7])),
        ("2001:db8::1", dnstap.INET6, bytes.fromhex("20010db8000000000000000000000001")),
        ("::ffff:192.0.2.7", dnstap.INET, bytes([192, 0, 2, 7])),
        ("fe80::1%eth0", dnstap.INET6, bytes.fromhex("fe800000000000000000000000000001")),
    ],
)
def test_addresses_are_packed_by_family(address: str, family: int, packed: bytes) -> None:
    assert dnstap.packed(address) == (family, packed)


# -- Frame Streams ----------------------------------------------------------------------------


def test_control_frames_are_those_of_the_fstrm_file_format() -> None:
    start = bytes.fromhex("0000000000000022000000020000000100000016") + b"protobuf:dnstap.Dnstap"
    assert dnstap.start_frame() == start
    assert bytes.fromhex("000000000000000400000003") == dnstap.STOP_FRAME
    assert dnstap.data_frame(b"abc") == b"\x00\x00\x00\x03abc"


@given(st.lists(st.binary(min_size=1, max_size=300), max_size=20), st.booleans())
def test_a_file_reads_back_as_written(payloads: list[bytes], stopped: bool) -> None:
    data = dnstap.start_frame() + b"".join(dnstap.data_frame(p) for p in payloads)
    data += dnstap.STOP_FRAME if stopped else b""
    frames = dnstap.read_frames(data)
    assert frames.content_type == dnstap.CONTENT_TYPE
    assert frames.records == payloads
    assert frames.stopped is stopped


@given(st.lists(st.binary(min_size=1, max_size=50), min_size=1, max_size=5), st.data())
def test_a_cut_file_is_refused(payloads: list[bytes], data: st.DataObject) -> None:
    whole = dnstap.start_frame() + b"".join(dnstap.data_frame(p) for p in payloads)
    # (cut inside a frame: at a frame boundary the part read is a whole, unstopped file)
    ends = {len(dnstap.start_frame())}
    at = len(dnstap.start_frame())
    for p in payloads:
        at += 4 + len(p)
        ends.add(at)
    cut = data.draw(st.integers(1, len(whole) - 1).filter(lambda n: n not in ends))
    with pytest.raises(dnstap.FrameError):
        dnstap.read_frames(whole[:cut])


@given(st.binary(max_size=200))
def test_any_bytes_read_as_frames_or_are_refused(data: bytes) -> None:
    with contextlib.suppress(dnstap.FrameError):
        dnstap.read_frames(data)


def test_frames_out_of_place_are_refused() -> None:
    frame = dnstap.data_frame(b"x")
    for data, why in [
        (frame, "before the START"),
        (dnstap.STOP_FRAME, "before the START"),
        (dnstap.start_frame() * 2, "second START"),
        (dnstap.start_frame() + dnstap.STOP_FRAME + frame, "after the STOP"),
        (b"", "no START"),
    ]:
        with pytest.raises(dnstap.FrameError, match=why):
            dnstap.read_frames(data)


# -- the extra field ------------------------------------------------------------------------

names = st.text(min_size=1, max_size=30)


@given(names, st.text(max_size=20), st.text(max_size=20), st.text(max_size=20), st.lists(names, max_size=4))
def test_the_extra_field_reads_back_as_written(
    wideip: str, pool: str, slot: str, method: str, members: list[str]
) -> None:
    decided = Decided(wideip, pool, slot, method, tuple(members))
    encoded = dnstap.encode_extra(decided)
    assert encoded.isascii()
    assert dnstap.parse_extra(encoded) == decided


def test_the_extra_field_form() -> None:
    decided = Decided("www.example.com", "web", "preferred", "topology", ("vs1", "vs 2"))
    assert dnstap.encode_extra(decided) == (
        b"gtm1 wideip=www.example.com pool=web slot=preferred method=topology members=vs1,vs%202"
    )
    assert dnstap.encode_extra(Decided("a.example", method="drop")) == b"gtm1 wideip=a.example method=drop"
    assert dnstap.parse_extra(b"") is None
    # a later gtm1 writer may add keys: a reader skips them
    assert dnstap.parse_extra(b"gtm1 wideip=a.example colour=blue") == Decided("a.example")


@pytest.mark.parametrize(
    "data",
    [
        b"gtm2 wideip=a",
        b"gtm1 pool=p",
        b"gtm1 wideip=a wideip=b",
        b"gtm1 wideip",
        b"gtm1 wideip=%4",
        b"\xff",
        b"gtm1 wideip=%ff",
    ],
)
def test_a_malformed_extra_field_is_refused(data: bytes) -> None:
    with pytest.raises(dnstap.DecodeError):
        dnstap.parse_extra(data)


@given(st.binary(max_size=100))
def test_any_extra_bytes_parse_or_are_refused(data: bytes) -> None:
    with contextlib.suppress(dnstap.DecodeError):
        dnstap.parse_extra(data)


# -- reading a frame at a time ----------------------------------------------------------------


class CountedReads(io.BytesIO):
    """A file whose reads are counted: the most asked at once, and the bytes read so far."""

    def __init__(self, data: bytes):
        super().__init__(data)
        self.largest = 0
        self.total = 0

    def read(self, size: int | None = -1, /) -> bytes:
        assert size is not None and size >= 0, "the whole file asked for"
        data = super().read(size)
        self.largest = max(self.largest, size)
        self.total += len(data)
        return data


@given(st.lists(st.binary(min_size=1, max_size=3000), min_size=1, max_size=30), st.booleans())
def test_a_file_is_read_a_frame_at_a_time(payloads: list[bytes], stopped: bool) -> None:
    """No read asks for more than one frame, and a frame is read only when it is wanted."""
    data = dnstap.start_frame() + b"".join(dnstap.data_frame(p) for p in payloads)
    file = CountedReads(data + (dnstap.STOP_FRAME if stopped else b""))
    reader = dnstap.FrameReader(file)
    at = len(dnstap.start_frame())
    for payload, got in zip(payloads, reader, strict=False):
        at += 4 + len(payload)
        assert got == payload and file.total == at
    assert list(reader) == [] and reader.stopped is stopped and reader.cut == 0
    assert file.largest == max(len(dnstap.start_frame()) - 8, *map(len, payloads))


@given(st.binary(max_size=400))
def test_any_bytes_read_a_frame_at_a_time_or_are_refused(tail: bytes) -> None:
    """Whatever follows a START frame: FrameError, or the whole frames before a cut (the
    strict reader's frames of the part before it) and the cut's length."""
    data = dnstap.start_frame() + tail
    try:
        reader = dnstap.FrameReader(io.BytesIO(data))
        records = list(reader)
    except dnstap.FrameError:
        return
    assert reader.end + reader.cut == len(data)
    assert dnstap.read_frames(data[: reader.end]) == dnstap.Frames(dnstap.CONTENT_TYPE, records, reader.stopped)


@given(st.lists(st.binary(min_size=1, max_size=50), min_size=1, max_size=10), st.data())
def test_a_limit_is_read_no_further(payloads: list[bytes], data: st.DataObject) -> None:
    """With *limit* (a file's size when opened) nothing past it is read: the frames before
    it, and a frame across it counted as cut."""
    whole = dnstap.start_frame() + b"".join(dnstap.data_frame(p) for p in payloads)
    limit = data.draw(st.integers(len(dnstap.start_frame()), len(whole)))
    file = CountedReads(whole + dnstap.data_frame(b"written later"))
    reader = dnstap.FrameReader(file, limit)
    records = list(reader)
    assert file.total == limit and reader.end + reader.cut == limit
    assert records == dnstap.read_frames(whole[: reader.end]).records


def test_frames_too_long_are_refused_before_they_are_read() -> None:
    at = len(dnstap.start_frame())
    for head, why in [
        ((dnstap.MAX_FRAME + 1).to_bytes(4, "big"), f"a frame of {dnstap.MAX_FRAME + 1} bytes at {at}: a record is"),
        (b"\xff\xff\xff\xff", f"a frame of 4294967295 bytes at {at}: a record is {dnstap.MAX_FRAME} bytes at most"),
        (b"\0\0\0\0" + (dnstap.MAX_CONTROL + 1).to_bytes(4, "big"), f"a control frame of bad length at {at}"),
    ]:
        file = CountedReads(dnstap.start_frame() + head + b"\0" * 100)
        with pytest.raises(dnstap.FrameError, match=why):
            list(dnstap.FrameReader(file))
        assert file.total == at + len(head)
