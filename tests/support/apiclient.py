"""A node's HTTP API as an operator's tools use it: with the bearer token, writes as JSON.

`token_of` finds a member's token as the CLI does when run on the node's host (the
config's ``api.token``, else the token the node made in its state_dir); `call` makes one
request and returns (status, JSON body or text), errors included.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from gtmcluster.api import token as api_token
from gtmcluster.config.load import load


def token_of(config_path: Path, node: str) -> str:
    """*node*'s bearer token: the config's, else the one it made in its state_dir."""
    config = load(config_path)
    if config.api.token is not None:
        return config.api.token
    found = api_token.read(config.state_dir_for(node))
    assert found is not None, f"{node} has made no token in {config.state_dir_for(node)} (has it started?)"
    return found


def call(
    address: tuple[str, int],
    path: str,
    method: str = "GET",
    token: str | None = None,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    timeout: float = 5.0,
    tls: ssl.SSLContext | None = None,
    name: str | None = None,
) -> tuple[int, Any]:
    """(HTTP status, parsed JSON or text) of one request; a POST sends *body* (default
    ``{}``) as ``application/json`` unless *headers* say otherwise. With *tls*, over HTTPS
    with that context, the certificate checked for *name* (a member's; default the host)."""
    host, port = address
    sent: dict[str, str] = {}
    if method == "POST":
        sent["Content-Type"] = "application/json"
        body = b"{}" if body is None else body
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    sent.update(headers or {})
    if tls is not None:
        return _https(address, path, method, sent, body, timeout, tls, name or host)
    request = urllib.request.Request(f"http://{host}:{port}{path}", data=body, method=method, headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, _parsed(response.read(), response.headers.get("content-type", ""))
    except urllib.error.HTTPError as e:
        return e.code, _parsed(e.read(), e.headers.get("content-type", ""))


def _https(
    address: tuple[str, int],
    path: str,
    method: str,
    headers: dict[str, str],
    body: bytes | None,
    timeout: float,
    tls: ssl.SSLContext,
    name: str,
) -> tuple[int, Any]:
    host, port = address
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    connection.sock = tls.wrap_socket(socket.create_connection(address, timeout), server_hostname=name)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, _parsed(response.read(), response.headers.get("content-type", ""))
    finally:
        connection.close()


def _parsed(data: bytes, kind: str) -> Any:
    return json.loads(data) if "json" in kind else data.decode(errors="replace")
