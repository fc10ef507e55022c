"""The shared config on a node's real routes and site (bytes in, bytes out, no socket):
``POST /api/v1/config`` publishes a bundle (checked as a reload checks a config, refused
whole with every problem, stale pushes refused unless forced, names that leave the folder
and oversized bodies refused before anything is parsed), history, one bundle, rollback; and
a reload (SIGHUP) that publishes the node's file only when it changed."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import capturedLogs

from gtmcluster.api import groupconfig
from gtmcluster.config.load import load
from gtmcluster.groupconfig import bundle
from gtmcluster.groupconfig.bundle import Bundle
from gtmcluster.groupconfig.shared import at_start
from gtmcluster.nodeservice import NodeService
from gtmcluster.service import Sockets, make_service
from tests.support import configs
from tests.unit.test_api_admin import ask

WIDEIP = "shop.example.test"
SHOP = (b"shop", b"example", b"test")  # its key in Config.wideips


def with_shop(raw: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(raw)
    changed["virtual_servers"]["shop1"] = {"address": "10.0.1.10", "datacenter": "DC1"}
    changed["pools"]["shop"] = {"members": ["shop1"], "load_balancing": {"preferred": "round_robin"}}
    changed["wideips"][WIDEIP] = {"type": "A", "pools": ["shop"]}
    return changed


@pytest.fixture
def raw(tmp_path: Path) -> dict[str, Any]:
    raw = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    return raw


@pytest.fixture
def service(tmp_path: Path, raw: dict[str, Any]) -> NodeService:
    return sharing(tmp_path, raw)


def sharing(tmp_path: Path, raw: dict[str, Any]) -> NodeService:
    """A node of *raw* (written in *tmp_path*) that keeps the group's bundles, its configs
    read at once (the memory reactor has no threads for the YAML child)."""
    path = configs.write(tmp_path, raw)
    config = load(path)
    top = make_service(
        config, "n1", MemoryReactorClock(), Sockets(dns=[]), str(path), start=at_start(config, str(path), "n1")
    )
    top.read_config = lambda path, own_dir: defer.succeed(load(path, own_dir))
    top.snapshots = None
    return top


def made(tmp_path: Path, raw: dict[str, Any], based_on: int = 0, name: str = "edit") -> bytes:
    """The bundle `gtmcluster config push` sends for *raw* (written with the zone file
    beside it, as an operator's copy)."""
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    (folder / "example.test.zone").write_text(configs.ZONE)
    path = folder / "gtm.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return bundle.encode(bundle.make(path, 1, based_on, "n1", 1.0))


def test_a_push_is_checked_run_held_and_listed(service: NodeService, tmp_path: Path, raw: dict[str, Any]) -> None:
    assert SHOP not in service.node.config.wideips
    code, answer = ask(service, "POST", "/api/v1/config", made(tmp_path, with_shop(raw)))
    assert code == 200, answer
    assert answer["published"]["generation"] == 1 and answer["published"]["publisher"] == "n1"
    assert SHOP in service.node.config.wideips  # runs it
    code, state = ask(service, "GET", "/api/v1/config")
    assert code == 200
    assert state["running"]["generation"] == 1 and state["held"]["digest"] == answer["published"]["digest"]
    assert state["running"]["path"].endswith("/files/gtm.yaml")
    code, history = ask(service, "GET", "/api/v1/config/history")
    assert [b["generation"] for b in history["bundles"]] == [1] and history["bundles"][0]["running"]
    # the same files again: nothing to publish
    code, again = ask(service, "POST", "/api/v1/config", made(tmp_path, with_shop(raw), based_on=1))
    assert code == 200 and again["unchanged"] and again["published"]["generation"] == 1


def test_a_push_that_fails_the_checks_changes_nothing(
    service: NodeService, tmp_path: Path, raw: dict[str, Any]
) -> None:
    broken = with_shop(raw)
    broken["wideips"][WIDEIP]["pools"] = ["shops"]
    broken["pools"]["shop"]["ttl"] = -1
    before = service.node.config
    code, answer = ask(service, "POST", "/api/v1/config", made(tmp_path, broken))
    assert code == 422
    assert "nothing changed on any member" in answer["error"]
    # named as the operator's file names them, not where the member wrote the bundle out
    assert "\ngtm.yaml: wideips.\"shop.example.test\".pools[0]: no pool named 'shops'" in answer["error"]
    assert "bundles" not in answer["error"]
    assert "gtm.yaml: pools.shop.ttl: " in answer["error"]  # every problem, not the first
    assert service.node.config is before
    assert ask(service, "GET", "/api/v1/config/history")[1]["bundles"] == []
    assert list((tmp_path / "state" / "bundles").glob("*/files")) == []  # what was staged is gone


def test_a_push_based_on_an_old_generation_is_refused_unless_forced(
    service: NodeService, tmp_path: Path, raw: dict[str, Any]
) -> None:
    assert ask(service, "POST", "/api/v1/config", made(tmp_path, with_shop(raw)))[0] == 200
    other = copy.deepcopy(raw)
    other["pools"]["p"]["ttl"] = 11
    code, answer = ask(service, "POST", "/api/v1/config", made(tmp_path, other, based_on=0))
    assert code == 409
    assert "based on generation 0, but the group is at generation 1, published by n1" in answer["error"]
    assert SHOP in service.node.config.wideips
    code, answer = ask(service, "POST", "/api/v1/config?force=true", made(tmp_path, other, based_on=0))
    assert code == 200 and answer["published"]["generation"] == 2
    assert SHOP not in service.node.config.wideips


def test_rollback_publishes_old_files_as_a_new_generation(
    service: NodeService, tmp_path: Path, raw: dict[str, Any]
) -> None:
    first = ask(service, "POST", "/api/v1/config", made(tmp_path, with_shop(raw)))[1]["published"]
    ask(service, "POST", "/api/v1/config", made(tmp_path, raw, based_on=1))
    assert SHOP not in service.node.config.wideips
    code, answer = ask(service, "POST", "/api/v1/config/rollback/1", {"based_on": "2"})
    assert code == 200, answer
    assert answer["published"]["generation"] == 3 and answer["published"]["digest"] == first["digest"]
    assert SHOP in service.node.config.wideips
    code, _ = ask(service, "POST", "/api/v1/config/rollback/1", {"based_on": "1"})
    assert code == 409
    code, answer = ask(service, "POST", "/api/v1/config/rollback/9", {})
    assert code == 404 and "held: 3, 2, 1" in answer["error"]


def test_one_bundle_as_sent(service: NodeService, tmp_path: Path, raw: dict[str, Any]) -> None:
    ask(service, "POST", "/api/v1/config", made(tmp_path, with_shop(raw)))
    code, answer = ask(service, "GET", "/api/v1/config/bundles/1")
    assert code == 200
    got = bundle.decode(json.dumps(answer).encode())
    assert WIDEIP.encode() in got.config_text and "example.test.zone" in got.files


def test_the_config_is_read_with_the_token_only_even_on_loopback(
    service: NodeService, tmp_path: Path, raw: dict[str, Any]
) -> None:
    """The group's config, its history and its bundles (config text, names of files) are
    401 without the token on a loopback API whose other reads need none (GET and HEAD);
    403 with a wrong one; with the token they answer. Status still needs none."""
    ask(service, "POST", "/api/v1/config", made(tmp_path, with_shop(raw)))
    for path in ("/api/v1/config", "/api/v1/config/history", "/api/v1/config/bundles/1"):
        for method in ("GET", "HEAD"):
            code, answer = ask(service, method, path, token=None)
            assert code == 401 and "bearer token" in answer["error"], (method, path)
        assert ask(service, "GET", path, token="a-wrong-token-0123456789")[0] == 403
        assert ask(service, "GET", path)[0] == 200
    assert ask(service, "GET", "/api/v1/status", token=None)[0] == 200


@pytest.mark.parametrize("based_on", ["²", "①", "٣", "-1", "1.0", " 1", "9" * 19, "true"])
def test_a_rollback_based_on_what_is_not_a_generation_is_400(
    service: NodeService, tmp_path: Path, raw: dict[str, Any], based_on: str
) -> None:
    """based_on must be a generation: ASCII digits (str.isdigit() takes "²", which int()
    refuses: that was a 500 and a traceback). Nothing is published, nothing logged as a
    failure."""
    ask(service, "POST", "/api/v1/config", made(tmp_path, with_shop(raw)))
    with capturedLogs() as events:
        code, answer = ask(service, "POST", "/api/v1/config/rollback/1", {"based_on": based_on})
    assert code == 400 and "based_on" in answer["error"] and "is not a generation" in answer["error"], answer
    assert not [e for e in events if e.get("log_failure") is not None]
    assert len(ask(service, "GET", "/api/v1/config/history")[1]["bundles"]) == 1


@pytest.mark.parametrize(
    ("files", "words"),
    [
        ({"gtm.yaml": b"x: 1\n", "../outside.zone": b""}, "leaves the config's folder"),
        ({"gtm.yaml": b"x: 1\n", "/etc/passwd": b""}, "absolute path"),
    ],
)
def test_a_bundle_with_a_name_that_leaves_its_folder_is_refused(
    service: NodeService, files: dict[str, bytes], words: str
) -> None:
    evil = bundle.encode(Bundle("gtm.yaml", files, 1, 0, "n1", 1.0))
    code, answer = ask(service, "POST", "/api/v1/config", evil)
    assert code == 400 and words in answer["error"], answer
    assert ask(service, "GET", "/api/v1/config/history")[1]["bundles"] == []


def test_a_push_needs_the_token_and_a_body_within_the_limit(service: NodeService, tmp_path: Path) -> None:
    code, answer = ask(service, "POST", "/api/v1/config", b"{}", token=None)
    assert code == 401
    code, answer = ask(service, "POST", "/api/v1/config", b"x" * (groupconfig.MAX_PUSH + 1))
    assert code == 413
    code, answer = ask(service, "POST", "/api/v1/config", b'{"format": 1}')
    assert code == 400 and "not a config bundle" in answer["error"]


def test_a_reload_publishes_the_file_only_when_it_changed(
    service: NodeService, tmp_path: Path, raw: dict[str, Any]
) -> None:
    path = Path(service.config_path)
    problems: list[list[str]] = []
    service.reload().addCallback(problems.append)
    assert problems == [[]] and ask(service, "GET", "/api/v1/config/history")[1]["bundles"] == []  # unchanged
    path.write_text(yaml.safe_dump(with_shop(raw), sort_keys=False))
    service.reload().addCallback(problems.append)
    assert problems[-1] == [] and SHOP in service.node.config.wideips
    held = ask(service, "GET", "/api/v1/config/history")[1]["bundles"]
    assert [b["generation"] for b in held] == [1]
    service.reload().addCallback(problems.append)  # the same file again: nothing published
    assert problems[-1] == [] and len(ask(service, "GET", "/api/v1/config/history")[1]["bundles"]) == 1


def test_with_config_sync_off_a_reload_reads_the_file_and_publishes_nothing(
    tmp_path: Path, raw: dict[str, Any]
) -> None:
    raw["sync_group"]["config_sync"] = False
    top = sharing(tmp_path, raw)
    path = Path(top.config_path)
    changed = with_shop(raw)
    path.write_text(yaml.safe_dump(changed, sort_keys=False))
    problems: list[list[str]] = []
    top.reload().addCallback(problems.append)
    assert problems == [[]] and SHOP in top.node.config.wideips
    assert ask(top, "GET", "/api/v1/config/history")[1]["bundles"] == []
