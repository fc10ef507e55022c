"""Webhook alerts, on a fake clock: the signature receivers check, the back-off schedule and
the caps of the delivery queue, the member chosen to send, the handover when it goes, and
the events a node's sources make."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock

from gtmcluster.alerts import events
from gtmcluster.alerts.chooser import HANDOVER, Handover, sender
from gtmcluster.alerts.delivery import MAX_IN_FLIGHT, Deliveries, backoff
from gtmcluster.alerts.events import OWN, Event
from gtmcluster.alerts.service import AlertsService
from gtmcluster.alerts.sources import CertificateEvents, PeerEvents, Where, config_event
from gtmcluster.config.alerts import Alerts, Webhook
from gtmcluster.config.load import load
from tests.support import configs

SECRET = b"0123456789abcdef-secret"


def hook(url: str = "https://hooks.example.com/gtm", kinds: tuple[str, ...] = ("vs_down", "vs_up")) -> Webhook:
    return Webhook(url, Path("/nowhere"), SECRET, kinds)


def event(kind: str = "vs_down", anchor: str = "a", node: str = "n1", **kw: Any) -> Event:
    obj = kw.pop("obj", {"virtual_server": "vs1", "datacenter": "DC1"})
    return Event(kind, obj, "monitor http: n1: HTTP 500", 1_800_000_000.25, node, "g", anchor, **kw)


class FakePoster:
    """Answers each attempt with the next of *answers* (a status, or an exception), or
    leaves it pending when there are none."""

    def __init__(self, *answers: int | Exception):
        self.answers = list(answers)
        self.calls: list[tuple[str, bytes, dict[str, str]]] = []
        self.pending: list[defer.Deferred[int]] = []

    def post(self, webhook: Webhook, body: bytes, headers: dict[str, str]) -> defer.Deferred[int]:
        self.calls.append((webhook.url, body, headers))
        if not self.answers:
            d: defer.Deferred[int] = defer.Deferred()
            self.pending.append(d)
            return d
        answer = self.answers.pop(0)
        return defer.fail(answer) if isinstance(answer, Exception) else defer.succeed(answer)


# -- the body and its signature --------------------------------------------------------------


def test_the_signature_is_hmac_sha256_over_timestamp_dot_body() -> None:
    body = event().body()
    header = events.signature(SECRET, 1_800_000_000, body)
    expected = hmac.new(SECRET, b"1800000000." + body, hashlib.sha256).hexdigest()
    assert header == f"t=1800000000,v1={expected}"
    assert events.verify(SECRET, header, body, now=1_800_000_010)
    assert not events.verify(SECRET, header, body + b" ", now=1_800_000_010)  # another body
    assert not events.verify(b"another secret 0123", header, body, now=1_800_000_010)
    assert not events.verify(SECRET, header, body, now=1_800_000_000 + 301)  # an old replay
    assert not events.verify(SECRET, "v1=" + expected, body, now=1_800_000_000)  # no time


def test_the_body_names_the_event_and_its_id_is_the_same_for_the_same_event() -> None:
    body = json.loads(event().body())
    assert body == {
        "event": "vs_down",
        "id": body["id"],
        "time": "2027-01-15T08:00:00.250Z",
        "node": "n1",
        "group": "g",
        "object": {"virtual_server": "vs1", "datacenter": "DC1"},
        "reason": "monitor http: n1: HTTP 500",
    }
    # another member noticing it (at another moment) gives the same id; another anchor does not
    assert event(node="n2").id == event().id
    assert event(anchor="b").id != event().id
    assert event(kind="vs_up").id != event().id


# -- the back-off schedule and the caps --------------------------------------------------------


def test_backoff_doubles_up_to_its_cap() -> None:
    settings = Alerts(backoff=2, backoff_max=30)
    assert [backoff(settings, n) for n in range(1, 8)] == [2, 4, 8, 16, 30, 30, 30]


def test_a_failing_receiver_is_retried_on_the_schedule_then_given_up() -> None:
    clock = Clock()
    poster = FakePoster(500, ConnectionRefusedError("refused"), 503, 500)
    queue = Deliveries(clock, poster, Alerts((hook(),), max_attempts=4, backoff=2, backoff_max=5))
    queue.add(event())
    times = [0.0]
    while len(queue):
        before = len(poster.calls)
        clock.advance(0.5)
        if len(poster.calls) > before:
            times.append(clock.seconds())
    assert len(poster.calls) == 4
    assert times == [0.0, 2.0, 6.0, 11.0]  # waits of 2, 4, then 5 (the cap)
    assert queue.counts[hook().label, "failed"] == 1 and queue.counts[hook().label, "retried"] == 3
    assert len({body for _, body, _ in poster.calls}) == 1  # the same body every time
    # each attempt signed at its own time
    assert [h[events.SIGNATURE_HEADER].partition(",")[0] for _, _, h in poster.calls] == [
        "t=0",
        "t=2",
        "t=6",
        "t=11",
    ]


def test_a_receiver_answering_500_then_200_gets_it_once() -> None:
    clock = Clock()
    poster = FakePoster(500, 200)
    queue = Deliveries(clock, poster, Alerts((hook(),), backoff=1))
    queue.add(event())
    clock.advance(1)
    clock.advance(0)
    assert len(poster.calls) == 2 and len(queue) == 0
    assert queue.counts[hook().label, "delivered"] == 1 and queue.counts[hook().label, "failed"] == 0


def test_only_the_webhooks_asking_for_a_kind_get_it() -> None:
    clock = Clock()
    poster = FakePoster(200, 200)
    pools = hook("https://pools.example.com/", ("pool_down",))
    queue = Deliveries(clock, poster, Alerts((hook(), pools)))
    assert queue.add(event("vs_down")) == 1
    assert [url for url, _, _ in poster.calls] == ["https://hooks.example.com/gtm"]


def test_the_queue_is_bounded_the_oldest_dropped_and_counted() -> None:
    clock = Clock()
    poster = FakePoster()  # nothing answers: attempts stay in flight
    queue = Deliveries(clock, poster, Alerts((hook(),), max_queue=10))
    for i in range(25):
        queue.add(event(anchor=str(i)))
    assert len(queue) == 10
    assert len(poster.pending) == MAX_IN_FLIGHT  # the rest wait for a slot
    assert queue.counts[hook().label, "dropped"] == 15
    # the oldest waiting went; those in flight stayed
    kept = [d.event.anchor for d in queue._queued.values()]
    assert kept == ["0", "1", "2", "3", *[str(i) for i in range(19, 25)]]
    poster.pending[0].callback(200)
    clock.advance(0)
    assert len(poster.calls) == MAX_IN_FLIGHT + 1  # a slot freed: the next waiting goes


def test_a_webhook_removed_by_a_reload_loses_its_waiting_deliveries() -> None:
    clock = Clock()
    poster = FakePoster(500)
    queue = Deliveries(clock, poster, Alerts((hook(),), backoff=5))
    queue.add(event())
    assert len(queue) == 1
    queue.configure(Alerts(()))
    assert len(queue) == 0
    clock.advance(10)
    assert len(poster.calls) == 1


# -- who sends ---------------------------------------------------------------------------------


def test_the_lowest_named_member_reached_sends_and_every_member_chooses_it() -> None:
    group = {"gtm-a", "gtm-b", "gtm-c"}
    e = event()
    assert {sender(e, group) for _ in range(3)} == {"gtm-a"}
    assert sender(e, {"gtm-b", "gtm-c"}) == "gtm-b"  # gtm-a out of reach
    # a partition: each side sends (a receiver may get it twice, with one id)
    assert sender(e, {"gtm-a"}) == "gtm-a" and sender(e, {"gtm-b", "gtm-c"}) == "gtm-b"
    # the peer an event is about never sends it
    lost = event("peer_lost", obj={"peer": "gtm-a"}, excluded=frozenset(["gtm-a"]))
    assert sender(lost, group) == "gtm-b"
    # a member's own event: that member
    assert sender(event("config_applied", node="gtm-c", scope=OWN), group) == "gtm-c"


def test_an_event_left_to_a_sender_that_goes_is_handed_over() -> None:
    clock = Clock()
    handover = Handover("gtm-b", clock.seconds, cap=100)
    e = event()
    handover.keep(e, "gtm-a")
    assert handover.reached(frozenset({"gtm-a", "gtm-b", "gtm-c"})) == []  # gtm-a still there
    clock.advance(HANDOVER / 2)
    assert handover.reached(frozenset({"gtm-b", "gtm-c"})) == [e]  # gtm-a gone: gtm-b sends
    assert len(handover) == 0
    handover.keep(event(anchor="late"), "gtm-a")
    clock.advance(HANDOVER)
    assert handover.reached(frozenset({"gtm-b"})) == []  # kept no longer than HANDOVER
    for i in range(150):
        handover.keep(event(anchor=str(i)), "gtm-a")
    assert len(handover) == 100


def test_the_alerts_service_sends_only_where_chosen() -> None:
    clock = Clock()
    reached = {"gtm-a", "gtm-b"}
    sent: dict[str, FakePoster] = {}
    services = {}
    for name in ("gtm-a", "gtm-b"):
        sent[name] = FakePoster(200, 200)
        services[name] = AlertsService(clock, name, "g", Alerts((hook(),)), sent[name], lambda: frozenset(reached))
    for service in services.values():
        service.emit(event(node=service.node))
    assert len(sent["gtm-a"].calls) == 1 and sent["gtm-b"].calls == []
    # gtm-a goes before it could send the next one: gtm-b sends what it kept (vs_down too,
    # which gtm-a sent already: with the same id, for the receiver to drop)
    sent["gtm-a"].answers.clear()
    for service in services.values():
        service.emit(event(kind="vs_up", node=service.node))
    reached.discard("gtm-a")
    services["gtm-b"].peers_changed()
    got = [json.loads(body) for _, body, _ in sent["gtm-b"].calls]
    assert [b["event"] for b in got] == ["vs_down", "vs_up"]
    assert got[0]["id"] == json.loads(sent["gtm-a"].calls[0][1])["id"]
    # a kind no webhook asks for is not even chosen for
    services["gtm-b"].emit(event("pool_down", node="gtm-b"))
    assert len(sent["gtm-b"].calls) == 2 and services["gtm-b"].left == 2


# -- the sources -------------------------------------------------------------------------------


def test_peers_lost_and_back() -> None:
    clock = Clock()
    clock.advance(600)
    reached = {"n1", "n2", "n3"}
    got: list[Event] = []
    peers = PeerEvents(Where("n1", "g", clock.seconds), lambda: reached, got.append)
    peers.changed()
    assert got == []  # first reached: nothing lost, nothing back
    reached.discard("n3")
    peers.changed()
    reached.add("n3")
    peers.changed()
    assert [(e.kind, dict(e.object), e.excluded) for e in got] == [
        ("peer_lost", {"peer": "n3"}, frozenset(["n3"])),
        ("peer_back", {"peer": "n3"}, frozenset(["n3"])),
    ]


def test_config_events_are_each_members_own() -> None:
    clock = Clock()
    applied = config_event(Where("n2", "g", clock.seconds), 4, "abc", "n1", [])
    refused = config_event(Where("n3", "g", clock.seconds), 4, "abc", "n1", ["zones[0].file: cannot read"])
    assert (applied.kind, applied.scope, refused.kind, refused.reason) == (
        "config_applied",
        OWN,
        "config_refused",
        "zones[0].file: cannot read",
    )
    assert applied.id != config_event(Where("n3", "g", clock.seconds), 4, "abc", "n1", []).id


@pytest.mark.parametrize(("days_left", "told"), [(30, False), (20, True)])
def test_a_certificate_ending_within_the_days_is_told_once(days_left: int, told: bool) -> None:
    clock = Clock()
    got: list[Event] = []
    certs = CertificateEvents(Where("n1", "g", clock.seconds), got.append)
    for _ in range(3):
        certs.check([("node", "1a2b", days_left * 86400.0)], 21)
    assert len(got) == (1 if told else 0)
    if told:
        certs.check([("node", "3c4d", days_left * 86400.0)], 21)  # renewed, and near its end too
        assert [dict(e.object)["serial"] for e in got] == ["1a2b", "3c4d"]


def test_a_members_own_config_run_is_sent_by_it_and_a_reload_takes_new_webhooks(tmp_path: Path) -> None:
    clock = Clock()
    poster = FakePoster(200, 200)
    kinds = ("config_applied", "config_refused")
    service = AlertsService(clock, "gtm-c", "g", Alerts((hook(kinds=kinds),)), poster, lambda: frozenset({"gtm-a"}))
    service.config_ran(7, "d1g35t", "gtm-a", [])  # gtm-a is reached and lower: still gtm-c's own
    assert [json.loads(b)["object"] for _, b, _ in poster.calls] == [
        {"generation": 7, "digest": "d1g35t", "publisher": "gtm-a"}
    ]
    configs.write_secret(tmp_path / "hook.key", "another-secret-0123456789")
    raw = configs.base()
    raw["alerts"] = {"webhooks": [{"url": "https://other.example.com/", "secret_file": "hook.key"}]}
    service.prepare(load(configs.write(tmp_path, raw)))()
    service.config_ran(8, "e2", "gtm-a", ["zones[0].file: cannot read"])
    assert poster.calls[-1][0] == "https://other.example.com/"
    assert json.loads(poster.calls[-1][1])["event"] == "config_refused"
