"""`gtmcluster logs` against two real nodes started as under systemd (``twistd -n``, no
--logfile), through their APIs.

Each node writes its own log in log_dir however it was started; `logs` prints both nodes'
lines merged by time, each under its node's name; `logs -f` follows both, and when one node
is restarted meanwhile it says so, asks again until the node answers, and goes on with the
restarted node's new lines, without repeating any line. Waits are polls with deadlines.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.support import poll
from tests.support.nodeproc import twistd, wait_answering
from tests.support.trio import Group, running_group

GTMCLUSTER = Path(sys.executable).parent / "gtmcluster"
TIMEOUT = 30
PREFIXED = re.compile(r"^(?P<node>\S+) +\| (?P<time>\S+) (?P<level>\S+) +\[(?P<system>[^]]*)\] (?P<message>.*)$")
NODES = ("n1", "n2")


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    workdir = tmp_path_factory.mktemp("logsapi")
    with running_group(workdir, size=2, customize=lambda c: c.update(log_dir="logs"), logfile=False) as g:
        g.wait_converged()
        yield g


def own_log(group: Group, node: str) -> list[dict[str, str]]:
    path = group.workdir / "logs" / f"{node}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def parsed(lines: list[str]) -> list[re.Match[str]]:
    out = []
    for line in lines:
        m = PREFIXED.match(line)
        if m is not None:
            out.append(m)
        else:
            assert re.match(r"^\S+ +\|     ", line), line  # a traceback's line, under its prefix
    return out


@pytest.mark.process
def test_logs_reads_both_nodes_through_their_apis(group: Group) -> None:
    """Nodes started without --logfile keep log_dir/NODE.jsonl; `logs` prints the lines of
    both, each under its node, in time order, each one of that node's own lines."""
    for node in NODES:
        assert not (group.workdir / f"{node}.log").exists()
        assert own_log(group, node), f"{node} wrote no log of its own"
    result = subprocess.run(
        [str(GTMCLUSTER), "logs", "--config", str(group.config_path), "--lines", "50"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    shown = parsed(result.stdout.splitlines())
    assert {m["node"] for m in shown} == set(NODES)
    times = [m["time"] for m in shown]
    assert times == sorted(times)
    for node in NODES:
        own = {(r["time"][:23] + "Z", r["message"].split("\n")[0]) for r in own_log(group, node)}
        for m in shown:
            if m["node"] == node:
                assert (m["time"], m["message"]) in own


class Output:
    """Collects a stream's lines in a thread, so the test can poll for them."""

    def __init__(self, stream: IO[str]):
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self.lines)

    def text(self) -> str:
        return "\n".join(self.snapshot())

    def wait(self, found: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
        poll.until(found, timeout, what, 0.05, self.text)


@pytest.mark.process
def test_logs_follow_goes_on_across_a_node_restart(group: Group) -> None:
    """`logs -f` shows both nodes; n2 is stopped and started again: the follower notes the
    loss, asks again, then shows n2's lines from after its start (its API coming up), while
    n1's lines kept coming; no line is shown twice; SIGINT ends it with exit 0."""
    proc = subprocess.Popen(
        [str(GTMCLUSTER), "logs", "-f", "--config", str(group.config_path), "--lines", "5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    out, err = Output(proc.stdout), Output(proc.stderr)
    try:
        out.wait(lambda: {m["node"] for m in parsed(out.snapshot())} == set(NODES), "lines of both nodes")
        restarted_at = time.time()
        group.kill("n2", signal.SIGTERM)
        err.wait(lambda: "n2: " in err.text() and "asking again" in err.text(), "the loss of n2 noted")
        group.restart("n2")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(restarted_at))

        def restarted() -> bool:
            return any(
                m["node"] == "n2" and m["time"] > stamp and "HTTP API on" in m["message"]
                for m in parsed(out.snapshot())
            )

        out.wait(restarted, "n2's lines after its restart")
        assert "n2: reading its log again" in err.text()
        assert any(m["node"] == "n1" and m["time"] > stamp for m in parsed(out.snapshot()))
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, err.text()
    shown = [(m["node"], m["time"], m["message"]) for m in parsed(out.snapshot())]
    assert len(shown) == len(set(shown)), "a line was shown twice"
    assert "Traceback" not in err.text()


@pytest.mark.process
def test_under_systemd_stderr_lines_carry_journal_priorities(tmp_path: Path) -> None:
    """``twistd -n --logger gtmcluster.nodelog.journal.observer`` with JOURNAL_STREAM set (as
    systemd sets it): every stderr line starts with an sd-daemon priority, nothing goes to
    stdout, and the node's own log file is written as well."""
    g = Group(tmp_path, size=1, customize=lambda c: c.update(log_dir="logs"), logfile=False)
    cmd = [
        *twistd(),
        "--nodaemon",
        "--logger=gtmcluster.nodelog.journal.observer",
        f"--pidfile={tmp_path / 'n1.pid'}",
        "gtm",
        f"--config={g.config_path}",
        "--node=n1",
    ]
    env = {**os.environ, "JOURNAL_STREAM": "8:12345"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env=env)
    try:
        wait_answering(g.members["n1"].dns, proc)
        proc.send_signal(signal.SIGTERM)
        raw_out, raw_err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out, err = raw_out.decode(), raw_err.decode()
    lines = err.splitlines()
    assert lines and all(re.match(r"<[2-7]>\[", line) for line in lines), err
    assert any(line.startswith("<6>[gtmcluster.service] HTTP API on") for line in lines), err
    assert out == ""
    assert "HTTP API on" in (tmp_path / "logs" / "n1.jsonl").read_text()
