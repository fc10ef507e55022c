"""The dashboard (``GET /``) in a real browser, against a real sync group.

Three `twistd -n gtm` members (n1..n3 in DC1..DC3, tests/support/trio.py) with HTTP
backends behind their virtual servers, one link up and one down, and three LDNSes whose
paths every data center has measured. Headless Chromium (Debian's ``chromium``) loads
``http://<n1's api>/`` and the test drives it over the DevTools protocol on a pipe
(``--remote-debugging-pipe``: NUL-terminated JSON on file descriptors 3 and 4, so no
websocket client and no new Python dependency). The page polls the API every 2 s by
itself; the test reads what it rendered with ``Runtime.evaluate``, polling with deadlines.

- the page is self-contained (it asks nothing of any other origin) and renders the node, its
  virtual servers and links with the same state the API reports, the peers, and the
  proximity table with the data center that wins each LDNS;
- when a server is disabled, drained or its backend dies, and when a peer goes away, the open
  page follows within a few polls and lists each change, newest first; a fresh page shows the
  same; when the node itself stops, the page says so and keeps the last data; when it is
  back, the banner goes;
- when the API wants a bearer token for reading, the page says how to give it (``#token=``)
  and sends it;
- opened with the node's own token (what ``gtmcluster dashboard-url`` prints), it disables and
  enables a server with its buttons (JSON POSTs from its own origin); without a token it
  offers none;
- a page of another site (another origin on loopback) cannot make the node write, by fetch
  or by form, and a page whose name resolves to the node (a rebound name: Chromium's
  ``--host-resolver-rules``) reads nothing.

Screenshots go to test-artifacts/ (git-ignored): dashboard.png (after the changes),
dashboard-start.png (the healthy group) and dashboard-token.png (opened with the token).
"""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_tool
from tests.support import apiclient, configs, dnsclient
from tests.support.backends import Backend, running_backends
from tests.support.nodeproc import loopback_address, running_node
from tests.support.trio import Group, running_group

pytestmark = pytest.mark.process

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
BACKEND_PORT = 8080
POLL = 0.1
#: resolvers (any 127/8 address is a source on loopback): in regions r1, r2 and none
LDNSES = ("127.0.1.77", "127.0.2.77", "127.0.3.77")
WIDTH, HEIGHT = 1280, 900
#: a few of the page's 2 s polls, plus the monitors' bounds (1 s x 2 + 0.5 s)
PAGE_TIMEOUT = 15.0

WEB: dict[str, Any] = {
    "type": "http",
    "interval": 1,
    "timeout": 0.5,
    "up_after": 1,
    "down_after": 2,
    "path": "/",
    "expect_body": "ok from",
}
UPLINK: dict[str, Any] = {"type": "tcp", "interval": 1, "timeout": 0.5, "up_after": 1, "down_after": 2}
TOKEN = "dashboard-test-token-0123456789"

#: what the page tells about itself, read in the browser
SNAPSHOT_JS = """(() => {
  const all = (sel) => [...document.querySelectorAll(sel)];
  const banner = document.getElementById("banner");
  if (!banner || document.readyState === "loading" || !document.body.dataset.polls) return null;  // not loaded yet
  return {
    node: document.body.dataset.node,
    polls: Number(document.body.dataset.polls),
    error: document.body.dataset.error,
    title: document.title,
    heading: document.getElementById("node-name").textContent,
    banner: banner.hidden ? "" : banner.innerText,
    text: document.body.innerText,
    vs: Object.fromEntries(all("[data-vs]").map((e) => [e.dataset.vs, e.dataset.state])),
    links: Object.fromEntries(all("[data-link]").map((e) => [e.dataset.link, e.dataset.state])),
    peers: Object.fromEntries(all("[data-peer]").map((e) => [e.dataset.peer, e.dataset.connected])),
    ldns: Object.fromEntries(all("[data-ldns]").map((e) => [e.dataset.ldns, e.dataset.winner])),
    answers: Object.fromEntries(all("[data-wideip-answers]").map((e) =>
      [e.dataset.wideipAnswers, Number(e.dataset.count)])),
    memberAnswers: Object.fromEntries(all("[data-member-answers]").map((e) =>
      [e.dataset.memberAnswers, Number(e.dataset.count)])),
    changes: all("[data-change]").map((e) => ({
      kind: e.dataset.change, subject: e.dataset.subject, to: e.dataset.to,
      time: e.querySelector("time").getAttribute("datetime"), text: e.innerText,
    })),
    actions: all("button[data-action]").map((e) => `${e.dataset.action} ${e.dataset.target}`),
    admin: Object.fromEntries(all("[data-admin]").map((e) => [e.dataset.admin, e.dataset.state])),
    acted: document.body.dataset.acted,
  };
})()"""
#: a name Chromium resolves to n1's address (--host-resolver-rules), as a rebinding would
REBOUND = "rebound.test"


# -- a small DevTools-protocol client over a pipe ------------------------------------------


class Chromium:
    """Headless Chromium driven through ``--remote-debugging-pipe``."""

    def __init__(self, workdir: Path, resolver_rules: str = "", flags: tuple[str, ...] = ()):
        self.log = workdir / "chromium.log"
        self.events: list[dict[str, Any]] = []
        self._ids = 0
        self._buffer = b""
        # the browser reads commands on its fd 3 and writes answers and events on its fd 4
        commands_r, commands_w = os.pipe()
        answers_r, answers_w = os.pipe()
        cmd = [
            *_on_fds_3_and_4(commands_r, answers_w),
            "chromium",
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--hide-scrollbars",
            "--mute-audio",
            f"--window-size={WIDTH},{HEIGHT}",
            f"--user-data-dir={workdir / 'profile'}",
            "--remote-debugging-pipe",
            *([f"--host-resolver-rules={resolver_rules}"] if resolver_rules else []),
            *flags,
            "about:blank",
        ]
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(commands_r, answers_w),
                start_new_session=True,
            )
        for fd in (commands_r, answers_w):
            os.close(fd)
        self._to, self._from = commands_w, answers_r

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """Send one command and return its result (fail on a protocol error)."""
        self._ids += 1
        message: dict[str, Any] = {"id": self._ids, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to, json.dumps(message).encode() + b"\0")
        answer = self._read(self._ids, time.monotonic() + 20.0)
        if "error" in answer:
            raise AssertionError(f"{method} failed: {answer['error']}")
        result: dict[str, Any] = answer.get("result", {})
        return result

    def _read(self, wanted: int, deadline: float) -> dict[str, Any]:
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                message: dict[str, Any] = json.loads(raw)
                if message.get("id") == wanted:
                    return message
                if "method" in message:
                    self.events.append(message)
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._from], [], [], max(0.0, left))
            if not ready:
                raise AssertionError(f"chromium did not answer command {wanted} in time:\n{self.log_tail()}")
            chunk = os.read(self._from, 1 << 20)
            if not chunk:
                raise AssertionError(f"chromium closed its pipe (exit {self.proc.poll()}):\n{self.log_tail()}")
            self._buffer += chunk

    def open(self, url: str) -> Tab:
        """A new tab of WIDTH x HEIGHT that has started loading *url*."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        tab = Tab(self, target, session)
        for domain in ("Page", "Network", "Runtime"):
            self.call(f"{domain}.enable", session=session)
        metrics = {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False}
        self.call("Emulation.setDeviceMetricsOverride", metrics, session)
        self.call("Page.navigate", {"url": url}, session)
        return tab

    def log_tail(self) -> str:
        lines = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join(line for line in lines[-15:] if "dbus" not in line)

    def close(self) -> None:
        """Ask the browser to quit; kill its process group if it does not."""
        try:
            if self.proc.poll() is None:
                self.call("Browser.close")
            self.proc.wait(timeout=10)
        except (AssertionError, OSError, subprocess.TimeoutExpired):
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        finally:
            os.close(self._to)
            os.close(self._from)


def _on_fds_3_and_4(read: int, write: int) -> list[str]:
    """A command prefix that runs the rest with *read* as fd 3 and *write* as fd 4 (a Python
    trampoline: Popen has no fd mapping, and preexec_fn is unsafe once threads run)."""
    code = (
        "import fcntl, os, sys\n"
        "given = [int(fd) for fd in sys.argv[1:3]]\n"
        "r, w = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in given)\n"  # out of the way of 3 and 4
        "os.dup2(r, 3); os.dup2(w, 4)\n"
        "for fd in {r, w, *given} - {3, 4}: os.close(fd)\n"
        "os.execvp(sys.argv[3], sys.argv[3:])\n"
    )
    return [sys.executable, "-c", code, str(read), str(write)]


@dataclass
class Tab:
    browser: Chromium
    target: str
    session: str

    def evaluate(self, expression: str) -> Any:
        """The value of *expression* in the page (a promise's, once it settles)."""
        params = {"expression": expression, "returnByValue": True, "awaitPromise": True}
        result = self.browser.call("Runtime.evaluate", params, self.session)
        if "exceptionDetails" in result:
            raise AssertionError(f"the page failed to evaluate {expression[:60]!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def snapshot(self) -> dict[str, Any] | None:
        """What the page shows (see SNAPSHOT_JS); None while it is still loading."""
        value: dict[str, Any] | None = self.evaluate(SNAPSHOT_JS)
        return value

    def wait_for(
        self, condition: Callable[[dict[str, Any]], bool], what: str, timeout: float = PAGE_TIMEOUT
    ) -> dict[str, Any]:
        """Poll the page's `snapshot` until *condition* holds for it; return that snapshot."""
        deadline = time.monotonic() + timeout
        while True:
            snap = self.snapshot()
            if snap is not None and condition(snap):
                return snap
            if time.monotonic() >= deadline:
                keys = ("node", "polls", "error", "banner", "vs", "links", "peers", "ldns")
                shown = {k: snap[k] for k in keys} if snap is not None else "nothing (still loading)"
                raise AssertionError(f"the page did not show {what} within {timeout}s; it shows {shown}")
            time.sleep(POLL)

    def requested(self) -> list[str]:
        """Every URL this tab asked for so far."""
        return [
            e["params"]["request"]["url"]
            for e in self.browser.events
            if e.get("sessionId") == self.session and e["method"] == "Network.requestWillBeSent"
        ]

    def screenshot(self, path: Path) -> bytes:
        """The whole page (not just the window) as a PNG, saved at *path*."""
        size = self.browser.call("Page.getLayoutMetrics", session=self.session)["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": WIDTH, "height": max(HEIGHT, int(size["height"])), "scale": 1}
        params = {"format": "png", "captureBeyondViewport": True, "clip": clip}
        png = base64.b64decode(self.browser.call("Page.captureScreenshot", params, self.session)["data"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)
        return png

    def close(self) -> None:
        self.browser.call("Target.closeTarget", {"targetId": self.target})


# -- the group under test ---------------------------------------------------------------------


@dataclass
class Site:
    group: Group
    backends: dict[str, Backend]
    browser: Chromium
    url: str = field(init=False)

    def __post_init__(self) -> None:
        host, port = self.group.members["n1"].api
        self.url = f"http://{host}:{port}/"

    def token(self, node: str) -> str:
        """The token *node* made (the group's config sets none)."""
        return apiclient.token_of(self.group.config_path, node)

    def api(self, node: str, path: str, method: str = "GET", body: Any = None) -> Any:
        """The JSON answer of *node* (a write with its token, and *body* as JSON); fails unless 200."""
        token = self.token(node) if method == "POST" else None
        sent = None if body is None else json.dumps(body).encode()
        code, body = apiclient.call(self.group.members[node].api, path, method, token, body=sent)
        assert code == 200, (node, method, path, code, body)
        return body

    def page(self, fragment: str = "") -> Tab:
        """A fresh tab on n1's dashboard, once it has drawn one poll's data."""
        tab = self.browser.open(self.url + fragment)
        tab.wait_for(lambda s: s["polls"] >= 1, "its first poll")
        return tab


def customize(addresses: dict[str, str]) -> Callable[[dict[str, Any]], None]:
    """Monitors on the backends, a live and a dead link, and an RTT pool."""

    def apply(config: dict[str, Any]) -> None:
        config["monitors"] = {"web": WEB, "uplink": UPLINK}
        config["links"] = {
            "dc1-transit": {
                "datacenter": "DC1",
                "monitor": "uplink",
                "targets": [f"{addresses['transit']}:{BACKEND_PORT}"],
            },
            "dc3-transit": {
                "datacenter": "DC3",
                "monitor": "uplink",
                "targets": [f"{addresses['dead']}:{BACKEND_PORT}"],
            },
        }
        servers = config["virtual_servers"]
        for name, dc in (("vs1", "DC1"), ("vs2", "DC2"), ("vs3", "DC3")):
            servers[name] = {"address": addresses[name], "port": BACKEND_PORT, "datacenter": dc, "monitor": "web"}
        servers["vs1-6"]["link"] = "dc1-transit"
        servers["vs3-edge"] = {"address": "10.0.3.2", "datacenter": "DC3", "link": "dc3-transit"}
        config["pools"]["p"] = {
            "members": ["vs1", "vs2", "vs3", "vs3-edge"],
            "load_balancing": {"preferred": "rtt", "alternate": "topology"},
            "ttl": 30,
        }
        config["prober"].update({"protocols": ["udp", "tcp"], "timeout": 1})

    return apply


def measured(group: Group) -> None:
    """Wait until n1 sees its pool's servers up; then ask n1 from each LDNS (so that every data
    center probes it, for the RTT method) until n1's table has every data center's path."""
    n1 = group.members["n1"]
    host, port = n1.api

    def get(path: str) -> Any:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=2) as response:
            return json.loads(response.read())

    def pool_up() -> bool:
        servers = get("/api/v1/health")["virtual_servers"]
        return all(servers[name]["available"] for name in ("vs1", "vs2", "vs3"))

    group.wait_for(pool_up, 20.0, "vs1, vs2 and vs3 available on n1")
    table: list[dict[str, Any]] = []

    def complete() -> bool:
        table[:] = get("/api/v1/ldns")["ldns"]
        usable = {e["address"]: {p["datacenter"] for p in e["paths"] if p["rtt_us"] > 0} for e in table}
        missing = [ldns for ldns in LDNSES if usable.get(ldns) != {"DC1", "DC2", "DC3"}]
        for ldns in missing:  # as a resolver asks again (the answer files a probe request)
            dnsclient.udp(dnsclient.query("gslb.example.test", "A"), n1.dns, source=ldns)
        return not missing

    group.wait_for(complete, 30.0, "paths from DC1, DC2 and DC3 to every LDNS in n1's table", lambda: table)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The group, its backends, the measured paths, and a browser; everything stopped after."""
    require_tool("chromium", "chromium")
    workdir: Path = tmp_path_factory.mktemp("dashboard")
    addresses = {name: loopback_address() for name in ("vs1", "vs2", "vs3", "transit", "dead")}
    backends = [Backend(name, addresses[name], BACKEND_PORT) for name in ("vs1", "vs2", "vs3", "transit")]
    with (
        running_backends(*backends) as running,
        running_group(workdir, 3, customize=customize(addresses)) as group,
    ):
        group.wait_converged()
        measured(group)
        browser = Chromium(workdir, f"MAP {REBOUND} {group.members['n1'].address}")
        try:
            yield Site(group, running, browser)
        finally:
            browser.close()


@contextmanager
def guarded_node(workdir: Path) -> Iterator[str]:
    """A node whose API wants the bearer token for reads too (``api.token_for_reads``, as
    when it listens beyond loopback); its dashboard's URL."""
    address = loopback_address()
    raw = configs.base(address, 5353)
    raw["api"] = {"token": TOKEN, "token_for_reads": True}
    with running_node(configs.write(workdir, raw), "n1", address, 5353, workdir):
        yield f"http://{address}:8053/"


def vs_state(vs: dict[str, Any]) -> str:
    """What the page must call a virtual server of /api/v1/health."""
    if vs["available"]:
        return "available"
    return "draining" if vs["serving"] else "unavailable"


def winner(entry: dict[str, Any]) -> str:
    """The data center with the lowest RTT among the usable paths of one /api/v1/ldns entry."""
    usable = [p for p in entry["paths"] if p["rtt_us"] > 0 and p["completion_rate"] > 0]
    return min(usable, key=lambda p: (p["rtt_us"], p["datacenter"]))["datacenter"] if usable else ""


def assert_png(png: bytes, path: Path) -> None:
    assert png[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", png[16:24])
    assert width == WIDTH and height >= HEIGHT, f"{path} is {width}x{height}"
    assert len(png) > 40_000, f"{path} is only {len(png)} bytes: an empty page?"


# -- the tests ----------------------------------------------------------------------------------


def test_page_is_served_self_contained(site: Site) -> None:
    """GET / answers the page as HTML, from the package; it loads nothing from elsewhere."""
    with urllib.request.urlopen(site.url, timeout=5) as response:
        body = response.read().decode()
        assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert body.startswith("<!DOCTYPE html>")
    # the SVG namespace (createElementNS, for the graphs) is a name, not a resource
    inside = body.replace('"http://www.w3.org/2000/svg"', "")
    for external in ("http://", "https://", "//fonts.", "@import", "url("):
        assert external not in inside, f"the page refers to something outside itself: {external!r}"
    tab = site.page()
    try:
        origin = site.url.rstrip("/")
        foreign = [u for u in tab.requested() if not u.startswith(origin)]
        assert not foreign, f"the page asked other origins: {foreign}"
        wanted = ("status", "health", "ldns", "wideips", "stats")
        assert {f"{origin}/api/v1/{p}" for p in wanted} <= set(tab.requested())
    finally:
        tab.close()


def test_renders_the_state_the_api_reports(site: Site) -> None:
    """The page shows n1 and its data center, every virtual server and link in the state
    /api/v1/health gives, every peer connected, and the winning data center of each LDNS."""
    tab = site.page()
    try:
        health = site.api("n1", "/api/v1/health")
        status = site.api("n1", "/api/v1/status")
        table = site.api("n1", "/api/v1/ldns")["ldns"]
        want_vs = {name: vs_state(v) for name, v in health["virtual_servers"].items()}
        want_links = {name: link["state"] for name, link in health["links"].items()}
        want_peers = {p["name"]: "true" if p["connected"] else "false" for p in status["peers"]}
        want_ldns = {e["address"]: winner(e) for e in table}
        snap = tab.wait_for(
            lambda s: (s["vs"], s["links"], s["peers"], s["ldns"]) == (want_vs, want_links, want_peers, want_ldns),
            "the API's states",
        )
        assert snap["node"] == "n1" and snap["heading"] == "n1" and snap["title"].startswith("n1 ")
        assert "data center DC1" in snap["text"] and not snap["banner"] and not snap["error"]
        # the config makes these: a link with a dead target takes its server out; the rest is up
        assert snap["links"] == {"dc1-transit": "up", "dc3-transit": "down"}
        assert snap["vs"]["vs3-edge"] == "unavailable" and snap["vs"]["vs1-6"] == "available"
        assert "link dc3-transit down" in snap["text"]
        assert set(snap["ldns"]) == set(LDNSES) and all(snap["ldns"][a] in {"DC1", "DC2", "DC3"} for a in LDNSES)
        assert set(snap["peers"]) == {"n2", "n3"}
        assert " ms" in snap["text"] and "best" in snap["text"]
        # the per-object statistics: at least what /api/v1/stats counted before, per wide IP and member
        stats = site.api("n1", "/api/v1/stats")
        counted = {name: w["answered"] for name, w in stats["wideips"].items()}
        members = {f"{p}/{m}": e["answered"] for p, pool in stats["pools"].items() for m, e in pool["members"].items()}
        assert counted and members, stats
        shown = tab.wait_for(
            lambda s: (
                all(s["answers"].get(w, -1) >= n for w, n in counted.items())
                and all(s["memberAnswers"].get(m, -1) >= n for m, n in members.items())
            ),
            "the statistics /api/v1/stats gives",
        )
        assert "preferred" in shown["text"], shown["text"]
        # nothing was published in this group: every member runs its own file (config sync)
        assert snap["text"].count("its own file") >= 3, snap["text"]
        if all(want_vs[n] == "available" for n in ("vs1", "vs2", "vs3")):
            assert_png(tab.screenshot(ARTIFACTS / "dashboard-start.png"), ARTIFACTS / "dashboard-start.png")
    finally:
        tab.close()


def test_follows_changes_and_outages(site: Site) -> None:
    """An open page follows a disabled, a drained and a dead server and a lost peer, and lists
    each change newest first; a fresh page shows the same; when n1 stops the page says so
    and keeps its data, and when n1 is back the banner goes. Everything is put back after."""
    group = site.group
    tab = site.page()
    try:
        tab.wait_for(lambda s: s["vs"]["vs1"] == s["vs"]["vs2"] == s["vs"]["vs3"] == "available", "vs1-3 available")
        started = time.time()
        site.api("n1", "/api/v1/virtual-servers/vs2/disable", "POST")
        site.api("n1", "/api/v1/virtual-servers/vs3/drain", "POST")
        site.backends["vs1"].kill()
        want = {"vs1": "unavailable", "vs2": "unavailable", "vs3": "draining"}
        snap = tab.wait_for(lambda s: all(s["vs"][n] == st for n, st in want.items()), f"{want}")
        seen = {(c["subject"], c["to"]) for c in snap["changes"] if c["kind"] == "vs"}
        assert {("vs1", "unavailable"), ("vs2", "unavailable"), ("vs3", "draining")} <= seen, snap["changes"]
        assert (
            "disabled by an operator" in snap["text"] and "draining: only clients held by persistence" in snap["text"]
        )

        group.kill("n3")
        snap = tab.wait_for(
            lambda s: s["peers"].get("n3") == "false" and any(c["subject"] == "n3" for c in s["changes"]),
            "peer n3 disconnected, in the table and in the changes",
        )
        assert snap["peers"]["n2"] == "true"
        latest = snap["changes"][0]
        assert (latest["kind"], latest["subject"], latest["to"]) == ("peer", "n3", "disconnected"), snap["changes"]
        times = [c["time"] for c in snap["changes"]]
        assert times == sorted(times, reverse=True), f"changes are not newest first: {times}"
        assert all(t >= time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(started - 1)) for t in times)
        png = tab.screenshot(ARTIFACTS / "dashboard.png")
        assert_png(png, ARTIFACTS / "dashboard.png")

        fresh = site.page()
        try:
            snap = fresh.wait_for(lambda s: s["peers"].get("n3") == "false", "n3 disconnected")
            assert {n: snap["vs"][n] for n in want} == want
            assert snap["changes"] == [], "a fresh page has seen no change yet"
        finally:
            fresh.close()

        group.kill("n1", signal.SIGTERM)
        snap = tab.wait_for(lambda s: s["error"] != "", "the poll failing")
        assert "Polling the node failed" in snap["banner"], snap["banner"]
        assert snap["vs"]["vs2"] == "unavailable", "the page keeps the last data it had"
    finally:
        # put everything back for the other tests (admin records replicate from n2)
        site.api("n2", "/api/v1/virtual-servers/vs2/enable", "POST")
        site.api("n2", "/api/v1/virtual-servers/vs3/enable", "POST")
        if not site.backends["vs1"].running:
            site.backends["vs1"].start()
        down = [name for name in ("n1", "n3") if not group.members[name].running]
        group.start(*down)
        group.wait_converged()
    snap = tab.wait_for(
        lambda s: s["error"] == "" and s["peers"] == {"n2": "true", "n3": "true"} and s["vs"]["vs2"] == "available",
        "n1 back, with n3 connected and vs2 available",
        timeout=30.0,
    )
    assert not snap["banner"]
    tab.close()


def failed_with(code: str) -> Callable[[dict[str, Any]], bool]:
    """A `Tab.wait_for` condition: the page's last poll failed with HTTP *code*."""
    return lambda snap: bool(snap["error"] == code)


def test_asks_for_the_bearer_token(site: Site, tmp_path: Path) -> None:
    """Without a token the page says the API needs one and how to give it; with a wrong one
    it says so; with ``#token=`` right it shows the node. The page itself needs no token."""
    with guarded_node(tmp_path) as url:
        cases = [
            ("", "401", "This node's API needs a bearer token."),
            ("#token=not-the-token", "403", "The bearer token in this page's address is wrong."),
        ]
        for fragment, code, message in cases:
            tab = site.browser.open(url + fragment)
            try:
                snap = tab.wait_for(failed_with(code), f"HTTP {code} in its banner")
                assert message in snap["banner"] and "#token=" in snap["banner"], snap["banner"]
                assert snap["vs"] == {} and snap["polls"] == 0
            finally:
                tab.close()
        tab = site.browser.open(url + f"#token={TOKEN}")
        try:
            snap = tab.wait_for(lambda s: s["polls"] >= 1, "a poll with the token")
            assert snap["node"] == "n1" and not snap["error"] and not snap["banner"] and snap["vs"]
        finally:
            tab.close()


def test_acts_with_the_token(site: Site) -> None:
    """Opened with n1's own token (as `gtmcluster dashboard-url` prints it), the page
    disables vs2 with its button (the whole group follows) and enables it again; opened
    without a token it offers no action and says how to get one."""
    bare = site.page()
    try:
        snap = bare.snapshot()
        assert snap is not None and snap["actions"] == [], snap and snap["actions"]
        assert "gtmcluster dashboard-url" in snap["text"]
    finally:
        bare.close()
    command = ["dashboard-url", "--config", str(site.group.config_path), "--node", "n1"]
    run = subprocess.run(
        [str(Path(sys.executable).parent / "gtmcluster"), *command],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert run.returncode == 0 and run.stdout.startswith(site.url + "#token="), run
    tab = site.browser.open(run.stdout.strip())
    try:
        snap = tab.wait_for(lambda s: s["polls"] >= 1 and s["vs"].get("vs2") == "available", "vs2 available")
        assert {"disable vs2", "drain vs2"} <= set(snap["actions"]) and "enable vs2" not in snap["actions"]
        assert_png(tab.screenshot(ARTIFACTS / "dashboard-token.png"), ARTIFACTS / "dashboard-token.png")
        tab.evaluate('document.querySelector(\'button[data-action="disable"][data-target="vs2"]\').click()')
        snap = tab.wait_for(lambda s: s["vs"]["vs2"] == "unavailable", "vs2 disabled by its button")
        assert "disabled by an operator" in snap["text"]
        tab.wait_for(lambda s: s["acted"] == "disable vs2: ok", "the action's outcome")
        site.group.wait_for(
            lambda: site.group.status("n3")["health"]["virtual_servers"]["vs2"]["admin"] == "disabled",
            10.0,
            "n3 to hear that vs2 is disabled",
        )
        tab.evaluate('document.querySelector(\'button[data-action="enable"][data-target="vs2"]\').click()')
        tab.wait_for(lambda s: s["vs"]["vs2"] == "available" and s["acted"] == "enable vs2: ok", "vs2 enabled again")
    finally:
        tab.close()
        if site.api("n1", "/api/v1/health")["virtual_servers"]["vs2"]["admin"] != "enabled":
            site.api("n1", "/api/v1/virtual-servers/vs2/enable", "POST")


def test_disables_a_datacenter_and_shows_who_why_and_when(site: Site) -> None:
    """With the token, DC3's own disable button takes vs3 out for the whole group; the
    Admin states panel then shows who did it (the API: the page gives no name), and a
    change made with the CLI's reason shows that reason; enable gives DC3 back."""
    command = ["dashboard-url", "--config", str(site.group.config_path), "--node", "n1"]
    run = subprocess.run(
        [str(Path(sys.executable).parent / "gtmcluster"), *command],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    tab = site.browser.open(run.stdout.strip())
    try:
        tab.wait_for(lambda s: s["polls"] >= 1 and s["vs"].get("vs3") == "available", "vs3 available")
        tab.evaluate(
            'document.querySelector(\'button[data-kind="datacenter"][data-action="disable"][data-target="DC3"]\').click()'
        )
        snap = tab.wait_for(
            lambda s: s["vs"]["vs3"] == "unavailable" and s["admin"].get("datacenter/DC3") == "disabled",
            "DC3 disabled by its button",
        )
        assert "data center DC3 disabled by api" in snap["text"]
        site.group.wait_for(
            lambda: site.group.status("n3")["health"]["virtual_servers"]["vs3"]["admin"] == "disabled",
            10.0,
            "n3 to hear that DC3 is disabled",
        )
        site.api("n2", "/api/v1/admin/datacenter/DC3/drain", "POST", {"reason": "moving racks", "by": "carol"})
        snap = tab.wait_for(lambda s: s["admin"].get("datacenter/DC3") == "drain", "DC3 draining")
        assert "carol" in snap["text"] and "moving racks" in snap["text"]
        tab.evaluate(
            'document.querySelector(\'button[data-kind="datacenter"][data-action="enable"][data-target="DC3"]\').click()'
        )
        tab.wait_for(lambda s: s["vs"]["vs3"] == "available", "DC3 enabled again")
    finally:
        tab.close()
        site.api("n1", "/api/v1/admin/datacenter/DC3/enable", "POST")


#: what a page of another site tries: the writes a browser sends without asking the target
#: first (a no-cors fetch of text/plain, a form), and one it would have to ask about first
CROSS_SITE_JS = """(async (url) => {
  const out = {};
  try {
    const plain = { "Content-Type": "text/plain" };
    const r = await fetch(url, { method: "POST", mode: "no-cors", headers: plain, body: "{}" });
    out.simple = r.type;
  } catch (e) { out.simple = `failed: ${e}`; }
  try {
    const r = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
    out.json = r.status;
  } catch (e) { out.json = "blocked"; }
  return out;
})(%s)"""


def test_a_page_of_another_site_cannot_write(site: Site) -> None:
    """A page on another origin (a backend's, on loopback) sends the node a no-cors POST and
    a form POST to disable vs2: both arrive and are refused (counted in /metrics), vs2 stays
    enabled on every node; a JSON POST is not even sent (its preflight is refused)."""
    n1 = site.group.members["n1"]
    transit = site.backends["transit"]
    target = f"{site.url}api/v1/virtual-servers/vs2/disable"
    before = refused(site, "origin")
    tab = site.browser.open(f"http://{transit.address}:{transit.port}/")
    try:
        deadline = time.monotonic() + PAGE_TIMEOUT
        while tab.evaluate("document.readyState") != "complete" and time.monotonic() < deadline:
            time.sleep(POLL)
        got = tab.evaluate(CROSS_SITE_JS % json.dumps(target))
        assert got == {"simple": "opaque", "json": "blocked"}, got
        tab.evaluate(
            "(() => { const f = document.createElement('form'); f.method = 'POST'; f.enctype = 'text/plain';"
            f" f.action = {json.dumps(target)}; const i = document.createElement('input'); i.name = '{{}}';"
            " f.append(i); document.body.append(f); f.submit(); return true; })()"
        )
        deadline = time.monotonic() + PAGE_TIMEOUT
        while refused(site, "origin") < before + 2 and time.monotonic() < deadline:
            time.sleep(POLL)
        assert refused(site, "origin") >= before + 2, "the no-cors and the form POST reached n1 and were refused"
    finally:
        tab.close()
    for node in ("n1", "n2", "n3"):
        assert site.api(node, "/api/v1/health")["virtual_servers"]["vs2"]["admin"] == "enabled", node
    assert n1.running


def test_a_rebound_name_reads_nothing(site: Site) -> None:
    """A page at a name that resolves to n1 (what DNS rebinding makes of an attacker's name)
    is not served, and its requests to the node get 421, not the node's state."""
    tab = site.browser.open(f"http://{REBOUND}:8053/")
    try:
        deadline = time.monotonic() + PAGE_TIMEOUT
        while tab.evaluate("document.readyState") != "complete" and time.monotonic() < deadline:
            time.sleep(POLL)
        assert "does not name this node" in tab.evaluate("document.body.innerText")
        got = tab.evaluate("fetch('/api/v1/status').then(async (r) => [r.status, await r.text()])")
        assert got[0] == 421 and '"node"' not in got[1], got
    finally:
        tab.close()
    assert refused(site, "host") >= 2


def refused(site: Site, reason: str) -> float:
    """n1's count of API requests refused for *reason* (gtm_api_refused_total)."""
    text = site.api("n1", "/metrics")
    prefix = f'gtm_api_refused_total{{reason="{reason}"}} '
    return next((float(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix)), 0.0)
