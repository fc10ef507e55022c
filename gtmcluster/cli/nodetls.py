"""How the CLI talks HTTPS to a node (``api: {tls: true}``): it checks the node's certificate
against the group CA and the member's name, and shows a client certificate when it has one.

The CA is the config's ``sync_group.tls.ca`` (only ``ca.pem`` is needed where the CLI runs,
never ``ca.key``). The node's certificate must chain to it and name the member (its DNS
name), whatever address the API is reached at: the connection is made to the member's
``api`` address and checked for the member's name. A client certificate (an identity of the users file, from the
operators' CA ``api.tls.client_ca``; or for ``api.client_certificates: required``) is the
first given of ``--cert FILE`` (``--key FILE``, default: FILE with the suffix ``.key``;
also spelt ``--client-cert``, ``--client-key``) and ``GTM_API_CLIENT_CERT``
(``GTM_API_CLIENT_KEY``); ``gtmcluster certs issue --client NAME`` makes one. Without one,
where the config requires client certificates, the member's own certificate and key
(``sync_group.tls``) are shown when they can be read: on the node's host, as its user or
root, as its own token is found there.

Every TLS failure becomes one line that says what went wrong and what to do.
"""

from __future__ import annotations

import http.client
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gtmcluster.config.model import Config, Member

ENV_CERT = "GTM_API_CLIENT_CERT"
ENV_KEY = "GTM_API_CLIENT_KEY"
#: how to make and give a client certificate, for error messages
CLIENT_HELP = (
    f"give one with --client-cert FILE [--client-key FILE] or {ENV_CERT} [{ENV_KEY}]; "
    "`gtmcluster certs issue --client NAME` makes one (on the host that keeps the CA key)"
)


class TLSProblem(Exception):
    """A TLS problem to print as it is (one line)."""


@dataclass(frozen=True)
class ClientCert:
    cert: Path
    key: Path
    #: where it was given, as the user would name it
    source: str


def add_arguments(parser: Any) -> None:
    parser.add_argument(
        "--client-cert",
        "--cert",
        dest="client_cert",
        metavar="FILE",
        help="a client certificate: of the operators' CA (api.tls.client_ca), the identity it names in the users "
        f"file; or from the group CA for an HTTPS API that requires one (else ${ENV_CERT})",
    )
    parser.add_argument(
        "--client-key",
        "--key",
        dest="client_key",
        metavar="FILE",
        help=f"its key (default: the certificate's file name with .key; else ${ENV_KEY})",
    )


def client_cert(cert: str | None, key: str | None, environ: Mapping[str, str]) -> ClientCert | None:
    """The client certificate given on the command line or in the environment, if any."""
    if cert is not None:
        source = "--client-cert"
    elif key is not None:
        raise TLSProblem("--client-key needs --client-cert")
    elif environ.get(ENV_CERT, "").strip():
        cert, key, source = environ[ENV_CERT].strip(), environ.get(ENV_KEY, "").strip() or None, ENV_CERT
    else:
        return None
    cert_path = Path(cert)
    key_path = Path(key) if key else cert_path.with_suffix(".key")
    return ClientCert(cert_path, key_path, f"{source} {cert_path}")


class Trust:
    """What the CLI trusts and shows over HTTPS: the group CA of *config*, and *client*."""

    def __init__(self, config: Config, client: ClientCert | None):
        self.config = config
        self.client = client
        #: members shown their own certificate (on their host), by name
        self.own: dict[str, ClientCert] = {}

    def ca_of(self, m: Member) -> Path:
        return self.config.tls_for(m.name).ca

    def context(self, m: Member) -> ssl.SSLContext:
        """A TLS context for *m*'s API: the group CA only, TLS 1.2 or newer, *m*'s name."""
        ca = self.ca_of(m)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_verify_locations(cafile=str(ca))
        except (OSError, ssl.SSLError) as e:
            why = getattr(e, "strerror", None) or e
            raise TLSProblem(
                f"cannot read the group CA {ca} (sync_group.tls.ca) to check {m.name}'s certificate: {why}; "
                "copy the group's ca.pem there"
            ) from None
        if self.client is not None:
            try:
                context.load_cert_chain(str(self.client.cert), str(self.client.key))
            except (OSError, ssl.SSLError) as e:
                why = getattr(e, "strerror", None) or e
                raise TLSProblem(
                    f"cannot use the client certificate {self.client.cert} with key {self.client.key} "
                    f"({self.client.source}): {why}"
                ) from None
        elif self.config.api.client_certificates_required:
            own = self.config.tls_for(m.name)
            try:
                context.load_cert_chain(str(own.cert), str(own.key))
            except (OSError, ssl.SSLError):
                pass  # not on the node's host (or not its user): no client certificate
            else:
                self.own[m.name] = ClientCert(own.cert, own.key, f"{m.name}'s own certificate {own.cert}")
        return context

    def client_for(self, m: Member) -> ClientCert | None:
        """The client certificate shown to *m* (after `context`), if any."""
        return self.client or self.own.get(m.name)

    def connection(self, m: Member, timeout: float) -> http.client.HTTPConnection:
        """An HTTPS connection to *m*'s API address that checks the certificate names *m*."""
        return _Connection(str(m.api.host), m.api.port, self.context(m), m.name, timeout)

    def problem(self, m: Member, url: str, e: ssl.SSLError) -> str:
        """What a TLS failure talking to *m* means, and what to do."""
        reason = (getattr(e, "reason", None) or "").upper()
        ca = self.ca_of(m)
        if isinstance(e, ssl.SSLCertVerificationError):
            said = e.verify_message or str(e)
            if "hostname mismatch" in said.lower() or "ip address mismatch" in said.lower():
                return (
                    f"{m.name}'s API at {url} showed a certificate that does not name {m.name} ({said}): "
                    "is that address really this member's?"
                )
            return (
                f"{m.name}'s API at {url} showed a certificate that is not from the group CA {ca} ({said}): "
                "refused; check that the config's sync_group.tls.ca is this group's CA"
            )
        client = self.client_for(m)
        if "CERTIFICATE_REQUIRED" in reason or ("HANDSHAKE_FAILURE" in reason and client is None):
            return f"{m.name}'s API requires a client certificate from the group CA: {CLIENT_HELP}"
        if "UNKNOWN_CA" in reason or "BAD_CERTIFICATE" in reason or "DECRYPT_ERROR" in reason:
            shown = client.source if client is not None else "the client certificate"
            return f"{m.name} refused {shown}: not signed by its group CA ({reason.lower()}); {CLIENT_HELP}"
        if "UNSUPPORTED_CERTIFICATE" in reason:
            shown = client.source if client is not None else "the client certificate"
            return f"{m.name} refused {shown}: it may not be used for client authentication; {CLIENT_HELP}"
        if "WRONG_VERSION_NUMBER" in reason or "RECORD_LAYER_FAILURE" in reason:
            return (
                f"{m.name}'s API at {url} does not answer TLS: the config here says api.tls: true; "
                "does the node run with the same config?"
            )
        return f"TLS with {m.name}'s API at {url} failed: {reason.lower() or e}"


class _Connection(http.client.HTTPSConnection):
    """HTTPS to an address, checked for a name: the member's, which its certificate holds."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext, name: str, timeout: float):
        super().__init__(host, port, timeout=timeout, context=context)
        self._name = name
        self._tls = context

    def connect(self) -> None:
        # (made as http.client makes its sockets, so that a `bounded.Deadline` holds it too)
        sock: socket.socket = self._create_connection((self.host, self.port), self.timeout)  # type: ignore[attr-defined]
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self.sock = self._tls.wrap_socket(sock, server_hostname=self._name)
        except BaseException:
            sock.close()
            raise
