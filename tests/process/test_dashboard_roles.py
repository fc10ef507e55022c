"""The dashboard by role, in a real browser (headless Chromium, driven as in
test_dashboard.py) against a real `twistd gtm` member whose API has a users file
(`gtmcluster users add`): ``ada`` an admin, ``alice`` an operator, ``vera`` a viewer.

- vera's page (``#token=`` hers) says who she is, offers no admin action and says the
  config history needs the admin role;
- alice's page disables data center DC1 with its button; the Audit panel then lists that
  change under her name, applied;
- alice disables pool ``p`` with the Admin states form (level, name, reason) and the node's
  status lists it disabled by her, with her reason;
- after two `gtmcluster config push` of configs that differ in one line, ada's page lists
  both generations in the config history, and the diff between them shows that line removed
  and its new text added.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import require_tool
from tests.process.test_dashboard import Chromium
from tests.support import poll
from tests.support.trio import Group, running_group

pytestmark = pytest.mark.process

GTMCLUSTER = Path(sys.executable).parent / "gtmcluster"

#: what the page says of roles and the audit, read in the browser
ROLES_JS = """(() => {
  // (data-polls="0" is in the markup: until the page is parsed whole, an element may not be there yet)
  if (!document.body || document.readyState === "loading" || !document.body.dataset.polls) return null;
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
    for name, role in (("ada", "admin"), ("alice", "operator"), ("vera", "viewer")):
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


def wait(tab: Any, until: Any, what: str, script: str = ROLES_JS) -> dict[str, Any]:
    last: list[Any] = [None]

    def shown() -> dict[str, Any] | None:
        last[0] = tab.evaluate(script)
        return dict(last[0]) if last[0] is not None and until(last[0]) else None

    snap = poll.until(shown, 20.0, f"{what} on the page", step=0.1, details=lambda: json.dumps(last[0])[:2000])
    assert snap is not None
    return snap


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


def test_an_operator_disables_a_pool_with_the_form_and_the_node_holds_it(group: Any) -> None:
    g, browser, tokens = group
    tab, _ = page(g, browser, tokens["alice"], lambda s: s.get("role") == "operator" and s["form"], "alice's form")
    try:
        # the pool names come from the wide IPs the page has read
        poll.until(
            lambda: tab.evaluate(
                """(() => { const l = document.getElementById("act-level"); l.value = "pool";
                l.dispatchEvent(new Event("change"));
                return [...document.getElementById("act-name").options].some((o) => o.value === "p"); })()"""
            ),
            20.0,
            "pool p offered by the form",
            step=0.1,
        )
        tab.evaluate(
            """(() => { document.getElementById("act-name").value = "p";
            document.getElementById("act-reason").value = "form test";
            document.getElementById("act-disable").click(); })()"""
        )
        wait(tab, lambda s: s["acted"] == "disable p: ok", "the form's disable of pool p answered")
        told = tab.evaluate('document.getElementById("form-acted").textContent')
        assert "pool p is now disabled (for the whole sync group)" in told, told
        held = [a for a in g.status("n1")["admin"] if a["level"] == "pool" and a["name"] == "p"]
        assert [(a["state"], a["by"], a["reason"]) for a in held] == [("disabled", "alice", "form test")], held
    finally:
        tab.close()


#: the config history and the diff, read in the browser
CONFIG_JS = """(() => {
  // (data-polls="0" is in the markup: until the page is parsed whole, an element may not be there yet)
  if (!document.body || document.readyState === "loading" || !document.body.dataset.polls) return null;
  const all = (sel) => [...document.querySelectorAll(sel)];
  const shown = document.querySelector("#diff-out [data-diff]");
  return {
    role: document.body.dataset.role,
    generations: all("#config-table tr[data-generation]").map((e) => Number(e.dataset.generation)),
    from: [...document.getElementById("diff-from").options].map((o) => o.value),
    diff: shown ? shown.dataset.diff : "",
    files: shown ? Number(shown.dataset.files) : 0,
    added: all("#diff-out .diff-add").map((e) => e.textContent),
    removed: all("#diff-out .diff-del").map((e) => e.textContent),
  };
})()"""


def push(group: Group, token: str, name: str, ttl: int) -> str:
    """`gtmcluster config push` of the group's config with pool p's TTL set to *ttl*, as *token*'s user."""
    raw = copy.deepcopy(group.config)
    raw["pools"]["p"]["ttl"] = ttl
    folder = group.workdir / "edits" / name
    folder.mkdir(parents=True, exist_ok=True)
    raw["base_dir"] = "../.."
    path = folder / "gtm.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    done = subprocess.run(
        [sys.executable, "-m", "gtmcluster.cli.main", "config", "push", "--config", str(path), "--node", "n1"],
        capture_output=True, text=True, check=False, timeout=60, cwd=group.workdir,
        env={**os.environ, "GTM_API_TOKEN": token},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout


def test_an_admin_sees_both_pushed_generations_and_the_changed_line_between_them(group: Any) -> None:
    g, browser, tokens = group
    first = push(g, tokens["ada"], "ttl41", 41)
    second = push(g, tokens["ada"], "ttl42", 42)
    gens = [int(out.split("published generation ", 1)[1].split()[0]) for out in (first, second)]
    assert gens[1] == gens[0] + 1, (first, second)
    tab, snap = page(
        g,
        browser,
        tokens["ada"],
        lambda s: s.get("role") == "admin" and not s["configNote"],
        "ada, an admin",
    )
    try:
        snap = wait(tab, lambda s: set(gens) <= set(s["generations"]), "both generations in the history", CONFIG_JS)
        assert snap["generations"][:2] == gens[::-1]  # newest first
        tab.evaluate(
            f"""(() => {{ document.getElementById("diff-from").value = "{gens[0]}";
            document.getElementById("diff-to").value = "{gens[1]}";
            document.getElementById("diff-show").click(); }})()"""
        )
        snap = wait(tab, lambda s: s["diff"] == f"{gens[0]}..{gens[1]}", "the diff", CONFIG_JS)
        assert snap["files"] == 1 and snap["removed"] == ["-    ttl: 41"] and snap["added"] == ["+    ttl: 42"], snap
    finally:
        tab.close()
