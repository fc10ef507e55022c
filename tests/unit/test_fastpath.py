"""The UDP fast path against the general path: byte for byte the same replies.

Two nodes are built from one config and one clock: the reference answers every query with
the general path only; the other through `FastPath` (templates and kept decisions). Both
see the same queries and the same changes of state, so every reply must be identical; the
fast node must also have answered the repeated queries from what it kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.twins import Twins, make_query


@pytest.fixture
def twins(tmp_path: Path) -> Twins:
    return Twins(tmp_path)


def test_static_answers_are_templates_with_id_flags_and_case_put_in(twins: Twins) -> None:
    """A static answer asked again (in another case, with another ID and flags) comes from
    its template, and is what the general path sends."""
    twins.ask(make_query("www.example.test"))
    assert twins.fast.templates
    twins.general_path_off()
    for name, qid, rd, cd in (("WWW.Example.TEST", 7, True, False), ("wWw.eXample.test", 65535, False, True)):
        before = dict(twins.node.stats.queries)
        twins.ask(make_query(name, qid=qid, rd=rd, cd=cd))
        assert twins.node.stats.queries != before  # counted like the general path counts
    assert len(twins.fast.templates) == 1


@pytest.mark.parametrize(
    ("name", "qtype"),
    [
        ("www.example.test", 1),  # A (and TXT at the same name)
        ("www.example.test", 16),
        ("nothere.example.test", 1),  # NXDOMAIN with the SOA
        ("mail.example.test", 28),  # NODATA
        ("alias.example.test", 1),  # CNAME chain
        ("x.wild.example.test", 1),  # wildcard
        ("a.sub.example.test", 1),  # referral with glue
        ("example.test", 2),  # NS with glue
        ("example.test", 6),  # SOA
        ("example.test", 255),  # ANY
        ("big.example.test", 16),  # truncated without EDNS: never a template
        ("other.test", 1),  # REFUSED
        ("gslb.example.test", 16),  # a static type at a wide IP's name
    ],
)
@pytest.mark.parametrize("edns", [{}, {"edns": True}, {"do": True}, {"edns": True, "payload": 4096}])
def test_every_kind_of_static_reply_is_the_same_on_both_paths(
    twins: Twins, name: str, qtype: int, edns: dict[str, Any]
) -> None:
    for qid in (1, 2, 3):
        twins.ask(make_query(name, qtype, qid=qid, **edns))


def test_what_fits_depends_on_the_clients_size(twins: Twins) -> None:
    """A referral whose glue does not all fit in 512 bytes: asked small first and large
    next (and the other way), every reply is the general path's for that size."""
    for name, qtype in (("x.deep.example.test", 1), ("example.test", 2)):
        for payload in (512, 4096, 512, 1232, 4096):
            twins.ask(make_query(name, qtype, edns=True, payload=payload))
        for _ in range(2):
            twins.ask(make_query(name, qtype))


def test_wide_ip_answers_come_from_the_kept_decision(twins: Twins) -> None:
    """A wide IP asked again by the same client is answered from the decision kept for it;
    another client decides afresh; with ECS the option comes back with the scope."""
    for source in ("127.0.1.9", "127.0.2.9", "192.0.2.200"):
        twins.ask(make_query("gslb.example.test"), source)
        twins.ask(make_query("gslb.example.test", ecs=(1, 24, bytes([203, 0, 113]))), source)
        twins.ask(make_query("gslb.example.test", ecs=(1, 0, b"")), source)
        if source != "192.0.2.200":  # (no IPv6 server for it: the zone answers, not kept)
            twins.ask(make_query("gslb.example.test", 28), source)
    twins.general_path_off()
    for source in ("127.0.1.9", "127.0.2.9", "192.0.2.200"):
        twins.ask(make_query("gslb.example.test", qid=99, rd=True), source)
        twins.ask(make_query("GSLB.example.test", edns=True), source)
        twins.ask(make_query("gslb.example.test", ecs=(1, 24, bytes([203, 0, 113]))), source)
        twins.ask(make_query("gslb.example.test", ecs=(1, 24, bytes([203, 0, 113])), cookie=True, do=True), source)
        twins.ask(make_query("gslb.example.test", ecs=(1, 0, b"")), source)
        if source != "192.0.2.200":  # (no IPv6 server for it: the zone answers, not kept)
            twins.ask(make_query("gslb.example.test", 28), source)


def test_health_changes_reach_kept_decisions_at_once(twins: Twins) -> None:
    """A kept decision for a server that goes down is not used again: the next answer is
    the general path's, on both nodes."""
    source = "127.0.1.9"
    twins.ask(make_query("gslb.example.test"), source)
    twins.ask(make_query("gslb.example.test"), source)
    twins.both(lambda n: n.store.put("admin/vs/vs1", {"state": "disabled"}))
    twins.both(lambda n: n.health.refresh())
    reply = twins.ask(make_query("gslb.example.test"), source)
    assert reply is not None and bytes([10, 0, 1, 1]) not in reply


def test_health_reevaluated_without_change_keeps_the_decisions(twins: Twins) -> None:
    """Verdicts come in all the time; as long as which servers are available does not
    change, the kept decisions stay (the fast path keeps answering)."""
    twins.ask(make_query("gslb.example.test"), "127.0.1.9")
    twins.ask(make_query("gslb.example.test"), "127.0.1.9")
    twins.both(lambda n: n.health.refresh())
    twins.both(lambda n: n.store.put("admin/vs/vs3", {"state": "enabled"}))  # as it was
    twins.general_path_off()
    twins.ask(make_query("gslb.example.test"), "127.0.1.9")


def test_kept_answers_are_counted_by_their_servers_like_the_general_path(twins: Twins) -> None:
    """Answers from kept decisions count for the virtual servers they hold (the dashboard's
    answers per data center) as the general path's do."""
    for _ in range(5):
        twins.ask(make_query("gslb.example.test"), "127.0.1.9")
    assert twins.node.stats.kept_hits >= 4  # (the fast path answered the repeats)
    tally = ("gslb.example.test", "p", "preferred", "topology", ("vs1",))
    assert dict(twins.node.stats.answered) == dict(twins.reference.stats.answered) == {tally: 5}


def test_a_change_elsewhere_keeps_the_decisions(tmp_path: Path) -> None:
    """A server that is in no pool of a wide IP going down ends none of that wide IP's kept
    decisions (in a large config some server is always changing); one in its pools does."""

    def two_wideips(raw: dict[str, Any]) -> None:
        raw["virtual_servers"]["vs4"] = {"address": "10.0.4.1", "datacenter": "DC1"}
        raw["pools"]["other"] = {"members": ["vs4"], "load_balancing": {"preferred": "topology"}}
        raw["wideips"]["other.example.test"] = {"pools": ["other"]}

    twins = Twins(tmp_path, two_wideips)
    source = "127.0.1.9"
    twins.ask(make_query("gslb.example.test"), source)
    twins.ask(make_query("gslb.example.test"), source)
    hits = twins.node.stats.kept_hits
    twins.both(lambda n: n.store.put("admin/vs/vs4", {"state": "disabled"}))
    twins.ask(make_query("gslb.example.test"), source)
    assert twins.node.stats.kept_hits == hits + 1
    twins.both(lambda n: n.store.put("admin/vs/vs3", {"state": "disabled"}))
    twins.ask(make_query("gslb.example.test"), source)
    assert twins.node.stats.kept_hits == hits + 1


def test_round_robin_keeps_its_turns(tmp_path: Path) -> None:
    """Round robin decisions are never kept: the fast node answers in the same turns."""

    def rr(raw: dict[str, Any]) -> None:
        raw["pools"]["p"]["load_balancing"] = {"preferred": "round_robin"}

    twins = Twins(tmp_path, rr)
    replies = {twins.ask(make_query("gslb.example.test"), "127.0.1.9") for _ in range(6)}
    assert len(replies) == 3


def test_persistence_and_its_refresh(tmp_path: Path) -> None:
    """With persistence the first answer writes the record, later ones reuse it; past half
    its life the next query refreshes it (a write), on both nodes alike."""

    def persist(raw: dict[str, Any]) -> None:
        raw["pools"]["p"]["load_balancing"] = {"preferred": "round_robin"}
        raw["wideips"]["gslb.example.test"]["persistence"] = {"ttl": 100, "ipv4_prefix": 24}

    twins = Twins(tmp_path, persist)
    first = twins.ask(make_query("gslb.example.test"), "198.51.100.7")
    for _ in range(3):
        assert twins.ask(make_query("gslb.example.test"), "198.51.100.8") == first
    fast = twins.fast.responder.answer
    twins.general_path_off()  # other clients of that network: the network's kept decision
    for source in ("198.51.100.9", "198.51.100.200"):
        assert twins.ask(make_query("gslb.example.test"), source) == first
    twins.fast.responder.answer = fast  # type: ignore[method-assign]
    written = twins.node.store.raw("persist/gslb.example.test/1/198.51.100.0/24")
    twins.clock.now += 51
    twins.ask(make_query("gslb.example.test"), "198.51.100.8")
    assert twins.node.store.raw("persist/gslb.example.test/1/198.51.100.0/24") is not written
    twins.clock.now += 101
    twins.both(lambda n: n.store.expire())
    for _ in range(3):
        twins.ask(make_query("gslb.example.test"), "198.51.100.8")


def test_paths_going_stale_ask_for_probes_on_both(tmp_path: Path) -> None:
    """RTT decisions hold until a path goes stale; then the answer asks for a probe on
    the fast node just as on the reference."""

    def rtt(raw: dict[str, Any]) -> None:
        raw["pools"]["p"]["load_balancing"] = {"preferred": "rtt", "alternate": "topology"}
        raw["prober"]["probe_interval"] = 60

    twins = Twins(tmp_path, rtt)
    ldns = "198.51.100.7"
    for dc, rtt_us in (("DC1", 30_000), ("DC2", 10_000), ("DC3", 50_000)):
        value = {"rtt": rtt_us, "last_rtt": rtt_us, "hops": 0, "completion": 10000, "protocol": "udp"}
        value.update({"failures": 0, "window": "1", "by": "n1", "at": 1000.0})
        twins.both(lambda n, dc=dc, value=value: n.store.put(f"path/{ldns}/{dc}", value))  # type: ignore[misc]
    for _ in range(3):
        twins.ask(make_query("gslb.example.test"), ldns)
    assert twins.node.store.get(f"probe/{ldns}") is None
    twins.clock.now += 61
    twins.ask(make_query("gslb.example.test"), ldns)
    assert twins.node.store.get(f"probe/{ldns}") is not None
    assert twins.reference.store.get(f"probe/{ldns}") is not None


QUERY = st.builds(
    make_query,
    st.sampled_from(
        ["gslb.example.test", "GSLB.Example.Test", "www.example.test", "nothere.example.test", "big.example.test"]
    ),
    st.sampled_from([1, 28, 16, 255]),
    qid=st.integers(0, 65535),
    rd=st.booleans(),
    cd=st.booleans(),
    edns=st.booleans(),
    do=st.booleans(),
    payload=st.sampled_from([0, 512, 1232, 4096]),
    ecs=st.none() | st.sampled_from([(1, 24, bytes([203, 0, 113])), (1, 16, bytes([127, 1])), (2, 48, bytes(6))]),
    cookie=st.booleans(),
)
SOURCE = st.sampled_from(["127.0.1.9", "127.0.2.9", "192.0.2.200", "::ffff:127.0.2.9", "2001:db8:aaaa::1"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(QUERY, SOURCE) | st.sampled_from(["tick", "disable", "enable"]), max_size=40))
def test_any_sequence_of_queries_and_changes(tmp_path_factory: pytest.TempPathFactory, steps: list[Any]) -> None:
    """Whatever the queries and the changes between them, both paths reply alike."""
    twins = Twins(tmp_path_factory.mktemp("twins"))
    for step in steps:
        if step == "tick":
            twins.clock.now += 40
            twins.both(lambda n: n.store.expire())
        elif step in ("disable", "enable"):
            twins.both(lambda n, s=step: n.store.put("admin/vs/vs2", {"state": f"{s}d"}))  # type: ignore[misc]
            twins.both(lambda n: n.health.refresh())
        else:
            twins.ask(*step)


def persistent_and_partly_trusted(raw: dict[str, Any]) -> None:
    """Persistence per /24 over round robin; only 127.0.1.0/24 is trusted with ECS."""
    raw["pools"]["p"]["load_balancing"] = {"preferred": "round_robin"}
    raw["wideips"]["gslb.example.test"]["persistence"] = {"ttl": 100, "ipv4_prefix": 24}
    raw["dns_server"]["ecs_trusted"] = ["127.0.1.0/24"]


def test_kept_persistence_decisions_echo_the_scope_only_for_trusted_resolvers(tmp_path: Path) -> None:
    """A decision kept for an untrusted resolver's network depended on none of the client
    subnet it sends: the fast path echoes scope 0, as the general path does; a trusted
    resolver's gets the persistence prefix."""
    twins = Twins(tmp_path, persistent_and_partly_trusted)
    subnet = (1, 24, bytes([203, 0, 113]))
    for source in ("127.0.2.9", "127.0.1.9"):
        replies = [twins.ask(make_query("gslb.example.test", ecs=subnet), source) for _ in range(3)]
        # (written, then held and kept, then answered from what was kept)
        reply = replies[-1]
        assert reply is not None
        scope = reply[-4]  # the option's last bytes: family 1, source 24, scope, 203.0.113
        assert scope == (24 if source == "127.0.1.9" else 0)
    twins.general_path_off()
    for source in ("127.0.2.9", "127.0.2.10", "127.0.1.9"):
        twins.ask(make_query("gslb.example.test", ecs=subnet), source)


#: resolvers trusted with ECS (127.0.1.x) and not (127.0.2.x, 192.0.2.x), some in one /24
RESOLVER = st.sampled_from(["127.0.1.9", "127.0.1.10", "127.0.2.9", "127.0.2.10", "192.0.2.200", "::ffff:127.0.1.9"])
SUBNET = st.none() | st.sampled_from(
    [(1, 24, bytes([203, 0, 113])), (1, 32, bytes([203, 0, 113, 7])), (1, 24, bytes([127, 0, 2])), (1, 0, b"")]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(RESOLVER, SUBNET) | st.sampled_from(["tick", "disable", "enable"]), max_size=40))
def test_persistence_per_resolver_is_the_same_on_both_paths(
    tmp_path_factory: pytest.TempPathFactory, steps: list[Any]
) -> None:
    """Persistence keyed on the resolver and the client subnet, from trusted and untrusted
    resolvers, with the decisions kept for a network: both paths reply alike."""
    twins = Twins(tmp_path_factory.mktemp("twins"), persistent_and_partly_trusted)
    for step in steps:
        if step == "tick":
            twins.clock.now += 40
            twins.both(lambda n: n.store.expire())
        elif step in ("disable", "enable"):
            twins.both(lambda n, s=step: n.store.put("admin/vs/vs2", {"state": f"{s}d"}))  # type: ignore[misc]
            twins.both(lambda n: n.health.refresh())
        else:
            source, ecs = step
            twins.ask(make_query("gslb.example.test", ecs=ecs), source)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.binary(max_size=80)
    | st.builds(lambda q, cut, junk: q[:cut] + junk, QUERY, st.integers(0, 80), st.binary(max_size=8))
)
def test_any_packet_gets_the_general_paths_reply(twins: Twins, data: bytes) -> None:
    """Malformed, truncated or padded queries: the fast path never raises and replies as
    the general path does (FORMERR, no reply, ...)."""
    twins.ask(data)
    twins.ask(data)
