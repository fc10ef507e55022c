"""The dashboard (``GET /``): one self-contained HTML page that polls the JSON API.

The page is ``static/dashboard.html`` in this package, read once on first use and then
served from memory. It needs no build step and loads nothing from elsewhere: its CSS and
JavaScript are inline, and it reads the node's state from ``/api/v1/status``, ``/health``,
``/ldns`` and ``/wideips`` every 2 s, and draws ``/api/v1/history`` (the node's last hour,
`gtmcluster.history`) as inline SVG graphs every 10 s. Opened with ``#token=...`` in its address (which
``gtmcluster dashboard-url`` prints), it sends that as the bearer token, and offers enable,
disable and drain on each virtual server (JSON POSTs from the node's own origin).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib import resources

from gtmcluster.api.server import Raw

CONTENT_TYPE = b"text/html; charset=utf-8"


@cache
def page() -> bytes:
    """The page's bytes, from the installed package."""
    return resources.files(__package__).joinpath("static", "dashboard.html").read_bytes()


def dashboard(args: Mapping[str, str], parts: Mapping[str, str]) -> Raw:
    return Raw(CONTENT_TYPE, page())
