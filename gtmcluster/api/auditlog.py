"""``GET /api/v1/audit?since=&who=&limit=&follow=``: the node's audit log (`nodelog.audit`),
as its JSON lines, read and followed as ``GET /api/v1/logs`` reads the node's log
(`gtmcluster.api.logs`: the same caps on bytes, followers and stalls).

- ``limit=N``: the last N entries (default `DEFAULT_LIMIT`; at most `reader.MAX_LINES`);
- ``since=TIME``: only entries at or after TIME (ISO 8601), up to ``reader.MAX_LINES``
  unless ``limit`` is given too;
- ``who=NAME``: only the entries of that identity (its name exactly, at most
  `state.schema.MAX_NAME` characters);
- ``follow=1``: then each new entry as it is written.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from gtmcluster.api.logs import InThread, Logs, Query, Source, query
from gtmcluster.api.server import ApiError
from gtmcluster.config.model import ApiLimits
from gtmcluster.nodelog.audit import parse_entry
from gtmcluster.state.schema import MAX_NAME

DEFAULT_LIMIT = 100
PARAMS = ("since", "who", "limit", "follow")


def audit_query(args: Mapping[str, str]) -> Query:
    """(since, limit, follow, the entries kept) from the query; ApiError 400 for bad values."""
    since, count, follow, _ = query(args, "limit", DEFAULT_LIMIT)
    who = args.get("who")
    if who is None:
        return since, count, follow, None
    if not who or len(who) > MAX_NAME:
        raise ApiError(400, f"who: give an identity's name (1 to {MAX_NAME} characters)")

    written = json.dumps(who, ensure_ascii=False)[1:-1]  # (as a line holds it)

    def keep(line: str) -> bool:
        if written not in line:  # (cheap first: most lines are not its)
            return False
        entry = parse_entry(line)
        return entry is not None and entry.get("who") == who

    return since, count, follow, keep


def audit_route(
    audit: Source | None,
    clock: Any,
    in_thread: InThread[tuple[list[str], bool]],
    limits: Callable[[], ApiLimits],
    closed: Counter[str] | None = None,
) -> Logs:
    """The route's handler over *audit* (None: the node keeps none, 404)."""
    return Logs(audit, clock, in_thread, limits, closed, audit_query, "this node keeps no audit log")
