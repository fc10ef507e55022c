"""The processes of bench/bigconfig.py: the member under test, the simulated members, dnsperf.

- `Member`: ``twistd --nodaemon gtm`` for the member under test (the checkout's code), its
  log, its resident memory, its /metrics (the reactor lag figures) and its reload;
- `Peers`: bench/bigpeers.py (the other members, simulated) and the status lines it prints;
- `Dnsperf`: one dnsperf at a fixed rate for as long as a phase lasts (stopped by SIGINT,
  which makes it print its figures), with every query's latency (`-v`);
- `strip_snapshot`: keep only the member's own records in its snapshot (a restart that
  must pull every other member's verdicts).
"""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from comparelib import _verbose_lines, parse_dnsperf, percentile
from prometheus_client.parser import text_string_to_metric_families

from tests.support import bigconfig, dnsclient
from tests.support.nodeproc import twistd

#: seconds a /metrics scrape or a reload may take before it counts as not answered
HTTP_TIMEOUT = 120.0


class Member:
    """The member under test, a real twistd process."""

    def __init__(self, workdir: Path, config: Path, name: str, address: str):
        self.workdir = workdir
        self.config = config
        self.name = name
        self.address = address
        self.log = workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._counted: dict[tuple[str, int], dict[str, int]] = {}

    @property
    def dns(self) -> tuple[str, int]:
        return (self.address, bigconfig.DNS_PORT)

    def spawn(self) -> None:
        out = (self.workdir / f"{self.name}.stdout").open("ab")
        cmd = [
            *twistd(),
            "--nodaemon",
            f"--logfile={self.log}",
            f"--pidfile={self.workdir / (self.name + '.pid')}",
            "gtm",
            f"--config={self.config}",
            f"--node={self.name}",
        ]
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir)
        out.close()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_answering(self, timeout: float) -> float | None:
        """Seconds until it answers a DNS query (None: not within *timeout*, or it exited)."""
        start = time.monotonic()
        wire = dnsclient.query(bigconfig.ZONE, "SOA")
        while time.monotonic() - start < timeout:
            if not self.running():
                return None
            with contextlib.suppress(OSError):
                dnsclient.udp(wire, self.dns, timeout=0.2)
                return time.monotonic() - start
        return None

    def stop(self, timeout: float = 60.0) -> float | None:
        """SIGTERM, then SIGKILL after *timeout*; the seconds it took to exit on SIGTERM."""
        if self.proc is None or self.proc.poll() is not None:
            return 0.0
        start = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
        return time.monotonic() - start

    def memory(self) -> dict[str, int]:
        """VmRSS and VmHWM (the peak) of the process, bytes."""
        out: dict[str, int] = {}
        if self.proc is None:
            return out
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out[key] = int(value.split()[0]) * 1024
        return out

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def count(self, needles: list[str]) -> dict[str, int]:
        """How often each of *needles* occurs in the log, rotated files (twistd rotates at
        1 MB: ``n1.log.1``, ...) included."""
        counts = dict.fromkeys(needles, 0)
        for path in self.workdir.glob(f"{self.log.name}*"):
            key = (path.name, path.stat().st_size)
            found = self._counted.get(key)
            if found is None or path == self.log:
                text = path.read_text(errors="replace")
                found = {n: text.count(n) for n in needles}
                if path != self.log:
                    self._counted[key] = found
            for n in needles:
                counts[n] += found.get(n, 0)
        return counts

    def api(self, path: str, method: str = "GET", timeout: float = HTTP_TIMEOUT) -> tuple[int, bytes]:
        request = urllib.request.Request(
            f"http://{self.address}:{bigconfig.API_PORT}{path}", method=method, data=b"{}" if method == "POST" else None
        )
        request.add_header("Authorization", f"Bearer {bigconfig.TOKEN}")
        if method == "POST":
            request.add_header("Content-Type", "application/json")  # (writes must be JSON)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return int(response.status), response.read()
        except urllib.error.HTTPError as e:
            return int(e.code), e.read()

    def lag(self) -> Lag | None:
        """The reactor lag figures of /metrics (None: no answer in time)."""
        started = time.monotonic()
        try:
            _, body = self.api("/metrics")
        except (OSError, TimeoutError):
            return None
        took = time.monotonic() - started
        lag = Lag(scrape_s=took)
        for family in text_string_to_metric_families(body.decode()):
            for sample in family.samples:
                if sample.name == "gtm_reactor_lag_max_seconds":
                    lag.max_since_start = sample.value
                elif sample.name == "gtm_reactor_lag_recent_max_seconds":
                    lag.max_since_scrape = sample.value
                elif sample.name == "gtm_reactor_lag_seconds_bucket":
                    lag.buckets[sample.labels["le"]] = sample.value
                elif sample.name == "gtm_reactor_lag_seconds_count":
                    lag.count = sample.value
                elif sample.name == "gtm_health_urgent_longest_wait_seconds":
                    lag.health_wait = sample.value
        return lag


@dataclass
class Lag:
    """The reactor lag figures of one scrape."""

    scrape_s: float
    max_since_start: float = 0.0
    max_since_scrape: float = 0.0
    count: float = 0.0
    buckets: dict[str, float] = field(default_factory=dict)
    #: the longest an urgent health change waited for its evaluation since the start
    #: (None: a node without the figure)
    health_wait: float | None = None

    def over(self, bound: str = "0.05") -> float:
        """Calls later than *bound* seconds (a histogram bucket's upper bound)."""
        return self.count - self.buckets.get(bound, 0.0)


class Peers:
    """bench/bigpeers.py in a child process, and the latest of its status lines."""

    def __init__(self, workdir: Path, spec: dict[str, Any]):
        path = workdir / "peers.json"
        path.write_text(json.dumps(spec))
        self.out = workdir / "peers.stderr"
        with self.out.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("bigpeers.py")), str(path)],
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=workdir,
            )
        self.latest: dict[str, Any] = {}
        self.listening = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "listening":
                self.listening.set()
            elif event.get("event") == "status":
                self.latest = event

    def agree(self) -> bool:
        """The member under test's digest, as a simulated member last heard it, equals that
        simulated member's own (for at least one of them)."""
        members = self.latest.get("members", {})
        return any(m["target_connected"] and m["target_digest"] == m["digest"] for m in members.values())

    def connected(self) -> int:
        return sum(1 for m in self.latest.get("members", {}).values() if m["target_connected"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Dnsperf:
    """dnsperf at *qps* from *source* through a query file, until `stop` (SIGINT)."""

    def __init__(self, workdir: Path, label: str, server: tuple[str, int], queries: Path, source: str, qps: int):
        self.out = workdir / f"dnsperf-{label}.out"
        self.argv = [
            "dnsperf",
            *("-s", server[0], "-p", str(server[1]), "-a", source, "-d", str(queries)),
            *("-l", "3600", "-Q", str(qps), "-c", "1", "-t", "2", "-v"),
        ]
        with self.out.open("wb") as f:
            self.proc = subprocess.Popen(self.argv, stdout=f, stderr=subprocess.STDOUT)

    def stop(self) -> dict[str, Any]:
        """Stop it; its figures: sent, completed, lost, and latency percentiles (ms)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        text = self.out.read_text(errors="replace")
        try:
            figures = parse_dnsperf(text[text.rfind("Statistics:") :] if "Statistics:" in text else text)
        except ValueError:
            return {"error": f"dnsperf printed no figures: {text[-500:]}"}
        latencies = sorted(lat for code, lat in _verbose_lines(self.out) if code != b"T" and lat is not None)
        interrupted = 0
        for line in text.splitlines():
            if line.strip().startswith("Queries interrupted:"):
                interrupted = int(line.split(":")[1].split()[0])
        return {
            "sent": int(figures["sent"]),
            "completed": int(figures["completed"]),
            "lost": int(figures["lost"]),
            "interrupted": interrupted,
            "rcodes": figures["rcodes"],
            "p50_ms": round(percentile(latencies, 50) * 1000, 2) if latencies else None,
            "p99_ms": round(percentile(latencies, 99) * 1000, 2) if latencies else None,
            "max_ms": round(latencies[-1] * 1000, 1) if latencies else None,
        }


def strip_snapshot(path: Path, origin: str) -> int | str:
    """Delete every record not written by *origin* from the snapshot at *path*; the number
    of records left, or why it could not be done."""
    if not path.exists():
        return f"no snapshot at {path}"
    try:
        db = sqlite3.connect(path)
        try:
            with db:
                db.execute("DELETE FROM records WHERE origin != ?", (origin,))
            (left,) = db.execute("SELECT COUNT(*) FROM records").fetchone()
        finally:
            db.close()
    except sqlite3.Error as e:
        return f"the snapshot could not be edited ({e}): the member restarts with it whole"
    return int(left)
