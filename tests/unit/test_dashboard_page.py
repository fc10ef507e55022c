"""The dashboard page and its scripts as the node serves them (`gtmcluster.api.dashboard`):
every script the page imports is served as JavaScript and every file shipped is one it
serves; the page's CSP allows scripts of its own origin only (no inline script); no script
puts server text into HTML (innerHTML and its kin): elements are built from text; writes
are JSON POSTs with the bearer token of the #token= fragment, never a cookie."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from gtmcluster.api import dashboard
from gtmcluster.api.server import ApiError

STATIC = resources.files("gtmcluster.api").joinpath("static")
#: ways to turn a string into markup or code
UNSAFE = re.compile(
    r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|createContextualFragment"
)


def scripts() -> dict[str, str]:
    return {name: dashboard.script(name).decode() for name in sorted(dashboard.SCRIPTS)}


def test_every_script_is_served_as_javascript_and_every_shipped_one_is_known() -> None:
    shipped = {p.name.removesuffix(".js") for p in STATIC.iterdir() if p.name.endswith(".js")}
    assert shipped == set(dashboard.SCRIPTS)
    for name in dashboard.SCRIPTS:
        answer = dashboard.dashboard_script({}, {"script": f"{name}.js"})
        assert answer.content_type == b"text/javascript; charset=utf-8" and answer.body
    with pytest.raises(ApiError) as refused:
        dashboard.dashboard_script({}, {"script": "nothere.js"})
    assert refused.value.code == 404


def test_the_page_loads_its_main_module_and_each_import_is_a_script_served() -> None:
    page = dashboard.page().decode()
    assert re.findall(r"<script[^>]*>", page) == ['<script type="module" src="/dashboard/main.js">']
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert csp is not None
    directives = dict(d.strip().split(" ", 1) for d in csp.group(1).split(";"))
    assert directives["script-src"] == "'self'" and directives["default-src"] == "'none'"
    for name, text in scripts().items():
        for imported in re.findall(r'from "\./([a-z]+)\.js"', text):
            assert imported in dashboard.SCRIPTS, (name, imported)
        assert len(text.splitlines()) < 600, name


def test_no_script_makes_markup_or_code_of_strings() -> None:
    for name, text in scripts().items():
        assert not UNSAFE.search(text), (name, UNSAFE.search(text))
    assert not UNSAFE.search(dashboard.page().decode().split("<script", 1)[1])


def test_writes_carry_the_fragment_token_as_json_and_no_cookie() -> None:
    common = dashboard.script("common").decode()
    assert 'location.hash.replace(/^#/, "")).get("token")' in common
    assert "headers.Authorization = `Bearer ${token}`" in common
    assert '"Content-Type": "application/json"' in common
    for name, text in scripts().items():
        assert "document.cookie" not in text and "credentials:" not in text, name
        # every write goes through postJson (the one place a POST is made)
        assert name == "common" or 'method: "POST"' not in text, name


def test_views_that_need_a_role_say_which() -> None:
    """The page hides what the identity's role may not do and says what it needs: the admin
    actions the operator role, the config history the admin role (`access.needs`)."""
    texts = scripts()
    assert 'may("operator")' in texts["actions"] and 'needs("operator"' in texts["actions"]
    assert 'may("admin")' in texts["config"] and 'needs("admin"' in texts["config"]
    assert '"/api/v1/whoami"' in texts["access"]
