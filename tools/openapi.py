"""docs/openapi.json, the API's OpenAPI 3.1 description, written from the route table: `make docs`.

The document is `gtmcluster.api.openapi.document` of the table `gtmcluster.api.routes.routes`
returns, the very one a node serves at ``GET /api/v1/openapi.json``. The table is built here
without a node (its handlers are never called: only what each route declares is read).
``python -m tools.openapi`` writes the file; with ``--check`` it only says whether the file
holds what it would write. ``tests/unit/test_api_openapi.py`` fails when it does not, so a
route added or changed without `make docs` fails `make test`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from gtmcluster.api import openapi, routes

if TYPE_CHECKING:
    from gtmcluster.nodeservice import NodeService

ROOT = Path(__file__).resolve().parents[1]
PAGE = Path("docs/openapi.json")


def table() -> list[Any]:
    """The route table, as a node builds it, with no node behind it."""
    unbound = SimpleNamespace(node=None, node_log=None, audit_log=None, reactor=None, in_thread=None)
    return routes.routes(cast("NodeService", unbound))


def text() -> str:
    """docs/openapi.json as it should be."""
    return json.dumps(openapi.document(table()), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the file is current (exit 1 if not)")
    parser.add_argument("--root", type=Path, default=ROOT)
    args = parser.parse_args(argv)
    path = args.root / PAGE
    wanted = text()
    current = path.read_text(encoding="utf-8") if path.exists() else ""
    if args.check:
        if current != wanted:
            print(f"{PAGE} is out of date: run `make docs`", file=sys.stderr)
            return 1
        return 0
    if current != wanted:
        path.write_text(wanted, encoding="utf-8")
        print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
