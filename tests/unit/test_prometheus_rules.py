"""The shipped alerting rules (etc/prometheus/gtmcluster-rules.yml) under Prometheus's own
tool: `promtool check rules` finds them valid, `promtool test rules` runs their unit tests
(tests/prometheus/gtmcluster-rules.test.yml: each alert fires on what it names, after its
`for:`, and not on the look-alike beside it), and every rule carries a severity and says
which object it is about."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import require_tool

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "etc" / "prometheus" / "gtmcluster-rules.yml"
RULE_TESTS = ROOT / "tests" / "prometheus" / "gtmcluster-rules.test.yml"
SEVERITIES = {"critical", "warning", "info"}


@pytest.fixture
def promtool() -> str:
    require_tool("promtool", "prometheus")
    return "promtool"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)


def rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_promtool_finds_the_rules_valid(promtool: str) -> None:
    done = run(promtool, "check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_the_rules_unit_tests_pass_under_promtool(promtool: str) -> None:
    done = run(promtool, "test", "rules", str(RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_is_unit_tested_firing(promtool: str) -> None:
    """Each alert of the file has a case in the unit tests where it fires."""
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {case["alertname"] for test in tests for case in test["alert_rule_test"] if case["exp_alerts"]}
    assert {rule["alert"] for rule in rules()} == fired


def test_every_rule_has_a_severity_and_names_its_object() -> None:
    """A severity label; a summary and a description that name the object by one of the
    labels the expression keeps (or the member, `instance`)."""
    for rule in rules():
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        for annotation in ("summary", "description"):
            text = rule["annotations"][annotation]
            assert "{{ $labels." in text, (rule["alert"], annotation)
