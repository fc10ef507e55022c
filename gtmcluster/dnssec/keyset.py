"""Whether the members serve the same DNSKEY sets: a digest of each signed zone's DNSKEY RRset.

Every member signs its answers with its own copy of the zone's keys (docs/dnssec.md, "Keys on
every member"). A member with other keys gives signatures a validator holding the other
member's DNSKEY set cannot check, so its answers fail validation. Members tell each other the
digests of their DNSKEY RRsets (never the keys: a digest of public records) in the peer Hello,
and again in a heartbeat after a reload changes them; `/api/v1/status` and `gtmcluster status`
show a disagreement as a problem.

A key set's digest is the first 16 hex digits of SHA-256 over the DNSKEY RRset in canonical
form (RFC 4034 6.3: the owner, then each record's canonical wire form in order); it is what a
validator sees, so a member with the same keys in other files agrees.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

import dns.name
from twisted.logger import Logger

from gtmcluster.dnsdata.keys import ZoneKey
from gtmcluster.dnsdata.names import Name

log = Logger()

#: hex digits of a key set's digest
DIGEST_LENGTH = 16
#: the most zones a peer's key-set digests may name (more is a malformed message)
MAX_ZONES = 2000


def keyset_digest(zone: str, keys: tuple[ZoneKey, ...] | list[ZoneKey]) -> str:
    """The digest of the DNSKEY RRset *keys* give *zone*."""
    origin = dns.name.from_text(zone)
    h = hashlib.sha256(origin.canonicalize().to_wire() or b"")
    for wire in sorted(k.dnskey.to_digestable(origin) for k in keys):
        h.update(len(wire).to_bytes(2, "big"))
        h.update(wire)
    return h.hexdigest()[:DIGEST_LENGTH]


def digests(signed: Mapping[Name, tuple[ZoneKey, ...]]) -> dict[str, str]:
    """Each signed zone's key-set digest, by the zone's name in lower case (``example.test.``);
    *signed* is `Config.dnssec` (the keys by the origin's labels)."""
    out = {}
    for labels, zone_keys in signed.items():
        zone = dns.name.Name((*labels, b"")).to_text().lower()
        out[zone] = keyset_digest(zone, zone_keys)
    return dict(sorted(out.items()))


def encode(keysets: Mapping[str, str]) -> str:
    """*keysets* as the Hello and Heartbeat carry them (JSON)."""
    return json.dumps(dict(keysets), sort_keys=True, separators=(",", ":"))


def decode(text: str) -> dict[str, str] | None:
    """A peer's key-set digests, or None when *text* is not a well-formed set of them (told
    as a problem by the caller; a peer's mistake never makes a traceback)."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or len(value) > MAX_ZONES:
        return None
    for zone, digest in value.items():
        if not isinstance(digest, str) or len(zone) > 255 or len(digest) > 64:
            return None
    return value


def disagreements(ours: Mapping[str, str], theirs: Mapping[str, str]) -> list[str]:
    """The zones whose key sets differ: signed by both with other keys, or by one only."""
    return sorted(zone for zone in ours.keys() | theirs.keys() if ours.get(zone) != theirs.get(zone))


def heard(peer: str, text: str) -> dict[str, str] | None:
    """*peer*'s key-set digests as it told them ("": it signs nothing), or None (logged) when malformed."""
    told = decode(text) if text else {}
    if told is None:
        log.warn("peer {peer} told malformed DNSSEC key-set digests", peer=peer, event="dnssec_keys_malformed")
    return told


def compare(peer: str, ours: Mapping[str, str], theirs: Mapping[str, str], before: list[str]) -> list[str]:
    """The zones whose key sets differ between *peer* and us, warned of when they differ anew
    (*before*: the zones that differed until now) and told when they agree again."""
    differ = disagreements(ours, theirs)
    if differ and differ != before:
        log.warn(
            "peer {peer} serves other DNSSEC keys for {zones} (key-set digests {theirs}, ours {ours}): "
            "validators will reject the answers of one of us; give every member the same key directory",
            peer=peer,
            zones=", ".join(differ),
            theirs={z: theirs.get(z) for z in differ},
            ours={z: ours.get(z) for z in differ},
            event="dnssec_keys_mismatch",
        )
    elif before and not differ:
        log.info("peer {peer} now serves our DNSSEC keys", peer=peer, event="dnssec_keys_agree")
    return differ
