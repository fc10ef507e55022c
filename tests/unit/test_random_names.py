"""Names the client chooses: NXDOMAIN, NODATA and wildcard wide IP answers to names never
asked before, through the fast path, byte for byte the general path's.

A flood of random names must not cost the general path per name nor keep anything per
name: the negative answer is kept per parent (`dns.negative`), a wildcard wide IP's reply
per wide IP and client (`KeptReplies.client_hits`). Each test answers on twin nodes (the
reference by the general path only), then turns the fast node's general path off and asks
new names: what the fast node answers, it answers from what it kept.
"""

from __future__ import annotations

import random
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import configs, twins
from tests.support.twins import Twins, make_query


def wildcards(raw: dict[str, Any]) -> None:
    raw["pools"]["one"] = {"members": ["vs1"], "ttl": 20}
    raw["wideips"]["*.apps.example.test"] = {"pools": ["one"]}
    raw["wideips"]["*.six.example.test"] = {"type": ["A", "AAAA"], "pools": ["p", "p6"]}


@pytest.fixture
def pair(tmp_path: Path) -> Twins:
    return Twins(tmp_path, wildcards)


def label(rng: random.Random, size: int = 10) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits + "-") for _ in range(size))


EDNS: list[dict[str, Any]] = [
    {},
    {"edns": True},
    {"do": True},
    {"edns": True, "payload": 4096},
    {"edns": True, "payload": 512},
]


@pytest.mark.parametrize("edns", EDNS)
@pytest.mark.parametrize(
    ("parent", "qtype"),
    [
        ("example.test", 1),  # NXDOMAIN below the apex
        ("example.test", 16),
        ("example.test", 255),  # ANY
        ("www.example.test", 1),  # below an existing name
        ("c.example.test", 28),  # below an empty non-terminal (b.c is one too: a.b.c exists)
        ("nothere.example.test", 1),  # below a name that does not exist either
        ("apps.example.test", 16),  # NODATA: below a wildcard wide IP, a type it does not answer
        ("wild.example.test", 16),  # NODATA: below the zone's own wildcard
    ],
)
def test_random_names_below_a_parent_are_answered_from_one_kept_answer(
    pair: Twins, parent: str, qtype: int, edns: dict[str, Any]
) -> None:
    rng = random.Random(f"{parent}/{qtype}")
    pair.ask(make_query(f"{label(rng)}.{parent}", qtype, **edns))
    pair.general_path_off()
    for size in (1, 5, 10, 30, 63):
        name = f"{label(rng, size)}.{parent}"
        pair.ask(make_query(name, qtype, qid=size, rd=size % 2 == 0, cd=size % 3 == 0, **edns))
        pair.ask(make_query(name.upper(), qtype, qid=size + 1, **edns))
    kept = pair.node.kept
    assert not kept.static_hits and not kept.templates and len(kept.negatives) == 1
    assert pair.node.stats.queries == pair.reference.stats.queries  # (counted as the general path counts)


def test_names_that_exist_are_never_answered_as_absent(pair: Twins) -> None:
    """After a negative answer is kept for a parent, the names below it that exist (a
    node, an empty non-terminal, a wide IP, a delegation, the names the SOA holds) still get
    their own answers; each is the general path's."""
    rng = random.Random(3)
    for qtype in (1, 16, 28):
        pair.ask(make_query(f"{label(rng)}.example.test", qtype))
        pair.ask(make_query(f"{label(rng)}.c.example.test", qtype))
        for name in (
            "www.example.test",
            "mail.example.test",
            "b.c.example.test",  # an empty non-terminal
            "gslb.example.test",  # a wide IP
            "sub.example.test",  # a delegation
            "x.sub.example.test",
            "hostmaster.example.test",  # the SOA's RNAME: its answer points into the question
            "Ns1.example.test",
            "example.test",
            "x.hostmaster.example.test",
            "apps.example.test",
            "wild.example.test",
        ):
            for _ in range(2):
                pair.ask(make_query(name, qtype))
                pair.ask(make_query(name, qtype, edns=True))


def test_a_name_at_the_size_limit(pair: Twins) -> None:
    """Names up to 255 bytes in wire form, asked without EDNS (512 bytes) and with it."""
    for edns in ({}, {"edns": True}, {"edns": True, "payload": 512}):
        pair.ask(make_query("x.example.test", **edns))
        for fill in (61, 62, 63):
            name = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * (fill - 14)]) + ".example.test"
            pair.ask(make_query(name, **edns))


def test_a_negative_answer_that_does_not_fit_goes_to_the_general_path(tmp_path: Path) -> None:
    """An SOA with long names: a long absent name's NXDOMAIN does not fit 512 bytes (the
    general path truncates it); a short one's comes from the kept answer."""
    long_one = ".".join(["m" * 60] * 3)
    zone = twins.ZONE.replace(
        "ns1.example.test. hostmaster.example.test.", f"{long_one}.example.test. {long_one}.x.test."
    )
    configs.write(tmp_path, configs.base(), zone)  # (the twins keep this zone file)
    pair = Twins(tmp_path)
    pair.ask(make_query("short.example.test"))
    for size in (40, 63):
        name = ".".join(["q" * size] * 3) + ".example.test"
        pair.ask(make_query(name))
        pair.ask(make_query(name, edns=True))
    # (without EDNS, only the short name's answer was kept: the long ones were truncated)
    assert [key[0] for key in pair.node.kept.negatives if key[2] == 0] == [b"\x07example\x04test\x00"]
    pair.general_path_off()
    pair.ask(make_query("other.example.test"))


def test_the_names_the_soa_ends_with_go_to_the_general_path(tmp_path: Path) -> None:
    """The SOA names names that are not in the zone: the answer to one of them points into
    its first label (only its own answer), so it is always the general path's; the names
    below them, whose answers point into the parent, come from the kept answer."""
    zone = twins.ZONE.replace("ns1.example.test. hostmaster.example.test.", "a.b.example.test. h.example.test.")
    configs.write(tmp_path, configs.base(), zone)
    pair = Twins(tmp_path)
    for name in ("zz.example.test", "x.b.example.test", "y.h.example.test", "x.a.b.example.test"):
        pair.ask(make_query(name))
    pair.general_path_off()
    for name in ("yy.example.test", "yy.b.example.test", "Yy.H.example.test", "q.a.b.example.test"):
        pair.ask(make_query(name))
    del pair.fast.responder.answer  # (the general path back)
    for name in ("b.example.test", "a.b.example.test", "h.example.test", "H.example.test"):
        pair.ask(make_query(name))
        pair.ask(make_query(name, 16, edns=True))
    assert len(pair.node.kept.templates) == 6  # (their own templates: 3 names, 2 questions each)


@given(
    labels=st.lists(
        st.text(alphabet=string.ascii_letters + string.digits + "-_*", min_size=1, max_size=63), min_size=1, max_size=4
    ),
    parent=st.sampled_from(
        [
            "example.test",
            "www.example.test",
            "c.example.test",
            "apps.example.test",
            "wild.example.test",
            "sub.example.test",
            "hostmaster.example.test",
            "b.c.example.test",
        ]
    ),
    qtype=st.sampled_from([1, 2, 6, 15, 16, 28, 33, 43, 255]),
    edns=st.sampled_from([*EDNS, {"ecs": (1, 24, bytes([203, 0, 113]))}, {"ecs": (2, 0, b""), "do": True}]),
)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_name_gets_the_general_paths_reply(
    pair: Twins, labels: list[str], parent: str, qtype: int, edns: dict[str, Any]
) -> None:
    name = ".".join([*labels, parent])
    if len(twins.wire_name(name)) <= 255:
        pair.ask(make_query(name, qtype, **edns))


# -- wildcard wide IPs -----------------------------------------------------------------------


@pytest.mark.parametrize("edns", [*EDNS, {"ecs": (1, 24, bytes([203, 0, 113]))}])
@pytest.mark.parametrize(
    ("suffix", "qtype"), [("apps.example.test", 1), ("six.example.test", 28), ("six.example.test", 1)]
)
def test_random_names_below_a_wildcard_wide_ip_keep_nothing_per_name(
    pair: Twins, suffix: str, qtype: int, edns: dict[str, Any]
) -> None:
    """The decision is the client's, not the name's: after the first name, every name
    below the wildcard is answered from the reply kept for the wide IP and the client, with
    its own question; nothing is kept by the name."""
    rng = random.Random(5)
    sources = ("127.0.1.9", "127.0.2.9", "198.51.100.7")
    for source in sources:
        pair.ask(make_query(f"{label(rng)}.{suffix}", qtype, **edns), source)
    pair.general_path_off()
    for size in (1, 9, 40, 63):
        for source in sources:
            name = f"{label(rng, size)}.{label(rng, 3)}.{suffix}"
            pair.ask(make_query(name, qtype, qid=size, rd=True, **edns), source)
            pair.ask(make_query(name.upper(), qtype, qid=size, cd=True, **edns), source)
    kept = pair.node.kept
    assert not kept.wide_hits and len(kept.client_hits) == len(kept.replies) == len(sources)
    assert pair.node.stats.queries == pair.reference.stats.queries
    assert pair.node.stats.answered == pair.reference.stats.answered


def test_the_wide_ips_own_name_and_a_wildcard_share_nothing_wrong(pair: Twins) -> None:
    """gslb's own name is kept by its bytes as before, names below a wildcard are not; the
    two wide IPs' replies kept by client stay apart, and a long name gets its own question."""
    for source in ("127.0.1.9", "127.0.2.9"):
        for name in ("gslb.example.test", "x.six.example.test", "GSLB.example.test", "y.six.example.test"):
            for _ in range(2):
                pair.ask(make_query(name, 28, edns=True, payload=512), source)
                pair.ask(make_query(name, 1), source)
    long_name = ".".join(["l" * 63] * 3) + ".six.example.test"
    pair.ask(make_query(long_name, 28), "127.0.1.9")
    assert {query[10:14] for query, _ in pair.node.kept.wide_hits} == {b"\x04gsl", b"\x04GSL"}
