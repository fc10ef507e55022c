"""A zone's DNSSEC keys: made, written (mode 0600), read back, and the DS records for the parent.

A key directory holds, per zone, either one combined signing key (CSK, DNSKEY flags 257,
signing everything) in ``ZONE.csk.key`` or a pair: a key signing key ``ZONE.ksk.key``
(flags 257, signing the DNSKEY RRset) and a zone signing key ``ZONE.zsk.key`` (flags 256,
signing the rest). Each file is the private key as unencrypted PKCS#8 PEM; the algorithm
follows from the key: ECDSA P-256 is 13 (the default), Ed25519 is 15. ZONE is the zone's
name in lower case without the final dot (``.`` for the root). The public DNSKEY records
and the DS records are derived from the files, so there is nothing else to keep in step.

A rollover (`dnssec.rollover`) adds a key beside an active one, by its state in the name:
``ZONE.ROLE.next.key`` is pre-published (in the DNSKEY RRset, not yet signing the zone's
data) and ``ZONE.ROLE.old.key`` retired (still published, no longer signing the data). A key
of the KSK role (a CSK or KSK) in any state signs the DNSKEY RRset, so a validator holding
either DS validates it during a roll (the double signature of the key set). The times of a
roll's steps are recorded beside the keys in ``ZONE.roll.json`` (`dnssec.rollwait`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import dns.dnssec
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.DNSKEY
import dns.rdtypes.ANY.DS
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from gtmcluster.runtime import files, private

ECDSAP256SHA256 = 13
ED25519 = 15
ALGORITHMS = (ECDSAP256SHA256, ED25519)
#: DNSKEY flags: ZONE (256), and ZONE|SEP (257) for the keys the parent's DS points at
ZSK_FLAGS = 256
KSK_FLAGS = 257
#: the roles a key file may have, and its DNSKEY flags
ROLES = {"csk": KSK_FLAGS, "ksk": KSK_FLAGS, "zsk": ZSK_FLAGS}
#: a key's states in a rollover: signing, pre-published, retired (see the module's docstring)
ACTIVE, NEXT, OLD = "active", "next", "old"
PrivateKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


class DnssecKeyError(Exception):
    """A key directory that cannot be used; the message says which file and why."""


@dataclass(frozen=True)
class ZoneKey:
    """One of a zone's keys: its role (csk, ksk or zsk), private key and DNSKEY record."""

    role: str
    path: Path
    private: PrivateKey
    dnskey: dns.rdtypes.ANY.DNSKEY.DNSKEY
    state: str = ACTIVE

    @property
    def algorithm(self) -> int:
        return int(self.dnskey.algorithm)

    @property
    def tag(self) -> int:
        return dns.dnssec.key_id(self.dnskey)

    @property
    def signs_keys(self) -> bool:
        """Whether it signs the DNSKEY RRset (and a DS at the parent points at it): in any
        state, so that either DS validates the key set during a roll."""
        return self.role in ("csk", "ksk")

    @property
    def signs_zone(self) -> bool:
        """Whether it signs the zone's other RRsets: an active CSK or ZSK only."""
        return self.role in ("csk", "zsk") and self.state == ACTIVE


def zone_file_name(zone: str) -> str:
    """ZONE as key files spell it: lower case, no final dot, ``.`` for the root."""
    text = dns.name.from_text(zone).to_text(omit_final_dot=True).lower()
    return text or "."


def key_path(directory: Path, zone: str, role: str, state: str = ACTIVE) -> Path:
    middle = role if state == ACTIVE else f"{role}.{state}"
    return directory / f"{zone_file_name(zone)}.{middle}.key"


def roll_state_path(directory: Path, zone: str) -> Path:
    """The record of a rollover's steps (`dnssec.rollwait`)."""
    return directory / f"{zone_file_name(zone)}.roll.json"


def generate(algorithm: int) -> PrivateKey:
    if algorithm == ECDSAP256SHA256:
        return ec.generate_private_key(ec.SECP256R1())
    if algorithm == ED25519:
        return ed25519.Ed25519PrivateKey.generate()
    raise DnssecKeyError(f"algorithm {algorithm} is not supported (choose 13, ECDSA P-256, or 15, Ed25519)")


def keygen(
    directory: Path, zone: str, algorithm: int = ECDSAP256SHA256, split: bool = False, force: bool = False
) -> list[Path]:
    """Make the keys of *zone* in *directory* (a CSK, or with *split* a KSK and a ZSK), written
    0600 in a 0700 directory; existing files are kept unless *force*. Returns the paths written."""
    roles = ("ksk", "zsk") if split else ("csk",)
    paths = [key_path(directory, zone, role) for role in roles]
    others = [
        key_path(directory, zone, role, state)
        for role in ROLES
        for state in (ACTIVE, NEXT, OLD)
        if role not in roles or state != ACTIVE
    ]
    try:
        private.make_directory(directory)
        if not force:
            existing = paths + [p for p in others if p.exists()]
            private.refuse_existing(existing, "pass --force to replace the zone's keys")
        for path in paths:
            key = generate(algorithm)
            pem = key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
            private.write(path, pem, private.KEY_MODE, force)
        if force:
            for other in others:  # a CSK replacing a pair, a pair replacing a CSK, or a roll's keys
                other.unlink(missing_ok=True)
            roll_state_path(directory, zone).unlink(missing_ok=True)
    except private.WriteError as e:
        raise DnssecKeyError(str(e)) from e
    return paths


def load(directory: Path, zone: str) -> list[ZoneKey]:
    """The keys of *zone* in *directory*: a CSK, or a KSK and a ZSK. Raises `DnssecKeyError` naming
    the file and the problem when they are missing, unreadable or not usable keys."""
    found = {role: key_path(directory, zone, role) for role in ROLES}
    present = {role: p for role, p in found.items() if p.exists() or p.is_symlink()}
    if not directory.is_dir():
        hint = f"gtmcluster dnssec keygen {zone_file_name(zone)} --dir {directory}"
        raise DnssecKeyError(f"{directory} is not a directory (make the keys with: {hint})")
    if set(present) not in ({"csk"}, {"ksk", "zsk"}):
        if not present:
            raise DnssecKeyError(
                f"no keys for {zone_file_name(zone)} in {directory} (expected {found['csk'].name}, or "
                f"{found['ksk'].name} and {found['zsk'].name}; make them with: gtmcluster dnssec keygen "
                f"{zone_file_name(zone)} --dir {directory})"
            )
        names = " and ".join(p.name for p in present.values())
        raise DnssecKeyError(
            f"{directory} holds {names} for {zone_file_name(zone)}: keep either a CSK or a KSK and a ZSK"
        )
    keys = [_load_one(role, path) for role, path in present.items()]
    for role in ROLES:
        for state in (NEXT, OLD):
            path = key_path(directory, zone, role, state)
            if not (path.exists() or path.is_symlink()):
                continue
            if role not in present:
                raise DnssecKeyError(f"{path} rolls a {role.upper()}, and {zone_file_name(zone)} has none active")
            keys.append(_load_one(role, path, state))
    if len({k.algorithm for k in keys}) > 1:
        raise DnssecKeyError(f"the keys of {zone_file_name(zone)} in {directory} use different algorithms")
    return keys


def _load_one(role: str, path: Path, state: str = ACTIVE) -> ZoneKey:
    try:
        data = files.read_bytes(path, files.DNSSEC_KEY)  # (a FIFO here would hold a reload)
    except OSError as e:
        raise DnssecKeyError(f"cannot read {path}: {e.strerror or e}") from e
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise DnssecKeyError(f"{path} is not an unencrypted PEM private key") from e
    if isinstance(private, ec.EllipticCurvePrivateKey) and isinstance(private.curve, ec.SECP256R1):
        algorithm = ECDSAP256SHA256
    elif isinstance(private, ed25519.Ed25519PrivateKey):
        algorithm = ED25519
    else:
        raise DnssecKeyError(f"{path} holds a key of another kind: DNSSEC keys here are ECDSA P-256 or Ed25519")
    dnskey = dns.dnssec.make_dnskey(private.public_key(), algorithm, flags=ROLES[role])
    return ZoneKey(role, path, private, dnskey, state)


def ds_records(zone: str, keys: list[ZoneKey]) -> list[dns.rdtypes.ANY.DS.DS]:
    """The DS records (SHA-256) for the parent: one per key that signs the DNSKEY RRset."""
    origin = dns.name.from_text(zone)
    return [dns.dnssec.make_ds(origin, k.dnskey, "SHA256") for k in keys if k.signs_keys]


def owner_text(zone: str) -> str:
    """ZONE as an absolute name in lower case (``example.com.``)."""
    return dns.name.from_text(zone).to_text().lower()
