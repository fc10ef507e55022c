"""The demo's stand-in backend: it binds without a DNS lookup of its own address (in a
network namespace with no resolver that took ten seconds), answers, and says nothing when
a client hangs up mid-request."""

from __future__ import annotations

import http.client
import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from gtmcluster.cli.backend import Server, make_server


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    def no_lookup(name: str = "") -> str:
        raise AssertionError(f"the backend looked up {name!r}")

    monkeypatch.setattr(socket, "getfqdn", no_lookup)
    srv = make_server("127.0.0.1", 0, "vs-x")
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(5)


def test_it_binds_without_a_lookup_and_answers(server: Server) -> None:
    assert server.server_name == "127.0.0.1"
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=5)
    conn.request("GET", "/")
    response = conn.getresponse()
    assert (response.status, response.read()) == (200, b"ok from vs-x\n")
    conn.close()


def test_a_client_that_resets_mid_request_is_no_traceback(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    done = threading.Event()
    original = server.handle_error

    def noted(request: object, client_address: object) -> None:
        original(request, client_address)
        done.set()

    server.handle_error = noted  # type: ignore[method-assign]
    s = socket.create_connection(("127.0.0.1", server.server_port))
    s.sendall(b"GET / HT")  # half a request line, then a reset (RST: linger 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    assert done.wait(5), "the reset never reached the server"
    assert "Traceback" not in capsys.readouterr().err
