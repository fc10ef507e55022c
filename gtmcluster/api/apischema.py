"""Each API route's description (`apidoc.RouteDoc`), as the route table (`routes.routes`)
gives it to its `Route`: what the route does, what its parameters, path parts and body
fields take, the schema of its answer and the errors of its own. `gtmcluster.api.openapi`
writes the OpenAPI document from the table; a route without one is refused there.

An answer's schema names the fields a client may rely on and their types; an answer may
carry more (objects are open), as it grows over versions."""

from __future__ import annotations

from gtmcluster.api.apidoc import (
    ANY,
    BOOLEAN,
    INTEGER,
    NUMBER,
    OBJECT,
    STRING,
    Param,
    RouteDoc,
    Schema,
    array,
    map_of,
    nullable,
    obj,
)

NODE = {"node": {"type": "string", "description": "the member that answered"}}
ADMIN_STATE: Schema = {"type": "string", "enum": ["enabled", "disabled", "drain"]}
BOOLEAN_TEXT = "1, true, yes; or 0, false, no"

VS_STATE = obj(
    {
        "available": BOOLEAN,
        "serving": BOOLEAN,
        "health": STRING,
        "admin": ADMIN_STATE,
        "held": BOOLEAN,
        "reason": STRING,
    }
)

ADMIN_RECORD = obj(
    {"level": STRING, "name": STRING, "state": ADMIN_STATE},
    {"by": STRING, "reason": STRING, "at": NUMBER, "node": STRING, "configured": BOOLEAN},
)

BUNDLE_HEADER = obj(
    {
        "main": STRING,
        "generation": INTEGER,
        "based_on": INTEGER,
        "publisher": STRING,
        "published_at": NUMBER,
        "digest": STRING,
        "size": INTEGER,
    }
)

DASHBOARD = RouteDoc(
    "the dashboard page",
    {"type": "string"},
    "the page (HTML); it asks the API with the token of its #token=... fragment",
    content_type="text/html",
)

DASHBOARD_SCRIPT = RouteDoc(
    "one of the dashboard page's scripts",
    {"type": "string"},
    "the script (an ES module); the page loads it from the node's own origin, its CSP allows no other",
    parts={"script": Param("the script's file name", {"type": "string", "pattern": "^[a-z]{1,16}\\.js$"})},
    content_type="text/javascript",
    errors={404: "no such script"},
)

WHOAMI = RouteDoc(
    "who the request's credentials prove it is, and its role",
    obj(
        {
            **NODE,
            "name": {"type": "string", "description": "the identity (anonymous: no identity shown, a loopback read)"},
            "role": {"type": "string", "enum": ["viewer", "operator", "admin"]},
            "proof": {"type": "string", "enum": ["token", "api.token", "certificate", "none"]},
        }
    ),
    "the identity",
    "What the dashboard asks to show only what the identity's role may do (the API checks each request "
    "all the same): viewer reads, operator changes admin state, admin changes the config.",
)

LOGS = RouteDoc(
    "the node's own log, as JSON lines",
    {"type": "string"},
    "the node's log lines, one JSON object a line (application/x-ndjson); a follower's answer stays open",
    "The last `lines` lines, or those since a time; `follow` keeps the answer open and sends each new line as "
    "the node logs it (an empty line every 15 s of silence). Followers are capped (api.limits.followers).",
    params={
        "since": Param("only lines at or after this time (ISO 8601, UTC unless it has an offset)"),
        "lines": Param("the last N lines (100 by default)", {"type": "string", "pattern": "^[0-9]{1,9}$"}),
        "follow": Param(f"keep the answer open and send new lines ({BOOLEAN_TEXT})"),
    },
    content_type="application/x-ndjson",
    errors={404: "this node keeps no log of its own"},
)

AUDIT = RouteDoc(
    "the node's audit log, as JSON lines",
    {"type": "string"},
    "the audit entries, one JSON object a line (application/x-ndjson): time, who, role, proof, source, node, "
    "the change and its result; a follower's answer stays open",
    "Every write through the API (recorded before it is made, and again with how it ended), refused requests "
    "(bounded per source) and the admin changes of other members this node took. The last `limit` entries "
    "(100 by default), those since a time, or one identity's (`who`); `follow` keeps the answer open and sends "
    "each new entry. Followers are capped (api.limits.followers).",
    params={
        "since": Param("only entries at or after this time (ISO 8601, UTC unless it has an offset)"),
        "who": Param("only this identity's entries (its name)"),
        "limit": Param("the last N entries (100 by default)", {"type": "string", "pattern": "^[0-9]{1,9}$"}),
        "follow": Param(f"keep the answer open and send new entries ({BOOLEAN_TEXT})"),
    },
    content_type="application/x-ndjson",
    errors={404: "this node keeps no audit log"},
)

PEER = obj(
    {"name": STRING, "connected": BOOLEAN},
    {
        "datacenter": nullable(STRING),
        "counted": BOOLEAN,
        "silent_for": nullable(NUMBER),
        "connected_for": nullable(NUMBER),
        "last_contact_ago": nullable(NUMBER),
        "config_digest": nullable(STRING),
        "config_matches": nullable(BOOLEAN),
        "synced": nullable(BOOLEAN),
        "state_digest": nullable(STRING),
    },
)

#: client proximity in the node's status (`api.proximityfamilies.coverage`)
PROXIMITY_COVERAGE = obj(
    {
        "sources": array(STRING),
        "subnets": INTEGER,
        "populations": INTEGER,
        "decisions": obj({"client": INTEGER, "population": INTEGER, "ldns": INTEGER, "none": INTEGER}),
    }
)

STATUS = RouteDoc(
    "the node: config, state digests, peers, health, admin states, certificates",
    obj(
        {
            **NODE,
            "datacenter": STRING,
            "group": STRING,
            "config_digest": STRING,
            "config_generation": INTEGER,
            "config_loaded_ago": NUMBER,
            "ready": BOOLEAN,
            "admin": array(ADMIN_RECORD),
            "state": obj({"digest": STRING, "records": INTEGER, "agrees": BOOLEAN}),
            "peers": array(PEER),
            "health": obj({"virtual_servers": map_of(VS_STATE), "links": map_of(OBJECT)}),
            "certificates": map_of(OBJECT),
            "workers": array(ANY),
        },
        {
            "loading": nullable(ANY),
            "tls": nullable(OBJECT),
            "api_tls": nullable(OBJECT),
            "bundle": nullable(OBJECT),
            "dnssec_keys": nullable(OBJECT),
            "query_log": nullable(OBJECT),
            "proximity": PROXIMITY_COVERAGE,
        },
    ),
    "the node's status (`gtmcluster status` reads it from every member)",
)

HEALTH = RouteDoc(
    "every virtual server and link: availability, each observer's verdict, why",
    obj(
        {
            **NODE,
            "virtual_servers": map_of(
                obj(
                    {
                        "datacenter": STRING,
                        "monitors": array(STRING),
                        "admin": ADMIN_STATE,
                        "observers": map_of(obj({"up": BOOLEAN, "reason": STRING, "age": NUMBER})),
                    },
                    {
                        "address": nullable(STRING),
                        "record": nullable(STRING),
                        "monitor": nullable(STRING),
                        "available": nullable(BOOLEAN),
                        "serving": nullable(BOOLEAN),
                        "health": nullable(STRING),
                        "weight": NUMBER,
                    },
                )
            ),
            "links": map_of(obj({"datacenter": STRING, "state": STRING, "reason": STRING, "observers": OBJECT})),
        }
    ),
)

MEMBER = obj(
    {"name": STRING, "datacenter": STRING, "ratio": INTEGER, "available": BOOLEAN, "admin": ADMIN_STATE},
    {"address": nullable(STRING), "record": nullable(STRING)},
)
POOL = obj(
    {
        "name": STRING,
        "ratio": INTEGER,
        "methods": array(STRING),
        "ttl": INTEGER,
        "members": array(MEMBER),
        "fallback_ip": array(STRING),
        "admin": ADMIN_STATE,
    }
)

WIDEIPS = RouteDoc(
    "wide IPs, their pools, methods, members and availability",
    obj(
        {
            **NODE,
            "wideips": map_of(
                obj(
                    {
                        "types": array(STRING),
                        "pool_lb": STRING,
                        "pools": array(POOL),
                        "failure_response": STRING,
                        "aliases": array(STRING),
                        "admin": ADMIN_STATE,
                    },
                    {"last_resort_pool": nullable(STRING), "persistence": nullable(OBJECT)},
                )
            ),
        }
    ),
)

PATH = obj(
    {"datacenter": STRING, "protocol": STRING, "age": NUMBER},
    {
        "rtt_us": nullable(NUMBER),
        "last_rtt_us": nullable(NUMBER),
        "hops": nullable(INTEGER),
        "completion_rate": nullable(NUMBER),
        "measured_by": nullable(STRING),
        "failures": nullable(INTEGER),
    },
)

LDNS = RouteDoc(
    "the proximity table: one LDNS's paths, or the first `limit` paths of the whole table",
    obj(
        {
            **NODE,
            "ldns": array(obj({"address": STRING, "ttl": INTEGER, "probe_protocol": STRING, "paths": array(PATH)})),
            "truncated": BOOLEAN,
        }
    ),
    params={
        "address": Param("one LDNS (an IP address)"),
        "limit": Param("paths listed at most (1 to 100000; 1000 by default)"),
    },
    errors={400: "address is not an IP address; limit is not a whole number from 1 to 100000"},
)

RUM_SUBNET = obj(
    {"subnet": STRING, "age": NUMBER, "datacenters": map_of(OBJECT)},
)
RUM_POPULATION = obj(
    {"ldns": STRING, "subnets": INTEGER, "n": INTEGER, "rtt_us": map_of(INTEGER), "age": NUMBER},
    {"members": array(obj({"subnet": STRING, "count": INTEGER, "figures": nullable(RUM_SUBNET)}))},
)

RUM = RouteDoc(
    "the client table (issue 36): client subnets' RTT per data center, newest first, and LDNS populations",
    obj(
        {**NODE, "sources": array(STRING), "held": obj({"client_figures": INTEGER, "populations": INTEGER})},
        {
            "min_samples": nullable(INTEGER),
            "limit": INTEGER,
            "subnets": array(RUM_SUBNET),
            "populations": array(RUM_POPULATION),
            "truncated": BOOLEAN,
            "population": nullable(RUM_POPULATION),
            "subnet": nullable(RUM_SUBNET),
        },
    ),
    params={
        "limit": Param(
            "client subnets and populations listed at most, the most recently written first (1 to 1000; 50 by default)"
        ),
        "ldns": Param("one LDNS's population, with each of its client subnets and their counts (an IP address)"),
        "subnet": Param("one client subnet: an address or a network within one /24 (IPv4) or /48 (IPv6)"),
    },
    errors={
        400: "limit is not a whole number from 1 to 1000; ldns is not an IP address; subnet is not an address "
        "or network, or wider than a /24 or /48",
    },
)

#: which proximity source decided an explained decision (`lb.sourcewhy.explained`)
EXPLAINED_SOURCE = obj(
    {
        "source": nullable(STRING),
        "name": STRING,
        "text": STRING,
        "datacenters": array(
            obj(
                {"datacenter": STRING, "rtt_ms": nullable(NUMBER), "ldns_rtt_ms": nullable(NUMBER), "text": STRING},
                {"from_source": STRING, "age": NUMBER},
            )
        ),
        "passed_over": array(obj({"source": STRING, "reason": STRING})),
    },
    {"subject": STRING, "samples": nullable(INTEGER), "scope": INTEGER, "step": STRING},
)

EXPLAIN = RouteDoc(
    "the decision the node would make for a query, step by step (nothing is recorded)",
    obj(
        {
            "wideip": STRING,
            "name": STRING,
            "type": STRING,
            "client": obj({"ldns": STRING, "subnet": nullable(STRING), "keys": STRING}),
            "action": STRING,
            "answer": array(STRING),
            "members": array(STRING),
            "probe_requested": BOOLEAN,
            "trace": array(
                obj(
                    {
                        "subject": STRING,
                        "slot": STRING,
                        "method": STRING,
                        "candidates": array(STRING),
                        "scores": array(array(ANY)),
                        "result": array(STRING),
                        "note": STRING,
                        "text": STRING,
                    },
                    {"datacenters": ANY},
                )
            ),
            "admin": array(OBJECT),
            "unhealthy": array(OBJECT),
        },
        {
            "pool": nullable(STRING),
            "method": nullable(STRING),
            "ttl": nullable(INTEGER),
            "scope": nullable(INTEGER),
            "proximity": EXPLAINED_SOURCE,
        },
    ),
    params={
        "wideip": Param("the name asked: a wide IP's name, an alias, or a name a wildcard wide IP covers"),
        "ldns": Param("the asking resolver's address"),
        "subnet": Param("the client subnet (EDNS Client Subnet) the query carries, such as 10.0.0.0/8"),
        "type": Param("the query type (A, AAAA, ...; the wide IP's first by default)"),
    },
    errors={
        400: "no wideip or ldns given, or not a name or address; a subnet that is not a network; a type the wide "
        "IP does not answer",
        404: "no wide IP answers that name",
    },
)

ADMIN_PARTS = {
    "name": Param("the object's name (a pool member's: POOL/SERVER, its slash as it is or as %2F)"),
    "action": Param("enable, disable or drain"),
}
ADMIN_FIELDS = {"by": "who the change is made for", "reason": "why"}
ADMIN_CHANGE = obj(
    {
        "target": STRING,
        "name": STRING,
        "admin": ADMIN_STATE,
        "by": STRING,
        "why": STRING,
        "at": NUMBER,
        **NODE,
    },
    {
        "virtual_server": STRING,
        "released_hold": BOOLEAN,
        "available": nullable(BOOLEAN),
        "reason": STRING,
        "virtual_servers": map_of(obj({"available": BOOLEAN, "serving": BOOLEAN})),
        "virtual_servers_total": INTEGER,
    },
)
ADMIN_ERRORS = {
    400: "'by' or 'reason' too long; a body that is not a JSON object of text fields, or with other fields",
    404: "no such target, name or action",
    503: "busy; or the change holds (in memory, replicated) but the state could not be saved to disk",
}

VS_ADMIN = RouteDoc(
    "enable, disable or drain a virtual server (the older path of POST /api/v1/admin/...)",
    ADMIN_CHANGE,
    "the change as recorded, and the virtual server's availability now",
    "Replicated: every member obeys. Answered once the state snapshot holding it is on disk. Enabling also "
    "releases a manual-resume hold.",
    parts={"name": Param("the virtual server's name"), "action": ADMIN_PARTS["action"]},
    fields=ADMIN_FIELDS,
    errors=ADMIN_ERRORS,
)

ADMIN_CHANGE_DOC = RouteDoc(
    "enable, disable or drain an object at any level",
    ADMIN_CHANGE,
    "the change as recorded (for a data center or link, its virtual servers' availability now)",
    "Replicated: every member obeys. Answered once the state snapshot holding it is on disk.",
    parts={
        "target": Param("datacenter, link, pool, pool-member, wideip or virtual-server"),
        **ADMIN_PARTS,
    },
    fields=ADMIN_FIELDS,
    errors=ADMIN_ERRORS,
)

HISTORY = RouteDoc(
    "the node's last hour, sampled every 10 s: queries, answers and RTTs per data center, events",
    obj(
        {
            **NODE,
            "interval": NUMBER,
            "window": NUMBER,
            "now": NUMBER,
            "times": array(NUMBER),
            "queries_per_second": map_of(array(ANY)),
            "answers_per_second": map_of(array(ANY)),
            "rtt_ms": map_of(array(ANY)),
            "events": array(OBJECT),
        },
        {"rtt_summary": STRING, "wideips_with_queries": INTEGER},
    ),
    errors={503: "busy; or this node keeps no history"},
)

STATS = RouteDoc(
    "answers per wide IP and pool, and why",
    obj({**NODE, "wideips": map_of(OBJECT), "pools": map_of(OBJECT)}),
    params={"wideip": Param("only this wide IP (its name)")},
    errors={404: "no wide IP of that name"},
)

ADMIN_STATES = RouteDoc(
    "every admin state operators set, and the config's own that no operator overrides",
    obj({**NODE, "admin": array(ADMIN_RECORD)}),
)

RELOAD = RouteDoc(
    "read the config file again (as SIGHUP does; with config sync, a changed file is published to the group)",
    obj({"reloaded": BOOLEAN, "generation": INTEGER, "config_digest": STRING}),
    errors={422: "the new config is refused (every problem named); the old one keeps serving"},
)

NO_BUNDLES = "busy; or this node keeps no config bundles (it was not started as a member)"

CONFIG = RouteDoc(
    "the group's shared config: the bundle this member holds, runs and refused, and each peer's",
    obj(
        {**NODE, "config_sync": BOOLEAN, "members": map_of(OBJECT)},
        {"file": nullable(STRING), "held": nullable(OBJECT), "running": nullable(OBJECT), "refused": nullable(ANY)},
    ),
    errors={503: NO_BUNDLES},
)

PUSH = RouteDoc(
    "publish a config bundle to the group (`gtmcluster config push` makes and sends it)",
    obj({"published": nullable(BUNDLE_HEADER), "unchanged": BOOLEAN}),
    "the bundle's header as published (its generation and publisher set here), once this member runs it",
    params={"force": Param(f"publish even when based on an older generation than the group's ({BOOLEAN_TEXT})")},
    raw_body=obj(
        {
            "format": ANY,
            "main": STRING,
            "generation": INTEGER,
            "based_on": INTEGER,
            "publisher": STRING,
            "published_at": NUMBER,
            "digest": STRING,
            "files": map_of({"type": "string", "contentEncoding": "base64"}),
        }
    ),
    errors={
        400: "not a config bundle; force is not true or false",
        409: "the bundle is based on an older generation than the group's",
        422: "the bundle is refused (every problem named); nothing changed on any member",
        503: NO_BUNDLES,
    },
)

CONFIG_HISTORY = RouteDoc(
    "the bundles this member holds, newest first",
    obj(
        {**NODE, "bundles": array({**BUNDLE_HEADER, "properties": {**BUNDLE_HEADER["properties"], "running": BOOLEAN}})}
    ),
    errors={503: NO_BUNDLES},
)

GENERATION = Param("a bundle's generation", {"type": "string", "pattern": "^[0-9]{1,18}$"})

BUNDLE = RouteDoc(
    "one bundle held, as it was sent (for pull and diff)",
    PUSH.raw_body or OBJECT,
    "the bundle, file contents in base64",
    parts={"generation": GENERATION},
    errors={404: "that generation is not held here", 503: NO_BUNDLES},
)

ROLLBACK = RouteDoc(
    "publish a bundle held again, as a new generation",
    PUSH.answer,
    "the bundle's header as published again",
    parts={"generation": GENERATION},
    fields={
        "based_on": "the generation the group must be at (a whole number), else 409",
        "force": f"publish even when the group is at a newer generation ({BOOLEAN_TEXT})",
    },
    errors={
        400: "based_on is not a generation; force is not true or false; a body that is not a JSON object of text "
        "fields, or with other fields",
        404: "that generation is not held here",
        409: "the group is at another generation than based_on",
        422: "the bundle is refused (every problem named); nothing changed on any member",
        503: NO_BUNDLES,
    },
)

METRICS = RouteDoc(
    "the node's metrics in Prometheus's text format",
    {"type": "string"},
    "Prometheus exposition text (version 0.0.4)",
    content_type="text/plain",
)

OPENAPI = RouteDoc(
    "this description of the API (OpenAPI 3.1), written from the node's route table",
    obj({"openapi": {"type": "string", "const": "3.1.0"}, "info": OBJECT, "paths": map_of(OBJECT)}),
    "the OpenAPI document (docs/openapi.json holds the same)",
)
