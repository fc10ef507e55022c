"""A public RUM listener on the real reactor, in a process of its own, for tests that talk
to it over real sockets with real clients::

    python -m tests.support.rumserve SETTINGS_JSON KEPT_FILE

SETTINGS_JSON: ``{"host", "targets", "allow": [networks], "per_second", "burst",
"max_body", "read_timeout", "connections_per_source", "page": HTML (optional)}``. It prints one
line ``{"port": P, "page_port": Q}`` once listening (``page_port``: a second port serving
*page* at ``/page.html`` and a measurement object of its own at ``/object``, 0 without a
page; ``{port}`` and ``{page_port}`` in the page and the targets' URLs are replaced by them)
and appends each beacon that reaches `keep` to KEPT_FILE as a JSON line ``{"subnet",
"samples", "id"}``.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import json
import sys
from typing import Any

from twisted.internet import reactor
from twisted.web import resource, server, static

from gtmcluster.rum.beacon import Beacon
from gtmcluster.rum.limits import Rates
from gtmcluster.rum.listener import Limits, rum_site


def main(argv: list[str]) -> None:
    settings: dict[str, Any] = json.loads(argv[1])
    kept_file = argv[2]

    def keep(subnet: Any, beacon: Beacon) -> None:
        with open(kept_file, "a", encoding="utf-8") as f:
            f.write(json.dumps({"subnet": str(subnet), "samples": beacon.samples, "id": beacon.id}) + "\n")

    site = rum_site(
        settings["targets"],
        keep,
        allow=[ipaddress.ip_network(n) for n in settings.get("allow", [])],
        rates=Rates(per_second=settings.get("per_second", 1.0), burst=settings.get("burst", 10.0)),
        max_body=settings.get("max_body", 4096),
        limits=Limits(
            read_timeout=settings.get("read_timeout", 10.0),
            connections_per_source=settings.get("connections_per_source", 16),
        ),
    )
    r: Any = reactor
    host = settings.get("host", "127.0.0.1")
    port = r.listenTCP(0, site, interface=host).getHost().port
    page_port = 0
    if settings.get("page"):
        root = resource.Resource()
        root.putChild(b"page.html", static.Data(settings["page"].replace("{port}", str(port)).encode(), "text/html"))
        root.putChild(b"object", static.Data(b"o", "text/plain"))
        page_port = r.listenTCP(0, server.Site(root), interface=host).getHost().port
    ports = {"{port}": str(port), "{page_port}": str(page_port)}
    targets = {
        dc: functools.reduce(lambda u, p: u.replace(*p), ports.items(), u) for dc, u in site.settings.targets.items()
    }
    site.configure(dataclasses.replace(site.settings, targets=targets))
    print(json.dumps({"port": port, "page_port": page_port}), flush=True)
    r.run()


if __name__ == "__main__":
    main(sys.argv)
