"""Zone transfer out to a real secondary: Debian's knotd pulls example.test from a real node
(``twistd -n gtm``) by AXFR signed with TSIG (HMAC-SHA256), answers from it, and follows a
new serial when the node reloads (SIGHUP) and sends it a signed NOTIFY (its refresh timer
is an hour: only the NOTIFY makes it transfer within the test). And hostile clients inside
``allow``: pipelining transfers and reading nothing costs the node a send buffer, UDP
answers go on, and a transfer that makes no progress is cut (issue 30)."""

from __future__ import annotations

import base64
import contextlib
import re
import select
import signal
import socket
import struct
import time
from pathlib import Path

import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdatatype
import dns.tsig
import pytest

from tests.conftest import require_tool
from tests.support import configs, dig, dnsclient, nodeproc, poll, refservers

SECRET = base64.b64encode(bytes(range(100, 132))).decode()
KEY = "xfr-key"
#: enough records for a transfer of several messages: knotd checks the TSIG chain
HOSTS = "".join(f"host{i} IN A 10.0.{i // 256}.{i % 256}\n" for i in range(3000))
RING = {dns.name.from_text(KEY): dns.tsig.Key(KEY, SECRET, "hmac-sha256")}


def _knotd(workdir: Path, primary: str, address: str, key_secret: str) -> list[str]:
    """knotd as a secondary of example.test, pulling from *primary* (ADDRESS@PORT)."""
    (workdir / "run").mkdir(parents=True, exist_ok=True)
    (workdir / "storage").mkdir(exist_ok=True)
    config = workdir / "knot.conf"
    config.write_text(
        "server:\n"
        f'    rundir: "{workdir / "run"}"\n'
        f"    listen: {address}@5353\n"
        "database:\n"
        f'    storage: "{workdir / "storage"}"\n'
        "log:\n"
        "  - target: stderr\n"
        "    any: info\n"
        "key:\n"
        f"  - id: {KEY}\n"
        "    algorithm: hmac-sha256\n"
        f"    secret: {key_secret}\n"
        "remote:\n"
        "  - id: primary\n"
        f"    address: {primary}\n"
        f"    via: {address}\n"
        f"    key: {KEY}\n"
        "acl:\n"
        "  - id: notify-from-primary\n"
        "    address: 127.0.0.0/8\n"  # (NOTIFY leaves from a socket the system binds)
        f"    key: {KEY}\n"
        "    action: notify\n"
        "zone:\n"
        "  - domain: example.test\n"
        "    master: primary\n"
        "    acl: notify-from-primary\n"
        f'    storage: "{workdir / "storage"}"\n'
        "    zonefile-sync: -1\n"
    )
    return ["knotd", "-c", str(config)]


def _ask(server: tuple[str, int], name: str, rdtype: str = "A") -> dns.message.Message:
    return dnsclient.parse(dnsclient.udp(dnsclient.query(name, rdtype), server))


def test_knotd_pulls_the_zone_with_tsig_and_follows_a_new_serial(tmp_path: Path) -> None:
    require_tool("knotd", "knot")
    ours, theirs = nodeproc.loopback_address(), nodeproc.loopback_address()
    config = configs.base(ours)
    # (in a file of the member's own: a config shared by config sync never carries a secret)
    configs.write_secret(tmp_path / "xfr.key", SECRET + "\n")
    config["tsig_keys"] = {KEY: {"algorithm": "hmac-sha256", "secret_file": "xfr.key"}}
    config["zones"][0]["transfer"] = {"allow": [f"{theirs}/32"], "notify": [f"{theirs}:5353"], "tsig": KEY}
    path = configs.write(tmp_path, config, zone=configs.ZONE + HOSTS)
    knot_dir = tmp_path / "knotd"
    knot_dir.mkdir()
    with (
        nodeproc.running_node(path, "n1", ours, 5353, tmp_path) as node,
        refservers.running(
            "knotd", _knotd(knot_dir, f"{ours}@5353", theirs, SECRET), theirs, 5353, "example.test", knot_dir
        ) as knotd,
    ):
        # the secondary answers from what it pulled: static records as the zone file has them
        www = _ask(knotd.server, "www.example.test")
        assert [r.to_text() for r in _ask(knotd.server, "host2999.example.test").answer[0]] == ["10.0.11.183"]
        assert [r.to_text() for r in www.answer[0]] == ["192.0.2.80"]
        # the wide IP name carries no records in a transfer: the secondary knows nothing there
        assert _ask(knotd.server, "gslb.example.test").rcode() == dns.rcode.NXDOMAIN
        # (while the node itself answers it by load balancing)
        assert _ask(node.server, "gslb.example.test").answer
        # the right key from a source outside `allow` (not knotd's address): REFUSED
        signed = dns.message.make_query("example.test", "AXFR")
        signed.use_tsig(RING, KEY)
        refused = dns.message.from_wire(dnsclient.tcp(signed.to_wire(), node.server), keyring=False)
        assert refused.rcode() == dns.rcode.REFUSED and not refused.answer

        # a change of a few records with a new serial and a reload: the node NOTIFYs knotd,
        # which asks IXFR from serial 1 and gets the difference from the node's journal
        (tmp_path / "example.test.zone").write_text(
            configs.ZONE.replace(" 1 3600 600", " 2 3600 600").replace("192.0.2.80", "192.0.2.81")
            + HOSTS.replace("host7 IN A 10.0.0.7\n", "")
            + "new IN A 192.0.2.77\n"
        )
        node.proc.send_signal(signal.SIGHUP)
        poll.until(lambda: _ask(node.server, "new.example.test").answer, 20, "the reload", details=node.log_text)
        new = poll.until(
            lambda: _ask(knotd.server, "new.example.test").answer,
            20,
            "knotd to follow serial 2",
            details=knotd.output_text,
        )
        assert [r.to_text() for r in new[0]] == ["192.0.2.77"]
        assert _ask(knotd.server, "example.test", "SOA").answer[0][0].serial == 2
        log = knotd.output_text()
        assert "notify, incoming" in log.lower()
        # knotd took it incrementally: its IXFR finished, not an AXFR (nor an AXFR-style IXFR)
        ixfr = [line for line in log.splitlines() if "IXFR, incoming" in line]
        assert any("finished" in line for line in ixfr), log
        assert not any("AXFR-style" in line for line in ixfr), log
        assert sum("AXFR, incoming" in line and "finished" in line for line in log.splitlines()) == 1, log
        assert f"IXFR of example.test. serial 2 to {theirs}: incremental from serial 1" in node.log_text()
        # the changed and the deleted records, as BIND's dig sees knotd serve them
        assert dig.dig(theirs, 5353, "www.example.test", "A").answer_data() == ["192.0.2.81"]
        assert dig.dig(theirs, 5353, "host7.example.test", "A").status == "NXDOMAIN"
        assert dig.dig(theirs, 5353, "host8.example.test", "A").answer_data() == ["10.0.0.8"]


@pytest.mark.parametrize("processes", [1, 2])
def test_transfer_refused_without_the_key_or_from_elsewhere(tmp_path: Path, processes: int) -> None:
    """Over real TCP, dnspython's transfer client: an unsigned request gets NOTAUTH, a wrong
    key NOTAUTH with BADSIG, the right key the zone, SOA first and last; UDP is REFUSED.
    With two answering processes, each connection's process answers alike."""
    ours = nodeproc.loopback_address()
    config = configs.base(ours)
    config["tsig_keys"] = {KEY: {"secret": SECRET}}
    config["zones"][0]["transfer"] = {"allow": ["127.0.0.0/8"], "tsig": KEY}
    config["dns_server"]["processes"] = processes
    path = configs.write(tmp_path, config)
    right = RING
    wrong = {dns.name.from_text(KEY): dns.tsig.Key(KEY, base64.b64encode(bytes(32)).decode(), "hmac-sha256")}
    with nodeproc.running_node(path, "n1", ours, 5353, tmp_path):
        unsigned = dns.message.make_query("example.test", "AXFR")
        assert dns.query.tcp(unsigned, ours, timeout=5, port=5353).rcode() == dns.rcode.NOTAUTH
        with pytest.raises(dns.tsig.PeerBadSignature):
            list(dns.query.xfr(ours, "example.test", port=5353, keyring=wrong, keyname=KEY, timeout=5))
        for _ in range(4):  # (several connections: with 2 processes, likely both answer)
            messages = list(dns.query.xfr(ours, "example.test", port=5353, keyring=right, keyname=KEY, timeout=5))
            records = [r for m in messages for r in m.answer]
            assert records[0].rdtype == records[-1].rdtype == dns.rdatatype.SOA
            assert all(m.had_tsig for m in messages)
        # UDP: refused (a transfer is TCP only)
        signed = dns.message.make_query("example.test", "AXFR")
        signed.use_tsig(right, KEY)
        reply = dns.message.from_wire(dnsclient.udp(signed.to_wire(), (ours, 5353)), keyring=False)
        assert reply.rcode() == dns.rcode.REFUSED


#: a zone whose first transfer takes a while to encode (a quarter of a second or more)
BIG_HOSTS = "".join(f"h{i} IN A 10.{i // 65536}.{i // 256 % 256}.{i % 256}\n" for i in range(25_000))


def _read_transfer(sock: socket.socket) -> list[dns.message.Message]:
    """The messages of an AXFR read off *sock*, up to the one ending with the SOA again."""
    sock.settimeout(20)
    stream = sock.makefile("rb")
    out: list[dns.message.Message] = []
    soas = 0
    while soas < 2:
        (length,) = struct.unpack("!H", stream.read(2))
        message = dns.message.from_wire(stream.read(length), xfr=True, multi=True, keyring=False)
        soas += sum(rrset.rdtype == dns.rdatatype.SOA for rrset in message.answer)
        out.append(message)
    return out


@pytest.mark.alone  # how many answers come before the transfer depends on the CPU it gets
def test_queries_are_answered_while_a_big_transfer_is_encoded(tmp_path: Path) -> None:
    """The first AXFR of a 25,000-record zone is encoded a message at a time: UDP queries
    sent after the request are answered, several of them, before the transfer arrives (were
    the reactor held for the encoding, they would wait for it: one or two at most would be
    answered first, while the node accepts the connection and reads the request)."""
    ours = nodeproc.loopback_address()
    config = configs.base(ours)
    config["zones"][0]["transfer"] = {"allow": ["127.0.0.0/8"]}
    path = configs.write(tmp_path, config, zone=configs.ZONE + BIG_HOSTS)
    with (
        nodeproc.running_node(path, "n1", ours, 5353, tmp_path) as node,
        socket.create_connection((ours, 5353), timeout=20) as sock,
    ):
        sock.sendall(struct.pack("!H", len(AXFR)) + AXFR)
        answered = 0
        # (each query waits for its answer: the pace is the node's, not a sleep)
        while not select.select([sock], [], [], 0)[0] and answered < 10_000:
            assert [r.to_text() for r in _ask(node.server, "www.example.test").answer[0]] == ["192.0.2.80"]
            answered += 1
        messages = _read_transfer(sock)
        assert sum(len(rrset) for m in messages for rrset in m.answer) == 19 + 25_000 + 1
        assert answered >= 5, answered
        assert "AXFR of example.test. serial 1" in node.log_text()


AXFR = dns.message.make_query("example.test", "AXFR").to_wire()


#: the zone of issue 30's hostile client: 20,000 records, some 520 KB a transfer
HOSTILE_HOSTS = "".join(f"h{i} IN A 10.{i // 65536}.{i // 256 % 256}.{i % 256}\n" for i in range(20_000))


def _rss_mib(pid: int) -> float:
    found = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    assert found
    return int(found.group(1)) / 1024


def _non_reader(source: str, server: tuple[str, int], requests: int) -> socket.socket:
    """A connection from *source* that sends *requests* AXFRs at once and reads nothing
    (a small receive buffer: the node's answers soon have nowhere to go)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.bind((source, 0))
    sock.connect(server)
    sock.sendall((struct.pack("!H", len(AXFR)) + AXFR) * requests)
    return sock


def _axfr_records(server: str, source: str) -> int:
    messages = list(dns.query.xfr(server, "example.test", port=5353, source=source, timeout=30, lifetime=60))
    return sum(len(rrset) for m in messages for rrset in m.answer)


@pytest.mark.alone  # (UDP latency is measured)
def test_pipelined_transfers_never_read_cost_a_send_buffer_and_udp_goes_on(tmp_path: Path) -> None:
    """Issue 30, defect 1: a source inside ``allow`` opens 4 connections, each pipelining
    1,500 AXFRs of a 20,000-record zone, and reads nothing. The node answers a transfer
    only as it is taken (one per connection, two per source), so its memory stays within
    a few MB (on main it grew by some 800 MB from 192 KB of requests, and UDP queries
    timed out); UDP queries sent throughout are answered within a second, and a
    secondary at another address gets the whole zone meanwhile."""
    ours, hostile, secondary = (nodeproc.loopback_address() for _ in range(3))
    config = configs.base(ours)
    config["zones"][0]["transfer"] = {"allow": ["127.0.0.0/8"]}
    path = configs.write(tmp_path, config, zone=configs.ZONE + HOSTILE_HOSTS)
    www = dnsclient.query("www.example.test")
    with nodeproc.running_node(path, "n1", ours, 5353, tmp_path) as node:
        assert _axfr_records(ours, secondary) == 19 + 20_000 + 1  # (the kept encoding made)
        before = peak = _rss_mib(node.proc.pid)
        sockets = [_non_reader(hostile, node.server, 1500) for _ in range(4)]
        latencies = []
        try:
            started = time.monotonic()
            while time.monotonic() - started < 12:
                sent = time.monotonic()
                reply = dnsclient.parse(dnsclient.udp(www, node.server, timeout=2))  # (raises on a timeout)
                latencies.append(time.monotonic() - sent)
                assert [r.to_text() for r in reply.answer[0]] == ["192.0.2.80"]
                peak = max(peak, _rss_mib(node.proc.pid))
                time.sleep(0.05)
            assert _axfr_records(ours, secondary) == 19 + 20_000 + 1
            peak = max(peak, _rss_mib(node.proc.pid))
        finally:
            for sock in sockets:
                sock.close()
        print(f"RSS {before:.0f} -> peak {peak:.0f} MiB; {len(latencies)} UDP answers, slowest {max(latencies):.3f} s")
        assert peak - before < 40, (before, peak)
        assert max(latencies) < 1.0, sorted(latencies)[-5:]
        assert "refused" in node.log_text()  # (the source's third and fourth connections)


def test_a_transfer_that_makes_no_progress_is_cut(tmp_path: Path) -> None:
    """``dns_server.transfer``: one transfer per source, cut after 2 s without progress. A
    client pipelining AXFRs and reading nothing holds its source's slot (the same source's
    next request is REFUSED) until the node cuts it; then the source is served again."""
    ours, source = nodeproc.loopback_address(), nodeproc.loopback_address()
    config = configs.base(ours)
    config["zones"][0]["transfer"] = {"allow": ["127.0.0.0/8"]}
    config["dns_server"]["transfer"] = {"max_per_source": 1, "stall_timeout": 2}
    path = configs.write(tmp_path, config, zone=configs.ZONE + HOSTILE_HOSTS)
    with nodeproc.running_node(path, "n1", ours, 5353, tmp_path) as node:
        stalled = _non_reader(source, node.server, 20)  # (more than the kernel's buffers take)
        try:
            poll.until(lambda: "AXFR of example.test." in node.log_text(), 20, "the transfer", details=node.log_text)
            with socket.socket() as other:
                other.bind((source, 0))
                other.settimeout(10)
                other.connect(node.server)
                other.sendall(struct.pack("!H", len(AXFR)) + AXFR)
                (length,) = struct.unpack("!H", other.recv(2))
                refused = dns.message.from_wire(other.recv(length, socket.MSG_WAITALL))
            assert refused.rcode() == dns.rcode.REFUSED
            poll.until(
                lambda: f"zone transfer to {source} cut: nothing taken for 2 s" in node.log_text(),
                20,
                "the stalled transfer to be cut",
                details=node.log_text,
            )
            stalled.settimeout(10)  # (closed: what it holds is read, then the end or a reset)
            with contextlib.suppress(ConnectionResetError):
                while stalled.recv(65536):
                    pass
        finally:
            stalled.close()
        assert _axfr_records(ours, source) == 19 + 20_000 + 1
