"""Opening the TCP (optionally TLS) connection of a stream check, and naming what went wrong.

`connect` picks the TCP4 or TCP6 endpoint by the target's address family, wraps it in TLS
when asked, and ties the attempt to it: a connection that fails ends the attempt with a
specific reason, and an attempt that ends first (timeout) cancels the connection attempt.
The protocol itself closes an established connection (it registers that with the attempt).
"""

from __future__ import annotations

from OpenSSL import SSL
from service_identity import VerificationError
from twisted.internet import error
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP6ClientEndpoint, wrapClientTLS
from twisted.internet.interfaces import IAddress, IOpenSSLClientConnectionCreator, IStreamClientEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure

from gtmcluster.probe.attempt import Attempt, seconds
from gtmcluster.probe.base import IPAddress
from gtmcluster.runtime.reactors import TCP

#: the connector's own timeout is a backstop; the attempt's timer decides first
CONNECTOR_SLACK = 1.0


def connect(
    reactor: TCP,
    address: IPAddress,
    port: int,
    protocol: Protocol,
    attempt: Attempt,
    timeout: float,
    tls: IOpenSSLClientConnectionCreator | None = None,
) -> None:
    """Connect *protocol* to *address*:*port*; failures end *attempt*."""
    endpoint: IStreamClientEndpoint
    if address.version == 6:
        endpoint = TCP6ClientEndpoint(reactor, str(address), port, timeout=timeout + CONNECTOR_SLACK)
    else:
        endpoint = TCP4ClientEndpoint(reactor, str(address), port, timeout=timeout + CONNECTOR_SLACK)
    if tls is not None:
        endpoint = wrapClientTLS(tls, endpoint)
    attempt.waiting_for = "connection"
    connecting = endpoint.connect(_QuietFactory(protocol))

    def stop_connecting() -> None:
        # Only while the connection is still being made: once the protocol has its
        # transport, it closes that itself (and the Deferred is about to fire).
        if protocol.transport is None:
            connecting.cancel()

    attempt.closing(stop_connecting)

    def failed(reason: Failure) -> None:
        attempt.finish(False, connect_failure(reason, timeout))

    connecting.addErrback(failed)


def connect_failure(reason: Failure, timeout: float) -> str:
    """The reason for a connection that could not be made."""
    e = reason.value
    assert isinstance(e, BaseException)
    return connect_error_reason(e, timeout)


def connect_error_reason(e: BaseException, timeout: float) -> str:
    """The reason for a connection that could not be made, from the exception."""
    if isinstance(e, error.ConnectionRefusedError):
        return "connection refused"
    if isinstance(e, error.NoRouteError):
        return "no route to host"
    if isinstance(e, error.TimeoutError | error.TCPTimedOutError):
        return f"no connection within {seconds(timeout)}"
    if isinstance(e, error.ConnectError):
        text = str(e.args[0]) if e.args and e.args[0] else (str(e.osError) if e.osError else "")
        return f"connect failed: {text.lower()}" if text else "connect failed"
    return f"connect failed: {type(e).__name__}"


def lost_reason(reason: Failure, server_name: str | None = None) -> str | None:
    """Why a connection went away, if the reason says more than "closed": TLS errors."""
    e = reason.value
    if isinstance(e, VerificationError):
        return f"TLS certificate is not valid for {server_name}" if server_name else "TLS certificate name mismatch"
    if isinstance(e, SSL.Error):
        return f"TLS handshake failed: {tls_error_text(e)}"
    return None


def tls_error_text(e: SSL.Error) -> str:
    """OpenSSL's reason strings from an ``SSL.Error`` (a list of (lib, func, reason))."""
    parts: list[str] = []
    details = e.args[0] if e.args else None
    if isinstance(details, list):
        for item in details:
            if isinstance(item, tuple) and item:
                parts.append(str(item[-1]))
    if parts:
        return "; ".join(dict.fromkeys(parts))
    return str(e) or type(e).__name__


class _QuietFactory(Factory[Protocol]):
    """Hands out one protocol, without logging "Starting factory" for every check
    (connectProtocol's factory would, burying the state changes in the log)."""

    noisy = False

    def __init__(self, protocol: Protocol):
        self._protocol = protocol

    def buildProtocol(self, addr: IAddress | None) -> Protocol:
        return self._protocol
