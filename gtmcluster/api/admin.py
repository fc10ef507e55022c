"""Health and wide IP views, and the operator's admin actions on virtual servers."""

from __future__ import annotations

from typing import Any

from gtmcluster.api.server import ApiError
from gtmcluster.node import Node
from gtmcluster.slices import Steps, whole

ACTIONS = {"enable": "enabled", "disable": "disabled", "drain": "drain"}


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
            "address": f"{vs.address}:{vs.port}",
            "datacenter": vs.datacenter,
            "monitor": vs.monitor.name if vs.monitor else None,
            "available": s.available if s else None,
            "serving": s.serving if s else None,
            "health": s.health if s else None,
            "admin": s.admin if s else vs.admin_state,
            "held": s.held if s else False,
            "reason": s.reason if s else "",
            "weight": node.health.weight(vs, now),
            "observers": verdicts(f"obs/vs/{name}/"),
        }
    links = {}
    for name, link in node.config.links.items():
        observed = snapshot.links.get(name)
        links[name] = {
            "datacenter": link.datacenter,
            "targets": [str(t) for t in link.targets],
            "state": observed.state if observed else "unknown",
            "reason": observed.reason if observed else "",
            "observers": verdicts(f"obs/link/{name}/"),
        }
    return {"node": node.member.name, "virtual_servers": servers, "links": links}


def wideips(node: Node) -> dict[str, Any]:
    return whole(wideips_steps(node))


def wideips_steps(node: Node) -> Steps[dict[str, Any]]:
    snapshot = node.health.snapshot
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
                            "address": str(m.vs.address),
                            "datacenter": m.vs.datacenter,
                            "ratio": m.ratio,
                            "available": snapshot.vs_up(m.vs),
                        }
                        for m in pool.members
                    ],
                }
            )
        out[wideip.name] = {
            "types": sorted("A" if t == 1 else "AAAA" for t in wideip.types),
            "pool_lb": wideip.pool_lb,
            "pools": pools,
            "last_resort_pool": wideip.last_resort.name if wideip.last_resort else None,
            "persistence": {"ttl": wideip.persistence.ttl} if wideip.persistence else None,
            "failure_response": wideip.failure_response,
        }
    return {"node": node.member.name, "wideips": out}


def set_admin(node: Node, name: str, action: str) -> dict[str, Any]:
    """enable / disable / drain a virtual server, for the whole sync group (a replicated
    admin record). Enabling also releases a manual-resume hold."""
    vs = node.config.virtual_servers.get(name)
    if vs is None:
        raise ApiError(404, f"no virtual server named {name!r}")
    state = ACTIONS.get(action)
    if state is None:
        raise ApiError(404, f"no action {action!r} (use enable, disable or drain)")
    node.store.put(f"admin/vs/{name}", {"state": state, "by": node.member.name})
    released = False
    if state == "enabled" and node.store.delete(f"held/vs/{name}") is not None:
        released = True
    status = node.health.snapshot.vs.get(name)
    return {
        "virtual_server": name,
        "admin": state,
        "released_hold": released,
        "available": status.available if status else None,
        "reason": status.reason if status else "",
    }


def saved(answer: dict[str, Any], on_disk: bool) -> dict[str, Any]:
    """The answer to an admin write once the state snapshot was written: as it is, or 503
    when the write could not be made durable (it holds in memory and is replicated, but a
    crash of this node before the next snapshot could lose it here)."""
    if not on_disk:
        raise ApiError(503, f"{answer['virtual_server']} is {answer['admin']} but the state could not be saved to disk")
    return answer
