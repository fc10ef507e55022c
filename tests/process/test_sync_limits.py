"""A member's peer port against a peer that holds a valid member certificate (n3's) and
misuses it: replayed records, values at and beyond the protocol's limits, a box trickled
byte by byte, and a flood of probe requests. Real twistd processes, real TLS on loopback;
the tests look at what the node answers (AMP boxes), what it logs, whether its real peer
stays connected, and, during the flood, how its DNS answers fare.
"""

from __future__ import annotations

import json
import socket
import ssl
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gtmcluster.state import schema
from gtmcluster.sync.codec import MAX_FUTURE_MS, MAX_KEY
from tests.support import dnsclient
from tests.support.nodeproc import loopback_address
from tests.support.peerattack import (
    IDLE_MEMBER,
    PARTNER,
    TARGET,
    Lab,
    Outcome,
    amp_box,
    attack,
    hello,
    running_lab,
)
from tests.support.trio import POLL, SYNC_SETTINGS, summarize

pytestmark = pytest.mark.process

WIDEIP = "gslb.example.test"
IDLE_TIMEOUT = float(SYNC_SETTINGS["idle_timeout"])
SLACK = 1.5
#: the flood's LDNSes and the one a real member asks about meanwhile (the test's own range)
FLOODED = [f"127.84.0.{i}" for i in range(1, 200)]
ASKED_BY_PARTNER = "127.84.0.222"
#: more requests in the flood, for LDNSes outside prober.allow (merged and relayed, never probed)
NOT_ALLOWED = [f"198.18.{i // 250}.{i % 250 + 1}" for i in range(5000)]
#: the node probes at most this many LDNSes a second (config), so its queue fills at once
PROBES_PER_SECOND = 1
PROBE_INTERVAL = 60  # a request lives half of it: 30 s, so 30 of one origin's requests may wait
LOGICAL_LIMIT = 2**31 - 1
#: AMP frames a value with a 2-byte length
AMP_MAX_VALUE = 65_535


#: the kind of records most tests here send: an admin state (no TTL needed)
ADMIN = schema.KINDS["admin"]


def sized(record: list[Any], size: int) -> list[Any]:
    """*record* (an admin state) with a field of its value padded so that the value encodes
    to *size* bytes (as its kind's size is measured)."""
    record[1] = {"state": "drain", "note": ""}
    record[1]["note"] = "v" * (size - schema.size_of(record[1]))
    assert schema.size_of(record[1]) == size
    return record


def customize(config: dict[str, Any]) -> None:
    """Persistence on the wide IP (a query writes a record that must replicate); RTT first,
    so a query from an unmeasured LDNS files a probe request; a slow, loopback-only prober."""
    wideip = config["wideips"][WIDEIP]
    wideip["persistence"] = {"ttl": 600}
    config["pools"]["p"]["load_balancing"] = {"preferred": "rtt", "alternate": "topology"}
    config["prober"] = {
        "protocols": ["udp"],
        "max_per_second": PROBES_PER_SECOND,
        "max_in_flight": 1,
        "probe_interval": PROBE_INTERVAL,
        "allow": ["127.84.0.0/24"],
    }


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with running_lab(tmp_path_factory.mktemp("sync-limits"), customize) as lab:
        yield lab


def entry(
    key: str,
    value: Any = None,
    wall_ms: int | None = None,
    logical: int = 0,
    origin: str = IDLE_MEMBER,
    ttl: float | None = None,
    age: float = 0.0,
) -> list[Any]:
    """A record as it travels: [key, value, wall_ms, logical, origin, ttl, age]; the value
    by default an admin state."""
    value = {"state": "drain", "by": origin} if value is None else value
    return [key, value, int(time.time() * 1000) if wall_ms is None else wall_ms, logical, origin, ttl, age]


def publish(ask: int, records: list[Any] | bytes) -> bytes:
    data = records if isinstance(records, bytes) else json.dumps(records, separators=(",", ":")).encode()
    return amp_box(_command="Publish", _ask=str(ask), records=data)


def merged(outcome: Outcome, ask: int) -> int:
    answer = outcome.answer(str(ask))
    assert answer is not None, f"no answer to Publish {ask}: {outcome}"
    return int(answer[b"merged"])


def write_on_target_reaches_partner(lab: Lab) -> None:
    """A new record on n1 (the persistence record of a query from a new client) reaches n2."""
    before = lab.group.wait_converged([TARGET, PARTNER])
    count = before[PARTNER]["state"]["by_origin"].get(TARGET, 0)
    reply = dnsclient.udp(dnsclient.query(WIDEIP, "A"), lab.group.members[TARGET].dns, source=loopback_address())
    assert dnsclient.addresses(dnsclient.parse(reply)), dnsclient.parse(reply)
    after: dict[str, dict[str, Any]] = {}

    def reached() -> bool:
        after.update(lab.group.wait_converged([TARGET, PARTNER], timeout=10.0))
        return all(s["state"]["by_origin"].get(TARGET, 0) > count for s in after.values())

    lab.group.wait_for(reached, 10.0, f"n1's new record on n2 (had {count})", lambda: summarize(dict(after)))


# -- replay and limits ------------------------------------------------------------------------


def test_a_stale_replayed_record_is_ignored(lab: Lab) -> None:
    """After a record at version v2, the same key at an older version v1 (another value) and
    v2 again (a replay) are each answered "merged 0": the node keeps v2; n3's record count
    on n1 grew by exactly one."""
    before = lab.group.status(TARGET)["state"]["by_origin"].get(IDLE_MEMBER, 0)
    now_ms = int(time.time() * 1000)
    newer = entry("admin/vs/replayed", {"state": "drain", "v": "new"}, now_ms, 3)
    older = entry("admin/vs/replayed", {"state": "drain", "v": "old"}, now_ms - 60_000, 0)
    follow = publish(2, [newer]) + publish(3, [older]) + publish(4, [newer])
    outcome = attack(lab.group, lab.member_context(), hello(lab.config_digest), follow, until_answered="4")
    assert outcome.answered("1"), f"the Hello was not answered: {outcome}"
    assert [merged(outcome, ask) for ask in (2, 3, 4)] == [1, 0, 0]
    after = lab.group.status(TARGET)["state"]["by_origin"].get(IDLE_MEMBER, 0)
    assert after == before + 1
    lab.assert_intact()


def test_values_at_their_limits_are_accepted_and_the_group_carries_on(lab: Lab) -> None:
    """A key of MAX_KEY characters, an admin state of its kind's longest TTL, and a version
    just under a day ahead with the largest logical counter are merged (answer "merged 3"),
    and so is a value of its kind's largest size (which n1 then relays: the digests agree).
    The node's clock follows the version it saw, so its next own write must still carry a
    version its peers accept: a new record on n1 reaches n2, and n1 and n2 stay connected."""
    now_ms = int(time.time() * 1000)
    records = [
        entry("admin/vs/" + "k" * (MAX_KEY - len("admin/vs/"))),
        entry("admin/vs/longest-ttl", ttl=ADMIN.max_ttl),
        entry("admin/vs/latest", wall_ms=now_ms + MAX_FUTURE_MS - 60_000, logical=LOGICAL_LIMIT),
    ]
    largest = sized(entry("admin/vs/largest"), ADMIN.max_size)
    follow = publish(2, records) + publish(3, [largest])
    outcome = attack(lab.group, lab.member_context(), hello(lab.config_digest), follow, until_answered="3")
    assert merged(outcome, 2) == 3, outcome
    assert merged(outcome, 3) == 1, outcome
    write_on_target_reaches_partner(lab)
    lab.assert_intact()


#: a case beyond a limit: the records of its Publish (given the time in ms), and the reason logged
BEYOND: dict[str, tuple[Callable[[int], list[Any] | bytes], str]] = {
    "a key one character too long": (lambda now: [entry("admin/vs/" + "k" * MAX_KEY)], "bad record key"),
    "an empty key": (lambda now: [entry("")], "bad record key"),
    "a value one byte over its kind's size": (
        lambda now: [sized(entry("admin/vs/large"), ADMIN.max_size + 1)],
        f"over {ADMIN.max_size} bytes",
    ),
    "a record as large as AMP can frame": (
        lambda now: [sized(entry("admin/vs/larger"), AMP_MAX_VALUE - 600)],
        f"over {ADMIN.max_size} bytes",
    ),
    "a TTL over its kind's": (lambda now: [entry("admin/vs/ttl", ttl=ADMIN.max_ttl * 1.001)], "TTL over"),
    "a TTL of zero": (lambda now: [entry("admin/vs/ttl", ttl=0)], "bad TTL"),
    "a version more than a day ahead": (
        lambda now: [entry("admin/vs/future", wall_ms=now + MAX_FUTURE_MS + 60_000)],
        "more than a day ahead",
    ),
    "a logical counter over 31 bits": (
        lambda now: [entry("admin/vs/logical", logical=LOGICAL_LIMIT + 1)],
        "bad version",
    ),
    "a negative wall clock": (lambda now: [entry("admin/vs/wall", wall_ms=-1)], "bad version"),
    "a negative age": (lambda now: [entry("admin/vs/age", age=-1)], "bad age"),
    "an origin that is not a member": (lambda now: [entry("admin/vs/origin", origin="intruder")], "not a member"),
    "a lone surrogate in the key": (
        lambda now: b'[["admin/vs/\\ud800",{"state":"drain"},' + str(now).encode() + b',0,"n3",null,0]]',
        "not valid UTF-8",
    ),
    "a record of six fields": (lambda now: [entry("admin/vs/short")[:6]], "7 fields"),
    # issue 13: values no kind allows
    "an admin state that is text": (lambda now: [entry("admin/vs/vs1", "x")], "the value is not a mapping"),
    "a verdict of another observer under the node's own origin": (
        lambda now: [entry("obs/vs/vs1/zz", [], origin=TARGET, ttl=90)],
        "a verdict of 'zz' written by 'n1'",
    ),
    "an invented kind of 50 KB for ten years": (
        lambda now: [entry("zz/0", {"x": "y" * 50_000}, ttl=10 * 365 * 86400.0)],
        "of no known kind",
    ),
    "a path of another shape": (
        lambda now: [entry("path/198.51.100.7/DC1", {"rtt": "fast"}, ttl=60)],
        "the value has no",
    ),
    "records that are not JSON": (lambda now: b"[[", "not JSON"),
    "deeply nested JSON": (lambda now: b"[" * 60_000, "not JSON"),
}


@pytest.mark.parametrize("case", list(BEYOND))
def test_a_value_beyond_its_limit_drops_only_that_peer(lab: Lab, case: str) -> None:
    """A Publish with one record beyond a limit gets no answer: the node drops that peer's
    connection, logs why, merges nothing, and keeps its real peer."""
    make, reason = BEYOND[case]
    records = make(int(time.time() * 1000))
    offset = lab.mark()
    before = lab.group.status(TARGET)["state"]["digest"]
    outcome = attack(lab.group, lab.member_context(), hello(lab.config_digest), publish(2, records))
    assert outcome.answered("1"), f"the Hello was not answered: {outcome}"
    assert not outcome.answered("2"), f"the node answered the bad Publish: {outcome.boxes}"
    assert outcome.closed_after is not None, f"the connection stayed open: {outcome}"
    line = lab.wait_line(offset, "dropping peer connection", IDLE_MEMBER, "malformed")
    assert reason in line, line
    assert lab.group.status(TARGET)["state"]["digest"] == before
    lab.assert_intact()


def test_a_refused_record_is_counted_by_kind_and_reason_in_metrics(lab: Lab) -> None:
    """Each record refused from a peer is counted in /metrics (gtm_records_refused_total) by
    kind and reason; an invented kind is counted as "unknown" (a peer cannot add labels)."""
    admin = 'gtm_records_refused_total{kind="admin",reason="value",source="peer"}'
    unknown = 'gtm_records_refused_total{kind="unknown",reason="kind",source="peer"}'
    before = {name: metric(lab, TARGET, name) for name in (admin, unknown)}
    for records in ([entry("admin/vs/vs1", "x")], [entry("zz-invented/0", {"x": 1}, ttl=60)]):
        offset = lab.mark()
        attack(lab.group, lab.member_context(), hello(lab.config_digest), publish(2, records))
        lab.wait_line(offset, "dropping peer connection", IDLE_MEMBER, "malformed")
    assert metric(lab, TARGET, admin) == before[admin] + 1
    assert metric(lab, TARGET, unknown) == before[unknown] + 1
    lab.assert_intact()


def test_a_box_trickled_byte_by_byte_is_closed_after_the_idle_timeout(lab: Lab) -> None:
    """After a correct Hello, a Publish box whose bytes arrive one every half second (so the
    box never completes) does not keep the connection: the node closes it within
    idle_timeout (+ slack) of the last complete box, and logs it."""
    offset = lab.mark()
    context = lab.member_context()
    source = loopback_address()
    raw = socket.create_connection(lab.group.members[TARGET].peer, timeout=5, source_address=(source, 0))
    sock = context.wrap_socket(raw, server_hostname=TARGET)
    partial = amp_box(_command="Publish", _ask="2")[:-2] + b"\x00\x07records\xea\x60"  # a 60,000-byte value follows
    received = b""
    closed_after: float | None = None
    try:
        sock.sendall(hello(lab.config_digest))
        sock.settimeout(POLL)
        answered_at: float | None = None
        deadline = time.monotonic() + IDLE_TIMEOUT + SLACK + 5
        sent = 0
        next_byte = 0.0
        stream = partial + b"x" * 1000
        while time.monotonic() < deadline:
            now = time.monotonic()
            if answered_at is not None and now >= next_byte and sent < len(stream):
                try:
                    sock.sendall(stream[sent : sent + 1])
                except (ssl.SSLError, OSError):
                    closed_after = now - answered_at
                    break
                sent += 1
                next_byte = now + 0.5
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ssl.SSLWantReadError):
                continue
            except (ssl.SSLError, OSError):
                chunk = b""
            if not chunk:
                closed_after = time.monotonic() - (answered_at or 0.0)
                break
            received += chunk
            if answered_at is None and b"_answer" in received:
                answered_at = time.monotonic()
    finally:
        sock.close()
    assert answered_at is not None, f"the Hello was not answered: {received!r}"
    assert closed_after is not None, f"the trickle kept the connection open ({sent} bytes sent)"
    assert IDLE_TIMEOUT - 0.5 <= closed_after <= IDLE_TIMEOUT + SLACK, (
        f"closed {closed_after:.2f}s after the Hello; idle_timeout is {IDLE_TIMEOUT}s ({sent} bytes trickled)"
    )
    line = lab.wait_line(offset, "dropping peer connection", IDLE_MEMBER)
    assert "no complete message" in line, line
    lab.assert_intact()


# -- a flood of probe requests ------------------------------------------------------------------


def metric(lab: Lab, node: str, name: str) -> float:
    """The sum of a Prometheus metric's samples on *node*."""
    host, port = lab.group.members[node].api
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def dns_latencies(lab: Lab, count: int, during: threading.Thread | None = None) -> list[float]:
    """Seconds each of *count* queries to n1 took (and more while *during* runs); every one
    must be answered."""
    server = lab.group.members[TARGET].dns
    source = loopback_address()
    out: list[float] = []
    while len(out) < count or (during is not None and during.is_alive()):
        started = time.monotonic()
        reply = dnsclient.parse(dnsclient.udp(dnsclient.query(WIDEIP, "A"), server, source=source))
        out.append(time.monotonic() - started)
        assert dnsclient.addresses(reply), reply
    return out


def paths_of(lab: Lab, node: str, ldns: str) -> Any:
    host, port = lab.group.members[node].api
    with urllib.request.urlopen(f"http://{host}:{port}/api/v1/ldns?address={ldns}", timeout=5) as response:
        body: Any = json.loads(response.read())
    return body


def test_a_flood_of_probe_requests_is_rate_limited_and_dns_answers_carry_on(lab: Lab) -> None:
    """n3 publishes a probe request for each of 199 LDNSes in 199 Publish commands, and 5000
    more for LDNSes the prober may not probe in 500 more. n1 keeps
    at most one request lifetime's worth of n3's requests waiting (logs the flood once,
    counts the rest as ignored), probes at its configured rate, answers every DNS query
    during the flood, and still probes at once the LDNS that its real peer n2 asks about
    (each origin has its turn), while n1 and n2 stay connected."""
    offset = lab.mark()
    probes_before = metric(lab, TARGET, "gtm_probes_total")
    calm = dns_latencies(lab, 200)
    now_ms = int(time.time() * 1000)
    batches = [[ldns] for ldns in FLOODED] + [NOT_ALLOWED[i : i + 10] for i in range(0, len(NOT_ALLOWED), 10)]
    flood = b"".join(
        publish(
            i + 2, [entry(f"probe/{ldns}", {"by": IDLE_MEMBER}, now_ms, 0, ttl=PROBE_INTERVAL / 2) for ldns in batch]
        )
        for i, batch in enumerate(batches)
    )
    last = str(len(batches) + 1)
    flooded: list[Outcome] = []
    flooder = threading.Thread(
        target=lambda: flooded.append(
            attack(lab.group, lab.member_context(), hello(lab.config_digest), flood, until_answered=last, within=30)
        )
    )
    started = time.monotonic()
    flooder.start()
    during = dns_latencies(lab, 200, flooder)
    flooder.join(35)
    assert flooded and flooded[0].answered(last), f"the flood was not taken in: {flooded}"

    # n2 files a request for an LDNS that asks it: n1 probes it in its turn, not after n3's
    asked = dnsclient.udp(dnsclient.query(WIDEIP, "A"), lab.group.members[PARTNER].dns, source=ASKED_BY_PARTNER)
    assert dnsclient.addresses(dnsclient.parse(asked))
    lab.group.wait_for(
        lambda: any(p.get("datacenter") == "DC1" for p in paths_flat(paths_of(lab, TARGET, ASKED_BY_PARTNER))),
        10.0,
        f"n1's path to {ASKED_BY_PARTNER}, which n2 asked for during the flood",
        lambda: paths_of(lab, TARGET, ASKED_BY_PARTNER),
    )
    elapsed = time.monotonic() - started
    started_probes = metric(lab, TARGET, "gtm_probes_total") - probes_before
    assert started_probes <= PROBES_PER_SECOND * elapsed + 2, f"{started_probes} probes in {elapsed:.1f}s"
    ignored = metric(lab, TARGET, "gtm_probe_requests_ignored_total")
    waiting = int(PROBES_PER_SECOND * PROBE_INTERVAL / 2)
    assert ignored >= len(FLOODED) - waiting - 10, f"only {ignored} of n3's {len(FLOODED)} requests ignored"
    lab.wait_line(offset, f"{IDLE_MEMBER} asks for more than {waiting} probes at once")
    lab.assert_intact()
    print(
        f"\nDNS during a flood of {len(FLOODED) + len(NOT_ALLOWED)} probe requests ({len(batches)} commands, "
        f"{len(during)} queries): median {statistics.median(during) * 1000:.2f} ms, "
        f"max {max(during) * 1000:.2f} ms (calm: median {statistics.median(calm) * 1000:.2f} ms, "
        f"max {max(calm) * 1000:.2f} ms); {started_probes:.0f} probes in {elapsed:.1f}s, {ignored:.0f} requests ignored"
    )


def paths_flat(body: Any) -> list[dict[str, Any]]:
    """The path entries in an /api/v1/ldns answer, whatever its nesting."""
    found: list[dict[str, Any]] = []

    def walk(item: Any) -> None:
        if isinstance(item, dict):
            if "datacenter" in item:
                found.append(item)
            for value in item.values():
                walk(value)
        elif isinstance(item, list):
            for value in item:
                walk(value)

    walk(body)
    return found
