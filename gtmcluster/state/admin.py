"""Operators' admin states at every level: what the records say, and what they take out.

An operator enables, disables or drains an object for the whole sync group by writing a
replicated record ``admin/<level>/<name>`` (see `state.schema`):

    level        name            takes out (F5 BIG-IP DNS semantics)
    datacenter   <data center>   every virtual server in it
    link         <link>          every virtual server bound to it
    vs           <server>        that server, in every pool
    pool         <pool>          that pool, in every wide IP (its members stay usable elsewhere)
    member       <pool>/<server> that server in that pool only
    wideip       <wide IP>       the wide IP: it answers as if no pool had an available
                                 member, i.e. with its `failure_response`; persistence aside

The value is ``{"state": enabled | disabled | drain, "by": who, "reason": why, "at": when
(the node's clock, seconds since the epoch), "node": the member that took the request}``,
and since the audit log what the API proved of who asked: ``"who"`` (the identity's name),
``"role"``, ``"proof"``, ``"source"`` (its address) and ``"id"`` (of the audit entries of
the write on the member that took it; `gtmcluster.api.audit`). Members of an older version
carry these fields on unchanged (a field a version does not know is kept: `state.schema`).

`disabled` takes the object out at once, for every client. `drain` takes it out for new
clients only: clients held by persistence keep their answer until their record expires
(F5's "smooth exit"). `enabled` (or no record) leaves the object to its health and to the
objects above it. An object is as restricted as the most restricted of its own state and
the states of what it is in: a server in a disabled data center is disabled whatever its
own state; one in a draining data center drains.

A record overrides the config's `admin_state` of its object (virtual servers, pools, pool
members and wide IPs have one): `enable` gives back an object the config disables; with no
record, the config's state applies (`AdminState.configured`).

Pure: no Twisted, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gtmcluster.state import keys
from gtmcluster.state.schema import ADMIN_LEVELS as LEVELS
from gtmcluster.state.schema import ADMIN_STATES

ENABLED, DISABLED, DRAIN = ADMIN_STATES
#: what the CLI and the API accept for each level (the API's path segment)
LEVEL_NAMES = {
    "datacenter": "datacenter",
    "link": "link",
    "pool": "pool",
    "pool-member": "member",
    "wideip": "wideip",
    "virtual-server": "vs",
}
#: the words for a level in messages
LEVEL_WORDS = {
    "datacenter": "data center",
    "link": "link",
    "vs": "virtual server",
    "pool": "pool",
    "member": "pool member",
    "wideip": "wide IP",
}
#: the actions and the state each sets
ACTIONS = {"enable": ENABLED, "disable": DISABLED, "drain": DRAIN}
RANK = {ENABLED: 0, DRAIN: 1, DISABLED: 2}


@dataclass(frozen=True, slots=True)
class AdminState:
    """An operator's admin state of one object, as its record holds it."""

    level: str
    name: str
    state: str
    by: str = ""
    reason: str = ""
    at: float | None = None
    node: str = ""
    #: the config's `admin_state` (no record: the default a record overrides)
    configured: bool = False

    def describe(self) -> str:
        """For reasons and traces: "data center DC1 disabled by alice (maintenance)",
        "pool maint disabled in the config"."""
        who = " in the config" if self.configured else f" by {self.by}" if self.by else ""
        why = f" ({self.reason})" if self.reason else ""
        return f"{LEVEL_WORDS.get(self.level, self.level)} {self.name} {_word(self.state)}{who}{why}"

    def to_json(self) -> dict[str, Any]:
        """As the API lists it; the config's own (no record) with ``"configured": true``."""
        out = {
            "level": self.level,
            "name": self.name,
            "state": self.state,
            "by": self.by,
            "reason": self.reason,
            "at": self.at,
            "node": self.node,
        }
        if self.configured:
            out["configured"] = True
        return out


def _word(state: str) -> str:
    return "draining" if state == DRAIN else state


def parse_key(record_key: str) -> tuple[str, str] | None:
    """(level, name) of an admin record's key (`state.keys.admin`), or None when it is not
    one of a known level."""
    parts = keys.admin_parts(record_key)
    return parts if parts is not None and parts[0] in LEVELS else None


def from_value(level: str, name: str, value: Any) -> AdminState | None:
    """The admin state a record's value holds; None for a value of another shape (written
    by a newer version, or a bad peer: it counts for nothing) or a deletion."""
    if value is None or not isinstance(value, Mapping):
        return None
    state = value.get("state")
    if state not in ADMIN_STATES:
        return None
    at = value.get("at")
    return AdminState(
        level,
        name,
        state,
        _str(value.get("by")),
        _str(value.get("reason")),
        float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else None,
        _str(value.get("node")),
    )


def _str(value: Any) -> str:
    return value if type(value) is str else ""


def worst(states: list[AdminState]) -> AdminState | None:
    """The most restrictive of *states* (disabled over drain over enabled), the first of
    equals; None when none restricts."""
    found: AdminState | None = None
    for s in states:
        if s.state != ENABLED and (found is None or RANK[s.state] > RANK[found.state]):
            found = s
    return found


def value(state: str, by: str, reason: str, at: float, node: str, **caller: str) -> dict[str, Any]:
    """The record value an admin change writes; *caller*: what it carries of who made it
    (``who``, ``role``, ``proof``, ``source``, ``id``: text fields that members of an
    older version carry on unchanged, see `state.schema`), for every member's audit."""
    return {"state": state, "by": by, "reason": reason, "at": at, "node": node, **caller}


__all__ = [
    "ACTIONS",
    "ADMIN_STATES",
    "DISABLED",
    "DRAIN",
    "ENABLED",
    "LEVELS",
    "LEVEL_NAMES",
    "LEVEL_WORDS",
    "AdminState",
    "from_value",
    "parse_key",
    "value",
    "worst",
]
