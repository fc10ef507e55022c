"""The dashboard over HTTPS (``api: {tls: true}``), in headless Chromium, against a real node.

The node's certificate is its sync group certificate: it names the member (``n1``) and is
signed by the group CA, which no browser trusts by itself. Chromium reaches the node by its
member name (``--host-resolver-rules``: MAP n1 to the node's address) and is told to accept
exactly that certificate's key (``--ignore-certificate-errors-spki-list``, a pin, not a
blanket "ignore certificate errors"); a Chromium without the pin refuses the page, and what
Chromium saw of the TLS connection (protocol, subject, issuer) is checked separately.

- opened with the token (``#token=``), the page polls the API over HTTPS and shows the node;
  every request it made went to ``https://n1:8053``; its Certificates tile gives the days
  left of the node's, the CA's and the API's certificates;
- its buttons write over HTTPS (JSON POSTs from the page's own https origin): disabling a
  server takes it out of the DNS answers, enabling it puts it back.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from gtmcluster.sync import certs
from tests.conftest import require_tool
from tests.process.test_dashboard import Chromium
from tests.support import configs, dnsclient
from tests.support.nodeproc import loopback_address, running_node

pytestmark = pytest.mark.process

TOKEN = "dashboard-https-token-0123456789"


@dataclass
class HttpsSite:
    browser: Chromium
    address: str
    workdir: Path
    pin: str
    config: Path

    @property
    def url(self) -> str:
        return "https://n1:8053/"

    def answer(self) -> list[str]:
        query = dnsclient.query("gslb.example.test")
        return dnsclient.addresses(dnsclient.parse(dnsclient.udp(query, (self.address, 5353))))


def spki_pin(cert_path: Path) -> str:
    """What --ignore-certificate-errors-spki-list takes: base64 of the SHA-256 of the key."""
    cert = certs.load_certificate(cert_path)
    der = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpsSite]:
    require_tool("chromium", "chromium")
    workdir: Path = tmp_path_factory.mktemp("dashboard-https")
    certs.init_ca(workdir / "certs")
    certs.issue(workdir / "certs", "n1")
    address = loopback_address()
    raw = configs.base(address, 5353)
    raw["pools"]["p"]["load_balancing"] = {"preferred": "global_availability"}
    raw["api"] = {"token": TOKEN, "token_for_reads": True, "tls": True}
    path = configs.write(workdir, raw)
    pin = spki_pin(workdir / "certs" / "n1.pem")
    with running_node(path, "n1", address, 5353, workdir):
        browser = Chromium(workdir, f"MAP n1 {address}", (f"--ignore-certificate-errors-spki-list={pin}",))
        try:
            yield HttpsSite(browser, address, workdir, pin, path)
        finally:
            browser.close()


def responses(site: HttpsSite, session: str) -> list[dict[str, Any]]:
    """The responses Chromium received in a tab so far (Network.responseReceived)."""
    return [
        e["params"]["response"]
        for e in site.browser.events
        if e.get("sessionId") == session and e["method"] == "Network.responseReceived"
    ]


def test_the_page_polls_over_https(site: HttpsSite) -> None:
    """`gtmcluster dashboard-url` gives the page's https address under the member's name;
    the page and every API request it makes go over TLS 1.2 or newer to n1, whose
    certificate (subject n1, issuer the group CA) Chromium saw; the page shows the node."""
    ran = subprocess.run(
        [str(Path(sys.executable).parent / "gtmcluster"), "dashboard-url", "--config", str(site.config)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert ran.returncode == 0 and ran.stdout.strip() == site.url + f"#token={TOKEN}", ran
    assert f"must reach it by that name ({site.address} in DNS or /etc/hosts)" in ran.stderr
    tab = site.browser.open(ran.stdout.strip())
    try:
        snap = tab.wait_for(lambda s: s["polls"] >= 1, "a poll over HTTPS")
        assert snap["node"] == "n1" and not snap["error"] and not snap["banner"]
        assert snap["vs"]["vs1"] == "available"
        # the certificates' days left, from the status's (the certificate HTTPS serves is n1's own)
        tile = tab.evaluate(
            'Array.from(document.querySelectorAll("#tiles .tile"))'
            '.filter((t) => t.querySelector(".label").textContent === "Certificates")'
            '.map((t) => [t.className, t.querySelector(".value").textContent, t.querySelector(".detail").textContent])'
        )
        end = certs.load_certificate(site.workdir / "certs" / "n1.pem").not_valid_after_utc.strftime("%Y-%m-%d")
        ca_end = certs.load_certificate(site.workdir / "certs" / "ca.pem").not_valid_after_utc.strftime("%Y-%m-%d")
        days, ca_days = certs.NODE_DAYS - 1, certs.CA_DAYS - 1
        detail = f"node {days} d ({end}) · CA {ca_days} d ({ca_end}) · API {days} d ({end})"
        assert tile == [["tile ok", f"{days} days left", detail]], tile
        requested = tab.requested()
        assert requested and all(u.startswith("https://n1:8053/") for u in requested), requested
        assert "https://n1:8053/api/v1/status" in requested
        page = next(r for r in responses(site, tab.session) if r["url"].startswith(site.url))
        details = page["securityDetails"]
        assert details["protocol"] in ("TLS 1.2", "TLS 1.3"), details
        assert details["subjectName"] == "n1" and details["issuer"] == certs.CA_NAME, details
        assert details["sanList"] == ["n1"], details
    finally:
        tab.close()


def test_the_buttons_write_over_https(site: HttpsSite) -> None:
    """Disable vs1 with its button: the page shows it, the DNS answer moves to vs2; enable
    it again: back to vs1."""
    assert site.answer() == ["10.0.1.1"]
    tab = site.browser.open(site.url + f"#token={TOKEN}")
    try:
        tab.wait_for(lambda s: s["polls"] >= 1 and s["vs"].get("vs1") == "available", "vs1 available")
        tab.evaluate('document.querySelector(\'button[data-action="disable"][data-target="vs1"]\').click()')
        tab.wait_for(lambda s: s["vs"]["vs1"] == "unavailable" and s["acted"] == "disable vs1: ok", "vs1 disabled")
        assert site.answer() == ["10.0.2.1"]
        tab.evaluate('document.querySelector(\'button[data-action="enable"][data-target="vs1"]\').click()')
        tab.wait_for(lambda s: s["vs"]["vs1"] == "available" and s["acted"] == "enable vs1: ok", "vs1 enabled")
        assert site.answer() == ["10.0.1.1"]
    finally:
        tab.close()


def test_without_the_pin_chromium_refuses_the_node(site: HttpsSite) -> None:
    """The pin is what makes Chromium take the group's certificate: without it the page is
    not loaded (the certificate's issuer is unknown to it)."""
    other = site.workdir / "unpinned"
    other.mkdir(exist_ok=True)
    browser = Chromium(other, f"MAP n1 {site.address}")
    try:
        target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        result = browser.call("Page.navigate", {"url": site.url}, session)
        assert result.get("errorText") == "net::ERR_CERT_AUTHORITY_INVALID", result
    finally:
        browser.close()
