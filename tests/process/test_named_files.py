"""A FIFO or /dev/zero named by a config, as a region's address list or as the API's token
file, against the real commands: `gtmcluster check` says so in one problem at once, and a
running node's reload is refused the same way while it keeps answering DNS (before, the
FIFO blocked the reactor, so DNS stopped, and /dev/zero was read until memory ran out)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import configs, dnsclient, poll
from tests.support.hostilefiles import DEV_ZERO, make_fifo, release
from tests.support.nodeproc import RunningNode, loopback_address, running_node

pytestmark = pytest.mark.process

GTMCLUSTER = Path(sys.executable).parent / "gtmcluster"
TOKEN = "a-long-enough-token-for-tests"
#: address space a command or node may take: plenty for them, far from the machine's memory
ADDRESS_SPACE = 4 << 30
#: (where the config names the file, its key path in problems)
PLACES = {"address_list": "regions.r3[0].file", "token_file": "api.token_file"}
WHY = {"fifo": "a FIFO, not a regular file", "dev_zero": "a character device, not a regular file"}
CASES = [(place, what) for place in PLACES for what in WHY]


def limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def naming(config: dict[str, Any], place: str, path: Path) -> dict[str, Any]:
    """*config* with *path* as a region's address list or as the API's token file."""
    if place == "address_list":
        config["regions"]["r3"] = [{"file": str(path)}]
    else:
        config["api"] = {"token_file": str(path)}
    return config


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """The FIFO (released at the end, in case something blocks on it) or /dev/zero."""
    fifo = make_fifo(tmp_path / "fifo")
    yield lambda what: fifo if what == "fifo" else DEV_ZERO
    release(fifo)


def check(config: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    try:
        result = subprocess.run(
            [str(GTMCLUSTER), "check", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
            preexec_fn=limited,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"gtmcluster check {config} still running after 15 s")
    return result, time.monotonic() - started


@pytest.fixture(scope="module")
def check_time(tmp_path_factory: pytest.TempPathFactory) -> Callable[[], float]:
    """How long `gtmcluster check` takes for a good config here, measured when called (next
    to the check it is compared with, so both see the same load on the machine)."""
    path = configs.write(tmp_path_factory.mktemp("good"), configs.base())

    def measure() -> float:
        result, elapsed = check(path)
        assert result.returncode == 0, result.stderr
        return elapsed

    return measure


def at_once(elapsed: float, before: float, after: float) -> bool:
    """Whether *elapsed* is the time of an ordinary run (measured just *before* and *after*
    it): within twice the slower of those and a second. A FIFO waited on, or /dev/zero read
    until memory runs out, takes many times that."""
    return elapsed < 2 * max(before, after) + 1.0


@pytest.mark.parametrize(("place", "what"), CASES)
def test_check_names_the_file_and_why_in_one_problem_at_once(
    tmp_path: Path, hostile: Callable[[str], Path], check_time: Callable[[], float], place: str, what: str
) -> None:
    """`gtmcluster check`: exit 1, one problem at the key path naming the file and what it
    is, no traceback, at once (`at_once`: as fast as a good config's check)."""
    path = hostile(what)
    config = configs.write(tmp_path, naming(configs.base(), place, path))
    before = check_time()
    result, elapsed = check(config)
    after = check_time()
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.splitlines() == [
        f"{config}: {PLACES[place]}: cannot read {path}: {WHY[what]} (line {line_of(config, place)})",
        f"{config}: 1 problem",
    ]
    assert at_once(elapsed, before, after), f"{elapsed:.2f}s, a good config {before:.2f}s before, {after:.2f}s after"


def line_of(config: Path, place: str) -> int:
    key = "file:" if place == "address_list" else "token_file:"
    return next(
        i for i, line in enumerate(config.read_text().splitlines(), 1) if line.strip().lstrip("- ").startswith(key)
    )


# --- a running node -----------------------------------------------------------------------


@pytest.fixture(scope="module", params=["own", "shared"])
def node(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[RunningNode, Path, dict[str, Any]]]:
    """A node reading its own file (`config_sync: false`), or one that shares it: a reload
    then makes a bundle of the file and what it names first (`groupconfig.bundle.make`),
    which reads them the same way."""
    directory = tmp_path_factory.mktemp("node")
    address = loopback_address()
    raw = configs.base(address, 5353)
    if request.param == "own":
        raw["api"] = {"token": TOKEN}
        raw["sync_group"]["config_sync"] = False
    else:  # (a shared config holds no inline secret)
        raw["api"] = {"token_file": str(configs.write_secret(directory / "api-token", TOKEN + "\n"))}
    path = configs.write(directory, raw)
    with running_node(path, "n1", address, 5353, directory, preexec_fn=limited) as running:
        yield running, path, raw


def reload(n: RunningNode) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"http://{n.address}:8053/api/v1/reload", method="POST", data=b"{}")
    request.add_header("Content-Type", "application/json")
    request.add_header("Authorization", f"Bearer {TOKEN}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


class Asking:
    """Asks the node a DNS question every 20 ms in a thread, counting the unanswered."""

    def __init__(self, server: tuple[str, int]):
        self.server = server
        self.answered = 0
        self.unanswered: list[str] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._ask, daemon=True)

    def __enter__(self) -> Asking:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _ask(self) -> None:
        wire = dnsclient.query("gslb.example.test")
        while not self._done.wait(0.02):
            try:
                dnsclient.udp(wire, self.server, timeout=0.5)
                self.answered += 1
            except OSError as e:
                self.unanswered.append(repr(e))


def rss(n: RunningNode) -> int:
    for line in Path(f"/proc/{n.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def refused_reload(n: RunningNode) -> tuple[int, dict[str, Any], float]:
    started = time.monotonic()
    code, body = reload(n)
    return code, body, time.monotonic() - started


@pytest.fixture(scope="module")
def reload_time(node: tuple[RunningNode, Path, dict[str, Any]]) -> Callable[[], float]:
    """How long a reload refused for an ordinary mistake takes here, measured when called
    (next to the reload it is compared with)."""
    n, path, raw = node

    def measure() -> float:
        saved = path.read_bytes()
        path.write_text(yaml.safe_dump({**raw, "bogus": 1}, sort_keys=False))
        try:
            code, _, elapsed = refused_reload(n)
        finally:
            path.write_bytes(saved)
        assert code == 422
        return elapsed

    return measure


@pytest.mark.parametrize(("place", "what"), CASES)
def test_a_reload_is_refused_at_once_and_dns_keeps_answering(
    node: tuple[RunningNode, Path, dict[str, Any]],
    hostile: Callable[[str], Path],
    reload_time: Callable[[], float],
    place: str,
    what: str,
) -> None:
    """The reload's answer is 422 with the one problem, at once (as fast as an ordinary
    refusal); every DNS question asked meanwhile is answered; the node's memory stays put."""
    n, path, raw = node
    ordinary_before = reload_time()
    named = hostile(what)
    shared = raw["sync_group"].get("config_sync", True)
    shown, prefix = named, path
    if shared:
        # a shared config names its files inside its folder (an address list carried in the
        # bundle), where the FIFO or a link to /dev/zero is put; its problems about the
        # member's own files name the bundle's config by its name
        if place == "address_list":
            shown = path.parent / f"hostile-{what}"
            shown.unlink(missing_ok=True)
            shown.symlink_to(named)
            named = Path(shown.name)
        else:
            prefix = Path(path.name)
    path.write_text(yaml.safe_dump(naming(yaml.safe_load(yaml.safe_dump(raw)), place, named), sort_keys=False))
    # (the bundle's own problems, found before the config is read, say no line)
    at_line = "" if shared and place == "address_list" else f" (line {line_of(path, place)})"
    before = rss(n)
    try:
        with Asking(n.server) as asking:
            try:
                code, body, elapsed = refused_reload(n)
            except OSError as e:
                pytest.fail(f"the reload did not answer: {e!r}")
            time.sleep(0.1)  # (a few more questions after the answer)
    finally:
        if what == "fifo":
            release(named)
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
    ordinary_after = reload_time()
    assert code == 422, body
    assert body["error"].splitlines() == [
        "the new config is refused; the old one keeps serving:",
        f"{prefix}: {PLACES[place]}: cannot read {shown}: {WHY[what]}{at_line}",
    ]
    assert at_once(elapsed, ordinary_before, ordinary_after), (
        f"{elapsed:.2f}s, an ordinary refusal {ordinary_before:.2f}s before, {ordinary_after:.2f}s after"
    )
    assert asking.unanswered == [] and asking.answered >= 5, (asking.answered, asking.unanswered[:3])
    assert rss(n) - before < 32 << 20
    assert "Traceback" not in n.log_text()


@pytest.mark.parametrize("what", list(WHY))
def test_a_reload_of_a_config_path_that_is_no_regular_file_is_refused_at_once(
    node: tuple[RunningNode, Path, dict[str, Any]], reload_time: Callable[[], float], what: str
) -> None:
    """The config's own path made a FIFO or a link to /dev/zero: the reload's answer is 422
    with one problem, at once (as fast as an ordinary refusal); DNS keeps answering; memory
    stays put. (Under config sync a reload first reads the file to make the bundle it would
    publish: before, that read had no check, so a FIFO held a pool thread per reload and
    the reload never answered, and /dev/zero was read until memory ran out.)"""
    n, path, _ = node
    ordinary_before = reload_time()
    saved = path.read_bytes()
    path.unlink()
    if what == "fifo":
        make_fifo(path)
    else:
        path.symlink_to(DEV_ZERO)
    before = rss(n)
    try:
        with Asking(n.server) as asking:
            try:
                code, body, elapsed = refused_reload(n)
            except OSError as e:
                pytest.fail(f"the reload did not answer: {e!r}")
            answered = asking.answered
            poll.until(lambda: asking.answered >= answered + 5, timeout=5, what="5 more DNS answers after the reload's")
    finally:
        if what == "fifo":
            release(path)
        path.unlink()
        path.write_bytes(saved)
    ordinary_after = reload_time()
    assert code == 422, body
    assert body["error"].splitlines() == [
        "the new config is refused; the old one keeps serving:",
        f"{path}: (top level): cannot read the config: {WHY[what]}",
    ]
    assert at_once(elapsed, ordinary_before, ordinary_after), (
        f"{elapsed:.2f}s, an ordinary refusal {ordinary_before:.2f}s before, {ordinary_after:.2f}s after"
    )
    assert asking.unanswered == [], (asking.answered, asking.unanswered[:3])
    assert rss(n) - before < 32 << 20
    assert "Traceback" not in n.log_text()
