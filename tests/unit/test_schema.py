"""The schema of each kind of record (gtmcluster/state/schema.py): what the writers of this
version write is taken; a key, value, TTL or size a kind does not allow, an unknown kind,
and a verdict under another observer's name are refused with the kind and a reason; fields
a newer version may add are taken; and what the config lets writers write stays within the
caps, so an honest member is never refused."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.config.load import load
from gtmcluster.config.probersettings import MAX_PROBES_PER_SECOND
from gtmcluster.config.problems import ConfigError
from gtmcluster.health.checker import MIN_OBSERVATION_TTL, subjects
from gtmcluster.proximity.budget import REQUEST_TTL, queue_limit
from gtmcluster.proximity.table import WINDOW, PathValue, updated
from gtmcluster.state import schema
from gtmcluster.state.record import TOMBSTONE_TTL
from tests.support import configs

NODE = "gtm-cnc"
PATH = updated(None, True, 23_456, 7, "dns_dot", NODE, "203.0.113.77", "CNC").value()

#: records as this version's writers make them: (key, value, ttl)
WRITTEN: dict[str, tuple[str, Any, float | None]] = {
    "a verdict (health.checker)": ("obs/vs/vs-a/gtm-cnc", {"up": True, "reason": "HTTP 200"}, 90.0),
    "a link verdict": ("obs/link/cnc-uplink/gtm-cnc", {"up": False, "reason": "timed out"}, 90.0),
    "an admin state (api.admin)": ("admin/vs/vs-a", {"state": "drain", "by": NODE}, None),
    "an admin state with who, why and when (issue 14)": (
        "admin/datacenter/CNC",
        {"state": "disabled", "by": "alice", "reason": "maintenance", "at": 1.8e9, "node": NODE},
        None,
    ),
    "a link's admin state": ("admin/link/cnc-uplink", {"state": "drain", "by": "api"}, None),
    "a pool's admin state": ("admin/pool/web", {"state": "disabled", "by": "api"}, None),
    "a pool member's admin state": ("admin/member/web/vs-a", {"state": "drain", "by": "api"}, None),
    "a wide IP's admin state": ("admin/wideip/www.wip.example.com", {"state": "disabled", "by": "api"}, None),
    "a hold (health.tracker)": (
        "held/vs/vs-a",
        {"since": 1700000000.5, "reason": "monitor web: down", "by": NODE},
        None,
    ),
    "load figures (health.checker)": ("metrics/vs/vs-a", {"connections": 12.0, "capacity": 100.0, "by": NODE}, 90.0),
    "a path (proximity.scheduler)": ("path/203.0.113.77/CNC", PATH, 2419200.0),
    "an IPv6 path": ("path/2001:db8::53/CNC", PATH, 2419200.0),
    "a probe request": ("probe/203.0.113.77", {"by": NODE}, REQUEST_TTL),
    "a persistence record": (
        "persist/www.wip.example.com/1/203.0.113.0/24",
        {"pool": "web", "members": ["vs-a"]},
        3600,
    ),
    "a deletion (Store.delete)": ("held/vs/vs-a", None, TOMBSTONE_TTL),
}


@pytest.mark.parametrize("case", list(WRITTEN))
def test_what_this_version_writes_is_taken(case: str) -> None:
    key, value, ttl = WRITTEN[case]
    assert schema.problem(key, value, NODE, ttl) is None


def test_a_compact_value_is_checked_as_the_dict_it_stands_for() -> None:
    compact = PathValue.of(PATH)
    assert compact is not None
    assert schema.problem("path/203.0.113.77/CNC", compact, NODE, 60.0) is None


#: refused records: (key, value, origin, ttl) -> (kind, reason, words of the sentence)
REFUSED: dict[str, tuple[tuple[str, Any, str, float | None], tuple[str, str, str]]] = {
    "an admin state that is text (issue 13)": (("admin/vs/vs-a", "x", NODE, None), ("admin", "value", "not a mapping")),
    "a verdict that is a list, of another observer (issue 13)": (
        ("obs/vs/vs-m/zz", [], NODE, 90.0),
        ("obs", "origin", "a verdict of 'zz' written by 'gtm-cnc'"),
    ),
    "a verdict that is a list": (("obs/vs/vs-m/gtm-cnc", [], NODE, 90.0), ("obs", "value", "not a mapping")),
    "an invented kind (issue 13)": (("zz/a", {"x": "y" * 50_000}, NODE, 10 * 365 * 86400.0), ("unknown", "kind", "")),
    "a key without a kind's slash": (("admin", {"state": "drain"}, NODE, None), ("unknown", "kind", "")),
    "an admin state not known": (("admin/vs/vs-a", {"state": "off"}, NODE, None), ("admin", "value", "'state'")),
    "an admin state of another type": (("admin/vs/vs-a", {"state": ["drain"]}, NODE, None), ("admin", "value", "")),
    "an admin state without state": (("admin/vs/vs-a", {"by": NODE}, NODE, None), ("admin", "value", "no 'state'")),
    "admin 'by' that is not text": (("admin/vs/vs-a", {"state": "drain", "by": 7}, NODE, None), ("admin", "value", "")),
    "an admin key of another target": (("admin/region/web", {"state": "drain"}, NODE, None), ("admin", "key", "")),
    "an admin key of more segments": (("admin/vs/a/b", {"state": "drain"}, NODE, None), ("admin", "key", "")),
    "a pool member's key without its server": (
        ("admin/member/web", {"state": "drain"}, NODE, None),
        ("admin", "key", ""),
    ),
    "a pool member's key with an empty pool": (
        ("admin/member//vs-a", {"state": "drain"}, NODE, None),
        ("admin", "key", ""),
    ),
    "an admin 'at' that is text": (
        ("admin/pool/web", {"state": "drain", "at": "now"}, NODE, None),
        ("admin", "value", "'at'"),
    ),
    "an admin 'reason' that is a list": (
        ("admin/wideip/w", {"state": "drain", "reason": ["x"]}, NODE, None),
        ("admin", "value", "'reason'"),
    ),
    "a verdict whose up is text": (("obs/vs/vs-a/gtm-cnc", {"up": "yes"}, NODE, 90.0), ("obs", "value", "'up'")),
    "a verdict whose reason is a list": (
        ("obs/vs/vs-a/gtm-cnc", {"up": True, "reason": []}, NODE, 90.0),
        ("obs", "value", "'reason' is not text"),
    ),
    "a verdict with a reason too long": (
        ("obs/vs/vs-a/gtm-cnc", {"up": True, "reason": "r" * schema.STATE_SIZE}, NODE, 90.0),
        ("obs", "size", f"over {schema.STATE_SIZE} bytes"),
    ),
    "a verdict without a TTL": (("obs/vs/vs-a/gtm-cnc", {"up": True}, NODE, None), ("obs", "ttl", "no TTL")),
    "a verdict of a 10-year TTL": (("obs/vs/vs-a/gtm-cnc", {"up": True}, NODE, 3.2e8), ("obs", "ttl", "TTL over")),
    "a verdict key of three segments": (("obs/vs/gtm-cnc", {"up": True}, NODE, 90.0), ("obs", "key", "")),
    "a hold whose since is text": (("held/vs/vs-a", {"since": "now"}, NODE, None), ("held", "value", "'since'")),
    "load figures that are negative": (
        ("metrics/vs/vs-a", {"connections": -1}, NODE, 90.0),
        ("metrics", "value", "non-negative"),
    ),
    "a path whose rtt is text": (("path/203.0.113.77/CNC", {**PATH, "rtt": "fast"}, NODE, 60.0), ("path", "value", "")),
    "a path without its window": (
        ("path/203.0.113.77/CNC", {k: v for k, v in PATH.items() if k != "window"}, NODE, 60.0),
        ("path", "value", "no 'window'"),
    ),
    "a path whose window is not 0s and 1s": (
        ("path/203.0.113.77/CNC", {**PATH, "window": "abc"}, NODE, 60.0),
        ("path", "value", "0s and 1s"),
    ),
    "a path whose completion is over 100%": (
        ("path/203.0.113.77/CNC", {**PATH, "completion": 10_001}, NODE, 60.0),
        ("path", "value", "'completion'"),
    ),
    "a path to something not an address": (("path/zz/CNC", PATH, NODE, 60.0), ("path", "key", "")),
    "a path without a TTL": (("path/203.0.113.77/CNC", PATH, NODE, None), ("path", "ttl", "")),
    "a path of 10 years": (("path/203.0.113.77/CNC", PATH, NODE, 3.2e8), ("path", "ttl", "")),
    "a probe request of an hour": (("probe/203.0.113.77", {"by": NODE}, NODE, 3600.0), ("probe", "ttl", "")),
    "a probe request without by": (("probe/203.0.113.77", {}, NODE, 60.0), ("probe", "value", "no 'by'")),
    "a persistence record whose members are text": (
        ("persist/www/1/203.0.113.0/24", {"pool": "web", "members": "vs-a"}, NODE, 3600.0),
        ("persist", "value", "'members'"),
    ),
    "a persistence record of numbers": (
        ("persist/www/1/203.0.113.0/24", {"pool": "web", "members": [1, 2]}, NODE, 3600.0),
        ("persist", "value", ""),
    ),
    "a persistence key without its qtype": (
        ("persist/www/A/203.0.113.0/24", {"pool": "web", "members": []}, NODE, 3600.0),
        ("persist", "key", ""),
    ),
    "a persistence record of a year": (
        ("persist/www/1/203.0.113.0/24", {"pool": "web", "members": []}, NODE, 365 * 86400.0),
        ("persist", "ttl", ""),
    ),
    "a deletion without a TTL": (("admin/vs/vs-a", None, NODE, None), ("admin", "ttl", "deletion")),
    "a deletion of a year": (("admin/vs/vs-a", None, NODE, 365 * 86400.0), ("admin", "ttl", "deletion")),
    "an admin state with a large new field": (
        ("admin/vs/vs-a", {"state": "drain", "note": "n" * schema.STATE_SIZE}, NODE, None),
        ("admin", "size", f"over {schema.STATE_SIZE} bytes"),
    ),
    "a path with a large new field": (
        ("path/203.0.113.77/CNC", {**PATH, "trace": ["hop"] * 1000}, NODE, 60.0),
        ("path", "size", "over 2048 bytes"),
    ),
    "a persistence record of many long names": (
        ("persist/www/1/203.0.113.0/24", {"pool": "web", "members": ["m" * 200] * 30}, NODE, 3600.0),
        ("persist", "size", "over 4096 bytes"),
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_record_its_kind_does_not_allow_is_refused_with_kind_and_reason(case: str) -> None:
    (key, value, origin, ttl), (kind, reason, words) = REFUSED[case]
    problem = schema.problem(key, value, origin, ttl)
    assert problem is not None
    assert (problem.kind, problem.reason) == (kind, reason), problem
    assert words in problem.text, problem


@pytest.mark.parametrize(
    ("key", "value", "ttl"),
    [
        ("obs/vs/vs-a/gtm-cnc", {"up": True, "reason": "ok", "latency_ms": 3.5, "detail": {"tls": "1.3"}}, 90.0),
        ("admin/vs/vs-a", {"state": "disabled", "by": NODE, "reason": "maintenance", "until": 1.8e9}, None),
        ("path/203.0.113.77/CNC", {**PATH, "jitter": 120}, 60.0),
        ("persist/www/1/203.0.113.0/24", {"pool": "web", "members": ["vs-a"], "resolver": "192.0.2.53"}, 60.0),
        ("probe/203.0.113.77", {"by": NODE, "protocols": ["udp"]}, 60.0),
        ("metrics/vs/vs-a", {"connections": 1, "by": NODE, "cpu_percent": 40, "note": "text is carried too"}, 90.0),
    ],
)
def test_fields_a_newer_version_adds_are_taken(key: str, value: dict[str, Any], ttl: float | None) -> None:
    """A member of a newer version may add fields: its records still pass at members not yet
    upgraded (a rolling upgrade keeps the group connected)."""
    assert schema.problem(key, value, NODE, ttl) is None


def test_metrics_name_only_known_kinds() -> None:
    """A peer cannot make up the label values of /metrics: an unknown kind is "unknown"."""
    assert schema.kind_label("path/203.0.113.77/CNC") == "path"
    assert schema.kind_label("zz/a") == "unknown"
    assert schema.kind_label("x" * 500) == "unknown"


# -- what honest writers write stays within the caps --------------------------------------------


def test_the_largest_value_of_a_path_passes_without_being_measured_and_fits() -> None:
    """A path value of only its fields is not measured (a full table is millions of them):
    the largest one its checks allow, every text field of control characters (6 bytes each
    in JSON), is within the kind's size."""
    worst = {
        "rtt": 2**53,
        "last_rtt": 2**53,
        "hops": 255,
        "completion": 10_000,
        "protocol": "\x01" * schema.MAX_PROTOCOL,
        "failures": 2**31,
        "window": "1" * schema.MAX_WINDOW,
        "by": "\x01" * schema.MAX_NAME,
    }
    assert schema.problem("path/203.0.113.77/CNC", worst, NODE, 60.0) is None
    assert schema.size_of(worst) <= schema.KINDS["path"].max_size
    probe = {"by": "\x01" * schema.MAX_NAME}
    assert schema.problem("probe/203.0.113.77", probe, NODE, 60.0) is None
    assert schema.size_of(probe) <= schema.KINDS["probe"].max_size


def test_the_persistence_bound_is_an_upper_bound() -> None:
    for members in (["vs-a"], ["\x01" * 40] * 16, ["é" * 253] * 2):
        value = {"pool": "\x01" * 30, "members": members}
        assert schema._persist_bound(value) >= schema.size_of(value)


def test_ttls_the_config_allows_are_within_the_caps(tmp_path: Path) -> None:
    """A config at the longest TTLs it accepts (a monitor of the largest interval and
    thresholds, the longest inactive_ldns_ttl and persistence TTL) makes records within
    their kinds' caps; one beyond them is refused by the config (not by the peers later);
    and a probe request's and a deletion's TTLs are within theirs."""
    raw = configs.base()
    raw["monitors"] = {"slow": {"type": "tcp", "interval": 86400, "timeout": 1, "up_after": 100, "down_after": 100}}
    raw["virtual_servers"]["vs1"]["monitor"] = "slow"
    raw["prober"] = {"inactive_ldns_ttl": int(schema.MAX_PATH_TTL)}
    raw["wideips"]["gslb.example.test"]["persistence"] = {"ttl": int(schema.MAX_PERSIST_TTL)}
    config = load(configs.write(tmp_path / "at", raw))
    (subject,) = subjects(config, "n1")
    assert MIN_OBSERVATION_TTL < subject.ttl <= schema.KINDS["obs"].max_ttl
    assert subject.ttl <= schema.KINDS["metrics"].max_ttl
    assert config.prober.inactive_ldns_ttl <= schema.KINDS["path"].max_ttl
    persistence = next(w.persistence for w in config.wideips.values() if w.persistence)
    assert persistence.ttl <= schema.KINDS["persist"].max_ttl
    raw["prober"] = {"inactive_ldns_ttl": int(schema.MAX_PATH_TTL) + 1}
    raw["wideips"]["gslb.example.test"]["persistence"] = {"ttl": int(schema.MAX_PERSIST_TTL) + 1}
    with pytest.raises(ConfigError) as refused:
        load(configs.write(tmp_path / "beyond", raw))
    assert {p.path[-1] for p in refused.value.problems} == {"inactive_ldns_ttl", "ttl"}
    assert schema.KINDS["probe"].max_ttl >= REQUEST_TTL
    assert TOMBSTONE_TTL <= schema.MAX_TOMBSTONE_TTL
    assert WINDOW <= schema.MAX_WINDOW


def test_counts_the_config_allows_are_within_the_caps(tmp_path: Path) -> None:
    """A config at the largest bounds it accepts makes a node write no more records of its
    own than the writer limits: paths to prober.max_ldns LDNSes of its data center, up to
    persistence.max_records persistence records (all of the group's may be its own), and
    live probe requests: a burst of a request's life, then max_per_second, living a
    request's life (proximity.budget). One beyond is refused by the config."""
    raw = configs.base()
    raw["prober"] = {"max_ldns": schema.KINDS["path"].writer_limit, "max_per_second": MAX_PROBES_PER_SECOND}
    raw["persistence"] = {"max_records": schema.KINDS["persist"].writer_limit}
    config = load(configs.write(tmp_path / "at", raw))
    assert config.prober.max_ldns <= schema.KINDS["path"].writer_limit
    assert config.persistence.max_records <= schema.KINDS["persist"].writer_limit
    live_requests = queue_limit(config.prober) + math.ceil(config.prober.max_per_second * REQUEST_TTL)
    assert live_requests <= schema.KINDS["probe"].writer_limit
    raw["prober"] = {"max_ldns": schema.KINDS["path"].writer_limit + 1, "max_per_second": MAX_PROBES_PER_SECOND + 1}
    raw["persistence"] = {"max_records": schema.KINDS["persist"].writer_limit + 1}
    with pytest.raises(ConfigError) as refused:
        load(configs.write(tmp_path / "beyond", raw))
    assert {p.path[-1] for p in refused.value.problems} == {"max_ldns", "max_per_second", "max_records"}


def test_a_reason_is_shortened_for_peers() -> None:
    reason = "a: refused, " * 100
    short = schema.shorten(reason)
    assert len(short) == schema.MAX_TEXT and short.endswith("…")
    assert schema.problem("obs/vs/vs-a/gtm-cnc", {"up": False, "reason": short}, NODE, 90.0) is None
    assert schema.shorten("fine") == "fine"


def test_every_cap_is_a_number_that_makes_sense() -> None:
    for kind in schema.KINDS.values():
        assert 0 < kind.writer_limit < kind.max_records
        assert math.isfinite(kind.max_ttl) and kind.max_ttl > 0
        assert 512 <= kind.max_size <= 8192
    # a data center's paths to 1,000,000 LDNSes are one origin's (bench/scale.py)
    assert schema.KINDS["path"].writer_limit >= 1_000_000
