"""The query log of a real node (``twistd -n gtm``): real `dig` queries, read back with BIND's
`dnstap-read -y` and with the log's own reader (for the extra field, which dnstap-read does
not print)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gtmcluster.querylog import dnstap
from tests.conftest import require_tool
from tests.support import configs, poll
from tests.support.apiclient import call
from tests.support.dig import dig
from tests.support.nodeproc import loopback_address, running_node

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("dig_tool")]

DNS_PORT = 5353


def records(path: Path) -> list[dnstap.Record]:
    if not path.exists():
        return []
    return [dnstap.decode(r) for r in dnstap.read_frames(path.read_bytes()).records]


def test_real_queries_are_logged_and_read_by_dnstap_read(tmp_path: Path) -> None:
    require_tool("dnstap-read", "bind9-dnsutils")
    address = loopback_address()
    config = configs.base(address, DNS_PORT)
    config["dns_server"]["query_log"] = {"path": "var/log/queries.dnstap", "max_bytes": 1_000_000, "keep": 2}
    path = configs.write(tmp_path, config)
    log = tmp_path / "var" / "log" / "queries.dnstap"
    api = (address, 8053)
    with running_node(path, "n1", address, DNS_PORT, tmp_path):
        # a wide IP with a client subnet (from a trusted resolver: the subnet decides), twice:
        # the second answer comes from the kept decision (the fast path); a static name; TCP
        for args in (["+subnet=198.51.100.0/24"], ["+subnet=198.51.100.0/24"], ["+tcp"]):
            assert dig(address, DNS_PORT, "gslb.example.test", "A", *args, source="127.0.0.1").answer
        assert dig(address, DNS_PORT, "www.example.test", "A", source="127.0.0.1").answer
        # (the node's own readiness queries went first: SOA example.test)
        logged = poll.until(
            lambda: [r for r in records(log) if b"\x04gslb" in r.query_message or b"\x03www" in r.query_message],
            what="the dig queries in the query log",
            details=lambda: records(log),
        )
        poll.until(lambda: len([r for r in records(log) if b"\x03www" in r.query_message]) == 1, what="all four")
        # the file of the running node (no STOP frame yet), read with the log's own reader
        lines = subprocess.run(
            [sys.executable, "-m", "gtmcluster.querylog.read", str(log)], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        decided = "[gtm1 wideip=gslb.example.test pool=p slot=preferred method=topology members=vs1]"
        assert sum(line.endswith(f" UDP gslb.example.test. A NOERROR 10.0.1.1 {decided}") for line in lines) == 2
        status = call(api, "/api/v1/status")[1]
        assert status["query_log"]["path"] == str(log)
        assert status["query_log"]["written"] >= 4 and status["query_log"]["dropped"] == 0
        metrics = call(api, "/metrics")[1]
        assert "gtm_query_log_dropped_total 0.0" in metrics
    logged = [r for r in records(log) if b"\x04gslb" in r.query_message or b"\x03www" in r.query_message]
    assert dnstap.read_frames(log.read_bytes()).stopped  # closed with its STOP frame on SIGTERM
    assert [(r.type, r.protocol) for r in logged] == [
        (dnstap.AUTH_RESPONSE, dnstap.UDP),
        (dnstap.AUTH_RESPONSE, dnstap.UDP),
        (dnstap.AUTH_RESPONSE, dnstap.TCP),
        (dnstap.AUTH_RESPONSE, dnstap.UDP),
    ]
    # the client subnet is in the query logged; the subnet's region r1 chose DC1 (vs1)
    assert bytes([0, 8, 0, 7, 0, 1, 24, 0, 198, 51, 100]) in logged[0].query_message
    by_subnet = dnstap.Decided("gslb.example.test", "p", "preferred", "topology", ("vs1",))
    assert [dnstap.parse_extra(r.extra) for r in logged[:2]] == [by_subnet, by_subnet]
    # over TCP from 127.0.0.1 (region none: the "any" rule) DC3
    assert dnstap.parse_extra(logged[2].extra) == dnstap.Decided(
        "gslb.example.test", "p", "preferred", "topology", ("vs3",)
    )
    assert dnstap.parse_extra(logged[3].extra) is None  # a static name: no wide IP decided

    out = subprocess.run(["dnstap-read", "-y", str(log)], capture_output=True, text=True, check=True).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    shown = [d["message"] for d in docs if "gslb" in str(d) or "www.example" in str(d)]
    assert len(shown) == 4
    for message, (protocol, name) in zip(
        shown, [("UDP", "gslb"), ("UDP", "gslb"), ("TCP", "gslb"), ("UDP", "www")], strict=True
    ):
        assert message["type"] == "AUTH_RESPONSE"
        assert message["query_address"] == "127.0.0.1"
        assert message["response_address"] == address and message["response_port"] == DNS_PORT
        assert message["socket_protocol"] == protocol
        data = message["response_message_data"]
        assert data["QUESTION_SECTION"] == [f"{name}.example.test. IN A"]
    assert {d["identity"] for d in docs} == {"n1"}
    # the reply echoes the client subnet with the scope it was decided on, and vs1's address
    first = shown[0]["response_message_data"]
    assert first["OPT_PSEUDOSECTION"]["EDNS"]["CLIENT-SUBNET"] == "198.51.100.0/24/24"
    assert first["ANSWER_SECTION"] == ["gslb.example.test. 30 IN A 10.0.1.1"]


def test_a_reload_to_another_path_closes_one_file_and_opens_the_other(tmp_path: Path) -> None:
    """SIGHUP with a changed query_log.path: the old file ends with its STOP frame and holds
    the queries before; the queries after go to the new file. (A file of the node's own, not
    shared by config sync: a published config never moves the query log, issue 30.)"""
    address = loopback_address()
    config = configs.base(address, DNS_PORT)
    config["sync_group"]["config_sync"] = False
    config["dns_server"]["query_log"] = {"path": "var/log/first.dnstap"}
    path = configs.write(tmp_path, config)
    first, second = tmp_path / "var/log/first.dnstap", tmp_path / "var/log/second.dnstap"
    api = (address, 8053)
    with running_node(path, "n1", address, DNS_PORT, tmp_path) as node:
        assert dig(address, DNS_PORT, "www.example.test", "A", source="127.0.0.1").answer
        poll.until(lambda: any(b"\x03www" in r.query_message for r in records(first)), what="the first query logged")
        generation = call(api, "/api/v1/status")[1]["config_generation"]
        config["dns_server"]["query_log"] = {"path": "var/log/second.dnstap"}
        configs.write(tmp_path, config)
        node.proc.send_signal(signal.SIGHUP)
        poll.until(lambda: call(api, "/api/v1/status")[1]["config_generation"] > generation, what="the reload")
        poll.until(lambda: dnstap.read_frames(first.read_bytes()).stopped, what="the first file closed")
        assert dig(address, DNS_PORT, "gslb.example.test", "A", source="127.0.0.1").answer
        poll.until(lambda: any(b"\x04gslb" in r.query_message for r in records(second)), what="the second query")
    assert not any(b"\x04gslb" in r.query_message for r in records(first))
    assert not any(b"\x03www" in r.query_message for r in records(second))
    assert dnstap.read_frames(second.read_bytes()).stopped
