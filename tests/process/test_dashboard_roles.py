"""The dashboard by role, in a real browser (headless Chromium, driven as in
test_dashboard.py) against a real `twistd gtm` member whose API has a users file
(`gtmcluster users add`): ``alice`` an operator, ``vera`` a viewer.

- vera's page (``#token=`` hers) says who she is, offers no admin action and says the
  config history needs the admin role;
- alice's page disables data center DC1 with its button; the Audit panel then lists that
  change under her name, applied.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_tool
from tests.process.test_dashboard import Chromium
from tests.support.trio import Group, running_group

pytestmark = pytest.mark.process

GTMCLUSTER = Path(sys.executable).parent / "gtmcluster"

#: what the page says of roles and the audit, read in the browser
ROLES_JS = """(() => {
  if (!document.body || !document.body.dataset.polls) return null;
  const all = (sel) => [...document.querySelectorAll(sel)];
  const note = document.getElementById("config-note");
  return {
    polls: Number(document.body.dataset.polls),
    role: document.body.dataset.role,
    identity: document.body.dataset.identity,
    whoami: document.getElementById("whoami").textContent,
    actions: all("button[data-action]").map((e) => `${e.dataset.action} ${e.dataset.target}`),
    form: !document.getElementById("act-form").hidden,
    configNote: note.hidden ? "" : note.textContent,
    needs: note.dataset.needs || "",
    acted: document.body.dataset.acted,
    audit: all("[data-audit]").map((e) => ({ who: e.dataset.who, result: e.dataset.result, text: e.innerText })),
  };
})()"""


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Group, Chromium, dict[str, str]]]:
    require_tool("chromium", "chromium")
    workdir = tmp_path_factory.mktemp("dashroles")
    tokens = {}
    for name, role in (("alice", "operator"), ("vera", "viewer")):
        made = subprocess.run(
            [str(GTMCLUSTER), "users", "add", name, "--role", role, "--file", "users.yaml"],
            cwd=workdir, capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        tokens[name] = made.stdout.strip()

    def customize(raw: dict[str, Any]) -> None:
        raw["api"] = {"users_file": "users.yaml"}

    with running_group(workdir, size=1, customize=customize) as g:
        g.wait_converged()
        browser = Chromium(workdir)
        try:
            yield g, browser, tokens
        finally:
            browser.close()


def page(group: Group, browser: Chromium, token: str, until: Any, what: str) -> tuple[Any, dict[str, Any]]:
    host, port = group.members["n1"].api
    tab = browser.open(f"http://{host}:{port}/#token={token}")
    snap = wait(tab, until, what)
    return tab, snap


def wait(tab: Any, until: Any, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + 20.0
    snap = None
    while time.monotonic() < deadline:
        snap = tab.evaluate(ROLES_JS)
        if snap is not None and until(snap):
            return dict(snap)
        time.sleep(0.1)
    raise AssertionError(f"the page did not show {what}: {json.dumps(snap)[:2000]}")


def test_a_viewer_sees_no_action_and_is_told_config_history_needs_admin(group: Any) -> None:
    g, browser, tokens = group
    tab, snap = page(
        g, browser, tokens["vera"], lambda s: s["polls"] >= 1 and s.get("role") == "viewer", "vera, a viewer"
    )
    try:
        assert snap["identity"] == "vera" and snap["whoami"] == "vera · viewer"
        assert snap["actions"] == [] and not snap["form"]
        assert snap["needs"] == "admin" and "needs the admin role; vera is a viewer" in snap["configNote"]
    finally:
        tab.close()


def test_an_operator_disables_a_datacenter_and_the_audit_lists_it(group: Any) -> None:
    g, browser, tokens = group
    tab, snap = page(
        g,
        browser,
        tokens["alice"],
        lambda s: s.get("role") == "operator" and "disable DC1" in s["actions"],
        "alice's actions",
    )
    try:
        assert snap["form"] and "needs the admin role; alice is an operator" in snap["configNote"]
        tab.evaluate(
            'document.querySelector(\'button[data-kind="datacenter"][data-action="disable"][data-target="DC1"]\').click()'
        )
        snap = wait(
            tab,
            lambda s: (
                s["acted"] == "disable DC1: ok"
                and any(
                    a["who"] == "alice" and a["result"] == "applied" and "disable data center DC1" in a["text"]
                    for a in s["audit"]
                )
            ),
            "alice's change in the audit",
        )
        assert snap["audit"][0]["who"] == "alice"  # newest first
    finally:
        tab.close()
