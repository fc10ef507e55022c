"""dnstap records in a Frame Streams file, written and read by hand.

A record is a ``dnstap.Dnstap`` protobuf message (https://dnstap.info, dnstap.proto) holding
one ``Message`` of type AUTH_RESPONSE: the client's address and port, ours, the transport,
when the query came and the answer left, the query's wire bytes and the response's. A query
the node did not answer (dropped by a decision, or by rate limiting) is an AUTH_QUERY with
the query alone. The ``extra`` field says which wide IP decided, and how (`Decided`,
`encode_extra`, `parse_extra`). Only the fields written here are encoded: varints,
fixed32 and length-delimited bytes (protobuf's wire format), so no protobuf library is
needed; `decode` reads them back (and skips any other field), for tests and readers.

The file is a Frame Streams unidirectional stream (fstrm): a START control frame naming the
content type ``protobuf:dnstap.Dnstap``, data frames (a 32-bit big-endian length, then a
record), and a STOP control frame when the file is closed (`start_frame`, `data_frame`,
`STOP_FRAME`). `FrameReader` reads such a file a frame at a time, whatever its size (a
frame of at most `MAX_FRAME`, 1 MiB, as fstrm's own reader); `read_frames` the bytes of a
small one, strictly.
"""

from __future__ import annotations

import io
import ipaddress
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

CONTENT_TYPE = b"protobuf:dnstap.Dnstap"

# -- Frame Streams ----------------------------------------------------------------------------

_U32 = struct.Struct("!I")
CONTROL_ACCEPT = 0x01
CONTROL_START = 0x02
CONTROL_STOP = 0x03
CONTROL_FIELD_CONTENT_TYPE = 0x01


def _control(kind: int, content_type: bytes | None = None) -> bytes:
    body = _U32.pack(kind)
    if content_type is not None:
        body += _U32.pack(CONTROL_FIELD_CONTENT_TYPE) + _U32.pack(len(content_type)) + content_type
    return _U32.pack(0) + _U32.pack(len(body)) + body  # the escape (a zero length), then the frame


def start_frame(content_type: bytes = CONTENT_TYPE) -> bytes:
    """The START control frame that opens a file of *content_type* records."""
    return _control(CONTROL_START, content_type)


#: the STOP control frame that ends a file
STOP_FRAME = _control(CONTROL_STOP)


def data_frame(payload: bytes) -> bytes:
    return _U32.pack(len(payload)) + payload


class FrameError(ValueError):
    """The bytes are not a Frame Streams file (or not a whole one)."""


@dataclass(frozen=True)
class Frames:
    """What a Frame Streams file holds."""

    content_type: bytes
    records: list[bytes]
    stopped: bool  # it ends with a STOP frame (closed properly)


def read_frames(data: bytes) -> Frames:
    """The content type and data frames of a Frame Streams file held whole in *data*, strictly:
    a frame cut short is an error too. Raises FrameError. (For tests and small files; a
    file of any size is read a frame at a time with `FrameReader`.)"""
    reader = FrameReader(io.BytesIO(data))
    records = list(reader)
    if reader.cut:
        raise FrameError(f"a frame cut short at {reader.end}")
    return Frames(reader.content_type, records, reader.stopped)


#: the longest data frame read: fstrm's own reader's default (FSTRM_READER_MAX_FRAME_SIZE_DEFAULT,
#: 1 MiB); a record of the query log is at most a query and a response of 64 KiB each and a
#: few hundred bytes more
MAX_FRAME = 1 << 20
#: the longest control frame (fstrm: FSTRM_CONTROL_FRAME_LENGTH_MAX)
MAX_CONTROL = 512


class FrameReader:
    """The data frames of a Frame Streams file, read from *file* (a binary file object) one
    frame at a time: at most one frame (`MAX_FRAME`) is held, whatever the file's size.

    The START frame is read when the reader is made (`content_type`). Iterating yields each
    data frame's payload in order, and ends at the end of the file, at *limit* bytes from
    where *file* stood (a file being written is read no further than its size when
    opened), or at a frame cut short there (a record still being written, a cut file):
    `cut` then says how many bytes were left unread and `end` where the last whole frame
    ends. Anything else out of place raises FrameError: a frame longer than `MAX_FRAME`
    (or a control frame longer than `MAX_CONTROL`), a data frame before the START frame, a
    second START, an unknown control frame, any byte after the STOP frame (`stopped`).
    """

    def __init__(self, file: BinaryIO, limit: int | None = None):
        self._file = file
        self._left = limit
        #: where the last whole frame read ends, from where *file* stood
        self.end = 0
        #: bytes after the last whole frame left unread: a frame cut short (0: none)
        self.cut = 0
        #: the file ends with a STOP frame (closed properly)
        self.stopped = False
        self._stop = 0
        start = self._frame()
        if start is None:
            raise FrameError("no START frame")
        kind, body = start
        if kind != CONTROL_START:
            raise FrameError(
                "a data frame before the START frame"
                if kind is None
                else "a STOP frame before the START frame"
                if kind == CONTROL_STOP
                else f"control frame type {kind} in a file"
            )
        #: the content type the START frame names (b"" for none)
        self.content_type = _content_type(body)

    def __iter__(self) -> Iterator[bytes]:
        while (frame := self._frame()) is not None:
            if self.stopped:
                raise FrameError(f"bytes after the STOP frame at {self._stop}")
            kind, body = frame
            if kind is None:
                yield body
            elif kind == CONTROL_STOP:
                self.stopped = True
                self._stop = self.end
            elif kind == CONTROL_START:
                raise FrameError("a second START frame")
            else:
                raise FrameError(f"control frame type {kind} in a file")
        if self.stopped and self.cut:
            raise FrameError(f"bytes after the STOP frame at {self._stop}")

    def _read(self, size: int) -> bytes:
        if self._left is not None:
            size = min(size, self._left)
        data = self._file.read(size)
        if self._left is not None:
            self._left -= len(data)
        return data

    def _frame(self) -> tuple[int | None, bytes] | None:
        """The next frame: (None, payload) for a data frame, (control type, fields) for a
        control frame; None at the end or at a frame cut short (counted in `cut`)."""
        head = self._read(4)
        if len(head) < 4:
            self.cut += len(head)
            return None
        (length,) = _U32.unpack(head)
        if length:
            if length > MAX_FRAME:
                raise FrameError(f"a frame of {length} bytes at {self.end}: a record is {MAX_FRAME} bytes at most")
            payload = self._read(length)
            if len(payload) < length:
                self.cut += 4 + len(payload)
                return None
            self.end += 4 + length
            return None, payload
        escape = self._read(4)
        if len(escape) < 4:
            self.cut += 4 + len(escape)
            return None
        (size,) = _U32.unpack(escape)
        if size < 4 or size > MAX_CONTROL:
            raise FrameError(f"a control frame of bad length at {self.end}")
        body = self._read(size)
        if len(body) < size:
            self.cut += 8 + len(body)
            return None
        self.end += 8 + size
        (kind,) = _U32.unpack_from(body)
        return kind, body[4:]


def _content_type(fields: bytes) -> bytes:
    """The content type in a START frame's fields (b"" when it names none)."""
    content_type = b""
    i = 0
    while i < len(fields):
        if i + 8 > len(fields):
            raise FrameError("a control field cut short")
        (field_type,) = _U32.unpack_from(fields, i)
        (field_len,) = _U32.unpack_from(fields, i + 4)
        i += 8
        if i + field_len > len(fields):
            raise FrameError("a control field cut short")
        if field_type == CONTROL_FIELD_CONTENT_TYPE:
            content_type = fields[i : i + field_len]
        i += field_len
    return content_type


# -- protobuf -------------------------------------------------------------------------------

_VARINT = 0
_FIXED64 = 1
_BYTES = 2
_FIXED32 = 5
_F32 = struct.Struct("<I")


#: the one-byte varints (0 to 127): lengths, enums and small numbers are mostly these
_SMALL = [bytes([n]) for n in range(128)]


def varint(n: int) -> bytes:
    """*n* (>= 0) as a protobuf varint."""
    if n < 0x80:
        return _SMALL[n]
    if n < 0x4000:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _key(number: int, kind: int) -> bytes:
    return varint(number << 3 | kind)


def _bytes_field(number: int, value: bytes) -> bytes:
    return _key(number, _BYTES) + varint(len(value)) + value


def _varint_field(number: int, value: int) -> bytes:
    return _key(number, _VARINT) + varint(value)


def _fixed32_field(number: int, value: int) -> bytes:
    return _key(number, _FIXED32) + _F32.pack(value)


class DecodeError(ValueError):
    """The bytes are not a protobuf message of the shape read."""


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field of a protobuf message, in order."""
    at = 0
    size = len(data)

    def read_varint() -> int:
        nonlocal at
        shift = 0
        n = 0
        while True:
            if at >= size or shift > 63:
                raise DecodeError("a varint cut short or too long")
            byte = data[at]
            at += 1
            n |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return n

    while at < size:
        key = read_varint()
        number, kind = key >> 3, key & 7
        if kind == _VARINT:
            yield number, read_varint()
        elif kind == _BYTES:
            length = read_varint()
            if at + length > size:
                raise DecodeError("a length-delimited field cut short")
            yield number, data[at : at + length]
            at += length
        elif kind == _FIXED32:
            if at + 4 > size:
                raise DecodeError("a fixed32 field cut short")
            yield number, _F32.unpack_from(data, at)[0]
            at += 4
        elif kind == _FIXED64:
            if at + 8 > size:
                raise DecodeError("a fixed64 field cut short")
            yield number, int.from_bytes(data[at : at + 8], "little")
            at += 8
        else:
            raise DecodeError(f"wire type {kind} is not read here")


# -- dnstap ---------------------------------------------------------------------------------

DNSTAP_MESSAGE = 1  # Dnstap.Type MESSAGE
AUTH_QUERY = 1  # Message.Type
AUTH_RESPONSE = 2
INET = 1  # SocketFamily
INET6 = 2
UDP = 1  # SocketProtocol
TCP = 2


@dataclass(frozen=True)
class Record:
    """One dnstap record as far as the query log writes it."""

    type: int  # AUTH_QUERY or AUTH_RESPONSE
    family: int  # INET or INET6
    protocol: int  # UDP or TCP
    query_address: bytes  # packed: 4 or 16 bytes
    query_port: int
    response_address: bytes
    response_port: int
    query_time: tuple[int, int]  # seconds, nanoseconds
    query_message: bytes
    response_time: tuple[int, int] | None = None
    response_message: bytes | None = None
    identity: bytes = b""
    version: bytes = b""
    extra: bytes = b""


def head(identity: bytes = b"", version: bytes = b"") -> bytes:
    """The fields of a ``Dnstap`` message that come before its extra field, the same for
    every record of a writer: its identity and version."""
    return (_bytes_field(1, identity) if identity else b"") + (_bytes_field(2, version) if version else b"")


def fixed_fields(
    kind: int, family: int, protocol: int, query_address: bytes, response_address: bytes, response_port: int
) -> bytes:
    """The fields of a ``Message`` that are the same for every query of one client address
    to one of our addresses (protobuf lets fields come in any order: these come first)."""
    return (
        _varint_field(1, kind)
        + _varint_field(2, family)
        + _varint_field(3, protocol)
        + _bytes_field(4, query_address)
        + _bytes_field(5, response_address)
        + _varint_field(7, response_port)
    )


def time_fields(seconds: int, response: bool) -> bytes:
    """query_time_sec (8) or response_time_sec (12), and the key of its _nsec field (fixed32)
    to be followed by the nanoseconds."""
    return _varint_field(12, seconds) + b"\x6d" if response else _varint_field(8, seconds) + b"\x4d"


def port_field(port: int) -> bytes:
    """query_port (6)."""
    return _varint_field(6, port)


def extra_field(extra: bytes) -> bytes:
    return _bytes_field(3, extra) if extra else b""


def encode(record: Record) -> bytes:
    """*record* as a ``dnstap.Dnstap`` protobuf message (fields in their numbers' order; the
    query log's writer puts them in another order, see `fixed_fields`)."""
    message = (
        _varint_field(1, record.type)
        + _varint_field(2, record.family)
        + _varint_field(3, record.protocol)
        + _bytes_field(4, record.query_address)
        + _bytes_field(5, record.response_address)
        + _varint_field(6, record.query_port)
        + _varint_field(7, record.response_port)
        + _varint_field(8, record.query_time[0])
        + _fixed32_field(9, record.query_time[1])
        + _bytes_field(10, record.query_message)
    )
    if record.response_time is not None:
        message += _varint_field(12, record.response_time[0]) + _fixed32_field(13, record.response_time[1])
    if record.response_message is not None:
        message += _bytes_field(14, record.response_message)
    out = head(record.identity, record.version)
    if record.extra:
        out += _bytes_field(3, record.extra)
    return out + _bytes_field(14, message) + _varint_field(15, DNSTAP_MESSAGE)


def decode(data: bytes) -> Record:
    """The `Record` in a ``dnstap.Dnstap`` message. Raises DecodeError."""
    top: dict[int, int | bytes] = dict(_fields(data))
    if top.get(15) != DNSTAP_MESSAGE or not isinstance(top.get(14), bytes):
        raise DecodeError("not a dnstap MESSAGE")
    raw = top[14]
    assert isinstance(raw, bytes)
    m: dict[int, int | bytes] = dict(_fields(raw))

    def number(n: int) -> int:
        value = m.get(n, 0)
        if not isinstance(value, int):
            raise DecodeError(f"field {n} is not a number")
        return value

    def blob(n: int, holder: dict[int, int | bytes] = m) -> bytes:
        value = holder.get(n, b"")
        if not isinstance(value, bytes):
            raise DecodeError(f"field {n} is not bytes")
        return value

    response_time = (number(12), number(13)) if 12 in m else None
    return Record(
        type=number(1),
        family=number(2),
        protocol=number(3),
        query_address=blob(4),
        query_port=number(6),
        response_address=blob(5),
        response_port=number(7),
        query_time=(number(8), number(9)),
        query_message=blob(10),
        response_time=response_time,
        response_message=blob(14) if 14 in m else None,
        identity=blob(1, top),
        version=blob(2, top),
        extra=blob(3, top),
    )


def packed(address: str) -> tuple[int, bytes]:
    """The dnstap socket family and packed bytes of *address* (an IPv4-mapped IPv6 address
    is logged as the IPv4 address it maps)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (INET if ip.version == 4 else INET6), ip.packed


# -- the extra field: what decided ------------------------------------------------------------

#: the first word of the extra field, naming its encoding (a change of form is a new word)
EXTRA_VERSION = "gtm1"


@dataclass(frozen=True)
class Decided:
    """Which wide IP answered and how: the pool (or ""), the slot in the search (preferred,
    alternate, fallback, last_resort, persistence, failure_response), the method, and the
    virtual servers in the answer."""

    wideip: str
    pool: str = ""
    slot: str = ""
    method: str = ""
    members: tuple[str, ...] = ()


def _escape(value: str) -> str:
    out = []
    for ch in value:
        if ch in "%, =" or not ch.isprintable() or not ch.isascii():
            out.append("".join(f"%{b:02X}" for b in ch.encode()))
        else:
            out.append(ch)
    return "".join(out)


def _unescape(value: str) -> str:
    if "%" not in value:
        return value
    raw = bytearray()
    i = 0
    while i < len(value):
        if value[i] == "%":
            digits = value[i + 1 : i + 3]
            if len(digits) != 2 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise DecodeError(f"a bad escape in {value!r}")
            raw.append(int(digits, 16))
            i += 3
        else:
            raw += value[i].encode()
            i += 1
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise DecodeError(f"a bad escape in {value!r}") from None


def encode_extra(decided: Decided) -> bytes:
    """The extra field for *decided*: ``gtm1 wideip=NAME pool=P slot=S method=M members=A,B``,
    one space between fields; in a value, ``%``, ``,``, space, ``=`` and any character that
    is not printable ASCII are percent-escaped (UTF-8 bytes); empty values are left out."""
    parts = [EXTRA_VERSION, "wideip=" + _escape(decided.wideip)]
    for key, value in (("pool", decided.pool), ("slot", decided.slot), ("method", decided.method)):
        if value:
            parts.append(f"{key}={_escape(value)}")
    if decided.members:
        parts.append("members=" + ",".join(_escape(m) for m in decided.members))
    return " ".join(parts).encode()


def parse_extra(data: bytes) -> Decided | None:
    """The `Decided` in an extra field; None when it is empty (no wide IP decided). Raises
    DecodeError for another encoding or a malformed field; keys it does not know are
    skipped (a later ``gtm1`` writer may add some)."""
    if not data:
        return None
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise DecodeError("the extra field is not ASCII") from None
    words = text.split(" ")
    if words[0] != EXTRA_VERSION:
        raise DecodeError(f"the extra field is not of the {EXTRA_VERSION} form")
    values: dict[str, str] = {}
    for word in words[1:]:
        key, eq, value = word.partition("=")
        if not eq or not key:
            raise DecodeError(f"{word!r} is not key=value")
        if key in values:
            raise DecodeError(f"{key} given twice")
        values[key] = value
    if "wideip" not in values:
        raise DecodeError("the extra field names no wide IP")
    members = tuple(_unescape(m) for m in values["members"].split(",")) if values.get("members") else ()
    return Decided(
        _unescape(values["wideip"]),
        _unescape(values.get("pool", "")),
        _unescape(values.get("slot", "")),
        _unescape(values.get("method", "")),
        members,
    )
