"""The HTTPS API of a real node (``twistd gtm`` with ``api: {tls: true, client_certificates:
required}``), asked by the real `gtmcluster` command and by Python's own TLS client.

The node's API listens on a 127.x address of its own, with a token needed for reads too (as
beyond loopback). Certificates are made with `gtmcluster certs` as an operator would: the
group CA, the member's certificate, an operator's client certificate (``--client``); and a
second, foreign CA with its own member and client certificates.

- `gtmcluster status`, `ldns` and `explain` work with the config's token and a client
  certificate (``--client-cert`` or ``GTM_API_CLIENT_CERT``), over TLS 1.2 or newer, with
  the node's certificate checked against the group CA and the member's name;
- without a client certificate, with one from the foreign CA, with the foreign CA as the
  config's CA, or with the node reached under another member's name, the command exits 1
  with one line saying what is wrong and what to do; so does a plain HTTP client;
- writes work over HTTPS (token, JSON, the node's own https origin);
- `twistd` refuses to start with api.tls and no certificate, and `gtmcluster check` refuses
  a token over plain HTTP beyond loopback, naming file, key path and problem.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gtmcluster.cli import nodeapi
from gtmcluster.config.load import load
from tests.support import apiclient, configs, dnsclient, tlswire
from tests.support.nodeproc import RunningNode, loopback_address, running_node, twistd
from tests.support.trio import running_group

pytestmark = [pytest.mark.process]

GTMCLUSTER = Path(sys.executable).parent / "gtmcluster"
TOKEN = "an-https-token-for-tests-0123456789"
ENV = ("GTM_API_TOKEN", "GTM_API_CLIENT_CERT", "GTM_API_CLIENT_KEY")


def gtmcluster(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ENV}
    return subprocess.run(
        [str(GTMCLUSTER), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**environ, **(env or {})},
        cwd=cwd,
    )


def https_config(address: str, directory: Path) -> dict[str, Any]:
    """The config of an HTTPS node written in *directory* (its token in a file there: config
    sync, on, never publishes an inline secret)."""
    raw = configs.base(address, 5353)
    raw["pools"]["p"]["load_balancing"] = {"preferred": "global_availability"}
    directory.mkdir(parents=True, exist_ok=True)
    configs.write_secret(directory / "api-token", TOKEN + "\n")
    raw["api"] = {"token_file": "api-token", "token_for_reads": True, "tls": True, "client_certificates": "required"}
    return raw


@dataclass
class Site:
    node: RunningNode
    directory: Path
    config: Path

    @property
    def alice(self) -> list[str]:
        return ["--client-cert", str(self.directory / "certs" / "clients" / "alice.pem")]

    def variant(self, name: str, change: Any) -> Path:
        """The config, changed by *change* (a function of the raw dict), written as *name*."""
        raw = yaml.safe_load(self.config.read_text())
        change(raw)
        path = self.directory / name
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        return path

    def context(self, client: str | None = "alice", ca: str = "certs") -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.directory / ca / "ca.pem"))
        if client is not None:
            clients = self.directory / ca / "clients"
            context.load_cert_chain(str(clients / f"{client}.pem"), str(clients / f"{client}.key"))
        return context

    def request(self, method: str, path: str, headers: dict[str, str], body: bytes | None = None) -> tuple[int, Any]:
        """One request over HTTPS as alice, checked for the name n1 (SNI n1)."""
        return apiclient.call(
            (self.node.address, 8053), path, method, None, headers, body, tls=self.context(), name="n1"
        )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    directory = tmp_path_factory.mktemp("api-https")
    for args in (
        ("init",),
        ("issue", "n1"),
        ("issue", "--client", "alice"),
    ):
        made = gtmcluster("certs", *args, "--dir", "certs", cwd=directory)
        assert made.returncode == 0, made.stderr
    for args in (("init",), ("issue", "n1"), ("issue", "--client", "mallory")):
        assert gtmcluster("certs", *args, "--dir", "foreign", cwd=directory).returncode == 0
    address = loopback_address()
    path = configs.write(directory, https_config(address, directory))
    with running_node(path, "n1", address, 5353, directory) as running:
        yield Site(running, directory, path)


def test_the_cli_talks_https_with_a_client_certificate(site: Site) -> None:
    """status, ldns and explain exit 0 with the config's token and alice's certificate,
    given as an option or in the environment; the client key was made 0600."""
    key = site.directory / "certs" / "clients" / "alice.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    explain = ["explain", "gslb.example.test", "--ldns", "127.0.1.9"]
    for command in (["status"], ["ldns"], explain):
        ran = gtmcluster(*command, "--config", str(site.config), *site.alice)
        assert ran.returncode == 0, (command, ran.stdout, ran.stderr)
    ran = gtmcluster("status", "--config", str(site.config), "--json", env={"GTM_API_CLIENT_CERT": site.alice[1]})
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["summary"]["answered"] == ["n1"]
    ran = gtmcluster(*explain, "--config", str(site.config), *site.alice)
    assert "=> 10.0.1.1 from pool p (vs1)" in ran.stdout, ran.stdout


@pytest.mark.parametrize(
    ("case", "said"),
    [
        (
            "no client certificate",
            "n1's API requires a client certificate from the group CA: give one with --client-cert",
        ),
        ("a foreign client certificate", "n1 refused --client-cert"),
        ("the foreign CA", "showed a certificate that is not from the group CA"),
        ("another member's name", "showed a certificate that does not name n9"),
        ("plain HTTP", "closed the connection without an HTTP answer: does it serve HTTPS"),
    ],
)
def test_the_cli_refuses_what_it_cannot_trust(site: Site, case: str, said: str) -> None:
    """Each mistake: exit 1, one line that says what is wrong, no traceback."""
    config, given = site.config, site.alice
    if case == "no client certificate":
        # as on a management host: the group CA, none of the members' own files
        given = []
        elsewhere = {"ca": "certs/ca.pem", "cert": "elsewhere/{node}.pem", "key": "elsewhere/{node}.key"}
        config = site.variant("remote.yaml", lambda raw: raw["sync_group"].update(tls=elsewhere))
    elif case == "a foreign client certificate":
        given = ["--client-cert", str(site.directory / "foreign" / "clients" / "mallory.pem")]
    elif case == "the foreign CA":
        config = site.variant("foreign.yaml", lambda raw: raw["sync_group"].update(tls={"ca": "foreign/ca.pem"}))
    elif case == "another member's name":
        config = site.variant("renamed.yaml", lambda raw: raw["sync_group"]["members"][0].update(name="n9"))
    else:

        def plain(raw: dict[str, Any]) -> None:
            del raw["api"]["tls"], raw["api"]["client_certificates"]

        config = site.variant("plain.yaml", plain)
    ran = gtmcluster("status", "--config", str(config), *given)
    assert ran.returncode == 1, (case, ran.stdout)
    assert said in ran.stdout + ran.stderr, (case, ran.stdout, ran.stderr)
    assert "Traceback" not in ran.stderr
    if case == "no client certificate":
        assert "gtmcluster certs issue --client NAME" in ran.stdout


def test_on_the_nodes_host_the_cli_shows_the_nodes_own_certificate(site: Site) -> None:
    """Without a client certificate given, where the member's own certificate and key can
    be read (its host, as its user or root), the CLI shows them, as it finds the token."""
    ran = gtmcluster("status", "--config", str(site.config))
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_the_node_serves_tls_1_2_or_newer_with_its_member_certificate(site: Site) -> None:
    """Python's TLS client, trusting the group CA only, checks the certificate for n1; TLS
    1.1 is refused; a client that does not trust the group CA refuses the node; a client
    without a certificate gets no answer."""
    sock = socket.create_connection((site.node.address, 8053), timeout=5)
    with site.context().wrap_socket(sock, server_hostname="n1") as tls:
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
        peer = tls.getpeercert()
        assert peer is not None and ("DNS", "n1") in peer["subjectAltName"]
    reply = tlswire.first_reply((site.node.address, 8053), tlswire.client_hello(tlswire.TLS1_1), loopback_address())
    assert (reply.record_type, reply.alert) == (tlswire.ALERT, tlswire.PROTOCOL_VERSION_ALERT), reply
    with pytest.raises(ssl.SSLCertVerificationError), socket.create_connection((site.node.address, 8053)) as sock:
        site.context(None, ca="foreign").wrap_socket(sock, server_hostname="n1")
    # without a certificate: the handshake (TLS 1.2) or the first read (TLS 1.3) fails
    with socket.create_connection((site.node.address, 8053)) as sock, pytest.raises((ssl.SSLError, ConnectionError)):
        tls = site.context(None).wrap_socket(sock, server_hostname="n1")
        tls.sendall(b"GET /api/v1/status HTTP/1.1\r\nHost: n1\r\n\r\n")
        tls.recv(100)


def test_writes_work_over_https(site: Site) -> None:
    """A disable and an enable with the token, as JSON, from the node's own https origin,
    change the answers; a cross-origin write is refused."""
    server = (site.node.address, 5353)
    answer = lambda: dnsclient.addresses(dnsclient.parse(dnsclient.udp(dnsclient.query("gslb.example.test"), server)))  # noqa: E731
    headers = {
        "Host": "n1:8053",
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": "application/json",
        "Origin": "https://n1:8053",
    }
    assert answer() == ["10.0.1.1"]
    code, body = site.request("POST", "/api/v1/virtual-servers/vs1/disable", headers, b"{}")
    assert code == 200, body
    assert answer() == ["10.0.2.1"]
    code, body = site.request(
        "POST", "/api/v1/virtual-servers/vs1/enable", {**headers, "Origin": "http://n1:8053"}, b"{}"
    )
    assert code == 403, body
    code, body = site.request("POST", "/api/v1/virtual-servers/vs1/enable", headers, b"{}")
    assert code == 200, body
    assert answer() == ["10.0.1.1"]


def test_the_clis_post_writes_over_https_and_names_a_wrong_token(site: Site) -> None:
    """`nodeapi.post` (what admin commands use): with the config's token and alice's
    certificate a disable and an enable work; a wrong GTM_API_TOKEN is named as such."""
    config = load(site.config)
    n1 = config.member("n1")
    tokens = nodeapi.Tokens(config, environ={}, client_cert=site.alice[1])
    assert nodeapi.post(n1, "/api/v1/virtual-servers/vs1/disable", {}, tokens)["admin"] == "disabled"
    assert nodeapi.post(n1, "/api/v1/virtual-servers/vs1/enable", {}, tokens)["admin"] == "enabled"
    wrong = nodeapi.Tokens(config, environ={"GTM_API_TOKEN": "not-the-token-0123456789"}, client_cert=site.alice[1])
    with pytest.raises(nodeapi.CliError, match="n1 refused the bearer token from GTM_API_TOKEN"):
        nodeapi.post(n1, "/api/v1/virtual-servers/vs1/disable", {}, wrong)


def test_a_refused_request_over_https_is_answered_before_its_body(site: Site) -> None:
    """A POST announcing 300 MB without the token is answered 401 as soon as its headers
    are in, over TLS, and the node closes the connection (no TCP half close under TLS)."""
    sock = socket.create_connection((site.node.address, 8053), timeout=5)
    with site.context().wrap_socket(sock, server_hostname="n1") as tls:
        tls.sendall(
            b"POST /api/v1/reload HTTP/1.1\r\nHost: n1:8053\r\nContent-Type: application/json\r\n"
            b"Content-Length: 300000000\r\n\r\n"
        )
        got = b""
        while True:
            try:
                chunk = tls.recv(65536)
            except ssl.SSLEOFError:  # closed without close_notify: closed all the same
                break
            if not chunk:
                break
            got += chunk
    assert got.startswith(b"HTTP/1.1 401") and b"bearer token" in got, got[:300]


def test_twistd_wants_the_certificate_for_https(tmp_path: Path) -> None:
    """A group of one needs no certificate, unless its API serves HTTPS: then a missing one
    stops the start with the reason and the command that makes it."""
    address = loopback_address()
    path = configs.write(tmp_path, https_config(address, tmp_path))
    ran = subprocess.run(
        [*twistd(), "--nodaemon", f"--pidfile={tmp_path / 'n1.pid'}", "gtm", f"--config={path}", "--node=n1"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    said = ran.stdout + ran.stderr
    assert ran.returncode != 0 and "the API's TLS (api.tls):" in said and "gtmcluster certs init" in said, said
    assert "Traceback" not in said


def test_check_refuses_a_token_over_plain_http_beyond_loopback(tmp_path: Path) -> None:
    raw = configs.base("127.0.0.1", 5353)
    raw["sync_group"]["members"][0]["api"] = "192.0.2.10:8053"
    configs.write_secret(tmp_path / "api-token", TOKEN + "\n")
    raw["api"] = {"token_file": "api-token"}
    path = configs.write(tmp_path, raw)
    ran = gtmcluster("check", "--config", str(path))
    assert ran.returncode == 1
    assert (
        f"{path}: sync_group.members[0].api: 192.0.2.10:8053 is not loopback and api.tls is off"
        in ran.stdout + ran.stderr
    )
    raw["api"]["insecure_http"] = True
    assert gtmcluster("check", "--config", str(configs.write(tmp_path, raw))).returncode == 0


def test_a_reload_takes_a_renewed_certificate_and_drops_the_client_requirement(site: Site) -> None:
    """(Last: it changes the node.) After `certs issue n1 --force` and a config that no
    longer requires client certificates, a reload over HTTPS makes new connections show the
    new certificate, and the CLI needs no client certificate any more."""

    def serial() -> str:
        sock = socket.create_connection((site.node.address, 8053), timeout=5)
        with site.context().wrap_socket(sock, server_hostname="n1") as tls:
            peer = tls.getpeercert()
            assert peer is not None
            return str(peer["serialNumber"])

    before = serial()
    assert gtmcluster("certs", "issue", "n1", "--dir", "certs", "--force", cwd=site.directory).returncode == 0
    raw = yaml.safe_load(site.config.read_text())
    del raw["api"]["client_certificates"]
    site.config.write_text(yaml.safe_dump(raw, sort_keys=False))
    headers = {"Host": "n1:8053", "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    code, body = site.request("POST", "/api/v1/reload", headers, b"{}")
    assert code == 200, body
    assert serial() != before
    ran = gtmcluster("status", "--config", str(site.config), "--json")
    assert ran.returncode == 0, ran.stdout
    api_tls = json.loads(ran.stdout)["nodes"]["n1"]["api_tls"]
    assert api_tls["client_certificates"] == "none" and int(api_tls["serial"], 16) == int(serial(), 16)
    assert "HTTPS API: new connections use certificate serial" in site.node.log_text()


def test_a_group_serves_https_with_the_certificates_its_peers_use(tmp_path: Path) -> None:
    """Two members with api.tls: they connect as peers and agree, and `gtmcluster status`
    asks both over HTTPS (each checked for its own name); with one stopped it says so."""

    def https(config: dict[str, Any]) -> None:
        config["api"] = {"token": TOKEN, "tls": True}

    with running_group(tmp_path, 2, customize=https) as group:
        group.wait_converged()
        ran = gtmcluster("status", "--config", str(group.config_path), "--json")
        assert ran.returncode == 0, ran.stdout + ran.stderr
        summary = json.loads(ran.stdout)["summary"]
        assert summary["answered"] == ["n1", "n2"] and summary["state_digests_agree"], summary
        group.kill("n2", signal.SIGTERM)
        ran = gtmcluster("status", "--config", str(group.config_path))
        assert ran.returncode == 1 and "UNREACHABLE n2: cannot reach n2's API at https://" in ran.stdout, ran.stdout
