"""Process limits the node needs: enough open files for the TCP clients it accepts, the
health checks it runs and the API and peer connections it holds.

Every TCP DNS client holds a file descriptor, and so does every health check in flight
(at most `health.max_in_flight`). systemd starts services with a soft limit of
1024 open files (the hard limit is far higher), which a node with `tcp_max_clients: 1000`
on two addresses would hit: accepting would fail with EMFILE while the cap was not reached.
So the node raises its soft limit to the hard one at start, says so in its log, and warns
when even the hard limit is below what its TCP caps may need.
"""

from __future__ import annotations

import resource

from twisted.logger import Logger

from gtmcluster.config.model import Config
from gtmcluster.sync.admission import MAX_CHANNELS_PER_MEMBER, MAX_UNPROVEN, MAX_UNPROVEN_PER_SOURCE

log = Logger()

#: descriptors besides TCP DNS clients: listeners, peers, the API, probes, logs, workers
SPARE = 256
#: the soft limit asked for when the hard limit is unlimited
UNLIMITED_TARGET = 1 << 20


def needed_open_files(config: Config, node: str) -> int:
    """The open files *node* may need: its TCP client caps on every DNS address, its health
    checks in flight, the API's connections (`api.limits.connections`), the peer port's
    (those still in TLS or Hello, in all and from each member's own address, and each
    member's connections in and out), and spare."""
    peers = len(config.sync_group.members) - 1
    # (a member's own address is not counted in MAX_UNPROVEN: it may hold its own share)
    each = MAX_UNPROVEN_PER_SOURCE + MAX_CHANNELS_PER_MEMBER + 1
    peer_port = (MAX_UNPROVEN + each * peers) if peers else 0
    return (
        config.dns_server.tcp_max_clients * len(config.member(node).dns)
        + config.health.max_in_flight
        + config.api.limits.connections
        + peer_port
        + SPARE
    )


def raise_open_files(needed: int) -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns (before, after) and logs."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = UNLIMITED_TARGET if hard == resource.RLIM_INFINITY else hard
    after = soft
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            after = target
        except (ValueError, OSError) as e:
            log.warn(
                "could not raise the open-file limit from {soft} to {target}: {error}",
                soft=soft,
                target=target,
                error=str(e),
            )
        else:
            log.info(
                "raised the open-file limit from {before} to {after} (TCP clients need one each)",
                before=soft,
                after=after,
                event="open_files_raised",
            )
    if after != resource.RLIM_INFINITY and after < needed:
        log.warn(
            "the open-file limit {limit} is below the {needed} the connection caps may need "
            "(dns_server.tcp_max_clients per DNS address, health.max_in_flight, api.limits.connections, "
            "the peer port's, plus {spare}): "
            "raise LimitNOFILE or ulimit -n",
            limit=after,
            needed=needed,
            spare=SPARE,
            event="open_files_low",
        )
    return soft, after
