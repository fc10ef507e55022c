"""The dashboard: its page (``GET /``) and the page's scripts (``GET /dashboard/NAME.js``).

The page is ``static/dashboard.html`` in this package (markup and CSS); its JavaScript is
in ``static/*.js``, ES modules, one concern each (`SCRIPTS`). Each file is read once on first
use and then served from memory. Nothing needs a build step and nothing loads from
elsewhere: the page's Content-Security-Policy allows scripts of the node's own origin only
(no inline script). It reads the node's state from ``/api/v1/status``, ``/health``,
``/ldns``, ``/wideips`` and ``/stats`` every 2 s, draws ``/api/v1/history`` as inline SVG
graphs every 10 s, asks ``/api/v1/whoami`` who its token is, and shows the audit log
(``/api/v1/audit``) and, for the admin role, the config bundles held and a diff between two
(``/api/v1/config/history``, ``/api/v1/config/bundles/N``). Opened with ``#token=...`` in
its address (which ``gtmcluster dashboard-url`` prints), it sends that as the bearer token;
for the operator role and up it offers enable, disable and drain at every level (JSON POSTs
from the node's own origin; the API checks the role again).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib import resources

from gtmcluster.api.server import ApiError, Raw

CONTENT_TYPE = b"text/html; charset=utf-8"
SCRIPT_TYPE = b"text/javascript; charset=utf-8"
#: the page's scripts (static/NAME.js), each a module: main draws the node's state and
#: imports the others
SCRIPTS = frozenset({"common", "main", "graphs", "access", "actions", "audit", "config", "linediff"})
#: the path of a script, for the route table (NAME.js, of `SCRIPTS`; else 404)
SCRIPT_PATH = r"/dashboard/(?P<script>[^/]{1,32})"


@cache
def _static(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


def page() -> bytes:
    """The page's bytes, from the installed package."""
    return _static("dashboard.html")


def script(name: str) -> bytes:
    """One of the page's scripts; KeyError for a name not in `SCRIPTS`."""
    if name not in SCRIPTS:
        raise KeyError(name)
    return _static(f"{name}.js")


def dashboard(args: Mapping[str, str], parts: Mapping[str, str]) -> Raw:
    return Raw(CONTENT_TYPE, page())


def dashboard_script(args: Mapping[str, str], parts: Mapping[str, str]) -> Raw:
    try:
        name, dot_js, rest = parts["script"].partition(".js")
        if not dot_js or rest:
            raise KeyError(name)
        return Raw(SCRIPT_TYPE, script(name))
    except KeyError:
        raise ApiError(404, f"no such script: {parts['script']!r}") from None
