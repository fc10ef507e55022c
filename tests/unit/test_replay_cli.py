"""`gtmcluster replay` from its command line: query log files read into queries, bad input
refused with exit 2 and a message, a state snapshot's persistence records used."""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gtmcluster.cli.main import main
from gtmcluster.config.load import load
from gtmcluster.config.model import WideIP
from gtmcluster.lb.context import Client
from gtmcluster.lb.engine import Balancer
from gtmcluster.querylog import dnstap
from gtmcluster.replay.queries import BadLog, LoggedQuery, Logs
from gtmcluster.state import snapshot
from gtmcluster.state.persistence import PersistRecord, StorePersistence
from gtmcluster.state.store import Store
from tests.support import configs, dnsclient

WHEN = 1_800_000_000
WIDEIP = "gslb.example.test"


def record(source: str, name: str = WIDEIP, ecs: str | None = None, extra: bytes = b"", at: int = WHEN) -> bytes:
    family, address = dnstap.packed(source)
    message = dnsclient.query(name, "A", ecs=ecs)
    r = dnstap.Record(dnstap.AUTH_RESPONSE, family, dnstap.UDP, address, 40000, address, 53, (at, 5), message)
    return dnstap.data_frame(dnstap.encode(r if not extra else dnstap.Record(**{**r.__dict__, "extra": extra})))


@dataclass
class Read:
    """What `Logs` read of some files: their queries (kept here, for a test's few), what was
    skipped, the last query's time, the notes."""

    queries: list[LoggedQuery]
    skipped: dict[str, int]
    last_time: float | None
    notes: list[str]


def read(paths: list[Path]) -> Read:
    with Logs(paths) as logs:
        logs.scan()
        return Read(list(logs.queries()), logs.skipped, logs.last_time, logs.notes)


def write_log(path: Path, *frames: bytes, stopped: bool = True) -> Path:
    path.write_bytes(dnstap.start_frame() + b"".join(frames) + (dnstap.STOP_FRAME if stopped else b""))
    return path


def test_logged_queries_are_read_with_client_subnet_and_decision(tmp_path: Path) -> None:
    extra = dnstap.encode_extra(dnstap.Decided(WIDEIP, "p", "preferred", "topology", ("vs1",)))
    log = write_log(
        tmp_path / "q.dnstap",
        record("127.0.0.1", ecs="198.51.100.0/24", extra=extra),
        record("::ffff:127.0.2.5", at=WHEN + 7),
        dnstap.data_frame(dnstap.encode(dnstap.Record(1, 1, 1, b"\x7f\0\0\1", 1, b"", 0, (WHEN, 0), b"\0\1"))),
        stopped=False,  # (a file being written: read up to its last whole record)
    )
    found = read([log])
    assert [(q.client, q.name, q.qtype) for q in found.queries] == [
        ("127.0.0.1 ecs 198.51.100.0/24", WIDEIP, 1),
        ("127.0.2.5", WIDEIP, 1),
    ]
    assert found.queries[0].decided == dnstap.Decided(WIDEIP, "p", "preferred", "topology", ("vs1",))
    assert found.queries[1].decided is None
    assert found.skipped == {"malformed query": 1}
    assert found.last_time == pytest.approx(WHEN + 7)


def test_a_file_that_is_no_query_log_is_refused(tmp_path: Path) -> None:
    (tmp_path / "junk").write_bytes(b"\0\0\0\0\0\0\0\x05hello")
    with pytest.raises(BadLog, match="junk: not a dnstap query log"):
        read([tmp_path / "junk"])
    with pytest.raises(BadLog, match="missing: cannot read the query log: No such file"):
        read([tmp_path / "missing"])


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    config = configs.write(tmp_path, configs.base())
    log = write_log(tmp_path / "q.dnstap", record("127.0.2.5"), record("127.0.1.5"))
    return config, log


def test_bad_input_exits_2_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, log = _setup(tmp_path)
    broken = configs.base()
    broken["pools"]["p"]["members"] = ["vs1", "nosuch"]
    bad = configs.write(tmp_path, broken, name="bad.yaml")
    cases = [
        (["--log", str(tmp_path / "none"), "--config", str(config)], "cannot read the query log"),
        (["--log", str(log), "--config", str(bad)], f"{bad}: 1 problem"),
        (["--log", str(log), "--config", str(config), "--disable", "datacenter", "TEL"], "has no data center 'TEL'"),
        (["--log", str(log), "--config", str(config), "--disable", "planet", "x"], "TARGET is one of datacenter"),
        (["--log", str(log), "--config", str(config), "--state", str(log)], "cannot read the state snapshot"),
        (["--log", str(log), "--config", str(config), "--state", str(tmp_path / "no")], "no such state snapshot"),
    ]
    for argv, message in cases:
        assert main(["replay", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("gtmcluster replay: ") and message in err, err
        assert "Traceback" not in err
    main(["replay", "--log", str(log), "--config", str(bad)])
    # the config's problems as `gtmcluster check` reports them: file, key path, problem
    assert "bad.yaml: pools.p.members[1]" in capsys.readouterr().err


def test_text_and_json_of_a_disabled_datacenter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, log = _setup(tmp_path)
    assert main(["replay", "--log", str(log), "--config", str(config), "--disable", "datacenter", "DC2"]) == 0
    text = capsys.readouterr().out
    assert "candidate: " + str(config) + ", disabled: datacenter DC2" in text
    assert "every server taken as up" in text
    assert f"  {WIDEIP}  127.0.2.5: DC2 -> DC3  (1 query)" in text
    assert main(["replay", "--log", str(log), "--config", str(config), "--disable", "datacenter", "DC2", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["time"] == "2027-01-15T08:00:00Z"
    assert [m["client"] for m in found["moved"]] == ["127.0.2.5"]


def test_persistence_records_of_the_snapshot_hold_clients(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A client held by persistence in the state stays where it is, whatever the topology."""
    raw = configs.base()
    raw["wideips"][WIDEIP]["persistence"] = {"ttl": 3600}
    config = configs.write(tmp_path, raw)
    moved = configs.base()
    moved["wideips"][WIDEIP]["persistence"] = {"ttl": 3600}
    moved["topology"][1]["server"] = "datacenter DC1"
    new = configs.write(tmp_path, moved, name="new.yaml")
    log = write_log(tmp_path / "q.dnstap", record("127.0.2.5"), record("127.0.2.6"))
    # the state: 127.0.2.5's record (pool p, vs2), written a minute before the queries
    store = Store("n1", lambda: float(WHEN))
    held = Client.from_ldns(ipaddress.ip_address("127.0.2.5"))
    persisted = Balancer.persist_key(_wideip(config), 1, held)
    assert persisted is not None
    StorePersistence(store).put(PersistRecord(persisted[0], "p", ("vs2",), WHEN - 60, 3600))
    state = tmp_path / "state.sqlite"
    snapshot.write(state, snapshot.rows(store, WHEN, WHEN), "n1")
    argv = ["replay", "--log", str(log), "--config", str(new), "--base", str(config), "--json"]
    assert main([*argv, "--state", str(state)]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [m["client"] for m in found["moved"]] == ["127.0.2.6"]  # 127.0.2.5 is held on vs2
    assert main(argv) == 0  # without the state both move
    assert [m["client"] for m in json.loads(capsys.readouterr().out)["moved"]] == ["127.0.2.5", "127.0.2.6"]


def _wideip(path: Path) -> WideIP:
    return next(w for w in load(path).wideips.values() if w.name == WIDEIP)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300), st.integers(0, 200))
def test_whatever_the_bytes_the_log_is_read_or_refused(tmp_path: Path, junk: bytes, cut: int) -> None:
    """A damaged file (cut short, or bytes that are no records) gives queries or `BadLog`,
    never another exception."""
    whole = dnstap.start_frame() + record("127.0.2.5", ecs="203.0.113.0/24") + junk
    path = tmp_path / "damaged.dnstap"
    path.write_bytes(whole[: len(whole) - cut] if cut else whole)
    try:
        found = read([path])
    except BadLog as e:
        assert str(e).startswith(f"{path}: not a dnstap query log")
    else:
        assert len(found.queries) <= 1 + len(junk) // 10


def test_a_log_without_queries_gives_an_empty_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = configs.write(tmp_path, configs.base())
    log = write_log(tmp_path / "empty.dnstap")
    assert main(["replay", "--log", str(log), "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"Replay of 0 wide IP queries from {log}: the logs hold no query"
    assert "Clients that move (0): none" in out
