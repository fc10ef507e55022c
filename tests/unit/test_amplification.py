"""Amplification: how much larger than the query each kind of UDP answer is.

A reflector is worth abusing when its answers are much larger than the queries that cause
them. Ours are about the query's size plus the records asked for: the question is echoed,
ANY gets one RRset (RFC 8482), negative answers carry one SOA, and no UDP answer exceeds
the client's size (512 without EDNS) or 1232 bytes, whatever the zone holds. Only data an
operator puts in a zone (a large TXT or A RRset) makes an answer much larger than its
query: up to those limits (an RRset that does not fit goes whole, with TC set, so the
reply is then as small as the query). Run with ``-s`` to see the table.
"""

from __future__ import annotations

import random
from pathlib import Path

import dns.flags
import dns.message
import pytest

from gtmcluster.config.load import load
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.node import Node
from tests.support import configs
from tests.support.dnsclient import query

BIG = "".join(f'big      IN TXT "{i:02d}{"x" * 200}"\n' for i in range(20))
MID = "".join(f'mid      IN TXT "{i:02d}{"x" * 200}"\n' for i in range(5))
MANY = "".join(f"many     IN A   192.0.2.{i}\n" for i in range(1, 101))
ZONE = configs.ZONE + BIG + MID + MANY

#: (what, name, type, the largest answer/query ratio we accept without EDNS, with EDNS 1232)
CASES = [
    ("static A", "www.example.test", "A", 2.0, 2.0),
    ("wide IP A", "gslb.example.test", "A", 2.0, 2.0),
    ("wide IP AAAA", "gslb.example.test", "AAAA", 2.0, 2.0),
    ("ANY (one RRset, RFC 8482)", "www.example.test", "ANY", 2.0, 2.0),
    ("NXDOMAIN with SOA", "nothere.example.test", "A", 3.0, 3.0),
    ("NODATA with SOA", "www.example.test", "AAAA", 3.0, 3.0),
    ("CNAME chain", "chain.example.test", "A", 3.0, 3.0),
    ("referral with glue", "x.sub.example.test", "A", 3.0, 3.0),
    ("apex NS with glue", "example.test", "NS", 3.0, 3.0),
    ("REFUSED (not our zone)", "www.example.org", "A", 1.0, 1.0),
    ("1 KB TXT RRset (operator data)", "mid.example.test", "TXT", 512 / 34, 1232 / 45),
    ("4 KB TXT RRset (operator data)", "big.example.test", "TXT", 512 / 34, 1232 / 45),
    ("100 A records (operator data)", "many.example.test", "A", 512 / 35, 1232 / 46),
]


@pytest.fixture
def fast(tmp_path: Path) -> FastPath:
    node = Node(load(configs.write(tmp_path, configs.base(), zone=ZONE)), "n1", clock=lambda: 0.0, rng=random.Random(1))
    return FastPath(node.responder)


def measure(fast: FastPath, name: str, rdtype: str, edns: bool) -> tuple[int, int, dns.message.Message]:
    wire = query(name, rdtype, edns=0 if edns else None, payload=4096)
    reply = fast.handle(wire, "198.51.100.7")
    assert reply is not None
    return len(wire), len(reply), dns.message.from_wire(reply)


def test_answer_sizes_against_query_sizes(fast: FastPath) -> None:
    """Each kind of answer stays within its ratio to the query, no UDP answer is larger
    than 512 bytes without EDNS or 1232 with it (the client asked for 4096), ANY is one
    RRset, and what is cut says so (TC)."""
    rows = []
    for what, name, rdtype, plain_max, edns_max in CASES:
        q0, r0, m0 = measure(fast, name, rdtype, edns=False)
        q1, r1, m1 = measure(fast, name, rdtype, edns=True)
        rows.append(f"| {what} | {q0} | {r0} | {r0 / q0:.2f} | {q1} | {r1} | {r1 / q1:.2f} |")
        assert r0 <= 512 and r1 <= 1232, what
        assert r0 / q0 <= plain_max, (what, q0, r0)
        assert r1 / q1 <= edns_max, (what, q1, r1)
        if rdtype == "ANY":
            assert len(m0.answer) == len(m1.answer) == 1
        if "operator" in what:  # too large for 512 bytes: cut whole, TC set
            assert m0.flags & dns.flags.TC and not m0.answer
        if what.startswith("1 KB"):  # it fits in 1232: the one large amplification there is
            assert not m1.flags & dns.flags.TC and r1 > 1000
    print("\n| answer | query (no EDNS) | reply | ratio | query (EDNS) | reply | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
