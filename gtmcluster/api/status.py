"""What a node reports about itself: identity, peers, state digest, health. Pure: built from
the node's parts, no I/O; in steps (see `gtmcluster.runtime.slices`), as it lists every server."""

from __future__ import annotations

from typing import Any

from gtmcluster.api.admin import admin_states
from gtmcluster.api.proximityfamilies import coverage
from gtmcluster.node import Node
from gtmcluster.runtime.slices import Steps, whole
from gtmcluster.sync import commands
from gtmcluster.sync.codec import ConfigView
from gtmcluster.sync.replicator import Replicator

#: servers described per step of a sliced answer
PER_STEP = 200


def status(node: Node, replicator: Replicator, now: float) -> dict[str, Any]:
    return whole(status_steps(node, replicator, now))


def status_steps(node: Node, replicator: Replicator, now: float) -> Steps[dict[str, Any]]:
    config = node.config
    store = node.store
    summaries = sorted(store.summaries().items())
    origins = {origin: s.count for origin, s in summaries}
    peers = []
    digests_agree = True
    for peer in replicator.peers.values():
        # (a peer of an older protocol version holds only the records it can: see `sync.replicator`)
        if (
            peer.connected
            and peer.digest is not None
            and peer.digest != replicator.anti_entropy.digest_for(peer.version)
        ):
            digests_agree = False
        peers.append(
            {
                "name": peer.name,
                "datacenter": peer.datacenter,
                "connected": peer.connected,
                # heard from within the heartbeat timeout: its verdicts count
                "counted": peer.live,
                "silent_for": None if peer.silent_since is None else round(now - peer.silent_since, 3),
                "connected_for": None if peer.connected_since is None else round(now - peer.connected_since, 3),
                "last_contact_ago": None if peer.last_contact is None else round(now - peer.last_contact, 3),
                "config_digest": peer.config_digest,
                "config_matches": peer.config_digest == config.digest if peer.config_digest else None,
                "synced": peer.synced if peer.connected else None,  # not known while apart
                "protocol": peer.version,
                "state_digest": peer.digest,
                "certificate": peer.certificate or None,
                "bundle": _bundle_of(replicator, peer.name),
                # the digests of its DNSKEY sets (public records: never a key), None when not told
                "dnssec_keys": peer.dnssec_keys,
                "dnssec_keys_match": None if peer.dnssec_keys is None else not peer.dnssec_mismatch,
                "dnssec_keys_differ": peer.dnssec_mismatch,
            }
        )
    snapshot = node.health.snapshot
    servers = {}
    for n, (name, s) in enumerate(sorted(snapshot.vs.items())):
        if n % PER_STEP == PER_STEP - 1:
            yield None
        servers[name] = {
            "available": s.available,
            "serving": s.serving,
            "health": s.health,
            "admin": s.admin,
            "held": s.held,
            "reason": s.reason,
        }
    return {
        "admin": admin_states(node),
        "node": node.member.name,
        "datacenter": node.member.datacenter,
        "group": config.sync_group.name,
        "config_digest": config.digest,
        "config_generation": node.generation,
        # each signed zone's DNSKEY set digest (`dnssec.keyset`): members must agree
        "dnssec_keys": replicator.dnssec_keys,
        "config_loaded_ago": round(now - node.loaded_at, 3),
        # the group's shared config (config sync): the bundle run here, the newest held
        "bundle": _own_bundle(replicator),
        "ready": node.ready,
        "state": {
            "digest": store.digest(),
            # over the records a member of each protocol version can hold (an older one
            # holds fewer: see `sync.replicator`), so mixed versions can be compared
            "digest_by_protocol": {
                str(v): replicator.anti_entropy.digest_for(v)
                for v in range(commands.MIN_PROTOCOL_VERSION, replicator.protocol_version + 1)
            },
            "records": len(store),
            "by_origin": origins,
            # each origin's records in one word (as `digest`): where members differ, whose
            # records are still on their way (`gtmcluster status`, `cli.settle`)
            "origin_digests": {origin: f"{s.count}-{s.xor:016x}" for origin, s in summaries},
            "agrees": digests_agree,
        },
        "peers": peers,
        # the query log (dns_server.query_log), None when off: queries written and dropped
        "query_log": _query_log(node),
        # client proximity (issue 36): the client table's size and the answers by source
        "proximity": coverage(node),
        "health": {
            "virtual_servers": servers,
            "links": {
                name: {"state": o.state, "reason": o.reason, "full": o.busy or None}
                for name, o in sorted(snapshot.links.items())
            },
        },
    }


def _query_log(node: Node) -> dict[str, Any] | None:
    settings = node.config.dns_server.query_log
    if settings is None:
        return None
    stats = node.stats
    return {
        "path": str(settings.path),
        "written": stats.query_log_written,
        "dropped": stats.query_log_dropped,
        "failed": stats.query_log_failed,
    }


def _summary(view: ConfigView) -> dict[str, Any]:
    return {
        "generation": view.generation,
        "digest": view.digest,
        "held_generation": view.held.generation if view.held else 0,
        "held_digest": view.held.digest if view.held else "",
        "refused": {"generation": view.refused.generation, "reasons": list(view.reasons)} if view.refused else None,
    }


def _own_bundle(replicator: Replicator) -> dict[str, Any] | None:
    """The bundle this node runs and holds (None: it keeps none, a group of one in tests)."""
    if replicator.config is None:
        return None
    return {"config_sync": replicator.config.enabled, **_summary(replicator.config.view())}


def _bundle_of(replicator: Replicator, name: str) -> dict[str, Any] | None:
    """What peer *name* last said of its bundles (None: nothing, an older version)."""
    view = replicator.config.views.get(name) if replicator.config is not None else None
    return _summary(view) if view is not None else None
