"""`gtmcluster audit`'s lines, and the admin record's new fields with members of every
protocol version: the fields that say who made a change (``who``, ``role``, ``proof``,
``source``, ``id``) are taken, and carried unchanged, by a member of version 1 (the schema
it checks with keeps a field it does not know), so a rolling upgrade keeps the group
connected; `gtmcluster audit` writes each entry on one line, escaped."""

from __future__ import annotations

import io
import json

from gtmcluster.cli.audit import AuditPrinter, describe, params_for
from gtmcluster.cli.logs import make_line
from gtmcluster.state import admin, schema

ENTRY: dict[str, object] = {
    "time": "2027-01-15T08:00:00.123456Z",
    "node": "n2",
    "origin": "n1",
    "id": "n1-5f0c9a2b7e41",
    "who": "alice",
    "role": "operator",
    "proof": "token",
    "source": "192.0.2.7",
    "route": "POST /api/v1/admin/datacenter/DC1/disable",
    "change": "disable data center DC1 (maintenance)",
    "result": "applied",
}


def test_the_new_fields_of_an_admin_record_are_taken_by_every_version() -> None:
    value = admin.value(
        "disabled", "alice", "maintenance", 1.0, "n1", who="alice", role="operator", proof="token", source="::1", id="x"
    )
    for version in range(1, schema.NEWEST_VERSION + 1):
        assert schema.problem("admin/vs/vs1", value, "n1", None, version) is None


def test_an_entry_is_one_line_saying_who_did_what_where_and_how_it_ended() -> None:
    assert describe(json.dumps(ENTRY), "n2") == (
        "2027-01-15T08:00:00.123Z alice (operator, token) from 192.0.2.7: "
        "disable data center DC1 (maintenance) (made on n1): applied  [n1-5f0c9a2b7e41]"
    )
    refused = {**ENTRY, "node": "n1", "origin": "n1", "id": "", "who": "", "role": "", "proof": "", "change": ""}
    refused |= {"route": "POST /api/v1/reload", "result": "refused", "status": 401, "message": "this needs\x1b[2J"}
    assert describe(json.dumps(refused), "n1") == (
        "2027-01-15T08:00:00.123Z (no identity) from 192.0.2.7: POST /api/v1/reload: refused 401: this needs\\x1b[2J"
    )
    out = io.StringIO()
    line = make_line("n2", json.dumps(ENTRY, separators=(",", ":")))
    assert line is not None
    AuditPrinter(["n1", "n2"], out, color=False).write([line])
    assert out.getvalue().startswith("n2 | 2027-01-15T08:00:00.123Z alice (operator, token)")
    assert params_for("2027-01-15T08:00:00.000000Z", None, "alice", True) == {
        "since": "2027-01-15T08:00:00.000000Z",
        "who": "alice",
        "follow": "1",
    }
