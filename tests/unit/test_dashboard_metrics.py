"""Every expression of the shipped alerting rules (etc/prometheus/gtmcluster-rules.yml) and
Grafana dashboard (etc/grafana/gtmcluster.json) reads only metrics a node exports, and the
dashboard's expressions are PromQL that promtool takes. The names a node exports are read
from the declarations of its metric families (every ``*MetricFamily("gtm_...")`` and
``_histogram("gtm_...")`` of gtmcluster/api), with the suffixes the text format adds;
a scrape of an in-process node checks that reading finds every family it shows."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet.testing import MemoryReactorClock

from gtmcluster.api.metrics import metrics_steps
from gtmcluster.config.load import load
from gtmcluster.runtime import slices
from gtmcluster.service import Sockets, make_service
from tests.conftest import require_tool
from tests.support import configs, promql

API = Path(__file__).resolve().parents[2] / "gtmcluster" / "api"
SUFFIXES = {
    "CounterMetricFamily": ("_total",),
    "GaugeMetricFamily": ("",),
    "HistogramMetricFamily": ("_bucket", "_sum", "_count"),
    "_histogram": ("_bucket", "_sum", "_count"),
}


def declared() -> dict[str, str]:
    """Each family name declared in gtmcluster/api, with its kind (the constructor)."""
    found: dict[str, str] = {}
    for module in API.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            first = node.args[0]
            if func in SUFFIXES and isinstance(first, ast.Constant) and isinstance(first.value, str):
                assert found.get(first.value, func) == func, first.value
                found[first.value] = func
    return found


def exported() -> set[str]:
    """The series names a node may export."""
    return {name + suffix for name, kind in declared().items() for suffix in SUFFIXES[kind]}


def test_the_declarations_read_hold_every_family_a_node_shows(tmp_path: Path) -> None:
    raw = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    raw["monitors"] = {"tcp": {"type": "tcp", "interval": 5, "timeout": 2, "port": 80}}
    raw["virtual_servers"]["vs1"]["monitor"] = "tcp"
    raw["links"] = {"l1": {"datacenter": "DC1", "monitor": "tcp", "targets": ["192.0.2.9:80"]}}
    service = make_service(load(configs.write(tmp_path, raw)), "n1", MemoryReactorClock(), Sockets(dns=[]))
    text = slices.whole(metrics_steps(service, {"host": 1}, {"idle": 2})).body.decode()
    shown = {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}
    assert len(shown) > 40
    assert shown <= exported(), shown - exported()


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'sum by (rcode) (rate(gtm_dns_queries_total{instance=~"$instance"}[$__rate_interval]))',
            {"gtm_dns_queries_total"},
        ),
        (
            "sum by (datacenter) (sum by (member) (rate(gtm_pool_member_answers_total[5m])) * on (member) "
            "group_left (datacenter) label_replace(group by (virtual_server, datacenter) "
            '(gtm_virtual_server_healthy), "member", "$1", "virtual_server", "(.*)"))',
            {"gtm_pool_member_answers_total", "gtm_virtual_server_healthy"},
        ),
        ("gtm_certificate_expiry_timestamp_seconds - time() < 3 * 86400", {"gtm_certificate_expiry_timestamp_seconds"}),
        (
            "histogram_quantile(0.99, sum by (le) (rate(gtm_decision_seconds_bucket[1m]))) > 1e-3",
            {"gtm_decision_seconds_bucket"},
        ),
        ("count without (digest) (count without (member) (gtm_config_bundle_info)) > 1", {"gtm_config_bundle_info"}),
        ("a offset 5m and bool b unless on (x) c or ignoring(y) d", {"a", "b", "c", "d"}),
    ],
)
def test_the_tokenizer_finds_metric_names_only(expr: str, names: set[str]) -> None:
    assert promql.metric_names(expr) == names


def test_every_rule_reads_metrics_the_node_exports() -> None:
    names = exported()
    for alert, expr in promql.rule_expressions():
        used = promql.metric_names(expr)
        assert used, (alert, expr)
        assert used <= names, (alert, used - names)


def test_every_dashboard_expression_reads_metrics_the_node_exports() -> None:
    names = exported()
    expressions = list(promql.dashboard_expressions())
    assert len(expressions) > 20
    for where, expr in expressions:
        used = promql.metric_names(expr)
        assert used, (where, expr)
        assert used <= names, (where, used - names)


def test_the_dashboard_is_grafana_json_with_a_datasource_variable() -> None:
    """schemaVersion 39; every panel and query reads the data source the user picks; each
    panel has its own id and a title."""
    board = promql.dashboard()
    assert board["schemaVersion"] == 39 and board["uid"] == "gtmcluster"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"]), panel["title"]


def test_promtool_takes_every_dashboard_expression(tmp_path: Path) -> None:
    """Each expression, its variables given values, as a recording rule: `promtool check
    rules` parses it."""
    require_tool("promtool", "prometheus")
    rules = [
        {"record": f"gtmcluster:dashboard:{i}", "expr": promql.with_variables(expr)}
        for i, (_, expr) in enumerate(promql.dashboard_expressions())
    ]
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    command = ["promtool", "check", "rules", str(path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout
