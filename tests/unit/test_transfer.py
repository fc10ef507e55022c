"""Zone transfer out: the ``tsig_keys`` and ``zones[].transfer`` config, AXFR/IXFR messages
as dnspython's own transfer client reads them, and TSIG accepted and refused (RFC 8945)."""

from __future__ import annotations

import base64
import ipaddress
import time
from pathlib import Path
from typing import Any

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdatatype
import dns.rrset
import dns.tsig
import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.defer import Deferred

from gtmcluster.config.dnsserver import TransferLimits
from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.dns.responder import Responder
from gtmcluster.dns.transfer import Outgoing, Transfers, transfer_type
from gtmcluster.dnsdata.zone import TYPE_AXFR, TYPE_IXFR
from gtmcluster.runtime.stats import QueryStats
from tests.support import configs
from tests.unit.test_config_errors import assert_form, find, problems_of, put

SECRET = base64.b64encode(bytes(range(32))).decode()
OTHER_SECRET = base64.b64encode(bytes(range(1, 33))).decode()
KEY = "xfr-key"
RING = {dns.name.from_text(KEY): dns.tsig.Key(KEY, SECRET, "hmac-sha256")}
WRONG_RING = {dns.name.from_text(KEY): dns.tsig.Key(KEY, OTHER_SECRET, "hmac-sha256")}


def transfer_config(tmp_path: Path, tsig: bool = True, zone: str = configs.ZONE, **transfer: Any) -> Config:
    config = configs.base()
    config["tsig_keys"] = {KEY: {"algorithm": "hmac-sha256", "secret": SECRET}}
    settings: dict[str, Any] = {"allow": ["127.0.0.0/8"], **transfer}
    if tsig:
        settings["tsig"] = KEY
    config["zones"][0]["transfer"] = settings
    return load(configs.write(tmp_path, config, zone=zone))


def sent(replies: Any) -> list[bytes]:
    """The messages of a transfer begun at once (without a cooperator), all of them; or the
    messages of a refusal as they are."""
    if isinstance(replies, Outgoing):
        messages = replies.start()
        assert not isinstance(messages, Deferred)
        return list(messages)
    assert isinstance(replies, list)
    return replies


class Sync:
    """A config's transfers without a cooperator, which answer at once: the answer as a
    list of messages (or None), a transfer begun and all its messages made."""

    def __init__(self, transfers: Transfers):
        self.transfers = transfers

    def answer(self, data: bytes, source: str, tcp: bool, udp_size: int = 1232) -> list[bytes] | None:
        replies = self.transfers.answer(data, source, tcp, udp_size)
        return None if replies is None else sent(replies)


def transfers_of(config: Config) -> Sync:
    return Sync(Transfers(config.zones, config.transfers))


def request(qtype: str = "AXFR", ring: Any = RING, name: str = "example.test", serial: int | None = None) -> Any:
    query = dns.message.make_query(name, qtype)
    if serial is not None:
        soa = dns.rrset.from_text(name + ".", 0, "IN", "SOA", f". . {serial} 0 0 0 0")
        query.authority.append(soa)
    if ring is not None:
        query.use_tsig(ring, KEY)
    return query


def read(messages: list[bytes], query: Any, ring: Any = RING) -> list[Any]:
    """The messages of a transfer as dnspython's transfer client checks them: every one
    verified, the TSIG chain followed from the request's MAC (RFC 8945 5.3.1)."""
    out = []
    ctx = None
    for wire in messages:
        message = dns.message.from_wire(
            wire,
            keyring=ring if query.had_tsig or ring is None else False,
            request_mac=query.mac if query.had_tsig else b"",
            xfr=True,
            tsig_ctx=ctx,
            multi=True,
        )
        ctx = message.tsig_ctx
        out.append(message)
    return out


def records(messages: list[Any]) -> list[tuple[str, str]]:
    return [(str(r.name), dns.rdatatype.to_text(r.rdtype)) for m in messages for r in m.answer for _ in r]


# --- config ------------------------------------------------------------------------------------


def test_config_holds_keys_and_transfer_settings(tmp_path: Path) -> None:
    config = transfer_config(tmp_path, notify=["127.0.0.1:5300", "192.0.2.9"])
    settings = config.transfers[(b"example", b"test")]
    assert settings.allow == (ipaddress.ip_network("127.0.0.0/8"),)
    assert settings.notify == ((ipaddress.ip_address("127.0.0.1"), 5300), (ipaddress.ip_address("192.0.2.9"), 53))
    assert settings.tsig is not None and settings.tsig.secret == bytes(range(32))
    assert settings.tsig.algorithm == "hmac-sha256."


def test_secret_file_is_read_relative_to_the_config(tmp_path: Path) -> None:
    configs.write_secret(tmp_path / "xfr.key", SECRET + "\n")
    config = configs.base()
    config["tsig_keys"] = {KEY: {"secret_file": "xfr.key"}}
    config["zones"][0]["transfer"] = {"allow": ["127.0.0.1/32"], "tsig": KEY}
    loaded = load(configs.write(tmp_path, config))
    tsig = loaded.transfers[(b"example", b"test")].tsig
    assert tsig is not None and tsig.secret == bytes(range(32)) and tsig.algorithm == "hmac-sha256."


def _with_key(key: Any, transfer: Any = None) -> Any:
    def apply(config: dict[str, Any]) -> None:
        config["tsig_keys"] = {KEY: key}
        config["zones"][0]["transfer"] = transfer or {"allow": ["127.0.0.1/32"], "tsig": KEY}

    return apply


@pytest.mark.parametrize(
    ("mutation", "path", "fragment"),
    [
        (_with_key({"secret": "not base64!"}), "tsig_keys.xfr-key.secret", "is not base64"),
        (_with_key({"secret": "c2hvcnQ="}), "tsig_keys.xfr-key.secret", "5 bytes: at least 16"),
        (_with_key({"secret": SECRET, "algorithm": "hmac-md5"}), "tsig_keys.xfr-key.algorithm", "hmac-sha256"),
        (_with_key({"secret": SECRET, "secret_file": "x"}), "tsig_keys.xfr-key.secret_file", "not both"),
        (_with_key({"secret_file": "missing.key"}), "tsig_keys.xfr-key.secret_file", "cannot read"),
        (_with_key({"algorithm": "hmac-sha256"}), "tsig_keys.xfr-key", "missing key 'secret'"),
        (
            _with_key({"secret": SECRET}, {"allow": ["127.0.0.1/32"], "tsig": "nokey"}),
            "zones[0].transfer.tsig",
            "no TSIG key 'nokey'",
        ),
        (_with_key({"secret": SECRET}, {"tsig": KEY}), "zones[0].transfer", "missing key 'allow'"),
        (_with_key({"secret": SECRET}, {"allow": []}), "zones[0].transfer.allow", "allows no one"),
        (_with_key({"secret": SECRET}, {"allow": ["10.0.0.300/8"]}), "zones[0].transfer.allow[0]", "10.0.0.300/8"),
        (
            _with_key({"secret": SECRET}, {"allow": ["10.0.0.0/8"], "notify": ["nowhere:53"]}),
            "zones[0].transfer.notify[0]",
            "ADDRESS:PORT",
        ),
        (
            _with_key({"secret": SECRET}, {"allow": ["10.0.0.0/8"], "alow": []}),
            "zones[0].transfer.alow",
            "did you mean 'allow'",
        ),
        (put("zones", 0, "transfer", value="yes"), "zones[0].transfer", "a mapping {allow, notify, tsig}"),
    ],
)
def test_bad_transfer_config_is_one_clear_problem(tmp_path: Path, mutation: Any, path: str, fragment: str) -> None:
    file, problems = problems_of(tmp_path, mutation)
    assert_form(find(problems, path, fragment), file, path)


def test_transfer_limits_are_read_with_their_defaults(tmp_path: Path) -> None:
    """``dns_server.transfer`` sets the caps, the stall deadline and the TSIG window; each
    key left out keeps its default (BIND's transfers-out and transfers-per-ns, 30 s, 300 s)."""
    assert load(configs.write(tmp_path / "default", configs.base())).dns_server.transfer == TransferLimits(
        10, 2, 30.0, 300
    )
    config = configs.base()
    config["dns_server"]["transfer"] = {"max_in_flight": 4, "stall_timeout": 2.5, "tsig_max_fudge": 60}
    limits = load(configs.write(tmp_path / "set", config)).dns_server.transfer
    assert limits == TransferLimits(max_in_flight=4, max_per_source=2, stall_timeout=2.5, tsig_max_fudge=60)
    # max_per_source left out follows a max_in_flight below it, with no problem about a key
    # that was never written
    config["dns_server"]["transfer"] = {"max_in_flight": 1}
    assert load(configs.write(tmp_path / "one", config)).dns_server.transfer.max_per_source == 1


@pytest.mark.parametrize(
    ("value", "path", "fragment"),
    [
        ({"max_in_flight": 0}, "dns_server.transfer.max_in_flight", "0 is out of range (1 to 10000)"),
        ({"max_per_source": 2.5}, "dns_server.transfer.max_per_source", "2.5 is not a whole number"),
        (
            {"max_in_flight": 3, "max_per_source": 4},
            "dns_server.transfer.max_per_source",
            "4 is more than max_in_flight",
        ),
        ({"stall_timeout": 0}, "dns_server.transfer.stall_timeout", "0 is out of range (1 to 3600)"),
        ({"tsig_max_fudge": 70000}, "dns_server.transfer.tsig_max_fudge", "70000 is out of range (1 to 65535)"),
        ({"max_transfers": 3}, "dns_server.transfer.max_transfers", "unknown key"),
        ("ten", "dns_server.transfer", "a mapping {max_in_flight, max_per_source, stall_timeout"),
    ],
)
def test_bad_transfer_limits_are_one_clear_problem(tmp_path: Path, value: Any, path: str, fragment: str) -> None:
    file, problems = problems_of(tmp_path, put("dns_server", "transfer", value=value))
    assert_form(find(problems, path, fragment), file, path)


def test_a_zone_signed_online_is_not_transferred(tmp_path: Path) -> None:
    """Its copy would be the unsigned zone file: a secondary would serve it unsigned under the
    parent's DS. Refused, at the transfer's key path, until transfers carry signatures."""

    def both(config: dict[str, Any]) -> None:
        _with_key({"secret": SECRET})(config)
        config["zones"][0]["dnssec"] = {"keys": "keys"}

    file, problems = problems_of(tmp_path, both)
    assert_form(
        find(problems, "zones[0].transfer", "signed online (dnssec) is not transferred yet"), file, "zones[0].transfer"
    )


# --- AXFR ---------------------------------------------------------------------------------------


def test_axfr_is_the_zone_file_soa_first_and_last_signed(tmp_path: Path) -> None:
    config = transfer_config(tmp_path)
    query = request()
    messages = read(transfers_of(config).answer(query.to_wire(), "127.0.0.1", tcp=True) or [], query)
    assert all(m.rcode() == dns.rcode.NOERROR and m.flags & dns.flags.AA for m in messages)
    assert all(m.had_tsig for m in messages)
    got = records(messages)
    assert got[0] == got[-1] == ("example.test.", "SOA")
    # the zone file's 19 records and the SOA again; the wide IP name has none of its own
    assert len(got) == 20
    assert ("www.example.test.", "A") in got and ("_sip._udp.example.test.", "SRV") in got
    assert not any(name.startswith("gslb.") for name, _ in got)


def test_a_big_zone_takes_several_messages_each_signed_in_the_chain(tmp_path: Path) -> None:
    zone = configs.ZONE + "".join(f"host{i} IN A 10.{i // 65536}.{i // 256 % 256}.{i % 256}\n" for i in range(5000))
    config = transfer_config(tmp_path, zone=zone)
    query = request()
    wires = transfers_of(config).answer(query.to_wire(), "127.0.0.1", tcp=True) or []
    messages = read(wires, query)
    assert len(messages) > 3 and all(len(w) < 65535 for w in wires)
    assert all(m.had_tsig for m in messages)
    assert len(messages[0].question) == 1
    got = records(messages)
    assert len(got) == 19 + 5000 + 1 and got[0] == got[-1] == ("example.test.", "SOA")
    assert [t for _, t in got].count("SOA") == 2
    # a message of the chain altered is caught by the client's verification
    broken = list(wires)
    broken[2] = broken[2][:-40] + bytes(40)
    with pytest.raises(dns.exception.DNSException):
        read(broken, query)


def test_unsigned_transfer_when_no_key_is_configured(tmp_path: Path) -> None:
    config = transfer_config(tmp_path, tsig=False)
    query = request(ring=None)
    messages = read(transfers_of(config).answer(query.to_wire(), "127.0.0.1", tcp=True) or [], query, ring=None)
    assert not any(m.had_tsig for m in messages)
    assert len(records(messages)) == 20


@pytest.mark.parametrize("source", ["192.0.2.1", "::1", "10.1.2.3"])
def test_sources_outside_allow_are_refused(tmp_path: Path, source: str) -> None:
    config = transfer_config(tmp_path)
    query = request()
    (wire,) = transfers_of(config).answer(query.to_wire(), source, tcp=True) or []
    reply = dns.message.from_wire(wire, keyring=False)
    assert reply.rcode() == dns.rcode.REFUSED and not reply.answer


def test_ipv4_mapped_sources_are_matched_as_ipv4(tmp_path: Path) -> None:
    config = transfer_config(tmp_path)
    query = request()
    assert len(read(transfers_of(config).answer(query.to_wire(), "::ffff:127.0.0.1", tcp=True) or [], query)) == 1


def test_udp_and_names_below_the_apex_are_refused(tmp_path: Path) -> None:
    transfers = transfers_of(transfer_config(tmp_path))
    for query, tcp in ((request(), False), (request(name="www.example.test"), True)):
        (wire,) = transfers.answer(query.to_wire(), "127.0.0.1", tcp=tcp) or []
        assert dns.message.from_wire(wire, keyring=False).rcode() == dns.rcode.REFUSED


def test_zones_without_transfer_are_left_to_the_responder(tmp_path: Path) -> None:
    config = load(configs.write(tmp_path, configs.base()))
    assert transfers_of(config).answer(request(ring=None).to_wire(), "127.0.0.1", tcp=True) is None


# --- TSIG refused -------------------------------------------------------------------------------


def _refusal(tmp_path: Path, query: Any) -> Any:
    (wire,) = transfers_of(transfer_config(tmp_path)).answer(query.to_wire(), "127.0.0.1", tcp=True) or []
    return dns.message.from_wire(wire, keyring=False)


def test_missing_tsig_is_notauth(tmp_path: Path) -> None:
    reply = _refusal(tmp_path, request(ring=None))
    assert reply.rcode() == dns.rcode.NOTAUTH and not reply.answer and reply.tsig is None


def test_wrong_secret_is_notauth_badsig_unsigned(tmp_path: Path) -> None:
    reply = _refusal(tmp_path, request(ring=WRONG_RING))
    assert reply.rcode() == dns.rcode.NOTAUTH and not reply.answer
    assert reply.tsig[0].error == dns.rcode.BADSIG and reply.tsig[0].mac == b""
    # our time, so a client does not take it for a clock problem (dig says "tsig indicates error")
    assert abs(reply.tsig[0].time_signed - time.time()) < 60


def test_unknown_key_is_notauth_badkey_unsigned(tmp_path: Path) -> None:
    ring = {dns.name.from_text("other-key"): dns.tsig.Key("other-key", SECRET, "hmac-sha256")}
    query = dns.message.make_query("example.test", "AXFR")
    query.use_tsig(ring, "other-key")
    reply = _refusal(tmp_path, query)
    assert reply.rcode() == dns.rcode.NOTAUTH and reply.tsig[0].error == dns.rcode.BADKEY
    assert reply.tsig[0].mac == b""


class _HourBehind:
    """A clock an hour behind, for the signer of a stale request."""

    @staticmethod
    def time() -> float:
        return time.time() - 3600


def test_stale_time_is_notauth_badtime_signed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    query = request()
    monkeypatch.setattr(dns.message, "time", _HourBehind)
    stale = query.to_wire()
    monkeypatch.undo()
    (wire,) = transfers_of(transfer_config(tmp_path)).answer(stale, "127.0.0.1", tcp=True) or []
    reply = dns.message.from_wire(wire, keyring=False)
    assert reply.rcode() == dns.rcode.NOTAUTH and reply.tsig is not None
    tsig = reply.tsig[0]
    assert tsig.error == dns.rcode.BADTIME
    # signed (RFC 8945 5.2.3), our time in the other data
    assert len(tsig.mac) == 32 and len(tsig.other) == 6
    assert abs(int.from_bytes(tsig.other, "big") - time.time()) < 60


class _Behind:
    """A signer's clock *seconds* behind ours."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def time(self) -> float:
        return time.time() - self.seconds


@pytest.mark.parametrize(
    ("fudge", "behind", "cap", "accepted"),
    [
        (65535, 1000, None, False),  # its fudge would let it in: our 300 s do not (a replay window of 18 h)
        (65535, 1000, 3600, True),  # a wider window, configured
        (300, 200, None, True),
        (10, 100, None, False),  # its own fudge is the narrower
    ],
)
def test_the_time_window_is_the_lesser_of_the_request_fudge_and_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fudge: int, behind: float, cap: int | None, accepted: bool
) -> None:
    """RFC 8945 5.2.3 checks the time against the request's fudge, which the request
    states itself; ``dns_server.transfer.tsig_max_fudge`` (300 s) caps it: beyond, BADTIME."""
    config = transfer_config(tmp_path)
    query = request()
    query.use_tsig(RING, KEY, fudge=fudge)
    monkeypatch.setattr(dns.message, "time", _Behind(behind))
    signed = query.to_wire()
    monkeypatch.undo()
    transfers = (
        Transfers(config.zones, config.transfers)
        if cap is None
        else Transfers(config.zones, config.transfers, max_fudge=cap)
    )
    wires = Sync(transfers).answer(signed, "127.0.0.1", tcp=True) or []
    if accepted:
        assert len(records(read(wires, query))) == 20
        return
    (wire,) = wires
    reply = dns.message.from_wire(wire, keyring=False)
    assert reply.rcode() == dns.rcode.NOTAUTH and reply.tsig is not None
    assert reply.tsig[0].error == dns.rcode.BADTIME and len(reply.tsig[0].mac) == 32


# --- IXFR ---------------------------------------------------------------------------------------


def test_ixfr_from_an_old_serial_is_a_full_transfer(tmp_path: Path) -> None:
    config = transfer_config(tmp_path)
    query = request("IXFR", serial=0)
    messages = read(transfers_of(config).answer(query.to_wire(), "127.0.0.1", tcp=True) or [], query)
    got = records(messages)
    assert len(got) == 20 and got[0] == got[-1] == ("example.test.", "SOA")


@pytest.mark.parametrize("serial", [1, 2, 2**31])
def test_ixfr_at_our_serial_or_later_is_our_soa_alone(tmp_path: Path, serial: int) -> None:
    config = transfer_config(tmp_path)
    query = request("IXFR", serial=serial)
    messages = read(transfers_of(config).answer(query.to_wire(), "127.0.0.1", tcp=True) or [], query)
    assert records(messages) == [("example.test.", "SOA")]
    assert messages[0].answer[0][0].serial == 1


# --- the cheap question check -------------------------------------------------------------------

LABEL = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=20)


@given(
    st.lists(LABEL, min_size=0, max_size=5), st.sampled_from(["A", "AXFR", "IXFR", "SOA", "ANY", "TXT"]), st.booleans()
)
def test_transfer_type_agrees_with_dnspython(labels: list[str], qtype: str, edns: bool) -> None:
    query = dns.message.make_query(".".join(labels) + ".", qtype, use_edns=edns)
    expected = {"AXFR": TYPE_AXFR, "IXFR": TYPE_IXFR}.get(qtype, 0)
    assert transfer_type(query.to_wire()) == expected
    query.set_opcode(dns.opcode.NOTIFY)
    assert transfer_type(query.to_wire()) == 0


def test_a_signed_request_for_a_zone_without_a_key_is_badkey(tmp_path: Path) -> None:
    (wire,) = transfers_of(transfer_config(tmp_path, tsig=False)).answer(request().to_wire(), "127.0.0.1", True) or []
    reply = dns.message.from_wire(wire, keyring=False)
    assert reply.rcode() == dns.rcode.NOTAUTH and reply.tsig is not None
    assert reply.tsig[0].error == dns.rcode.BADKEY


# --- the responder's TCP entry ------------------------------------------------------------------


def _no_wideips(*args: Any) -> Any:
    raise AssertionError("no wide IP is asked here")


def test_the_responder_hands_transfers_over_tcp_and_answers_the_rest(tmp_path: Path) -> None:
    config = transfer_config(tmp_path)
    stats = QueryStats()
    transfers = Transfers(config.zones, config.transfers)
    responder = Responder(config.zones, {}, _no_wideips, stats=stats, transfers=transfers)
    query = request()
    replies = responder.handle_stream(query.to_wire(), "127.0.0.1")
    assert isinstance(replies, Outgoing)
    assert not stats.queries  # (counted once begun or refused)
    messages = read(sent(replies), query)
    assert len(records(messages)) == 20
    assert stats.queries[("", "AXFR", "NOERROR", "transfer")] == 1
    # refused for want of a slot (the connection says): counted as REFUSED, signed
    again = request()
    outgoing = responder.handle_stream(again.to_wire(), "127.0.0.1")
    assert isinstance(outgoing, Outgoing)
    busy = dns.message.from_wire(outgoing.refuse(), keyring=RING, request_mac=again.mac)
    assert busy.rcode() == dns.rcode.REFUSED and busy.had_tsig
    assert stats.queries[("", "AXFR", "REFUSED", "transfer")] == 1
    # an ordinary query over TCP: one answer, as before
    ordinary = responder.handle_stream(dns.message.make_query("www.example.test", "A").to_wire(), "127.0.0.1")
    assert isinstance(ordinary, list)
    (wire,) = ordinary
    assert dns.message.from_wire(wire).answer[0][0].to_text() == "192.0.2.80"
    # AXFR over UDP is refused, signed as the request was (RFC 8945 5.3)
    reply = responder.handle(query.to_wire(), "127.0.0.1")
    assert reply is not None
    refused = dns.message.from_wire(reply, keyring=RING, request_mac=query.mac)
    assert refused.rcode() == dns.rcode.REFUSED and refused.had_tsig


def test_without_transfer_settings_the_responder_refuses_transfers(tmp_path: Path) -> None:
    config = load(configs.write(tmp_path, configs.base()))
    responder = Responder(config.zones, {}, _no_wideips, transfers=Transfers(config.zones, config.transfers))
    assert responder.transfers is None  # (no per-query work for TCP queries)
    refused = responder.handle_stream(request(ring=None).to_wire(), "127.0.0.1")
    assert isinstance(refused, list)
    assert dns.message.from_wire(refused[0]).rcode() == dns.rcode.REFUSED


def test_an_rrset_too_big_for_one_message_is_servfail_not_a_broken_transfer(tmp_path: Path) -> None:
    zone = configs.ZONE + "".join(f'huge IN TXT "{i:03d}{"x" * 250}"\n' for i in range(300))
    config = transfer_config(tmp_path, zone=zone)
    (wire,) = transfers_of(config).answer(request().to_wire(), "127.0.0.1", tcp=True) or []
    assert dns.message.from_wire(wire, keyring=False).rcode() == dns.rcode.SERVFAIL


@pytest.fixture(scope="module")
def signed_transfers(tmp_path_factory: pytest.TempPathFactory) -> Sync:
    return transfers_of(transfer_config(tmp_path_factory.mktemp("fuzz")))


@given(st.data())
def test_damaged_requests_never_raise(signed_transfers: Sync, data: Any) -> None:
    """Bytes of a signed request changed and cut anywhere: a reply or None, never an error."""
    wire = bytearray(request(data.draw(st.sampled_from(["AXFR", "IXFR"]))).to_wire())
    for _ in range(data.draw(st.integers(1, 4))):
        wire[data.draw(st.integers(0, len(wire) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(12, len(wire)))
    replies = signed_transfers.answer(bytes(wire[:cut]), "127.0.0.1", tcp=True)
    assert replies is None or all(isinstance(r, bytes) and len(r) >= 12 for r in replies)
