"""Load figures from what servers expose: a fetched body, its format and names -> figures.

`read(body, source)` turns one body into a `Reading`: gauges (figures as they are:
connections, capacity, and packets_per_second or kbps where the server gives rates) and
counters (totals since the server started: packets, bytes). `CounterRates` turns the
counters of successive readings into per-second rates, a counter that went down counting as
reset to 0. `figures` makes the figures the load-based methods use (bytes become kbps).

The formats (docs/load-sources.md):

- ``prometheus``: the text exposition, parsed by ``prometheus_client``; each figure is the
  sum of the samples named in the `LoadSource` (name and label matchers).
- ``haproxy``: the stats CSV (``;csv`` on the stats URI), the row of one proxy and server:
  ``scur`` connections, ``slim`` capacity (when set), ``bin`` + ``bout`` bytes.
- ``nginx``: ``stub_status``: ``Active connections``.
- ``json``: an object with some of connections, packets_per_second, kbps, capacity (an agent).

Every figure is a finite number, at least 0; a gauge (and a rate) at most
`config.loadsource.MAX_FIGURE` (10**12): a body reporting more (``capacity: 1e308``) is
unreadable, and a rate above it (a counter that jumped) is left out of that reading, so no
sum a load-based method makes of them can be infinite. Nothing here does I/O, so link
capacity can read its traffic counters the same way. A body that cannot be read raises
`Unreadable` with a short reason, never another exception.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import re
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from gtmcluster.config.loadsource import MAX_FIGURE
from gtmcluster.config.monitoring import LoadSource, Sample

#: the figures a reading may give as they are
GAUGES = ("connections", "capacity", "packets_per_second", "kbps")
#: the counters a reading may give, and the figure each one's rate becomes
COUNTERS = {"packets": "packets_per_second", "bytes": "kbps"}
#: bytes a second -> kbps
KBPS_PER_BYTE = 8 / 1000
#: the longest count read (a 64-bit counter has 20 digits)
MAX_DIGITS = 20
NGINX_ACTIVE = re.compile(rb"\AActive connections:[ \t]*(\d{1,%d})[ \t]*\r?\n" % MAX_DIGITS)
#: the HAProxy CSV columns read, and what they give
HAPROXY_COLUMNS = ("pxname", "svname", "scur", "slim", "bin", "bout")


class Unreadable(Exception):
    """The body does not give the figures asked for; the message says why."""


@dataclass(frozen=True, slots=True)
class Reading:
    gauges: Mapping[str, float] = field(default_factory=dict)
    counters: Mapping[str, float] = field(default_factory=dict)


def read(body: bytes, source: LoadSource) -> Reading:
    """The figures *source* names in *body*; raises `Unreadable`."""
    if source.format == "prometheus":
        reading = _prometheus(body, source)
    elif source.format == "haproxy":
        reading = _haproxy(body, source)
    elif source.format == "nginx":
        reading = _nginx(body)
    elif source.format == "json":
        reading = _json(body)
    else:
        raise Unreadable(f"unknown load format {source.format!r}")
    for name, value in reading.gauges.items():
        if value > MAX_FIGURE:
            raise Unreadable(f"{name} is {value:g}, over {MAX_FIGURE:g} (the most a load figure may be)")
    if source.fixed_capacity is not None:
        reading = Reading({**reading.gauges, "capacity": float(source.fixed_capacity)}, reading.counters)
    return reading


def _number(what: str, value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise Unreadable(f"{what} is {value:g}, not a non-negative number")
    return float(value)


def _text(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise Unreadable("the body is not UTF-8 text") from None


def show_sample(s: Sample) -> str:
    labels = ",".join(f'{k}="{v}"' for k, v in s.labels)
    return f"{s.metric}{{{labels}}}" if labels else s.metric


def _prometheus(body: bytes, source: LoadSource) -> Reading:
    sums = prometheus_sums(
        body,
        {
            "connections": source.connections,
            "capacity": source.capacity,
            "packets": source.packets,
            "bytes": source.bytes,
        },
    )
    gauges = {k: v for k, v in sums.items() if k not in COUNTERS}
    counters = {k: v for k, v in sums.items() if k in COUNTERS}
    return Reading(gauges, counters)


def prometheus_sums(body: bytes, wanted: Mapping[str, tuple[Sample, ...]]) -> dict[str, float]:
    """Each figure of *wanted* (a name -> the samples it sums) as found in the exposition
    *body* (figures without samples left out); raises `Unreadable`."""
    names = {s.metric for samples in wanted.values() for s in samples}
    found: dict[str, list[tuple[Mapping[str, str], float]]] = {name: [] for name in names}
    try:
        for family in text_string_to_metric_families(_relevant(_text(body), names)):
            for sample in family.samples:
                name = sample.name
                if name not in found and name == f"{family.name}_total":
                    name = family.name  # a counter exposed without _total: the parser adds it
                if name in found:
                    found[name].append((sample.labels, sample.value))
    except Unreadable:
        raise
    except Exception as e:  # the parser raises what it meets (ValueError, IndexError, ...)
        raise Unreadable(f"not Prometheus text: {_short(e)}") from None
    return {figure: _sum(figure, samples, found) for figure, samples in wanted.items() if samples}


@functools.lru_cache(maxsize=256)
def _lines_of(names: frozenset[str]) -> re.Pattern[str]:
    """The lines that matter for *names*: their samples (a counter's with or without
    ``_total``) and their ``# TYPE`` lines."""
    variants = {v for n in names for v in (n, n.removesuffix("_total"), f"{n}_total")}
    alternatives = "|".join(re.escape(v) for v in sorted(variants))
    return re.compile(rf"^(?:(?:{alternatives})[{{ \t]|# TYPE (?:{alternatives})[ \t]).*$", re.MULTILINE)


def _relevant(text: str, names: set[str]) -> str:
    """Only the lines of *text* about *names*: the parser is pure Python, and an exposition
    of a megabyte would otherwise hold the reactor for a quarter of a second."""
    return "\n".join(_lines_of(frozenset(names)).findall(text)) + "\n"


def _sum(figure: str, samples: Iterable[Sample], found: Mapping[str, list[tuple[Mapping[str, str], float]]]) -> float:
    total = 0.0
    for s in samples:
        values = [v for labels, v in found[s.metric] if all(labels.get(k) == v2 for k, v2 in s.labels)]
        if not values:
            raise Unreadable(f"no sample {show_sample(s)} for {figure}")
        for v in values:
            total += _number(f"{figure} ({show_sample(s)})", v)
    return _number(figure, total)  # (finite numbers may sum to infinity)


def _short(e: Exception) -> str:
    text = str(e) or type(e).__name__
    return text if len(text) <= 80 else text[:80] + "…"


def _haproxy(body: bytes, source: LoadSource) -> Reading:
    row = haproxy_row(body, source.proxy, source.server)
    gauges = {"connections": count_of(row["scur"], "scur")}
    if row["slim"]:
        gauges["capacity"] = count_of(row["slim"], "slim")
    counters = {"bytes": count_of(row["bin"], "bin") + count_of(row["bout"], "bout")}
    return Reading(gauges, counters)


def haproxy_row(body: bytes, proxy: str, server: str) -> dict[str, str]:
    """The `HAPROXY_COLUMNS` of the stats CSV row of *proxy* and *server*, as text;
    raises `Unreadable`."""
    lines = _text(body).splitlines()
    if not lines or not lines[0].startswith("# pxname,"):
        raise Unreadable("not HAProxy stats CSV (no '# pxname,' header)")
    header = lines[0][2:].split(",")
    at = {name: i for i, name in enumerate(header)}
    missing = [c for c in HAPROXY_COLUMNS if c not in at]
    if missing:
        raise Unreadable(f"HAProxy stats CSV without {', '.join(missing)}")
    try:
        # (only the lines that could be the row are parsed: a stats page may be large)
        rows = list(csv.reader(line for line in lines[1:] if proxy in line and server in line))
    except csv.Error as e:
        raise Unreadable(f"not HAProxy stats CSV: {_short(e)}") from None
    for row in rows:
        if len(row) <= max(at[c] for c in HAPROXY_COLUMNS):
            continue
        if row[at["pxname"]] == proxy and row[at["svname"]] == server:
            return {c: row[at[c]] for c in HAPROXY_COLUMNS}
    raise Unreadable(f"no row for proxy {proxy!r} server {server!r} in the HAProxy stats")


def count_of(text: str, column: str) -> float:
    """A count of the HAProxy stats (digits only); raises `Unreadable`."""
    if not (text.isascii() and text.isdigit() and len(text) <= MAX_DIGITS):
        raise Unreadable(f"HAProxy {column} is {text[:20]!r}, not a count")
    return float(text)


def _nginx(body: bytes) -> Reading:
    m = NGINX_ACTIVE.match(body)
    if m is None:
        raise Unreadable("not nginx stub_status (no 'Active connections: N' first line)")
    return Reading({"connections": float(m.group(1))})


def _json(body: bytes) -> Reading:
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise Unreadable("the body is not JSON") from None
    if not isinstance(document, dict):
        raise Unreadable("the body is not a JSON object")
    gauges: dict[str, float] = {}
    for key in GAUGES:
        value = document.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Unreadable(f"{key} is not a non-negative number")
        try:
            number = float(value)
        except OverflowError:  # an integer of hundreds of digits
            number = math.inf
        if number < 0 or not math.isfinite(number):
            raise Unreadable(f"{key} is not a non-negative number")
        gauges[key] = number
    if not gauges:
        raise Unreadable(f"no load figures in the body (expected some of {', '.join(GAUGES)})")
    return Reading(gauges)


def increase(old: float, new: float) -> float:
    """How much a counter grew from *old* to *new*; lower means it was reset (the server
    restarted): it counted *new* from 0."""
    return new - old if new >= old else new


class CounterRates:
    """Per-second rates of counters from successive readings, kept per key (a target).

    The first reading of a key gives no rate; each later one gives the increase since the
    previous reading over the time between them. Keys are the targets of one monitor, so
    the table is as large as the config.
    """

    def __init__(self) -> None:
        self._last: dict[Hashable, tuple[float, Mapping[str, float]]] = {}

    def update(self, key: Hashable, counters: Mapping[str, float], now: float) -> dict[str, float]:
        previous = self._last.get(key)
        self._last[key] = (now, dict(counters))
        if previous is None:
            return {}
        then, old = previous
        elapsed = now - then
        if elapsed <= 0:
            return {}
        return {name: increase(old[name], value) / elapsed for name, value in counters.items() if name in old}


def figures(reading: Reading, rates: Mapping[str, float]) -> dict[str, float]:
    """The figures for the load-based methods: the gauges, and the counters' rates
    (packets a second; bytes a second as kbps), a rate over `MAX_FIGURE` left out (a
    counter that jumped, or readings a moment apart: no figure this time)."""
    out = dict(reading.gauges)
    if "packets" in rates:
        out["packets_per_second"] = rates["packets"]
    if "bytes" in rates:
        out["kbps"] = rates["bytes"] * KBPS_PER_BYTE
    for name in ("packets_per_second", "kbps"):
        if name in out and not 0 <= out[name] <= MAX_FIGURE:
            del out[name]
    return out


def describe(data: Mapping[str, float]) -> str:
    return " ".join(f"{k}={v:g}" for k, v in data.items())
