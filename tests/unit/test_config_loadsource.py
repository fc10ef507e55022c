"""The ``load:`` key of http(s) monitors: what each form loads to, and each mistake as one
problem `FILE: key.path: problem`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gtmcluster.config.load import load
from gtmcluster.config.monitoring import HttpCheck, LoadSource, Sample
from tests.support import configs
from tests.unit.test_config_errors import assert_form, find, problems_of, put


def loaded(tmp_path: Path, monitor: dict[str, Any]) -> HttpCheck:
    raw = configs.base()
    raw["monitors"] = {"m": monitor}
    raw["virtual_servers"]["vs1"]["monitor"] = "m"
    check = load(configs.write(tmp_path, raw)).monitors["m"].check
    assert isinstance(check, HttpCheck)
    return check


def test_prometheus_source_names_samples(tmp_path: Path) -> None:
    """A sample is a name, {metric, labels} or a list of them (summed); integer label values
    are taken as text."""
    check = loaded(
        tmp_path,
        {
            "type": "http",
            "path": "/metrics",
            "load": {
                "format": "prometheus",
                "connections": "nginx_connections_active",
                "capacity": {"metric": "haproxy_frontend_limit_sessions", "labels": {"proxy": "web"}},
                "bytes": [
                    {"metric": "if_bytes_total", "labels": {"dev": "eth0", "dir": "in"}},
                    {"metric": "if_bytes_total", "labels": {"port": 8080}},
                ],
            },
        },
    )
    assert check.load == LoadSource(
        "prometheus",
        connections=(Sample("nginx_connections_active"),),
        capacity=(Sample("haproxy_frontend_limit_sessions", (("proxy", "web"),)),),
        bytes=(
            Sample("if_bytes_total", (("dev", "eth0"), ("dir", "in"))),
            Sample("if_bytes_total", (("port", "8080"),)),
        ),
    )


def test_haproxy_nginx_json_and_the_metrics_type(tmp_path: Path) -> None:
    stats = {"type": "http", "path": "/stats;csv", "load": {"format": "haproxy", "proxy": "web"}}
    haproxy = loaded(tmp_path / "h", stats)
    assert haproxy.load == LoadSource("haproxy", proxy="web", server="BACKEND")
    nginx = loaded(tmp_path / "n", {"type": "https", "load": {"format": "nginx", "capacity": 1024}})
    assert nginx.tls and nginx.load == LoadSource("nginx", fixed_capacity=1024)
    legacy = loaded(tmp_path / "j", {"type": "metrics", "port": 9100})
    assert (legacy.path, legacy.load) == ("/metrics.json", LoadSource("json"))
    plain = loaded(tmp_path / "p", {"type": "http"})
    assert plain.load is None


MON = "monitors.m.load"


@pytest.mark.parametrize(
    ("load_value", "path", "fragment"),
    [
        ({"format": "snmp"}, f"{MON}.format", "'snmp' is not one of: prometheus, haproxy, nginx, json"),
        ({}, MON, "missing key 'format'"),
        ("prometheus", MON, "must be a mapping {format, ...}, not a string"),
        ({"format": "prometheus"}, MON, "name the samples of at least one of: connections, capacity, packets, bytes"),
        ({"format": "prometheus", "connections": "9x"}, f"{MON}.connections", "'9x' is not a Prometheus metric name"),
        ({"format": "prometheus", "bytes": []}, f"{MON}.bytes", "an empty list names no samples"),
        (
            {"format": "prometheus", "bytes": [{"metric": "x", "labels": {"a-b": "1"}}]},
            f"{MON}.bytes[0].labels.a-b",
            "'a-b' is not a Prometheus label name",
        ),
        ({"format": "prometheus", "packets": {"labels": {}}}, f"{MON}.packets", "missing key 'metric'"),
        ({"format": "prometheus", "packets": {"metric": "x", "lables": {}}}, f"{MON}.packets.lables", "did you mean"),
        ({"format": "haproxy"}, MON, "missing key 'proxy' (the proxy (pxname) whose row to read)"),
        ({"format": "nginx", "connections": "x"}, f"{MON}.connections", "only with format prometheus, not nginx"),
        ({"format": "nginx", "capacity": -1}, f"{MON}.capacity", "out of range"),
        ({"format": "json", "formt": 1}, f"{MON}.formt", "unknown key"),
    ],
)
def test_load_mistakes(tmp_path: Path, load_value: Any, path: str, fragment: str) -> None:
    mutation = put("monitors", value={"m": {"type": "http", "load": load_value}})
    file, problems = problems_of(tmp_path, mutation)
    message = assert_form(find(problems, path, fragment), file, path)
    assert fragment in message
    assert len(problems) == 1, problems


def test_load_only_on_http_monitors(tmp_path: Path) -> None:
    file, problems = problems_of(tmp_path, put("monitors", value={"m": {"type": "tcp", "load": {"format": "json"}}}))
    assert_form(find(problems, "monitors.m.load", "unknown key"), file, "monitors.m.load")
