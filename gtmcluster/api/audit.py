"""What the audit log records (`nodelog.audit` writes it): every write asked of the API, its
refusals, and the admin changes of other members this node takes.

- **A write** (every ``POST`` route): before its handler runs, an entry with ``"result":
  "requested"`` (`Auditor.begin`): who (the identity's name, role and proof), from where
  (the source address), the route asked and the change in a few words (`Route.change`). If
  it cannot be written, the request is refused (503 "the audit log cannot be written: ...")
  and nothing is changed: no change is made unrecorded. When the handler is done, a second
  entry with the same ``id`` says how it ended (`Auditor.end`): ``applied`` (200) or
  ``refused`` with the HTTP status and message; a node that stops between the two leaves
  the first alone, which says the change may have been made.
- **A refused request** (`Auditor.refused`): a write refused before its handler (a wrong
  role or token, a bad origin or body, no such route), and any request refused for its
  credentials (a wrong or missing token, a role too low, too many unknown tokens: 401,
  403, 429). Bounded per source and in all (`auditbound.RefusalBound`): beyond, one
  summary entry per minute.
- **A change made on another member** (`Auditor.taken`, a listener of the store): an admin
  record merged from a peer (not loaded from this node's snapshot) is recorded with the
  identity, role, proof, source and id its record carries (`state.admin`: the member that
  took the request puts them there), ``origin`` the member where it was made: every
  member's audit shows the same admin writes. A member cannot refuse the group's change:
  when its audit cannot be written it logs the problem (and /metrics counts it).
"""

from __future__ import annotations

import json
import secrets
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from gtmcluster.api.auditbound import RefusalBound
from gtmcluster.api.identity import Identity
from gtmcluster.nodelog.audit import AuditError, AuditFile
from gtmcluster.nodelog.record import iso_time
from gtmcluster.state import admin, keys
from gtmcluster.state.record import Record

log = Logger()

#: the action of each admin state (what was asked to set it)
ACTION_OF = {state: action for action, state in admin.ACTIONS.items()}
#: the API's name of each admin level (`state.admin.LEVEL_NAMES`, the other way)
TARGET_OF = {level: target for target, level in admin.LEVEL_NAMES.items()}
#: what a 503 says when an entry cannot be written
UNWRITABLE = "the audit log cannot be written: {problem}; nothing was changed"


@dataclass(frozen=True)
class Caller:
    """Who made a write, as its admin record carries it: the identity's name, role and
    proof, the source address, and the id of the write's audit entries."""

    name: str
    role: str
    proof: str
    source: str = ""
    change_id: str = ""

    @property
    def personal(self) -> bool:
        """Whether the identity is a person's (a token of the users file, a certificate),
        not the shared single token."""
        return self.proof in ("token", "certificate")

    def fields(self) -> dict[str, str]:
        """What an admin record carries of the caller (`state.admin.value`)."""
        return {"who": self.name, "role": self.role, "proof": self.proof, "source": self.source, "id": self.change_id}


def admin_change(level: str, name: str, action: str, reason: str = "") -> str:
    """An admin change in a few words: "disable data center DC1 (maintenance)"."""
    why = f" ({reason})" if reason else ""
    return f"{action} {admin.LEVEL_WORDS.get(level, level)} {name}{why}"


def admin_route(level: str, name: str, action: str) -> str:
    """The route that makes an admin change, as the CLI asks it."""
    return f"POST /api/v1/admin/{TARGET_OF.get(level, level)}/{urllib.parse.quote(name, safe='/')}/{action}"


#: what an applied write's answer says that its second entry keeps (`outcome`)
OUTCOME_KEYS = ("admin", "by", "generation", "config_digest", "certificates_taken", "published", "unchanged")


def outcome(answer: Any) -> str:
    """What an applied write's *answer* says of its effect, in a few words ("" for none):
    the fields of `OUTCOME_KEYS` it has."""
    if not isinstance(answer, Mapping):
        return ""
    kept = {key: answer[key] for key in OUTCOME_KEYS if key in answer and answer[key] not in (None, "", [])}
    return json.dumps(kept, sort_keys=True, separators=(",", ":"), default=str) if kept else ""


def _text(value: Any) -> str:
    return value if type(value) is str else ""


class Auditor:
    """Writes the audit entries of one node (see the module docstring)."""

    def __init__(
        self,
        file: AuditFile,
        node: str,
        reactor: IReactorTime,
        bound: RefusalBound | None = None,
        held: Callable[[str], Record | None] | None = None,
    ):
        self.file = file
        self.node = node
        self.reactor = reactor
        self.bound = bound or RefusalBound()
        #: the record the store holds at a key (`Store.raw`), for `taken`
        self.held = held
        self._summary: IDelayedCall | None = None
        self._failing = False

    def new_id(self) -> str:
        return f"{self.node}-{secrets.token_hex(6)}"

    def begin(self, who: Identity | None, source: str, route: str, change: str, change_id: str) -> dict[str, Any]:
        """Record a write about to be made; AuditError when that cannot be done (the write
        must then be refused)."""
        entry: dict[str, Any] = {
            "origin": self.node,
            "id": change_id,
            **_who(who),
            "source": source,
            "route": route,
            "change": change,
            "result": "requested",
        }
        self._write(entry, must=True)
        return entry

    def end(self, begun: Mapping[str, Any], status: int, message: str = "", detail: str = "") -> None:
        """Record how the write *begun* ended: its HTTP *status*, the error's *message*."""
        entry = {**begun, "result": "applied" if status < 400 else "refused", "status": status, "message": message}
        if detail:
            entry["detail"] = detail
        self._write(entry)

    def refused(self, who: Identity | None, source: str, route: str, status: int, message: str) -> None:
        """Record a refused request, within the bound per source and in all."""
        now = self.reactor.seconds()
        self._roll()
        if not self.bound.admit(source, now):
            ends = self.bound.ends()
            if self._summary is None and ends is not None:
                self._summary = self.reactor.callLater(max(0.0, ends - now), self._summarize)
            return
        entry = {"origin": self.node, "id": "", **_who(who), "source": source, "route": route}
        self._write({**entry, "change": "", "result": "refused", "status": status, "message": message})

    def _summarize(self) -> None:
        self._summary = None
        self._roll()

    def _roll(self) -> None:
        left = self.bound.roll(self.reactor.seconds())
        if left is None:
            return
        if self._summary is not None and self._summary.active():
            self._summary.cancel()
        self._summary = None
        self._write(
            {
                "origin": self.node,
                "id": "",
                "who": "",
                "source": "",
                "route": "",
                "change": "",
                "result": "refused",
                "message": left.describe(),
                "detail": f"since {iso_time(left.since)}",
            }
        )

    def taken(self, record: Record) -> None:
        """A store listener: record an admin change made on another member, once, when this
        node takes it."""
        if not record.key.startswith(keys.ADMIN) or record.origin == self.node or record.value is None:
            return
        if self.held is not None and self.held(record.key) is not record:
            return  # (an ending told to listeners: not a change taken)
        parsed = admin.parse_key(record.key)
        state = admin.from_value(parsed[0], parsed[1], record.value) if parsed is not None else None
        if parsed is None or state is None:
            return
        value = record.value
        action = ACTION_OF[state.state]
        made = f"; made there at {iso_time(state.at)}" if state.at is not None else ""
        self._write(
            {
                "origin": record.origin,
                "id": _text(value.get("id")),
                "who": _text(value.get("who")) or state.by,
                "role": _text(value.get("role")),
                "proof": _text(value.get("proof")),
                "source": _text(value.get("source")),
                "route": admin_route(state.level, state.name, action),
                "change": admin_change(state.level, state.name, action, state.reason),
                "result": "applied",
                "detail": f"taken from {record.origin}{made}",
            }
        )

    def _write(self, entry: Mapping[str, Any], must: bool = False) -> None:
        try:
            self.file.write(entry)
        except AuditError as e:
            if not self._failing:
                self._failing = True
                log.error("the audit log cannot be written: {problem}", problem=str(e))
            if must:
                raise
            return
        if self._failing:
            self._failing = False
            log.info("the audit log is written again: {path}", path=str(self.file.path))


def _who(who: Identity | None) -> dict[str, str]:
    if who is None:
        return {"who": "", "role": "", "proof": ""}
    return {"who": who.name, "role": who.role, "proof": who.proof}
