"""The bare Python floor of bench/compare.py: what answering a UDP query costs in CPython with
no work at all.

    python bench/floor.py ADDRESS:PORT

One process, one thread, one non-blocking UDP socket in an epoll loop: `recvfrom`, a dict
lookup of the query's bytes after the ID, `sendto` of the ID and the reply kept for them.
A query not seen before is answered from the bench zone (comparelib's `zone_text` data: SOA,
NS, `www`, `host1`..`host100`, the wide IP's three addresses, and the static wildcard
`*.apps` with them; NXDOMAIN and NODATA with the SOA) and its reply kept (up to `KEEP` of
them), so after the harness's warm-up every measured query of the fixed mixes is a lookup.
A name the zone does not hold (NXDOMAIN, or below the wildcard) is kept only among the
first `MISSES`: with `--names random` every query is such a miss, and what the floor pays
for it is the lookup, the question read and the reply written. No EDNS beyond echoing an OPT
record, no TCP, no ECS.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import comparelib as lib  # bench/ is not a package: its folder is on sys.path

KEEP = 200_000  # replies kept; the bench's fixed mixes hold about 10,100 distinct queries
#: of them, replies for names the zone does not hold (the static mix asks 30 of them; a
#: random-name run asks new ones, each paid for in full but for these first few)
MISSES = 1_000
A, NS, SOA = 1, 2, 6
FLAG_QR, FLAG_AA, FLAG_RD = 0x8000, 0x0400, 0x0100
NOERROR, FORMERR, NXDOMAIN, REFUSED = 0, 1, 3, 5
TTL = 3600
#: the static wildcard `*.apps`: the names one label below it are answered with its records
WILDCARD_PARENT = lib.encode_name(lib.APPS)


def _name(text: str) -> bytes:
    return lib.encode_name(text.lower())


def zone_records() -> dict[tuple[bytes, int], list[tuple[int, bytes]]]:
    """(owner in lower-case wire form, type) -> [(TTL, RDATA)] of the bench zone."""
    origin = lib.ORIGIN
    soa = _name(f"ns1.{origin}") + _name(f"hostmaster.{origin}") + struct.pack("!5I", 1, 3600, 600, 86400, 300)
    records: dict[tuple[bytes, int], list[tuple[int, bytes]]] = {
        (_name(origin), SOA): [(TTL, soa)],
        (_name(origin), NS): [(TTL, _name(f"ns1.{origin}"))],
        (_name(f"ns1.{origin}"), A): [(TTL, socket.inet_aton("192.0.2.1"))],
        (_name(f"www.{origin}"), A): [(TTL, socket.inet_aton(a)) for a in lib.WWW],
        (_name(lib.WIDEIP), A): [(30, socket.inet_aton(a)) for _, _, a in lib.POOL],
    }
    for i in range(1, lib.HOSTS + 1):
        records[(_name(f"host{i}.{origin}"), A)] = [(TTL, socket.inet_aton(f"192.0.2.{100 + i}"))]
    records[(b"\1*" + WILDCARD_PARENT, A)] = [(30, socket.inet_aton(a)) for _, _, a in lib.POOL]
    return records


def _within(name: bytes, origin: bytes) -> bool:
    """Whether the wire-form *name* is *origin* or below it (compared at label boundaries)."""
    i = 0
    while i < len(name):
        if name[i:] == origin:
            return True
        i += name[i] + 1
    return False


def build_reply(query: bytes, records: dict[tuple[bytes, int], list[tuple[int, bytes]]]) -> bytes | None:
    """The reply to *query* (from its ID on), or None for what is not a plain query to drop."""
    built = answer(query, records, {name for name, _ in records})
    return None if built is None else built[0]


def answer(
    query: bytes, records: dict[tuple[bytes, int], list[tuple[int, bytes]]], names: set[bytes]
) -> tuple[bytes, bool] | None:
    """`build_reply`, and whether the name is one the zone holds (*names*: the owners in
    *records*); None for what is not a plain query to drop."""
    if len(query) < 12:
        return None
    qid, flags, qdcount, _, _, arcount = struct.unpack("!6H", query[:12])
    if flags & FLAG_QR or qdcount != 1 or flags & 0x7800:  # a reply, or not one standard query
        return None
    end = 12
    try:
        while query[end]:
            if query[end] >= 64:
                return None
            end += query[end] + 1
        end += 5
        qname, qtype = query[12 : end - 4].lower(), struct.unpack("!H", query[end - 4 : end - 2])[0]
    except (IndexError, struct.error):
        return None
    question = query[12:end]
    origin = _name(lib.ORIGIN)
    opt = b"\0" + struct.pack("!HHIH", 41, 1232, 0, 0) if arcount else b""
    answers: list[bytes] = []
    authority: list[bytes] = []
    held = True
    if not _within(qname, origin):
        rcode = REFUSED
    else:
        rcode = NOERROR
        found = records.get((qname, qtype))
        if found is None and qname not in names:
            held = False
            if qname[qname[0] + 1 :] == WILDCARD_PARENT:  # (one label below: as the mixes ask)
                found = records.get((b"\1*" + WILDCARD_PARENT, qtype))
        if found:
            answers = [b"\xc0\x0c" + struct.pack("!HHIH", qtype, 1, ttl, len(r)) + r for ttl, r in found]
        else:
            if not held:
                rcode = NXDOMAIN
            (_, soa), *_ = records[(origin, SOA)]
            authority = [origin + struct.pack("!HHIH", SOA, 1, 300, len(soa)) + soa]
    header = struct.pack(
        "!6H", qid, FLAG_QR | FLAG_AA | (flags & FLAG_RD) | rcode, 1, len(answers), len(authority), 1 if opt else 0
    )
    return header + question + b"".join(answers) + b"".join(authority) + opt, held


def serve(endpoint: lib.Endpoint) -> None:
    records = zone_records()
    names = {name for name, _ in records}
    replies: dict[bytes, bytes] = {}
    misses = 0
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind((endpoint.host, endpoint.port))
    sock.setblocking(False)
    poller = select.epoll()
    poller.register(sock.fileno(), select.EPOLLIN)
    recvfrom, sendto, lookup = sock.recvfrom, sock.sendto, replies.get
    print(f"floor: answering on {endpoint}", flush=True)
    while True:
        poller.poll()
        while True:
            try:
                data, peer = recvfrom(4096)
            except BlockingIOError:
                break
            reply = lookup(data[2:])
            if reply is None:
                built = answer(data, records, names)
                if built is None:
                    continue
                reply = built[0][2:]
                if len(replies) < KEEP and (built[1] or misses < MISSES):
                    replies[data[2:]] = reply
                    misses += not built[1]
            with contextlib.suppress(BlockingIOError):  # the send buffer is full: drop, as a loaded server does
                sendto(data[:2] + reply, peer)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        serve(lib.Endpoint.parse(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
