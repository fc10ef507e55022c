"""The API's OpenAPI 3.1 description, written from the route table (`routes.routes`): each
route's path, method, the role it needs, its parameters, body and answer (its `RouteDoc`,
``Route.doc``), and the errors every route may answer, ``{"error": ...}`` (with
``role_needed`` for a role too low), as `server.ApiError` and `guard.Refusal` make them.

`document` refuses (`Undescribed`) a route without a description, or whose description does
not name exactly its query parameters, path parts and body fields: a route added to the
table without one fails the tests (``tests/unit/test_api_openapi.py``), and the node's
``GET /api/v1/openapi.json`` and the shipped ``docs/openapi.json`` (``make docs``:
``python -m tools.openapi``) are the same document.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from gtmcluster.api.apidoc import JSON, RouteDoc, Schema
from gtmcluster.api.identity import RANKS
from gtmcluster.api.server import Route

#: the version of the API this document describes (its paths are under /api/v1)
API_VERSION = "1"

_PART = re.compile(r"\(\?P<(\w+)>([^()]*)\)")
#: what is left of a pattern once its named parts are out: a plain path
_PLAIN = re.compile(r"/[A-Za-z0-9/._{}-]*")

ROLES = {
    "anyone": "anyone (no identity needed: the page holds no data)",
    "viewer": "viewer (every read but secrets)",
    "operator": "operator (admin state: enable, disable, drain)",
    "admin": "admin (config, reloads, names of files)",
}

#: the errors every route may answer, and why
EVERY_ROUTE = {
    "400": "a malformed request: a query parameter the route does not take, or given twice; two Host or "
    "Authorization headers; a malformed request line or header",
    "414": "the request line is over 16 KiB",
    "421": "the Host header does not name this node (a name of its API goes in api.names)",
    "431": "a request header is over 16 KiB",
    "503": "busy: as many connections or answers as the node gives at once are in progress (in all, or from "
    "this address)",
}
#: the errors of a route that needs an identity
NEEDING_IDENTITY = {
    "401": "no identity: this needs the bearer token (or client certificate) of an identity with the route's role",
    "403": "a wrong bearer token; or an identity whose role is below the route's (``role_needed`` names it)",
    "429": "too many checks of tokens of the users file at once, or from this address: try again in a few seconds",
}
#: the errors of a write
WRITES = {
    "403": "a wrong bearer token; an identity whose role is below the route's (``role_needed`` names it); or "
    "a cross-origin or cross-site write (Origin, Sec-Fetch-Site)",
    "413": "the request body is over the limit",
    "415": "a write must be Content-Type: application/json",
}

ERROR: Schema = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {"type": "string", "description": "what went wrong, for a person to read"},
        "role_needed": {
            "type": "string",
            "enum": [r for r in RANKS if r != "anyone"],
            "description": "the role the route needs (a 403 to an identity whose role is below it)",
        },
    },
}

SECURITY_SCHEMES = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "a token of the users file (api.users_file), NAME.SECRET as `gtmcluster users add` "
        "prints it; or the config's api.token (api.token_file), an admin; or, when the config sets none, "
        "the node's own in state_dir/api-token, an admin",
    },
    "clientCertificate": {
        "type": "mutualTLS",
        "description": "over HTTPS, a client certificate of the operators' CA (api.tls.client_ca) whose "
        "subject or SAN names an identity of the users file",
    },
}


class Undescribed(ValueError):
    """A route without its description, or one that does not match it."""


def template(pattern: str) -> tuple[str, dict[str, str]]:
    """A route's path pattern as an OpenAPI path (``{name}`` for each named part) and each
    part's pattern; `Undescribed` for a pattern that is more than a path with named parts."""
    parts = dict(_PART.findall(pattern))
    path = _PART.sub(lambda m: "{" + m.group(1) + "}", pattern)
    if not _PLAIN.fullmatch(path):
        raise Undescribed(f"{pattern}: not a path with named parts (?P<name>...) an OpenAPI path can say")
    return path, parts


def operation_id(method: str, path: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "_", path.removeprefix("/api/v1")).strip("_")
    return f"{method.lower()}_{slug or 'dashboard'}"


def _check(route: Route, doc: RouteDoc | None, parts: dict[str, str]) -> RouteDoc:
    where = f"{route.method} {route.pattern}"
    if doc is None:
        raise Undescribed(f"{where}: no description (give its Route a doc=RouteDoc, see gtmcluster/api/apischema.py)")
    for what, named, described in (
        ("query parameters", set(route.params), set(doc.params)),
        ("path parts", set(parts), set(doc.parts)),
        ("body fields", set(route.body), set(doc.fields)),
    ):
        if named != described:
            raise Undescribed(
                f"{where}: its description names the {what} {sorted(described)}, the route takes {sorted(named)}"
            )
    if bool(route.raw_body) != (doc.raw_body is not None):
        raise Undescribed(f"{where}: a route that takes its body whole (raw_body) describes it (RouteDoc.raw_body)")
    if route.method not in ("GET", "POST"):
        raise Undescribed(f"{where}: the API's methods are GET and POST")
    return doc


def _parameters(route: Route, doc: RouteDoc, parts: dict[str, str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name, pattern in parts.items():
        given = doc.parts[name]
        schema = given.schema if given.schema != {"type": "string"} else {"type": "string", "pattern": f"^{pattern}$"}
        out.append({"name": name, "in": "path", "required": True, "description": given.description, "schema": schema})
    for name in route.params:
        param = doc.params[name]
        out.append(
            {"name": name, "in": "query", "required": False, "description": param.description, "schema": param.schema}
        )
    return out


def _request_body(route: Route, doc: RouteDoc) -> dict[str, Any] | None:
    if route.method != "POST":
        return None
    if doc.raw_body is not None:
        return {"required": True, "content": {JSON: {"schema": doc.raw_body}}}
    if route.body:
        schema: Schema = {
            "type": "object",
            "properties": {name: {"type": "string", "description": text} for name, text in doc.fields.items()},
            "additionalProperties": False,
        }
        text = "a JSON object of these text fields, each optional (an empty body is none)"
    else:
        schema = {"description": "not read"}
        text = "not read (a write is Content-Type: application/json all the same)"
    return {"required": False, "description": text, "content": {JSON: {"schema": schema}}}


def _responses(route: Route, doc: RouteDoc) -> dict[str, Any]:
    errors = dict(EVERY_ROUTE)
    if route.role != "anyone":
        errors.update(NEEDING_IDENTITY)
    if route.method == "POST":
        errors.update(WRITES)
    own = {str(code): why for code, why in doc.errors.items()}
    out: dict[str, Any] = {
        "200": {"description": doc.answer_text, "content": {doc.content_type: {"schema": doc.answer}}}
    }
    for code in sorted({*errors, *own}):
        if code in own:
            out[code] = _error(own[code])
        else:  # (one of the common ones, by its name in components.responses)
            out[code] = {"$ref": f"#/components/responses/{_common_name(code, errors[code])}"}
    return out


def _error(why: str) -> dict[str, Any]:
    return {"description": why, "content": {JSON: {"schema": {"$ref": "#/components/schemas/Error"}}}}


def _common_name(code: str, why: str) -> str:
    return f"Error{code}" if why in (EVERY_ROUTE.get(code), NEEDING_IDENTITY.get(code)) else f"Error{code}Write"


def _common() -> dict[str, Any]:
    """The errors every route (or every route needing an identity, or every write) may
    answer, each once, for the operations to name."""
    out = {}
    for table in (EVERY_ROUTE, NEEDING_IDENTITY, WRITES):
        for code, why in table.items():
            out[_common_name(code, why)] = _error(why)
    return dict(sorted(out.items()))


def _security(route: Route) -> list[dict[str, list[str]]]:
    if route.role == "anyone":
        return [{}]
    proven: list[dict[str, list[str]]] = [{"bearer": []}, {"clientCertificate": []}]
    if route.role == "viewer" and route.method == "GET":
        return [*proven, {}]  # (anonymous reads on loopback, where api.token_for_reads is off)
    return proven


def operation(route: Route) -> tuple[str, dict[str, Any]]:
    """A route's OpenAPI path and its operation there."""
    path, parts = template(route.pattern)
    doc = _check(route, route.doc, parts)
    needs = f"Needs the role {ROLES[route.role]}."
    if route.role == "viewer" and route.method == "GET":
        needs += " On a loopback API where api.token_for_reads is off, asked without an identity too."
    found: dict[str, Any] = {
        "operationId": operation_id(route.method, path),
        "summary": doc.summary,
        "description": f"{doc.description}\n\n{needs}".strip(),
        "tags": [route.role],
        "x-role": route.role,
        "security": _security(route),
    }
    parameters = _parameters(route, doc, parts)
    if parameters:
        found["parameters"] = parameters
    body = _request_body(route, doc)
    if body is not None:
        found["requestBody"] = body
    found["responses"] = _responses(route, doc)
    return path, found


def document(routes: Sequence[Route]) -> dict[str, Any]:
    """The OpenAPI 3.1 description of *routes* (the table `routes.routes` returns);
    `Undescribed` when a route has no description or one that does not match it."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        path, found = operation(route)
        method = route.method.lower()
        if method in paths.get(path, {}):
            raise Undescribed(f"{route.method} {path}: two routes of the table")
        paths.setdefault(path, {})[method] = found
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "gtmcluster node API",
            "version": API_VERSION,
            "description": (
                "The HTTP API of a gtmcluster node (and its dashboard page), on its member's api address. "
                "Each operation needs a role (x-role: anyone, viewer, operator, admin, each allowed what the "
                "ones before it are), proven by a bearer token or a client certificate. Every error is JSON, "
                '{"error": TEXT}, with "role_needed" when the identity\'s role is below the route\'s. A GET '
                "route answers HEAD too. Written from the node's route table (gtmcluster/api/routes.py) by "
                "gtmcluster/api/openapi.py: the node serves it at GET /api/v1/openapi.json, and docs/openapi.json "
                "is the same."
            ),
            "license": {"name": "MIT", "identifier": "MIT"},
        },
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": {"Error": ERROR},
            "responses": _common(),
            "securitySchemes": SECURITY_SCHEMES,
        },
        "tags": [{"name": role, "description": f"routes needing the role {text}"} for role, text in ROLES.items()],
    }
