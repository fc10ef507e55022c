"""``dns_server.query_log``: its settings, defaults, and mistakes reported like every other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gtmcluster.config.dnsserver import QueryLog
from gtmcluster.config.load import load
from gtmcluster.querylog.logfile import worker_path
from tests.support import configs
from tests.unit.test_config_errors import Mutation, assert_form, find, problems_of, put


def with_log(value: Any, **dns_server: Any) -> Mutation:
    return put("dns_server", value={**dns_server, "query_log": value})


def test_the_path_is_taken_plainly_inside_log_dir_or_the_named_folder(tmp_path: Path) -> None:
    """``..`` in a path is taken away by its text (the file is then opened below the folder,
    never through a link); a path inside a log_dir the config moves, or inside query_log.dir,
    is taken; a subfolder is fine."""
    raw = configs.base()
    raw["log_dir"] = "logs"
    raw["dns_server"]["query_log"] = {"path": "logs/x/../dnstap/q.dnstap"}
    config = load(configs.write(tmp_path, raw)).dns_server.query_log
    assert config is not None and (config.path, config.dir) == (tmp_path / "logs/dnstap/q.dnstap", tmp_path / "logs")
    raw["dns_server"]["query_log"] = {"path": "big/q.dnstap", "dir": "big"}
    config = load(configs.write(tmp_path, raw)).dns_server.query_log
    assert config is not None and (config.path, config.dir) == (tmp_path / "big/q.dnstap", tmp_path / "big")


def test_settings_and_defaults(tmp_path: Path) -> None:
    raw = configs.base()
    raw["dns_server"]["query_log"] = {"path": "var/log/queries.dnstap"}
    config = load(configs.write(tmp_path, raw))
    log_dir = tmp_path / "var/log"
    assert config.dns_server.query_log == QueryLog(log_dir / "queries.dnstap", dir=log_dir)
    assert (config.dns_server.query_log.max_bytes, config.dns_server.query_log.keep) == (100_000_000, 5)
    raw["dns_server"]["query_log"] = {
        "path": "/srv/dnstap/q.dnstap",
        "dir": "/srv/dnstap",
        "format": "dnstap",
        "max_bytes": 65536,
        "keep": 0,
        "queue": 100,
    }
    config = load(configs.write(tmp_path, raw))
    assert config.dns_server.query_log == QueryLog(
        Path("/srv/dnstap/q.dnstap"), "dnstap", 65536, 0, 100, Path("/srv/dnstap")
    )
    del raw["dns_server"]["query_log"]
    assert load(configs.write(tmp_path, raw)).dns_server.query_log is None


def test_answering_workers_each_have_a_file_of_their_own(tmp_path: Path) -> None:
    """With ``processes`` above 1 the log is taken (before issue 34 it was refused): each
    answering worker writes a file beside the node's, its index before the suffix, never
    one of the node's names (``PATH``, ``PATH.<n>``) nor another worker's."""
    raw = configs.base()
    raw["dns_server"]["processes"] = 3
    raw["dns_server"]["query_log"] = {"path": "var/log/queries.dnstap"}
    config = load(configs.write(tmp_path, raw)).dns_server.query_log
    assert config is not None and config.path == tmp_path / "var/log/queries.dnstap"
    folder = tmp_path / "var/log"
    assert worker_path(config.path, 1) == folder / "queries.w1.dnstap"
    assert worker_path(folder / "queries", 2) == folder / "queries.w2"
    for path in (folder / "queries.dnstap", folder / "queries", folder / "q.1"):
        node = {path.name, *(f"{path.name}.{n}" for n in range(1, 12))}
        workers = [
            {worker_path(path, i).name, *(f"{worker_path(path, i).name}.{n}" for n in range(1, 12))}
            for i in range(1, 12)
        ]
        assert all(not (node & w) for w in workers)
        assert all(not (a & b) for i, a in enumerate(workers) for b in workers[i + 1 :])


MISTAKES = [
    pytest.param(with_log("q.dnstap"), "dns_server.query_log", "must be a mapping {path,", id="not-a-mapping"),
    pytest.param(with_log({}), "dns_server.query_log", "missing key 'path'", id="no-path"),
    pytest.param(with_log({"path": 3}), "dns_server.query_log.path", "must be a non-empty string", id="path"),
    pytest.param(
        with_log({"path": "var/log/q", "format": "text"}),
        "dns_server.query_log.format",
        "'text' is not one of: dnstap",
        id="fmt",
    ),
    pytest.param(
        with_log({"path": "var/log/q", "max_bytes": 1000}),
        "dns_server.query_log.max_bytes",
        "1000 is out of range (65536 to",
        id="max_bytes",
    ),
    pytest.param(
        with_log({"path": "var/log/q", "keep": -1}),
        "dns_server.query_log.keep",
        "-1 is out of range (0 to 1000)",
        id="keep",
    ),
    pytest.param(
        with_log({"path": "var/log/q", "queue": 1.5}),
        "dns_server.query_log.queue",
        "1.5 is not a whole number",
        id="queue",
    ),
    pytest.param(
        with_log({"path": "var/log/q", "rotate": 1}),
        "dns_server.query_log.rotate",
        "unknown key; known keys here: path, dir, format, max_bytes, keep, queue",
        id="unknown",
    ),
    pytest.param(
        with_log({"path": "victim.txt", "keep": 0}),
        "dns_server.query_log.path",
        "'victim.txt' is not a file inside log_dir (",
        id="outside-log-dir",
    ),
    pytest.param(
        with_log({"path": "/etc/passwd"}),
        "dns_server.query_log.path",
        "'/etc/passwd' is not a file inside log_dir (",
        id="absolute-outside",
    ),
    pytest.param(
        with_log({"path": "var/log/../../victim"}),
        "dns_server.query_log.path",
        "'var/log/../../victim' is not a file inside log_dir (",
        id="dotdot",
    ),
    pytest.param(
        with_log({"path": "var/log/"}),
        "dns_server.query_log.path",
        "'var/log/' is not a file inside log_dir (",
        id="the-folder-itself",
    ),
    pytest.param(
        with_log({"path": "var/log/q", "dir": "/srv/dnstap"}),
        "dns_server.query_log.path",
        "'var/log/q' is not a file inside query_log.dir (/srv/dnstap)",
        id="outside-dir",
    ),
    pytest.param(
        with_log({"path": "var/log/q", "dir": 7}),
        "dns_server.query_log.dir",
        "must be a non-empty string",
        id="dir-type",
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
