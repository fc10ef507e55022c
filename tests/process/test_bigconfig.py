"""DNS keeps answering, promptly, while two members with 1,000 monitored servers start,
check, reconcile, and one is killed and restarted (issue 12, part 6: the large-configuration
benchmark scaled down to fit CI).

The config is `tests.support.bigconfig`'s, scaled: 1,000 virtual servers with a tcp monitor
(interval 5 s: 200 checks a second on each member), 100 pools, 400 wide IPs, 4,000 topology
records; every check is accepted by a real listening socket (one per data center), so every
server is up. Two real members (`twistd -n gtm`, sync over mutual TLS, short timers) start
together; a client asks n1 a wide IP every 20 ms (UDP, 2 s timeout) from the moment it
answers, until both have reconciled with each other. Then n2 is killed (SIGKILL) and started
again; a second client asks n2 from the moment it answers again, and both ask until the two
have reconciled again. No query may be lost and no answer may take over 100 ms.

Each wait is capped (`PHASE`), so a member that does not keep up makes the test fail with
the figures, in about a minute, rather than hang.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import bigconfig, poll
from tests.support.nodeproc import wait_answering
from tests.support.pacedclient import Figures, PacedClient
from tests.support.trio import SYNC_SETTINGS, Group

pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.alone]

SHAPE_ARGS: dict[str, Any] = {"servers": 1000, "pools": 100, "wideips": 400, "topology": 4000, "regions": 40}
#: the longest wait for one step (start, reconcile); past it the figures so far are judged
PHASE = 15.0
#: how long the clients keep asking once the members have reconciled
SETTLE = 2.0
SLOWEST = 0.1


@pytest.fixture
def backends() -> Iterator[int]:
    """Both data centers' listeners (every check accepted); the first one's port."""
    base, opened = bigconfig.open_backends(2, 21000 + (os.getpid() % 400) * 10)
    try:
        yield base
    finally:
        for backend in opened:
            backend.close()


def big_group(workdir: Path, port: int) -> Group:
    shape = bigconfig.Shape(members=2, backend_port=port, **SHAPE_ARGS)

    def customize(config: dict[str, Any]) -> None:
        addresses = [m["peer"].rsplit(":", 1)[0] for m in config["sync_group"]["members"]]
        config.clear()
        config.update(bigconfig.config(shape, addresses, sync=SYNC_SETTINGS))
        (workdir / f"{bigconfig.ZONE}.zone").write_text(bigconfig.ZONE_TEXT)

    return Group(workdir, 2, customize)


def reconciled(group: Group, node: str, other: str, since: int) -> bool:
    return f"reconciled with {other}:" in group.log_text(node, since)


def wait_reconciled(group: Group, since: dict[str, int]) -> bool:
    """Whether both members logged their reconciliation with the other (after *since*) in time."""
    try:
        poll.until(
            lambda: reconciled(group, "n1", "n2", since["n1"]) and reconciled(group, "n2", "n1", since["n2"]),
            PHASE,
            "reconciliation of n1 and n2",
            step=0.2,
        )
    except AssertionError:
        return False
    return True


def describe(label: str, f: Figures) -> str:
    return (
        f"{label}: {f.lost} of {f.sent} queries lost, slowest answer {f.slowest * 1000:.0f} ms, "
        f"{f.over_100ms} answers over 100 ms, p99 {f.p99 * 1000:.1f} ms"
    )


def test_no_query_lost_or_slow_through_start_and_restart(tmp_path: Path, backends: int) -> None:
    group = big_group(tmp_path, backends)
    names = bigconfig.Shape(members=2, **SHAPE_ARGS).wideip_names()
    clients: list[tuple[str, PacedClient]] = []
    problems: list[str] = []
    try:
        since = {n: group.log_size(n) for n in group.members}
        group.spawn("n1")
        group.spawn("n2")
        for node in ("n1", "n2"):
            answering(group, node)
        on_n1 = PacedClient(group.members["n1"].dns, names, source="127.77.0.1").start()
        clients.append(("n1, from the start to the end", on_n1))
        if not wait_reconciled(group, since):
            problems.append(f"n1 and n2 did not reconcile within {PHASE:g} s of answering")
        killed = time.monotonic()
        group.kill("n2", signal.SIGKILL)
        since = {n: group.log_size(n) for n in group.members}
        group.spawn("n2")
        answering(group, "n2")
        on_n2 = PacedClient(group.members["n2"].dns, names, source="127.77.0.2").start()
        clients.append(("n2, from its restart to the end", on_n2))
        if not wait_reconciled(group, since):
            problems.append(f"n1 and the restarted n2 did not reconcile within {PHASE:g} s of its answering")
        # not a wait for something: the clients keep asking a while after the reconciliation
        time.sleep(SETTLE)
    finally:
        for _, client in clients:
            client.stop()
        group.stop_all()
    report = [describe("n1 while both started and reconciled", on_n1.figures(end=killed))]
    report.append(describe("n1 while n2 was killed, restarted and reconciled", on_n1.figures(start=killed)))
    for label, client in clients:
        figures = client.figures()
        report.append(describe(label, figures))
        if figures.lost:
            problems.append(f"{label}: {figures.lost} queries lost")
        if figures.slowest > SLOWEST:
            problems.append(f"{label}: the slowest answer took {figures.slowest * 1000:.0f} ms")
        bad = [q for q in client.queries if q.latency is not None and (q.rcode != 0 or not q.addresses)]
        if bad:
            problems.append(f"{label}: {len(bad)} answers without an address (first: {bad[0]})")
    assert not problems, "\n".join([*problems, "", *report])


def answering(group: Group, node: str) -> None:
    proc = group.members[node].proc
    assert proc is not None
    try:
        wait_answering(group.members[node].dns, proc, timeout=30)
    except AssertionError as e:
        raise AssertionError(f"{node}: {e}\n{group.output_text(node)}") from None
