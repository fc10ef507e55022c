"""The audit log on a real two-member group (tests/support/trio.py, real `twistd gtm` nodes,
the real `gtmcluster` command): an operator, ``alice`` (a token of the users file, made by
`gtmcluster users add`), disables a data center through n1; n1's audit records it before
and after it was made, and n2's records it when the replicated record arrives, with the
same identity, role, proof, source, id and change, made on n1. `gtmcluster audit` merges
the two members' entries (and --who picks alice's); a wrong token is recorded as refused.
Waits are polls with deadlines."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import configs
from tests.support.trio import Group, running_group

GTMCLUSTER = Path(sys.executable).parent / "gtmcluster"
TIMEOUT = 30
REPLICATED_WITHIN = 10.0

pytestmark = [pytest.mark.process]


def gtmcluster(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(GTMCLUSTER), *args], cwd=workdir, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    workdir = tmp_path_factory.mktemp("audit")
    made = gtmcluster(workdir, "users", "add", "alice", "--role", "operator", "--file", "users.yaml")
    assert made.returncode == 0, made.stderr
    configs.write_secret(workdir / "alice.token", made.stdout)

    def customize(raw: dict[str, Any]) -> None:
        raw["api"] = {"users_file": "users.yaml"}

    with running_group(workdir, size=2, customize=customize) as g:
        g.wait_converged()
        yield g


def entries(group: Group, node: str) -> list[dict[str, Any]]:
    path = group.workdir / "var" / "log" / "audit" / f"{node}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_replicated_admin_change_is_in_both_members_audit_and_the_cli_merges_them(group: Group) -> None:
    as_alice = ("--config", str(group.config_path), "--token-file", str(group.workdir / "alice.token"))
    done = gtmcluster(
        group.workdir,
        "disable",
        "datacenter",
        "DC1",
        "--reason",
        "audit test",
        "--node",
        "n1",
        "--by",
        "alice",
        *as_alice,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    requested, applied = [e for e in entries(group, "n1") if e["route"].endswith("/datacenter/DC1/disable")]
    assert (requested["result"], applied["result"], applied["status"]) == ("requested", "applied", 200)
    made = {k: requested[k] for k in ("origin", "id", "who", "role", "proof", "source", "route", "change")}
    assert made == {
        "origin": "n1",
        "id": made["id"],
        "who": "alice",
        "role": "operator",
        "proof": "token",
        "source": made["source"],
        "route": "POST /api/v1/admin/datacenter/DC1/disable",
        "change": "disable data center DC1 (audit test)",
    }

    def taken() -> list[dict[str, Any]]:
        return [e for e in entries(group, "n2") if e.get("id") == made["id"]]

    group.wait_for(lambda: bool(taken()), REPLICATED_WITHIN, "n2 to record the change made on n1")
    (on_n2,) = taken()
    assert {k: on_n2[k] for k in made} == made  # the same write, as n1 took it
    assert (on_n2["node"], on_n2["result"]) == ("n2", "applied")
    assert on_n2["detail"].startswith("taken from n1; made there at ")

    # a wrong token: refused, and recorded as such
    wrong = group.workdir / "wrong.token"
    configs.write_secret(wrong, "alice." + "x" * 43 + "\n")
    refused = gtmcluster(
        group.workdir, "enable", "datacenter", "DC1", "--node", "n1",
        "--config", str(group.config_path), "--token-file", str(wrong),
    )  # fmt: skip
    assert refused.returncode == 1
    assert any(e["result"] == "refused" and e["status"] == 403 for e in entries(group, "n1"))

    shown = gtmcluster(group.workdir, "audit", "--who", "alice", *as_alice)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    change = r"alice \(operator, token\) from \S+: disable data center DC1 \(audit test\)"
    assert [
        n for n, line in enumerate(lines) if re.fullmatch(rf"n1 \| \S+Z {change}: requested  \[{made['id']}\]", line)
    ]
    assert [n for n, line in enumerate(lines) if re.fullmatch(rf"n1 \| \S+Z {change}: applied  \[{made['id']}\]", line)]
    assert [
        n
        for n, line in enumerate(lines)
        if re.fullmatch(rf"n2 \| \S+Z {change} \(made on n1\): applied  \[{made['id']}\]", line)
    ]
    as_json = gtmcluster(group.workdir, "audit", "--json", *as_alice)
    assert as_json.returncode == 0, as_json.stderr
    times = [json.loads(line)["time"] for line in as_json.stdout.splitlines()]
    assert times == sorted(times) and {json.loads(line)["node"] for line in as_json.stdout.splitlines()} == {"n1", "n2"}
    assert gtmcluster(group.workdir, "enable", "datacenter", "DC1", *as_alice).returncode == 0


def test_on_a_full_disk_a_write_is_refused_and_not_made(tmp_path: Path) -> None:
    """A real full file system (a 16 KiB tmpfs under the audit folder, filled): the change is
    refused (exit 1, the node's 503 saying why) and not made; with room again it is made."""
    folder = tmp_path / "var" / "log" / "audit"
    folder.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(folder)], check=False)
    if mounted.returncode != 0:
        pytest.skip("needs to mount a tmpfs (root, or CAP_SYS_ADMIN)")
    try:
        with running_group(tmp_path, size=1) as g:
            with (folder / "filler").open("wb") as filler, contextlib.suppress(OSError):
                filler.write(b"\0" * 16 * 1024)  # (till it is full)
                filler.flush()
            args = ("disable", "datacenter", "DC1", "--config", str(g.config_path))
            refused = gtmcluster(g.workdir, *args)
            assert refused.returncode == 1
            assert refused.stderr == (
                f"gtmcluster disable: n1: the audit log cannot be written: {folder}/n1.jsonl: No space left on "
                "device; nothing was changed\n"
            )
            assert "admin states:" not in gtmcluster(g.workdir, "status", "--config", str(g.config_path)).stdout
            (folder / "filler").unlink()
            made = gtmcluster(g.workdir, *args)
            assert made.returncode == 0, made.stderr
            assert [e["result"] for e in entries(g, "n1")] == ["requested", "applied"]
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=False)
