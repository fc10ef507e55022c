"""What a route says of itself for the API's OpenAPI description: `RouteDoc`, given to each
`server.Route` of the table (``Route.doc``), and the JSON Schema helpers the descriptions are
written with (`gtmcluster.api.apischema` holds them; `gtmcluster.api.openapi` writes the
document and refuses a route without one, or with one that does not match it).

A description names what the route itself cannot: a summary, what each query parameter,
path part and body field means and takes (their names come from the route, and must match),
the schema of its answer (and its content type), and the errors it answers besides those
every route may (``{"error": ...}`` for each)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Schema = dict[str, Any]

JSON = "application/json"


@dataclass(frozen=True)
class Param:
    """A query parameter (or a path part): what it means, and what it takes."""

    description: str
    schema: Schema = field(default_factory=lambda: {"type": "string"})


@dataclass(frozen=True)
class RouteDoc:
    """A route described: *summary* (one line) and *description*; *params*: each of the
    route's query parameters (`Route.params`); *parts*: each named part of its path (their
    schema is the pattern's own, unless given here); *fields*: each text field of its JSON
    body (`Route.body`); *raw_body*: the schema of the whole body it takes (`Route.raw_body`);
    *answer*: the schema of its answer (under *content_type*), and *answer_text*: what it is;
    *errors*: the statuses it answers besides those of every route, with why."""

    summary: str
    answer: Schema
    answer_text: str = "the answer"
    description: str = ""
    params: Mapping[str, Param] = field(default_factory=dict)
    parts: Mapping[str, Param] = field(default_factory=dict)
    fields: Mapping[str, str] = field(default_factory=dict)
    raw_body: Schema | None = None
    content_type: str = JSON
    errors: Mapping[int, str] = field(default_factory=dict)


def obj(required: Mapping[str, Schema], optional: Mapping[str, Schema] | None = None, more: bool = True) -> Schema:
    """A JSON object with *required* and *optional* properties (*more*: others may come too,
    as an answer grows fields over versions)."""
    out: Schema = {"type": "object", "properties": {**required, **(optional or {})}}
    if required:
        out["required"] = sorted(required)
    if not more:
        out["additionalProperties"] = False
    return out


def map_of(values: Schema) -> Schema:
    """A JSON object whose keys are names (of servers, data centers...) and values *values*."""
    return {"type": "object", "additionalProperties": values}


def array(items: Schema) -> Schema:
    return {"type": "array", "items": items}


def nullable(schema: Schema) -> Schema:
    """*schema*, or null."""
    kind = schema.get("type")
    if isinstance(kind, str) and set(schema) <= {"type", "description", "enum", "format"} and "enum" not in schema:
        return {**schema, "type": [kind, "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


STRING: Schema = {"type": "string"}
NUMBER: Schema = {"type": "number"}
INTEGER: Schema = {"type": "integer"}
BOOLEAN: Schema = {"type": "boolean"}
OBJECT: Schema = {"type": "object"}
ANY: Schema = {}
