"""A zone's key rollover, in three steps on its key directory (RFC 6781 4.1):

1. `publish`: a new key is made beside the active one, pre-published
   (``ZONE.ROLE.next.key``): every member that reloads serves it in the DNSKEY RRset, but
   the zone's data is still signed by the active key only. A new CSK or KSK also signs the
   DNSKEY RRset at once (the double signature of the key set).
2. `roll`, once the DNSKEY RRset with the new key has been out for its TTL: the new key
   becomes the active one (for a CSK or ZSK, it signs the data); the old one is retired
   (``ZONE.ROLE.old.key``): still published (and, for a CSK or KSK, still signing the
   DNSKEY RRset, for resolvers holding the old DS), so signatures made by it and cached stay
   verifiable. For a CSK or KSK this is when the parent's DS is swapped for the new key's.
3. `finish`, once the old signatures can no longer be cached (the longest TTL of the zone,
   and for a CSK or KSK the parent's old DS gone and its TTL past): the retired key is removed.

The ZSK of a KSK/ZSK pair, or the CSK, is rolled by default; the KSK of a pair with
``ksk=True`` (``--ksk``). Each step is recorded and the next one refused until its wait is
over (`dnssec.rollwait`), unless forced. Each step only renames or writes files; members
take it when reloaded (`kill -HUP`), and the key-set check (`dnssec.keyset`) shows members
that have not reloaded yet.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from gtmcluster.dnsdata import keys
from gtmcluster.dnsdata.keys import ACTIVE, NEXT, OLD, DnssecKeyError
from gtmcluster.dnssec import rollwait
from gtmcluster.runtime import private

Clock = Callable[[], float]


def rolled_role(directory: Path, zone: str, ksk: bool = False) -> tuple[str, list[keys.ZoneKey]]:
    """The role a roll changes (the KSK or ZSK of a pair, or the CSK), and the zone's keys now."""
    zone_keys = keys.load(directory, zone)
    has_csk = any(k.role == "csk" for k in zone_keys)
    if ksk and has_csk:
        name = keys.zone_file_name(zone)
        raise DnssecKeyError(f"{name} has a combined signing key (CSK), no KSK: roll it without --ksk")
    return ("ksk" if ksk else "csk" if has_csk else "zsk"), zone_keys


def _flag(role: str) -> str:
    return " --ksk" if role == "ksk" else ""


def publish(directory: Path, zone: str, ksk: bool = False, clock: Clock = time.time) -> Path:
    """Step 1: make the next key (same algorithm as the active one), mode 0600."""
    role, zone_keys = rolled_role(directory, zone, ksk)
    states = {k.state for k in zone_keys if k.role == role}
    name = keys.zone_file_name(zone)
    if NEXT in states:
        step = f"gtmcluster dnssec roll {name} --dir {directory}{_flag(role)}"
        raise DnssecKeyError(f"{name} already has a pre-published {role.upper()}: roll to it ({step})")
    if OLD in states:
        raise DnssecKeyError(
            f"{name} still publishes the {role.upper()} its last roll retired: finish that roll first "
            f"(gtmcluster dnssec roll {name} --dir {directory}{_flag(role)} --finish)"
        )
    algorithm = next(k.algorithm for k in zone_keys if k.role == role)
    path = keys.key_path(directory, zone, role, NEXT)
    pem = keys.generate(algorithm).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    try:
        private.write(path, pem, private.KEY_MODE, False)
    except private.WriteError as e:
        raise DnssecKeyError(str(e)) from e
    rollwait.record(directory, zone, role, rollwait.PUBLISHED, clock())
    return path


def roll(
    directory: Path, zone: str, ksk: bool = False, *, clock: Clock = time.time, force: bool = False
) -> tuple[Path, Path]:
    """Step 2: the next key becomes active, the active one retired. Returns (active, retired)."""
    role, zone_keys = rolled_role(directory, zone, ksk)
    states = {k.state for k in zone_keys if k.role == role}
    name = keys.zone_file_name(zone)
    if NEXT not in states:
        step = f"gtmcluster dnssec keygen {name} --dir {directory} --publish-only{_flag(role)}"
        raise DnssecKeyError(f"{name} has no pre-published {role.upper()} ({step})")
    if OLD in states:
        step = f"gtmcluster dnssec roll {name} --dir {directory}{_flag(role)} --finish"
        raise DnssecKeyError(f"{name} still publishes a retired {role.upper()}: {step}")
    now = clock()
    if not force:
        rollwait.check(directory, zone, "the roll", rollwait.before_roll(role), now)
    active, next_, old = (keys.key_path(directory, zone, role, s) for s in (ACTIVE, NEXT, OLD))
    active.rename(old)
    next_.rename(active)
    rollwait.record(directory, zone, role, rollwait.ROLLED, now)
    return active, old


def finish(
    directory: Path,
    zone: str,
    ksk: bool = False,
    *,
    max_ttl: int = rollwait.MAX_TTL,
    ds_ttl: int | None = None,
    clock: Clock = time.time,
    force: bool = False,
) -> Path:
    """Step 3: remove the retired key. Returns its path. *ds_ttl* is the parent's DS TTL (a
    CSK's or KSK's roll swaps the DS); *max_ttl* the zone's longest TTL."""
    role, zone_keys = rolled_role(directory, zone, ksk)
    retired = [k for k in zone_keys if k.role == role and k.state == OLD]
    if not retired:
        raise DnssecKeyError(f"{keys.zone_file_name(zone)} has no retired {role.upper()} to remove")
    if not force:
        wait = rollwait.before_finish(role, max_ttl, ds_ttl)
        rollwait.check(directory, zone, "the finish", wait, clock())
    retired[0].path.unlink()
    rollwait.record(directory, zone, role, None, 0.0)
    return retired[0].path
