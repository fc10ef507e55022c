"""The API's routes: what each path does, on the node's parts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gtmcluster.api import admin, proximity
from gtmcluster.api.dashboard import dashboard
from gtmcluster.api.metrics import metrics_handler
from gtmcluster.api.server import ApiError, Route
from gtmcluster.api.status import status

if TYPE_CHECKING:
    from gtmcluster.service import NodeService

Args = Mapping[str, str]


def routes(service: NodeService) -> list[Route]:
    node = service.node

    def get_status(args: Args, parts: Args) -> Any:
        answer = status(node, service.replicator, service.reactor.seconds())
        # while the path records of the snapshot are still being read (see state.loading)
        answer["loading"] = service.snapshots.loading if service.snapshots is not None else None
        answer["workers"] = service.workers.describe() if service.workers is not None else []
        answer["tls"] = service.peers.tls.describe() if service.peers is not None else None
        return answer

    def post_admin(args: Args, parts: Args) -> Any:
        answer = admin.set_admin(node, parts["name"], parts["action"])
        if service.snapshots is None:
            return answer
        # acknowledged means on disk: a node killed right after its 200 keeps the write
        return service.snapshots.flush().addCallback(lambda saved: admin.saved(answer, saved))

    def post_reload(args: Args, parts: Args) -> Any:
        def done(problems: list[str]) -> Any:
            if problems:
                raise ApiError(422, "the new config is refused; the old one keeps serving:\n" + "\n".join(problems))
            return {"reloaded": True, "generation": node.generation, "config_digest": node.config.digest}

        return service.reload().addCallback(done)

    return [
        Route("GET", "/", dashboard, public=True),
        Route("GET", "/api/v1/status", get_status),
        Route("GET", "/api/v1/health", lambda a, p: admin.health(node)),
        Route("GET", "/api/v1/wideips", lambda a, p: admin.wideips(node)),
        Route("GET", "/api/v1/ldns", lambda a, p: proximity.ldns_table(node, a), ("address", "limit")),
        Route("GET", "/api/v1/explain", lambda a, p: proximity.explain(node, a), ("wideip", "ldns", "subnet", "type")),
        Route("POST", r"/api/v1/virtual-servers/(?P<name>[^/]+)/(?P<action>[^/]+)", post_admin),
        Route("POST", "/api/v1/reload", post_reload),
        Route("GET", "/metrics", lambda a, p: metrics_handler(service)),
    ]
