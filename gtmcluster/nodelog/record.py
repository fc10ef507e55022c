"""One log event as one line of the node's log, and back.

A line is a compact JSON object with these fields, in this order::

    {"time":"2026-12-01T15:11:51.123456Z","node":"gtm-cnc","level":"info",
     "system":"gtmcluster.sync.service","event":"peer {peer} up","message":"peer gtm-tel up"}

``time`` is UTC with microseconds (fixed width, so times compare as strings); ``level`` is
debug, info, warn, error or critical; ``system`` is the logger's namespace (or the legacy
``system``); ``event`` is the event's format template, the same for every event of a kind;
``message`` is the formatted text, with the traceback when the event carries a failure. A
message never breaks the line: JSON escapes its newlines. Nor does it make the line long: a
message may carry text from outside (a peer's name in a refused Hello, a config problem
quoting a value), so one of more than `MAX_MESSAGE` characters keeps its first and last
characters and says how many were left out between (``... N more characters ...``; a
traceback's last lines say what failed), and its JSON form is at most `MAX_MESSAGE_BYTES`
(a line well within 64 KiB). Text that is not valid Unicode (a file name of undecodable
bytes) is written with backslash escapes rather than lost.

Pure: nothing here touches files or clocks.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from twisted.logger import LogLevel, formatEvent

FIELDS = ("time", "node", "level", "system", "event", "message")

#: sd-daemon(3) priorities by level, for the journal's ``<N>`` line prefix
PRIORITY = {"critical": 2, "error": 3, "warn": 4, "info": 6, "debug": 7}

#: ``time`` of this many characters: ``2026-12-01T15:11:51.123456Z``
TIME_WIDTH = 27
#: a longer message keeps its first MAX_MESSAGE - TAIL and last TAIL characters ...
MAX_MESSAGE = 16 * 1024
TAIL = 4 * 1024
#: ... and fewer if its JSON form would be more bytes than this (a control character takes 6)
MAX_MESSAGE_BYTES = 48 * 1024


def iso_time(seconds: float) -> str:
    """*seconds* since the epoch as the log's time field."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> str:
    """An ISO 8601 time (with an offset or ``Z``; UTC without one) as the log's time field,
    so that it compares with the lines' times as a string. ValueError when not a time."""
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def level_of(event: dict[str, Any]) -> str:
    level = event.get("log_level")
    return level.name if isinstance(level, type(LogLevel.info)) else "info"


def system_of(event: dict[str, Any]) -> str:
    system = event.get("log_system")
    if isinstance(system, str) and system not in ("", "-"):
        return system
    namespace = event.get("log_namespace")
    return namespace if isinstance(namespace, str) and namespace else "-"


def message_of(event: dict[str, Any]) -> str:
    """The formatted text of *event* (with its traceback), shortened (`shorten`)."""
    text = formatEvent(event)
    failure = event.get("log_failure")
    if failure is not None:
        try:
            trace = failure.getTraceback()
        except Exception:  # a broken failure must not lose the event
            trace = repr(failure)
        text = f"{text}\n{trace}".rstrip("\n") if text else trace.rstrip("\n")
    if not text.isascii():
        # a lone surrogate (undecodable bytes) cannot be written as UTF-8: escaped, not lost
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return shorten(text)


def shorten(text: str) -> str:
    """*text*, or when it is longer than `MAX_MESSAGE` characters (or its JSON form more
    than `MAX_MESSAGE_BYTES`), its first and last characters with how many were left out."""
    if len(text) <= MAX_MESSAGE and (len(text) * 6 <= MAX_MESSAGE_BYTES or _json_bytes(text) <= MAX_MESSAGE_BYTES):
        return text
    head, tail = MAX_MESSAGE - TAIL, TAIL
    while True:
        if head + tail < len(text):
            cut = f"{text[:head]} ... {len(text) - head - tail} more characters ... {text[len(text) - tail :]}"
            if _json_bytes(cut) <= MAX_MESSAGE_BYTES:
                return cut
        head, tail = head // 2, tail // 2


def _json_bytes(text: str) -> int:
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8"))


def event_line(event: dict[str, Any], node: str, fallback_time: float) -> str:
    """*event* as one line of *node*'s log, without the newline (*fallback_time* for an
    event without ``log_time``)."""
    seconds = event.get("log_time")
    template = event.get("log_format")
    record = {
        "time": iso_time(seconds if isinstance(seconds, (int, float)) else fallback_time),
        "node": node,
        "level": level_of(event),
        "system": system_of(event),
        "event": template if isinstance(template, str) else "",
        "message": message_of(event),
    }
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def line_time(line: str) -> str | None:
    """The time field of a log line (read without parsing the rest), or None when the line
    is not one of ours."""
    if line.startswith('{"time":"') and len(line) > 9 + TIME_WIDTH and line[9 + TIME_WIDTH] == '"':
        return line[9 : 9 + TIME_WIDTH]
    return None


def parse_line(line: str) -> dict[str, str] | None:
    """The fields of a log line, or None when it is not a JSON object with a time."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("time"), str):
        return None
    return {k: str(value.get(k, "")) for k in FIELDS}
