"""The PromQL of the shipped rules (etc/prometheus) and dashboard (etc/grafana), and the
metric names it reads: a small tokenizer, not a parser (promtool checks the syntax). It
drops strings, label matchers, ranges, Grafana variables and the label lists of by,
without, on, ignoring and group_left/right, then keeps each identifier not called as a
function and not a keyword."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "etc" / "prometheus" / "gtmcluster-rules.yml"
DASHBOARD = ROOT / "etc" / "grafana" / "gtmcluster.json"

#: what Grafana's variables stand for when an expression is checked or run
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$instance": ".*", "${datasource}": ""}

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_VARIABLE = re.compile(r"\$\{?\w+\}?")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENTIFIER = re.compile(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right"}
_KEYWORDS |= {"inf", "nan", "atan2"}


def metric_names(expr: str) -> set[str]:
    """The metric names *expr* reads."""
    text = _STRING.sub(" ", expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _VARIABLE.sub(" ", text)
    text = _LABEL_LIST.sub(" ", text)
    return {
        match.group(1)
        for match in _IDENTIFIER.finditer(text)
        if match.group(2) is None and match.group(1).lower() not in _KEYWORDS
    }


def with_variables(expr: str) -> str:
    """*expr* with Grafana's variables replaced by values Prometheus takes."""
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def rule_expressions() -> Iterator[tuple[str, str]]:
    """(alert, expression) of every rule."""
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            yield rule["alert"], rule["expr"]


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def dashboard_expressions() -> Iterator[tuple[str, str]]:
    """(where, expression) of every panel's query and every query variable."""
    board = dashboard()
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            found = re.fullmatch(r"label_values\((?:(.+),\s*)?(\w+)\)", query)
            assert found, f"variable {variable['name']}: {query}"
            if found.group(1):
                yield f"variable {variable['name']}", found.group(1)
