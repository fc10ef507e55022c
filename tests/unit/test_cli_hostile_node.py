"""What the CLI does when what answers at a member's API address is hostile (a local process
that took the port while the node was down): every request ends within its deadline, every
answer within its size cap, a malformed answer is a one-line error naming the node (exit 1,
as for a node that is down), never a traceback, and nothing the node says reaches the
terminal as a control sequence.

Against real local servers (`tests.support.hostileapi`) that trickle, announce or send
endless bodies, nest JSON 200,000 deep, leave fields out, or put escape sequences in their
texts. Deadlines and caps are set small here (`hostileapi.quick`); every hostile server
gives up by itself after `hostileapi.GIVE_UP` seconds, so a client without limits fails
these tests rather than hangs them. `gtmcluster logs` is in test_cli_hostile_logs.py; the
memory a real `gtmcluster status` process holds against an endless answer is measured in
tests/process/test_cli_hostile_memory.py."""

from __future__ import annotations

import copy
import json
import re
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.cli import nodeapi
from gtmcluster.config.load import load
from gtmcluster.sync import certs
from tests.support.hostileapi import (
    ADMIN,
    CAP,
    CONTROLS,
    DEADLINE,
    ESCAPES,
    RENDERED,
    SHOWN,
    SLACK,
    STATUS,
    Script,
    announced,
    answer,
    assert_escaped,
    chunked,
    cli,
    config_at,
    hostile,
    member_at,
    quick,
    trickle,
    until_closed,
    url,
    whole,
)


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deadlines and caps small enough for a test."""
    quick(monkeypatch)


# -- time ----------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["status-line", "head", "body"])
def test_a_trickling_server_is_cut_at_the_deadline(tmp_path: Path, limits: None, where: str) -> None:
    """A server sending a byte every 50 ms (every socket read well within its timeout) is
    cut at the request's deadline, wherever in the answer it trickles: one line naming
    the node and the deadline."""
    data = whole(json.dumps(STATUS).encode())
    at_once = {"status-line": 0, "head": 20, "body": data.index(b"\r\n\r\n") + 10}[where]
    with hostile(trickle(data, every=0.05, after=at_once)) as server:
        m = member_at(tmp_path, server.port)
        start = time.monotonic()
        with pytest.raises(nodeapi.Unreachable) as caught:
            nodeapi.get(m, "/api/v1/status")
        took = time.monotonic() - start
    assert str(caught.value) == f"n1's API at {url(server.port, '/api/v1/status')} sent no whole answer within 1.5 s"
    assert DEADLINE - 0.1 <= took < DEADLINE + SLACK


def test_status_reports_a_trickling_node_unreachable_within_the_deadline(
    tmp_path: Path, limits: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """`gtmcluster status` against a trickling server: exit 1 within the deadline, the node
    UNREACHABLE with why, on one line."""
    with hostile(trickle(whole(json.dumps(STATUS).encode()), every=0.05, after=20)) as server:
        code, out, err, took = cli(["status", "--config", str(config_at(tmp_path, server.port))], capsys)
    assert code == 1 and took < DEADLINE + SLACK, (code, took)
    said = [line for line in out.splitlines() if line.startswith("UNREACHABLE n1:")]
    assert said == [
        f"UNREACHABLE n1: n1's API at {url(server.port, '/api/v1/status')} sent no whole answer within 1.5 s"
    ]
    assert "Traceback" not in out + err


def test_a_trickling_tls_handshake_is_cut_at_the_deadline(tmp_path: Path, limits: None) -> None:
    """Over HTTPS (api.tls), a server that trickles a TLS record instead of its handshake is
    cut at the deadline too (the handshake's reads happen inside OpenSSL)."""
    certs.init_ca(tmp_path / "certs")
    certs.issue(tmp_path / "certs", "n1")
    record = b"\x16\x03\x03\x40\x00" + b"\x00" * 16384
    with hostile(trickle(record, every=0.05), reads_head=False) as server:
        config = load(config_at(tmp_path, server.port, tls=True))
        tokens = nodeapi.Tokens(config, environ={})
        start = time.monotonic()
        with pytest.raises(nodeapi.Unreachable) as caught:
            nodeapi.get(config.sync_group.members[0], "/api/v1/status", tokens=tokens)
        took = time.monotonic() - start
    assert str(caught.value) == (
        f"n1's API at https://127.0.0.1:{server.port}/api/v1/status sent no whole answer within 1.5 s"
    )
    assert took < DEADLINE + SLACK


# -- size ----------------------------------------------------------------------------------


def peak_while(call: Any) -> tuple[BaseException | None, int]:
    """What *call* raised (None) and the most memory Python held meanwhile, bytes."""
    tracemalloc.start()
    try:
        call()
    except Exception as e:
        raised: BaseException | None = e
    else:
        raised = None
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return raised, peak


def test_an_announced_length_over_the_cap_is_refused_before_the_body(tmp_path: Path, limits: None) -> None:
    """``Content-Length: 10^12``: refused on the head, nothing of the body read."""
    with hostile(announced(10**12)) as server:
        m = member_at(tmp_path, server.port)
        start = time.monotonic()
        raised, peak = peak_while(lambda: nodeapi.get(m, "/api/v1/status"))
        took = time.monotonic() - start
    assert isinstance(raised, nodeapi.Unreachable), raised
    assert str(raised) == (
        f"n1's API at {url(server.port, '/api/v1/status')} announced an answer of 1,000,000,000,000 bytes, "
        "over the limit of 1,048,576"
    )
    assert took < SLACK and peak < CAP


ENDLESS: dict[str, Script] = {
    "chunked": chunked(most=8 * CAP),
    "until-closed": until_closed(most=8 * CAP),
}


@pytest.mark.parametrize("script", ENDLESS.values(), ids=ENDLESS.keys())
def test_an_endless_body_is_cut_at_the_cap(tmp_path: Path, limits: None, script: Script) -> None:
    """A body that goes on (chunks, or no length until the server closes) is cut just past
    the cap: one line, at once, and never more than a few times the cap held."""
    with hostile(script) as server:
        m = member_at(tmp_path, server.port)
        start = time.monotonic()
        raised, peak = peak_while(lambda: nodeapi.get(m, "/api/v1/status"))
        took = time.monotonic() - start
    assert isinstance(raised, nodeapi.Unreachable), raised
    where = url(server.port, "/api/v1/status")
    assert str(raised) == f"n1's API at {where} sent more than 1,048,576 bytes, over the limit for this answer"
    assert took < SLACK and peak < 3 * CAP, (took, peak)


def test_a_bundle_is_read_up_to_the_bundle_limit(tmp_path: Path, limits: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """`config pull` reads a bundle up to its own cap (a bundle at the bundle limit, encoded),
    not the cap of a JSON answer, and no further."""
    monkeypatch.setattr(nodeapi, "MAX_BUNDLE", 2 * CAP, raising=False)
    body = json.dumps({"files": "x" * (3 * CAP // 2)}).encode()
    with hostile(answer(body)) as server:
        m = member_at(tmp_path, server.port)
        assert nodeapi.raw(m, "/api/v1/config/bundles/1") == body
    with hostile(chunked(most=8 * CAP)) as server:
        m = member_at(tmp_path, server.port)
        with pytest.raises(nodeapi.Unreachable, match=r"sent more than 2,097,152 bytes, over the limit"):
            nodeapi.raw(m, "/api/v1/config/bundles/1")


# -- what it says --------------------------------------------------------------------------


def test_json_nested_200000_deep_is_one_line_not_a_traceback(tmp_path: Path, limits: None) -> None:
    """``[[[[...`` 200,000 deep (200 KB): an error naming the node, not a RecursionError."""
    with hostile(answer(b"[" * 200_000)) as server:
        m = member_at(tmp_path, server.port)
        with pytest.raises(nodeapi.Unreachable) as caught:
            nodeapi.get(m, "/api/v1/status")
    assert str(caught.value) == (
        f"n1's API at {url(server.port, '/api/v1/status')} answered with JSON nested too deeply (more than 64 levels)"
    )


def _parent(status: Any, path: str) -> tuple[Any, Any]:
    """The container of the field at dotted *path* (list items by number), and its key."""
    *parents, last = path.split(".")
    held = status
    for key in parents:
        held = held[int(key)] if isinstance(held, list) else held[key]
    return held, int(last) if isinstance(held, list) else last


def without(path: str) -> dict[str, Any]:
    """STATUS without the field at dotted *path*."""
    status = copy.deepcopy(STATUS)
    held, key = _parent(status, path)
    del held[key]
    return status


def changed(path: str, value: Any) -> dict[str, Any]:
    """STATUS with the field at dotted *path* set to *value*."""
    status = copy.deepcopy(STATUS)
    held, key = _parent(status, path)
    held[key] = value
    return status


MALFORMED: dict[str, tuple[Any, str]] = {
    "state-empty": ({"state": {}}, "datacenter: missing"),
    "no-state-digest": (without("state.digest"), "state.digest: missing"),
    "a-list": ([STATUS], "the answer: not an object"),
    "peers-not-a-list": (changed("peers", {"n2": True}), "peers: not a list"),
    "peer-without-name": (without("peers.0.name"), "peers[0].name: missing"),
    "peer-connected-text": (changed("peers.0.connected", "yes"), "peers[0].connected: not true or false"),
    "silent-for-text": (changed("peers.0.silent_for", "long"), "peers[0].silent_for: not a number"),
    "records-text": (changed("state.records", "3"), "state.records: not a whole number"),
    "server-a-list": (changed("health.virtual_servers.vs1", []), "health.virtual_servers['vs1']: not an object"),
    "digest-by-protocol-a-list": (
        changed("state.digest_by_protocol", ["1"]),
        "state.digest_by_protocol: not an object",
    ),
    "admin-at-text": (changed("admin", [{**ADMIN, "at": "now"}]), "admin[0].at: not a number"),
    "refused-reasons-text": (
        changed(
            "bundle",
            {
                "generation": 1,
                "digest": "d",
                "held_generation": 2,
                "held_digest": "e",
                "refused": {"generation": 2, "reasons": "no"},
            },
        ),
        "bundle.refused.reasons: not a list",
    ),
}


@pytest.mark.parametrize(("body", "said"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_status_without_the_fields_it_needs_is_one_line(
    tmp_path: Path, limits: None, capsys: pytest.CaptureFixture[str], body: Any, said: str
) -> None:
    """`gtmcluster status` against answers that lack a field it reads or hold another type
    there: the node UNREACHABLE, saying which field and why, exit 1, no traceback."""
    with hostile(answer(body)) as server:
        code, out, err, _ = cli(["status", "--config", str(config_at(tmp_path, server.port))], capsys)
    where = url(server.port, "/api/v1/status")
    assert code == 1
    assert f"UNREACHABLE n1: n1's API at {where} gave an unexpected answer: {said}" in out.splitlines()
    assert "Traceback" not in out + err


def test_a_protocol_digest_key_int_cannot_read_is_left_out(
    tmp_path: Path, limits: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A protocol version that passes isdigit() but not int() (``²``), or has more digits
    than int() takes: left out, the status shown (exit 0)."""
    body = changed("state.digest_by_protocol", {"1": "3-aaaa", "²": "x", "9" * 5000: "y"})
    with hostile(answer(body)) as server:
        code, out, err, _ = cli(["status", "--config", str(config_at(tmp_path, server.port))], capsys)
    assert code == 0, out + err
    assert "digests agree across 1 node (state 3-aaaa" in out


# -- the terminal --------------------------------------------------------------------------


def hostile_status() -> dict[str, Any]:
    status = copy.deepcopy(STATUS)
    title, clear, bold = ESCAPES
    status["peers"][0].update(name=f"n2{clear}", connected=False)
    status["health"]["virtual_servers"]["vs1"].update(available=False, reason=f"monitor web: {title}")
    status["health"]["links"][f"l1{bold}"] = {"state": "down", "reason": f"counters {bold}", "full": None}
    status["admin"] = [
        {
            "level": "vs",
            "name": "vs1",
            "state": "disabled",
            "by": f"eve{title}",
            "reason": f"why{clear}\nfake",
            "at": 1.0,
            "node": "n1",
        }
    ]
    return status


def test_status_shows_a_nodes_escape_sequences_escaped(
    tmp_path: Path, limits: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reasons, peer and link names, admin texts with ESC and C1 sequences: printed as
    ``\\x1b``..., and a newline in a reason cannot start a line of its own; --json stays
    JSON (which escapes them itself)."""
    with hostile(answer(hostile_status())) as server:
        path = str(config_at(tmp_path, server.port))
        _, out, err, _ = cli(["status", "--config", path], capsys)
        assert_escaped(out + err)
        assert "why\\x1b[2J\\x0afake" in out and not any(line.startswith("fake") for line in out.splitlines())
        _, out, err, _ = cli(["status", "--config", path, "--json"], capsys)
    assert not CONTROLS.search(out) and json.loads(out)["nodes"]["n1"]["peers"][0]["name"] == "n2\x1b[2J"


ERRORS: dict[str, tuple[Script, str]] = {
    "json-error": (answer({"error": f"no wide IP named 'www{ESCAPES[0]}'"}, 404, "Not Found"), SHOWN[0]),
    "reason-phrase": (answer(b"", 503, f"busy {ESCAPES[1]}"), SHOWN[1]),
}


@pytest.mark.parametrize(("script", "shown"), ERRORS.values(), ids=ERRORS.keys())
def test_a_refusal_shows_the_nodes_words_escaped(
    tmp_path: Path, limits: None, capsys: pytest.CaptureFixture[str], script: Script, shown: str
) -> None:
    """A refusal's JSON error or its HTTP reason phrase, holding ESC: shown escaped."""
    with hostile(script) as server:
        code, out, err, _ = cli(
            ["explain", "--config", str(config_at(tmp_path, server.port)), "www.example.test", "--ldns", "192.0.2.1"],
            capsys,
        )
    assert code == 1 and shown in err and not CONTROLS.search(out + err), err


@pytest.mark.parametrize(("args", "body"), RENDERED.values(), ids=RENDERED.keys())
def test_every_command_shows_a_nodes_escape_sequences_escaped(
    tmp_path: Path, limits: None, capsys: pytest.CaptureFixture[str], args: list[str], body: Any
) -> None:
    """explain, ldns, stats and an admin change print what the node said escaped."""
    with hostile(answer(body)) as server:
        code, out, err, _ = cli([*args, "--config", str(config_at(tmp_path, server.port))], capsys)
    assert code == 0, err
    assert_escaped(out + err)


@pytest.mark.parametrize("args", [[*a, "--config", "{config}"] for a, _ in RENDERED.values()], ids=RENDERED.keys())
def test_every_command_says_what_an_answer_lacks(
    tmp_path: Path, limits: None, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    """explain, ldns, stats and an admin change against an answer of the wrong shape: one
    line naming the node and the field, exit 1, no traceback."""
    with hostile(answer({"ldns": [{"paths": 1}], "wideips": [], "target": 1})) as server:
        config = str(config_at(tmp_path, server.port))
        code, out, err, _ = cli([a.replace("{config}", config) for a in args], capsys)
    assert code == 1 and out == "" and "Traceback" not in err
    said = [line for line in err.splitlines() if "n1's API at " in line]
    assert len(said) == 1 and re.search(r"gave an unexpected answer: \w+(\[\d+\]\.\w+)?: not|missing", said[0]), err
