"""A tiny HTTP server standing in for a virtual server in the demo.

    python -m gtmcluster.cli.backend --listen 127.0.0.21:8081 --name vs-cnc

Answers every GET or HEAD with 200 and ``ok from NAME``; stops on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from typing import Any


class Server(ThreadingHTTPServer):
    """The standard threading HTTP server, without its two habits that hurt a stand-in:
    binding looks its own address up in DNS (`socket.getfqdn`: where no resolver answers,
    as in a test's network namespace, that takes ten seconds), and a client that hangs up
    mid-request (a health check that timed out) prints a traceback."""

    def server_bind(self) -> None:
        TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the client went away: nothing to say
        super().handle_error(request, client_address)


def make_server(host: str, port: int, name: str) -> Server:
    """A server answering every GET or HEAD with 200 and ``ok from NAME``."""
    body = f"ok from {name}\n".encode()

    class Handler(BaseHTTPRequestHandler):
        server_version = "gtmcluster-demo-backend"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_HEAD = do_GET

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Server((host, port), Handler)


def serve(host: str, port: int, name: str) -> None:
    server = make_server(host, port, name)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", required=True, metavar="ADDRESS:PORT")
    p.add_argument("--name", default="backend")
    args = p.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    serve(host.strip("[]"), int(port), args.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
