"""The HTTPS API's parts without a process: the config keys (``api.tls``,
``api.client_certificates``, ``api.insecure_http``) and the refusal of a token over plain
HTTP beyond loopback; operators' client certificates (`certs.issue_client`), which the API
takes and no peer does; `ApiTLS` over in-memory TLS connections (real OpenSSL)."""

from __future__ import annotations

import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from twisted.internet import ssl

from gtmcluster.api import guard
from gtmcluster.api.tls import ApiTLS
from gtmcluster.config.changes import restart_needed
from gtmcluster.config.load import load
from gtmcluster.config.model import TLSFiles
from gtmcluster.config.problems import ConfigError
from gtmcluster.sync import certs
from gtmcluster.sync.tls import IdentityError, load_credentials, peer_identity, server_options
from tests.support import configs
from tests.unit.test_certs import TWISTED_PYOPENSSL_DEPRECATION, tls_connection

TOKEN = "a-token-of-sixteen-or-more"


# -- the config ---------------------------------------------------------------------------------


def config_with(tmp_path: Path, api: dict[str, Any] | None, address: str = "192.0.2.10") -> Path:
    raw = configs.base("127.0.0.1")
    raw["sync_group"]["members"][0]["api"] = f"{address}:8053"
    if api is not None:
        raw["api"] = api
    return configs.write(tmp_path, raw)


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(path)
    return [str(p) for p in caught.value.problems]


@pytest.mark.parametrize(
    ("api", "key", "fragment"),
    [
        pytest.param(
            {"token": TOKEN},
            "sync_group.members[0].api",
            "192.0.2.10:8053 is not loopback and api.tls is off: the bearer token would cross the network in "
            "clear text; set api.tls: true",
            id="token-over-plain-http",
        ),
        pytest.param(None, "sync_group.members[0].api", "is not loopback: set api.token", id="no-token"),
        pytest.param(
            {"token": TOKEN, "client_certificates": "required", "insecure_http": True},
            "api.client_certificates",
            "client certificates are asked for over TLS only: set api.tls: true",
            id="client-certificates-without-tls",
        ),
        pytest.param(
            {"token": TOKEN, "tls": True, "insecure_http": True},
            "api.insecure_http",
            "api.tls is on, so nothing is served over plain HTTP",
            id="tls-and-insecure",
        ),
        pytest.param(
            {"token": TOKEN, "tls": True, "client_certificates": "yes"},
            "api.client_certificates",
            "'yes' is not one of: none, required",
            id="client-certificates-value",
        ),
        pytest.param({"token": TOKEN, "tls": "on"}, "api.tls", "must be true or false", id="tls-not-a-boolean"),
    ],
)
def test_config_refusals_name_file_key_and_problem(
    tmp_path: Path, api: dict[str, Any] | None, key: str, fragment: str
) -> None:
    """Each mistake is one `FILE: key.path: problem` line; above all a token over plain
    HTTP on an address beyond loopback, unless insecure_http says the operator knows."""
    path = config_with(tmp_path, api)
    found = problems(path)
    assert len(found) == 1, found
    assert found[0].startswith(f"{path}: {key}: ") and fragment in found[0], found


@pytest.mark.parametrize(
    "api",
    [
        {"token": TOKEN, "tls": True},
        {"token": TOKEN, "tls": True, "client_certificates": "required"},
        {"token": TOKEN, "insecure_http": True},
    ],
)
def test_https_or_a_knowing_insecure_http_load(tmp_path: Path, api: dict[str, Any]) -> None:
    config = load(config_with(tmp_path, api))
    assert config.api.tls == api.get("tls", False)
    assert config.api.client_certificates_required == (api.get("client_certificates") == "required")
    assert config.api.insecure_http == api.get("insecure_http", False)


def test_plain_http_on_loopback_needs_nothing(tmp_path: Path) -> None:
    config = load(config_with(tmp_path, {"token": TOKEN}, address="127.0.0.5"))
    assert not config.api.tls and not config.api.insecure_http


def test_switching_tls_needs_a_restart_and_client_certificates_do_not(tmp_path: Path) -> None:
    plain = load(config_with(tmp_path / "a", {"token": TOKEN}, address="127.0.0.5"))
    https = load(config_with(tmp_path / "b", {"token": TOKEN, "tls": True}, address="127.0.0.5"))
    required = load(
        # the same folder as `https`: its log_dir (relative) must not change (that needs a restart too)
        config_with(tmp_path / "b", {"token": TOKEN, "tls": True, "client_certificates": "required"}, "127.0.0.5")
    )
    assert any("api.tls changed" in p for p in restart_needed(plain, https, "n1"))
    assert restart_needed(https, required, "n1") == []


def test_the_members_name_is_a_host_over_https_only(tmp_path: Path) -> None:
    """Over HTTPS a client that reached the node by its member name checked the certificate
    that proves it: Host n1 is taken; over plain HTTP it is not (a rebound name could say it)."""
    https = load(config_with(tmp_path / "a", {"token": TOKEN, "tls": True}, address="127.0.0.5"))
    plain = load(config_with(tmp_path / "b", {"token": TOKEN}, address="127.0.0.5"))
    request = guard.Incoming("GET", "/api/v1/status", ["n1:8053"], "127.0.0.5", 0, secure=True)
    for config, code in ((https, None), (plain, 421)):
        policy = guard.policy(config.api, config.member("n1"), "generated-token-0123456789")
        refusal = guard.check(request, policy)
        assert (refusal.code if refusal else None) == code


# -- client certificates ------------------------------------------------------------------------


@pytest.fixture
def group(tmp_path: Path) -> Path:
    directory = tmp_path / "certs"
    certs.init_ca(directory)
    certs.issue(directory, "gtm-a")
    return directory


def test_a_client_certificate_is_for_client_authentication_only_and_names_no_member(group: Path) -> None:
    """``clients/NAME.pem`` and ``.key`` (0600), CN NAME, no DNS name, client auth only,
    signed by the group CA; not replaced without force; odd names refused."""
    made = certs.issue_client(group, "alice@ops")
    assert (made.cert, made.key) == (group / "clients" / "alice@ops.pem", group / "clients" / "alice@ops.key")
    assert stat.S_IMODE(made.key.stat().st_mode) == 0o600
    cert = certs.load_certificate(made.cert)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice@ops"
    assert certs.dns_names(cert) == []
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    cert.verify_directly_issued_by(certs.load_certificate(group / "ca.pem"))
    with pytest.raises(certs.CertError, match="already exist"):
        certs.issue_client(group, "alice@ops")
    assert certs.issue_client(group, "alice@ops", force=True).certificate != cert
    for bad in ("", "../x", "a/b", "-x", "x" * 65):
        with pytest.raises(certs.CertError, match="is not a client name"):
            certs.issue_client(group, bad)


def files(directory: Path, node: str) -> TLSFiles:
    return TLSFiles(directory / "ca.pem", directory / f"{node}.pem", directory / f"{node}.key")


def client_options(group: Path, client: str | None) -> Any:
    """TLS options of a client that trusts the group CA, expects gtm-a, and shows *client*'s
    certificate (none when None)."""
    ca = ssl.Certificate.loadPEM((group / "ca.pem").read_bytes())
    shown = None
    if client is not None:
        pem = (group / "clients" / f"{client}.pem").read_bytes() + (group / "clients" / f"{client}.key").read_bytes()
        shown = ssl.PrivateCertificate.loadPEM(pem)
    return ssl.optionsForClientTLS("gtm-a", trustRoot=ca, clientCertificate=shown)


@TWISTED_PYOPENSSL_DEPRECATION
def test_no_peer_takes_a_client_certificate(group: Path) -> None:
    """An operator's certificate is from the group CA, so the peer listener's TLS lets it
    through, but it names no member: the peer identity check refuses it."""
    certs.issue_client(group, "alice")
    creds = load_credentials(files(group, "gtm-a"), "gtm-a")
    _, _, server_tls, _ = tls_connection(server_options(creds), client_options(group, "alice"))
    with pytest.raises(IdentityError, match="names nothing, not a member"):
        peer_identity(server_tls, frozenset({"gtm-a", "gtm-b"}), "gtm-a", None)


@TWISTED_PYOPENSSL_DEPRECATION
def test_the_api_asks_for_a_client_certificate_when_required(group: Path) -> None:
    """With client certificates required, a client without one or with one from another CA
    gets no data through; with the group's it does. Without the requirement any client
    that trusts the group CA talks; `use` changes it for new connections."""
    certs.issue_client(group, "alice")
    other = group.parent / "other"
    certs.init_ca(other)
    certs.issue_client(other, "mallory")
    (group / "clients" / "mallory.pem").write_bytes((other / "clients" / "mallory.pem").read_bytes())
    (group / "clients" / "mallory.key").write_bytes((other / "clients" / "mallory.key").read_bytes())
    creds = load_credentials(files(group, "gtm-a"), "gtm-a")
    api = ApiTLS(creds, require_client=True)
    for client, talks in ((None, False), ("mallory", False), ("alice", True)):
        server, client_side, _, _ = tls_connection(api, client_options(group, client))  # type: ignore[arg-type]
        assert (server.received == b"hello from the client") == talks, client
        assert (client_side.received == b"hello from the server") == talks, client
    assert api.use(creds, require_client=False) and not api.use(creds, require_client=False)
    server, _, _, _ = tls_connection(api, client_options(group, None))  # type: ignore[arg-type]
    assert server.received == b"hello from the client"
    assert not api.use(replace(creds), require_client=False)
