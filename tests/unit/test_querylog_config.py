"""``dns_server.query_log``: its settings, defaults, and mistakes reported like every other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gtmcluster.config.load import load
from gtmcluster.config.model import QueryLog
from tests.support import configs
from tests.unit.test_config_errors import Mutation, assert_form, find, problems_of, put


def with_log(value: Any, **dns_server: Any) -> Mutation:
    return put("dns_server", value={**dns_server, "query_log": value})


def test_settings_and_defaults(tmp_path: Path) -> None:
    raw = configs.base()
    raw["dns_server"]["query_log"] = {"path": "var/log/queries.dnstap"}
    config = load(configs.write(tmp_path, raw))
    assert config.dns_server.query_log == QueryLog(tmp_path / "var/log/queries.dnstap")
    assert (config.dns_server.query_log.max_bytes, config.dns_server.query_log.keep) == (100_000_000, 5)
    raw["dns_server"]["query_log"] = {
        "path": "/tmp/q.dnstap",
        "format": "dnstap",
        "max_bytes": 65536,
        "keep": 0,
        "queue": 100,
    }
    config = load(configs.write(tmp_path, raw))
    assert config.dns_server.query_log == QueryLog(Path("/tmp/q.dnstap"), "dnstap", 65536, 0, 100)
    del raw["dns_server"]["query_log"]
    assert load(configs.write(tmp_path, raw)).dns_server.query_log is None


MISTAKES = [
    pytest.param(with_log("q.dnstap"), "dns_server.query_log", "must be a mapping {path,", id="not-a-mapping"),
    pytest.param(with_log({}), "dns_server.query_log", "missing key 'path'", id="no-path"),
    pytest.param(with_log({"path": 3}), "dns_server.query_log.path", "must be a non-empty string", id="path"),
    pytest.param(
        with_log({"path": "q", "format": "text"}),
        "dns_server.query_log.format",
        "'text' is not one of: dnstap",
        id="fmt",
    ),
    pytest.param(
        with_log({"path": "q", "max_bytes": 1000}),
        "dns_server.query_log.max_bytes",
        "1000 is out of range (65536 to",
        id="max_bytes",
    ),
    pytest.param(
        with_log({"path": "q", "keep": -1}), "dns_server.query_log.keep", "-1 is out of range (0 to 1000)", id="keep"
    ),
    pytest.param(
        with_log({"path": "q", "queue": 1.5}), "dns_server.query_log.queue", "1.5 is not a whole number", id="queue"
    ),
    pytest.param(
        with_log({"path": "q", "rotate": 1}),
        "dns_server.query_log.rotate",
        "unknown key; known keys here: path, format, max_bytes, keep, queue",
        id="unknown",
    ),
    pytest.param(
        with_log({"path": "q"}, processes=2),
        "dns_server.query_log",
        "is not written with dns_server.processes above 1",
        id="processes",
    ),
]


@pytest.mark.parametrize(("mutation", "path", "fragment"), MISTAKES)
def test_a_mistake_is_one_problem_naming_file_and_key(
    tmp_path: Path, mutation: Mutation, path: str, fragment: str
) -> None:
    file, problems = problems_of(tmp_path, mutation)
    assert len(problems) == 1, problems
    problem = find(problems, path, fragment)
    assert fragment in assert_form(problem, file, path)
    assert problem.line is not None
