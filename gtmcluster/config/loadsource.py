"""The ``load:`` key of an http(s) monitor: where the body gives the server's load.

    load:
      format: prometheus            # prometheus | haproxy | nginx | json
      connections: nginx_connections_active                  # a gauge's name,
      capacity: {metric: haproxy_server_limit_sessions, labels: {proxy: web}}   # or name + labels,
      bytes: [haproxy_frontend_bytes_in_total, haproxy_frontend_bytes_out_total]  # or a list (summed)
      packets: ...                  # a packets counter (its rate: packets_per_second)

    load: {format: haproxy, proxy: web, server: BACKEND}    # a row of the stats CSV
    load: {format: nginx, capacity: 1024}                   # stub_status; capacity given
    load: {format: json}                                    # an agent's JSON object

Any format takes ``capacity: N`` (a number) as the server's capacity. docs/load-sources.md
has the details; `gtmcluster.probe.loadread` reads the bodies.
"""

from __future__ import annotations

import re
from typing import Any

from gtmcluster.config.monitoring import LoadSource, Sample
from gtmcluster.config.problems import KeyPath
from gtmcluster.config.reader import Mapping, Reader

FORMATS = ("prometheus", "haproxy", "nginx", "json")
#: the figures a prometheus source names samples for
PROMETHEUS_FIGURES = ("connections", "capacity", "packets", "bytes")
METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
#: the largest load figure (connections, capacity, packets a second, kbps) a config may
#: state, a body may report (`probe.loadread`) and a load-based method counts (`lb.dynamic`):
#: past any server, and a pool's sum of such figures stays finite
MAX_FIGURE = 1e12


def read_load(r: Reader, m: Mapping) -> LoadSource | None:
    """The monitor's ``load`` mapping, or None after reporting its problems."""
    section = r.mapping(m.at("load"), m.get("load"), "a mapping {format, ...}")
    if section is None:
        return None
    before = len(r.problems.found)
    kind = r.string(section.at("format"), section.require("format", f"one of {', '.join(FORMATS)}"), choices=FORMATS)
    fixed: float | None = None
    if section.has("capacity") and (kind != "prometheus" or not _names_samples(section.get("capacity"))):
        fixed = section.number("capacity", None, 0, MAX_FIGURE)
    samples: dict[str, tuple[Sample, ...]] = {}
    proxy, server = "", "BACKEND"
    if kind == "prometheus":
        for figure in PROMETHEUS_FIGURES:
            if section.has(figure) and not (figure == "capacity" and fixed is not None):
                samples[figure] = samples_of(r, section.at(figure), section.get(figure))
        if not samples and fixed is None:
            r.error(section.path, "name the samples of at least one of: " + ", ".join(PROMETHEUS_FIGURES))
    elif kind == "haproxy":
        proxy = r.string(section.at("proxy"), section.require("proxy", "the proxy (pxname) whose row to read")) or ""
        server = section.string("server", "BACKEND") or ""
    if kind is not None and kind != "prometheus":
        for figure in ("connections", "packets", "bytes"):
            if section.has(figure):
                r.error(section.at(figure), f"names Prometheus samples: only with format prometheus, not {kind}")
    section.done()
    if len(r.problems.found) > before or kind is None:
        return None
    return LoadSource(
        kind,
        connections=samples.get("connections", ()),
        capacity=samples.get("capacity", ()),
        packets=samples.get("packets", ()),
        bytes=samples.get("bytes", ()),
        proxy=proxy,
        server=server,
        fixed_capacity=fixed,
    )


def _names_samples(value: Any) -> bool:
    return isinstance(value, (str, dict, list))


def samples_of(r: Reader, path: KeyPath, value: Any) -> tuple[Sample, ...]:
    """A metric name, ``{metric, labels}``, or a list of them."""
    items = value if isinstance(value, list) else [value]
    if not items:
        r.error(path, "an empty list names no samples")
    out = []
    for i, item in enumerate(items):
        at: KeyPath = (*path, i) if isinstance(value, list) else path
        sample = _sample(r, at, item)
        if sample is not None:
            out.append(sample)
    return tuple(out)


def _sample(r: Reader, path: KeyPath, value: Any) -> Sample | None:
    if isinstance(value, str):
        return Sample(value) if _metric(r, path, value) else None
    m = r.mapping(path, value, "a metric name or {metric, labels}")
    if m is None:
        return None
    name = r.string(m.at("metric"), m.require("metric", "the sample's name, as in the exposition"))
    labels: list[tuple[str, str]] = []
    if m.has("labels"):
        section = r.mapping(m.at("labels"), m.get("labels"), "a mapping of label names to values")
        for key, raw in section.items() if section is not None else ():
            at = section.at(key) if section is not None else path
            if not isinstance(key, str) or not LABEL_NAME.fullmatch(key):
                r.error(at, f"{key!r} is not a Prometheus label name")
                continue
            if isinstance(raw, int) and not isinstance(raw, bool):
                raw = str(raw)  # code: 200
            text = r.string(at, raw)
            if text is not None:
                labels.append((key, text))
    m.done()
    if name is None or not _metric(r, m.at("metric"), name):
        return None
    return Sample(name, tuple(sorted(labels)))


def _metric(r: Reader, path: KeyPath, name: str) -> bool:
    if not METRIC_NAME.fullmatch(name):
        r.error(path, f"{name!r} is not a Prometheus metric name")
        return False
    return True
