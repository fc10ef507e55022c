"""The API's OpenAPI description against a real node (``twistd gtm``), fuzzed by
schemathesis with each role's identity.

The node serves ``GET /api/v1/openapi.json``: the document schemathesis loads, which is
docs/openapi.json, with an operation for every route of the node's table. Then, as a
viewer, an operator and an admin (tokens of the users file, made by `gtmcluster users
add`), schemathesis asks every operation with generated input (valid and invalid) and
checks each answer: no 500, a status the description lists, its content type, and a body
its schema allows (a 403 for a role too low is one of them). The reads go first, the
writes after (they change admin state, reload and publish; none can stop the node: a
generated bundle is never a valid one), and the node still answers after. A log follower
(``follow=1``) stays open by design for a token holder: its generated ``follow`` is left
out, the rest of that route is fuzzed. Bounded: a few examples per operation and role,
a deadline per call.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.process.test_api_https import gtmcluster
from tests.support import configs
from tests.support.nodeproc import RunningNode, loopback_address, running_node
from tools import openapi as tool

pytestmark = [pytest.mark.process, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SINGLE = "the-single-api-token-0123456789"
ROLES = ("viewer", "operator", "admin")
#: examples per operation, role and mode (valid input, invalid input)
EXAMPLES = 5
#: seconds one call may take
DEADLINE = 5.0
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
#: what makes a log follower (`api.logs.TRUE`): an answer kept open, not fuzzed
FOLLOW = ("1", "true", "yes")


@dataclass
class Node:
    running: RunningNode
    tokens: dict[str, str]

    @property
    def base(self) -> str:
        return f"http://{self.running.address}:8053"

    def headers(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    directory = tmp_path_factory.mktemp("api-openapi")
    tokens = {}
    for role in ROLES:
        ran = gtmcluster("users", "add", f"{role}-1", "--role", role, "--file", "users.yaml", cwd=directory)
        assert ran.returncode == 0, ran.stderr
        tokens[role] = ran.stdout.strip()
    address = loopback_address()
    raw = configs.base(address, 5353)
    configs.write_secret(directory / "api-token", SINGLE + "\n")
    raw["api"] = {"token_file": "api-token", "token_for_reads": True, "users_file": "users.yaml"}
    path = configs.write(directory, raw)
    with running_node(path, "n1", address, 5353, directory) as running:
        yield Node(running, tokens)


def operations_of(schema: Any) -> list[Any]:
    """The operations of *schema*, each one schemathesis could read."""
    found = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), f"an operation schemathesis cannot read: {result.err()}"
        found.append(result.ok())
    return found


def fuzz(node: Node, schema: Any, role: str, method: str) -> int:
    """Every *method* operation of *schema* asked by *role* with generated input; the
    answers checked. How many requests were made."""
    asked = 0
    session = requests.Session()
    for operation in operations_of(schema):
        if operation.method.upper() != method:
            continue
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            def ask(case: Any) -> None:
                nonlocal asked
                if case.query and str(case.query.get("follow", "")).lower() in FOLLOW:
                    del case.query["follow"]
                asked += 1
                case.call_and_validate(
                    base_url=node.base, session=session, headers=node.headers(role), checks=CHECKS, timeout=DEADLINE
                )

            try:
                ask()
            except Unsatisfiable:  # (no input of the operation can be made invalid: nothing to send)
                assert mode is GenerationMode.NEGATIVE
            except Exception as e:
                raise AssertionError(f"{role}, {mode.value}: {operation.method.upper()} {operation.path}: {e}") from e
    return asked


def test_schemathesis_finds_no_500_and_no_answer_the_description_forbids(node: Node) -> None:
    started = time.monotonic()
    served = requests.get(f"{node.base}/api/v1/openapi.json", headers=node.headers("viewer"), timeout=DEADLINE)
    assert served.status_code == 200 and served.headers["content-type"] == "application/json"
    document = served.json()
    # the node's description is the shipped one, and holds every route of the node's table
    assert document == json.loads((ROOT / tool.PAGE).read_text(encoding="utf-8"))
    operations = {(m.upper(), p) for p, item in document["paths"].items() for m in item}
    assert len(operations) == len(tool.table())
    schema = schemathesis.openapi.from_url(
        f"{node.base}/api/v1/openapi.json", headers=node.headers("viewer"), timeout=DEADLINE
    )
    fuzzed = {(o.method.upper(), o.path) for o in operations_of(schema)}
    # (schemathesis leaves out the document's own path: asked above)
    assert fuzzed | {("GET", "/api/v1/openapi.json")} == operations
    asked = 0
    for method in ("GET", "POST"):  # (the reads before the writes change the node)
        for role in ROLES:
            asked += fuzz(node, schema, role, method)
    assert asked >= len(fuzzed) * len(ROLES) * 2
    # the node still answers, and kept every write of the run to the description
    health = requests.get(f"{node.base}/api/v1/health", headers=node.headers("viewer"), timeout=DEADLINE)
    assert health.status_code == 200 and health.json()["node"] == "n1"
    assert "Traceback" not in node.running.log_text()
    print(f"{asked} requests in {time.monotonic() - started:.1f} s")
