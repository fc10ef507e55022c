"""What a web page, a rebound name and a large body can make a real node do over its HTTP
API, and how the CLI finds the token (real `twistd gtm` processes, real sockets).

- A node whose config sets no token (as the sample and the demo run) makes one in its
  state_dir (0600, never logged); a page of another site (the preflight-free
  ``text/plain`` POST with its ``Origin``) can neither disable a server nor reload, and a
  write without the token is 401; with the node's own token it works.
- With a token configured, a page whose name was rebound to the node's address (its
  ``Host``) reads nothing: status, explain and metrics are 421; the node's configured name
  and ``localhost`` are fine.
- A 300 MB POST is answered (401 without the token, 413 with it) as soon as its headers are
  in, before one byte of its body is sent; a chunked body is cut at 64 KiB.
- `gtmcluster status`, `ldns`, `explain` and `dashboard-url` send the token they find
  (--token-file, GTM_API_TOKEN, the config, the node's own file on its host) and say where
  to give it when the node refuses.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import apiclient, configs, dnsclient
from tests.support.nodeproc import RunningNode, loopback_address, running_node

pytestmark = [pytest.mark.process]

GTMCLUSTER = Path(sys.executable).parent / "gtmcluster"
TOKEN = "a-configured-token-for-tests-0123"
#: the answer to a request whose body is never sent must come well within this
ANSWER_WITHIN = 5.0


def answer(node: RunningNode) -> list[str]:
    return dnsclient.addresses(dnsclient.parse(dnsclient.udp(dnsclient.query("gslb.example.test"), node.server)))


@pytest.fixture(scope="module")
def open_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningNode, Path]]:
    """A node whose config has no api section (the sample's and the demo's way)."""
    directory = tmp_path_factory.mktemp("api-open")
    address = loopback_address()
    raw = configs.base(address, 5353)
    raw["pools"]["p"]["load_balancing"] = {"preferred": "global_availability"}
    path = configs.write(directory, raw)
    with running_node(path, "n1", address, 5353, directory) as running:
        yield running, path


@pytest.fixture(scope="module")
def guarded_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningNode, Path]]:
    """A node with a configured token and a name for its API ({node}.gtm.test)."""
    directory = tmp_path_factory.mktemp("api-token")
    address = loopback_address()
    raw = configs.base(address, 5353)
    raw["api"] = {"token": TOKEN, "names": ["{node}.gtm.test"]}
    path = configs.write(directory, raw)
    with running_node(path, "n1", address, 5353, directory) as running:
        yield running, path


def api(node: RunningNode) -> tuple[str, int]:
    return (node.address, 8053)


def test_a_web_page_cannot_disable_or_reload(open_node: tuple[RunningNode, Path]) -> None:
    """The requests any page can send cross-site without a preflight (text/plain, with the
    page's Origin) are refused: the server stays in the answers, the config generation
    stays; without an Origin but without the token they are 401."""
    n, _ = open_node
    cross_site = {"Origin": "http://evil.example", "Content-Type": "text/plain"}
    generation = apiclient.call(api(n), "/api/v1/status")[1]["config_generation"]
    assert answer(n) == ["10.0.1.1"]
    for path in ("/api/v1/virtual-servers/vs1/disable", "/api/v1/reload"):
        code, body = apiclient.call(api(n), path, "POST", headers=cross_site, body=b"x")
        assert code == 403, (path, code, body)
        code, body = apiclient.call(api(n), path, "POST")
        assert code == 401 and "api-token" in body["error"], (path, code, body)
    assert answer(n) == ["10.0.1.1"]
    assert apiclient.call(api(n), "/api/v1/status")[1]["config_generation"] == generation


def test_the_node_makes_its_token_and_writes_work_with_it(open_node: tuple[RunningNode, Path]) -> None:
    """The token is in state_dir/api-token, 0600, not in the log; with it a write from the
    node's own origin works; `gtmcluster dashboard-url` gives the page's address with it."""
    n, path = open_node
    token_file = path.parent / "var" / "state" / "n1" / "api-token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    assert len(token) >= 32 and token not in n.log_text()
    assert "API writes need the bearer token: the node's own, kept in" in n.log_text()
    own = {"Origin": f"http://{n.address}:8053"}
    code, body = apiclient.call(api(n), "/api/v1/virtual-servers/vs1/disable", "POST", token, headers=own)
    assert code == 200 and body["admin"] == "disabled"
    assert answer(n) == ["10.0.2.1"]
    assert apiclient.call(api(n), "/api/v1/virtual-servers/vs1/enable", "POST", token)[0] == 200
    assert answer(n) == ["10.0.1.1"]
    run = gtmcluster("dashboard-url", "--config", str(path), "--node", "n1")
    assert run.returncode == 0 and run.stdout.strip() == f"http://{n.address}:8053/#token={token}", run


def test_a_rebound_page_reads_nothing(guarded_node: tuple[RunningNode, Path]) -> None:
    """With a token configured, reads on loopback need none, but only under a name of the
    node: Host attacker.example gets 421 for status, explain and metrics; the configured
    name and localhost get the answer. The refusals are counted in /metrics."""
    n, _ = guarded_node
    rebound = {"Host": "attacker.example:8053"}
    for path in ("/api/v1/status", "/api/v1/explain?wideip=gslb.example.test&ldns=192.0.2.1", "/metrics"):
        code, body = apiclient.call(api(n), path, headers=rebound)
        assert code == 421 and "does not name this node" in body["error"], (path, code, body)
        for host in ("n1.gtm.test:8053", "localhost:8053", f"{n.address}:8053"):
            assert apiclient.call(api(n), path, headers={"Host": host})[0] == 200, (path, host)
    code, metrics = apiclient.call(api(n), "/metrics")
    assert 'gtm_api_refused_total{reason="host"} 3.0' in metrics


def raw_request(node: RunningNode, head: bytes, then: bytes = b"") -> tuple[bytes, float, bool]:
    """Send *head* (and *then*), read the answer: (answer, seconds it took, whether the
    node closed its side after it)."""
    with socket.create_connection(api(node), timeout=ANSWER_WITHIN) as s:
        started = time.monotonic()
        s.sendall(head)
        if then:
            s.sendall(then)
        got = b""
        closed = False
        while True:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                closed = True
                break
            got += chunk
        return got, time.monotonic() - started, closed


def test_a_large_body_is_answered_before_it_is_sent(guarded_node: tuple[RunningNode, Path]) -> None:
    """A POST announcing 300 MB is answered as soon as its headers are in (no byte of the
    body sent): 401 without the token, 413 with it, and the node closes its side."""
    n, _ = guarded_node
    base = (
        f"POST /api/v1/reload HTTP/1.1\r\nHost: {n.address}:8053\r\nContent-Type: application/json\r\n"
        "Content-Length: 300000000\r\n"
    )
    for extra, code in (("", b"401"), (f"Authorization: Bearer {TOKEN}\r\n", b"413")):
        got, took, closed = raw_request(n, (base + extra + "\r\n").encode())
        assert got.startswith(b"HTTP/1.1 " + code), got[:200]
        assert closed and took < ANSWER_WITHIN, (took, closed)


def test_a_chunked_body_is_cut_at_the_limit(guarded_node: tuple[RunningNode, Path]) -> None:
    n, _ = guarded_node
    head = (
        f"POST /api/v1/reload HTTP/1.1\r\nHost: {n.address}:8053\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    chunk = b"%x\r\n%s\r\n" % (8192, b" " * 8192)
    got, _, closed = raw_request(n, head, chunk * 9)
    assert got.startswith(b"HTTP/1.1 413") and closed, got[:200]


# -- the CLI ------------------------------------------------------------------------------------


def gtmcluster(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "GTM_API_TOKEN"}
    return subprocess.run(
        [str(GTMCLUSTER), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def reads_guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningNode, Path, Path]]:
    """A node that needs its own (generated) token for reads too; its config, and the same
    config as seen from another host (a state_dir without the node's token)."""
    directory = tmp_path_factory.mktemp("api-reads")
    address = loopback_address()
    raw: dict[str, Any] = configs.base(address, 5353)
    raw["api"] = {"token_for_reads": True}
    path = configs.write(directory, raw)
    elsewhere = dict(raw, state_dir="elsewhere/{node}")
    remote = directory / "remote.yaml"
    remote.write_text(yaml.safe_dump(elsewhere, sort_keys=False))
    with running_node(path, "n1", address, 5353, directory) as running:
        yield running, path, remote


def test_the_cli_sends_the_token_it_finds(reads_guarded: tuple[RunningNode, Path, Path], tmp_path: Path) -> None:
    """On the node's host the CLI finds the node's own token; elsewhere it says where to
    give it, and takes it from --token-file or GTM_API_TOKEN; a wrong one is named."""
    _, path, remote = reads_guarded
    token = apiclient.token_of(path, "n1")
    explain = ["explain", "gslb.example.test", "--ldns", "192.0.2.1"]
    for command in (["status"], ["ldns"], explain):
        ran = gtmcluster(*command, "--config", str(path), "--node", "n1")
        assert ran.returncode == 0, (command, ran.stderr)

        ran = gtmcluster(*command, "--config", str(remote), "--node", "n1")
        said = ran.stdout + ran.stderr  # status lists a node it could not ask on stdout
        assert ran.returncode == 1, (command, said)
        for hint in ("needs the bearer token", "--token-file PATH", "GTM_API_TOKEN", "api.token", "api-token"):
            assert hint in said, (command, hint, said)

        ran = gtmcluster(*command, "--config", str(remote), "--node", "n1", env={"GTM_API_TOKEN": token})
        assert ran.returncode == 0, (command, ran.stderr)
        given = tmp_path / "token"
        given.write_text(token + "\n")
        ran = gtmcluster(*command, "--config", str(remote), "--node", "n1", "--token-file", str(given))
        assert ran.returncode == 0, (command, ran.stderr)

        wrong = {"GTM_API_TOKEN": "not-the-token-0123456789"}
        ran = gtmcluster(*command, "--config", str(path), "--node", "n1", env=wrong)
        assert ran.returncode == 1 and "refused the bearer token from GTM_API_TOKEN" in ran.stdout + ran.stderr
