"""The browser snippet as served (`gtmcluster.rum.snippet`): small, no third-party code
(no URL but those it builds from what the node fills in), and nothing filled in can become
code. It runs in a real browser in ``tests/process/test_rum_browser.py``."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from gtmcluster.rum import snippet

TARGETS = {"dc1": "https://dc1.example.net/rum/v1/object", "dc2": "https://cdn.dc2.example.net/pixel.gif"}


def code_of(text: str) -> str:
    """*text* without its comments."""
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def test_it_is_small_and_documented_at_the_top() -> None:
    assert snippet.template().startswith("/* gtmcluster RUM snippet")
    assert len(snippet.template().encode()) < 3 * 1024
    assert len(snippet.render(TARGETS, "gslb.example.com", "https://rum.example.net")) < 3 * 1024


def test_it_holds_no_external_url_and_loads_no_code() -> None:
    code = code_of(snippet.template())
    # the only scheme written is the one-use name's, built from the id and the zone filled in
    assert re.findall(r"\w+://[^\"']*", code) == ["https://"]
    assert re.findall(r"\"https://\" \+ id", code) == ['"https://" + id']
    banned_words = ("eval(", "Function(", "import(", "importScripts", "innerHTML", "document.write", "<script")
    for banned in banned_words:
        assert banned not in code, banned
    served = snippet.render(TARGETS, "gslb.example.com").decode()
    assert set(re.findall(r"https?://[^\"']+", code_of(served))) == set(TARGETS.values())


@given(st.dictionaries(st.text(max_size=12), st.text(max_size=40), max_size=4), st.text(max_size=20))
def test_nothing_filled_in_ends_the_script_or_its_string(targets: dict[str, str], origin: str) -> None:
    served = snippet.render(targets, "example.com", origin).decode()
    tail = served[served.rindex("})(") :]
    for bad in ("<", ">", "&", "\u2028", "\u2029"):
        assert bad not in tail
    assert served.startswith(snippet.template()[: snippet.template().index("/*CONFIG*/")])


def test_only_dns_names_are_zones() -> None:
    assert snippet.zone_name("GSLB.Example.com.") == "gslb.example.com"
    for bad in ("", ".", "a..b", "-a.com", "a b", "</script>", "a" * 64 + ".com", 'x"+alert(1)+"', "é.com"):
        assert snippet.zone_name(bad) is None, bad
