"""TLS ClientHellos by hand, and the first record a server answers with, for tests that must
offer what no modern TLS library will (TLS 1.0 or 1.1, compression) whatever the local
OpenSSL's policy, and see exactly what the server chose."""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass

TLS1_0, TLS1_1, TLS1_2 = 0x0301, 0x0302, 0x0303
HANDSHAKE, ALERT = 0x16, 0x15
CLIENT_HELLO, SERVER_HELLO = 1, 2
#: the protocol_version alert (RFC 5246 7.2.2): "the version the client offered is not supported"
PROTOCOL_VERSION_ALERT = 70
NULL_COMPRESSION, DEFLATE = 0, 1
#: ECDHE-ECDSA with AES-GCM (TLS 1.2) and AES-CBC-SHA (TLS 1.0 on): the group's keys are EC P-256
CIPHERS = (0xC02B, 0xC02C, 0xC009, 0xC00A)


def _extension(kind: int, data: bytes) -> bytes:
    return struct.pack("!HH", kind, len(data)) + data


#: what a server needs to pick an ECDHE-ECDSA suite: the P-256 group, uncompressed points,
#: and (TLS 1.2) ECDSA with SHA-256 signatures
EXTENSIONS = (
    _extension(10, struct.pack("!HH", 2, 23))  # supported_groups: secp256r1
    + _extension(11, b"\x01\x00")  # ec_point_formats: uncompressed
    + _extension(13, struct.pack("!HH", 2, 0x0403))  # signature_algorithms: ecdsa_secp256r1_sha256
)


def client_hello(version: int, compression: bytes = bytes([NULL_COMPRESSION])) -> bytes:
    """A ClientHello record offering at most *version*, the `CIPHERS`, and *compression*
    methods (in order of preference)."""
    ciphers = b"".join(struct.pack("!H", c) for c in CIPHERS)
    body = (
        struct.pack("!H", version)
        + os.urandom(32)
        + b"\x00"  # no session id
        + struct.pack("!H", len(ciphers))
        + ciphers
        + bytes([len(compression)])
        + compression
        + struct.pack("!H", len(EXTENSIONS))
        + EXTENSIONS
    )
    handshake = bytes([CLIENT_HELLO]) + len(body).to_bytes(3, "big") + body
    return bytes([HANDSHAKE]) + struct.pack("!HH", TLS1_0, len(handshake)) + handshake


@dataclass
class Reply:
    """The first record the server sent back (None fields: it sent nothing, or not that)."""

    record_type: int | None = None
    alert: int | None = None  # the alert's description, for an alert
    version: int | None = None  # the ServerHello's version
    compression: int | None = None  # the ServerHello's compression method
    closed: bool = False  # the server closed the connection (after what it sent)
    raw: bytes = b""


def first_reply(address: tuple[str, int], hello: bytes, source: str, timeout: float = 5.0) -> Reply:
    """Send *hello* from *source* to *address*; read the server's first record, and whether it
    then closes the connection (within *timeout*)."""
    reply = Reply()
    with socket.create_connection(address, timeout=timeout, source_address=(source, 0)) as sock:
        sock.sendall(hello)
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    reply.closed = True
                    break
                reply.raw += chunk
                if reply.record_type == ALERT or len(reply.raw) > 16_384:
                    continue
                if reply.record_type is None and len(reply.raw) >= 5:
                    reply.record_type = reply.raw[0]
                _parse(reply)
                if reply.record_type == HANDSHAKE and reply.compression is not None:
                    break  # a ServerHello: what it chose is all we wanted
        except ConnectionResetError:
            reply.closed = True
        except TimeoutError:
            pass
    return reply


def _parse(reply: Reply) -> None:
    data = reply.raw
    if len(data) < 5:
        return
    reply.record_type = data[0]
    body = data[5:]
    if reply.record_type == ALERT and len(body) >= 2:
        reply.alert = body[1]
    elif reply.record_type == HANDSHAKE and len(body) >= 4 and body[0] == SERVER_HELLO:
        hello = body[4:]
        if len(hello) < 35:
            return
        reply.version = struct.unpack("!H", hello[:2])[0]
        sid_len = hello[34]
        at = 35 + sid_len + 2  # past the session id and the chosen cipher suite
        if len(hello) > at:
            reply.compression = hello[at]
