"""Config sync between three real `twistd gtm` members: a push on one reaches all, as an
operator does it (`gtmcluster config push|pull|history|diff|rollback`).

- a push through n1 adds a wide IP, and every member answers it (the time is measured);
- a push refused (a problem in the file, a change n1 cannot take running, a push based on
  an old generation) changes nothing on any member;
- a member down during two pushes, restarted with its old file, runs the newest;
- two pushes at once through two members: one wins everywhere, the other is told;
- a rollback publishes an old generation's files again, as a new generation;
- dnsperf querying a member through a push loses nothing.

The tests share one group and run in order: each states the generation it starts from.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import dnsclient, poll
from tests.support.trio import Group, running_group

pytestmark = pytest.mark.process

#: how long the group may take to run a pushed bundle (a deadline for the test, not the
#: figure: pushes take well under a second here, printed by each test)
SETTLE = 15.0


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    with running_group(tmp_path_factory.mktemp("config-sync"), 3) as running:
        yield running


def token(group: Group, node: str) -> str:
    return (group.workdir / "var" / "state" / node / "api-token").read_text().strip()


def cli(group: Group, node: str, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """`gtmcluster ARGS` as an operator runs it, with *node*'s token in the environment."""
    env = {**os.environ, "GTM_API_TOKEN": token(group, node)}
    return subprocess.run(
        [sys.executable, "-m", "gtmcluster.cli.main", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        env=env,
        cwd=group.workdir,
    )


def edited(group: Group, name: str, change: Any) -> Path:
    """A copy of the group's config, changed by *change*, in its own folder: what an
    operator edits and pushes (``base_dir: ../..`` finds the zone file beside the original)."""
    raw = copy.deepcopy(group.config)
    change(raw)
    folder = group.workdir / "edits" / name
    folder.mkdir(parents=True, exist_ok=True)
    raw["base_dir"] = "../.."
    path = folder / "gtm.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def with_wideip(name: str, address: str) -> Any:
    def change(raw: dict[str, Any]) -> None:
        vs = f"vs-{name.split('.', maxsplit=1)[0]}"
        raw["virtual_servers"][vs] = {"address": address, "datacenter": "DC1"}
        raw["pools"][f"pool-{vs}"] = {"members": [vs], "load_balancing": {"preferred": "round_robin"}}
        raw["wideips"][name] = {"type": "A", "pools": [f"pool-{vs}"]}

    return change


def shared(group: Group, node: str) -> dict[str, Any]:
    """GET /api/v1/config of *node*."""
    host, port = group.members[node].api
    request = urllib.request.Request(f"http://{host}:{port}/api/v1/config")
    request.add_header("Authorization", f"Bearer {token(group, node)}")
    with urllib.request.urlopen(request, timeout=5) as response:
        body: dict[str, Any] = json.loads(response.read())
    return body


def generations(group: Group) -> dict[str, tuple[int, int]]:
    """(held, running) generation of each running member."""
    out = {}
    for node, m in group.members.items():
        if m.running:
            state = shared(group, node)
            out[node] = ((state["held"] or {}).get("generation", 0), state["running"]["generation"])
    return out


def answered(group: Group, node: str) -> float:
    """DNS queries *node* has answered, from its Prometheus counters."""
    host, port = group.members[node].api
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("gtm_dns_queries_total{"))


def answers(group: Group, node: str, name: str) -> list[str]:
    reply = dnsclient.parse(dnsclient.udp(dnsclient.query(name, "A"), group.members[node].dns, timeout=2.0))
    return sorted(dnsclient.addresses(reply))


def wait_everywhere(group: Group, name: str, address: str, nodes: tuple[str, ...] = ("n1", "n2", "n3")) -> float:
    """Seconds until every one of *nodes* answers *name* with *address*."""
    started = time.monotonic()
    poll.until(
        lambda: all(answers(group, n, name) == [address] for n in nodes),
        SETTLE,
        f"{name} answered by {nodes}",
        step=0.02,
        details=lambda: generations(group),
    )
    return time.monotonic() - started


def test_a_push_through_one_member_is_answered_by_every_member(group: Group) -> None:
    before = generations(group)
    path = edited(group, "first", with_wideip("new1.example.test", "10.0.11.1"))
    started = time.monotonic()
    done = cli(group, "n1", "config", "push", "--config", str(path), "--node", "n1")
    assert done.returncode == 0, done.stderr + done.stdout
    waited = wait_everywhere(group, "new1.example.test", "10.0.11.1")
    elapsed = time.monotonic() - started
    print(f"\npush to every member answering: {elapsed:.2f} s (after the CLI returned: {waited:.2f} s)")
    print(done.stdout)
    generation = before["n1"][0] + 1
    assert f"published generation {generation}" in done.stdout
    assert all(f"{n}: runs it" in done.stdout for n in ("n1", "n2", "n3")), done.stdout
    assert generations(group) == dict.fromkeys(("n1", "n2", "n3"), (generation, generation))
    # status on every member: the same config digest, no difference left, and what each
    # peer runs; /metrics the same
    statuses = {n: group.status(n) for n in group.members}
    assert len({s["config_digest"] for s in statuses.values()}) == 1
    for s in statuses.values():
        assert s["bundle"]["generation"] == generation
        assert all(p["config_matches"] and p["bundle"]["generation"] == generation for p in s["peers"]), s["peers"]
    host, port = group.members["n1"].api
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as response:
        metrics = response.read().decode()
    for n in group.members:
        assert f'gtm_config_bundle_generation{{member="{n}"}} {generation}.0' in metrics


def test_pull_writes_the_group_config_out(group: Group, tmp_path: Path) -> None:
    done = cli(
        group, "n2", "config", "pull", "--config", str(group.config_path), "--node", "n2", "--dir", str(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    pulled = yaml.safe_load((tmp_path / "gtm.yaml").read_text())
    assert "new1.example.test" in pulled["wideips"]
    assert (tmp_path / "example.test.zone").read_bytes() == (group.workdir / "example.test.zone").read_bytes()


def test_a_bad_push_changes_nothing_anywhere(group: Group) -> None:
    before = generations(group)

    def broken(raw: dict[str, Any]) -> None:
        raw["wideips"]["broken.example.test"] = {"type": "A", "pools": ["no-such-pool"]}

    path = edited(group, "broken", broken)
    done = cli(group, "n1", "config", "push", "--config", str(path), "--node", "n1")
    assert done.returncode == 1
    assert "gtm.yaml: wideips.\"broken.example.test\".pools[0]: no pool named 'no-such-pool'" in done.stderr, (
        done.stderr
    )

    def moves_n1(raw: dict[str, Any]) -> None:  # valid, but n1 cannot take it running
        raw["sync_group"]["members"][0]["dns"] = ["127.0.0.1:15353"]

    path = edited(group, "moves-n1", moves_n1)
    done = cli(group, "n1", "config", "push", "--config", str(path), "--node", "n1")
    assert done.returncode == 1
    assert "nothing changed on any member" in done.stderr and "n1's dns address changed" in done.stderr, done.stderr
    assert generations(group) == before
    assert answers(group, "n3", "new1.example.test") == ["10.0.11.1"]


def test_a_member_that_cannot_run_a_push_refuses_it_and_says_why(group: Group) -> None:
    before = generations(group)["n1"][0]

    def moves_n3(raw: dict[str, Any]) -> None:  # n1 and n2 take it; n3 would need a restart
        raw["sync_group"]["members"][2]["dns"] = ["127.0.0.1:15353"]

    done = cli(group, "n1", "config", "push", "--config", str(edited(group, "moves-n3", moves_n3)), "--node", "n1")
    assert done.returncode == 1
    assert "n3: REFUSED, it runs its previous config: n3's dns address changed" in done.stdout, done.stdout
    assert generations(group) == {
        "n1": (before + 1, before + 1),
        "n2": (before + 1, before + 1),
        "n3": (before + 1, before),
    }
    status = group.status("n3")
    assert status["bundle"]["refused"]["generation"] == before + 1
    n3 = next(p for p in group.status("n1")["peers"] if p["name"] == "n3")
    assert n3["bundle"]["refused"]["generation"] == before + 1
    assert "restart the node" in n3["bundle"]["refused"]["reasons"][0]
    # the next push leaves n3's address alone: every member runs it
    done = cli(group, "n1", "config", "push", "--config", str(edited(group, "back", lambda raw: None)), "--node", "n1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert generations(group)["n3"] == (before + 2, before + 2)
    assert group.status("n3")["bundle"]["refused"] is None


def test_a_push_based_on_an_old_generation_is_refused_unless_forced(group: Group) -> None:
    current = generations(group)["n1"][0]
    path = edited(group, "stale", with_wideip("stale.example.test", "10.0.11.9"))
    done = cli(group, "n2", "config", "push", "--config", str(path), "--node", "n2", "--based-on", str(current - 1))
    assert done.returncode == 1
    assert f"the group is at generation {current}, published by n1" in done.stderr, done.stderr
    assert generations(group)["n2"][0] == current
    done = cli(group, "n2", "config", "push", "--config", str(path), "--node", "n2", "--based-on", "0", "--force")
    assert done.returncode == 0, done.stderr
    wait_everywhere(group, "stale.example.test", "10.0.11.9")


def test_a_member_down_during_two_pushes_catches_up_when_restarted(group: Group) -> None:
    group.kill("n3", signal.SIGTERM)
    first = edited(group, "while-away-1", with_wideip("away1.example.test", "10.0.12.1"))
    second = edited(group, "while-away-2", with_wideip("away2.example.test", "10.0.12.2"))
    for path in (first, second):
        done = cli(group, "n1", "config", "push", "--config", str(path), "--node", "n1")
        assert done.returncode == 0, done.stderr
        assert "n3: not connected now" in done.stdout
    newest = generations(group)["n1"][0]
    since = group.log_size("n3")
    group.restart("n3")  # with its own, old file: gtm.yaml as the group started
    wait_everywhere(group, "away2.example.test", "10.0.12.2", ("n3",))
    assert generations(group)["n3"] == (newest, newest)
    group.wait_log("n3", "ready: ", since=since)
    log = group.log_text("n3", since)
    assert "running the group's config generation" in log  # its newest, not its old file
    # the newest was fetched and run before n3 said it was ready for measured methods
    assert "ready: reconciled" in log
    assert log.index(f"took config generation {newest}") < log.index("reloaded ") < log.index("ready: ")
    assert answers(group, "n3", "away1.example.test") == []  # the newest has no away1


def test_two_pushes_at_once_one_wins_everywhere(group: Group) -> None:
    base = generations(group)["n1"][0]
    paths = {
        "n1": edited(group, "race-n1", with_wideip("race1.example.test", "10.0.13.1")),
        "n2": edited(group, "race-n2", with_wideip("race2.example.test", "10.0.13.2")),
    }
    with ThreadPoolExecutor(2) as pool:
        futures = {
            node: pool.submit(
                cli, group, node, "config", "push", "--config", str(path), "--node", node, "--based-on", str(base)
            )
            for node, path in paths.items()
        }
        results = {node: f.result() for node, f in futures.items()}
    codes = sorted(r.returncode for r in results.values())
    assert codes == [0, 1], {n: (r.returncode, r.stdout, r.stderr) for n, r in results.items()}
    loser = next(n for n, r in results.items() if r.returncode == 1)
    assert "won over this one" in results[loser].stderr or "the group is at generation" in results[loser].stderr
    winner = "race1.example.test" if loser == "n2" else "race2.example.test"
    address = "10.0.13.1" if loser == "n2" else "10.0.13.2"
    wait_everywhere(group, winner, address)
    held = {n: shared(group, n)["held"] for n in group.members}
    assert len({(h["generation"], h["digest"]) for h in held.values()}) == 1


def test_history_diff_and_rollback(group: Group) -> None:
    done = cli(group, "n1", "config", "history", "--config", str(group.config_path), "--node", "n1")
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines()[1:]]
    generations_held = [int(line[0]) for line in lines]
    assert generations_held == sorted(generations_held, reverse=True) and len(generations_held) >= 4
    newest = generations_held[0]
    first = min(generations_held)  # new1 only
    done = cli(
        group, "n1", "config", "diff", str(first), str(newest), "--config", str(group.config_path), "--node", "n1"
    )
    assert done.returncode == 0, done.stderr
    assert f"--- generation {first}/gtm.yaml" in done.stdout
    assert re.search(r"^\+ +(race1|race2)\.example\.test:", done.stdout, re.M), done.stdout
    done = cli(group, "n1", "config", "rollback", str(first), "--config", str(group.config_path), "--node", "n1")
    assert done.returncode == 0, done.stderr
    assert f"published generation {newest + 1}" in done.stdout
    poll.until(
        lambda: all(answers(group, n, "away2.example.test") == [] for n in group.members),
        SETTLE,
        "the rollback everywhere",
    )
    assert all(answers(group, n, "new1.example.test") == ["10.0.11.1"] for n in group.members)
    assert generations(group) == dict.fromkeys(("n1", "n2", "n3"), (newest + 1, newest + 1))


@pytest.mark.usefixtures("dnsperf_tool")
def test_no_query_lost_through_a_push(group: Group, tmp_path: Path) -> None:
    queries = tmp_path / "queries"
    queries.write_text("new1.example.test A\nwww.example.test A\nexample.test SOA\n")
    host, port = group.members["n2"].dns
    perf = subprocess.Popen(
        ["dnsperf", "-s", host, "-p", str(port), "-d", str(queries), "-l", "6", "-Q", "1000", "-c", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        poll.until(lambda: perf.poll() is not None or answered(group, "n2") >= 500, what="dnsperf at its pace")
        path = edited(group, "under-load", with_wideip("loaded.example.test", "10.0.14.1"))
        done = cli(group, "n1", "config", "push", "--config", str(path), "--node", "n1")
        assert done.returncode == 0, done.stderr
        output, _ = perf.communicate(timeout=30)
    finally:
        if perf.poll() is None:
            perf.kill()
            perf.wait()
    lost = re.search(r"Queries lost:\s+(\d+)", output)
    assert lost is not None and int(lost.group(1)) == 0, output
    assert answers(group, "n2", "loaded.example.test") == ["10.0.14.1"]
    shutil.rmtree(group.workdir / "edits", ignore_errors=True)


def test_a_sighup_after_the_file_changed_publishes_it(group: Group) -> None:
    """The members share gtm.yaml here: changed, and n2 sent SIGHUP, it is published by n2.
    n1's SIGHUP to the same file then publishes nothing (the group holds it already)."""
    before = generations(group)["n1"][0]
    raw = copy.deepcopy(group.config)
    with_wideip("hup.example.test", "10.0.15.1")(raw)
    group.config_path.write_text(yaml.safe_dump(raw, sort_keys=False))
    proc = group.members["n2"].proc
    assert proc is not None
    proc.send_signal(signal.SIGHUP)
    wait_everywhere(group, "hup.example.test", "10.0.15.1")
    held = shared(group, "n1")["held"]
    assert (held["generation"], held["publisher"]) == (before + 1, "n2")
    since = group.log_size("n1")
    n1 = group.members["n1"].proc
    assert n1 is not None
    n1.send_signal(signal.SIGHUP)
    group.wait_log("n1", "has nothing new for the group", since=since)
    group.wait_log("n1", "reloaded ", since=since)
    assert generations(group) == dict.fromkeys(("n1", "n2", "n3"), (before + 1, before + 1))
