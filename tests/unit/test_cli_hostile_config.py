"""What `gtmcluster config push|rollback|pull|history|diff` do when what answers at a
member's API address is hostile or broken (a local process that took the port while the
node was down): an answer without the fields a command reads is one line naming the node
(exit 1, as for a node that is down), never a traceback; and publishers, member names,
refusal reasons, a bundle's file names and text reach the terminal escaped.

Against a real local server (`tests.support.hostileapi`) that answers each request by its
method and path (`routes`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.groupconfig import bundle
from tests.support.hostileapi import (
    CONTROLS,
    ESCAPES,
    SHOWN,
    Peer,
    Script,
    answer,
    assert_escaped,
    cli,
    config_at,
    hostile,
    quick,
    url,
)


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deadlines and caps small enough for a test."""
    quick(monkeypatch)


def routes(table: dict[str, Script]) -> Script:
    """Answers each request with the script for its method and path (``GET /api/v1/config``,
    the query left out); 404 for any other."""

    def script(peer: Peer) -> None:
        method, target = peer.request.split(b" ", 2)[:2]
        key = f"{method.decode()} {target.decode().split('?')[0]}"
        table.get(key, answer({"error": f"no {key} here"}, 404, "Not Found"))(peer)

    return script


DIGEST = "ab" * 32
#: a bundle's header as the API gives it (`groupconfig.bundle.Header.to_json`)
HEADER: dict[str, Any] = {
    "main": "cluster.yaml",
    "generation": 2,
    "based_on": 1,
    "publisher": "n1",
    "published_at": 1.0,
    "digest": DIGEST,
    "size": 100,
}
RUNS_IT = {"generation": 2, "digest": DIGEST, "config_digest": "c"}


def group(members: dict[str, Any] | None = None, held: Any = HEADER) -> dict[str, Any]:
    """GET /api/v1/config: n1 holds and runs *held*, and so does each peer unless *members*."""
    view = {"connected": True, "speaks_config_sync": True, "held": HEADER, "running": RUNS_IT, "refused": None}
    return {
        "node": "n1",
        "config_sync": True,
        "file": "/etc/gtm/cluster.yaml",
        "held": held,
        "running": RUNS_IT,
        "refused": None,
        "members": {"n2": view} if members is None else members,
    }


PUBLISHED = {"published": HEADER, "unchanged": False}


def publishing(state: Any, published: Any = PUBLISHED) -> dict[str, Script]:
    """The routes a push and a rollback take: the group's state, then the publication."""
    return {
        "GET /api/v1/config": answer(state),
        "POST /api/v1/config": answer(published),
        "POST /api/v1/config/rollback/1": answer(published),
    }


def encoded(files: dict[str, bytes], generation: int = 1, main: str = "cluster.yaml") -> bytes:
    return bundle.encode(bundle.Bundle(main, files, generation, generation - 1, "n1", 1.0))


PUSH = ["config", "push"]
ROLLBACK = ["config", "rollback", "1"]

#: a command, what answers, the path whose answer is wrong, and what it lacks
MALFORMED: dict[str, tuple[list[str], dict[str, Script], str, str]] = {
    "push-publication-without-published": (
        PUSH,
        publishing(group(), {"unchanged": False}),
        "/api/v1/config",
        "published: missing",
    ),
    "push-held-a-list": (PUSH, publishing(group(held=[HEADER])), "/api/v1/config", "held: not an object"),
    "push-state-without-members": (
        PUSH,
        publishing({k: v for k, v in group().items() if k != "members"}),
        "/api/v1/config",
        "members: missing",
    ),
    "push-refusal-without-reasons": (
        PUSH,
        publishing(
            group({"n2": {**group()["members"]["n2"], "running": None, "refused": {"bundle": HEADER, "reasons": "no"}}})
        ),
        "/api/v1/config",
        "members['n2'].refused.reasons: not a list",
    ),
    "rollback-published-without-digest": (
        ROLLBACK,
        publishing(group(), {"published": {"generation": 2}, "unchanged": False}),
        "/api/v1/config/rollback/1",
        "published.based_on: missing",
    ),
    "pull-held-without-generation": (
        ["config", "pull", "--dir", "{dir}"],
        {"GET /api/v1/config": answer(group(held={"digest": DIGEST}))},
        "/api/v1/config",
        "held.generation: missing",
    ),
    "history-without-bundles": (
        ["config", "history"],
        {"GET /api/v1/config/history": answer({"node": "n1"})},
        "/api/v1/config/history",
        "bundles: missing",
    ),
    "history-bundle-without-fields": (
        ["config", "history"],
        {"GET /api/v1/config/history": answer({"node": "n1", "bundles": [{"generation": 1}]})},
        "/api/v1/config/history",
        "bundles[0].based_on: missing",
    ),
}


@pytest.mark.parametrize(("args", "table", "path", "said"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_config_answer_without_the_fields_it_needs_is_one_line(
    tmp_path: Path,
    limits: None,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    table: dict[str, Script],
    path: str,
    said: str,
) -> None:
    """push, rollback, pull and history against answers that lack a field they read or hold
    another type there: one line naming the node, the field and why, exit 1 (as for a node
    that is down), no traceback."""
    with hostile(routes(table)) as server:
        config = str(config_at(tmp_path, server.port))
        command = [a.replace("{dir}", str(tmp_path / "out")) for a in args]
        code, out, err, _ = cli([*command, "--config", config], capsys)
    assert code == 1, out + err
    assert err.splitlines() == [
        f"gtmcluster {' '.join(args[:2])}: n1's API at {url(server.port, path)} gave an unexpected answer: {said}"
    ], err
    assert "Traceback" not in out + err


def test_diff_of_a_bundle_without_its_fields_is_one_line(
    tmp_path: Path, limits: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """diff reads bundles as they are sent (`bundle.decode` checks them): one without its
    fields is one line naming the node, exit 1."""
    table = {"GET /api/v1/config/bundles/1": answer({"format": 1}), "GET /api/v1/config/bundles/2": answer({})}
    with hostile(routes(table)) as server:
        code, out, err, _ = cli(["config", "diff", "1", "2", "--config", str(config_at(tmp_path, server.port))], capsys)
    assert code == 1 and out == ""
    assert err.splitlines() == [
        "gtmcluster config diff: n1 sent a bad bundle for generation 1: fields missing or of the wrong type"
    ]


# -- the terminal --------------------------------------------------------------------------


@pytest.mark.parametrize("args", [PUSH, ROLLBACK], ids=["push", "rollback"])
def test_a_refusal_and_a_member_name_are_shown_escaped(
    tmp_path: Path, limits: None, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    """A peer named with a screen clear refuses the bundle with reasons holding a window
    title, a C1 CSI and a newline: printed escaped, the newline unable to start a line."""
    title, clear, bold = ESCAPES
    refusing = {
        **group()["members"]["n2"],
        "running": None,
        "refused": {"bundle": HEADER, "reasons": [f"zones[0]: {title}", f"x{bold}\nfake"]},
    }
    state = group({f"n2{clear}": refusing, f"n3{bold}": {**refusing, "refused": None, "connected": False}})
    with hostile(routes(publishing(state))) as server:
        code, out, err, _ = cli([*args, "--config", str(config_at(tmp_path, server.port))], capsys)
    assert code == 1, out + err
    assert_escaped(out + err)
    assert "  n2\\x1b[2J: REFUSED, it runs its previous config: zones[0]: \\x1b]0;owned\\x07; x\\x9b1m\\x0afake" in out
    assert "  n3\\x9b1m: not connected now; it takes it when it connects" in out
    assert not any(line.startswith("fake") for line in out.splitlines())


def test_a_publisher_that_won_is_shown_escaped(
    tmp_path: Path, limits: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """The group moved on to another publisher's bundle, named with a window title: the
    push says who won, escaped."""
    other = {**HEADER, "publisher": f"eve{ESCAPES[0]}", "digest": "cd" * 32}
    with hostile(routes(publishing(group(held=other)))) as server:
        code, out, err, _ = cli([*PUSH, "--config", str(config_at(tmp_path, server.port))], capsys)
    assert code == 1 and f"published by eve{SHOWN[0]} at 1970-01-01 00:00:01Z won over this one" in err, err
    assert not CONTROLS.search(out + err)


def test_history_shows_a_publisher_escaped(tmp_path: Path, limits: None, capsys: pytest.CaptureFixture[str]) -> None:
    """history prints a publisher holding ESC and C1 sequences escaped; --json stays JSON."""
    bundles = [{**HEADER, "publisher": f"eve{ESCAPES[0]}{ESCAPES[1]}{ESCAPES[2]}", "running": True}]
    with hostile(routes({"GET /api/v1/config/history": answer({"node": "n1", "bundles": bundles})})) as server:
        config = str(config_at(tmp_path, server.port))
        code, out, err, _ = cli(["config", "history", "--config", config], capsys)
        assert code == 0, err
        assert_escaped(out + err)
        code, out, err, _ = cli(["config", "history", "--config", config, "--json"], capsys)
    assert code == 0 and not CONTROLS.search(out)
    assert json.loads(out)["bundles"][0]["publisher"] == bundles[0]["publisher"]


def test_pull_shows_a_bundles_file_names_escaped(
    tmp_path: Path, limits: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """pull names the config it wrote, and a file it could not read, escaped."""
    main = f"c{ESCAPES[0]}.yaml"
    bad = json.loads(encoded({"cluster.yaml": b"x: 1\n"}))
    bad["files"][f"z{ESCAPES[1]}.zone"] = "not base64!"
    table = {
        "GET /api/v1/config": answer(group(held={**HEADER, "generation": 1})),
        "GET /api/v1/config/bundles/1": answer(encoded({main: b"x: 1\n"}, main=main)),
        "GET /api/v1/config/bundles/2": answer(bad),
    }
    with hostile(routes(table)) as server:
        config = str(config_at(tmp_path, server.port))
        code, out, err, _ = cli(["config", "pull", "--dir", str(tmp_path / "out"), "--config", config], capsys)
        assert code == 0, err
        assert out.rstrip().endswith(f"the config is {tmp_path / 'out'}/c{SHOWN[0]}.yaml")
        assert not CONTROLS.search(out + err)
        code, out, err, _ = cli(
            ["config", "pull", "-g", "2", "--dir", str(tmp_path / "o2"), "--config", config], capsys
        )
    assert code == 1 and f"z{SHOWN[1]}.zone: contents are not base64" in err and not CONTROLS.search(out + err)


def test_diff_shows_file_names_and_text_escaped(
    tmp_path: Path, limits: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """diff prints the bundles' file names and lines with their control characters escaped;
    a tab stays a tab."""
    zone = f"z{ESCAPES[1]}.zone"
    first = {"cluster.yaml": b"x: 1\n", zone: b"www\tIN A 192.0.2.1\n"}
    second = {"cluster.yaml": b"x: 1\n", zone: f"www\tIN TXT {ESCAPES[0]}{ESCAPES[2]}\r\n".encode()}
    table = {
        "GET /api/v1/config/bundles/1": answer(encoded(first, 1)),
        "GET /api/v1/config/bundles/2": answer(encoded(second, 2)),
    }
    with hostile(routes(table)) as server:
        code, out, err, _ = cli(["config", "diff", "1", "2", "--config", str(config_at(tmp_path, server.port))], capsys)
    assert code == 0, err
    assert_escaped(out.replace("\t", " ") + err)
    assert out.splitlines() == [
        f"--- generation 1/z{SHOWN[1]}.zone",
        f"+++ generation 2/z{SHOWN[1]}.zone",
        "@@ -1 +1 @@",
        "-www\tIN A 192.0.2.1",
        f"+www\tIN TXT {SHOWN[0]}{SHOWN[2]}\\x0d",
    ]
