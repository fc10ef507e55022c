"""The API's routes: what each path does, on the node's parts; and the site serving them."""

from __future__ import annotations

import urllib.parse
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from twisted.logger import Logger

from gtmcluster.api import admin, apischema, groupconfig, guard, openapi, proximity, rum, token
from gtmcluster.api.audit import Auditor, Caller, admin_change
from gtmcluster.api.auditlog import PARAMS as AUDIT_PARAMS
from gtmcluster.api.auditlog import audit_route
from gtmcluster.api.connection import Site, site
from gtmcluster.api.dashboard import SCRIPT_PATH, dashboard, dashboard_script
from gtmcluster.api.logs import Logs
from gtmcluster.api.metrics import metrics_steps
from gtmcluster.api.server import ApiError, Route
from gtmcluster.api.status import status_steps
from gtmcluster.api.tls import ApiTLS, expiries
from gtmcluster.runtime import slices, tokenhash
from gtmcluster.runtime.objectstats import object_stats_steps
from gtmcluster.state.admin import LEVEL_NAMES

log = Logger()

if TYPE_CHECKING:
    from gtmcluster.nodeservice import NodeService

Args = Mapping[str, str]
#: what an admin change's body may say: who it is done for, and why
ADMIN_FIELDS = ("by", "reason")


def api_site(service: NodeService, generated: str, api_tls: ApiTLS | None = None) -> Site:
    """The node's API: its routes under the policy of its current config (*generated*: the
    node's own token, for when the config sets none; *api_tls*: its TLS settings, when it
    serves HTTPS)."""
    refused: Counter[str] = Counter()
    closed: Counter[str] = Counter()
    node = service.node
    kept = token.path_in(node.config.state_dir_for(node.member.name))
    log.info(
        "API writes need the bearer token: {where}",
        where="the config's api.token" if node.config.api.token else f"the node's own, kept in {kept}",
    )
    users = node.config.api.users
    if node.config.api.users_file is not None:
        log.info(
            "API identities: {count} of {file}{ca}",
            count=len(users),
            file=node.config.api.users_file,
            ca=f", client certificates of {node.config.api.client_ca}" if node.config.api.client_ca else "",
        )
    auditor = None
    if service.audit_log is not None:
        auditor = Auditor(service.audit_log, node.member.name, service.reactor, held=node.store.raw)
        node.store.subscribe(auditor.taken)  # (admin changes made on other members)
    return site(
        routes(service, refused, closed, api_tls),
        lambda: guard.policy(node.config.api, node.member, generated),
        refused,
        lambda: node.config.api.limits,
        service.reactor,
        closed,
        lambda token, stored: service.in_thread(lambda: tokenhash.verify(token, stored)),
        auditor,
    )


def routes(
    service: NodeService,
    refused: Counter[str] | None = None,
    closed: Counter[str] | None = None,
    api_tls: ApiTLS | None = None,
) -> list[Route]:
    """*refused*, *closed*: the API's refusals and closings by reason, for /metrics;
    *api_tls*: the API's TLS settings, when it serves HTTPS."""
    node = service.node

    def get_status(args: Args, parts: Args) -> Any:
        def more(answer: dict[str, Any]) -> dict[str, Any]:
            # while the path records of the snapshot are still being read (see state.loading)
            answer["loading"] = service.snapshots.loading if service.snapshots is not None else None
            answer["workers"] = service.workers.describe() if service.workers is not None else []
            answer["tls"] = service.peers.tls.describe() if service.peers is not None else None
            answer["api_tls"] = api_tls.describe() if api_tls is not None else None
            now = service.reactor.seconds()
            answer["certificates"] = {e.certificate: e.to_json(now) for e in expiries(service)}
            return answer

        steps = status_steps(node, service.replicator, service.reactor.seconds())
        return slices.run(steps, service.reactor).addCallback(more)

    def post_admin(args: Args, parts: Args) -> Any:
        answer = admin.change(
            node,
            parts.get("target", "virtual-server"),
            parts["name"],
            parts["action"],
            by=args.get("by", ""),
            reason=args.get("reason", ""),
            caller=Caller(
                args.get("caller", ""),
                args.get("caller_role", ""),
                args.get("caller_proof", ""),
                args.get("caller_source", ""),
                args.get("change_id", ""),
            ),
            certificate=args.get("caller_certificate", ""),
        )
        if service.snapshots is None:
            return answer
        # acknowledged means on disk: a node killed right after its 200 keeps the write
        return service.snapshots.flush().addCallback(lambda saved: admin.saved(answer, saved))

    def certificate_serials() -> dict[str, str]:
        return {e.certificate: e.serial for e in expiries(service)}

    def post_reload(args: Args, parts: Args) -> Any:
        before = certificate_serials()

        def done(problems: list[str]) -> Any:
            if problems:
                raise ApiError(422, "the new config is refused; the old one keeps serving:\n" + "\n".join(problems))
            # a certificate renewed (`gtmcluster certs renew`) is taken by a reload: say which
            taken = sorted(name for name, serial in certificate_serials().items() if before.get(name) != serial)
            return {
                "reloaded": True,
                "generation": node.generation,
                "config_digest": node.config.digest,
                "certificates_taken": taken,
            }

        return service.reload().addCallback(done)

    def get_stats(args: Args, parts: Args) -> Any:
        only = args.get("wideip")
        if only is not None:
            only = only.lower().rstrip(".")
            if not any(w.name == only for w in node.config.wideips.values()):
                raise ApiError(404, f"no wide IP named {only!r}")
        steps = object_stats_steps(node.stats, only)
        return slices.run(steps, service.reactor).addCallback(lambda figures: {"node": node.member.name, **figures})

    def get_history(args: Args, parts: Args) -> Any:
        if service.history is None:
            raise ApiError(503, "this node keeps no history")
        return service.history.to_json()

    def whoami(args: Args, parts: Args) -> Any:
        who = {"name": args["caller"], "role": args["caller_role"], "proof": args["caller_proof"]}
        return {"node": node.member.name, **who}

    reactor = service.reactor
    logs = Logs(
        service.node_log,
        reactor,
        service.in_thread,
        lambda: node.config.api.limits,
        closed,
    )
    audit = audit_route(service.audit_log, reactor, service.in_thread, lambda: node.config.api.limits, closed)

    def admin_described(a: Args, p: Args) -> str:
        level = LEVEL_NAMES.get(p.get("target", "virtual-server"), p.get("target", ""))
        return admin_change(level, urllib.parse.unquote(p["name"]), p["action"], a.get("reason", ""))

    # The one table: each route, the role it needs (identity.RANKS: viewer reads what holds
    # no secret, operator changes admin state, admin changes config, reads config text and
    # names of files, reloads); each with its description (`apischema`), for the OpenAPI
    # document (`openapi`), which refuses a route without one
    table = [
        Route("GET", "/", dashboard, role="anyone", doc=apischema.DASHBOARD),
        Route("GET", SCRIPT_PATH, dashboard_script, role="anyone", doc=apischema.DASHBOARD_SCRIPT),
        Route("GET", "/api/v1/whoami", whoami, role="viewer", doc=apischema.WHOAMI, who=True),
        Route("GET", "/api/v1/logs", logs, ("since", "lines", "follow"), role="viewer", doc=apischema.LOGS),
        Route("GET", "/api/v1/audit", audit, AUDIT_PARAMS, role="viewer", doc=apischema.AUDIT),
        Route("GET", "/api/v1/status", get_status, role="viewer", doc=apischema.STATUS),
        Route(
            "GET",
            "/api/v1/health",
            lambda a, p: slices.run(admin.health_steps(node), reactor),
            role="viewer",
            doc=apischema.HEALTH,
        ),
        Route(
            "GET",
            "/api/v1/wideips",
            lambda a, p: slices.run(admin.wideips_steps(node), reactor),
            role="viewer",
            doc=apischema.WIDEIPS,
        ),
        Route(
            "GET",
            "/api/v1/ldns",
            lambda a, p: proximity.ldns_table(node, a),
            ("address", "limit"),
            role="viewer",
            doc=apischema.LDNS,
        ),
        Route(
            "GET",
            "/api/v1/rum",
            lambda a, p: rum.rum_table(node, a),
            ("limit", "ldns", "subnet"),
            role="viewer",
            doc=apischema.RUM,
        ),
        Route(
            "GET",
            "/api/v1/explain",
            lambda a, p: proximity.explain(node, a),
            ("wideip", "ldns", "subnet", "type"),
            role="viewer",
            doc=apischema.EXPLAIN,
        ),
        Route(
            "POST",
            r"/api/v1/virtual-servers/(?P<name>[^/]+)/(?P<action>[^/]+)",
            post_admin,
            body=ADMIN_FIELDS,
            role="operator",
            doc=apischema.VS_ADMIN,
            change=admin_described,
        ),
        Route("GET", "/api/v1/history", get_history, role="viewer", doc=apischema.HISTORY),
        Route("GET", "/api/v1/stats", get_stats, ("wideip",), role="viewer", doc=apischema.STATS),
        Route(
            "GET",
            "/api/v1/admin",
            lambda a, p: {"node": node.member.name, "admin": admin.admin_states(node)},
            role="viewer",
            doc=apischema.ADMIN_STATES,
        ),
        # a pool member's NAME is POOL/SERVER: the action is the last segment
        Route(
            "POST",
            r"/api/v1/admin/(?P<target>[^/]+)/(?P<name>.+)/(?P<action>[^/]+)",
            post_admin,
            body=ADMIN_FIELDS,
            role="operator",
            doc=apischema.ADMIN_CHANGE_DOC,
            change=admin_described,
        ),
        Route(
            "POST",
            "/api/v1/reload",
            post_reload,
            role="admin",
            doc=apischema.RELOAD,
            change=lambda a, p: "reload the config (and the files it names: certificates, users, keys)",
        ),
        # the group's config: config text, names of files
        Route("GET", "/api/v1/config", lambda a, p: groupconfig.describe(service), role="admin", doc=apischema.CONFIG),
        Route(
            "POST",
            "/api/v1/config",
            lambda a, p, raw: groupconfig.push(service, a, raw),
            ("force",),
            raw_body=groupconfig.MAX_PUSH,
            role="admin",
            doc=apischema.PUSH,
            change=lambda a, p: "push a config bundle to the group" + (" (force)" if a.get("force") else ""),
        ),
        Route(
            "GET",
            "/api/v1/config/history",
            lambda a, p: groupconfig.history(service),
            role="admin",
            doc=apischema.CONFIG_HISTORY,
        ),
        Route(
            "GET",
            r"/api/v1/config/bundles/(?P<generation>[0-9]{1,18})",
            lambda a, p: groupconfig.one(service, p["generation"]),
            role="admin",
            doc=apischema.BUNDLE,
        ),
        Route(
            "POST",
            r"/api/v1/config/rollback/(?P<generation>[0-9]{1,18})",
            lambda a, p: groupconfig.rollback(service, a, p["generation"]),
            body=("based_on", "force"),
            role="admin",
            doc=apischema.ROLLBACK,
            change=lambda a, p: (
                f"roll the group's config back to generation {p['generation']}" + (" (force)" if a.get("force") else "")
            ),
        ),
        Route(
            "GET",
            "/metrics",
            lambda a, p: slices.run(metrics_steps(service, refused, closed), reactor),
            role="viewer",
            doc=apischema.METRICS,
        ),
    ]
    described: list[dict[str, Any]] = []

    def get_openapi(args: Args, parts: Args) -> Any:
        # (written once, on first asking: the table does not change while the node runs)
        if not described:
            described.append(openapi.document(table))
        return described[0]

    # the API described (OpenAPI 3.1), for viewers like every read: it holds no secret, but
    # "anyone" stays the dashboard page alone (nothing else answers who shows nothing)
    table.append(Route("GET", "/api/v1/openapi.json", get_openapi, role="viewer", doc=apischema.OPENAPI))
    return table
