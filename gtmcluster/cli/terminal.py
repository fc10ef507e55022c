"""What the CLI prints of what a node said, made safe for the operator's terminal.

Texts a node sends (status reasons, peer and object names, log messages, refusal reasons,
error messages, even an HTTP reason phrase) come from replicated records, from peers, or
from whatever answers at the node's address. Printed as they are, an escape sequence among
them is obeyed by the terminal: it can retitle the window, rewrite what is shown, hide
lines, or answer back on some terminals. So every control character a node's text holds is
shown as an escape instead: C0 controls (``\\x00``-``\\x1f``), DEL and C1 controls
(``\\x80``-``\\x9f``, which some terminals obey like ESC sequences) as ``\\xNN``, and the
Unicode bidirectional controls that reorder what is shown (``\\u202e`` ...) as ``\\uNNNN``.
A newline is kept only where the layout expects one (a log message's further lines, each
printed under the node's prefix); a JSON line is escaped as JSON would (``\\u001b``), so it
stays JSON.
"""

from __future__ import annotations

import re
from typing import Any

#: C0, DEL, C1, and the bidirectional formatting characters
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str, keep: str = "") -> str:
    """*text* with its control characters escaped, except those in *keep* (``"\\n"``)."""
    if not keep:
        return UNSAFE.sub(_escaped, text)
    return UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escaped(m), text)


def escape_json_line(text: str) -> str:
    """A JSON line with its control characters escaped as JSON escapes them (``\\u001b``),
    so that what was JSON stays JSON (C1 and bidirectional controls may stand unescaped in
    a JSON string; the others may not, so a line holding them was not JSON anyway)."""
    return UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def printable(value: Any) -> Any:
    """A copy of JSON *value* with every string in it (keys too) `escape`d, newlines
    included: what a command renders for the terminal. (Depth: what `bounded.decode_json`
    accepts.)"""
    if isinstance(value, str):
        return escape(value)
    if isinstance(value, dict):
        return {escape(str(k)): printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable(v) for v in value]
    return value
