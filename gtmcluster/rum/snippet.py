"""The browser snippet (snippet.js beside this module, read once from the package) as a node serves it: the
data centers' target URLs, the zone of the one-use names and, when the wiring knows it, the
listener's public origin filled in (without one, the browser takes the origin the script was
loaded from). What is filled in is JSON with every character that could end a script element
or a string escaped, so no value can become code.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from importlib import resources

#: where the served config goes in the template
PLACEHOLDER = re.compile(r"/\*CONFIG\*/\{[^\n]*\}(?=\);\s*\Z)")
#: a zone a snippet may be asked for: a DNS name of letters, digits and hyphens
ZONE = re.compile(r"(?=.{1,253}\Z)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")
_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


@cache
def template() -> str:
    """The snippet as shipped."""
    return resources.files("gtmcluster.rum").joinpath("snippet.js").read_text(encoding="utf-8")


def zone_name(text: str) -> str | None:
    """*text* as a zone a snippet may name (lowercase, no trailing dot), or None."""
    name = text.strip().lower().removesuffix(".")
    return name if ZONE.match(name) else None


def render(targets: Mapping[str, str], zone: str = "", origin: str = "") -> bytes:
    """The snippet measuring *targets* (DC name -> URL), resolving names under *zone* (none
    when empty) and posting to *origin* (the script's own when empty)."""
    config = json.dumps({"origin": origin, "targets": dict(targets), "zone": zone}, sort_keys=True)
    config = re.sub("[<>&\u2028\u2029]", lambda m: _ESCAPES[m.group()], config)
    text, n = PLACEHOLDER.subn(lambda _: config, template(), count=1)
    if n != 1:
        raise ValueError("the snippet template has no config placeholder")
    return text.encode("utf-8")
