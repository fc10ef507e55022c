"""`gtmcluster status` and `gtmcluster logs` as real commands (subprocesses).

`status` runs against a real three-member group (tests/support/trio.py): every node shown,
digests agreeing, exit 0; with a member killed it names that member unreachable and exits 1
at once. `logs` prints the group's own logs (through the APIs) merged by time, each line
prefixed with its node (following, and restarts: test_cli_logs_api.py). The first tests check the status summary
itself on made-up answers (no processes). Waits are polls with deadlines.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.cli import status
from tests.support import poll
from tests.support.apiclient import call, token_of
from tests.support.trio import Group, running_group

GTMCLUSTER = Path(sys.executable).parent / "gtmcluster"
#: far more than any of these commands may take; they are expected to finish in a second or two
TIMEOUT = 30
#: a node that does not answer may make `status` wait this long at most
UNREACHABLE_BOUND = 8.0
POLL = 0.05
NODES = ("n1", "n2", "n3")
PREFIXED = re.compile(r"^(?P<node>\S+) +\| (?P<text>.*)$")


def gtmcluster(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(GTMCLUSTER), *args], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def wait_for(condition: Callable[[], bool], timeout: float, what: str, details: Callable[[], object]) -> None:
    """Poll *condition* every `POLL` s until it holds, or fail showing *details*."""
    poll.until(condition, timeout, what, POLL, details)


# -- the summary, on made-up answers ---------------------------------------------------------


def fake_status(node: str, state: str, config: str, peers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "node": node,
        "datacenter": "DC1",
        "config_generation": 1,
        "config_digest": config,
        "ready": True,
        "state": {"digest": state, "records": 3},
        "peers": peers or [],
        "health": {
            "virtual_servers": {
                "vs1": {"available": True, "health": "up", "admin": "enabled", "held": False, "reason": ""},
                "vs2": {"available": False, "health": "down", "admin": "enabled", "held": False, "reason": "refused"},
            },
            "links": {"l1": {"state": "down", "reason": "no route"}},
        },
    }


def test_summary_names_differing_digests() -> None:
    """Different state or config digests are shown per node, and the answer is not ok."""
    statuses = {
        "n1": fake_status("n1", "1-aaaa", "cfg1"),
        "n2": fake_status("n2", "1-bbbb", "cfg1"),
        "n3": fake_status("n3", "1-aaaa", "cfg2"),
    }
    summary = status.summarize(statuses)
    assert not summary.ok and not summary.state_agree and not summary.config_agree
    text = status.render(statuses, {"n1": "DC1", "n2": "DC2", "n3": "DC3"}, summary)
    assert "DIGESTS DIFFER: state n1=1-aaaa, n2=1-bbbb, n3=1-aaaa; config n1=cfg1, n2=cfg1, n3=cfg2" in text
    assert "n1: virtual server vs2 unavailable (health down, admin enabled): refused" in text
    assert "n1: link l1 down: no route" in text


def test_summary_agreeing_and_unreachable() -> None:
    """Agreeing digests are one line; an unreachable node makes it not ok, with its reason."""
    peer = {
        "name": "n2",
        "connected": False,
        "synced": False,
        "config_matches": None,
        "config_digest": None,
        "last_contact_ago": 12.34,
    }
    statuses = {"n1": fake_status("n1", "1-aaaa", "cfg1", [peer]), "n2": {"error": "cannot reach n2: refused"}}
    summary = status.summarize(statuses)
    assert summary.state_agree and summary.config_agree and not summary.ok
    text = status.render(statuses, {"n1": "DC1", "n2": "DC2"}, summary)
    assert "digests agree across 1 node (state 1-aaaa, config cfg1)" in text
    assert "UNREACHABLE n2: cannot reach n2: refused" in text
    assert "n1: peer n2 not connected (last contact 12.3s ago)" in text
    lines = text.splitlines()
    assert lines[0].split() == " ".join(status.HEADER).split()
    assert lines[2].split() == ["n2", "DC2", "-", "UNREACHABLE"]


# -- status against a real group -------------------------------------------------------------


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    """Three running members whose config's log_dir is their own log folder."""
    workdir = tmp_path_factory.mktemp("group")
    with running_group(workdir, customize=lambda config: config.update(log_dir=".")) as g:
        g.wait_converged()
        yield g


@pytest.mark.process
def test_status_shows_every_node_and_agreeing_digests(group: Group) -> None:
    """Every member has a row with its data center, config and state digests and peers; the
    summary says the digests agree across the three, and the exit status is 0."""
    statuses = group.wait_converged()
    result = gtmcluster("status", "--config", str(group.config_path))
    assert result.returncode == 0, result.stdout + result.stderr
    table = result.stdout.split("\n\n")[0].splitlines()
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert set(rows) == set(NODES)
    for node in NODES:
        s = statuses[node]
        row = rows[node]
        assert row[1] == group.members[node].datacenter
        assert s["config_digest"] in row and s["state"]["digest"] in row
        assert result.stdout.count(f"{node} synced") == 2
    assert "digests agree across 3 nodes" in result.stdout
    assert "UNREACHABLE" not in result.stdout


@pytest.mark.process
def test_status_json_and_chosen_nodes(group: Group) -> None:
    """--json gives each asked node's /api/v1/status and the summary; --node limits the asking."""
    group.wait_converged()
    result = gtmcluster("status", "--config", str(group.config_path), "--json", "--node", "n1", "n3")
    assert result.returncode == 0, result.stdout + result.stderr
    answer = json.loads(result.stdout)
    assert set(answer["nodes"]) == {"n1", "n3"}
    assert answer["nodes"]["n3"]["node"] == "n3"
    assert answer["summary"]["ok"] is True
    assert answer["summary"]["unreachable"] == {}
    bad = gtmcluster("status", "--config", str(group.config_path), "--node", "n9")
    assert bad.returncode == 1
    assert "'n9' is not a member" in bad.stderr


@pytest.mark.process
def test_status_does_not_fail_while_changes_are_being_written(group: Group) -> None:
    """Admin changes written on n1 and n2 all the while (each a record the others take in
    a moment later): a round of answers catches some on their way, yet `status` exits 0,
    the differences being in flight; once the writes stop the digests agree again."""
    stop = threading.Event()
    written = {"n1": 0, "n2": 0}

    def write(node: str, vs: str) -> None:
        token = token_of(group.config_path, node)
        while not stop.is_set():
            for action in ("disable", "enable"):
                path = f"/api/v1/virtual-servers/{vs}/{action}"
                if call(group.members[node].api, path, "POST", token, body=b'{"reason": "test"}')[0] == 200:
                    written[node] += 1

    writers = [threading.Thread(target=write, args=a) for a in (("n1", "vs1"), ("n2", "vs2"))]
    for t in writers:
        t.start()
    try:
        results = [gtmcluster("status", "--config", str(group.config_path), "--json") for _ in range(3)]
    finally:
        stop.set()
        for t in writers:
            t.join(TIMEOUT)
    assert written["n1"] > 10 and written["n2"] > 10, written
    for result in results:
        assert result.returncode == 0, result.stdout + result.stderr
        assert json.loads(result.stdout)["summary"]["ok"] is True
    group.wait_converged()
    quiet = gtmcluster("status", "--config", str(group.config_path))
    assert quiet.returncode == 0 and "digests agree across 3 nodes" in quiet.stdout, quiet.stdout


@pytest.mark.process
def test_logs_of_the_group_are_prefixed_and_merged(group: Group) -> None:
    """`logs` shows lines of each node (asked through its API), each prefixed with its
    name, in time order, and no colour when piped; each line is one of that node's own."""
    result = gtmcluster("logs", "--config", str(group.config_path), "--lines", "30")
    assert result.returncode == 0, result.stderr
    assert "\x1b[" not in result.stdout
    seen: dict[str, list[str]] = {}
    times = []
    for line in result.stdout.splitlines():
        m = PREFIXED.match(line)
        assert m is not None, line
        if m["text"].startswith("    "):
            continue  # a traceback's line
        stamp, _level, rest = m["text"].split(maxsplit=2)
        message = rest.split("] ", 1)[1]
        seen.setdefault(m["node"], []).append(message)
        times.append(stamp)
    assert set(seen) == set(NODES)
    assert times == sorted(times)
    for node in NODES:
        own = (group.workdir / f"{node}.jsonl").read_text()
        for message in seen[node]:
            assert json.dumps(message)[1:-1] in own  # shown under a node's name: from its own log


@pytest.mark.process
def test_status_names_an_unreachable_node_at_once(group: Group) -> None:
    """With a member killed, status still shows the others, names the dead one unreachable
    with the reason, exits 1, and does not hang."""
    group.kill("n3")
    try:
        started = time.monotonic()
        result = gtmcluster("status", "--config", str(group.config_path))
        took = time.monotonic() - started
        assert result.returncode == 1, result.stdout + result.stderr
        assert took < UNREACHABLE_BOUND
        assert re.search(r"^UNREACHABLE n3: cannot reach n3's API .*Connection refused", result.stdout, re.M), (
            result.stdout
        )
        assert re.search(r"^n3 +DC3 +- +UNREACHABLE$", result.stdout, re.M)
        assert "digests agree across 2 nodes" in result.stdout
        answer = json.loads(gtmcluster("status", "--config", str(group.config_path), "--json").stdout)
        assert set(answer["nodes"]["n3"]) == {"error"}
        assert answer["summary"]["ok"] is False
        assert list(answer["summary"]["unreachable"]) == ["n3"]
    finally:
        group.restart("n3")
