"""Path records, the probe budget, and probing on request (fake clock, scripted prober)."""

from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass

import pytest
from twisted.internet import defer, task
from twisted.logger import capturedLogs

from gtmcluster.config.model import Prober
from gtmcluster.proximity.budget import Budget, queue_limit
from gtmcluster.proximity.scheduler import ProbeScheduler, request
from gtmcluster.proximity.table import Measurements, PathInfo, from_record, updated
from gtmcluster.state import keys
from gtmcluster.state.store import Store
from tests.support import configs


def test_rtt_is_smoothed_and_the_last_sample_kept() -> None:
    """The first reply sets the RTT; later ones move it by 30% towards themselves."""
    p = updated(None, True, 100_000, 7, "dns_dot", "n1", "192.0.2.1", "CNC")
    assert (p.rtt_us, p.last_rtt_us, p.hops, p.completion) == (100_000, 100_000, 7, 10000)
    p = updated(p, True, 200_000, 0, "tcp", "n1", "192.0.2.1", "CNC")
    assert (p.rtt_us, p.last_rtt_us, p.protocol) == (130_000, 200_000, "tcp")
    assert p.hops == 7  # an unknown hop count keeps the last known one


def test_completion_rate_counts_the_last_ten_attempts() -> None:
    """Replies per 10000 over a sliding window of ten attempts."""
    p = None
    for ok in [True] * 5 + [False] * 5:
        p = updated(p, ok, 1000, 0, "udp", "n1", "a", "DC")
    assert p is not None and p.completion == 5000
    for _ in range(10):
        p = updated(p, True, 1000, 0, "udp", "n1", "a", "DC")
    assert p.completion == 10000 and len(p.window) == 10


def test_failures_back_off_exponentially() -> None:
    """An LDNS that never answers is probed after 60 s, 120 s, 240 s ... (at most a day)."""
    p = None
    waits = []
    for _ in range(14):
        p = updated(p, False, 0, 0, "", "n1", "a", "DC")
        waits.append(p.backoff())
    assert waits[:4] == [60, 120, 240, 480]
    assert waits[-1] == 86400
    assert p is not None and not p.usable and p.completion == 0


def test_path_records_round_trip_and_age_from_the_record(tmp_path: object) -> None:
    """A path written as a record reads back with its age counted from the record's birth."""
    clock = task.Clock()
    store = Store("n1", clock.seconds)
    p = updated(None, True, 5000, 3, "icmp", "n1", "198.51.100.9", "TEL")
    store.put(keys.path("198.51.100.9", "TEL"), p.value())
    clock.advance(42)
    back = from_record(store.get(keys.path("198.51.100.9", "TEL")), clock.seconds())  # type: ignore[arg-type]
    assert back is not None and back.age == 42 and back.rtt_us == 5000 and back.datacenter == "TEL"
    m = Measurements(store, Prober(probe_interval=30, path_ttl=100), lambda: True)
    info = m.path("198.51.100.9", "TEL")
    assert info is not None and m.stale(info)
    clock.advance(60)
    assert m.path("198.51.100.9", "TEL") is None  # older than path_ttl: not used


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("8.8.8.8", True),
        ("2606:4700::1111", True),
        ("192.0.2.1", False),  # documentation
        ("198.51.100.7", False),
        ("127.0.0.99", False),  # loopback
        ("10.1.2.3", False),  # private use
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("100.64.0.1", False),  # shared address space
        ("169.254.169.254", False),  # link local: cloud metadata services
        ("::1", False),
        ("fe80::1", False),
        ("fd00::53", False),  # unique local
        ("::ffff:8.8.8.8", False),  # IPv4-mapped
        ("2001:db8::1", False),
        ("224.0.0.5", False),
        ("255.255.255.255", False),
        ("0.0.0.0", False),
        ("ff02::1", False),
        ("not-an-ip", False),
    ],
)
def test_special_purpose_ranges_are_never_probed_by_default(address: str, allowed: bool) -> None:
    """Every IANA special-purpose range (RFC 6890) is left alone unless opened."""
    assert (Budget(Prober(), lambda: 0.0).allowed(address) is None) == allowed


def test_allow_opens_special_ranges_deny_and_only_narrow() -> None:
    """prober.allow opens special-purpose networks (never multicast or broadcast); deny wins
    over it; only restricts probing to its networks."""
    budget = Budget(
        Prober(
            allow=(ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("0.0.0.0/0")),
            deny=(ipaddress.ip_network("10.9.0.0/16"),),
        ),
        lambda: 0.0,
    )
    assert budget.allowed("10.1.2.3") is None
    assert budget.allowed("127.0.0.1") is None  # opened by 0.0.0.0/0
    assert budget.allowed("10.9.0.1") is not None
    assert budget.allowed("224.0.0.5") is not None and budget.allowed("255.255.255.255") is not None
    narrow = Budget(Prober(only=(ipaddress.ip_network("8.8.0.0/16"),)), lambda: 0.0)
    assert narrow.allowed("8.8.4.4") is None and narrow.allowed("9.9.9.9") is not None


def test_rate_and_in_flight_limits() -> None:
    """At most max_per_second starts per second and max_in_flight at once."""
    clock = task.Clock()
    budget = Budget(Prober(max_per_second=5, max_in_flight=3), clock.seconds)
    assert [budget.take() for _ in range(4)] == [True, True, True, False]  # in flight
    for _ in range(3):
        budget.done()
    assert [budget.take() for _ in range(3)] == [True, True, False]  # 5 tokens used
    clock.advance(1)
    budget.done()
    budget.done()
    assert budget.take()


@dataclass
class Reply:
    ok: bool
    rtt_us: int
    hops: int
    protocol: str
    reason: str


class ScriptedProber:
    def __init__(self) -> None:
        self.asked: list[str] = []
        self.pending: list[defer.Deferred[Reply]] = []
        self.answer: Reply | None = Reply(True, 25_000, 5, "dns_dot", "reply")

    def probe(self, ldns: ipaddress.IPv4Address | ipaddress.IPv6Address) -> defer.Deferred[Reply]:
        self.asked.append(str(ldns))
        if self.answer is None:
            d: defer.Deferred[Reply] = defer.Deferred()
            self.pending.append(d)
            return d
        return defer.succeed(self.answer)

    def close(self) -> None:
        pass


#: the test LDNSes' networks, opened (they are special-purpose ranges: documentation nets)
OPEN = tuple(ipaddress.ip_network(n) for n in configs.TEST_NETWORKS)


def scheduler(prober: Prober | None = None) -> tuple[ProbeScheduler, Store, task.Clock, ScriptedProber]:
    clock = task.Clock()
    store = Store("n1", clock.seconds)
    settings = prober or Prober()
    if not settings.allow:
        settings = dataclasses.replace(settings, allow=OPEN)
    fake = ScriptedProber()
    s = ProbeScheduler(
        store, Measurements(store, settings, lambda: True), Budget(settings, clock.seconds), fake, "n1", "CNC", clock
    )
    s.startService()
    return s, store, clock, fake


def test_a_request_record_makes_the_node_probe_and_record_its_path() -> None:
    """Any node's probe request leads to this node's measurement from its data center."""
    _, store, clock, prober = scheduler()
    assert request(store, Budget(Prober(allow=OPEN), lambda: 0.0), "198.51.100.7", "n2")
    assert prober.asked == []  # not inside the turn that filed it (maybe a datagram handler)
    clock.advance(0)
    assert prober.asked == ["198.51.100.7"]
    record = store.get(keys.path("198.51.100.7", "CNC"))
    assert record is not None and record.value["rtt"] == 25_000 and record.value["by"] == "n1"


def test_one_request_at_a_time_per_ldns() -> None:
    """While a request is live, asking again publishes nothing; after it ends, it may."""
    _, store, clock, _ = scheduler()
    budget = Budget(Prober(allow=OPEN), clock.seconds)
    assert request(store, budget, "198.51.100.7", "n1")
    first = store.get(keys.probe_request("198.51.100.7"))
    assert not request(store, budget, "198.51.100.7", "n1")
    assert store.get(keys.probe_request("198.51.100.7")) == first
    clock.advance(61)
    assert request(store, budget, "198.51.100.7", "n1")


def test_a_flood_of_new_sources_files_no_more_requests_than_the_node_can_probe() -> None:
    """Each new source address would file a probe request record (replicated to every
    member): a node files at most max_per_second a second, with a burst of what it probes
    while a request lives (queue_limit); the rest are counted, not filed."""
    _, store, clock, _ = scheduler()
    settings = Prober(max_per_second=5, allow=OPEN)
    budget = Budget(settings, clock.seconds)
    burst = queue_limit(settings)
    filed = sum(request(store, budget, f"198.51.{i // 256}.{i % 256}", "n1") for i in range(1000))
    assert filed == burst == 300
    assert budget.unfiled == 1000 - burst
    assert store.kinds()["probe"] == burst
    clock.advance(2)
    filed = sum(request(store, budget, f"203.0.{i // 256}.{i % 256}", "n1") for i in range(100))
    assert filed == 10  # two seconds' worth
    clock.advance(59)
    store.expire()
    assert store.kinds()["probe"] == 10  # the burst's requests ended with their TTL


def test_a_request_never_outlives_half_the_probe_interval() -> None:
    """With a short probe interval a request ends after half of it, so an LDNS that keeps
    asking is measured again each interval (not only once a minute)."""
    _, store, clock, _ = scheduler()
    budget = Budget(Prober(probe_interval=10, allow=OPEN), clock.seconds)
    assert request(store, budget, "198.51.100.7", "n1")
    clock.advance(4.9)
    assert not request(store, budget, "198.51.100.7", "n1")
    clock.advance(0.2)
    assert request(store, budget, "198.51.100.7", "n1")


def test_fresh_paths_are_not_probed_again() -> None:
    """A path measured less than half a probe interval ago is left alone."""
    s, _, clock, prober = scheduler(Prober(probe_interval=600))
    s.want("198.51.100.7")
    clock.advance(100)
    s.want("198.51.100.7")
    assert prober.asked == ["198.51.100.7"]
    clock.advance(250)
    s.want("198.51.100.7")
    assert prober.asked == ["198.51.100.7", "198.51.100.7"]


def test_silent_ldnses_are_backed_off() -> None:
    """After a failed probe, the next waits 60 s; after another, 120 s."""
    s, store, clock, prober = scheduler()
    prober.answer = Reply(False, 0, 0, "", "all protocols failed")
    s.want("203.0.113.5")
    s.want("203.0.113.5")
    assert len(prober.asked) == 1
    clock.advance(61)
    s.want("203.0.113.5")
    assert len(prober.asked) == 2
    clock.advance(61)
    s.want("203.0.113.5")
    assert len(prober.asked) == 2  # now 120 s
    record = store.get(keys.path("203.0.113.5", "CNC"))
    assert record is not None and record.value["failures"] == 2 and record.value["completion"] == 0


def test_probes_in_flight_are_capped_and_the_queue_drains() -> None:
    """Beyond max_in_flight, requests wait; each finished probe lets the next start."""
    s, _, clock, prober = scheduler(Prober(max_in_flight=2, max_per_second=1000))
    prober.answer = None  # probes hang until the test answers them
    for i in range(5):
        s.want(f"198.51.100.{i + 1}")
    assert len(prober.asked) == 2
    prober.pending[0].callback(Reply(True, 1000, 0, "udp", "reply"))
    assert len(prober.asked) == 3
    for d in list(prober.pending[1:]):
        d.callback(Reply(True, 1000, 0, "udp", "reply"))
    clock.advance(1)
    assert len(prober.asked) == 5


def test_denied_ldnses_are_never_probed_nor_requested() -> None:
    """A spoofed multicast or denied source cannot make the group probe it."""
    s, store, _, prober = scheduler(Prober(deny=(ipaddress.ip_network("192.0.2.0/24"),)))
    assert not request(store, s.budget, "192.0.2.1", "n1")
    assert not request(store, s.budget, "224.0.0.1", "n1")
    s.want("192.0.2.1")
    assert prober.asked == []


def test_path_info_knows_when_it_can_be_used() -> None:
    """A path that never answered (RTT 0, completion 0) is not usable by the methods."""
    dead = PathInfo("a", "DC", 0, 0, 0, 0, "", 3, "000", "n1", 5.0)
    assert not dead.usable and dead.backoff() == 240


def test_each_origin_takes_its_turn_and_a_flood_waits_only_its_share() -> None:
    """n3 floods 500 requests, then n2 asks for one LDNS: n2's is probed second (the origins
    take turns), and of n3's requests only a request lifetime's worth wait (the rest are
    ignored and counted), so the flood neither crowds out nor outlasts the others."""
    settings = Prober(max_per_second=1, max_in_flight=1, probe_interval=60)
    s, _, clock, prober = scheduler(settings)
    limit = queue_limit(settings)
    assert limit == 30  # one probe a second, a request lives 30 s
    for i in range(500):
        s.want(f"198.51.{i // 250}.{i % 250 + 1}", "n3")
    s.want("203.0.113.9", "n2")
    for _ in range(3):
        clock.advance(1.01)
    # the first of n3's went at once (a token was there); then n3, n2, n3 in turn
    assert prober.asked[:4] == ["198.51.0.1", "198.51.0.2", "203.0.113.9", "198.51.0.3"]
    assert s.stats.ignored == 500 - 1 - limit
    for _ in range(60):
        clock.advance(1.01)
    assert len(prober.asked) == 1 + limit + 1  # n3's first and waiting ones, n2's: nothing more


def test_a_flooding_origin_may_ask_again_once_its_queue_drained() -> None:
    """The cap holds while the requests wait: once they are probed the origin may ask again."""
    settings = Prober(max_per_second=1, max_in_flight=1, probe_interval=20)
    s, _, clock, prober = scheduler(settings)
    limit = queue_limit(settings)
    for i in range(1 + limit + 4):  # the first is probed at once, `limit` wait
        s.want(f"198.51.100.{i + 1}", "n3")
    assert s.stats.ignored == 4
    for _ in range(limit + 1):
        clock.advance(1.01)
    s.want("198.51.100.200", "n3")
    clock.advance(1.01)
    assert prober.asked[-1] == "198.51.100.200"


def test_a_node_holding_its_most_paths_keeps_no_new_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node writes at most `PATH_LIMIT` paths of its own (under the cap its peers apply,
    state/schema.py, so that they never refuse an honest member): past it, a new LDNS's path
    is measured but not kept (counted, logged once), while a path it holds is still updated;
    once older ones expire, new ones are kept again."""
    from gtmcluster.proximity import scheduler as module

    monkeypatch.setattr(module, "PATH_LIMIT", 3)
    s, store, clock, prober = scheduler(Prober(probe_interval=600, inactive_ldns_ttl=3600))
    for i in range(1, 4):
        s.want(f"198.51.100.{i}")
        clock.advance(1)
    with capturedLogs() as events:
        s.want("198.51.100.4")
        s.want("198.51.100.5")
        clock.advance(400)
        s.want("198.51.100.1")  # held: measured again and updated
    assert prober.asked[-3:] == ["198.51.100.4", "198.51.100.5", "198.51.100.1"]
    assert store.get(keys.path("198.51.100.4", "CNC")) is None
    assert store.held_by("n1", "path") == 3 and s.stats.not_kept == 2
    updated_one = store.get(keys.path("198.51.100.1", "CNC"))
    assert updated_one is not None and clock.seconds() - updated_one.born < 1
    assert len([e for e in events if e.get("event") == "path_table_full"]) == 1
    clock.advance(3600)
    store.expire()
    s.want("198.51.100.4")
    assert store.get(keys.path("198.51.100.4", "CNC")) is not None
