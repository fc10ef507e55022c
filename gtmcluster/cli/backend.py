"""A tiny HTTP server standing in for a virtual server in the demo.

    python -m gtmcluster.cli.backend --listen 127.0.0.21:8081 --name vs-cnc

Answers every GET or HEAD with 200 and ``ok from NAME``; stops on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def serve(host: str, port: int, name: str) -> None:
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

    server = ThreadingHTTPServer((host, port), Handler)

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
