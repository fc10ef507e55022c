"""Zone texts and raw DNS packets for process tests.

`LARGE_ZONE` is the standard test zone (`configs.ZONE`) plus names whose answers do not fit
in 512 bytes, or not even in a 1232-byte EDNS payload, so that truncation (TC) and the
retry over TCP can be shown with a real client. The packet helpers build queries that no
ordinary client sends: malformed ones, responses, several questions.
"""

from __future__ import annotations

import struct

from tests.support import configs

#: TXT records at medium.example.test: about 800 bytes in all (more than 512, less than 1232)
MEDIUM_TXT = [f"{i:02d}-" + "m" * 67 for i in range(9)]
#: TXT records at big.example.test: about 2800 bytes (more than any UDP payload we allow)
BIG_TXT = [f"{i:02d}-" + "b" * 77 for i in range(30)]

LARGE_ZONE = (
    configs.ZONE
    + "".join(f'medium   IN TXT "{text}"\n' for text in MEDIUM_TXT)
    + "".join(f'big      IN TXT "{text}"\n' for text in BIG_TXT)
    + "bigalias IN CNAME big\n"
    + "www6     IN AAAA 2001:db8::80\n"
    + "wip      IN CNAME gslb\n"
    + "dangling IN CNAME nothere\n"
)

HEADER = struct.Struct("!HHHHHH")
QR = 0x8000
RD = 0x0100


def header(qid: int, flags: int = 0, qd: int = 1, an: int = 0, ns: int = 0, ar: int = 0) -> bytes:
    return HEADER.pack(qid, flags, qd, an, ns, ar)


def question(name: str, rdtype: int = 1, rdclass: int = 1) -> bytes:
    """A question entry with an uncompressed name (``"www.example.test"``)."""
    wire = b"".join(bytes([len(label)]) + label.encode() for label in name.rstrip(".").split(".") if label)
    return wire + b"\0" + struct.pack("!HH", rdtype, rdclass)


def opt(options: bytes = b"", udp_size: int = 1232, version: int = 0) -> bytes:
    """An OPT pseudo-record carrying raw option bytes (which may be malformed on purpose)."""
    return b"\0" + struct.pack("!HHIH", 41, udp_size, version << 16, len(options)) + options


def unpack_header(reply: bytes) -> tuple[int, int, int, tuple[int, int, int, int]]:
    """(id, flags, rcode, (qd, an, ns, ar)) of a reply, read straight from its bytes."""
    qid, flags, qd, an, ns, ar = HEADER.unpack_from(reply)
    return qid, flags, flags & 0xF, (qd, an, ns, ar)
