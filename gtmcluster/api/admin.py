"""Health and wide IP views, and the operator's admin actions at every level (`state.admin`)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from gtmcluster.api.audit import Caller
from gtmcluster.api.server import ApiError
from gtmcluster.config.model import Config
from gtmcluster.config.traffic import TYPE_NAMES
from gtmcluster.config.wideipnames import is_wildcard
from gtmcluster.dnsdata import names
from gtmcluster.lb import linkload
from gtmcluster.node import Node
from gtmcluster.runtime.slices import Steps, whole
from gtmcluster.state import admin, keys
from gtmcluster.state.schema import MAX_NAME, MAX_TEXT

ACTIONS = admin.ACTIONS


#: servers (or wide IPs) described per step of a sliced answer
PER_STEP = 100


def health(node: Node) -> dict[str, Any]:
    return whole(health_steps(node))


def health_steps(node: Node) -> Steps[dict[str, Any]]:
    """Every server and link: the combined status and each observer's own verdict."""
    snapshot = node.health.snapshot
    now = node.clock()

    def verdicts(prefix: str) -> dict[str, Any]:
        return {
            r.origin: {
                "up": bool(r.value.get("up")),
                "reason": str(r.value.get("reason", "")),
                "age": round(now - r.born, 1),
            }
            for r in node.store.children(prefix)
            if isinstance(r.value, dict)
        }

    servers = {}
    for n, (name, vs) in enumerate(node.config.virtual_servers.items()):
        if n % PER_STEP == PER_STEP - 1:
            yield None
        s = snapshot.vs.get(name)
        servers[name] = {
            "address": f"{vs.address}:{vs.port}" if vs.address is not None else None,
            "record": vs.target.text if vs.target is not None else None,  # (config.targets)
            "datacenter": vs.datacenter,
            "monitor": ", ".join(m.name for m in vs.monitors) or None,
            "monitors": [m.name for m in vs.monitors],
            "monitor_rule": str(vs.monitor_rule),
            "available": s.available if s else None,
            "serving": s.serving if s else None,
            "health": s.health if s else None,
            "admin": s.admin if s else vs.admin_state,
            "held": s.held if s else False,
            "reason": s.reason if s else "",
            "weight": node.health.weight(vs, now),
            "observers": verdicts(keys.observations("vs", name)),
        }
    links = {}
    for name, link in node.config.links.items():
        observed = snapshot.links.get(name)
        links[name] = {
            "datacenter": link.datacenter,
            "targets": [str(t) for t in link.targets],
            "state": observed.state if observed else "unknown",
            "reason": observed.reason if observed else "",
            "observers": verdicts(keys.observations("link", name)),
            **linkload.summary(link, linkload.load_held(node.store, name)),
        }
    return {"node": node.member.name, "virtual_servers": servers, "links": links}


def wideips(node: Node) -> dict[str, Any]:
    return whole(wideips_steps(node))


def wideips_steps(node: Node) -> Steps[dict[str, Any]]:
    snapshot = node.health.snapshot
    states = snapshot.admin  # (operators' records of pools, pool members and wide IPs)
    out = {}
    for n, wideip in enumerate(node.config.wideips.values()):
        if n % PER_STEP == PER_STEP - 1:
            yield None
        pools = []
        for ref in wideip.pools:
            pool = ref.pool
            pools.append(
                {
                    "name": pool.name,
                    "ratio": ref.ratio,
                    "methods": list(pool.methods.names()),
                    "ttl": pool.ttl,
                    "members": [
                        {
                            "name": m.name,
                            "address": str(m.vs.address) if m.vs.address is not None else None,
                            "record": m.vs.target.text if m.vs.target is not None else None,
                            "datacenter": m.vs.datacenter,
                            "ratio": m.ratio,
                            "available": snapshot.vs_up(m.vs),
                            "admin": _admin(states, "member", f"{pool.name}/{m.name}", m.admin_state),
                        }
                        for m in pool.members
                    ],
                    "fallback_ip": [str(a) for a in pool.fallback_ips],
                    "admin": _admin(states, "pool", pool.name, pool.admin_state),
                }
            )
        out[wideip.name] = {
            "types": sorted(TYPE_NAMES[t] for t in wideip.types),
            "pool_lb": wideip.pool_lb,
            "pools": pools,
            "last_resort_pool": wideip.last_resort.name if wideip.last_resort else None,
            "persistence": {"ttl": wideip.persistence.ttl} if wideip.persistence else None,
            "failure_response": wideip.failure_response,
            "aliases": [names.to_text(a).rstrip(".") for a in wideip.aliases],
            "admin": _admin(states, "wideip", wideip.name, wideip.admin_state),
        }
    return {"node": node.member.name, "wideips": out}


def _admin(states: Mapping[str, admin.AdminState], level: str, name: str, configured: str) -> str:
    """The admin state that applies to an object: an operator's record, else the config's."""
    held = states.get(f"{level}/{name}")
    return configured if held is None else held.state


def set_admin(node: Node, name: str, action: str) -> dict[str, Any]:
    """enable / disable / drain a virtual server (``POST /api/v1/virtual-servers/NAME/ACTION``,
    the older path of `change`)."""
    return change(node, "virtual-server", name, action)


def change(
    node: Node,
    target: str,
    name: str,
    action: str,
    by: str = "",
    reason: str = "",
    caller: Caller | None = None,
    certificate: str = "",
) -> dict[str, Any]:
    """enable / disable / drain an object (*target*: a level as the CLI names it, see
    `state.admin.LEVEL_NAMES`) for the whole sync group: a replicated admin record saying
    who, why and when. Who (the record's ``by``) is the *caller*'s identity when it is a
    person's (a token of the users file, a certificate), with whom it says it acts for
    (*by*) in brackets when that differs; with the shared single token, the name on the
    client certificate the connection showed (*certificate*, as before roles), else what it
    says (*by*, else "api"). The record carries the caller too (`Caller.fields`: the identity, its role
    and proof, the source, the audit entries' id), so that every member's audit shows who
    made it. Enabling a virtual server also releases a manual-resume hold."""
    level = admin.LEVEL_NAMES.get(target)
    if level is None:
        raise ApiError(404, f"no admin target {target!r} (targets: {', '.join(admin.LEVEL_NAMES)})")
    state = admin.ACTIONS.get(action)
    if state is None:
        raise ApiError(404, f"no action {action!r} (use enable, disable or drain)")
    name = _known_name(node, level, urllib.parse.unquote(name))
    if len(by) > MAX_NAME:
        raise ApiError(400, f"'by' is longer than {MAX_NAME} characters")
    if len(reason) > MAX_TEXT:
        raise ApiError(400, f"'reason' is longer than {MAX_TEXT} characters")
    # a person's identity, else the name on the client certificate that came with the
    # shared token, says who; *by* (who the caller says it acts for) in brackets
    named = caller.name if caller is not None and caller.personal else certificate
    who = (f"{named} (for {by})" if by and by != named else named) if named else (by or "api")
    now = node.clock()
    carried = caller.fields() if caller is not None else {}
    node.store.put(keys.admin(level, name), admin.value(state, who, reason, now, node.member.name, **carried))
    released = False
    if level == "vs" and state == admin.ENABLED and node.store.delete(keys.held(name)) is not None:
        released = True
    answer: dict[str, Any] = {
        "target": target,
        "name": name,
        "admin": state,
        "by": who,
        "why": reason,
        "at": now,
        "node": node.member.name,
    }
    snapshot = node.health.snapshot
    if level == "vs":
        status = snapshot.vs.get(name)
        answer.update(
            virtual_server=name,
            released_hold=released,
            available=status.available if status else None,
            reason=status.reason if status else "",
        )
    elif level in ("datacenter", "link"):
        servers = [
            vs.name
            for vs in node.config.virtual_servers.values()
            if (vs.datacenter if level == "datacenter" else (vs.link.name if vs.link else None)) == name
        ]
        answer["virtual_servers"] = {
            n: {"available": snapshot.vs[n].available, "serving": snapshot.vs[n].serving}
            for n in servers[:PER_STEP]
            if n in snapshot.vs
        }
        answer["virtual_servers_total"] = len(servers)
    return answer


def _known_name(node: Node, level: str, name: str) -> str:
    """*name* as the running config spells it; 404 unless it is an object of *level* there."""
    config = node.config
    if level == "vs":
        known = name in config.virtual_servers
    elif level == "datacenter":
        known = name in config.datacenters
    elif level == "link":
        known = name in config.links
    elif level == "pool":
        known = name in config.pools
    elif level == "wideip":
        return _wideip_name(config, name)
    else:
        pool_name, slash, member = name.partition("/")
        pool = config.pools.get(pool_name)
        if not slash or pool is None:
            raise ApiError(404, f"no pool member {name!r}: give POOL/VIRTUAL-SERVER, with a pool of the config")
        known = any(m.name == member for m in pool.members)
        if not known:
            raise ApiError(404, f"pool {pool_name!r} has no member {member!r}")
        return name
    if not known:
        raise ApiError(404, f"no {admin.LEVEL_WORDS[level]} named {name!r}")
    return name


def _wideip_name(config: Config, name: str) -> str:
    """The wide IP named *name* (its own name or an alias), by its own name; 404 otherwise,
    saying so when a wildcard covers *name* (that would change every name it answers)."""
    try:
        key = names.key(names.from_text(name))
    except names.BadName:
        key = None
    index = config.wideip_names
    wideip = None
    if key is not None:  # a wildcard by how it is written (as a name or an alias), else exactly
        wideip = index.wildcards.get(key[1:]) if is_wildcard(key) else index.exact.get(key)
    if wideip is not None:
        return wideip.name
    covering = index.find_in(config.zones, key) if key is not None else None
    if covering is not None:
        raise ApiError(404, f"{name!r} is a name wildcard wide IP {covering.name!r} answers: name that wide IP")
    raise ApiError(404, f"no {admin.LEVEL_WORDS['wideip']} named {name!r}")


def admin_states(node: Node) -> list[dict[str, Any]]:
    """Every admin state set by an operator (enabled ones too: who enabled what, when), and
    the config's own states of pools, pool members and wide IPs other than enabled where no
    operator's record overrides them (``"configured": true``)."""
    out = []
    held = set()
    for record in node.store.scan(keys.ADMIN):
        parsed = admin.parse_key(record.key)
        state = admin.from_value(parsed[0], parsed[1], record.value) if parsed is not None else None
        if state is not None:
            out.append(state.to_json())
            held.add(f"{state.level}/{state.name}")
    out.extend(s.to_json() for key, s in node.config.admin_defaults.items() if key not in held)
    out.sort(key=lambda s: (admin.LEVELS.index(s["level"]), s["name"]))
    return out


def saved(answer: dict[str, Any], on_disk: bool) -> dict[str, Any]:
    """The answer to an admin write once the state snapshot was written: as it is, or 503
    when the write could not be made durable (it holds in memory and is replicated, but a
    crash of this node before the next snapshot could lose it here)."""
    if not on_disk:
        raise ApiError(503, f"{answer['name']} is {answer['admin']} but the state could not be saved to disk")
    return answer
