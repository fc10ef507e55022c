"""Client sources at scale (issue 36): what deciding by the client costs per answer, what a
client subnet and an LDNS population cost in memory, and what one beacon's reaction costs.

    .venv/bin/python bench/clientsources.py                          # 100,000 subnets, 10,000 LDNS
    .venv/bin/python bench/clientsources.py --subnets 10000 --populations 1000 --rounds 3   # quick
    .venv/bin/python bench/clientsources.py --json var/clientsources.json

1. The table. A `Node` of a three-member group (DC1, DC2, DC3; this node is gtm-1 in DC1)
   whose pool is ``preferred: rtt`` over one server per data center, ``rum:`` on (targets
   in the three data centers, ``min_samples`` 10) and the LDNSes' range in
   ``dns_server.ecs_trusted``. Its store holds, written with `Store.put` as a node writes
   them: LDNS paths from the three data centers (values of `proximity.table.updated`) for
   ``--populations`` LDNSes plus ``--bare`` LDNSes without a population; ``--subnets``
   client subnets (/24s) x 3 data centers, each record made by `merge_sample` from 2-16
   samples (each subnet near one data center, 5-45 ms, and 60-250 ms from the others);
   ``--populations`` LDNS populations, each tying 10-32 of the subnets near one data center
   (counts 1-3), made by `population_after` from the client records held. Memory: tracemalloc's
   count of the bytes alive before and after adding the client records (everything the
   store keeps for them: values, records, keys, indexes, expiry queue), divided by the
   subnets; the same for the populations.
2. Answers. CPU microseconds per answer of the node's UDP answer path (`FastPath.handle`,
   which answers kept decisions itself and the rest through `Responder.handle`; real DNS
   wire queries, A, for the wide IP) in these cases, each with the decision cache bypassed (every answer
   decided, random clients: the cost of deciding) and in use (``--repeat`` clients asked
   again and again: what most answers cost):

   - ``ldns-ecs`` / ``ldns``: the LDNS-only config (no ``rum:``, ``proximity.sources:
     [ldns]``) over the same store, with and without an ECS option: today's figures, the
     reference each ratio is against;
   - ``client``: ECS /24 of a measured subnet from a trusted resolver: the subnet's figures
     decide (scope 24);
   - ``population``: no ECS, an LDNS with a population: its measured clients decide;
   - ``unknown``: ECS /24 of a subnet not measured, from an LDNS without a population: the
     client sources are asked and the LDNS's paths decide.

   Which source decided is checked (`Balancer.explain`) before timing. The configs
   alternate (a reload of the node between them), rounds too; the median of ``--rounds``.
3. Reaction. One beacon (three samples and an id tying an LDNS): for each DC the client
   record merged (`merge_sample`) and put, and the LDNS's population recomputed
   (`population_after`, reading the client records of its up to 32 subnets) and put, as
   the RUM join (proximity.rumjoin, RumJoin.keep) does (timed through it once it exists), in nodes that
   hold 1,000, 10,000 and ``--subnets`` client subnets (and a tenth as many populations):
   it should not grow with the table: the store reads one beacon makes are counted, and a
   random `Store.get` is timed alone at each size (what the memory hierarchy adds as the
   table outgrows the CPU's caches, a constant factor per read).

``--dict-values`` keeps the client values as dicts (the compact form of
`proximity.clientvalue` unregistered): run with and without it for memory before and after.

Prints a table per part and, last, one JSON line (``--json FILE`` writes it too). Not a
test: figures depend on the machine and its load; compare the figures of one run.
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import json
import os
import random
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from clientworld import (  # bench/ is not a package: its folder is on sys.path
    DATACENTERS,
    NODES,
    SAMPLE_TTL,
    WIDEIP,
    Fixed,
    add_clients,
    add_paths,
    add_populations,
    configs,
    deep_size,
    figures_of,
    ldns_address,
    measured_subnet,
    traced,
    unmeasured_subnet,
)

from gtmcluster.config.model import Config, WideIP
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.lb.context import Client
from gtmcluster.node import Node
from gtmcluster.proximity.clients import merge_sample, population_after
from gtmcluster.runtime import heap
from gtmcluster.state import keys, values


def wire(qid: int, ecs: str | None) -> bytes:
    """An A query for the wide IP, with an ECS option for *ecs* (an IPv4 /24) or none."""
    name = b"".join(bytes([len(label)]) + label.encode() for label in WIDEIP.split(".")) + b"\x00"
    if ecs is None:
        return struct.pack("!6H", qid, 0, 1, 0, 0, 0) + name + b"\x00\x01\x00\x01"
    network = ipaddress.IPv4Network(ecs)
    option = struct.pack("!HBB", 1, network.prefixlen, 0) + network.network_address.packed[:3]
    opt = b"\x00" + struct.pack("!HHIH", 41, 1232, 0, 4 + len(option)) + struct.pack("!HH", 8, len(option)) + option
    return struct.pack("!6H", qid, 0, 1, 0, 0, 1) + name + b"\x00\x01\x00\x01" + opt


Ask = tuple[bytes, str]  # a query's bytes and the LDNS that sends it


class Case:
    """One kind of client: how to draw one (its query and source), the config it is asked
    under, and the note its decision's trace has (None: the LDNS's paths decided)."""

    def __init__(self, name: str, rum: bool, draw: Callable[[random.Random], tuple[str, str | None]], note: str | None):
        self.name, self.rum, self.draw, self.note = name, rum, draw, note
        self.fresh: list[float] = []
        self.repeat: list[float] = []

    def asks(self, rng: random.Random, count: int) -> list[Ask]:
        out = []
        for n in range(count):
            ldns, ecs = self.draw(rng)
            out.append((wire(n & 0xFFFF, ecs), ldns))
        return out

    def check(self, node: Node, rng: random.Random) -> None:
        """Raise unless a few drawn clients are decided by rtt from the expected source,
        with a one-address answer."""
        wideip = wideip_named(node)
        for _ in range(20):
            ldns, ecs = self.draw(rng)
            address = ipaddress.ip_address(ldns)
            if ecs is None:
                who = Client.from_ldns(address)
            else:
                network = ipaddress.ip_network(ecs)
                who = Client(network.network_address, network.prefixlen, address, True)
            decision = node.balancer.explain(wideip, 1, who)
            notes = " ".join(step.note for step in decision.trace)
            sources = ("'s own RTT", "'s measured clients")
            if self.note is None:
                wanted = not any(s in notes for s in sources)
            else:
                wanted = self.note in notes
            if decision.method != "rtt" or not wanted:
                raise RuntimeError(f"{self.name}: {ldns} ECS {ecs} decided by {decision.method}: {notes}")
            reply = node.responder.handle(wire(1, ecs), ldns)
            if reply is None or reply[3] & 0xF or reply[6:8] != b"\x00\x01":
                raise RuntimeError(f"{self.name}: {ldns} ECS {ecs}: no one-address NOERROR answer")


def wideip_named(node: Node) -> WideIP:
    return next(w for w in node.config.wideips.values() if w.name.rstrip(".") == WIDEIP)


def per_answer(node: Node, asks: list[Ask], passes: int = 1) -> float:
    """CPU µs per answer of *asks* through the node's UDP answer path (`FastPath`: the kept
    decisions' replies, the rest through `Responder.handle`), *passes* times over."""
    handle = FastPath(node.responder).handle
    gc.disable()
    try:
        started = time.process_time()
        for _ in range(passes):
            for data, source in asks:
                handle(data, source)
        return (time.process_time() - started) / (len(asks) * passes) * 1e6
    finally:
        gc.enable()


@contextmanager
def no_kept_decisions(node: Node) -> Iterator[None]:
    kept, node.cache = node.cache, None
    try:
        yield
    finally:
        node.cache = kept


def answers(node: Node, cases: list[Case], ldns_only: Config, rum: Config, args: argparse.Namespace) -> None:
    rng = random.Random(7)
    for i in range(args.rounds):
        order = (ldns_only, rum) if i % 2 == 0 else (rum, ldns_only)
        for config in order:
            node.reload(config)
            for case in cases:
                if case.rum != (config is rum):
                    continue
                if i == 0:
                    case.check(node, rng)
                with no_kept_decisions(node):
                    case.fresh.append(per_answer(node, case.asks(rng, args.answers)))
                repeat = case.asks(rng, args.repeat)
                per_answer(node, repeat)  # decided and kept
                case.repeat.append(per_answer(node, repeat, passes=max(1, args.answers // args.repeat)))
        print(f"  round {i + 1}/{args.rounds} done (load average {os.getloadavg()[0]:.1f})", flush=True)


# --- reaction ---


class Beacon:
    def __init__(self, samples: dict[str, float], ident: str | None) -> None:
        self.samples = samples
        self.id = ident


def random_gets(node: Node, subnets: int, count: int, rng: random.Random) -> float:
    """CPU µs per `Store.get` of a random client record: what one read costs at this size
    (the memory it touches grows with the table: the CPU's caches hold less of it)."""
    wanted = [keys.client(measured_subnet(rng.randrange(subnets)), DATACENTERS[rng.randrange(3)]) for _ in range(count)]
    get = node.store.get
    started = time.process_time()
    for key in wanted:
        get(key)
    return (time.process_time() - started) / count * 1e6


def reads_per_beacon(node: Node, subnets: int, populations: int) -> int:
    """The store reads one beacon makes (`Store.reads`), whatever the table's size."""
    store = node.store
    store.reads = []
    try:
        reaction(node, subnets, populations, 1, random.Random(11))
        return len(store.reads)
    finally:
        store.reads = None


def reaction(node: Node, subnets: int, populations: int, beacons: int, rng: random.Random) -> tuple[float, str]:
    """CPU µs per beacon merged and tied (see the module), and through what."""
    store, clock = node.store, node.clock
    assert isinstance(clock, Fixed)
    drawn = [(rng.randrange(subnets), rng.randrange(populations)) for _ in range(beacons)]
    samples = [{dc: rng.uniform(5, 250) for dc in DATACENTERS} for _ in range(beacons)]
    try:
        from gtmcluster.proximity import rumjoin  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        rumjoin = None
    gc.disable()
    try:
        if rumjoin is not None:
            join = rumjoin.RumJoin(store, node.member.name, lambda: node.config.rum, lambda _d, _f: None)
            idents = [f"bench{n:016d}" for n in range(beacons)]
            for ident, (_, p) in zip(idents, drawn, strict=True):  # what the answering node wrote
                store.put(keys.rum_id(ident), {"ldns": ldns_address(p), "ecs": ""}, 120.0)
            started = time.process_time()
            for ident, (s, _), ms in zip(idents, drawn, samples, strict=True):
                clock.tick()
                join.keep(ipaddress.IPv4Network(measured_subnet(s)), Beacon(ms, ident))
            return (time.process_time() - started) / beacons * 1e6, "RumJoin.keep"
        figures = figures_of(store)
        me = node.member.name
        started = time.process_time()
        for (s, p), ms in zip(drawn, samples, strict=True):
            clock.tick()
            subnet = measured_subnet(s)
            for dc, value in ms.items():
                key = keys.client(subnet, dc)
                held = store.get(key)
                merged = merge_sample(None if held is None else held.value, round(value * 1000), "rum", me)
                store.put(key, merged, SAMPLE_TTL)
            key = keys.population(ldns_address(p))
            held = store.get(key)
            tied = population_after(None if held is None else held.value, ipaddress.IPv4Network(subnet), figures)
            store.put(key, tied, SAMPLE_TTL)
        return (time.process_time() - started) / beacons * 1e6, "merge_sample + put + population_after + put"
    finally:
        gc.enable()


# --- the run ---


def new_node(config: Config) -> Node:
    node = Node(config, NODES[0], clock=Fixed(1_800_000_000.0), rng=random.Random(1))
    node.ready = True
    return node


def commit() -> str:
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, check=False)
        return out.stdout.strip() or "?"
    except OSError:
        return "?"


def median(figures: list[float]) -> float:
    return statistics.median(figures) if figures else float("nan")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--subnets", type=int, default=100_000, help="client subnets (x 3 data centers)")
    p.add_argument("--populations", type=int, default=10_000, help="LDNS populations (LDNSes with paths too)")
    p.add_argument("--bare", type=int, default=1_000, help="LDNSes with paths and no population")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--answers", type=int, default=3_000, help="answers timed per case and round")
    p.add_argument("--repeat", type=int, default=500, help="clients asked again and again (decisions kept)")
    p.add_argument("--beacons", type=int, default=2_000, help="beacons timed per table size")
    p.add_argument(
        "--dict-values",
        action="store_true",
        help="keep client values as dicts (the compact form, proximity.clientvalue, unregistered): before/after",
    )
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    started = time.monotonic()
    if args.dict_values:
        values._forms.pop(keys.CLIENT, None)
    print(
        f"clientsources.py at {commit()}: {args.subnets:,} client subnets x {len(DATACENTERS)} DCs, "
        f"{args.populations:,} populations, {args.bare:,} LDNSes without; "
        f"client values {'as dicts' if args.dict_values else 'compact'}; load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as directory:
        ldns_only, rum = configs(Path(directory))
    node = new_node(rum)
    add_paths(node, range(args.populations + args.bare), rng)
    client_bytes = traced(lambda: add_clients(node, range(args.subnets), rng))
    pop_bytes = traced(lambda: add_populations(node, range(args.populations), args.subnets, rng))
    sample_client = node.store.get(keys.client(measured_subnet(0), "DC1"))
    sample_pop = node.store.get(keys.population(ldns_address(0)))
    assert sample_client is not None and sample_pop is not None
    memory = {
        "bytes_per_subnet": client_bytes / args.subnets,
        "bytes_per_client_record": client_bytes / (args.subnets * len(DATACENTERS)),
        "client_value_bytes": deep_size(sample_client.value),
        "client_value_type": type(sample_client.value).__name__,
        "bytes_per_population": pop_bytes / args.populations,
        "population_value_bytes": deep_size(sample_pop.value),
        "client_records_mb": client_bytes / (1 << 20),
        "population_records_mb": pop_bytes / (1 << 20),
    }
    print(f"\nmemory (tracemalloc, filled in {time.monotonic() - started:.0f} s):")
    print(
        f"  client subnets: {memory['client_records_mb']:,.1f} MB for {args.subnets:,}: "
        f"{memory['bytes_per_subnet']:,.0f} B a subnet, {memory['bytes_per_client_record']:,.0f} B a (subnet, DC) "
        f"record (its value alone, a {memory['client_value_type']}: {memory['client_value_bytes']} B)"
    )
    print(
        f"  populations:    {memory['population_records_mb']:,.1f} MB for {args.populations:,}: "
        f"{memory['bytes_per_population']:,.0f} B a population (its value alone: {memory['population_value_bytes']} B)"
    )

    def measured(r: random.Random) -> tuple[str, str | None]:
        return ldns_address(r.randrange(args.populations)), measured_subnet(r.randrange(args.subnets))

    def population(r: random.Random) -> tuple[str, str | None]:
        return ldns_address(r.randrange(args.populations)), None

    def unknown(r: random.Random) -> tuple[str, str | None]:
        return ldns_address(args.populations + r.randrange(args.bare)), unmeasured_subnet(r.randrange(1 << 16))

    cases = [
        Case("ldns-ecs", False, measured, None),
        Case("ldns", False, population, None),
        Case("client", True, measured, "'s own RTT"),
        Case("population", True, population, "'s measured clients"),
        Case("unknown", True, unknown, None),
    ]
    # (each case against the LDNS-only config asked alike: with an ECS option or without)
    reference = {c.name: "ldns" if c.name in ("ldns", "population") else "ldns-ecs" for c in cases}
    heap.collect_and_freeze()
    print(f"\nanswers (FastPath.handle, CPU µs per answer, median of {args.rounds} rounds):", flush=True)
    answers(node, cases, ldns_only, rum, args)
    by_name = {c.name: c for c in cases}
    rows = []
    print(f"\n  {'case':<11} {'config':<12} {'ECS':<5} {'decided':>9} {'ratio':>7} {'kept':>7} {'ratio':>7}")
    for c in cases:
        ref = by_name[reference[c.name]]
        fresh, repeat = median(c.fresh), median(c.repeat)
        row = {
            "case": c.name,
            "config": "rum" if c.rum else "ldns-only",
            "fresh_us": round(fresh, 2),
            "fresh_ratio": round(fresh / median(ref.fresh), 3),
            "kept_us": round(repeat, 2),
            "kept_ratio": round(repeat / median(ref.repeat), 3),
            "reference": ref.name,
        }
        rows.append(row)
        ecs = "no" if c.name in ("ldns", "population") else "/24"
        print(
            f"  {c.name:<11} {row['config']:<12} {ecs:<5} {fresh:>9.1f} {row['fresh_ratio']:>6.2f}x "
            f"{repeat:>7.1f} {row['kept_ratio']:>6.2f}x"
        )

    print(f"\nreaction (one beacon: 3 client records merged, a population tied; CPU µs, {args.beacons:,} beacons):")
    node.reload(rum)
    reactions = []
    sizes = sorted({s for s in (1_000, 10_000) if s < args.subnets} | {args.subnets})
    for size in sizes:
        if size == args.subnets:
            held, pops = node, args.populations
        else:
            held, pops = new_node(rum), max(1, size // 10)
            r = random.Random(3)
            add_paths(held, range(pops), r)
            add_clients(held, range(size), r)
            add_populations(held, range(pops), size, r)
        figures = [reaction(held, size, pops, args.beacons, random.Random(5 + k))[0] for k in range(3)]
        how = reaction(held, size, pops, 1, random.Random(9))[1]
        get = min(random_gets(held, size, 20_000, random.Random(13 + k)) for k in range(3))
        reads = reads_per_beacon(held, size, pops)
        reactions.append(
            {
                "subnets": size,
                "populations": pops,
                "us_per_beacon": round(min(figures), 1),
                "store_reads_per_beacon": reads,
                "us_per_random_get": round(get, 3),
            }
        )
        print(
            f"  {size:>9,} subnets, {pops:>7,} populations: {min(figures):8.1f} µs a beacon, {reads} store reads "
            f"(a random Store.get alone: {get:.2f} µs)",
            flush=True,
        )
    print(f"  (through {how})")

    report = {
        "bench": "clientsources",
        "commit": commit(),
        "subnets": args.subnets,
        "populations": args.populations,
        "client_values": "dict" if args.dict_values else "compact",
        "rounds": args.rounds,
        "load_average": os.getloadavg()[0],
        "seconds": round(time.monotonic() - started, 1),
        "memory": {k: round(v, 1) if isinstance(v, float) else v for k, v in memory.items()},
        "answers": rows,
        "reaction": reactions,
    }
    print(f"\n{time.monotonic() - started:.0f} s in all; load average {os.getloadavg()[0]:.1f}")
    line = json.dumps(report)
    print(line)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
