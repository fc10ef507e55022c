"""Headless Chromium in a network namespace, loading a test page that reports what it saw.

A test writes a page (`write_page`) into the folder a `webobject` server of the client
namespace serves (``tests/tools/webobject.py --root DIR --collect FILE``). The page carries
the reporter script (`REPORTER_JS`): once every resource the test expects has its Resource
Timing entry (or the page's deadline has passed), it POSTs one report to ``/collect`` of its
own origin: the page's run id, every ``PerformanceResourceTiming`` entry (times in ms,
relative to the page's start) and the errors the page raised. The server appends each report
as a line of *FILE*; `read_reports` reads them back by run id.

`load_page` starts one Chromium per page (``ip netns exec NS chromium --headless=new``: the
namespace's ``/etc/netns/NS/resolv.conf`` is its ``/etc/resolv.conf``, so the browser asks
that resolver; a fresh profile, so no HTTP, DNS or connection state survives from a
page before), waits for the page's report, and stops the browser.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.poll import until

#: the page's own deadline for the resources it waits for, and the test's beyond it
PAGE_DEADLINE_MS = 15_000
STARTUP_SLACK = 20.0

#: posts one report to /collect when every expected resource has timing (or at the deadline)
REPORTER_JS = """(() => {
  const cfg = window.HARNESS;
  const errors = [];
  window.addEventListener("error", (e) => errors.push(String(e.message || e)));
  window.addEventListener("unhandledrejection", (e) => errors.push("unhandled: " + String(e.reason)));
  const started = performance.now();
  const fields = ["name", "initiatorType", "nextHopProtocol", "startTime", "duration", "fetchStart",
    "domainLookupStart", "domainLookupEnd", "connectStart", "connectEnd", "secureConnectionStart",
    "requestStart", "responseStart", "responseEnd", "transferSize", "encodedBodySize", "responseStatus"];
  const entries = () => performance.getEntriesByType("resource").map(
    (r) => Object.fromEntries(fields.map((f) => [f, r[f]])));
  const seen = (list) => cfg.expect.every((part) => list.some((e) => e.name.includes(part) && e.responseEnd > 0));
  const report = (complete, list) => fetch("/collect", {
    method: "POST", headers: {"Content-Type": "application/json"}, keepalive: true,
    body: JSON.stringify({run: cfg.run, href: location.href, complete, entries: list, errors,
      page: window.HARNESS_PAGE || null}),
  });
  const tick = () => {
    const list = entries();
    const pageDone = !cfg.waitPage || window.HARNESS_PAGE !== undefined;
    if ((seen(list) && pageDone) || performance.now() - started > cfg.deadlineMs) {
      report(seen(list) && pageDone, list);
      return;
    }
    setTimeout(tick, 50);
  };
  setTimeout(tick, 50);
})();
"""


@dataclass
class Report:
    """What one page posted: its Resource Timing entries (ms) and errors."""

    run: str
    complete: bool
    entries: list[dict[str, Any]]
    errors: list[str]
    page: Any = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    def entry(self, part: str) -> dict[str, Any]:
        """The first entry whose URL contains *part* (fails naming the URLs there are)."""
        for e in self.entries:
            if part in e["name"]:
                return e
        raise AssertionError(f"no resource timing entry for {part!r}; the page has {[e['name'] for e in self.entries]}")

    def entries_for(self, part: str) -> list[dict[str, Any]]:
        """Every entry whose URL contains *part*, in the order the page started them."""
        return [e for e in self.entries if part in e["name"]]

    def request_ms(self, part: str) -> float:
        """requestStart -> responseEnd of that entry: one round trip plus the server's time
        (``Timing-Allow-Origin`` must allow the page's origin, or it reads 0)."""
        e = self.entry(part)
        return float(e["responseEnd"] - e["requestStart"])

    def best_request_ms(self, part: str) -> float:
        """The least `request_ms` of every entry whose URL contains *part* (a few fetches of one
        object: one round trip each, the noise of a busy machine only ever adds)."""
        got = [float(e["responseEnd"] - e["requestStart"]) for e in self.entries_for(part)]
        if not got:
            raise AssertionError(f"no resource timing entry for {part!r}")
        return min(got)

    def connect_ms(self, part: str) -> float:
        """connectStart -> connectEnd: the TCP handshake, one round trip (0 on a reused
        connection)."""
        e = self.entry(part)
        return float(e["connectEnd"] - e["connectStart"])


def new_run() -> str:
    """A run id for one page load (the report's key)."""
    return "run" + secrets.token_hex(6)


def write_page(
    root: Path,
    run: str,
    body: str,
    expect: Sequence[str] = (),
    wait_page: bool = False,
    deadline_ms: int = PAGE_DEADLINE_MS,
) -> str:
    """Write ``<root>/<run>.html``: *body* (any HTML: scripts of the test, the snippet tag) and
    the reporter, which waits for a Resource Timing entry of every URL part in *expect* (and,
    with *wait_page*, for the page's own scripts to set ``window.HARNESS_PAGE``, which the
    report carries). Returns the file's name."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "harness-report.js").write_text(REPORTER_JS)
    harness = {"run": run, "expect": list(expect), "waitPage": wait_page, "deadlineMs": deadline_ms}
    html = (
        "<!doctype html>\n<html><head><meta charset='utf-8'><title>" + run + "</title>\n"
        f"<script>window.HARNESS = {json.dumps(harness)};</script>\n"
        "<script src='/harness-report.js'></script>\n</head><body>\n" + body + "\n</body></html>\n"
    )
    name = f"{run}.html"
    (root / name).write_text(html)
    return name


def read_reports(collect: Path, run: str | None = None) -> list[Report]:
    """The reports posted so far (of *run* only, when given), oldest first."""
    if not collect.exists():
        return []
    reports = []
    for line in collect.read_text().splitlines():
        try:
            raw = json.loads(line)
        except ValueError:
            continue
        if not isinstance(raw, dict) or (run is not None and raw.get("run") != run):
            continue
        reports.append(
            Report(
                str(raw.get("run")),
                bool(raw.get("complete")),
                list(raw.get("entries") or []),
                [str(e) for e in raw.get("errors") or []],
                raw.get("page"),
                raw,
            )
        )
    return reports


def chromium_argv(profile: Path, url: str, flags: Sequence[str] = ()) -> list[str]:
    """Headless Chromium loading *url* with a fresh *profile*: no sandbox (root), no GPU, no
    QUIC, no background traffic, no DNS-over-HTTPS (the system's resolver only)."""
    return [
        "chromium",
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--disable-features=DnsOverHttps,HttpsUpgrades",
        f"--user-data-dir={profile}",
        *flags,
        url,
    ]


@dataclass
class Browser:
    """One running Chromium (a page load); `close` stops it (its process group)."""

    proc: subprocess.Popen[bytes]
    log: Path

    def log_tail(self, lines: int = 15) -> str:
        text = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join(line for line in text if "dbus" not in line)[-4000:] if text else ""

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def open_browser(namespace: str, url: str, workdir: Path, run: str, flags: Sequence[str] = ()) -> Browser:
    """Start Chromium in *namespace* on *url* (profile and log in *workdir*, named by *run*)."""
    profile = workdir / f"chromium-{run}"
    log = workdir / f"chromium-{run}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", namespace, *chromium_argv(profile, url, flags)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Browser(proc, log)


def load_page(
    namespace: str,
    base_url: str,
    root: Path,
    collect: Path,
    workdir: Path,
    body: str,
    expect: Sequence[str] = (),
    wait_page: bool = False,
    deadline_ms: int = PAGE_DEADLINE_MS,
    flags: Sequence[str] = (),
) -> Report:
    """Write a page (see `write_page`), load it from *base_url* (the origin of the server
    serving *root*) in a Chromium of its own in *namespace*, and return its report once
    posted; the browser is stopped either way. Fails when no report comes within the page's
    deadline plus `STARTUP_SLACK`, showing the browser's log."""
    run = new_run()
    name = write_page(root, run, body, expect, wait_page, deadline_ms)
    browser = open_browser(namespace, f"{base_url.rstrip('/')}/{name}", workdir, run, flags)
    start = time.monotonic()
    try:

        def posted() -> Report | None:
            if browser.proc.poll() is not None:
                raise AssertionError(f"chromium exited with {browser.proc.returncode}:\n{browser.log_tail()}")
            got = read_reports(collect, run)
            return got[0] if got else None

        report = until(
            posted,
            deadline_ms / 1000 + STARTUP_SLACK,
            f"report from page {name}",
            step=0.1,
            details=browser.log_tail,
        )
    finally:
        browser.close()
    assert report is not None  # until() returns a truthy value
    report.raw["seconds"] = time.monotonic() - start
    return report
