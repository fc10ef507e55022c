"""Key rollover (`gtmcluster.dnssec.rollover`, `gtmcluster dnssec keygen --publish-only`,
`dnssec roll`): a pre-published key is in the DNSKEY set but signs no data; after the roll the
new key signs the data and the retired one is still published (a CSK's still signs the key
set, for resolvers holding the old DS); `--finish` removes it. At every step every signature
validates against the DNSKEY set served, and against the DS records the parent may hold."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import dns.dnssec
import dns.message
import dns.name
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import pytest

from gtmcluster.config.load import load
from gtmcluster.dns.fastpath import FastPath
from gtmcluster.dnsdata import keys
from gtmcluster.dnsdata.keys import DnssecKeyError
from gtmcluster.dnssec import keyset, rollover
from gtmcluster.dnssec.signer import Signer
from gtmcluster.node import Node
from tests.support import configs

GTMCLUSTER = Path(sys.executable).parent / "gtmcluster"
ZONE = "example.com"
ORIGIN = dns.name.from_text(ZONE)
NOW = 1_780_000_000.0


def rrset() -> dns.rrset.RRset:
    return dns.rrset.from_text("www.example.com.", 30, "IN", "A", "192.0.2.1")


def signed_by(zone_keys: list[keys.ZoneKey]) -> tuple[set[int], set[int], Signer]:
    """The key tags over the data and over the DNSKEY set; every signature validates."""
    s = Signer(ORIGIN, zone_keys, lambda: NOW)
    data = s.rrsig("www", rrset)
    dns.dnssec.validate(rrset(), data, {ORIGIN: s.dnskey}, now=NOW)
    dns.dnssec.validate(s.dnskey, s.dnskey_rrsig(), {ORIGIN: s.dnskey}, now=NOW)
    return {r.key_tag for r in data}, {r.key_tag for r in s.dnskey_rrsig()}, s


def tag(path: Path, zone: str = ZONE) -> int:
    (key,) = [k for k in keys.load(path.parent, zone) if k.path == path]
    return key.tag


def test_a_csk_rolls_by_pre_publication_with_the_key_set_double_signed(tmp_path: Path) -> None:
    (first,) = keys.keygen(tmp_path, ZONE)
    old_tag = tag(first)
    ds_before = {d.key_tag for d in keys.ds_records(ZONE, keys.load(tmp_path, ZONE))}

    nxt = rollover.publish(tmp_path, ZONE)
    assert nxt.name == "example.com.csk.next.key" and nxt.stat().st_mode & 0o777 == 0o600
    new_tag = tag(nxt)
    data, keyset_tags, s = signed_by(keys.load(tmp_path, ZONE))
    assert {dns.dnssec.key_id(k) for k in s.dnskey} == {old_tag, new_tag}  # published
    assert data == {old_tag}  # but not signing the data
    assert keyset_tags == {old_tag, new_tag}  # the parent may take the new DS now
    assert {d.key_tag for d in keys.ds_records(ZONE, keys.load(tmp_path, ZONE))} == {old_tag, new_tag}

    active, retired = rollover.roll(tmp_path, ZONE, force=True)
    assert (active.name, retired.name) == ("example.com.csk.key", "example.com.csk.old.key")
    assert (tag(active), tag(retired)) == (new_tag, old_tag)
    data, keyset_tags, s = signed_by(keys.load(tmp_path, ZONE))
    assert data == {new_tag}
    assert {dns.dnssec.key_id(k) for k in s.dnskey} == {old_tag, new_tag}  # the old one still published
    assert keyset_tags == {old_tag, new_tag}  # and signing the key set, for the old DS
    assert ds_before == {old_tag}

    assert rollover.finish(tmp_path, ZONE, force=True) == retired
    data, keyset_tags, s = signed_by(keys.load(tmp_path, ZONE))
    assert data == keyset_tags == {new_tag} and len(s.dnskey) == 1


def test_a_zsk_rolls_by_pre_publication_the_ksk_unchanged(tmp_path: Path) -> None:
    ksk, zsk = keys.keygen(tmp_path, ZONE, algorithm=keys.ED25519, split=True)
    ksk_tag, old_zsk = tag(ksk), tag(zsk)
    nxt = rollover.publish(tmp_path, ZONE)
    assert nxt.name == "example.com.zsk.next.key"
    new_zsk = tag(nxt)
    loaded = keys.load(tmp_path, ZONE)
    assert {k.algorithm for k in loaded} == {keys.ED25519}  # the active key's algorithm
    data, keyset_tags, s = signed_by(loaded)
    assert (data, keyset_tags, len(s.dnskey)) == ({old_zsk}, {ksk_tag}, 3)
    rollover.roll(tmp_path, ZONE, force=True)
    data, keyset_tags, s = signed_by(keys.load(tmp_path, ZONE))
    assert (data, keyset_tags, len(s.dnskey)) == ({new_zsk}, {ksk_tag}, 3)
    rollover.finish(tmp_path, ZONE, force=True)
    data, keyset_tags, s = signed_by(keys.load(tmp_path, ZONE))
    assert (data, keyset_tags, len(s.dnskey)) == ({new_zsk}, {ksk_tag}, 2)


def test_a_ksk_rolls_by_double_signature_of_the_key_set_the_zsk_unchanged(tmp_path: Path) -> None:
    ksk, zsk = keys.keygen(tmp_path, ZONE, split=True)
    old_ksk, zsk_tag = tag(ksk), tag(zsk)
    nxt = rollover.publish(tmp_path, ZONE, ksk=True)
    assert nxt.name == "example.com.ksk.next.key" and nxt.stat().st_mode & 0o777 == 0o600
    new_ksk = tag(nxt)
    loaded = keys.load(tmp_path, ZONE)
    assert {(k.role, k.state) for k in loaded} == {("ksk", "active"), ("ksk", "next"), ("zsk", "active")}
    data, keyset_tags, s = signed_by(loaded)
    # published and signing the key set at once: a resolver with either DS validates it
    assert (data, keyset_tags, len(s.dnskey)) == ({zsk_tag}, {old_ksk, new_ksk}, 3)
    assert {d.key_tag for d in keys.ds_records(ZONE, loaded)} == {old_ksk, new_ksk}

    active, retired = rollover.roll(tmp_path, ZONE, ksk=True, force=True)
    assert (active.name, retired.name) == ("example.com.ksk.key", "example.com.ksk.old.key")
    assert (tag(active), tag(retired)) == (new_ksk, old_ksk)
    data, keyset_tags, s = signed_by(keys.load(tmp_path, ZONE))
    assert (data, keyset_tags, len(s.dnskey)) == ({zsk_tag}, {old_ksk, new_ksk}, 3)

    assert rollover.finish(tmp_path, ZONE, ksk=True, force=True) == retired
    data, keyset_tags, s = signed_by(keys.load(tmp_path, ZONE))
    assert (data, keyset_tags, len(s.dnskey)) == ({zsk_tag}, {new_ksk}, 2)
    assert not keys.roll_state_path(tmp_path, ZONE).exists()  # the roll is over: its record goes


def test_a_ksk_and_a_zsk_roll_independently(tmp_path: Path) -> None:
    keys.keygen(tmp_path, ZONE, split=True)
    rollover.publish(tmp_path, ZONE, ksk=True)
    rollover.publish(tmp_path, ZONE)
    assert len(keys.load(tmp_path, ZONE)) == 4
    rollover.roll(tmp_path, ZONE, force=True)
    with pytest.raises(DnssecKeyError, match=r"no retired KSK"):
        rollover.finish(tmp_path, ZONE, ksk=True, force=True)
    rollover.roll(tmp_path, ZONE, ksk=True, force=True)
    rollover.finish(tmp_path, ZONE, force=True)
    rollover.finish(tmp_path, ZONE, ksk=True, force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["example.com.ksk.key", "example.com.zsk.key"]


def test_a_ksk_roll_of_a_csk_zone_is_refused(tmp_path: Path) -> None:
    keys.keygen(tmp_path, ZONE)
    with pytest.raises(DnssecKeyError, match=r"has a combined signing key \(CSK\), no KSK: roll it without --ksk"):
        rollover.publish(tmp_path, ZONE, ksk=True)
    with pytest.raises(DnssecKeyError, match=r"no KSK"):
        rollover.roll(tmp_path, ZONE, ksk=True, force=True)


def test_each_step_changes_the_key_set_digest_members_compare(tmp_path: Path) -> None:
    keys.keygen(tmp_path, ZONE)

    def digest() -> str:
        return keyset.keyset_digest(ZONE, tuple(keys.load(tmp_path, ZONE)))

    seen = [digest()]
    rollover.publish(tmp_path, ZONE)
    seen.append(digest())
    rollover.roll(tmp_path, ZONE, force=True)
    seen.append(digest())  # (the same two keys: a validator sees the same DNSKEY set)
    rollover.finish(tmp_path, ZONE, force=True)
    seen.append(digest())
    assert seen[0] != seen[1] == seen[2] != seen[3] != seen[0]


def test_steps_out_of_order_are_refused_with_the_step_to_take(tmp_path: Path) -> None:
    keys.keygen(tmp_path, ZONE)
    with pytest.raises(DnssecKeyError, match=r"has no pre-published CSK .*--publish-only"):
        rollover.roll(tmp_path, ZONE, force=True)
    with pytest.raises(DnssecKeyError, match="no retired CSK"):
        rollover.finish(tmp_path, ZONE, force=True)
    rollover.publish(tmp_path, ZONE)
    with pytest.raises(DnssecKeyError, match="already has a pre-published CSK: roll to it"):
        rollover.publish(tmp_path, ZONE)
    rollover.roll(tmp_path, ZONE, force=True)
    with pytest.raises(DnssecKeyError, match=r"finish that roll first .*--finish"):
        rollover.publish(tmp_path, ZONE)
    with pytest.raises(DnssecKeyError, match="has no pre-published CSK"):
        rollover.roll(tmp_path, ZONE, force=True)


def test_a_rolled_key_without_an_active_one_of_its_role_is_a_load_error(tmp_path: Path) -> None:
    keys.keygen(tmp_path, ZONE)
    (tmp_path / "example.com.csk.key").rename(tmp_path / "example.com.zsk.next.key")
    keys.keygen(tmp_path / "b", ZONE)
    (tmp_path / "b" / "example.com.csk.key").rename(tmp_path / "example.com.csk.key")
    with pytest.raises(DnssecKeyError, match=r"example.com.zsk.next.key rolls a ZSK, and example.com has none active"):
        keys.load(tmp_path, ZONE)


def test_keygen_force_replaces_a_roll_in_progress(tmp_path: Path) -> None:
    keys.keygen(tmp_path, ZONE)
    rollover.publish(tmp_path, ZONE)
    with pytest.raises(DnssecKeyError, match="already exist"):
        keys.keygen(tmp_path, ZONE, split=True)
    keys.keygen(tmp_path, ZONE, split=True, force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["example.com.ksk.key", "example.com.zsk.key"]


def run(*args: str | Path) -> str:
    done = subprocess.run([GTMCLUSTER, "dnssec", *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_rollover_commands(tmp_path: Path) -> None:
    keys_dir = tmp_path / "keys"
    run("keygen", ZONE, "--dir", keys_dir)
    published = run("keygen", ZONE, "--dir", keys_dir, "--publish-only")
    assert (
        published
        == f"wrote {keys_dir}/example.com.csk.next.key (mode 0600): published, not signing yet; reload every member\n"
    )
    listed = run("ds", ZONE, "--dir", keys_dir, "--dnskey")
    assert "; csk (active), key tag" in listed and "; csk (next), key tag" in listed
    assert listed.count(" IN DS ") == 2
    rolled = run("roll", ZONE, "--dir", keys_dir, "--force")
    assert rolled == (
        f"{keys_dir}/example.com.csk.key now signs; {keys_dir}/example.com.csk.old.key is retired "
        "(still published); reload every member\n"
    )
    assert (
        run("roll", ZONE, "--dir", keys_dir, "--finish", "--force")
        == f"removed {keys_dir}/example.com.csk.old.key; reload every member\n"
    )
    refused = subprocess.run(
        [GTMCLUSTER, "dnssec", "roll", ZONE, "--dir", keys_dir], capture_output=True, text=True, check=False
    )
    assert refused.returncode == 1
    assert refused.stderr.startswith("gtmcluster dnssec roll: example.com has no pre-published CSK")


def test_a_reload_after_each_step_answers_with_the_right_keys(tmp_path: Path) -> None:
    """Through the real answer path: after the roll (the same two keys, in other states) a
    reload makes a new signer, so the wide IP answer is signed by the new key at once."""
    keys.keygen(tmp_path / "keys", "example.test")
    config = configs.base()
    config["zones"][0]["dnssec"] = {"keys": "keys"}
    path = configs.write(tmp_path, config)
    node = Node(load(path), "n1", clock=lambda: 1000.0, rng=random.Random(7))
    old_tag = tag(tmp_path / "keys" / "example.test.csk.key", "example.test")

    def answer_tags() -> tuple[set[int], int]:
        q = dns.message.make_query("gslb.example.test", "A", want_dnssec=True, use_edns=0)
        reply = FastPath(node.responder).handle(q.to_wire(), "192.0.2.200")
        assert reply is not None
        msg = dns.message.from_wire(reply)
        name = msg.question[0].name
        rrsig = msg.find_rrset(msg.answer, name, dns.rdataclass.IN, dns.rdatatype.RRSIG, dns.rdatatype.A)
        signer = node.responder.signing.signers[(b"example", b"test")]
        return {r.key_tag for r in rrsig}, len(signer.dnskey)

    assert answer_tags() == ({old_tag}, 1)
    new_tag = tag(rollover.publish(tmp_path / "keys", "example.test"), "example.test")
    node.reload(load(path))
    assert answer_tags() == ({old_tag}, 2)
    rollover.roll(tmp_path / "keys", "example.test", force=True)
    node.reload(load(path))
    assert answer_tags() == ({new_tag}, 2)
    rollover.finish(tmp_path / "keys", "example.test", force=True)
    node.reload(load(path))
    assert answer_tags() == ({new_tag}, 1)
