"""`gtmcluster demo` with the sample config, run as a user runs it from the checkout.

The demo starts the sample's three members (gtm-cnc, gtm-tel, gtm-cmcc on 127.0.0.11-13) as
real twistd processes with generated certificates, one HTTP backend per data center
(127.0.0.21-23) and stand-in resolvers (127.0.1.1-127.0.4.1 port 53) that answer each data
center's probes after that data center's delay. It narrates five steps (topology answers,
the proximity table, RTT answers, agreement, failover and return) and stops everything. No
other test uses those addresses.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gtmcluster.demo.processes import in_use

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("dig_tool")]

REPO = Path(__file__).resolve().parents[2]
NODES = {"gtm-cnc": "127.0.0.11", "gtm-tel": "127.0.0.12", "gtm-cmcc": "127.0.0.13"}
RUN_DIR = REPO / "var" / "demo" / "run"
#: every address the demo listens on: DNS, API and peer port of each node, the backends, the
#: stand-in resolvers
LISTENERS = [
    *[(socket.AF_INET, host, port) for host in NODES.values() for port in (5353, 8053, 4353)],
    (socket.AF_INET6, "::1", 5353),
    (socket.AF_INET, "127.0.0.21", 8081),
    (socket.AF_INET, "127.0.0.22", 8082),
    (socket.AF_INET, "127.0.0.23", 8083),
    *[(socket.AF_INET, f"127.0.{i}.1", 53) for i in (1, 2, 3, 4)],
]
#: resolver -> (address, virtual server, data center) of its answer, by topology and by RTT
BY_TOPOLOGY = {
    "127.0.1.1": ("127.0.0.21", "vs-cnc", "CNC"),
    "127.0.2.1": ("127.0.0.22", "vs-tel", "TEL"),
    "127.0.3.1": ("127.0.0.23", "vs-cmcc", "CMCC"),
    "127.0.4.1": ("127.0.0.22", "vs-tel", "TEL"),  # in no region: the sample's "any" rule sends it to TEL
}
BY_RTT = {**BY_TOPOLOGY, "127.0.4.1": ("127.0.0.23", "vs-cmcc", "CMCC")}  # its nearest is CMCC
ANSWER = re.compile(r"dig -b (\S+) www\.wip\.example\.com  ->  (\S+) \((\S+) in (\S+)\)   \[by (\S+)\]")


def port_is_free(family: socket.AddressFamily, host: str, port: int) -> bool:
    """Whether UDP and TCP *port* on *host* can be bound (nothing listens there)."""
    return not (in_use(host, port, socket.SOCK_DGRAM) or in_use(host, port, socket.SOCK_STREAM))


def busy_listeners() -> list[str]:
    return [f"{host}:{port}" for family, host, port in LISTENERS if not port_is_free(family, host, port)]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@pytest.fixture(scope="module")
def demo() -> subprocess.CompletedProcess[str]:
    busy = busy_listeners()
    if busy:
        pytest.fail(f"the demo's addresses are already in use before the test: {busy}")
    return subprocess.run(
        [sys.executable, "-m", "gtmcluster.cli.main", "demo", "--once", "--config", "etc/cluster.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def step(output: str, number: int) -> str:
    """The text of step *number* of the story (up to the next step or the epilogue)."""
    found = re.search(rf"^{number}\. .*?(?=^\d\. |^The group keeps running|\Z)", output, re.M | re.S)
    assert found, f"no step {number} in:\n{output}"
    return found.group(0)


def answers(text: str) -> dict[str, tuple[str, str, str, str]]:
    return {m[0]: (m[1], m[2], m[3], m[4]) for m in ANSWER.findall(text)}


def test_demo_exits_zero_after_starting_three_connected_nodes(demo: subprocess.CompletedProcess[str]) -> None:
    """``gtmcluster demo --once`` starts the three members, they connect and agree, the story
    runs to its end, and the demo exits with status 0."""
    out = demo.stdout
    assert demo.returncode == 0, out + demo.stderr
    for name, host in NODES.items():
        assert re.search(rf"{name}\s+data center \S+\s+DNS {host}:5353\s+API/dashboard http://{host}:8053/", out)
    assert "connected; state digests agree on every node" in out, out
    assert "The group keeps running" in out
    for name, host in NODES.items():  # each dashboard with the token its node made
        token = (REPO / "var" / "demo" / "state" / name / "api-token").read_text().strip()
        assert f"dashboard of {name}: http://{host}:8053/#token={token}\n" in out, out


def test_first_answers_come_from_topology(demo: subprocess.CompletedProcess[str]) -> None:
    """Before any path is measured every answer is decided at once by topology (never waits
    for a probe): each ISP's resolver gets its own ISP's data center."""
    got = answers(step(demo.stdout, 1))
    assert set(got) == set(BY_TOPOLOGY), demo.stdout
    for resolver, expected in BY_TOPOLOGY.items():
        assert got[resolver] == (*expected, "topology"), f"{resolver}: {got[resolver]}"


def test_proximity_table_holds_every_path_in_delay_order(demo: subprocess.CompletedProcess[str]) -> None:
    """Every GTM probed every resolver from its own address, and the shared table shows the
    stand-in resolvers' delays: each resolver's nearest data center has the lowest RTT."""
    table = step(demo.stdout, 2)
    nearest = {resolver: dc for resolver, (_, _, dc) in BY_RTT.items()}
    for block in re.findall(r"ldns \{ address (\S+) .*?\} \}", table, re.S):
        assert block in nearest
    for resolver, dc in nearest.items():
        entry = re.search(rf"ldns \{{ address {re.escape(resolver)} .*?\}} \}}", table, re.S)
        assert entry, table
        rtts = {d: int(us) for d, us in re.findall(r'datacenter "(\S+)" cur_rtt (\d+)', entry.group(0))}
        assert set(rtts) == {"CNC", "TEL", "CMCC"}, entry.group(0)
        assert min(rtts, key=lambda d: rtts[d]) == dc, entry.group(0)
        assert all(us > 1000 for us in rtts.values())  # the stand-in delays (>= 4 ms) were measured


def test_rtt_decides_once_measured_and_moves_the_resolver_in_no_region(
    demo: subprocess.CompletedProcess[str],
) -> None:
    """Asked again with the table complete, RTT decides, and the resolver topology sent to TEL
    goes to CMCC, its nearest data center; the demo says so."""
    text = step(demo.stdout, 3)
    got = answers(text)
    assert set(got) == set(BY_RTT), demo.stdout
    for resolver, expected in BY_RTT.items():
        assert got[resolver] == (*expected, "rtt"), f"{resolver}: {got[resolver]}"
    assert re.search(r"moved from 127\.0\.0\.22 \(vs-tel in TEL\) to 127\.0\.0\.23 \(vs-cmcc in CMCC\)", text)


def test_the_group_agrees(demo: subprocess.CompletedProcess[str]) -> None:
    """After the probes every node holds the same state: one digest, not DIFFERENT."""
    text = step(demo.stdout, 4)
    assert re.search(r"every node holds the same state \(digest \d+-[0-9a-f]{16}\)", text), text


def test_failover_within_the_bound_and_the_return(demo: subprocess.CompletedProcess[str]) -> None:
    """The demo stops the CNC backend: the CNC resolver's answer moves to another data center
    within interval x down_after + timeout; restarted, the backend gets it back."""
    text = step(demo.stdout, 5)
    moved = re.search(r"= ([\d.]+) s\n   -> (\S+) \((\S+) in (\S+)\) after ([\d.]+) s", text)
    assert moved, text
    bound, address, vs, _, took = moved.groups()
    assert vs != "vs-cnc" and address != "127.0.0.21"
    assert float(took) <= float(bound) + 1.0, text  # + the poll step and one check phase
    assert re.search(r"it should be back after .*\n   -> 127\.0\.0\.21 \(vs-cnc in CNC\) after [\d.]+ s", text), text


def test_demo_leaves_nothing_running(demo: subprocess.CompletedProcess[str]) -> None:
    """After the demo exits its nodes, backends and resolvers are gone: no pid file names a
    live process and every address it listened on can be bound again."""
    assert demo.returncode == 0, demo.stdout + demo.stderr
    for name in NODES:
        pidfile = RUN_DIR / f"{name}.pid"
        if pidfile.exists():
            with contextlib.suppress(ValueError):
                assert not pid_alive(int(pidfile.read_text().strip())), name
    assert busy_listeners() == []


def test_demo_refuses_to_start_over_a_running_one(demo: subprocess.CompletedProcess[str]) -> None:
    """With one of its addresses taken (another demo still running, say) the demo says which
    and exits 1 before starting anything, rather than narrating someone else's nodes."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.12", 8053))
        held.listen(1)
        run = subprocess.run(
            [sys.executable, "-m", "gtmcluster.cli.main", "demo", "--once", "--config", "etc/cluster.yaml"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert run.returncode == 1, run.stdout + run.stderr
        assert "in use already (is another demo running?): tcp 127.0.0.12:8053" in run.stderr
        assert "backends:" not in run.stdout
        assert [label for label in busy_listeners() if label != "127.0.0.12:8053"] == []


def read_until(fd: int, marker: str, timeout: float) -> str:
    seen = ""
    deadline = time.monotonic() + timeout
    while marker not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 65536) if ready else b""
        if not chunk:
            break
        seen += chunk.decode(errors="replace")
    return seen


def test_interactive_demo_keeps_running_until_ctrl_c(demo: subprocess.CompletedProcess[str]) -> None:
    """Without --once the group keeps answering after the story until Ctrl-C (SIGINT), also
    when started as a background job; then the demo stops everything and exits 0."""
    # started the way a shell starts a background job: with SIGINT ignored (inherited
    # through exec); the demo must take Ctrl-C all the same
    as_background_job = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
        "os.execv(sys.executable, [sys.executable, '-m', 'gtmcluster.cli.main', 'demo', "
        "'--config', 'etc/cluster.yaml'])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", as_background_job],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    try:
        seen = read_until(proc.stdout.fileno(), "Press Ctrl-C", 120)
        assert "Press Ctrl-C" in seen, seen
        assert len(busy_listeners()) == len(LISTENERS)  # everything is up and answering
        dig = subprocess.run(
            ["dig", "@127.0.0.12", "-p", "5353", "-b", "127.0.2.1", "www.wip.example.com", "A", "+short"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        assert dig.stdout.split() == ["127.0.0.22"], dig.stdout + dig.stderr
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
        out = rest.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.terminate()  # the demo stops its processes on SIGTERM too
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, seen + out
    assert "stopping" in out
    assert busy_listeners() == []
