"""Keys the same on every member, with real members (`twistd gtm`): two members signing
example.test with the same key directory agree (status, `gtmcluster status`); one reloaded
with new keys is shown loudly on the other (status problem, warning log, metric
``gtm_dnssec_keyset_mismatch``), and neither the status answer nor the metrics hold key
material."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import poll
from tests.support.trio import Group, running_group

GTMCLUSTER = Path(sys.executable).parent / "gtmcluster"
ZONE = "example.test."


def gtmcluster(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GTMCLUSTER, *args], capture_output=True, text=True, timeout=60, check=False)


def sign(config: dict[str, Any]) -> None:
    config["zones"][0]["dnssec"] = {"keys": "keys"}


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    assert gtmcluster("dnssec", "keygen", "example.test", "--dir", tmp_path / "keys").returncode == 0
    with running_group(tmp_path, size=2, customize=sign) as g:
        yield g


def peer_of(group: Group, node: str) -> dict[str, Any]:
    (peer,) = group.status(node)["peers"]
    return peer  # type: ignore[no-any-return]


def metrics(group: Group, node: str) -> str:
    host, port = group.members[node].api
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=2) as response:
        return response.read().decode()  # type: ignore[no-any-return]


def key_material(directory: Path) -> list[str]:
    out = []
    for path in directory.iterdir():
        body = "".join(line for line in path.read_text().splitlines() if not line.startswith("-----"))
        out += [body, body[20:60]]
    return out


def test_members_agree_then_one_reloaded_with_other_keys_is_shown_loudly(group: Group) -> None:
    poll.until(
        lambda: all(peer_of(group, n).get("dnssec_keys_match") is True for n in ("n1", "n2")),
        what="both members to compare their key sets",
    )
    ours = group.status("n1")["dnssec_keys"]
    assert list(ours) == [ZONE] and group.status("n2")["dnssec_keys"] == ours
    agreeing = gtmcluster("status", "--config", group.config_path)
    assert agreeing.returncode == 0, agreeing.stdout + agreeing.stderr
    assert "DNSSEC" not in agreeing.stdout
    assert 'gtm_dnssec_keyset_mismatch{peer="n2"} 0.0' in metrics(group, "n1")

    # n2's operator makes new keys and reloads n2 alone
    since = group.log_size("n1")
    assert gtmcluster("dnssec", "keygen", "example.test", "--dir", group.workdir / "keys", "--force").returncode == 0
    member = group.members["n2"]
    assert member.proc is not None
    member.proc.send_signal(signal.SIGHUP)
    poll.until(lambda: peer_of(group, "n1")["dnssec_keys_match"] is False, what="n1 to see n2's new keys")
    assert peer_of(group, "n1")["dnssec_keys_differ"] == [ZONE]
    assert group.status("n2")["dnssec_keys"][ZONE] != ours[ZONE]
    group.wait_log("n1", "peer n2 serves other DNSSEC keys for example.test.", since=since)
    assert 'gtm_dnssec_keyset_mismatch{peer="n2"} 1.0' in metrics(group, "n1")
    differing = gtmcluster("status", "--config", group.config_path)
    assert differing.returncode != 0
    assert "DNSSEC KEYS DIFFER: example.test. n1=" in differing.stdout
    assert "n1: peer n2 serves other DNSSEC keys for example.test." in differing.stdout

    shown = str(group.status("n1")) + str(group.status("n2")) + metrics(group, "n1") + differing.stdout
    assert "PRIVATE KEY" not in shown
    assert not [s for s in key_material(group.workdir / "keys") if s in shown]
