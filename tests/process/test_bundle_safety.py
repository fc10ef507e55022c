"""Config sync bundles on two real `twistd gtm` members, as issue 30 reproduced them:

- defect 5: a bundle carrying files its config never names (a CA, a key) is refused, and a
  bundle cannot point ``sync_group.tls`` anywhere (at the shelf, or at an honest new CA):
  the group stays one;
- defect 6: a bundle that sets ``dns_server.query_log`` is refused, and the file it names
  is not touched;
- defect 7: ``$INCLUDE``d zone files travel with their zone (what ``check`` accepts, a push
  is not refused for, and every member answers from the bundle, not its own disk); an
  include that leaves the zone's folder is refused and nothing of the file is echoed;
- defect 8: a quoted ``"zones":`` key is the zones section: its files travel and its names
  are checked.

The tests share one group and run in order; each states the generation it starts from.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gtmcluster.groupconfig import bundle
from gtmcluster.groupconfig.bundle import Bundle
from tests.process.test_config_sync import answers, cli, edited, generations, token, wait_everywhere
from tests.support import configs, poll
from tests.support.trio import Group, running_group

pytestmark = pytest.mark.process

MEMBERS = ("n1", "n2")
SECRET = "S3CRETW0RD-never-echoed"


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    with running_group(tmp_path_factory.mktemp("bundle-safety"), 2) as running:
        yield running


def post(group: Group, node: str, body: bytes) -> tuple[int, dict[str, Any]]:
    """POST /api/v1/config of *node* with *body*, as `config push` sends it."""
    host, port = group.members[node].api
    request = urllib.request.Request(f"http://{host}:{port}/api/v1/config", data=body, method="POST")
    request.add_header("Authorization", f"Bearer {token(group, node)}")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def folder_config(group: Group, name: str, raw: dict[str, Any], files: dict[str, str]) -> Path:
    """*raw* written as gtm.yaml in a folder of its own with *files* (the zone file's
    default: the group's), what an operator edits and pushes."""
    folder = group.workdir / "edits" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "example.test.zone").write_text(configs.ZONE)
    for file, text in files.items():
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        (folder / file).write_text(text)
    path = folder / "gtm.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def group_raw(group: Group) -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load(group.config_path.read_text())
    return raw


def test_a_bundle_with_files_its_config_does_not_name_is_refused(group: Group) -> None:
    """Defect 5, its first half: the key and CA never reach the shelf."""
    before = generations(group)
    honest = bundle.make(edited(group, "keys", lambda raw: None), 1, before["n1"][0], "n1", 1.0)
    files = {**honest.files, "evil/ca.pem": b"-----BEGIN CERTIFICATE-----\n", "evil/n1.key": b"a private key"}
    code, answer = post(group, "n1", bundle.encode(Bundle(honest.main, files, 1, before["n1"][0], "n1", 1.0)))
    assert code == 422, answer
    assert "evil/ca.pem: the bundle carries a file its config does not name" in answer["error"]
    assert "evil/n1.key: the bundle carries a file its config does not name" in answer["error"]
    assert generations(group) == before
    assert not list((group.workdir / "var" / "state").glob("*/bundles/*/files/evil"))


@pytest.mark.parametrize(
    "tls",
    [
        {"ca": "var/state/{node}/bundles/1-n1-000000000000/files/evil/ca.pem"},  # the shelf
        {"ca": "certs/new-ca.pem"},  # an honest new CA, pushed: the group would split
    ],
)
def test_a_push_cannot_move_a_members_certificates(group: Group, tls: dict[str, str]) -> None:
    """Defect 5, its second half, and rule 3: refused with the reason; the members still
    reach each other and run what they ran."""
    shutil.copy(group.certs / "ca.pem", group.certs / "new-ca.pem")
    before = generations(group)
    path = edited(group, "moves-tls", lambda raw: raw["sync_group"].update(tls=tls))
    done = cli(group, "n1", "config", "push", "--config", str(path), "--node", "n1")
    assert done.returncode == 1
    assert "sync_group.tls changed" in done.stderr and "own ground never comes from the group's config" in done.stderr
    assert "nothing changed on any member" in done.stderr, done.stderr
    assert generations(group) == before
    assert all(p["connected"] for p in group.status("n2")["peers"])


@pytest.mark.parametrize(
    ("name", "why"),
    [
        # outside log_dir: no config may name it (the query log's own rule)
        ("victim.txt", "is not a file inside log_dir"),
        # inside log_dir: a config may, but a pushed one never moves the member's query log
        ("var/log/victim.txt", "dns_server.query_log changed"),
    ],
)
def test_a_push_cannot_point_the_query_log_at_a_file(group: Group, name: str, why: str) -> None:
    """Defect 6: the file the bundle names is neither removed, renamed nor written."""
    victim = group.workdir / name
    victim.parent.mkdir(parents=True, exist_ok=True)
    victim.write_text("an operator's file\n")
    inode = victim.stat().st_ino
    before = generations(group)
    change = {"query_log": {"path": name, "keep": 0}}
    path = edited(group, "query-log", lambda raw: raw.setdefault("dns_server", {}).update(change))
    done = cli(group, "n1", "config", "push", "--config", str(path), "--node", "n1")
    assert done.returncode == 1
    assert why in done.stderr, done.stderr
    assert generations(group) == before
    assert victim.read_text() == "an operator's file\n" and victim.stat().st_ino == inode
    assert not victim.with_name(victim.name + ".1").exists()


def test_included_zone_files_travel_with_the_zone(group: Group, tmp_path: Path) -> None:
    """Defect 7 (a) and (b): `check` and the push agree; every member answers the included
    record from the bundle, not from its own disk."""
    raw = group_raw(group)
    zone = configs.ZONE + "$INCLUDE hosts/lab.inc\n"
    path = folder_config(group, "include", raw, {"hosts/lab.inc": "lab IN A 192.0.2.71\n"})
    (path.parent / "example.test.zone").write_text(zone)
    checked = subprocess.run(
        [sys.executable, "-m", "gtmcluster.cli.main", "check", "--config", str(path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=group.workdir,
        env={**os.environ},
    )
    assert checked.returncode == 0, checked.stderr
    done = cli(group, "n1", "config", "push", "--config", str(path), "--node", "n1")
    assert done.returncode == 0, done.stderr + done.stdout
    wait_everywhere(group, "lab.example.test", "192.0.2.71", MEMBERS)
    pulled = tmp_path / "pulled"
    done = cli(group, "n2", "config", "pull", "--config", str(group.config_path), "--node", "n2", "--dir", str(pulled))
    assert done.returncode == 0, done.stderr
    assert (pulled / "hosts" / "lab.inc").read_text() == "lab IN A 192.0.2.71\n"
    # the publisher's disk changes; the members still answer what the bundle holds
    (path.parent / "hosts" / "lab.inc").write_text("lab IN A 192.0.2.72\n")
    group.kill("n2")
    group.restart("n2")
    assert answers(group, "n2", "lab.example.test") == ["192.0.2.71"]


def test_an_include_outside_the_zone_folder_is_refused_and_never_echoed(group: Group) -> None:
    """Defect 7 (c): a hand-made bundle whose zone includes a file by an absolute path."""
    secret = group.workdir / "secret.env"
    secret.write_text(f"API_TOKEN=abc {SECRET}\nPASSWORD {SECRET}\n")
    before = generations(group)
    honest = bundle.make(edited(group, "abs-include", lambda raw: None), 1, before["n1"][0], "n1", 1.0)
    zone = configs.ZONE + f"$INCLUDE {secret}\n$INCLUDE ../../secret.env\n"
    files = {**honest.files, "example.test.zone": zone.encode()}
    code, answer = post(group, "n1", bundle.encode(Bundle(honest.main, files, 1, before["n1"][0], "n1", 1.0)))
    assert code == 422, answer
    assert "$INCLUDE names an absolute path" in answer["error"]
    assert "$INCLUDE names a path with '..'" in answer["error"]
    assert SECRET not in answer["error"] and "API_TOKEN" not in answer["error"]
    assert SECRET not in group.log_text("n1")
    assert generations(group) == before


def test_a_quoted_zones_key_carries_its_files_and_has_its_names_checked(group: Group) -> None:
    """Defect 8: the section is found by parsing the YAML, quoted or not."""
    raw = group_raw(group)
    raw["zones"][0]["file"] = "quoted.zone"
    path = folder_config(group, "quoted", raw, {"quoted.zone": configs.ZONE + "quoted IN A 192.0.2.81\n"})
    path.write_text(path.read_text().replace("\nzones:", '\n"zones":'))
    assert '\n"zones":' in path.read_text()
    done = cli(group, "n1", "config", "push", "--config", str(path), "--node", "n1")
    assert done.returncode == 0, done.stderr + done.stdout
    wait_everywhere(group, "quoted.example.test", "192.0.2.81", MEMBERS)
    # an absolute name in the quoted section: refused by the CLI, and by the member
    before = generations(group)
    absolute = path.read_text().replace("file: quoted.zone", f"file: {path.parent / 'quoted.zone'}")
    path.write_text(absolute)
    done = cli(group, "n1", "config", "push", "--config", str(path), "--node", "n1")
    assert done.returncode == 1 and "an absolute path cannot be shared" in done.stderr, done.stderr
    files = {"gtm.yaml": absolute.encode()}
    code, answer = post(group, "n1", bundle.encode(Bundle("gtm.yaml", files, 1, before["n1"][0], "n1", 1.0)))
    assert code == 422 and "zones[0].file: " in answer["error"] and "an absolute path" in answer["error"], answer
    assert generations(group) == before
    poll.until(lambda: answers(group, "n2", "quoted.example.test") == ["192.0.2.81"], 5, "n2 unchanged")
