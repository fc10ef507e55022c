"""The query log of a real node (``twistd -n gtm``) against a config that names someone
else's file, and against a full disk (a small tmpfs, filled and freed): the log writes only
its own files, and every record in its file is read by the node's reader and by BIND's
`dnstap-read`, to the end."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gtmcluster.querylog import dnstap
from tests.conftest import require_tool
from tests.support import configs, dnsclient, poll
from tests.support.apiclient import call
from tests.support.nodeproc import loopback_address, running_node

pytestmark = pytest.mark.process

DNS_PORT = 5353
VICTIM = b"an operator's own file: the query log must never touch it\n" * 40


def ask(address: str, name: str) -> None:
    reply = dnsclient.parse(dnsclient.udp(dnsclient.query(name, "A"), (address, DNS_PORT), source="127.0.0.1"))
    assert dnsclient.addresses(reply), name


def query_log_status(api: tuple[str, int]) -> dict[str, int]:
    """The query log's counts in the node's status: written, dropped, failed."""
    status = call(api, "/api/v1/status")[1]["query_log"]
    assert isinstance(status, dict)
    return {k: status[k] for k in ("written", "dropped", "failed")}


def test_a_file_outside_log_dir_is_refused_at_start_and_survives(tmp_path: Path) -> None:
    """``query_log: {path: <someone's file>, keep: 0}``: main deleted that file and wrote its
    log in its place. The node refuses the config, naming file, key and problem."""
    address = loopback_address()
    victim = tmp_path / "precious.conf"
    victim.write_bytes(VICTIM)
    config = configs.base(address, DNS_PORT)
    config["dns_server"]["query_log"] = {"path": str(victim), "keep": 0}
    path = configs.write(tmp_path, config)
    refused = ""
    try:
        with running_node(path, "n1", address, DNS_PORT, tmp_path):
            ask(address, "www.example.test")  # (main: the log's first batch replaced it)
            with contextlib.suppress(AssertionError):
                poll.until(lambda: not victim.exists() or victim.read_bytes() != VICTIM, timeout=3, what="a change")
    except AssertionError as e:
        refused = str(e)
    assert victim.read_bytes() == VICTIM
    assert "node exited" in refused
    assert f"{path}: dns_server.query_log.path: '{victim}' is not a file inside log_dir" in refused


def test_a_foreign_file_at_the_path_inside_log_dir_survives_and_the_log_waits_for_it(tmp_path: Path) -> None:
    """A file the log did not write at its path (inside log_dir, so the config is taken):
    the node answers, the file stays byte for byte, the queries are counted as not logged
    and the reason logged once (no traceback); once the file is moved away the log begins."""
    address = loopback_address()
    api = (address, 8053)
    log_dir = tmp_path / "var" / "log"
    log_dir.mkdir(parents=True, mode=0o750)
    victim = log_dir / "precious.conf"
    victim.write_bytes(VICTIM)
    config = configs.base(address, DNS_PORT)
    config["dns_server"]["query_log"] = {"path": "var/log/precious.conf", "keep": 0}
    path = configs.write(tmp_path, config)
    with running_node(path, "n1", address, DNS_PORT, tmp_path) as node:
        for n in range(5):
            ask(address, f"v{n}.wild.example.test")
        poll.until(lambda: sum(query_log_status(api).values()) >= 5, what="the queries written or counted")
        assert victim.read_bytes() == VICTIM
        assert query_log_status(api)["written"] == 0 and query_log_status(api)["failed"] >= 5
        assert "gtm_query_log_failed_total" in call(api, "/metrics")[1]
        text = node.log_text()
        assert text.count(f"{victim} is not a query log file") == 1
        assert "Traceback" not in text
        victim.rename(tmp_path / "moved.conf")
        ask(address, "after.wild.example.test")
        poll.until(lambda: victim.exists() and query_log_status(api)["written"] >= 1, what="the log begun")
    records = [dnstap.decode(r) for r in dnstap.read_frames(victim.read_bytes()).records]
    assert any(b"\x05after" in r.query_message for r in records)
    assert (tmp_path / "moved.conf").read_bytes() == VICTIM
    assert f"writing the query log {victim} again" in node.log_text()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs at var/log/dnstap under *tmp_path* (mode 0700: the node's own)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "var" / "log" / "dnstap"
    mount.mkdir(parents=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def fill(folder: Path) -> Path:
    """A file in *folder* that takes every free byte of its disk."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:
        while True:
            try:
                f.write(b"\0" * 4096)
            except OSError as e:
                assert e.errno == errno.ENOSPC
                return filler


def test_a_full_disk_loses_whole_records_counted_and_the_log_reads_to_the_end(tmp_path: Path, small_disk: Path) -> None:
    """The disk fills while queries come (main cut a frame there and wrote on after it: 450
    answered, 151 readable); space returns and more come. Every record in the file is read
    by the node's reader and by dnstap-read, to the last; the lost ones are counted."""
    require_tool("dnstap-read", "bind9-dnsutils")
    address = loopback_address()
    api = (address, 8053)
    config = configs.base(address, DNS_PORT)
    config["dns_server"]["query_log"] = {"path": "var/log/dnstap/queries.dnstap"}
    path = configs.write(tmp_path, config)
    log = small_disk / "queries.dnstap"

    def settled(expected: int) -> dict[str, int]:
        def total() -> dict[str, int]:
            s = query_log_status(api)
            return s if sum(s.values()) == expected else {}

        return poll.until(total, what=f"{expected} queries written or counted", details=lambda: query_log_status(api))

    with running_node(path, "n1", address, DNS_PORT, tmp_path):
        ask(address, "first.wild.example.test")
        poll.until(lambda: log.exists() and query_log_status(api)["written"] >= 1, what="the log begun")
        before = query_log_status(api)
        start = sum(before.values())
        filler = fill(small_disk)
        for n in range(300):
            ask(address, f"full{n}.wild.example.test")
        during = settled(start + 300)
        assert during["failed"] > 0  # the disk was full
        filler.unlink()
        for n in range(150):
            ask(address, f"room{n}.wild.example.test")
        after = settled(start + 450)
        assert after["failed"] == during["failed"] and after["dropped"] == 0
        metrics = call(api, "/metrics")[1]
        assert f"gtm_query_log_failed_total {float(after['failed'])}" in metrics
    data = log.read_bytes()
    frames = dnstap.read_frames(data)  # the strict reader: raises on a cut frame
    assert frames.stopped
    assert len(frames.records) == after["written"]
    queries = [dnstap.decode(f).query_message for f in frames.records]
    assert sum(b"room" in q for q in queries) == 150  # all those after space returned
    ours = subprocess.run(
        [sys.executable, "-m", "gtmcluster.querylog.read", str(log)], capture_output=True, text=True, check=False
    )
    assert ours.returncode == 0 and not ours.stderr, ours.stderr
    assert len(ours.stdout.splitlines()) == after["written"]
    assert "room149.wild.example.test." in ours.stdout.splitlines()[-1]
    bind = subprocess.run(["dnstap-read", str(log)], capture_output=True, text=True, check=False)
    assert bind.returncode == 0 and not bind.stderr, bind.stderr
    assert len(bind.stdout.splitlines()) == after["written"]
    assert bind.stdout.splitlines()[-1].endswith("room149.wild.example.test/IN/A")
