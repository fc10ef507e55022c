"""Simulated members for bench/bigconfig.py: several sync group members in one process.

    .venv/bin/python bench/bigpeers.py SPEC.json

Five real members, each checking 5,000 servers, would swamp a 2-core machine; so the
members other than the one under test run here, in one process on one reactor. Each is
what the peer protocol sees of a member: its own record store (`Store`), its `Replicator`
and `PeerService`, listening on the member's peer address and dialling every other member
over mutual TLS with its certificate from the group CA (the real sync code, unchanged), so
the member under test meets real peers that connect, reconcile, push and pull.

What is simulated is their health checking. A real member checks each of its servers once
per interval (first round spread over up to 2 s by a hash of the verdict's key, as
`health.checker` does), feeds each result to the server's anti-flap `Flap`, and writes the
verdict record ``obs/vs/<vs>/<member>`` ``{"up", "reason"}`` when it changes, and again
every third of its TTL. Here every simulated member does the same on the same schedule and
with the same thresholds, TTL and values, except that the result fed to a server's flap is
the latest result of one real tcp check of its data center (made with the node's own
`make_check`, every `DC_PROBE` seconds, against the data center's listener): all servers of
a data center are up or down together, which is what the benchmark's backends are.

SPEC.json (written by bench/bigconfig.py): {"workdir", "group", "config_digest", "members":
[{"name", "datacenter", "address"}], "simulate": [names], "target": name, "shape": {Shape
fields}, "sync": {idle_timeout, handshake_timeout, reconcile_interval}}.

Prints JSON lines on stdout: {"event": "listening"} once every listener is open, then a
{"event": "status"} line every `STATUS_EVERY` seconds: per simulated member its own state
digest, whether it is connected to the member under test and that member's digest as last
heard (heartbeats carry it), and each data center's latest raw check result.
"""

from __future__ import annotations

import functools
import heapq
import ipaddress
import json
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.support.bigconfig of this checkout

from twisted.internet import defer, reactor, task  # noqa: E402

from gtmcluster.config.addresses import HostPort  # noqa: E402
from gtmcluster.config.model import Member, TLSFiles  # noqa: E402
from gtmcluster.config.monitoring import HealthRule, Monitor, TcpCheck  # noqa: E402
from gtmcluster.health.checker import MIN_OBSERVATION_TTL, refresh_share  # noqa: E402
from gtmcluster.health.flap import UP, Flap  # noqa: E402
from gtmcluster.probe.base import Result, Target  # noqa: E402
from gtmcluster.probe.kinds import make_check  # noqa: E402
from gtmcluster.runtime import heap  # noqa: E402
from gtmcluster.state.store import Store  # noqa: E402
from gtmcluster.sync.replicator import Replicator  # noqa: E402
from gtmcluster.sync.service import PeerService  # noqa: E402
from gtmcluster.sync.tls import load_credentials  # noqa: E402
from tests.support import bigconfig  # noqa: E402

#: seconds between two real checks of a data center
DC_PROBE = 0.5
#: seconds between two passes over the verdicts due
TICK = 0.05
STATUS_EVERY = 0.25


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


@dataclass
class Simulated:
    """One simulated member: its store, replicator and peer service, and its servers' flaps."""

    name: str
    store: Store
    replicator: Replicator
    service: PeerService
    flaps: dict[str, Flap] = field(default_factory=dict)
    written: dict[str, float] = field(default_factory=dict)
    due: list[tuple[float, str]] = field(default_factory=list)  # (when, server): a heap


class World:
    def __init__(self, spec: dict[str, Any]):
        self.spec = spec
        self.shape = bigconfig.Shape(**spec["shape"])
        s = self.shape
        self.monitor = Monitor(
            "tcp", "tcp", s.interval, s.timeout, s.up_after, s.down_after, TcpCheck(), HealthRule("any")
        )
        self.ttl = max(MIN_OBSERVATION_TTL, 3 * s.interval * max(s.up_after, s.down_after))
        self.check = make_check(self.monitor, reactor)
        self.datacenter_of = {bigconfig.vs_name(i): s.datacenter_of(i) for i in range(s.servers)}
        #: data center -> (ok, reason) of its latest real check; none yet: unknown
        self.raw: dict[str, tuple[bool, str]] = {}
        self.members = [
            Member(
                m["name"],
                m["datacenter"],
                HostPort(ipaddress.ip_address(m["address"]), bigconfig.PEER_PORT),
                (HostPort(ipaddress.ip_address(m["address"]), bigconfig.DNS_PORT),),
                HostPort(ipaddress.ip_address(m["address"]), bigconfig.API_PORT),
            )
            for m in spec["members"]
        ]
        self.sims: list[Simulated] = []
        self.started = reactor.seconds()

    def start(self) -> None:
        workdir = Path(self.spec["workdir"])
        names = [m.name for m in self.members]
        sync = self.spec["sync"]
        for member in self.members:
            if member.name not in self.spec["simulate"]:
                continue
            certs = workdir / "certs"
            creds = load_credentials(
                TLSFiles(certs / "ca.pem", certs / f"{member.name}.pem", certs / f"{member.name}.key"), member.name
            )
            store = Store(member.name, reactor.seconds)
            replicator = Replicator(
                store,
                reactor,
                node=member.name,
                group=self.spec["group"],
                datacenter=member.datacenter,
                members=names,
                config_digest=self.spec["config_digest"],
                idle_timeout=sync["idle_timeout"],
                handshake_timeout=sync["handshake_timeout"],
            )
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((str(member.peer.host), member.peer.port))
            listener.listen(64)
            listener.setblocking(False)
            others = [m for m in self.members if m.name != member.name]
            service = PeerService(replicator, creds, listener, others, reactor, sync["reconcile_interval"])
            sim = Simulated(member.name, store, replicator, service)
            replicator.peer_listeners.append(functools.partial(forget_gone, replicator, self.spec["target"]))
            for vs in self.datacenter_of:
                sim.flaps[vs] = Flap(self.shape.up_after, self.shape.down_after)
                phase = bigconfig.check_phase(f"obs/vs/{vs}/{member.name}", self.shape.interval)
                sim.due.append((self.started + phase, vs))
            heapq.heapify(sim.due)
            self.sims.append(sim)
        for sim in self.sims:
            sim.service.startService()
        emit("listening", members=[sim.name for sim in self.sims])
        for dc in self.shape.datacenters[: self.shape.server_datacenters]:
            loop = task.LoopingCall(self.probe, dc)
            loop.clock = reactor
            loop.start(DC_PROBE, now=True)
        ticker = task.LoopingCall(self.tick)
        ticker.clock = reactor
        ticker.start(TICK, now=False)
        status = task.LoopingCall(self.status)
        status.clock = reactor
        status.start(STATUS_EVERY, now=False)

    def probe(self, dc: str) -> defer.Deferred[None]:
        """One real tcp check of data center *dc*'s listener (its first server's address)."""
        first = next(vs for vs, d in self.datacenter_of.items() if d == dc)
        index = int(first[2:])
        target = Target(ipaddress.ip_address(bigconfig.vs_address(index)), self.shape.port_of(dc), f"data center {dc}")

        def done(result: Result) -> None:
            self.raw[dc] = (result.ok, result.reason)

        return self.check(target).addCallback(done)

    def tick(self) -> None:
        """Every server whose check is due takes its data center's latest result."""
        now = reactor.seconds()
        interval = self.shape.interval
        for sim in self.sims:
            due = sim.due
            while due and due[0][0] <= now:
                when, vs = heapq.heappop(due)
                heapq.heappush(due, (when + interval, vs))
                raw = self.raw.get(self.datacenter_of[vs])
                if raw is None:
                    continue  # no result yet: a check still under way
                ok, reason = raw
                flap = sim.flaps[vs]
                changed = flap.feed(ok)
                if changed is not None or now - sim.written.get(vs, float("-inf")) >= self.ttl / 3:
                    key = f"obs/vs/{vs}/{sim.name}"
                    sim.store.put(key, {"up": flap.state == UP, "reason": reason}, ttl=self.ttl)
                    # as the checker does: the next rewrite after a change comes by the
                    # key's own share of the period sooner, so the rewrites are spread
                    sim.written[vs] = now - (refresh_share(key) * self.ttl / 3 if changed else 0.0)

    def status(self) -> None:
        target = self.spec["target"]
        members = {}
        for sim in self.sims:
            peer = sim.replicator.peers.get(target)
            members[sim.name] = {
                "digest": sim.store.digest(),
                "records": len(sim.store),
                "target_connected": bool(peer and peer.connected),
                "target_digest": peer.digest if peer else None,
                "target_synced": bool(peer and peer.synced),
            }
        emit("status", members=members, raw={dc: ok for dc, (ok, _) in self.raw.items()})

    def stop(self) -> defer.Deferred[Any]:
        return defer.gatherResults([defer.maybeDeferred(sim.service.stopService) for sim in self.sims])


def forget_gone(replicator: Replicator, target: str) -> None:
    """The target's digest as last heard is forgotten when it disconnects: the status shows
    only what it said since it (re)connected."""
    peer = replicator.peers.get(target)
    if peer is not None and not peer.connected:
        peer.digest = None


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    world = World(spec)

    def stop(signum: int, frame: object) -> None:
        reactor.callFromThread(lambda: world.stop().addBoth(lambda _: reactor.stop()))

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # the node's own garbage-collector keeper: four members' stores (200,000 objects) made
    # each full collection stand this reactor still 200-400 ms, late for its checks and pushes
    heap.HeapKeeper(reactor).startService()
    reactor.callWhenRunning(world.start)
    reactor.run(installSignalHandlers=False)


if __name__ == "__main__":
    main()
