"""A large query log for measuring `gtmcluster replay`: its memory and time on a log of a
given size.

    .venv/bin/python bench/replaylog.py DIR [--megabytes 200] [--clients 20000] [--subnets]

writes ``DIR/cluster.yaml`` (the tests' one-node config, `tests.support.configs.base`),
``DIR/new.yaml`` (region r2 sent to DC1 instead of DC2) and ``DIR/queries.dnstap``: records
as a node writes them (AUTH_RESPONSE, the query and its response, the extra field of the
decision), a query a millisecond, the *clients* taken in turn: LDNS addresses in
127.0.1.0/24 (region r1), 127.0.2.0/24 (r2) and others in 127/8 (no region) and, from
127.0.0.1 (a trusted resolver), client subnets in 2001:db8:aaaa::/48 (r1) and
203.0.113.0/24 (r2); it prints how many are distinct. With --subnets every query is from a
client subnet of its own in r1 and new.yaml sends r1 to DC2 as well: every client moves,
the most a replay keeps. Then, e.g.:

    /usr/bin/time -v gtmcluster replay --log DIR/queries.dnstap --config DIR/new.yaml \\
        --base DIR/cluster.yaml --json > /dev/null

("Maximum resident set size" is the peak RSS). Not a test: no figure is checked.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import dns.message
import dns.rrset

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gtmcluster.querylog import dnstap  # noqa: E402
from tests.support import configs, dnsclient  # noqa: E402

WIDEIP = "gslb.example.test"
START = 1_800_000_000
MEMBERS = {"DC1": "vs1", "DC2": "vs2", "DC3": "vs3"}


def client(n: int, subnets: bool = False) -> tuple[str, str | None, str]:
    """The *n*th client: (LDNS address, client subnet or None, data center answering)."""
    kind = 3 if subnets else n % 5
    if kind == 0:  # an LDNS in r1
        return f"127.0.1.{n % 250 + 1}", None, "DC1"
    if kind == 1:  # ... in r2
        return f"127.0.2.{n % 250 + 1}", None, "DC2"
    if kind == 2:  # ... in no region
        return f"127.{n // 62500 % 250 + 3}.{n // 250 % 250 + 3}.{n % 250 + 1}", None, "DC3"
    if kind == 3:  # a trusted resolver's client in r1 (an IPv6 /80 in 2001:db8:aaaa::/48)
        return "127.0.0.1", f"2001:db8:aaaa:{n >> 16 & 0xFFFF:x}:{n & 0xFFFF:x}::/80", "DC1"
    return "127.0.0.1", f"203.0.113.{n % 256}/32", "DC2"  # ... in r2


@functools.cache
def messages(n: int, subnets: bool) -> tuple[str, bytes, bytes, bytes]:
    """The *n*th client's LDNS, query, response and extra field (made once a client)."""
    ldns, ecs, dc = client(n, subnets)
    query = dnsclient.query(WIDEIP, "A", ecs=ecs, qid=n % 65536)
    message = dns.message.from_wire(query)
    response = dns.message.make_response(message)
    response.answer.append(dns.rrset.from_text(WIDEIP + ".", 30, "IN", "A", f"10.0.{dc[-1]}.1"))
    extra = dnstap.encode_extra(dnstap.Decided(WIDEIP, "p", "preferred", "topology", (MEMBERS[dc],)))
    return ldns, query, response.to_wire(), extra


def frame(n: int, at: float, subnets: bool) -> bytes:
    ldns, query, response, extra = messages(n, subnets)
    family, address = dnstap.packed(ldns)
    seconds = int(at)
    nanos = int((at - seconds) * 1e9)
    record = dnstap.Record(
        dnstap.AUTH_RESPONSE,
        family,
        dnstap.UDP,
        address,
        40000 + n % 20000,
        address,
        53,
        (seconds, nanos),
        query,
        (seconds, nanos),
        response,
        extra=extra,
    )
    return dnstap.data_frame(dnstap.encode(record))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--megabytes", type=float, default=200)
    parser.add_argument("--clients", type=int, default=20_000)
    parser.add_argument("--subnets", action="store_true", help="every client a client subnet in r1 (all move)")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    config = configs.base()
    configs.write(args.dir, config, name="cluster.yaml")
    config["topology"][1]["server"] = "datacenter DC1"
    if args.subnets:
        config["topology"][0]["server"] = "datacenter DC2"
    configs.write(args.dir, config, name="new.yaml")
    wanted = int(args.megabytes * 1_000_000)
    written = 0
    n = 0
    with (args.dir / "queries.dnstap").open("wb") as out:
        out.write(dnstap.start_frame())
        while written < wanted:
            data = frame(n % args.clients, START + n / 1000, args.subnets)
            out.write(data)
            written += len(data)
            n += 1
        out.write(dnstap.STOP_FRAME)
    distinct = len({client(i, args.subnets)[:2] for i in range(min(n, args.clients))})
    print(f"{args.dir / 'queries.dnstap'}: {n} records, {written} bytes, {distinct} distinct clients")
    return 0


if __name__ == "__main__":
    sys.exit(main())
