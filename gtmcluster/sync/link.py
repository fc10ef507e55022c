"""The two narrow sides of a peer connection, as `typing.Protocol`s.

`Link` is what the replication (`sync.replicator`, `sync.antientropy`, `sync.configsync`,
`sync.peerstate`) needs of one peer connection (`sync.peer.PeerProtocol` is one): who is at
the other end, whether it is established or closed, and the commands sent over it (its
phases are the connection's own: `sync.phases`); it drops a connection that misbehaves
(`Link.violation`), and that is all it ends. `Channel` adds what only the peer service
(`sync.service`) does to the connections the replication holds for it: close them, wait
for them to go, abort those that linger. `Host` is what a peer connection
calls back on the node's replication (`sync.replicator.Replicator` is one), with the two
collaborators it hands a peer's commands to: `Reconciler`, anti-entropy
(`sync.antientropy.AntiEntropy`), and `ConfigChannel`, config sync
(`sync.configsync.ConfigSync`). Neither side imports the other: the peer service wires them
together.
"""

from __future__ import annotations

from typing import Any, Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime


class Link(Protocol):
    """One peer connection, as the replication sees it."""

    #: the member at the other end, once its hello was read
    peer: str | None
    datacenter: str
    config_digest: str
    #: the peer's protocol version
    version: int
    #: its certificate, summarised (subject, issuer, validity)
    certificate: dict[str, str]
    #: the zone keys it holds (a keyset's text), when it said
    dnssec_keys: str | None
    #: requests sent and not yet answered
    outstanding: int

    @property
    def established(self) -> bool:
        """Past the Hellos and not closed: commands go both ways."""

    @property
    def closed(self) -> bool:
        """Refused, dropped or lost: nothing more is read from it or sent on it."""

    @property
    def blocked(self) -> bool: ...

    @property
    def silent(self) -> bool: ...

    def callRemote(self, commandType: Any, *a: Any, **kw: Any) -> Any: ...

    def violation(self, reason: str, graceful: bool = False, logged: bool = True) -> None: ...

    def send_heartbeat(self) -> None: ...

    def when_writable(self) -> Deferred[None]: ...


class Channel(Link, Protocol):
    """One peer connection as the replication holds it (`Host.connections`,
    `sync.peerstate.PeerState.channels`) for the peer service, which closes them when the
    node stops or the group's CA changes."""

    #: the member a dialled connection expects (None: accepted)
    expected: str | None
    transport: Any

    def close(self) -> None:
        """Close cleanly (TLS close_notify after what is queued)."""

    def when_closed(self) -> Deferred[None]:
        """Fires when the connection is gone (at once if it is)."""


class ConfigChannel(Protocol):
    """Config sync, as a peer connection hands it the peer's config-sync commands."""

    def heard_state(self, proto: Link, data: bytes) -> None: ...

    def fetch_answer(self, generation: int, publisher: str, digest: str, offset: int) -> dict[str, Any]: ...


class Reconciler(Protocol):
    """Anti-entropy, as a peer connection hands it the peer's reconciliation commands
    (`Summary`, `Buckets`, `Listing`, `Pull`, `SendAll`, `Changed`) and asks it the state
    digest to tell in a heartbeat."""

    @property
    def loading(self) -> bool:
        """The store still loads its snapshot: a `Summary` is answered `Loading`."""

    def digest_for(self, version: int) -> str: ...

    def reconcile(self, proto: Link) -> Deferred[None]: ...

    def send_all(self, proto: Link, origin: str) -> Deferred[int]: ...

    def summary_message(self, proto: Link | None = None) -> bytes: ...

    def buckets_message(self, proto: Link, origin: str) -> bytes: ...

    def listing_message(self, proto: Link, origin: str, request: bytes) -> tuple[bytes, bytes]: ...

    def pull_message(self, proto: Link, request: bytes) -> tuple[bytes, bytes]: ...


class Host(Protocol):
    """The node's replication, as a peer connection sees it: who this node is, the group's
    timers, and what it does with what a peer says."""

    node: str
    group: str
    datacenter: str
    members: frozenset[str]
    clock: IReactorTime
    protocol_version: int
    config_digest: str
    dnssec_keys_text: str
    handshake_timeout: float
    heartbeat_interval: float
    heartbeat_timeout: float
    idle_timeout: float
    #: every connection from its TCP connect to its end
    connections: set[Channel]

    @property
    def anti_entropy(self) -> Reconciler: ...

    @property
    def config(self) -> ConfigChannel | None: ...

    def check_hello(self, identity: str, node: str, group: str, version: int, min_version: int) -> str | None: ...

    def established(self, proto: Channel) -> None: ...

    def lost(self, proto: Channel, why: str) -> None: ...

    def live_names(self) -> list[str]: ...

    def heard_connections(self, proto: Link, connected: str) -> None: ...

    def heard_digest(self, proto: Link, digest: str) -> None: ...

    def heard_keys(self, proto: Link) -> None: ...

    def silence_changed(self, proto: Link) -> None: ...

    def output_drained(self, proto: Link) -> None: ...

    def receive_in_slices(
        self, proto: Link, batch: bytes, bulk: bool = False, at_once: bool = True
    ) -> Deferred[int]: ...
