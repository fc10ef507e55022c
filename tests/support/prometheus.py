"""A real Prometheus for process tests: its own config, data folder and loopback address,
scraping and evaluating every second, stopped (and its data left in the test's folder)
afterwards; and the reads a test makes of its HTTP API."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support import poll

PORT = 9090


def rules_with_short_for(source: Path, target: Path, duration: str = "1s") -> Path:
    """A copy of the rules file *source* at *target* with every ``for:`` set to *duration*
    (a test cannot wait the shipped minutes)."""
    text = re.sub(r"(?m)^(\s+for:) \S+$", rf"\1 {duration}", source.read_text())
    target.write_text(text)
    return target


@dataclass
class RunningPrometheus:
    address: str
    log: Path
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://{self.address}:{PORT}"

    def get(self, path: str, **params: str) -> Any:
        """The ``data`` of a JSON answer of the HTTP API (None while it cannot answer)."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=5) as response:
                return json.load(response)["data"]
        except (OSError, ValueError, KeyError):
            return None

    def alerts(self) -> list[dict[str, Any]]:
        return list((self.get("/api/v1/alerts") or {}).get("alerts", []))

    def query(self, promql: str) -> list[dict[str, Any]]:
        return list((self.get("/api/v1/query", query=promql) or {}).get("result", []))

    def targets(self) -> list[dict[str, Any]]:
        return list((self.get("/api/v1/targets") or {}).get("activeTargets", []))

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


@contextmanager
def running_prometheus(workdir: Path, address: str, targets: list[str], rules: Path) -> Iterator[RunningPrometheus]:
    """Run ``prometheus`` on *address*, scraping /metrics of *targets* (host:port) every
    second and evaluating *rules* every second; stop it (SIGTERM, then SIGKILL) afterwards."""
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [{"job_name": "gtm", "metrics_path": "/metrics", "static_configs": [{"targets": targets}]}],
    }
    config_file = workdir / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    log = workdir / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config_file}",
                f"--storage.tsdb.path={workdir / 'prometheus-data'}",
                f"--web.listen-address={address}:{PORT}",
                "--log.level=info",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=workdir,
        )
    running = RunningPrometheus(address, log, proc)
    try:
        poll.until(
            lambda: proc.poll() is not None or ready(running.url),
            timeout=30,
            what="prometheus ready",
            details=running.log_text,
        )
        assert proc.poll() is None, f"prometheus exited with {proc.returncode}:\n{running.log_text()}"
        yield running
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
