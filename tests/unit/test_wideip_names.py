"""Wide IP names: the lookup (exact names and aliases before wildcards, longest wildcard
first, not into a child zone) against a plain model of it, and the config's checks of
wildcards and aliases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gtmcluster.config.load import load
from gtmcluster.config.model import WideIP
from gtmcluster.config.problems import ConfigError, Problem, format_path
from gtmcluster.config.wideipnames import WideIPNames
from gtmcluster.dnsdata import names
from gtmcluster.dnsdata.names import Name
from tests.support import configs

ZONE: Name = (b"z",)
labels = st.sampled_from([b"a", b"b", b"c"])
#: names below the zone z, one to four labels deep
below = st.lists(labels, min_size=1, max_size=4).map(lambda ls: (*ls, *ZONE))
#: a wide IP's name: exact, or a wildcard over a name in the zone (the apex included)
written = st.one_of(below, st.lists(labels, max_size=3).map(lambda ls: (b"*", *ls, *ZONE)))


def wideip(name: Name, aliases: tuple[Name, ...] = ()) -> WideIP:
    text = names.to_text(name).rstrip(".")
    return WideIP(text, name, frozenset({1}), (), "round_robin", None, None, aliases=aliases)


def model(wideips: list[WideIP], key: Name, floor: int) -> WideIP | None:
    """What should answer *key*, by the rules spelled out: a name of its own (or an alias,
    not a wildcard) first; else, of the wildcards strictly above *key* and not above depth *floor*, the
    one with the most labels."""
    every = [(name, w) for w in wideips for name in (w.labels, *w.aliases)]
    for name, w in every:
        if name == key and name[0] != b"*":
            return w
    covering = [
        (len(name) - 1, w)
        for name, w in every
        if name[0] == b"*" and len(key) > len(name) - 1 and key[-(len(name) - 1) :] == name[1:]
        if len(name) - 1 >= floor
    ]
    return max(covering, key=lambda c: c[0])[1] if covering else None


@st.composite
def configs_of_names(draw: st.DrawFn) -> list[WideIP]:
    """Wide IPs with distinct names and aliases (as the config read makes them)."""
    taken = draw(st.lists(written, min_size=1, max_size=8, unique=True))
    out = []
    while taken:
        own, taken = taken[0], taken[1:]
        n = draw(st.integers(0, min(2, len(taken))))
        out.append(wideip(own, tuple(taken[:n])))
        taken = taken[n:]
    return out


@given(configs_of_names(), st.one_of(below, written), st.integers(0, 3))
def test_lookup_is_the_model(wideips: list[WideIP], key: Name, floor: int) -> None:
    """Exact names and aliases win; else the wildcard with the longest suffix of the name
    (at least one label more than it), none above *floor* labels."""
    assert WideIPNames.of(wideips).find(key, floor) is model(wideips, key, floor)


@given(configs_of_names())
def test_an_alias_answers_as_its_wide_ip(wideips: list[WideIP]) -> None:
    """Every alias and every own name finds its wide IP (a wildcard's own name, with the
    `*`, too), and the index holds each name once."""
    index = WideIPNames.of(wideips)
    for w in wideips:
        for name in (w.labels, *w.aliases):
            assert index.find(name) is w
    assert sorted(index.names()) == sorted(n for w in wideips for n in (w.labels, *w.aliases))


def test_longest_wildcard_and_exact_names_win() -> None:
    """The examples of the docs: one wildcard under another, an exact name under both."""
    outer = wideip((b"*", b"apps", b"z"))
    inner = wideip((b"*", b"eu", b"apps", b"z"))
    exact = wideip((b"api", b"eu", b"apps", b"z"), aliases=((b"api", b"z"),))
    index = WideIPNames.of([outer, inner, exact])
    assert index.find((b"web", b"apps", b"z")) is outer
    assert index.find((b"a", b"b", b"c", b"apps", b"z")) is outer  # any number of labels
    assert index.find((b"eu", b"apps", b"z")) is outer
    assert index.find((b"web", b"eu", b"apps", b"z")) is inner
    assert index.find((b"api", b"eu", b"apps", b"z")) is exact
    assert index.find((b"v1", b"api", b"eu", b"apps", b"z")) is inner
    assert index.find((b"api", b"z")) is exact
    assert index.find((b"apps", b"z")) is None  # not the wildcard's own parent
    assert index.find((b"web", b"apps", b"z"), floor=3) is None  # inside a child zone apps.z


# --- the config -------------------------------------------------------------------------------


def problems(tmp_path: Path, wideips: dict[str, Any], zone: str = configs.ZONE) -> list[Problem]:
    raw = configs.base()
    raw["wideips"].update(wideips)
    with pytest.raises(ConfigError) as caught:
        load(configs.write(tmp_path, raw, zone))
    return caught.value.problems


def only(found: list[Problem], path: str, fragment: str) -> str:
    """The text of the one problem, which is at *path* and says *fragment*."""
    text = "\n".join(str(p) for p in found)
    assert len(found) == 1 and format_path(found[0].path) == path and fragment in found[0].message, text
    return str(found[0])


@pytest.mark.parametrize(
    ("wideips", "path", "fragment"),
    [
        pytest.param(
            {"www.example.test": {"pools": ["p"], "aliases": ["gslb.example.test"]}},
            'wideips."www.example.test".aliases[0]',
            "gslb.example.test is already the name of wide IP 'gslb.example.test'",
            id="alias-is-another-wide-ip",
        ),
        pytest.param(
            {
                "one.example.test": {"pools": ["p"], "aliases": ["both.example.test"]},
                "two.example.test": {"pools": ["p"], "aliases": ["BOTH.example.test."]},
            },
            'wideips."two.example.test".aliases[0]',
            "both.example.test is already an alias of wide IP 'one.example.test'",
            id="alias-twice",
        ),
        pytest.param(
            {
                "one.example.test": {"pools": ["p"], "aliases": ["two.example.test"]},
                "two.example.test": {"pools": ["p"]},
            },
            'wideips."two.example.test"',
            "two.example.test is already an alias of wide IP 'one.example.test'",
            id="wide-ip-is-an-alias",
        ),
        pytest.param(
            {"one.example.test": {"pools": ["p"], "aliases": ["one.example.test"]}},
            'wideips."one.example.test".aliases[0]',
            "one.example.test is already this wide IP's name or alias",
            id="alias-is-its-own-name",
        ),
        pytest.param(
            {"one.example.test": {"pools": ["p"], "aliases": "www.elsewhere.test"}},
            'wideips."one.example.test".aliases',
            "not inside any served zone (zones: example.test.)",
            id="alias-outside-the-zones",
        ),
        pytest.param(
            {"one.example.test": {"pools": ["p"], "aliases": ["x.sub.example.test"]}},
            'wideips."one.example.test".aliases[0]',
            "at or below the delegation sub.example.test. in zone example.test.",
            id="alias-below-a-delegation",
        ),
        pytest.param(
            {"one.example.test": {"pools": ["p"], "aliases": ["chain.example.test"]}},
            'wideips."one.example.test".aliases[0]',
            "zone example.test. has a CNAME at this name",
            id="alias-at-a-cname",
        ),
        pytest.param(
            {"one.example.test": {"pools": ["p"], "aliases": [7]}},
            'wideips."one.example.test".aliases[0]',
            "must be a non-empty string, not a number",
            id="alias-not-a-name",
        ),
        pytest.param(
            {"*.x.*.example.test": {"pools": ["p"]}},
            'wideips."*.x.*.example.test"',
            "a wildcard is '*' as the whole leftmost label",
            id="star-not-leftmost",
        ),
        pytest.param(
            {"w?b.example.test": {"pools": ["p"]}},
            'wideips."w?b.example.test"',
            "'?' and '*' inside a label are not supported",
            id="question-mark",
        ),
        pytest.param(
            {"*.sub.example.test": {"pools": ["p"]}},
            'wideips."*.sub.example.test"',
            "at or below the delegation sub.example.test.",
            id="wildcard-below-a-delegation",
        ),
    ],
)
def test_bad_names_are_one_problem_at_their_key_path(
    tmp_path: Path, wideips: dict[str, Any], path: str, fragment: str
) -> None:
    text = only(problems(tmp_path, wideips), path, fragment)
    assert text.startswith(f"{tmp_path / 'cluster.yaml'}: {path}: ")


def test_a_cname_a_wildcard_covers_is_a_problem_of_the_wildcard(tmp_path: Path) -> None:
    """As at a wide IP's own name, a zone CNAME at a name a wildcard answers is refused,
    named at the wildcard (once per CNAME); a CNAME below a delegation is not answered
    from the zone and is no problem."""
    zone = configs.ZONE + "web.apps IN CNAME www\nold.x.apps IN CNAME www\nd.apps IN NS ns.d\nc.d.apps IN CNAME x\n"
    found = problems(tmp_path, {"*.apps.example.test": {"pools": ["p"]}}, zone)
    assert sorted(p.message for p in found) == [
        "zone example.test. has a CNAME at old.x.apps.example.test., a name this wildcard covers",
        "zone example.test. has a CNAME at web.apps.example.test., a name this wildcard covers",
    ]
    assert {format_path(p.path) for p in found} == {'wideips."*.apps.example.test"'}


def test_wildcards_and_aliases_are_read_into_the_index(tmp_path: Path) -> None:
    """A good config: the wide IPs are keyed by their own names only; the index answers
    aliases and the names below a wildcard; the zone gets the names, so that they exist."""
    raw = configs.base()
    raw["wideips"]["gslb.example.test"]["aliases"] = ["glb.example.test", "*.glb.example.test"]
    raw["wideips"]["*.apps.example.test"] = {"pools": ["p"]}
    config = load(configs.write(tmp_path, raw))
    key = names.key
    assert set(config.wideips) == {key(names.from_text("gslb.example.test")), (b"*", b"apps", b"example", b"test")}
    gslb = config.wideips[key(names.from_text("gslb.example.test"))]
    apps = config.wideips[(b"*", b"apps", b"example", b"test")]
    assert gslb.aliases == ((b"glb", b"example", b"test"), (b"*", b"glb", b"example", b"test"))
    assert apps.name == "*.apps.example.test"
    found = config.wideip_names.find_in
    assert found(config.zones, key(names.from_text("GLB.example.test"))) is gslb
    assert found(config.zones, key(names.from_text("a.b.glb.example.test"))) is gslb
    assert found(config.zones, key(names.from_text("x.y.apps.example.test"))) is apps
    assert found(config.zones, key(names.from_text("apps.example.test"))) is None
    zone = next(iter(config.zones))
    assert zone.exists((b"glb", b"example", b"test")) and zone.exists((b"apps", b"example", b"test"))
    # each wide IP once where wide IPs are listed, by its own name
    assert config.wideips_of["vs1"] == ("gslb.example.test", "*.apps.example.test")
