"""DNS conformance: our node against two reference authoritative servers, gdnsd and knotd.

The three serve one static zone on their own loopback addresses, and each gets the same
probes (`tests/support/conformance.py`) as raw bytes: every record type with and without
EDNS, negative answers, header flags, opcodes, EDNS versions, flags and options, truncation
and TCP, malformed packets, responses, ANY, zone transfers, UPDATE, NOTIFY and CH TXT
version.bind, over UDP and TCP. Their
replies are reduced to comparable fields (`tests/support/dnsview.py`) and compared field
by field: a difference to either reference fails, unless `DIFFERENCES` lists it with the
reason (and an entry that no longer differs fails too, so the table stays true). Each probe
also states what our reply must show whatever the references do (`Probe.expect`).

Our node is a real ``twistd gtm`` process; its UDP replies are asked twice, so the second
comes from the fast path's template and must be the same bytes as the first. `dnsviz`
then probes and checks the zone as served by our node.
"""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_tool
from tests.support import configs, dnsclient, dnsview, refservers
from tests.support.conformance import (
    GDNSD,
    KNOTD,
    NAME_SERVERS,
    ORIGIN,
    OURS,
    PORT,
    PROBES,
    SERVERS,
    VERSION,
    ZONE,
    AnyOf,
    Probe,
    base_name,
    query,
)
from tests.support.dnsview import View
from tests.support.nodeproc import RunningNode, running_node

pytestmark = [pytest.mark.process]


# --- what may differ, and why ------------------------------------------------------------------

#: (probe, server, field) -> why our reply differs there from that reference server; probe
#: "*" is every probe with an OPT in both replies
DIFFERENCES: dict[tuple[str, str, str], str] = {
    ("*", "gdnsd", "payload"): "gdnsd advertises 1024 in its OPT (it sends up to 1232); we say 1232, the size we send",
    ("*", "gdnsd", "keepalive"): "gdnsd announces its TCP idle timeout (edns-tcp-keepalive, RFC 7828) on TCP "
    "replies unasked; we send the option to no one (our timeout: dns_server.tcp_idle_timeout)",
    ("SOA", "gdnsd", "answer"): "gdnsd gives the SOA record the negative TTL (MINIMUM, 300) everywhere; "
    "we and knotd give it its own TTL (3600), and min(TTL, MINIMUM) only in negative answers (RFC 2308 5)",
    ("SOA +edns", "gdnsd", "answer"): "as for SOA",
    ("NS", "gdnsd", "additional"): "gdnsd leaves the name servers' addresses out; we and knotd add in-zone glue "
    "(RFC 1034 4.3.2 additional section processing)",
    ("NS +edns", "gdnsd", "additional"): "as for NS",
    ("MX", "knotd", "additional"): "knotd adds the mail exchanger's address; we add additional records only for NS "
    "(optional, RFC 1034 4.3.2; minimal responses)",
    ("MX +edns", "knotd", "additional"): "as for MX",
    ("CNAME", "gdnsd", "answer"): "gdnsd does not follow CNAMEs inside the zone (its experimental_no_chain default); "
    "we and knotd follow the chain (RFC 1034 4.3.2 step 3a)",
    ("CNAME to a missing name", "gdnsd", "rcode"): "gdnsd does not follow the CNAME, so it does not find the "
    "target missing; we and knotd say NXDOMAIN for the target, with the CNAME (RFC 6604)",
    ("CNAME to a missing name", "gdnsd", "authority"): "as for rcode",
    ("referral with glue over 512 B", "gdnsd", "authority"): "all three set TC; gdnsd keeps nothing of a truncated "
    "referral, we keep the NS RRset and the glue RRsets that fit",
    ("referral with glue over 512 B", "gdnsd", "additional"): "as for authority",
    ("referral with glue over 512 B", "knotd", "additional"): "all three set TC; knotd skips a glue RRset that does "
    "not fit and tries the next ones, we stop at the first",
    ("DS at a delegation", "gdnsd", "aa"): "gdnsd answers DS at a zone cut with a referral; we and knotd answer from "
    "the parent side, authoritatively (RFC 4035 3.1.4.1)",
    ("DS at a delegation", "gdnsd", "authority"): "as for aa",
    ("DS at a delegation", "gdnsd", "additional"): "as for aa",
    ("CD copied", "gdnsd", "cd"): "RFC 4035 3.2.2 has the name server copy CD into the response, as BIND does; "
    "gdnsd and knotd clear it",
    ("CD copied", "knotd", "cd"): "as for gdnsd",
    ("NSID", "knotd", "options"): "knotd sends the host's name as NSID by default; we do not identify the node (NSID "
    "is optional, RFC 5001)",
    ("cookie", "gdnsd", "options"): "gdnsd implements server cookies; we do not, and ignore the option, "
    "as RFC 7873 has servers without cookie support do",
    ("expire", "knotd", "options"): "knotd reports the zone's expire timer; we do not implement EXPIRE, which is "
    "optional and only for zone transfer peers (RFC 7314)",
    ("client subnet", "knotd", "options"): "knotd ignores ECS; we echo it with scope 0 for static data, as gdnsd does "
    "(RFC 7871 7.2.1)",
    ("ANY", "gdnsd", "answer"): "both answer minimally (RFC 8482): gdnsd with a synthesized HINFO, we and knotd "
    "with one RRset that exists",
    ("QTYPE OPT", "gdnsd", "rcode"): "OPT is a pseudo-record, never stored (RFC 6891 6.1.1), so asking for it "
    "is malformed: FORMERR, as BIND says; gdnsd and knotd answer NODATA",
    ("QTYPE OPT", "gdnsd", "aa"): "as for rcode",
    ("QTYPE OPT", "gdnsd", "authority"): "as for rcode",
    ("QTYPE OPT", "knotd", "rcode"): "as for gdnsd",
    ("QTYPE OPT", "knotd", "aa"): "as for gdnsd",
    ("QTYPE OPT", "knotd", "authority"): "as for gdnsd",
    ("QTYPE MAILB", "knotd", "rcode"): "MAILB and MAILA are obsolete meta-types: NOTIMP, as gdnsd and BIND say; "
    "knotd answers NODATA",
    ("QTYPE MAILB", "knotd", "aa"): "as for rcode",
    ("QTYPE MAILB", "knotd", "authority"): "as for rcode",
    ("QTYPE 0", "knotd", "rcode"): "type 0 is reserved, not a meta-type: NODATA, as gdnsd answers; knotd NOTIMP",
    ("QTYPE 0", "knotd", "aa"): "as for rcode",
    ("QTYPE 0", "knotd", "authority"): "as for rcode",
}
for _probe in ("AXFR over TCP", "IXFR", "IXFR over UDP"):
    DIFFERENCES[(_probe, "gdnsd", "rcode")] = (
        "gdnsd serves no zone transfers (NOTIMP); our zone has transfer.allow without the prober's address, "
        "and we refuse it with REFUSED (RFC 5936 2.2.1), as BIND does"
    )
    DIFFERENCES[(_probe, "knotd", "rcode")] = (
        "both refuse a source outside the transfer ACL: we REFUSED (RFC 5936 2.2.1, as BIND), knotd NOTAUTH"
    )
for _probe in ("UPDATE", "NOTIFY"):
    DIFFERENCES[(_probe, "knotd", "rcode")] = (
        "we implement no UPDATE or NOTIFY: NOTIMP, as gdnsd; knotd NOTAUTH (its ACL)"
    )
for _server, _string in (("gdnsd", "gdnsd/3"), ("knotd", "Knot DNS 3.2.6")):
    DIFFERENCES[("CH TXT version.bind", _server, "answer")] = (
        f"{_server} says {_string!r}, we say dns_server.version (and REFUSED when it is unset, the default)"
    )
for _server, _string in (("gdnsd", "gdnsd/3"), ("knotd", "the host's name")):
    for _field in ("rcode", "answer"):
        DIFFERENCES[("CH TXT hostname.bind", _server, _field)] = (
            f"{_server} says {_string}; we answer only version.bind/version.server in class CH, and only when "
            "configured: the node's host name is not for the internet to read"
        )
for _probe in ("QDCOUNT 2", "truncated question", "64-octet label", "name over 255 octets", "compression loop"):
    DIFFERENCES[(_probe, "knotd", "reply")] = "knotd drops malformed queries silently; we say FORMERR, as gdnsd"
DIFFERENCES |= {
    ("trailing bytes", "gdnsd", "rcode"): "gdnsd ignores bytes after the message; we say FORMERR, as knotd",
    ("OPT in the authority section", "gdnsd", "rcode"): "gdnsd ignores the authority section; we say FORMERR, as knotd",
    ("OPT not at the root", "gdnsd", "rcode"): "the OPT's owner MUST be the root (RFC 6891 6.1.2): we say FORMERR, "
    "as BIND does; gdnsd and knotd answer anyway",
    ("OPT not at the root", "knotd", "rcode"): "as for gdnsd",
    ("client subnet with host bits", "knotd", "rcode"): "knotd ignores ECS; a subnet with bits set beyond its "
    "prefix is rejected with FORMERR (RFC 7871 6), as gdnsd does",
    ("client subnet family 3", "knotd", "rcode"): "knotd ignores ECS; an unknown family is rejected with FORMERR "
    "(RFC 7871), as gdnsd does",
    ("two client subnet options", "gdnsd", "rcode"): "we take two ECS options as malformed (which one would the "
    "answer's scope be for?); gdnsd uses one",
    ("two client subnet options", "knotd", "rcode"): "knotd ignores ECS; as for gdnsd",
}
for _server in SERVERS:
    DIFFERENCES[("ANCOUNT 1", _server, "rcode")] = (
        f"{_server} ignores the answer section; a query with records in it is malformed: FORMERR"
    )


# --- running the servers -------------------------------------------------------------------


@dataclass
class Replies:
    """Every probe's reply from every server, as views (ours twice over UDP)."""

    views: dict[str, dict[str, View]]
    repeats: dict[str, tuple[bytes | None, bytes | None]]
    node: RunningNode


def ask(server: tuple[str, int], probe: Probe) -> bytes | None:
    if probe.tcp:
        return dnsview.tcp_exchange(probe.packet, server)
    return dnsview.udp_exchange(probe.packet, server)


def ask_all(server: tuple[str, int]) -> dict[str, bytes | None]:
    return {p.name: ask(server, p) for p in PROBES}


@pytest.fixture(scope="module")
def replies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replies]:
    require_tool("gdnsd", "gdnsd")
    require_tool("knotd", "knot")
    ours_dir = tmp_path_factory.mktemp("ours")
    gdnsd_dir = tmp_path_factory.mktemp("gdnsd")
    knotd_dir = tmp_path_factory.mktemp("knotd")
    raw_config = configs.base(OURS, PORT)
    del raw_config["wideips"]
    # transfers open to a network the probes do not come from: refused by the ACL, as knotd's
    raw_config["zones"] = [{"origin": ORIGIN, "file": f"{ORIGIN}.zone", "transfer": {"allow": ["192.0.2.0/24"]}}]
    raw_config["dns_server"] = {"version": VERSION}
    (ours_dir / f"{ORIGIN}.zone").write_text(ZONE)
    config = configs.write(ours_dir, raw_config)
    gdnsd_cmd = refservers.gdnsd_files(gdnsd_dir, ORIGIN, ZONE, GDNSD, PORT)
    knotd_cmd = refservers.knotd_files(knotd_dir, ORIGIN, ZONE, KNOTD, PORT)
    with (
        running_node(config, "n1", OURS, PORT, ours_dir) as node,
        refservers.running("gdnsd", gdnsd_cmd, GDNSD, PORT, ORIGIN, gdnsd_dir) as gdnsd,
        refservers.running("knotd", knotd_cmd, KNOTD, PORT, ORIGIN, knotd_dir) as knotd,
        concurrent.futures.ThreadPoolExecutor(3) as pool,
    ):
        # the three servers are asked at once (each probe in turn on each)
        jobs = {
            "ours": pool.submit(ask_all, node.server),
            "gdnsd": pool.submit(ask_all, gdnsd.server),
            "knotd": pool.submit(ask_all, knotd.server),
        }
        got = {name: job.result() for name, job in jobs.items()}
        again = {p.name: ask(node.server, p) for p in PROBES if not p.tcp}
        views = {p.name: {server: dnsview.view(p.packet, got[server][p.name]) for server in jobs} for p in PROBES}
        yield Replies(views, {name: (got["ours"][name], again[name]) for name in again}, node)
        for ref in (gdnsd, knotd):
            assert ref.proc.poll() is None, f"{ref.name} died during the probes:\n{ref.output_text()}"


PROBE_IDS = [p.name for p in PROBES]


@pytest.mark.parametrize("probe", PROBES, ids=PROBE_IDS)
def test_reply_matches_the_reference_servers(replies: Replies, probe: Probe) -> None:
    """Our reply equals gdnsd's and knotd's in every compared field, except the listed
    differences; and every listed difference is still there."""
    views = replies.views[probe.name]
    problems = []
    for server in SERVERS:
        found = dnsview.differences(views["ours"], views[server], probe.fields)
        listed = {f for (p, s, f) in DIFFERENCES if p == base_name(probe.name) and s == server}
        for p, s, f in DIFFERENCES:
            if p == "*" and s == server and f in found and views["ours"]["edns"] is not None:
                del found[f]
        for f, (ours, theirs) in found.items():
            if f not in listed:
                problems.append(f"{server} differs in {f}: ours {ours!r}, {server} {theirs!r}")
        for f in listed - found.keys():
            problems.append(f"listed difference ({probe.name!r}, {server!r}, {f!r}) is gone: remove it")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("probe", PROBES, ids=PROBE_IDS)
def test_our_reply_is_what_the_rfcs_ask(replies: Replies, probe: Probe) -> None:
    """Our reply shows what the probe expects (the RFCs' answer, whatever the references do)."""
    ours = replies.views[probe.name]["ours"]
    for key, wanted in probe.expect.items():
        value = ours[key]
        if isinstance(wanted, AnyOf):
            assert value in wanted, f"{key}: {value!r}, expected one of {wanted!r}"
        elif callable(wanted):
            assert wanted(value), f"{key}: {value!r} is not as expected"
        else:
            assert value == wanted, f"{key}: {value!r}, expected {wanted!r}"


@pytest.mark.parametrize("probe", [p for p in PROBES if not p.tcp], ids=[p.name for p in PROBES if not p.tcp])
def test_udp_reply_is_the_same_bytes_when_asked_again(replies: Replies, probe: Probe) -> None:
    """Asked twice, our node sends the same bytes: the second reply (from the fast path's
    template where the query qualifies) is the general path's first."""
    first, second = replies.repeats[probe.name]
    assert first == second


def test_every_listed_difference_for_all_probes_shows(replies: Replies) -> None:
    """Each difference listed for every probe ("*") is seen in at least one reply."""
    for p, server, f in DIFFERENCES:
        if p == "*":
            seen = [
                name
                for name, views in replies.views.items()
                if f in dnsview.differences(views["ours"], views[server], dnsview.COMPARED)
            ]
            assert seen, f"listed difference ({p!r}, {server!r}, {f!r}) is gone: remove it"


def test_no_traceback_in_our_log(replies: Replies) -> None:
    """No probe made our node log a traceback, and it still answers."""
    assert "Traceback" not in replies.node.log_text()
    reply = dnsclient.parse(dnsclient.udp(query(f"www.{ORIGIN}"), replies.node.server))
    assert dnsclient.addresses(reply) == ["192.0.2.80"]


# --- dnsviz over the zone as our node serves it ----------------------------------------------

#: dnsviz warnings that may show, with the reason (any other warning, and any error, fails)
DNSVIZ_WARNINGS: dict[str, str] = {}


def findings(report: object, kind: str) -> Iterator[Any]:
    """Every entry of every *kind* list ("errors", "warnings", "servers") anywhere in dnsviz's report."""
    if isinstance(report, dict):
        for key, value in report.items():
            if key == kind and isinstance(value, list):
                yield from value
            else:
                yield from findings(value, kind)
    elif isinstance(report, list):
        for item in report:
            yield from findings(item, kind)


def test_dnsviz_finds_no_errors_in_the_served_zone(replies: Replies, tmp_path: Path) -> None:
    """dnsviz, probing our node as the zone's authoritative server (every check it makes of
    a server: EDNS versions, flags and options, TCP, truncation, negative answers), reports
    no error, and only the listed warnings."""
    require_tool("dnsviz", "dnsviz")
    probed = tmp_path / "probe.json"
    run = subprocess.run(
        ["dnsviz", "probe", "-A", "-x", f"{ORIGIN}+:{NAME_SERVERS}", "-o", str(probed), ORIGIN],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    grok = subprocess.run(
        ["dnsviz", "grok", "-r", str(probed)], capture_output=True, text=True, timeout=120, check=False
    )
    assert grok.returncode == 0, grok.stdout + grok.stderr
    report = json.loads(grok.stdout)
    zone = report[f"{ORIGIN}."]
    assert zone["status"] == "NOERROR", zone
    answered = set(findings(zone["queries"], "servers"))
    assert OURS in answered, f"dnsviz got no answer from our node: {answered}"
    errors = list(findings(report, "errors"))
    assert not errors, json.dumps(errors, indent=1)
    unexplained = [w for w in findings(report, "warnings") if w.get("code") not in DNSVIZ_WARNINGS]
    assert not unexplained, json.dumps(unexplained, indent=1)
