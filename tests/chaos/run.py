"""One chaos run: the world, the load generator, the state observer, the admin writer and the
nemesis, all recorded to one JSON-lines history, then checked (`invariants.check`).

Threads of this process: the observer (every ``poll`` seconds, each live node's
``/api/v1/status`` and ``/api/v1/health``: digest, peers, and per server its availability,
admin state and the node's own verdict), the admin writer (every few seconds an admin
write on a random live node, always changing a server's state from its last acknowledged
one) and the nemesis (this thread: the plan's steps at their times). The load generator is
a process of its own (`tests.chaos.loadgen`); its lines join the history at the end.

After the plan's last step (heal everything, restart what is down) the admin writer
stops, the run waits for the digests to agree (up to the bound and a little more), lets
the load run a few seconds more, reads every node's admin states, and stops.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from tests.chaos import invariants, schedule
from tests.chaos.invariants import Bounds, Report
from tests.chaos.world import (
    ADMIN_SERVERS,
    DURABLE_SERVER,
    MONITOR_BOUND,
    NODES,
    SYNC_SETTINGS,
    ChaosWorld,
    node_server,
    servers,
)

ADMIN_STATES = ("enabled", "disabled", "drain")


def default_bounds(poll: float) -> Bounds:
    idle = float(SYNC_SETTINGS["idle_timeout"])
    return Bounds(
        max_gap=3.0,
        propagation=idle + 2 * poll + 2,
        failover=MONITOR_BOUND + idle + 2,
        converge=45.0,
    )


@dataclass
class Options:
    seconds: float = 300.0
    seed: int = 1
    rate: float = 10.0  # queries per second to each node
    poll: float = 1.0  # the observer's period
    admin_every: float = 3.0  # the admin writer's mean period
    networks: int = 64  # client subnets (ECS) the load generator rotates through
    kinds: tuple[str, ...] = schedule.KINDS  # the nemesis's episode kinds
    quiet: float = 5.0  # after the last heal and the agreement, the load runs this long more
    bounds: Bounds | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class History:
    """Events from several threads: each one JSON line in the file, and kept in memory."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[str] = path.open("w")
        self._lock = threading.Lock()
        self.events: list[dict[str, Any]] = []

    def add(self, kind: str, at: float | None = None, **fields: Any) -> dict[str, Any]:
        """Record an event of *kind* that happened *at* (default: now)."""
        event = {"t": round(time.time() if at is None else at, 4), "kind": kind, **fields}
        with self._lock:
            self._file.write(json.dumps(event) + "\n")
            self._file.flush()
            self.events.append(event)
        return event

    def extend(self, events: list[dict[str, Any]]) -> None:
        with self._lock:
            for event in events:
                self._file.write(json.dumps(event) + "\n")
            self._file.flush()
            self.events.extend(events)

    def close(self) -> None:
        self._file.close()


def read_history(path: Path) -> list[dict[str, Any]]:
    """The events of a history file (a line cut short by a crash is skipped)."""
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


class ChaosRun:
    """Drives one run in *world* (started), recording to *history*."""

    def __init__(self, world: ChaosWorld, options: Options, history: History, say: Callable[[str], None] = print):
        self.world = world
        self.options = options
        self.history = history
        self.say = say
        self.bounds = options.bounds or default_bounds(options.poll)
        servers_of = {n: node_server(n) for n in NODES}
        self.plan = schedule.plan(options.seed, options.seconds, list(NODES), servers_of, options.kinds)
        self._stop_observer = threading.Event()
        self._stop_admin = threading.Event()
        self._lock = threading.Lock()
        self._last_acked: dict[str, str] = dict.fromkeys([*ADMIN_SERVERS, DURABLE_SERVER], "enabled")
        self._rng = random.Random(options.seed + 1)

    # -- the observer -----------------------------------------------------------------------

    def view(self, node: str) -> dict[str, Any] | None:
        """What *node* says now (None when it is down or its API does not answer)."""
        if not self.world.alive(node):
            return None
        status = self.world.get(node, "/api/v1/status")
        health = self.world.get(node, "/api/v1/health")
        if status is None or health is None:
            return None
        vs = {
            name: {
                "available": s["available"],
                "admin": s["admin"],
                "own": s["observers"].get(node, {}).get("up"),
            }
            for name, s in health["virtual_servers"].items()
        }
        return {
            "digest": status["state"]["digest"],
            "records": status["state"]["records"],
            "peers": {p["name"]: p["connected"] for p in status["peers"]},
            "vs": vs,
        }

    def observe_once(self) -> dict[str, Any]:
        views = {node: self.view(node) for node in NODES}
        return self.history.add("round", views=views, load=round(os.getloadavg()[0], 2))

    def _observe(self) -> None:
        while not self._stop_observer.is_set():
            began = time.monotonic()
            self.observe_once()
            self._stop_observer.wait(max(0.0, self.options.poll - (time.monotonic() - began)))

    # -- the admin writer -------------------------------------------------------------------

    def admin_write(self, node: str, vs: str | None = None) -> bool:
        """One admin write on *node* (a random admin server, when not given), to a state other
        than its last acknowledged one; whether it was acknowledged (200)."""
        with self._lock:
            vs = vs or self._rng.choice(ADMIN_SERVERS)
            state = self._rng.choice([s for s in ADMIN_STATES if s != self._last_acked[vs]])
        action = {"enabled": "enable", "disabled": "disable", "drain": "drain"}[state]
        sent = time.time()
        got = self.world.request(node, "POST", f"/api/v1/virtual-servers/{vs}/{action}")
        acked = got is not None and got[0] == 200
        if acked:
            with self._lock:
                self._last_acked[vs] = state
        status = None if got is None else got[0]
        # its time is when it was sent: the node stamped it between that and the reply
        skew = self.world.skews[node]
        self.history.add("admin", at=sent, node=node, vs=vs, state=state, status=status, acked=acked, skew=skew)
        return acked

    def _admin(self) -> None:
        rng = random.Random(self.options.seed + 2)
        while not self._stop_admin.wait(rng.uniform(0.5, 1.5) * self.options.admin_every):
            live = [n for n in NODES if self.world.alive(n)]
            if live:
                self.admin_write(rng.choice(live))

    # -- the nemesis ------------------------------------------------------------------------

    def apply(self, step: schedule.Step) -> None:
        a = step.args
        w = self.world
        if step.action == "episode":
            self.say(f"  [{time.strftime('%H:%M:%S')}] {a['phase']} {a['name']}")
        elif step.action == "cut":
            w.wan.cut(a["a"], a["b"], both=not a["oneway"])
        elif step.action == "heal":
            w.wan.heal(a["a"], a["b"], both=not a["oneway"])
        elif step.action == "loss":
            w.set_loss(a["share"])
        elif step.action == "kill":
            self.history.add("nemesis", action="kill", **a)
            w.kill_node(a["node"])
            return
        elif step.action == "start":
            w.start_node(a["node"], a.get("skew"))
            self.history.add("nemesis", action="start", node=a["node"], skew=w.skews[a["node"]])
            return
        elif step.action == "backend_stop":
            self.history.add("nemesis", action="backend_stop", **a)  # down from now on
            w.stop_backend(a["vs"])
            return
        elif step.action == "backend_start":
            began = time.time()
            w.start_backend(a["vs"])  # up once it accepts connections: recorded then
            self.history.add("nemesis", action="backend_start", took=round(time.time() - began, 2), **a)
            return
        elif step.action == "write_then_kill":
            acked = self.admin_write(a["node"], DURABLE_SERVER)
            self.history.add("nemesis", action="kill", node=a["node"], after_write=acked)
            w.kill_node(a["node"])
            return
        elif step.action == "final_heal":
            w.heal_all()
            for node in NODES:
                if not w.alive(node):
                    w.start_node(node)
                    self.history.add("nemesis", action="start", node=node, skew=w.skews[node])
            for vs, proc in w.backends.items():
                if proc.poll() is not None:
                    w.start_backend(vs)
                    self.history.add("nemesis", action="backend_start", vs=vs)
        else:
            raise ValueError(f"unknown step {step.action!r}")
        self.history.add("nemesis", action=step.action, **a)

    # -- the run ----------------------------------------------------------------------------

    def run(self, loadgen_out: Path) -> Report:
        """The whole run; the checked report."""
        o = self.options
        self.history.add(
            "setup",
            nodes={node: address for node, (address, _, _) in NODES.items()},
            vs=servers(),
            monitored=[vs for _, _, vs in NODES.values()],
            admin_vs=[*ADMIN_SERVERS, DURABLE_SERVER],
            bounds=asdict(self.bounds),
            seed=o.seed,
            seconds=o.seconds,
            plan=[{"at": round(s.at, 2), "action": s.action, **s.args} for s in self.plan],
            **o.extra,
        )
        for node in NODES:  # they were started before: their lives begin here
            self.history.add("nemesis", action="start", node=node, skew=self.world.skews[node])
        self.world.start_loadgen(loadgen_out, o.rate, 1.0, o.networks)
        observer = threading.Thread(target=self._observe, name="chaos-observer", daemon=True)
        admin = threading.Thread(target=self._admin, name="chaos-admin", daemon=True)
        observer.start()
        admin.start()
        began = time.monotonic()
        try:
            for step in self.plan:
                delay = began + step.at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)  # the nemesis keeps its schedule
                self.apply(step)
            self._stop_admin.set()
            admin.join(30)
            self._wait_agreement(self.bounds.converge + 15)
            time.sleep(o.quiet)  # the load goes on a little after the agreement
            self.history.add("final", admin=self._final_admin())
        finally:
            self._stop_admin.set()
            self._stop_observer.set()
            observer.join(30)
            admin.join(30)
            self.world.stop_loadgen()
        self.history.extend(read_history(loadgen_out))
        self._read_logs()
        self.history.add("end", load=os.getloadavg())
        return invariants.check(self.history.events)

    def _wait_agreement(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rounds = [e for e in self.history.events[-10:] if e["kind"] == "round"]
            if rounds:
                digests = {v["digest"] if v else None for v in rounds[-1]["views"].values()}
                if None not in digests and len(digests) == 1:
                    return
            time.sleep(self.options.poll / 2)  # the observer writes the rounds

    def _final_admin(self) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for node in NODES:
            health = self.world.get(node, "/api/v1/health")
            if health is not None:
                out[node] = {vs: health["virtual_servers"][vs]["admin"] for vs in [*ADMIN_SERVERS, DURABLE_SERVER]}
        return out

    def _read_logs(self) -> None:
        for node in NODES:
            text = self.world.log_text(node) + self.world.output(node)
            count = text.count("Traceback") + text.count("Unhandled Error")
            first = text.find("Traceback")
            self.history.add(
                "logs", node=node, tracebacks=count, excerpt=text[max(0, first - 500) : first + 3000] if count else ""
            )
