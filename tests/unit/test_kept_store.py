"""The kept-replies store (`dns.kept.KeptReplies`): its one invalidation entry point and its bounds.

Each change reaches exactly the kept decisions it concerns (records read, a wide IP's
health), or all of them; the node feeds every change through it (`Node.kept`).
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

from gtmcluster.dns import kept
from gtmcluster.dns.kept import KeptReplies, WideHit
from gtmcluster.dns.negative import Negative
from gtmcluster.lb.cache import DecisionCache, Entry
from gtmcluster.lb.trace import Action, Decision
from gtmcluster.state.record import Record
from tests.support.twins import Twins, make_query


def store() -> tuple[KeptReplies, dict[str, Entry]]:
    """A store with three fresh kept decisions: "a" read record k1 (wide IP w1), "b" k2 (w2),
    "c" nothing (w2)."""
    held: dict[str, Record | None] = {}
    cache = DecisionCache(held.get, lambda: 0.0, lambda w: 0)
    entries = {}
    for name, wideip, reads in (("a", "w1", (("k1", None),)), ("b", "w2", (("k2", None),)), ("c", "w2", ())):
        cache.put(name, wideip, Decision(Action.ANSWER, ttl=30), reads, 0, 0.0)
        entry = cache.entry(name)
        assert entry is not None
        entries[name] = entry
    return KeptReplies(cache), entries


def fresh(entries: dict[str, Entry]) -> set[str]:
    return {name for name, entry in entries.items() if entry.fresh}


def test_a_record_change_ends_its_readers_only() -> None:
    replies, entries = store()
    replies.invalidate(keys=("k2", "elsewhere"))
    assert fresh(entries) == {"a", "c"}


def test_a_health_change_ends_its_wide_ips_decisions_only() -> None:
    replies, entries = store()
    replies.invalidate(wideips=("w2",))
    assert fresh(entries) == {"a"}


def test_everything_ends_every_kept_decision() -> None:
    replies, entries = store()
    assert replies.decisions is not None
    replies.invalidate(everything=True)
    assert fresh(entries) == set() and len(replies.decisions) == 0
    assert not any(replies.decisions.holds(entry) for entry in entries.values())


def test_without_kept_decisions_a_change_is_nothing() -> None:
    KeptReplies().invalidate(keys=("k",), wideips=("w",), everything=True)


def test_what_is_kept_is_bounded() -> None:
    replies = KeptReplies()
    counter = ("", "A", "NOERROR", "static")
    for i in range(kept.MAX_HITS + 1):
        replies.keep_static(b"q%d" % i, b"r", counter)
    assert len(replies.static_hits) == 1  # full: it started again
    for i in range(kept.MAX_TEMPLATES + 1):
        replies.keep_template((b"q%d" % i, 0, 512), (b"r", 0, counter))
    assert len(replies.templates) == 1
    negative = cast(Negative, object())
    for i in range(kept.MAX_NEGATIVES + 1):
        replies.keep_negative((b"p%d" % i, 1, 0), negative)
    assert len(replies.negatives) == 1
    hit = cast(WideHit, object())
    for i in range(kept.MAX_WIDE_HITS + 1):
        replies.keep_client(("w", 1, 0, str(i)), hit)
    assert len(replies.client_hits) == 1


def test_the_node_feeds_its_changes_to_the_responders_store(tmp_path: Path) -> None:
    """The store the fast path reads is the running responder's, and the node's changes
    reach it: a kept wide IP reply's decision loses its fresh mark when a record it read
    changes."""
    twins = Twins(tmp_path, lambda raw: raw["wideips"]["gslb.example.test"].update(persistence={"ttl": 100}))
    assert twins.fast.kept is twins.node.responder.kept is twins.node.kept
    assert twins.node.kept.decisions is twins.node.cache
    query, source = make_query("gslb.example.test"), "198.51.100.8"
    for _ in range(3):
        twins.ask(query, source)
    hit = twins.node.kept.wide_hits[(query[2:], source)]
    assert hit.entry.fresh
    key = next(key for key, _ in hit.entry.reads if key.startswith("persist/"))
    twins.both(lambda n: n.store.put(key, {"pool": "p", "members": ["vs2"]}, 100))
    assert not hit.entry.fresh
    twins.ask(query, source)
