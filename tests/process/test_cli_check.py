"""The real commands on configs: `gtmcluster check` and `twistd gtm` refusing bad configs and setups cleanly."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.config.load import load
from gtmcluster.config.problems import ConfigError
from tests.support import configs, nodeproc

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
GTMCLUSTER = Path(sys.executable).parent / "gtmcluster"
TIMEOUT = 60
PROBLEM_LINE = r"(?P<path>\S.*?): (?P<message>.+?)(?: \(line (?P<line>\d+)\))?"


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, check=False)


def twistd_gtm(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `twistd -n gtm ARGS`; a node that starts instead of refusing is stopped and fails the test."""
    cmd = [*nodeproc.twistd(), "-n", f"--pidfile={cwd / 'twistd.pid'}", "gtm", *args]
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"twistd gtm {' '.join(args)} kept running instead of refusing:\n{out}\n{err}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def broken_config() -> dict[str, Any]:
    """Four independent mistakes in four sections."""
    config = configs.base(nodeproc.loopback_address(), 5353)
    config["bogus"] = 1
    config["virtual_servers"]["vs2"]["port"] = 70000
    config["topology"][0]["score"] = -1
    config["regions"]["r2"] = ["203.0.113.0/24", "garbage"]
    return config


BROKEN_PATHS = ["bogus", "virtual_servers.vs2.port", "topology[0].score", "regions.r2[1]"]


def expected_problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(path)
    return [str(p) for p in caught.value.problems]


def assert_no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stdout + result.stderr, result.stdout + result.stderr


# --- gtmcluster check --------------------------------------------------------------------------


def test_check_accepts_the_sample_config() -> None:
    """`gtmcluster check --config etc/cluster.yaml` exits 0 with an OK summary of what the file holds."""
    result = run([str(GTMCLUSTER), "check", "--config", "etc/cluster.yaml"], ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("etc/cluster.yaml: OK"), result.stdout
    assert "sync group 'prod'" in result.stdout
    assert "3 members" in result.stdout
    assert "5 wide IPs" in result.stdout
    assert result.stderr == ""


def test_check_lists_every_problem(tmp_path: Path) -> None:
    """A broken config: exit 1, every problem on stderr, one per line as `FILE: key.path: problem`."""
    path = configs.write(tmp_path, broken_config())
    result = run([str(GTMCLUSTER), "check", "--config", str(path)], tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert_no_traceback(result)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[-1] == f"{path}: 4 problems"
    problems = lines[:-1]
    paths = []
    for line in problems:
        match = re.fullmatch(re.escape(f"{path}: ") + PROBLEM_LINE, line)
        assert match, f"not a FILE: key.path: problem line: {line!r}"
        assert match["line"] is not None, line
        paths.append(match["path"])
    assert sorted(paths) == sorted(BROKEN_PATHS)
    assert problems == expected_problems(path)


def test_check_reports_yaml_syntax_errors(tmp_path: Path) -> None:
    """A YAML syntax error: exit 1, one problem with its line, no traceback."""
    path = tmp_path / "bad.yaml"
    path.write_text("sync_group:\n  name: a: b\n")
    result = run([str(GTMCLUSTER), "check", "--config", str(path)], tmp_path)
    assert result.returncode == 1
    assert_no_traceback(result)
    assert result.stderr.splitlines() == [
        f"{path}: (top level): YAML syntax: mapping values are not allowed here (line 2)",
        f"{path}: 1 problem",
    ]


def test_check_reports_zone_file_problems(tmp_path: Path) -> None:
    """A zone file mistake is shown with the zone file's name and line, and the config key naming it."""
    path = configs.write(tmp_path, configs.base(), zone=configs.ZONE + "bad IN A 1.2.3\n")
    result = run([str(GTMCLUSTER), "check", "--config", str(path)], tmp_path)
    assert result.returncode == 1
    assert_no_traceback(result)
    zone_line = len(configs.ZONE.splitlines()) + 1
    zone = tmp_path.resolve() / "example.test.zone"
    expected = f"{path}: zones[0].file: {zone}:{zone_line}: bad A data: Text input is malformed"
    assert any(line.startswith(expected) for line in result.stderr.splitlines()), result.stderr


def test_check_missing_file(tmp_path: Path) -> None:
    """A config file that does not exist: exit 1 and a one-line reason, no traceback."""
    path = tmp_path / "nope.yaml"
    result = run([str(GTMCLUSTER), "check", "--config", str(path)], tmp_path)
    assert result.returncode == 1
    assert_no_traceback(result)
    assert result.stderr.splitlines()[0] == f"{path}: (top level): cannot read the config: No such file or directory"


def test_check_requires_config(tmp_path: Path) -> None:
    """`gtmcluster check` without --config is a usage error (exit 2), not a traceback."""
    result = run([str(GTMCLUSTER), "check"], tmp_path)
    assert result.returncode == 2
    assert_no_traceback(result)
    assert "--config" in result.stderr


# --- twistd gtm --------------------------------------------------------------------------------


def test_twistd_refuses_a_broken_config(tmp_path: Path) -> None:
    """`twistd -n gtm --config BROKEN --node n1` exits non-zero, prints every problem line, no traceback."""
    path = configs.write(tmp_path, broken_config())
    result = twistd_gtm(tmp_path, "--config", str(path), "--node", "n1")
    assert result.returncode != 0
    assert_no_traceback(result)
    output = (result.stdout + result.stderr).splitlines()
    for problem in expected_problems(path):
        assert problem in output, f"{problem!r} not printed:\n{result.stdout}{result.stderr}"
    assert not (tmp_path / "twistd.pid").exists()


def test_twistd_names_the_members_for_an_unknown_node(tmp_path: Path) -> None:
    """`--node` naming no member is refused with a message that lists the group's members."""
    config = configs.base(nodeproc.loopback_address(), 5353)
    second = nodeproc.loopback_address()
    config["sync_group"]["members"].append(
        {
            "name": "n2",
            "datacenter": "DC2",
            "peer": f"{second}:4353",
            "dns": [f"{second}:5353"],
            "api": f"{second}:8053",
        }
    )
    path = configs.write(tmp_path, config)
    result = twistd_gtm(tmp_path, "--config", str(path), "--node", "nx")
    assert result.returncode != 0
    assert_no_traceback(result)
    output = result.stdout + result.stderr
    assert "'nx' is not a member of sync group 'test'" in output, output
    assert "members: n1, n2" in output, output


@pytest.fixture
def busy_udp() -> Iterator[tuple[str, int]]:
    """A UDP socket bound on a loopback address of its own, held for the test."""
    address = nodeproc.loopback_address()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.bind((address, 0))
        yield address, sock.getsockname()[1]
    finally:
        sock.close()


def test_twistd_reports_a_dns_address_in_use(tmp_path: Path, busy_udp: tuple[str, int]) -> None:
    """A DNS address already in use is refused with 'cannot listen for DNS on ADDRESS:PORT', no traceback."""
    address, port = busy_udp
    path = configs.write(tmp_path, configs.base(address, port))
    result = twistd_gtm(tmp_path, "--config", str(path), "--node", "n1")
    assert result.returncode != 0
    assert_no_traceback(result)
    output = result.stdout + result.stderr
    assert f"cannot listen for DNS on {address}:{port}" in output, output
    assert "in use" in output
