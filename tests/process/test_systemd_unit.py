"""The systemd unit (etc/systemd/gtm@.service) as deployed.

`systemd-analyze verify` accepts it, and its own ExecStart command line, with the paths of
this checkout and the user `nobody` in place of the install's, run as root in a network
namespace of its own: the node binds port 53 as root and then runs as that user, answers
DNS on port 53, reloads on the unit's ExecReload signal, and stops on its KillSignal within
TimeoutStopSec, its final snapshot written and owned by the user.

Needs root (a namespace, port 53, switching user), `ip`, `dig` and `systemd-analyze`:
skipped without them, except in CI (``CI=true``), where a missing capability fails.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import IN_CI
from tests.support import configs
from tests.tools import wanem

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "etc" / "systemd" / "gtm@.service"
#: what the unit assumes of an install, and what stands for it here
INSTALL_VENV = "/opt/gtmcluster/venv"
INSTALL_CONFIG = "/etc/gtmcluster/cluster.yaml"
USER = "nobody"
NODE = "n1"


def require(condition: bool, reason: str) -> None:
    """Skip without *condition*, or fail in CI, where a missing capability is an error."""
    if not condition:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)


def unit_settings() -> dict[str, str]:
    """The [Service] settings of the unit (one value each)."""
    settings: dict[str, str] = {}
    section = ""
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]":
            key, _, value = line.partition("=")
            settings[key] = value
    return settings


def as_here(text: str, config: Path) -> str:
    """The unit's text with this checkout's virtualenv, *config* and `nobody` for the
    install's paths and user."""
    group = shlex.quote(_group_of(USER))
    return (
        text.replace(INSTALL_VENV, str(Path(sys.executable).parent.parent))
        .replace(INSTALL_CONFIG, str(config))
        .replace("--uid=gtm --gid=gtm", f"--uid={USER} --gid={group}")
    )


def _group_of(user: str) -> str:
    return grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name


def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    require(shutil.which("systemd-analyze") is not None, "`systemd-analyze` is not installed (Debian package systemd)")
    instance = tmp_path / f"gtm@{NODE}.service"
    instance.write_text(as_here(UNIT.read_text(), tmp_path / "cluster.yaml"))
    done = subprocess.run(
        ["systemd-analyze", "verify", str(instance)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # warnings (an unknown key, a deprecated one) do not fail verify: none is wanted either
    assert done.stdout.strip() == "" and done.stderr.strip() == "", done.stdout + done.stderr


@pytest.fixture
def namespace() -> Iterator[str]:
    require(os.geteuid() == 0, "running the unit's command needs root (port 53, --uid, a network namespace)")
    for tool, package in (("ip", "iproute2"), ("dig", "bind9-dnsutils")):
        require(shutil.which(tool) is not None, f"`{tool}` is not installed (Debian package {package})")
    name = wanem.run_prefix("unit") + "node"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)


@pytest.fixture
def site() -> Iterator[Path]:
    """A folder the user `nobody` can reach (pytest's own are root's alone), removed after."""
    folder = Path(tempfile.mkdtemp(prefix="gtm-unit-", dir="/tmp"))
    try:
        folder.chmod(0o755)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def dig_in(namespace: str, *args: str) -> str:
    done = subprocess.run(
        ["ip", "netns", "exec", namespace, "dig", "@127.0.0.1", "-p", "53", "+short", "+tries=1", "+time=1", *args],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    return done.stdout.strip()


def wait_for(what: str, ready: Callable[[], object], timeout: float, proc: subprocess.Popen[str], out: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if proc.poll() is not None:
            pytest.fail(f"the node exited ({proc.returncode}) before {what}: {out.read_text()[-3000:]}")
        time.sleep(0.1)  # polling a real process
    pytest.fail(f"no {what} within {timeout} s: {out.read_text()[-3000:]}")


def twistd_pid(pid: int) -> int:
    """The node's process: *pid* itself, or its child when `ip netns exec` forked to run it."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return int(children[0]) if children else pid


def test_the_unit_s_command_runs_the_node_as_deployed(namespace: str, site: Path) -> None:
    user = pwd.getpwnam(USER)
    for folder in ("state", "log"):
        (site / folder).mkdir(mode=0o700)
        os.chown(site / folder, user.pw_uid, user.pw_gid)
    raw = configs.base("127.0.0.1", 53)
    raw["state_dir"] = str(site / "state" / "{node}")
    raw["log_dir"] = str(site / "log")
    raw["sync_group"]["snapshot_interval"] = 3600  # so the snapshot checked is the one written at stop
    config = configs.write(site / "etc", raw)
    for path in (site / "etc", *(site / "etc").iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)  # the node reads it again as `nobody` on a reload
    settings = unit_settings()
    argv = shlex.split(as_here(settings["ExecStart"], config).replace("%i", NODE))
    assert argv[0].endswith("/bin/twistd") and Path(argv[0]).exists(), argv
    journal = site / "journal"  # what systemd would pass to the journal: the node's stdout
    proc = subprocess.Popen(
        ["ip", "netns", "exec", namespace, *argv],
        stdout=journal.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
        cwd=site,
        env={**os.environ, "JOURNAL_STREAM": "8:12345"},  # as systemd sets it for the journal
    )
    try:
        address = re.compile(r"^\d+\.\d+\.\d+\.\d+$", re.MULTILINE)  # (dig prints its errors too)
        wait_for(
            "answer on port 53", lambda: address.search(dig_in(namespace, "gslb.example.test", "A")), 30, proc, journal
        )
        node = twistd_pid(proc.pid)
        status = Path(f"/proc/{node}/status").read_text()
        uids = re.search(r"^Uid:\s+(.*)$", status, re.MULTILINE)
        assert uids is not None and set(uids.group(1).split()) == {str(user.pw_uid)}, status
        # ExecReload: /bin/kill -HUP $MAINPID
        assert settings["ExecReload"] == "/bin/kill -HUP $MAINPID"
        os.kill(node, signal.SIGHUP)
        wait_for("reload", lambda: "reloaded" in journal.read_text(), 30, proc, journal)
        stop_signal = getattr(signal, settings["KillSignal"])
        started = time.monotonic()
        os.kill(node, stop_signal)
        proc.wait(timeout=float(settings["TimeoutStopSec"]))
        took = time.monotonic() - started
        output = journal.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # twistd ends by its signal once shut down; systemd counts 0 and SIGTERM as a clean exit
    assert proc.returncode in (0, -stop_signal), output[-3000:]
    assert "Server Shut Down." in output, output[-3000:]
    # each line carries its journal priority; the node's own log belongs to the user
    assert all(re.match(r"<[2-7]>\[", line) for line in output.splitlines()), output[-3000:]
    own_log = site / "log" / f"{NODE}.jsonl"
    assert "Port 53 Closed" in own_log.read_text() and own_log.stat().st_uid == user.pw_uid  # lines of the stop too
    assert took < float(settings["TimeoutStopSec"])
    snapshot = site / "state" / NODE / "state.sqlite"
    assert snapshot.exists(), output[-3000:]
    assert snapshot.stat().st_uid == user.pw_uid and snapshot.stat().st_mode & 0o077 == 0
