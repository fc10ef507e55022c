"""The group's shared config over the API (config sync, `groupconfig.shared`):

    GET  /api/v1/config                       what this member and each peer hold and run
    POST /api/v1/config[?force=true]          publish a bundle (`groupconfig.bundle.encode`;
                                              its generation and publisher are set here,
                                              its based_on is checked against the group's)
    GET  /api/v1/config/history               the bundles held, newest first
    GET  /api/v1/config/bundles/GENERATION    one of them, as sent (for pull and diff)
    POST /api/v1/config/rollback/GENERATION   publish an old one again, as a new generation

A publication answers once this member runs the bundle and has offered it to its peers;
`gtmcluster config push` then watches the peers take it (GET /api/v1/config).

Every one of these needs the token on every address, reads too: a bundle is the group's
config text. A bundle is sent from its file as the client reads it (`FileAnswer`), never
held whole per request.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from twisted.internet import defer

from gtmcluster.api.server import ApiError, FileAnswer
from gtmcluster.groupconfig import bundle
from gtmcluster.groupconfig.bundle import Bundle, Header
from gtmcluster.groupconfig.shared import GroupConfig, Published, Stale
from gtmcluster.sync.configsync import ConfigSync

if TYPE_CHECKING:
    from gtmcluster.nodeservice import NodeService

#: the largest body of a publication: a bundle at its limit, encoded
MAX_PUSH = bundle.MAX_BYTES * 4 // 3 + 65536
#: a generation as the API takes it: ASCII digits (str.isdigit() takes "²", which int() refuses)
GENERATION = re.compile(r"[0-9]{1,18}")


def _group(service: NodeService) -> GroupConfig[ConfigSync]:
    if service.group_config is None:
        raise ApiError(503, "this node keeps no config bundles (it was not started as a member: twistd gtm)")
    return service.group_config


def describe(service: NodeService) -> dict[str, Any]:
    group = _group(service)
    sync = group.sync
    me = sync.view().to_json()
    running = me["running"]
    running["path"] = service.running_path
    members: dict[str, Any] = {}
    for name, peer in service.replicator.peers.items():
        view = sync.views.get(name)
        members[name] = {
            "connected": peer.connected,
            "speaks_config_sync": bool(peer.channels) and peer.channels[0].version >= 3,
            **(view.to_json() if view is not None else {"held": None, "running": None, "refused": None}),
        }
    return {
        "node": service.node.member.name,
        "config_sync": sync.enabled,
        "file": service.config_path,
        **me,
        "members": members,
    }


def _force(args: Any) -> bool:
    value = args.get("force", "false").lower()
    if value not in ("true", "false", "1", "0", "yes", "no"):
        raise ApiError(400, f"force: {value!r} is not true or false")
    return value in ("true", "1", "yes")


def _answer(result: Published) -> dict[str, Any]:
    if result.problems:
        raise ApiError(
            422,
            "the bundle is refused, nothing changed on any member:\n" + "\n".join(result.problems),
        )
    return {"published": result.header.to_json() if result.header else None, "unchanged": result.unchanged}


def _stale(failure: Any) -> Any:
    failure.trap(Stale)
    raise ApiError(409, str(failure.value))


def push(service: NodeService, args: Any, raw: bytes) -> defer.Deferred[dict[str, Any]]:
    group = _group(service)
    force = _force(args)

    def bad(failure: Any) -> Any:
        failure.trap(bundle.BadBundle)
        raise ApiError(400, f"not a config bundle: {failure.getErrorMessage()}")

    def publish(candidate: Bundle) -> defer.Deferred[dict[str, Any]]:
        return group.publish(candidate, candidate.based_on, force).addCallbacks(_answer, _stale)

    # (off the reactor: with GeoIP databases a bundle is tens of megabytes of base64)
    decoded: defer.Deferred[Bundle] = group.sync.in_thread(lambda: bundle.decode(raw))
    return decoded.addCallbacks(publish, bad)


def history(service: NodeService) -> dict[str, Any]:
    group = _group(service)
    running = group.sync.running
    return {
        "node": service.node.member.name,
        "bundles": [
            {**h.to_json(), "running": h.generation == running.generation and h.digest == running.digest}
            for h in group.shelf.history()
        ],
    }


def generation_of(text: str, what: str) -> int:
    """*text* as a generation; ApiError 400 when it is not one."""
    if not GENERATION.fullmatch(text):
        raise ApiError(400, f"{what}: {text[:40]!r} is not a generation (a whole number)")
    return int(text)


def _held(group: GroupConfig[ConfigSync], generation: str) -> Header:
    header = group.shelf.find(generation_of(generation, "generation"))
    if header is None:
        kept = ", ".join(str(h.generation) for h in group.shelf.history()) or "none"
        raise ApiError(404, f"generation {generation} is not held here (held: {kept})")
    return header


def one(service: NodeService, generation: str) -> FileAnswer:
    """Generation *generation* as sent, read from its file as it is sent."""
    group = _group(service)
    path = group.shelf.folder(_held(group, generation)) / "bundle.json"
    try:
        return FileAnswer(b"application/json", path.open("rb"))
    except OSError as e:
        raise ApiError(404, f"generation {generation}: {e.strerror or e}") from None


def rollback(service: NodeService, args: Any, generation: str) -> defer.Deferred[dict[str, Any]]:
    group = _group(service)
    based_on = args.get("based_on")
    base = generation_of(based_on, "based_on") if based_on else None
    force = _force(args)
    try:
        old = group.shelf.load(_held(group, generation))
    except OSError as e:
        raise ApiError(404, f"generation {generation}: {e.strerror or e}") from None
    return group.publish(old, base, force).addCallbacks(_answer, _stale)
