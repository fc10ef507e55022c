"""Fuzz target: the config loader, `config.load.load`, on any file content.

The input is written as ``etc/cluster.yaml`` in a folder laid out like a checkout (the
sample's zone and ISP lists in ``etc/``, the test configs' ``example.test.zone`` and the
datagram target's ``dns.zone`` beside it), so the seeds (the sample configs, test configs)
load as they are. Invariants: any content gives a `Config` or the loader's one declared
error, `ConfigError`, whose every problem names the file, has a message and, when it has
a line, a line of the file; no traceback is logged.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from fuzz.harness import Finding, no_tracebacks
from gtmcluster.config.load import load
from gtmcluster.config.problems import ConfigError

ROOT = Path(__file__).resolve().parent.parent
_config: Path | None = None


def config_path() -> Path:
    """The file each input is written to (its folder made once per process)."""
    global _config  # noqa: PLW0603 - one folder per process
    if _config is None:
        top = Path(tempfile.mkdtemp(prefix="fuzz-config-"))
        shutil.copytree(ROOT / "etc" / "isp", top / "etc" / "isp")
        shutil.copytree(ROOT / "etc" / "zones", top / "etc" / "zones")
        shutil.copy(ROOT / "fuzz" / "fixtures" / "dns.zone", top / "etc" / "dns.zone")
        from tests.support.configs import ZONE

        (top / "etc" / "example.test.zone").write_text(ZONE)
        _config = top / "etc" / "cluster.yaml"
    return _config


def test_one_input(data: bytes) -> None:
    path = config_path()
    path.write_bytes(data)
    try:
        with no_tracebacks():
            load(path)
    except ConfigError as e:
        # lines as read (universal newlines) and as YAML counts them (NEL, LS and PS too)
        text = data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
        lines = sum(text.count(c) for c in "\n\x85\u2028\u2029") + 1
        if not e.problems:
            raise Finding("ConfigError without problems") from None
        for problem in e.problems:
            if problem.file != str(path) or not problem.message or not str(problem).startswith(f"{path}: "):
                raise Finding(f"problem {problem!r} does not name the file and say what is wrong") from None
            if problem.line is not None and not 1 <= problem.line <= lines:
                raise Finding(f"problem {problem} points at line {problem.line} of {lines}") from None
