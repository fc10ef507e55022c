#!/usr/bin/env python3
"""webobject: the tiny web server of the browser tests (stdlib only), run in a namespace.

One process serves, on ``--listen ADDR:PORT`` (HTTP/1.1, keep-alive, a thread per
connection):

- ``GET /object``: a few bytes (``ok NAME\\n`` with ``--name NAME``, else ``ok\\n``),
  uncacheable, with ``Timing-Allow-Origin: *`` and ``Access-Control-Allow-Origin: *``: a data
  center's measurement URL, whose Resource Timing a page of any origin may read in full;
- ``GET /<file>`` with ``--root DIR``: that file of *DIR* (test pages; no directory listing,
  no path outside *DIR*);
- ``POST /collect`` with ``--collect FILE``: the body (JSON, up to 1 MiB) appended to *FILE*
  as one line, answered 204 (CORS open, preflight answered): what a test page posts for the
  test to read;
- anything else: 404.

A line ``{"ready": true, "listen": "ADDR:PORT"}`` on stdout says it is listening. Requests
are logged to stderr. SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import json
import mimetypes
import signal
import socketserver
import sys
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType

MAX_BODY = 1 << 20
CORS = {
    "Access-Control-Allow-Origin": "*",
    "Timing-Allow-Origin": "*",
}


class Handler(BaseHTTPRequestHandler):
    """The routes above; *root* and *collect* come from the server."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body out at once, not a round trip apart
    server: WebObjectServer

    def _send(self, status: int, body: bytes = b"", content_type: str = "text/plain") -> None:
        self.send_response(status)
        for name, value in CORS.items():
            self.send_header(name, value)
        self.send_header("Cache-Control", "no-store")
        if body or status != 204:
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/object":
            self._send(200, self.server.object)
            return
        root = self.server.root
        if root is not None and path.startswith("/") and "/." not in path:
            file = (root / path.lstrip("/")).resolve()
            if file.is_file() and root in file.parents:
                kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
                self._send(200, file.read_bytes(), kind)
                return
        self._send(404, b"not found\n")

    do_HEAD = do_GET

    def do_OPTIONS(self) -> None:
        self.send_response(204)
        for name, value in CORS.items():
            self.send_header(name, value)
        self.send_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", "Content-Type")
        self.send_header("Access-Control-Max-Age", "600")
        self.end_headers()

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] != "/collect" or self.server.collect is None:
            self._send(404, b"not found\n")
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self.close_connection = True
            self._send(413, b"body too large\n")
            return
        body = self.rfile.read(length)
        try:
            value = json.loads(body)
        except ValueError:
            self._send(400, b"not JSON\n")
            return
        with self.server.lock, self.server.collect.open("a") as out:
            out.write(json.dumps(value, sort_keys=True) + "\n")
        self._send(204)


class WebObjectServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, listen: tuple[str, int], root: Path | None, collect: Path | None, name: str = "") -> None:
        super().__init__(listen, Handler)
        self.object = f"ok {name}\n".encode() if name else b"ok\n"
        self.root = root.resolve() if root is not None else None
        self.collect = collect
        self.lock = threading.Lock()

    def server_bind(self) -> None:
        """Bind without HTTPServer's reverse lookup of the address (``socket.getfqdn``): a
        namespace's resolver may be one that never answers."""
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="webobject", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--listen", required=True, metavar="ADDR:PORT")
    parser.add_argument("--root", type=Path, default=None, help="serve the files of this folder")
    parser.add_argument("--collect", type=Path, default=None, help="append POST /collect bodies to this file")
    parser.add_argument("--name", default="", help="the body of /object says this name")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    server = WebObjectServer((host, int(port)), args.root, args.collect, args.name)

    def stop(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(json.dumps({"ready": True, "listen": args.listen}), flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
