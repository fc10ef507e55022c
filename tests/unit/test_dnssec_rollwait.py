"""The waits of a key rollover (`gtmcluster.dnssec.rollwait`), on a fake clock: each step is
recorded (``ZONE.roll.json``, mode 0600) and the next refused, naming the time left, until the
DNSKEY TTL (before a roll) or the zone's longest TTL and the parent's DS TTL (before the
finish) have passed after it, plus the propagation to every member; ``force`` skips the wait."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.task import Clock

from gtmcluster.dnsdata import keys
from gtmcluster.dnssec import rollover, rollwait
from gtmcluster.dnssec.rollwait import PROPAGATION, RollWaitError
from gtmcluster.dnssec.signer import DNSKEY_TTL

GTMCLUSTER = Path(sys.executable).parent / "gtmcluster"
ZONE = "example.com"
START = 1_780_000_000.0
BEFORE_ROLL = DNSKEY_TTL + PROPAGATION


def clock_at(t: float) -> Clock:
    clock = Clock()
    clock.advance(t)
    return clock


def test_a_ksk_roll_waits_for_the_dnskey_ttl_then_for_the_parents_ds_ttl(tmp_path: Path) -> None:
    keys.keygen(tmp_path, ZONE, split=True)
    clock = clock_at(START)
    rollover.publish(tmp_path, ZONE, ksk=True, clock=clock.seconds)
    state = keys.roll_state_path(tmp_path, ZONE)
    assert state.stat().st_mode & 0o777 == 0o600
    assert rollwait.read(tmp_path, ZONE) == {"ksk": {"published": START}}

    clock.advance(BEFORE_ROLL - 1)
    with pytest.raises(RollWaitError) as refused:
        rollover.roll(tmp_path, ZONE, ksk=True, clock=clock.seconds)
    assert str(refused.value) == (
        "example.com: its KSK was pre-published at 2026-05-28T20:26:40Z; the roll must wait the DNSKEY TTL "
        "3600 s + propagation 300 s after that: 1s more (from 2026-05-28T21:31:40Z), or pass --force"
    )
    assert keys.key_path(tmp_path, ZONE, "ksk", keys.NEXT).exists()  # nothing was renamed

    clock.advance(1)
    rollover.roll(tmp_path, ZONE, ksk=True, clock=clock.seconds)
    rolled = clock.seconds()
    assert rollwait.read(tmp_path, ZONE) == {"ksk": {"published": START, "rolled": rolled}}

    with pytest.raises(RollWaitError, match=r"state the parent's DS TTL with --ds-ttl SECONDS"):
        rollover.finish(tmp_path, ZONE, ksk=True, clock=clock.seconds)
    clock.advance(3600 + PROPAGATION - 61)
    with pytest.raises(RollWaitError, match=r"the parent's DS TTL 3600 s \+ propagation 300 s after that: 1m 1s more"):
        rollover.finish(tmp_path, ZONE, ksk=True, ds_ttl=3600, clock=clock.seconds)
    # a ZSK's longest TTL does not count for a KSK (it signs only the key set)
    clock.advance(61)
    rollover.finish(tmp_path, ZONE, ksk=True, ds_ttl=3600, max_ttl=10**6, clock=clock.seconds)
    assert not state.exists()
    assert len(keys.load(tmp_path, ZONE)) == 2


def test_a_zsk_finish_waits_for_the_zones_longest_ttl_and_a_csk_for_the_longer_of_both(tmp_path: Path) -> None:
    keys.keygen(tmp_path / "pair", ZONE, split=True)
    keys.keygen(tmp_path / "csk", ZONE)
    for directory in (tmp_path / "pair", tmp_path / "csk"):
        rollover.publish(directory, ZONE, clock=clock_at(START).seconds)
        rollover.roll(directory, ZONE, clock=clock_at(START + BEFORE_ROLL).seconds)
    rolled = START + BEFORE_ROLL

    at = clock_at(rolled + 7200 + PROPAGATION - 1)
    with pytest.raises(RollWaitError, match=r"its ZSK was rolled .* the zone's longest TTL 7200 s .*: 1s more"):
        rollover.finish(tmp_path / "pair", ZONE, max_ttl=7200, clock=at.seconds)
    rollover.finish(tmp_path / "pair", ZONE, max_ttl=7200, clock=clock_at(rolled + 7200 + PROPAGATION).seconds)

    with pytest.raises(RollWaitError, match=r"--ds-ttl"):
        rollover.finish(tmp_path / "csk", ZONE, max_ttl=7200, clock=at.seconds)
    late = clock_at(rolled + 86400 + PROPAGATION - 1)
    with pytest.raises(RollWaitError, match=r"its CSK .* the parent's DS TTL 86400 s .*: 1s more"):
        rollover.finish(tmp_path / "csk", ZONE, max_ttl=7200, ds_ttl=86400, clock=late.seconds)
    late.advance(1)
    rollover.finish(tmp_path / "csk", ZONE, max_ttl=7200, ds_ttl=86400, clock=late.seconds)


def test_a_step_without_a_record_is_refused_unless_forced(tmp_path: Path) -> None:
    keys.keygen(tmp_path, ZONE)
    rollover.publish(tmp_path, ZONE, clock=clock_at(START).seconds)
    keys.roll_state_path(tmp_path, ZONE).unlink()  # (a roll begun by hand, or before waits were kept)
    with pytest.raises(RollWaitError, match=r"no record of when its CSK was pre-published \(example.com.roll.json\)"):
        rollover.roll(tmp_path, ZONE, clock=clock_at(START + 10 * BEFORE_ROLL).seconds)
    rollover.roll(tmp_path, ZONE, force=True, clock=clock_at(START).seconds)
    # a forced step is recorded too: the finish waits from it
    with pytest.raises(RollWaitError, match=r"1s more"):
        rollover.finish(tmp_path, ZONE, ds_ttl=60, max_ttl=60, clock=clock_at(START + 60 + PROPAGATION - 1).seconds)


def test_a_malformed_record_is_no_record(tmp_path: Path) -> None:
    keys.keygen(tmp_path, ZONE)
    for text in (
        "not json",
        "[1]",
        '{"csk": {"published": "soon"}}',
        '{"csk": {"published": true}}',
        '{"csk": {"published": NaN}}',  # (a NaN would make every wait look over)
        '{"csk": {"published": -Infinity}}',
    ):
        keys.roll_state_path(tmp_path, ZONE).write_text(text)
        assert rollwait.read(tmp_path, ZONE) in ({}, {"csk": {}})
    rollover.publish(tmp_path, ZONE, clock=clock_at(START).seconds)  # and is replaced by the next step
    assert rollwait.read(tmp_path, ZONE) == {"csk": {"published": START}}


@given(st.floats(min_value=0.001, max_value=10**7))
def test_the_time_left_is_told_rounded_up(seconds: float) -> None:
    told = rollwait.duration(seconds)
    match = re.fullmatch(r"(?:(\d+)h )?(?:(\d+)m )?(\d+)s", told)
    assert match is not None, told
    hours, minutes, secs = (int(g or 0) for g in match.groups())
    assert minutes < 60 and secs < 60
    assert hours * 3600 + minutes * 60 + secs == -(-seconds // 1)


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GTMCLUSTER, "dnssec", *args], capture_output=True, text=True, timeout=60, check=False)


def test_the_ksk_roll_commands_refuse_early_steps_and_say_what_to_do(tmp_path: Path) -> None:
    d = tmp_path / "keys"
    assert cli("keygen", ZONE, "--dir", d, "--split").returncode == 0
    published = cli("keygen", ZONE, "--dir", d, "--publish-only", "--ksk")
    assert published.stdout == (
        f"wrote {d}/example.com.ksk.next.key (mode 0600): published and signing the DNSKEY set beside the "
        "active KSK; reload every member\n"
    )
    early = cli("roll", ZONE, "--dir", d, "--ksk")
    assert early.returncode == 1
    assert re.fullmatch(
        r"gtmcluster dnssec roll: example.com: its KSK was pre-published at \S+Z; the roll must wait the DNSKEY "
        r"TTL 3600 s \+ propagation 300 s after that: 1h [45]m \d+s more \(from \S+Z\), or pass --force\n",
        early.stderr,
    ), early.stderr
    new_ds = cli("ds", ZONE, "--dir", d).stdout.splitlines()[1]
    rolled = cli("roll", ZONE, "--dir", d, "--ksk", "--force")
    assert rolled.returncode == 0, rolled.stderr
    lines = rolled.stdout.splitlines()
    assert lines[0].startswith(f"{d}/example.com.ksk.key is the active KSK (key tag ")
    assert lines[1] == "now swap the DS at the parent: add  " + new_ds.replace(" 3600 IN DS ", " IN DS ")
    assert re.fullmatch(r" +remove the DS of key tag \d+", lines[2])
    assert lines[3].endswith(f"--dir {d} --ksk --finish --ds-ttl SECONDS")
    no_ttl = cli("roll", ZONE, "--dir", d, "--ksk", "--finish")
    assert no_ttl.returncode == 1 and "state the parent's DS TTL with --ds-ttl SECONDS" in no_ttl.stderr
    bad = cli("roll", ZONE, "--dir", d, "--ksk", "--finish", "--ds-ttl", "soon")
    assert bad.returncode == 2 and "'soon' is not a number of seconds" in bad.stderr
    early_finish = cli("roll", ZONE, "--dir", d, "--ksk", "--finish", "--ds-ttl", "3600")
    assert early_finish.returncode == 1 and "the parent's DS TTL 3600 s + propagation 300 s" in early_finish.stderr
    done = cli("roll", ZONE, "--dir", d, "--ksk", "--finish", "--force")
    assert done.stdout == f"removed {d}/example.com.ksk.old.key; reload every member\n"
    assert cli("keygen", ZONE, "--dir", d, "--ksk").stderr == (
        "gtmcluster dnssec keygen: --ksk makes a new KSK for a rollover: give it with --publish-only\n"
    )
