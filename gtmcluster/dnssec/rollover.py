"""A zone's key rollover, in three steps on its key directory (RFC 6781 4.1):

1. `publish`: a new key is made beside the active one, pre-published
   (``ZONE.ROLE.next.key``): every member that reloads serves it in the DNSKEY RRset, but
   the zone's data is still signed by the active key only. A new CSK (or KSK) also signs the
   DNSKEY RRset at once, so the parent may get its DS from now on.
2. `roll`, once the DNSKEY RRset with the new key has been out for its TTL (and, for a CSK,
   the parent's DS for the new key is in place): the new key becomes the active one and
   signs the data; the old one is retired (``ZONE.ROLE.old.key``): still published (and,
   for a CSK, still signing the DNSKEY RRset, for resolvers holding the old DS), so
   signatures made by it and cached stay verifiable.
3. `finish`, once the old signatures can no longer be cached (the longest TTL of the zone,
   and for a CSK the parent's old DS gone): the retired key is removed.

Each step only renames or writes files; members take it when reloaded (`kill -HUP`), and
the key-set check (`dnssec.keyset`) shows members that have not reloaded yet.
"""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization

from gtmcluster.dnssec import keys
from gtmcluster.dnssec.keys import ACTIVE, NEXT, OLD, DnssecKeyError
from gtmcluster.sync import certs


def _rolled_role(directory: Path, zone: str) -> tuple[str, list[keys.ZoneKey]]:
    """The role a roll changes (the ZSK of a pair, or the CSK), and the zone's keys now."""
    zone_keys = keys.load(directory, zone)
    return ("csk" if any(k.role == "csk" for k in zone_keys) else "zsk"), zone_keys


def publish(directory: Path, zone: str) -> Path:
    """Step 1: make the next key (same algorithm as the active one), mode 0600."""
    role, zone_keys = _rolled_role(directory, zone)
    states = {k.state for k in zone_keys if k.role == role}
    name = keys.zone_file_name(zone)
    if NEXT in states:
        step = f"gtmcluster dnssec roll {name} --dir {directory}"
        raise DnssecKeyError(f"{name} already has a pre-published key: roll to it ({step})")
    if OLD in states:
        raise DnssecKeyError(
            f"{name} still publishes the key its last roll retired: finish that roll first "
            f"(gtmcluster dnssec roll {name} --dir {directory} --finish)"
        )
    algorithm = next(k.algorithm for k in zone_keys if k.role == role)
    path = keys.key_path(directory, zone, role, NEXT)
    pem = keys.generate(algorithm).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    try:
        certs._write(path, pem, certs.KEY_MODE, False)
    except certs.CertError as e:
        raise DnssecKeyError(str(e)) from e
    return path


def roll(directory: Path, zone: str) -> tuple[Path, Path]:
    """Step 2: the next key becomes active, the active one retired. Returns (active, retired)."""
    role, zone_keys = _rolled_role(directory, zone)
    states = {k.state for k in zone_keys if k.role == role}
    name = keys.zone_file_name(zone)
    if NEXT not in states:
        step = f"gtmcluster dnssec keygen {name} --dir {directory} --publish-only"
        raise DnssecKeyError(f"{name} has no pre-published key ({step})")
    if OLD in states:
        step = f"gtmcluster dnssec roll {name} --dir {directory} --finish"
        raise DnssecKeyError(f"{name} still publishes a retired key: {step}")
    active, next_, old = (keys.key_path(directory, zone, role, s) for s in (ACTIVE, NEXT, OLD))
    active.rename(old)
    next_.rename(active)
    return active, old


def finish(directory: Path, zone: str) -> Path:
    """Step 3: remove the retired key. Returns its path."""
    role, zone_keys = _rolled_role(directory, zone)
    retired = [k for k in zone_keys if k.role == role and k.state == OLD]
    if not retired:
        raise DnssecKeyError(f"{keys.zone_file_name(zone)} has no retired key to remove")
    retired[0].path.unlink()
    return retired[0].path
