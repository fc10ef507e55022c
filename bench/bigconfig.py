"""Large-configuration benchmark (issue 12): 5,000 monitored servers, 5 members, measured.

    .venv/bin/python bench/bigconfig.py --json var/bigconfig.json      # the whole run
    .venv/bin/python bench/bigconfig.py --scale 0.2                     # 1,000 servers ...

The configuration (`tests.support.bigconfig`, generated into a temporary folder): 5,000
virtual servers with tcp monitors (interval 5 s, timeout 2 s, down after 3: failover bound
17 s), 500 pools, 2,000 wide IPs, 20,000 topology records over 200 regions, 5 members. The
servers are in DC1 and DC2, checked on one listening socket per data center (in this
process), so closing DC1's is an outage of 2,500 servers.

1. In-process (bench/biginprocess.py, in a child process): config load; one verdict change
   (merge one peer verdict, read the health back); a reconcile of 25,000 verdicts through
   the `Replicator` in slices on a fake reactor, each turn timed.
2. Processes: the member under test ``n1`` is a real ``twistd gtm``; the four others are
   simulated in one process (bench/bigpeers.py: the real peer protocol over mutual TLS,
   simulated health checks). A client asks n1 a wide IP every 20 ms (UDP, 2 s timeout) from
   its first answer to the end, and dnsperf asks at `--qps` through every phase:
   - *start*: from n1's first answer until it has reconciled with every peer and its digest
     agrees with theirs;
   - *steady*: `--steady` seconds of nothing in particular (1,000 checks a second);
   - *reload*: ``POST /api/v1/reload`` of the same file, and 3 s after;
   - *outage*: DC1's listener closed; until every answer names a DC2 server (for 3 s);
   - *recovery*: DC1's listener back; until answers name DC1 servers again;
   - *reconcile*: n1 stopped (SIGTERM), its snapshot stripped of every record but its own,
     started again: until it answers, then until it has reconciled and agrees.
   Around each phase /metrics is scraped: the reactor lag since the previous scrape is the
   phase's longest stall (including the stall of the scrape that opened it; the *scrape*
   figure says what one costs).

Every wait is capped (`--phase-timeout`), so a member that does not keep up shows as targets
NOT met, with the figures so far. The targets are checked and printed; `--json` writes
everything. Not a test: figures depend on the machine and on what else runs on it (the load
average is printed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.support of this checkout

from bigworld import Dnsperf, Lag, Member, Peers, strip_snapshot  # noqa: E402
from compare import code_state  # noqa: E402

from gtmcluster.state.snapshot import FILENAME  # noqa: E402
from tests.support import bigconfig  # noqa: E402
from tests.support.pacedclient import PacedClient  # noqa: E402

TARGET = "n1"
PROBE_SOURCE = "127.77.0.1"
DNSPERF_SOURCE = "127.77.0.2"
VERDICT_CHANGE_MS = 0.5
RECONCILE_S = 2.0
STALL_S = 0.05
CONFIG_S = 3.0
#: the sync timers of the benchmark's group (the defaults, but for a faster idle timeout)
SYNC = {"idle_timeout": 30.0, "handshake_timeout": 10.0, "reconcile_interval": 60.0}


class Run:
    def __init__(self, args: argparse.Namespace, workdir: Path):
        self.args = args
        self.workdir = workdir
        scale = args.scale
        self.shape = bigconfig.Shape(
            servers=round(args.servers * scale),
            pools=round(args.pools * scale),
            wideips=round(args.wideips * scale),
            topology=round(args.topology * scale),
            regions=max(1, round(args.regions * scale)),
            members=args.members,
            interval=args.interval,
            timeout=args.timeout,
            up_after=args.up_after,
            down_after=args.down_after,
        )
        self.report: dict[str, Any] = {"phases": {}, "inprocess": {}, "targets": []}
        self.backends: list[bigconfig.Backend] = []
        self.member: Member | None = None
        self.peers: Peers | None = None
        self.client: PacedClient | None = None
        self.lag: Lag | None = None
        self.lag_before: Lag | None = None

    # -- setup ----------------------------------------------------------------------------

    def setup(self) -> Path:
        base, self.backends = bigconfig.open_backends(self.shape.server_datacenters, self.args.backend_port)
        self.shape = dataclasses.replace(self.shape, backend_port=base)
        addresses = [f"{self.args.address}.{i + 1}" for i in range(self.shape.members)]
        self.addresses = addresses
        started = time.monotonic()
        path = bigconfig.write(self.workdir, self.shape, addresses, sync=SYNC)
        say(f"config written in {time.monotonic() - started:.1f} s: {path} ({path.stat().st_size / 1e6:.1f} MB)")
        (self.workdir / "queries").write_text("".join(f"{n} A\n" for n in self.shape.wideip_names()))
        return path

    def pin(self, member: Member) -> None:
        """With --pin, n1 on CPU 0 (the benchmark and everything it starts are on CPU 1):
        set before its threads start, they inherit it."""
        if self.args.pin and member.proc is not None:
            os.sched_setaffinity(member.proc.pid, {0})

    # -- in-process -----------------------------------------------------------------------

    def inprocess(self, path: Path) -> str | None:
        """Run bench/biginprocess.py; the config digest it found (None if it did not get there)."""
        argv = [
            sys.executable,
            str(Path(__file__).with_name("biginprocess.py")),
            *("--config", str(path), "--budget", str(self.args.budget), "--samples", str(self.args.samples)),
        ]
        budget, cap = self.args.budget, self.args.inprocess_timeout
        say(f"in-process figures (each phase within {budget:g} s, all within {cap:g} s)")
        out = self.report["inprocess"]
        digest = None
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        lines: queue.Queue[str | None] = queue.Queue()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + self.args.inprocess_timeout
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                proc.kill()
                out["cut_off"] = f"not finished within {self.args.inprocess_timeout:g} s"
                say(f"  cut off after {self.args.inprocess_timeout:g} s")
                break
            if line is None:
                break
            if not line.strip():
                continue
            event = json.loads(line)
            key = event.pop("phase") + ("/" + event.pop("step") if "step" in event else "")
            out[key] = event
            digest = event.get("digest", digest)
            say(f"  {key}: {brief(event)}")
        proc.wait()
        return digest

    # -- processes ------------------------------------------------------------------------

    def processes(self, path: Path, digest: str | None) -> None:
        args = self.args
        names = [bigconfig.member_name(i) for i in range(self.shape.members)]
        spec = {
            "workdir": str(self.workdir),
            "group": "big",
            "config_digest": digest or "unknown",
            "members": [
                {"name": n, "datacenter": self.shape.datacenters[i], "address": self.addresses[i]}
                for i, n in enumerate(names)
            ],
            "simulate": names[1:],
            "target": TARGET,
            "shape": self.shape.__dict__,
            "sync": SYNC,
        }
        self.peers = Peers(self.workdir, spec)
        if not self.peers.listening.wait(120):
            raise RuntimeError(f"the simulated members did not start: {self.peers.out.read_text()[-2000:]}")
        say(f"simulated members {', '.join(names[1:])} listening")
        self.member = Member(self.workdir, path, TARGET, self.addresses[0])
        spawned = time.monotonic()
        self.member.spawn()
        self.pin(self.member)
        answered = self.member.wait_answering(args.phase_timeout)
        start: dict[str, Any] = {"spawn_to_answer_s": rounded(answered)}
        self.report["phases"]["start"] = start
        if answered is None:
            start["error"] = f"n1 did not answer within {args.phase_timeout:g} s of its start"
            say(f"start: {start['error']}")
            return
        say(f"n1 answers {answered:.1f} s after its start")
        wideips = [bigconfig.wideip_name(w) for w in range(min(50, self.shape.wideips))]
        self.client = PacedClient(self.member.dns, wideips, source=PROBE_SOURCE).start()
        self.phase("start", lambda: self.settled(spawned), scrape_first=False)
        start["memory"] = self.member.memory()
        self.phase("steady", self.steady)
        self.phase("reload", self.reload)
        self.phase("outage", self.outage)
        self.phase("recovery", self.recovery)
        self.reconcile()
        self.report["memory"] = self.member.memory()

    def phase(self, name: str, action: Callable[[], dict[str, Any] | None], scrape_first: bool = True) -> None:
        """Run *action* under dnsperf and the paced client; the phase's figures."""
        assert self.member is not None and self.client is not None
        if scrape_first:
            self.scrape()
        perf = Dnsperf(self.workdir, name, self.member.dns, self.workdir / "queries", DNSPERF_SOURCE, self.args.qps)
        begun = time.monotonic()
        try:
            figures = action() or {}
        finally:
            dnsperf = perf.stop()
        ended = time.monotonic()
        out = self.report["phases"].setdefault(name, {})
        out.update(figures)
        out["seconds"] = round(ended - begun, 2)
        out["dnsperf"] = dnsperf
        time.sleep(self.client.timeout)  # the last queries' fate is known
        out["client"] = self.client.figures(begun, ended).as_dict()
        lag = self.scrape()
        out["stall_ms"] = round(lag.max_since_scrape * 1000, 1) if lag else None
        if lag is not None and lag.health_wait is not None:
            out["health_wait_ms"] = round(lag.health_wait * 1000, 1)  # since the start
        if lag is not None and (self.lag_before is not None or not scrape_first):
            out["stalls_over_50ms"] = round(lag.over() - (self.lag_before.over() if self.lag_before else 0))
        else:
            out["stalls_over_50ms"] = None  # a scrape did not answer in time
        out["load_average"] = os.getloadavg()[0]
        say(f"{name}: {brief(out)}")

    def scrape(self) -> Lag | None:
        assert self.member is not None
        self.lag_before = self.lag
        self.lag = self.member.lag()
        return self.lag

    def settled(self, since: float, before: dict[str, int] | None = None) -> dict[str, Any]:
        """Wait until n1 logged its reconciliation with every peer (more often than *before*)
        and its digest agrees with a peer's; when each happened (seconds after *since*)."""
        assert self.member is not None and self.peers is not None
        lines = self.reconciled_lines()
        before = before or dict.fromkeys(lines, 0)
        deadline = time.monotonic() + self.args.phase_timeout
        out: dict[str, Any] = {}
        while time.monotonic() < deadline:
            if "reconciled_s" not in out:
                counts = self.member.count(lines)
                if all(counts[line] > before[line] for line in lines):
                    out["reconciled_s"] = round(time.monotonic() - since, 2)
            if "agrees_s" not in out and self.peers.agree():
                out["agrees_s"] = round(time.monotonic() - since, 2)
            if "reconciled_s" in out and "agrees_s" in out:
                return out
            time.sleep(0.2)
        out["error"] = f"not reconciled and agreeing within {self.args.phase_timeout:g} s"
        out["peers_connected"] = self.peers.connected()
        return out

    def reconciled_lines(self) -> list[str]:
        return [f"reconciled with {bigconfig.member_name(i)}:" for i in range(1, self.shape.members)]

    def steady(self) -> dict[str, Any]:
        time.sleep(self.args.steady)  # nothing happens: the phase is this long
        return {}

    def reload(self) -> dict[str, Any]:
        assert self.member is not None
        # A reload holds the old config and the new one at once: on a shared machine, do
        # not start one that would not fit in the memory left.
        held = self.member.memory().get("VmRSS", 0)
        available = memory_available()
        if available is not None and available < held * 1.2:
            return {"error": f"not run: n1 holds {held / 1e9:.1f} GB, only {available / 1e9:.1f} GB are available"}
        started = time.monotonic()
        try:
            code, body = self.member.api("/api/v1/reload", "POST", timeout=self.args.phase_timeout)
        except (OSError, TimeoutError) as e:
            return {"error": f"the reload did not answer within {self.args.phase_timeout:g} s: {e}"}
        took = time.monotonic() - started
        time.sleep(3)
        return {"reload_s": round(took, 2), "status": code, "answer": body.decode(errors="replace")[:200]}

    def answers_in(self, since: float, datacenter: str) -> tuple[float | None, float | None]:
        """(when the last answer naming another data center's server arrived, when the
        first answer after it naming *datacenter*'s did), of the client's queries since *since*."""
        assert self.client is not None
        last_other = first_after = None
        for q in self.client.window(since):
            if q.latency is None or not q.addresses:
                continue
            at = q.sent + q.latency
            if any(self.datacenter(a) != datacenter for a in q.addresses):
                last_other, first_after = at, None
            elif first_after is None:
                first_after = at
        return last_other, first_after

    def datacenter(self, address: str) -> str:
        _, _, third, fourth = (int(x) for x in address.split("."))
        return self.shape.datacenter_of(third * 250 + fourth - 1)

    def moved(self, datacenter: str, bound: float) -> dict[str, Any]:
        """Wait until every answer names *datacenter*'s servers for 3 s; when they moved."""
        started = time.monotonic()
        deadline = started + bound + self.args.phase_timeout
        while time.monotonic() < deadline:
            time.sleep(0.2)
            _, first = self.answers_in(started, datacenter)
            if first is not None and time.monotonic() - first >= 3.0:
                return {"moved_s": round(first - started, 2), "bound_s": bound}
        return {"error": f"answers did not move to {datacenter} within {deadline - started:.0f} s", "bound_s": bound}

    def outage(self) -> dict[str, Any]:
        dc1, dc2 = self.shape.datacenters[:2]
        self.backends[0].close()
        say(f"outage: {dc1}'s listener closed ({len(self.shape.servers_in(dc1))} servers down)")
        return self.moved(dc2, self.shape.failover_bound)

    def recovery(self) -> dict[str, Any]:
        dc1 = self.shape.datacenters[0]
        self.backends[0] = bigconfig.Backend(self.shape.port_of(dc1))
        bound = self.shape.interval * self.shape.up_after + self.shape.timeout
        return self.moved(dc1, bound)

    def reconcile(self) -> None:
        member, client = self.member, self.client
        assert member is not None and client is not None
        out: dict[str, Any] = {}
        self.report["phases"]["reconcile"] = out
        self.scrape()
        # its peak so far includes the reload's (the old config and the new one at once)
        out["memory_before"] = member.memory()
        stopped_at = time.monotonic()
        out["stop_s"] = member.stop()
        state = self.workdir / "state" / TARGET / FILENAME
        if self.args.reconcile_snapshot == "own":
            out["snapshot_records_kept"] = strip_snapshot(state, TARGET)
        elif self.args.reconcile_snapshot == "none":
            state.unlink(missing_ok=True)
        before = member.count(self.reconciled_lines())
        spawned = time.monotonic()
        member.spawn()
        self.pin(member)
        answered = member.wait_answering(self.args.phase_timeout)
        out["spawn_to_answer_s"] = rounded(answered)
        if answered is None:
            out["error"] = f"n1 did not answer within {self.args.phase_timeout:g} s of its restart"
        else:
            queries = self.workdir / "queries"
            perf = Dnsperf(self.workdir, "reconcile", member.dns, queries, DNSPERF_SOURCE, self.args.qps)
            begun = time.monotonic()
            try:
                out.update(self.settled(begun, before))
            finally:
                out["dnsperf_from_restart"] = perf.stop()
            time.sleep(client.timeout)
            out["client"] = client.figures(begun, time.monotonic() - client.timeout).as_dict()
        out["down_s"] = round(spawned - stopped_at + (answered or 0), 2)
        lag = self.scrape() if answered is not None else None
        out["stall_ms"] = round(lag.max_since_start * 1000, 1) if lag else None
        if lag is not None and lag.health_wait is not None:
            out["health_wait_ms"] = round(lag.health_wait * 1000, 1)  # since the restart
        out["stalls_over_50ms"] = round(lag.over()) if lag else None
        out["load_average"] = os.getloadavg()[0]
        say(f"reconcile: {brief(out)}")

    def stop(self) -> None:
        if self.client is not None:
            self.client.stop()
        if self.member is not None:
            self.member.stop(20)
        if self.peers is not None:
            self.peers.stop()
        for backend in self.backends:
            backend.close()

    # -- targets --------------------------------------------------------------------------

    def judge(self) -> None:
        """Each of issue 12's targets: met, NOT met, or (memory) a figure only."""
        inproc, phases = self.report["inprocess"], self.report["phases"]
        targets = self.report["targets"]

        def target(what: str, figure: str, met: bool | None) -> None:
            targets.append({"target": what, "figure": figure, "met": met})

        def under(value: float | None, bound: float) -> bool:
            return value is not None and value < bound

        change = inproc.get("verdict_change/done", {})
        medians = change.get("median_ms", {})
        what = f"one verdict change under {VERDICT_CHANGE_MS} ms"
        if medians:
            figure = ", ".join(f"{k} median {v:.3f} ms (max {change['max_ms'][k]:.3f})" for k, v in medians.items())
            if sum(change.get("not_visible", {}).values()):
                figure += f"; changes not visible when read: {change['not_visible']}"
            target(what, figure, under(max(medians.values()), VERDICT_CHANGE_MS))
        else:
            evaluated = inproc.get("verdict_change/evaluated", {}).get("evaluate_all_s")
            figure = "not measured: the in-process part was cut off"
            if evaluated is None:
                figure += " before one evaluation of every server was done"
            target(what, figure, False)
        rec = inproc.get("reconcile_inprocess")
        if rec:
            figure = (
                f"{rec['merged']:,} of {rec['verdicts']:,} merged in {rec['seconds']:.2f} s, "
                f"{rec['turns']} turns, longest {rec['longest_turn_ms']:.1f} ms"
            )
            ok = rec["complete"] and under(rec["seconds"], RECONCILE_S) and under(rec["longest_turn_ms"], 50)
            what = f"reconcile of {rec['verdicts']:,} verdicts in-process: under 2 s, no turn over 50 ms"
            target(what, figure, ok)
        r = phases.get("reconcile", {})
        if r:
            figure = (
                f"answering {show(r.get('spawn_to_answer_s'), 's')} after the restart, then reconciled "
                f"{show(r.get('reconciled_s'), 's')} and agreeing {show(r.get('agrees_s'), 's')} later; "
                f"longest stall {show(r.get('stall_ms'), 'ms')}"
            )
            ok = under(r.get("reconciled_s"), RECONCILE_S) and under(r.get("stall_ms"), 50)
            target("reconcile after a restart (process): under 2 s, no stall over 50 ms", figure, ok)
        o = phases.get("outage", {})
        if o:
            figure = (
                f"moved after {show(o.get('moved_s'), 's')} (bound {o['bound_s']:g} s), "
                f"longest stall {show(o.get('stall_ms'), 'ms')}"
            )
            ok = under(o.get("moved_s"), o["bound_s"] + 1e-9) and under(o.get("stall_ms"), 50)
            down = len(self.shape.servers_in(self.shape.datacenters[0]))
            target(f"outage of {down:,} servers: answers move in the bound, no stall over 50 ms", figure, ok)
        runs = {n: p.get("dnsperf") or p.get("dnsperf_from_restart") for n, p in phases.items()}
        runs = {n: d for n, d in runs.items() if isinstance(d, dict) and "sent" in d}
        if runs:
            figure = "; ".join(
                f"{n}: {d['lost']} of {d['sent']} lost, p99 {show(d.get('p99_ms'), 'ms')}" for n, d in runs.items()
            )
            target(
                "dnsperf through all of it: 0 lost (the reconcile's from n1's answer on), p99",
                figure,
                all(d["lost"] == 0 for d in runs.values()),
            )
        load = inproc.get("config_load", {}).get("seconds")
        started = phases.get("start", {}).get("spawn_to_answer_s")
        reload = phases.get("reload", {})
        figure = (
            f"load {show(load, 's')} in-process, first answer {show(started, 's')} after twistd started, "
            f"reload {show(reload.get('reload_s'), 's')} with a longest stall of {show(reload.get('stall_ms'), 'ms')}"
        )
        ok = under(load, CONFIG_S) and under(reload.get("reload_s"), CONFIG_S) and under(reload.get("stall_ms"), 50)
        target("config load and reload: under 3 s, no answer pause over 50 ms", figure, ok)
        decided = inproc.get("decide")
        if decided:
            figure = (
                f"median {decided['median_ms']:.2f} ms, max {decided['max_ms']:.2f} ms "
                f"({decided['topology_records']:,} topology records)"
            )
            target("a decision with nothing kept, as every answer after a health change (no target)", figure, None)
        memory = phases.get("start", {}).get("memory", {})
        before = phases.get("reconcile", {}).get("memory_before", {})
        restarted = self.report.get("memory", {})
        if memory:
            figure = f"{memory.get('VmRSS', 0) / 1e6:,.0f} MB once started"
            if before:
                figure += f", peak {before.get('VmHWM', 0) / 1e6:,.0f} MB (the reload included)"
            if restarted:
                figure += f", {restarted.get('VmRSS', 0) / 1e6:,.0f} MB after the restart"
            target("memory of a member (VmRSS; the peak is VmHWM)", figure, None)


def memory_available() -> int | None:
    """MemAvailable of /proc/meminfo, bytes."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def show(value: float | None, unit: str) -> str:
    """A figure, or what its absence means (a wait cut off, a /metrics that did not answer)."""
    if value is None:
        return "n/a"
    return f"{value:,.2f} {unit}" if unit == "s" else f"{value:,.1f} {unit}"


def rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 2)


def brief(figures: dict[str, Any]) -> str:
    return json.dumps(figures, default=str)[:600]


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shape = bigconfig.Shape()
    p.add_argument("--servers", type=int, default=shape.servers)
    p.add_argument("--pools", type=int, default=shape.pools)
    p.add_argument("--wideips", type=int, default=shape.wideips)
    p.add_argument("--topology", type=int, default=shape.topology)
    p.add_argument("--regions", type=int, default=shape.regions)
    p.add_argument("--members", type=int, default=shape.members)
    p.add_argument("--scale", type=float, default=1.0, help="multiplies servers, pools, wide IPs, topology, regions")
    p.add_argument("--interval", type=float, default=shape.interval)
    p.add_argument("--timeout", type=float, default=shape.timeout)
    p.add_argument("--up-after", type=int, default=shape.up_after)
    p.add_argument("--down-after", type=int, default=shape.down_after)
    p.add_argument("--qps", type=int, default=300, help="dnsperf's rate in every phase")
    p.add_argument("--steady", type=float, default=20.0, help="seconds of the steady phase")
    p.add_argument("--phase-timeout", type=float, default=180.0, help="the longest wait of one step")
    p.add_argument("--budget", type=float, default=120.0, help="seconds each in-process phase may use")
    p.add_argument("--samples", type=int, default=20, help="in-process verdict changes of each kind")
    p.add_argument("--inprocess-timeout", type=float, default=1200.0)
    p.add_argument(
        "--reconcile-snapshot",
        choices=("own", "none", "whole"),
        default="own",
        help="what n1's snapshot holds at the restart: its own records (default), nothing, all",
    )
    p.add_argument("--skip", default="", help="inprocess and/or processes")
    p.add_argument("--address", default="127.0.71", help="members on ADDRESS.1 .. ADDRESS.5")
    p.add_argument("--backend-port", type=int, default=18000, help="the first port tried for the data centers")
    p.add_argument("--json", type=Path, help="write everything here")
    p.add_argument("--keep", action="store_true", help="keep the work folder")
    p.add_argument(
        "--pin",
        action="store_true",
        help="n1 alone on CPU 0, the simulated members, dnsperf, the client and the backends on CPU 1: "
        "n1's stalls are then its own, not the other processes' (needs 2 CPUs)",
    )
    args = p.parse_args(argv)
    if args.pin:
        if len(os.sched_getaffinity(0)) < 2:
            print("bigconfig: --pin needs 2 CPUs", file=sys.stderr)
            return 2
        os.sched_setaffinity(0, {1})  # inherited by every process and thread started from here
    skip = set(args.skip.split(","))
    if "processes" not in skip and shutil.which("dnsperf") is None:
        print("bigconfig: dnsperf is not installed (Debian package dnsperf)", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="gtm-bigconfig-"))
    run = Run(args, workdir)
    signal.signal(signal.SIGTERM, interrupt)
    s = run.shape
    run.report["settings"] = {**vars(args), "json": str(args.json), "shape": s.__dict__}
    run.report["environment"] = {
        "code": code_state(),
        "cpus": os.cpu_count(),
        "load_average_start": os.getloadavg(),
    }
    say(
        f"{s.servers:,} servers, {s.pools:,} pools, {s.wideips:,} wide IPs, {s.topology:,} topology records, "
        f"{s.members} members; code {run.report['environment']['code']}; load average {os.getloadavg()[0]:.2f}; "
        f"work folder {workdir}"
    )
    failed = True
    try:
        path = run.setup()
        digest = None if "inprocess" in skip else run.inprocess(path)
        if "processes" not in skip:
            run.processes(path, digest)
        failed = False
    except KeyboardInterrupt:
        say("interrupted")
    finally:
        run.stop()
        run.report["environment"]["load_average_end"] = os.getloadavg()
        run.judge()
        for t in run.report["targets"]:
            verdict = "" if t["met"] is None else ("met" if t["met"] else "NOT met")
            say(f"{verdict:>8}  {t['target']}: {t['figure']}")
        say(f"load average at the end {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(run.report, indent=1, default=str))
            say(f"written: {args.json}")
        if args.keep or failed:
            say(f"work folder kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0 if not failed else 2


if __name__ == "__main__":
    sys.exit(main())
