"""The API's OpenAPI description (`gtmcluster.api.openapi`): written from the route table,
every route in it (path, method, role, parameters, body, answers, errors); a route added
without its description, or with one that does not match it, refused; the node serves the
same document as the shipped docs/openapi.json (`make docs`), which is current."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from gtmcluster.api import apidoc, openapi
from gtmcluster.api.routes import api_site
from gtmcluster.api.server import Route
from gtmcluster.nodeservice import NodeService
from tests.unit.test_api_roles import SINGLE, TOKENS, ask, service, users  # noqa: F401 - fixtures
from tools import openapi as tool

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_description_is_current() -> None:
    """docs/openapi.json is what `make docs` writes from the table now (else: run it)."""
    assert (ROOT / tool.PAGE).read_text(encoding="utf-8") == tool.text(), "docs/openapi.json is out of date: make docs"
    assert tool.main(["--check"]) == 0


def test_the_check_fails_on_a_stale_file(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / tool.PAGE).write_text('{"openapi": "3.1.0"}\n')
    assert tool.main(["--check", "--root", str(tmp_path)]) == 1
    assert tool.main(["--root", str(tmp_path)]) == 0
    assert tool.main(["--check", "--root", str(tmp_path)]) == 0


def test_every_route_of_the_table_is_described() -> None:
    """Each route is one operation, at its path with its parts as {name}, with its role,
    its query parameters, path parts and body fields, its answer, and the errors every
    route may answer (``{"error": ...}``; 401/403 for a route needing an identity, 415 for a
    write)."""
    table = tool.table()
    document = openapi.document(table)
    assert document["openapi"] == "3.1.0"
    operations = [(m.upper(), p) for p, item in document["paths"].items() for m in item]
    assert len(operations) == len(table)
    for route in table:
        path, parts = openapi.template(route.pattern)
        assert re.fullmatch(route.pattern, path.replace("{", "").replace("}", "")) or parts
        found = document["paths"][path][route.method.lower()]
        assert found["x-role"] == route.role and route.role in found["description"]
        given = {(p["in"], p["name"]) for p in found.get("parameters", [])}
        assert given == {("query", n) for n in route.params} | {("path", n) for n in parts}
        assert "200" in found["responses"]
        codes = set(found["responses"])
        assert {"400", "421", "503"} <= codes
        if route.role != "anyone":
            assert {"401", "403"} <= codes and {"bearer": []} in found["security"]
        if route.method == "POST":
            assert "415" in codes and "requestBody" in found
            body = found["requestBody"]["content"]["application/json"]["schema"]
            if route.body:
                assert set(body["properties"]) == set(route.body) and body["additionalProperties"] is False
    error = document["components"]["schemas"]["Error"]
    assert error["required"] == ["error"] and set(error["properties"]) == {"error", "role_needed"}


def test_a_route_without_its_description_is_refused() -> None:
    """The generator refuses a route added to the table without its description, naming it."""
    table = [*tool.table(), Route("GET", "/api/v1/new", lambda a, p: {}, role="viewer")]
    with pytest.raises(openapi.Undescribed, match=r"GET /api/v1/new: no description"):
        openapi.document(table)


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ({"params": ("wideip", "extra")}, "query parameters"),
        ({"pattern": r"/api/v1/config/bundles/(?P<gen>[0-9]{1,18})"}, "path parts"),
        ({"body": ("by",)}, "body fields"),
        ({"raw_body": 0}, "raw_body"),
        ({"pattern": r"/api/v1/(status|health)"}, "not a path with named parts"),
    ],
)
def test_a_description_that_does_not_match_its_route_is_refused(change: dict[str, object], refused: str) -> None:
    """A parameter, part or field the route takes and its description does not name (or
    the other way), or a pattern no OpenAPI path can say, is refused."""
    by_doc = {
        "params": "/api/v1/stats",
        "pattern": "/api/v1/config/bundles/(?P<generation>[0-9]{1,18})",
        "body": "/api/v1/config/rollback/(?P<generation>[0-9]{1,18})",
        "raw_body": "/api/v1/config",
    }
    key = next(iter(change))
    aimed = by_doc[key] if key != "pattern" or "bundles" in str(change[key]) else "/api/v1/status"
    method = "POST" if key in ("body", "raw_body") else "GET"
    table = [dataclasses.replace(r, **change) if (r.pattern, r.method) == (aimed, method) else r for r in tool.table()]
    with pytest.raises(openapi.Undescribed, match=refused):
        openapi.document(table)


def test_the_node_serves_the_shipped_description(service: NodeService) -> None:  # noqa: F811
    """GET /api/v1/openapi.json on the node's real site is docs/openapi.json, for viewers
    and up; without an identity (token_for_reads on) 401."""
    site = api_site(service, SINGLE)
    shipped = json.loads((ROOT / tool.PAGE).read_text(encoding="utf-8"))
    for role in ("viewer", "admin"):
        code, answer = ask(site, "GET", "/api/v1/openapi.json", TOKENS[role])
        assert code == 200 and answer == shipped
    code, answer = ask(site, "GET", "/api/v1/openapi.json", None)
    assert code == 401 and "viewer" in answer["error"]


def test_a_nullable_schema_keeps_its_type() -> None:
    assert apidoc.nullable({"type": "string"}) == {"type": ["string", "null"]}
    assert apidoc.nullable(apidoc.obj({"a": apidoc.STRING})) == {
        "anyOf": [apidoc.obj({"a": apidoc.STRING}), {"type": "null"}]
    }
