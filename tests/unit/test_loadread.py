"""Load figures from real bodies (captured from Debian's haproxy 2.6 and nginx 1.22, see
tests/support/loadbodies), clear reasons for malformed ones, and counter rates."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gtmcluster.config.loadsource import MAX_FIGURE
from gtmcluster.config.monitoring import LoadSource, Sample
from gtmcluster.probe import loadread
from gtmcluster.probe.loadread import CounterRates, Reading, Unreadable

BODIES = Path(__file__).parent.parent / "support" / "loadbodies"
HAPROXY_CSV = (BODIES / "haproxy-2.6-stats.csv").read_bytes()
HAPROXY_PROM = (BODIES / "haproxy-2.6-metrics.prom").read_bytes()
NGINX = (BODIES / "nginx-1.22-stub-status.txt").read_bytes()


def problem(body: bytes, source: LoadSource) -> str:
    with pytest.raises(Unreadable) as caught:
        loadread.read(body, source)
    return str(caught.value)


# -- HAProxy stats CSV


def test_haproxy_row_of_a_frontend() -> None:
    """scur is connections, slim capacity, bin + bout the bytes counter."""
    reading = loadread.read(HAPROXY_CSV, LoadSource("haproxy", proxy="a", server="FRONTEND"))
    assert reading == Reading({"connections": 3.0, "capacity": 50.0}, {"bytes": 0.0})
    stats = loadread.read(HAPROXY_CSV, LoadSource("haproxy", proxy="stats", server="FRONTEND"))
    assert stats.counters == {"bytes": 111.0 + 2984.0}


def test_haproxy_server_row_without_a_limit_has_no_capacity() -> None:
    reading = loadread.read(HAPROXY_CSV, LoadSource("haproxy", proxy="a-servers", server="s1"))
    assert reading.gauges == {"connections": 0.0}


def test_haproxy_capacity_given_in_the_config_wins() -> None:
    source = LoadSource("haproxy", proxy="a", server="FRONTEND", fixed_capacity=400)
    assert loadread.read(HAPROXY_CSV, source).gauges["capacity"] == 400


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (HAPROXY_CSV, "no row for proxy 'nope' server 'FRONTEND'"),
        (b"<html>stats</html>", "not HAProxy stats CSV (no '# pxname,' header)"),
        (b"# pxname,svname,qcur\nnope,FRONTEND,1\n", "without scur, slim, bin, bout"),
        (HAPROXY_CSV.replace(b"nope", b"x").replace(b"a,FRONTEND,,,3", b"nope,FRONTEND,,,x"), "scur is 'x'"),
        (b"\xff\xfe", "not UTF-8"),
        (b"# pxname,svname,scur,slim,bin,bout\nnope,FRONTEND,1,\x00,2,3\n", "slim is '\\x00'"),
        ("# pxname,svname,scur,slim,bin,bout\nnope,FRONTEND,\u00b2,,2,3\n".encode(), "scur is '²', not a count"),
        (b"# pxname,svname,scur,slim,bin,bout\nnope,FRONTEND,1" + b"0" * 30 + b",,2,3\n", "not a count"),
    ],
)
def test_haproxy_malformed(body: bytes, fragment: str) -> None:
    assert fragment in problem(body, LoadSource("haproxy", proxy="nope", server="FRONTEND"))


# -- Prometheus text


def test_prometheus_samples_by_name_and_labels() -> None:
    """A figure is the sum of the samples named, each label matcher narrowing them."""
    source = LoadSource(
        "prometheus",
        connections=(Sample("haproxy_frontend_current_sessions", (("proxy", "a"),)),),
        capacity=(Sample("haproxy_frontend_limit_sessions", (("proxy", "a"),)),),
        bytes=(
            Sample("haproxy_frontend_bytes_in_total", (("proxy", "stats"),)),
            Sample("haproxy_frontend_bytes_out_total", (("proxy", "stats"),)),
        ),
    )
    reading = loadread.read(HAPROXY_PROM, source)
    assert reading == Reading({"connections": 3.0, "capacity": 50.0}, {"bytes": 222.0 + 5976.0})
    every = LoadSource("prometheus", connections=(Sample("haproxy_frontend_current_sessions"),))
    assert loadread.read(HAPROXY_PROM, every).gauges == {"connections": 4.0}  # stats 1 + a 3 + b 0


def test_prometheus_counter_named_as_exposed() -> None:
    """A counter exposed without the _total suffix is found by the name it is exposed with."""
    body = b"# TYPE packets counter\npackets 12\n# TYPE bytes_total counter\nbytes_total 7\n"
    source = LoadSource("prometheus", packets=(Sample("packets"),), bytes=(Sample("bytes_total"),))
    assert loadread.read(body, source).counters == {"packets": 12.0, "bytes": 7.0}


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (HAPROXY_PROM, 'no sample haproxy_frontend_current_sessions{proxy="nope"} for connections'),
        (b"haproxy_frontend_current_sessions{ 1\n", "not Prometheus text"),
        (b'haproxy_frontend_current_sessions{proxy="nope} 1\n', "not Prometheus text"),
        (b'haproxy_frontend_current_sessions{proxy="nope"} 1e308\n' * 2, "connections is inf"),
        (b"\xff\n", "not UTF-8"),
        (b'haproxy_frontend_current_sessions{proxy="nope"} NaN\n', "is nan, not a non-negative number"),
        (b'haproxy_frontend_current_sessions{proxy="nope"} -1\n', "is -1, not a non-negative number"),
    ],
)
def test_prometheus_malformed(body: bytes, fragment: str) -> None:
    source = LoadSource("prometheus", connections=(Sample("haproxy_frontend_current_sessions", (("proxy", "nope"),)),))
    assert fragment in problem(body, source)


# -- nginx stub_status


def test_nginx_active_connections() -> None:
    assert loadread.read(NGINX, LoadSource("nginx")) == Reading({"connections": 3.0})
    assert loadread.read(NGINX, LoadSource("nginx", fixed_capacity=64)).gauges == {"connections": 3.0, "capacity": 64}


@pytest.mark.parametrize(
    "body",
    [b"", b"<html>nginx</html>", b"Active connections: many\n", NGINX[1:], b"Active connections: 1" + b"0" * 40],
)
def test_nginx_malformed(body: bytes) -> None:
    assert problem(body, LoadSource("nginx")) == "not nginx stub_status (no 'Active connections: N' first line)"


# -- an agent's JSON


def test_json_figures() -> None:
    body = b'{"connections": 12, "kbps": 3.5, "other": "x"}'
    assert loadread.read(body, LoadSource("json")) == Reading({"connections": 12.0, "kbps": 3.5})


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"[1]", "the body is not a JSON object"),
        (b"{", "the body is not JSON"),
        (b'{"connections": -1}', "connections is not a non-negative number"),
        (b'{"connections": true}', "connections is not a non-negative number"),
        (b'{"connections": 1' + b"0" * 400 + b"}", "connections is not a non-negative number"),
        (b"{}", "no load figures in the body (expected some of connections, capacity, packets_per_second, kbps)"),
    ],
)
def test_json_malformed(body: bytes, reason: str) -> None:
    assert problem(body, LoadSource("json")) == reason


@pytest.mark.parametrize(
    "source",
    [
        LoadSource("prometheus", connections=(Sample("a"),), bytes=(Sample("b", (("x", "y"),)),)),
        LoadSource("haproxy", proxy="a", server="FRONTEND"),
        LoadSource("nginx"),
        LoadSource("json"),
    ],
    ids=lambda s: s.format,
)
@given(body=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode)))
def test_any_body_gives_figures_or_a_reason(source: LoadSource, body: bytes) -> None:
    """Whatever a server sends, the reading is figures or `Unreadable`, never another error."""
    try:
        reading = loadread.read(body, source)
    except Unreadable as e:
        assert str(e)
    else:
        assert all(math.isfinite(v) and v >= 0 for v in [*reading.gauges.values(), *reading.counters.values()])


fields = st.text(max_size=30) | st.integers(0, 10**30).map(str)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5), lambda v: st.lists(v, max_size=3)
)


@given(
    row=st.lists(fields, min_size=4, max_size=4),
    active=fields,
    value=json_values,
    sample=st.text(max_size=30),
)
def test_near_miss_bodies_give_figures_or_a_reason(row: list[str], active: str, value: object, sample: str) -> None:
    """Bodies of the right shape with any field in the places figures are read from."""
    csv_body = ("# pxname,svname,scur,slim,bin,bout\n" + ",".join(["web", "FRONTEND", *row]) + "\n").encode()
    bodies = [
        (csv_body, LoadSource("haproxy", proxy="web", server="FRONTEND")),
        (f"Active connections: {active}\n".encode(), LoadSource("nginx")),
        (json.dumps({"connections": value, "kbps": value}).encode(), LoadSource("json")),
        (f'conns{{proxy="web"}} {sample}\n'.encode(), LoadSource("prometheus", connections=(Sample("conns"),))),
    ]
    for body, source in bodies:
        try:
            reading = loadread.read(body, source)
        except Unreadable as e:
            assert str(e)
        else:
            assert all(math.isfinite(v) and v >= 0 for v in [*reading.gauges.values(), *reading.counters.values()])
            assert all(v <= MAX_FIGURE for v in reading.gauges.values())


# -- counters to rates

readings = st.lists(
    st.tuples(st.floats(0.001, 1000), st.integers(0, 10**12)),  # (seconds since the last, counter)
    min_size=1,
    max_size=30,
)


@given(readings)
def test_rates_are_increases_over_time_and_resets_count_from_zero(steps: list[tuple[float, int]]) -> None:
    rates = CounterRates()
    now = 0.0
    previous: int | None = None
    for gap, value in steps:
        now += gap
        got = rates.update("t", {"bytes": float(value)}, now)
        if previous is None:
            assert got == {}  # the first reading: nothing to compare with
        else:
            grew = value - previous if value >= previous else value
            assert got == {"bytes": pytest.approx(grew / gap)}
            assert got["bytes"] >= 0
        previous = value


@given(st.lists(st.integers(0, 10**6), min_size=2, max_size=20), st.floats(0.1, 60))
def test_steady_counter_gives_its_rate(increments: list[int], gap: float) -> None:
    """A counter growing by the same amount each gap reads as that amount / gap, every time."""
    rates = CounterRates()
    total = 0
    rates.update("t", {"packets": 0.0}, 0.0)
    for i, step in enumerate(increments, 1):
        total += step
        assert rates.update("t", {"packets": float(total)}, i * gap)["packets"] == pytest.approx(step / gap)


def test_rates_are_kept_per_key_and_need_time_to_pass() -> None:
    rates = CounterRates()
    rates.update("a", {"bytes": 100.0}, 10.0)
    rates.update("b", {"bytes": 5000.0}, 10.0)
    assert rates.update("a", {"bytes": 300.0}, 12.0) == {"bytes": 100.0}
    assert rates.update("a", {"bytes": 400.0}, 12.0) == {}  # no time between: no rate
    assert rates.update("b", {"bytes": 5000.0}, 20.0) == {"bytes": 0.0}


def test_figures_turn_byte_rates_into_kbps() -> None:
    reading = Reading({"connections": 4.0}, {"bytes": 1.0, "packets": 2.0})
    got = loadread.figures(reading, {"bytes": 1000.0, "packets": 50.0})
    assert got == {"connections": 4.0, "kbps": 8.0, "packets_per_second": 50.0}
    assert loadread.figures(reading, {}) == {"connections": 4.0}


# -- figures past any server

CSV_HEAD = b"# pxname,svname,scur,slim,bin,bout\n"
HAPROXY_WEB = LoadSource("haproxy", proxy="web", server="FRONTEND")


@pytest.mark.parametrize(
    ("body", "source", "figure"),
    [
        (b'{"capacity": 1e308, "connections": 5}', LoadSource("json"), "capacity is 1e+308"),
        (b'{"connections": 2000000000000}', LoadSource("json"), "connections is 2e+12"),
        (b'{"kbps": 1e13}', LoadSource("json"), "kbps is 1e+13"),
        (b"cap 1e308\n", LoadSource("prometheus", capacity=(Sample("cap"),)), "capacity is 1e+308"),
        (
            b"a 9e11\nb 9e11\n",
            LoadSource("prometheus", connections=(Sample("a"), Sample("b"))),
            "connections is 1.8e+12",
        ),
        (CSV_HEAD + b"web,FRONTEND,1,99999999999999999999,0,0\n", HAPROXY_WEB, "capacity is 1e+20"),
        (b"Active connections: 99999999999999999999 \n", LoadSource("nginx"), "connections is 1e+20"),
    ],
)
def test_a_figure_past_any_server_is_refused(body: bytes, source: LoadSource, figure: str) -> None:
    """A load figure over MAX_FIGURE (10**12, the most a config may state too) is no
    figure: the body is unreadable, saying which, so no sum of them can be infinite."""
    assert problem(body, source) == f"{figure}, over 1e+12 (the most a load figure may be)"


def test_a_rate_past_any_server_is_left_out() -> None:
    """A counter that jumped (or readings a moment apart) gives a rate over MAX_FIGURE:
    that reading has no such figure; the gauges stand."""
    reading = Reading({"connections": 4.0}, {"bytes": 1.0, "packets": 2.0})
    assert loadread.figures(reading, {"bytes": 1e300, "packets": 2e12}) == {"connections": 4.0}
    rates = CounterRates()
    rates.update("t", {"bytes": 0.0}, 10.0)
    jumped = rates.update("t", {"bytes": 1.8e19}, 10.001)
    assert loadread.figures(Reading({}, {"bytes": 1.8e19}), jumped) == {}
