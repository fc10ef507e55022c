"""`gtmcluster disable|enable|drain` as real commands against a real two-member group
(tests/support/trio.py): a data center disabled through one member moves the answers of
both (asked with the real `dig`), `status` and `explain` say who did it, why and when, and
`enable` moves the answers back. Waits are polls with deadlines."""

from __future__ import annotations

import getpass
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import dig
from tests.support.trio import Group, running_group

GTMCLUSTER = Path(sys.executable).parent / "gtmcluster"
TIMEOUT = 30
#: an asker in region r1: topology answers it from DC1 (vs1), else from DC3 (vs3)
ASKER = "127.0.1.5"
VS1, VS3 = "10.0.1.1", "10.0.3.1"
#: the sync group carries a change within a second or so; far more than that
REPLICATED_WITHIN = 10.0

pytestmark = [pytest.mark.process, pytest.mark.skipif(not dig.available(), reason="needs dig")]


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    with running_group(tmp_path_factory.mktemp("admin"), size=2) as g:
        g.wait_converged()
        yield g


def gtmcluster(group: Group, *args: str) -> subprocess.CompletedProcess[str]:
    # (run where the members run: the CLI reads each member's own API token in its state_dir)
    return subprocess.run(
        [str(GTMCLUSTER), *args, "--config", str(group.config_path)],
        cwd=group.workdir,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def answer(group: Group, node: str) -> list[str]:
    server, port = group.members[node].dns
    return dig.dig(server, port, "gslb.example.test", "A", source=ASKER).answer_data()


def test_disable_a_datacenter_moves_the_answers_and_enable_moves_them_back(group: Group) -> None:
    assert answer(group, "n1") == [VS1] and answer(group, "n2") == [VS1]

    done = gtmcluster(group, "disable", "datacenter", "DC1", "--reason", "maintenance", "--node", "n1")
    assert done.returncode == 0, done.stdout + done.stderr
    user = getpass.getuser()
    first = done.stdout.splitlines()[0]
    assert re.fullmatch(
        rf"data center DC1 disabled by {user} at \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\dZ on n1: maintenance", first
    ), done.stdout
    assert "virtual server vs1: out" in done.stdout
    # the member that took it answers otherwise at once; the other once the record arrives
    assert answer(group, "n1") == [VS3]
    group.wait_for(lambda: answer(group, "n2") == [VS3], REPLICATED_WITHIN, "n2 to answer from DC3")

    group.wait_converged()
    shown = gtmcluster(group, "status")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "admin states:" in shown.stdout
    assert re.search(rf"^  data center DC1 disabled by {user} at \S+ \S+ on n1: maintenance$", shown.stdout, re.M)
    assert "virtual server vs1 unavailable (health up, admin disabled): data center DC1 disabled by" in shown.stdout

    explained = gtmcluster(group, "explain", "gslb.example.test", "--ldns", ASKER, "--node", "n2")
    assert explained.returncode == 0, explained.stderr
    assert f"virtual server vs1 out by admin state disabled: data center DC1 disabled by {user} (maintenance)" in (
        explained.stdout
    )
    assert f"=> {VS3}" in explained.stdout

    back = gtmcluster(group, "enable", "datacenter", "DC1", "--by", "alice")  # through the first that answers
    assert back.returncode == 0, back.stdout + back.stderr
    assert back.stdout.startswith("data center DC1 enabled by alice at ")
    group.wait_for(
        lambda: answer(group, "n1") == [VS1] and answer(group, "n2") == [VS1],
        REPLICATED_WITHIN,
        "both members to answer from DC1 again",
    )
    assert "admin states:" not in gtmcluster(group, "status").stdout  # nothing is out any more


def test_pool_member_and_wideip_from_the_cli(group: Group) -> None:
    """A pool member out (p/vs1) moves the answer within the pool; a disabled wide IP
    answers from the zone (its failure_response, return_to_dns: the zone has no address
    there, so no address)."""
    done = gtmcluster(group, "drain", "pool-member", "p/vs1", "--node", "n2", "--reason", "retiring")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("pool member p/vs1 draining by ")
    assert answer(group, "n2") == [VS3]
    off = gtmcluster(group, "disable", "wideip", "gslb.example.test", "--node", "n2")
    assert off.returncode == 0, off.stderr
    assert answer(group, "n2") == []
    for args in (("enable", "wideip", "gslb.example.test"), ("enable", "pool-member", "p/vs1")):
        assert gtmcluster(group, *args, "--node", "n2").returncode == 0
    assert answer(group, "n2") == [VS1]


def test_unknown_names_and_targets_are_one_line_errors(group: Group) -> None:
    wrong = gtmcluster(group, "disable", "datacenter", "DC9", "--node", "n1")
    assert wrong.returncode == 1 and wrong.stdout == ""
    assert wrong.stderr == "gtmcluster disable: n1: no data center named 'DC9'\n"
    bad = gtmcluster(group, "disable", "region", "r1")
    assert bad.returncode == 2 and "invalid choice: 'region'" in bad.stderr
