"""Keys the same on every member (`gtmcluster.dnssec.keyset`): a digest of each signed zone's
DNSKEY set, told in the peer Hello (an optional argument, so older members still connect) and
again after a reload, compared per peer, shown in `/api/v1/status` and `gtmcluster status`;
the keys themselves never leave the member (neither the API nor a config bundle carries them)."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path

import dns.name
import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.logger import capturedLogs
from twisted.protocols import amp

from gtmcluster.api.status import status
from gtmcluster.cli.status import problems, summarize, verdict
from gtmcluster.config.load import load
from gtmcluster.dnsdata import keys
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnssec import keyset
from gtmcluster.groupconfig import bundle
from gtmcluster.node import Node
from gtmcluster.sync import commands
from tests.support import configs
from tests.support.cluster import MemoryCluster

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ZONE = "example.test."


def made(directory: Path, split: bool = False) -> tuple[keys.ZoneKey, ...]:
    keys.keygen(directory, ZONE, split=split)
    return tuple(keys.load(directory, ZONE))


# -- the digest ------------------------------------------------------------------------------


def test_the_digest_is_sha256_over_the_canonical_dnskey_rrset(tmp_path: Path) -> None:
    zone_keys = made(tmp_path / "k", split=True)
    origin = dns.name.from_text(ZONE)
    wires = sorted(k.dnskey.to_digestable(origin) for k in zone_keys)
    expected = hashlib.sha256((origin.to_wire() or b"") + b"".join(len(w).to_bytes(2, "big") + w for w in wires))
    assert keyset.keyset_digest(ZONE, zone_keys) == expected.hexdigest()[:16]
    # what a validator sees: the order of the keys and the zone's spelling do not count
    assert keyset.keyset_digest("EXAMPLE.test", tuple(reversed(zone_keys))) == expected.hexdigest()[:16]


def test_the_same_keys_copied_elsewhere_agree_and_other_keys_do_not(tmp_path: Path) -> None:
    ours = made(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "copy")
    copied = tuple(keys.load(tmp_path / "copy", ZONE))
    other = made(tmp_path / "b")
    assert keyset.keyset_digest(ZONE, ours) == keyset.keyset_digest(ZONE, copied)
    assert keyset.keyset_digest(ZONE, ours) != keyset.keyset_digest(ZONE, other)
    assert keyset.keyset_digest(ZONE, ours) != keyset.keyset_digest("other.test", ours)


def test_digests_name_each_signed_zone(tmp_path: Path) -> None:
    zone_keys = made(tmp_path / "k")
    signed: dict[Name, tuple[keys.ZoneKey, ...]] = {(b"example", b"test"): zone_keys}
    assert keyset.digests(signed) == {ZONE: keyset.keyset_digest(ZONE, zone_keys)}
    assert keyset.digests({}) == {}


def test_disagreements_are_zones_signed_with_other_keys_or_by_one_member_only() -> None:
    ours = {"a.test.": "1111", "b.test.": "2222", "c.test.": "3333"}
    theirs = {"a.test.": "1111", "b.test.": "9999", "d.test.": "4444"}
    assert keyset.disagreements(ours, theirs) == ["b.test.", "c.test.", "d.test."]
    assert keyset.disagreements(ours, dict(ours)) == []


@given(st.dictionaries(st.text(max_size=40), st.text(max_size=64), max_size=20))
def test_encoded_digests_decode_to_themselves(keysets: dict[str, str]) -> None:
    assert keyset.decode(keyset.encode(keysets)) == keysets


@given(st.one_of(st.text(max_size=200), st.builds(json.dumps, st.recursive(st.none() | st.integers(), st.lists))))
def test_a_peers_malformed_digests_are_refused_not_a_traceback(text: str) -> None:
    decoded = keyset.decode(text)
    assert decoded is None or all(isinstance(v, str) for v in decoded.values())


def test_too_many_zones_or_overlong_values_are_malformed() -> None:
    assert keyset.decode(json.dumps({f"z{i}.": "0" for i in range(keyset.MAX_ZONES + 1)})) is None
    assert keyset.decode(json.dumps({"a.": "0" * 65})) is None
    assert keyset.decode(json.dumps({"a.": 1})) is None
    assert keyset.decode("[]") is None


# -- Hello: an optional argument -------------------------------------------------------------


class OldHello(amp.Command):
    """Hello as a member from before key-set digests spells it."""

    commandName = b"Hello"
    arguments = [(name, arg) for name, arg in commands.Hello.arguments if name != b"dnssec_keys"]  # noqa: RUF012


def test_hello_without_digests_parses_and_an_older_member_ignores_ours() -> None:
    sent = {
        "node": "n1",
        "group": "g",
        "datacenter": "DC1",
        "version": 4,
        "min_version": 1,
        "config_digest": "c",
    }
    old_box = OldHello.makeArguments(sent, None)
    assert commands.Hello.parseArguments(old_box, None)["dnssec_keys"] is None
    new_box = commands.Hello.makeArguments({**sent, "dnssec_keys": '{"example.test.":"ab"}'}, None)
    assert OldHello.parseArguments(new_box, None) == sent


# -- two members ---------------------------------------------------------------------------


@pytest.fixture
def pair(tmp_path: Path) -> MemoryCluster:
    return MemoryCluster(["n1", "n2"], tmp_path / "certs")


def test_members_with_the_same_keys_agree(pair: MemoryCluster) -> None:
    for r in pair.replicators.values():
        r.set_dnssec_keys({ZONE: "aaaa"})
    with capturedLogs() as events:
        pair.connect("n1", "n2")
    for name, other in (("n1", "n2"), ("n2", "n1")):
        peer = pair.replicators[name].peers[other]
        assert (peer.dnssec_keys, peer.dnssec_mismatch) == ({ZONE: "aaaa"}, [])
    assert not [e for e in events if e.get("event") == "dnssec_keys_mismatch"]


def test_a_member_with_other_keys_is_warned_of_at_connection(pair: MemoryCluster) -> None:
    pair.replicators["n1"].set_dnssec_keys({ZONE: "aaaa"})
    pair.replicators["n2"].set_dnssec_keys({ZONE: "bbbb", "other.test.": "cccc"})
    with capturedLogs() as events:
        pair.connect("n1", "n2")
    assert pair.replicators["n1"].peers["n2"].dnssec_mismatch == [ZONE, "other.test."]
    assert pair.replicators["n2"].peers["n1"].dnssec_mismatch == [ZONE, "other.test."]
    warned = [e for e in events if e.get("event") == "dnssec_keys_mismatch"]
    assert {e["peer"] for e in warned} == {"n1", "n2"}
    assert all(e["log_level"].name == "warn" for e in warned)


def test_a_reload_with_other_keys_reaches_the_peer_by_heartbeat(pair: MemoryCluster) -> None:
    for r in pair.replicators.values():
        r.set_dnssec_keys({ZONE: "aaaa"})
    pair.connect("n1", "n2")
    with capturedLogs() as events:
        pair.replicators["n2"].set_dnssec_keys({ZONE: "bbbb"})  # (a reload on n2 with new keys)
        pair.advance(2.0)
    assert pair.replicators["n1"].peers["n2"].dnssec_keys == {ZONE: "bbbb"}
    assert pair.replicators["n1"].peers["n2"].dnssec_mismatch == [ZONE]
    assert pair.replicators["n2"].peers["n1"].dnssec_mismatch == [ZONE]  # (compared at its own reload)
    assert len([e for e in events if e.get("event") == "dnssec_keys_mismatch"]) == 2
    with capturedLogs() as events:
        pair.replicators["n1"].set_dnssec_keys({ZONE: "bbbb"})  # n1 reloads the same keys
        pair.advance(2.0)
    assert pair.replicators["n2"].peers["n1"].dnssec_mismatch == []
    assert pair.replicators["n1"].peers["n2"].dnssec_mismatch == []
    assert [e["peer"] for e in events if e.get("event") == "dnssec_keys_agree"] == ["n2", "n1"]


def test_a_peer_that_never_told_digests_is_unknown_not_a_mismatch(pair: MemoryCluster) -> None:
    pair.replicators["n1"].set_dnssec_keys({ZONE: "aaaa"})
    pair.replicators["n2"].dnssec_keys_text = "not json"  # what a broken peer might say
    with capturedLogs() as events:
        pair.connect("n1", "n2")
    assert pair.replicators["n1"].peers["n2"].dnssec_keys is None
    assert pair.replicators["n1"].peers["n2"].connected
    assert [e["peer"] for e in events if e.get("event") == "dnssec_keys_malformed"] == ["n2"]


# -- status, and what is never served --------------------------------------------------------


def signed_config(tmp_path: Path, directory: str = "keys") -> Path:
    raw = configs.add_member(configs.base(), "n2", "DC2", "127.0.0.2")
    raw["zones"][0]["dnssec"] = {"keys": directory}
    path = configs.write(tmp_path, raw)
    keys.keygen(tmp_path / directory, raw["zones"][0]["origin"])
    return path


def test_status_shows_digests_and_a_disagreement_as_a_problem(tmp_path: Path) -> None:
    config = load(signed_config(tmp_path))
    ours = keyset.digests(config.dnssec)
    assert len(ours) == 1
    cluster = MemoryCluster(["n1", "n2"], tmp_path / "certs")
    nodes = {}
    for name in ("n1", "n2"):
        nodes[name] = Node(config, name, clock=cluster.clock.seconds, rng=random.Random(1))
        nodes[name].ready = True
        cluster.add(name, store=nodes[name].store).set_dnssec_keys(ours)
    zone = next(iter(ours))
    cluster.replicators["n2"].set_dnssec_keys({zone: "0123456789abcdef"})
    cluster.connect("n1", "n2")
    cluster.advance(3.0)
    reports = {n: status(nodes[n], cluster.replicators[n], cluster.clock.seconds()) for n in nodes}
    assert reports["n1"]["dnssec_keys"] == ours
    (peer,) = reports["n1"]["peers"]
    assert (peer["dnssec_keys"], peer["dnssec_keys_match"], peer["dnssec_keys_differ"]) == (
        {zone: "0123456789abcdef"},
        False,
        [zone],
    )
    assert f"peer n2 serves other DNSSEC keys for {zone}: validators reject one of us" in problems(reports["n1"])
    summary = summarize(reports)
    assert not summary.dnssec_keys_agree and not summary.ok
    assert f"DNSSEC KEYS DIFFER: {zone} n1={ours[zone]}, n2=0123456789abcdef" in verdict(summary)
    cluster.replicators["n2"].set_dnssec_keys(ours)
    cluster.advance(3.0)
    reports = {n: status(nodes[n], cluster.replicators[n], cluster.clock.seconds()) for n in nodes}
    assert reports["n1"]["peers"][0]["dnssec_keys_match"] is True
    assert summarize(reports).dnssec_keys_agree
    assert not [p for p in problems(reports["n1"]) if "DNSSEC" in p]


def secrets(directory: Path) -> list[str]:
    """What of a key directory must never be shown: the PEM and the private key's numbers."""
    out = []
    for path in directory.iterdir():
        pem = path.read_text()
        body = "".join(line for line in pem.splitlines() if not line.startswith("-----"))
        out += [pem, body, body[20:60]]
    return out


def test_the_status_answer_holds_no_key_material(tmp_path: Path) -> None:
    config = load(signed_config(tmp_path))
    cluster = MemoryCluster(["n1", "n2"], tmp_path / "certs")
    node = Node(config, "n1", clock=cluster.clock.seconds)
    cluster.add("n1", store=node.store).set_dnssec_keys(keyset.digests(config.dnssec))
    cluster.replicators["n2"].set_dnssec_keys(keyset.digests(config.dnssec))
    cluster.connect("n1", "n2")
    text = json.dumps(status(node, cluster.replicators["n1"], cluster.clock.seconds()))
    assert "PRIVATE KEY" not in text
    assert not [s for s in secrets(tmp_path / "keys") if s in text]


def test_a_config_bundle_never_carries_the_keys(tmp_path: Path) -> None:
    path = signed_config(tmp_path)
    made_bundle = bundle.make(path, 1, 0, "n1", 0.0)
    assert not [name for name in made_bundle.files if "key" in name]
    sent = bundle.encode(made_bundle)
    assert b"PRIVATE KEY" not in sent
    assert not [s for s in secrets(tmp_path / "keys") if s.encode() in sent]
