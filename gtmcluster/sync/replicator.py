"""The sync group logic of one node: peers, relaying records, and anti-entropy.

Every record this node writes, and every record new to it that a peer sends, is pushed at
once to every other connected peer (batched per reactor turn), so a node that reaches only
one peer still converges: its peer relays. Merging keeps the newest version per key, so
duplicates and loops die out (a peer that already has a record does not relay it again).

On every new connection both sides reconcile (`sync.antientropy`: the replicator's
`anti_entropy`, which sees the replicator as its `Replica`), and again now and then on every
connection, and after a peer fell behind.

What a peer sends is checked before any of it is merged: the wire format and each record
against its kind's schema (`sync.codec`, `state.schema`); a peer that sends a bad record is
dropped with the reason. Then each origin may hold at most `max_records` records of each
kind here (`state.schema.KINDS`). Every honest member applies the same caps, and writers
stay under them, so records beyond a cap come from an origin that wrote too many:

- if the peer sending them is that origin, it is dropped (it reconnects with backoff, and is
  dropped again while it keeps writing too many);
- if a peer relays them, it is not at fault: the records are refused, and anti-entropy skips
  that origin while this node holds its cap of it (its digest differs from the relay's, and
  comparing them would list and pull the refused records again every round); once the
  origin holds less than `WRITER_SHARE` of the cap here (records expire), it is reconciled
  again. Pushes of that origin's records are still taken, within the cap.

Every refusal is counted by kind and reason (`refused`, shown in /metrics).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from gtmcluster.dnssec import keyset
from gtmcluster.state import schema
from gtmcluster.state.record import Record, kind_of
from gtmcluster.state.store import Store
from gtmcluster.sync import codec, commands
from gtmcluster.sync.antientropy import AntiEntropy
from gtmcluster.sync.codec import BadMessage
from gtmcluster.sync.link import Channel, Link
from gtmcluster.sync.peerstate import PeerState

if TYPE_CHECKING:
    from gtmcluster.sync.configsync import ConfigSync

log = Logger()

#: unanswered Publish commands per connection before pushes to it pause (it reconciles later);
#: pushes due while the connection's output is blocked (`PeerProtocol.blocked`) pause too
MAX_OUTSTANDING = 64
RECONCILE_INTERVAL = 60.0
#: records of one incoming batch merged per reactor turn: a batch holds up to ~1000 small
#: records (a flood, a bulk transfer), and DNS queries are answered between the slices
MERGE_SLICE = 100
#: after a change to the store, peers hear the new state digest this much later (changes
#: within it are told once), so "digests agree" is current within about a second, not
#: a heartbeat interval
DIGEST_DELAY = 1.0


class Replicator:
    def __init__(
        self,
        store: Store,
        clock: IReactorTime,
        *,
        node: str,
        group: str,
        datacenter: str,
        members: Iterable[str],
        config_digest: str,
        idle_timeout: float = 30.0,
        handshake_timeout: float = 10.0,
        heartbeat_interval: float = 1.0,
        heartbeat_timeout: float = 3.0,
        protocol_version: int = commands.PROTOCOL_VERSION,
    ):
        self.store = store
        self.clock = clock
        self.node = node
        self.group = group
        self.datacenter = datacenter
        self.members = frozenset(members)
        self.config_digest = config_digest
        self.idle_timeout = idle_timeout
        self.handshake_timeout = handshake_timeout
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        #: the newest protocol version this node speaks: `commands.PROTOCOL_VERSION`, lower
        #: only to run a member of an older version (its Hello, and the records its schema
        #: takes: tests of mixed-version groups)
        self.protocol_version = protocol_version
        self.peers = {name: PeerState(name) for name in sorted(self.members) if name != node}
        #: every open peer connection, dialled or accepted, in any phase (`PeerService` closes
        #: them all when the node stops)
        self.connections: set[Channel] = set()
        self._outbox: dict[str, list[Record]] = {}
        self._flush: IDelayedCall | None = None
        self._merging_from: str | None = None
        self._bulk = False  # merging a reconciliation transfer: no record-by-record relay
        #: records merged from reconciliation transfers so far (`AntiEntropy` counts by it)
        self.bulk_merged = 0
        #: called whenever the set of connected peers changes
        self.peer_listeners: list[Callable[[], object]] = []
        self._digest_call: IDelayedCall | None = None
        #: keys to pull from each peer that connects while the store loads (the records of
        #: health and admin states, see `Node.health_keys`), so what the group decided while
        #: this node was down counts at once, not only after the load
        self.catch_up: Callable[[], list[str]] | None = None
        #: keys being asked of the peers before a write (see `ask_first`), with the write
        self._asking: dict[str, Callable[[], object]] = {}
        #: records refused, by (kind, reason): "unknown" is any kind this version does not know
        self.refused: Counter[tuple[str, str]] = Counter()
        #: origins this node holds its cap of, with the kinds: skipped by anti-entropy
        self.capped: dict[str, set[str]] = {}
        #: the group's config bundles (`sync.configsync`), when this node keeps them
        self.config: ConfigSync | None = None
        #: our signed zones' DNSKEY set digests (`dnssec.keyset`; see `set_dnssec_keys`)
        self.dnssec_keys: dict[str, str] = {}
        self.dnssec_keys_text = ""
        #: reconciliation with the peers, both sides (`sync.antientropy`)
        self.anti_entropy = AntiEntropy(self, store, clock)
        store.subscribe(self._changed)

    def hold_until(self, loaded: defer.Deferred[None]) -> None:
        """Hold anti-entropy until *loaded* fires (the store has loaded its whole snapshot):
        this node's reconciliations wait, and peers asking for its summary are told it is
        still loading (`commands.Loading`). Until then the store's digests describe part
        of its state, and a comparison would pull or offer most of the table. Pushes and
        relays go on meanwhile. Once loaded, the reconciliations held go ahead, and every
        connected peer hears the new digest and is asked to reconcile (`Changed`)."""

        def release(_: object) -> None:
            self._tell_digest()
            for peer in self.peers.values():
                if peer.channels:
                    self.anti_entropy.ask_to_reconcile(peer.channels[0])

        self.anti_entropy.hold_until(loaded).addCallback(release)

    # -- connections ----------------------------------------------------------------------

    def reconfigure(
        self, members: Iterable[str], config_digest: str, timers: Mapping[str, float] | None = None
    ) -> None:
        """A new config: the members (added ones get a state, removed ones are dropped), and
        *timers* (`idle_timeout`, `handshake_timeout`, `heartbeat_interval`,
        `heartbeat_timeout`), which open connections take from their next timer on."""
        self.members = frozenset(members)
        self.config_digest = config_digest
        if timers is not None:
            self.idle_timeout = timers["idle_timeout"]
            self.handshake_timeout = timers["handshake_timeout"]
            self.heartbeat_interval = timers["heartbeat_interval"]
            self.heartbeat_timeout = timers["heartbeat_timeout"]
        for name in list(self.peers):
            if name not in self.members:
                for proto in list(self.peers[name].channels):
                    proto.violation("no longer a member of the sync group")
                del self.peers[name]
        # and connections of removed members still in their handshake (their certificate
        # was checked when they were members; their Hello would find no state)
        for proto in list(self.connections):
            if proto.peer is not None and proto.peer != self.node and proto.peer not in self.members:
                proto.violation("no longer a member of the sync group")
        for name in sorted(self.members):
            if name != self.node and name not in self.peers:
                self.peers[name] = PeerState(name)

    def check_hello(self, identity: str, node: str, group: str, version: int, min_version: int) -> str | None:
        """Why a Hello is refused, or None when it is right."""
        if identity not in self.members:  # (removed by a reload since its handshake)
            return f"{identity} is no longer a member of the sync group"
        if node != identity:
            return f"certificate names {identity} but its Hello claims to be {node}"
        if group != self.group:
            return f"{node} is in sync group {group!r}, not {self.group!r}"
        if version < commands.MIN_PROTOCOL_VERSION or min_version > self.protocol_version:
            return (
                f"{node} speaks protocol versions {min_version}..{version}; this node speaks "
                f"{commands.MIN_PROTOCOL_VERSION}..{self.protocol_version}"
            )
        return None

    def established(self, proto: Channel) -> None:
        assert proto.peer is not None
        peer = self.peers.get(proto.peer)
        if peer is None:  # removed by a reload between its Hello and this turn
            proto.violation("no longer a member of the sync group")
            return
        first = not peer.channels
        peer.channels.append(proto)
        peer.datacenter = proto.datacenter
        peer.version = proto.version
        peer.config_digest = proto.config_digest
        if first:  # (the connection `connected_for` counts from: a newer one does not replace it)
            peer.certificate = proto.certificate
        if proto.dnssec_keys is None:  # (a member that predates them: not known, not a difference)
            peer.dnssec_keys, peer.dnssec_mismatch = None, []
        self.heard_keys(proto)
        now = self.clock.seconds()
        peer.last_contact = now
        if first:
            peer.connected_since = now
            self._announce_connections()
            log.info(
                "peer {peer} (data center {datacenter}) connected, protocol {version}, certificate serial {serial}",
                peer=peer.name,
                datacenter=peer.datacenter,
                version=peer.version,
                serial=peer.certificate.get("serial", "?"),
                event="peer_up",
            )
            if peer.version < min(self.protocol_version, schema.NEWEST_VERSION):
                log.warn(
                    "peer {peer} speaks protocol {version} (this node {ours}): it is sent no record it would "
                    "refuse (admin states other than a virtual server's before version 2, links' traffic before "
                    "version 4) until it is upgraded",
                    peer=peer.name,
                    version=peer.version,
                    ours=self.protocol_version,
                    event="peer_older_protocol",
                )
            elif peer.version < self.protocol_version and self.config is not None:
                log.warn(
                    "peer {peer} speaks protocol {version} (this node {ours}): it neither takes nor relays the "
                    "group's config bundles until it is upgraded",
                    peer=peer.name,
                    version=peer.version,
                    ours=self.protocol_version,
                    event="peer_older_protocol",
                )
        if not first:
            self._liveness(peer)  # a new connection to a peer whose others are silent
            return  # a second connection (both dialled at once): harmless, no new round
        if peer.config_digest != self.config_digest:
            log.warn(
                "peer {peer} runs a different config (digest {theirs}, ours {ours}): answers may differ",
                peer=peer.name,
                theirs=peer.config_digest,
                ours=self.config_digest,
                event="config_mismatch",
            )
        if self.config is not None:
            self.config.connected(proto)
        if self.anti_entropy.loading and self.catch_up is not None:
            self._catch_up(proto, self.catch_up())
        self.anti_entropy.reconcile(proto)

    def _catch_up(self, proto: Link, keys: list[str]) -> defer.Deferred[None]:
        """Pull *keys* from *proto*'s peer (the newer version of each wins, as always)."""

        async def pull() -> None:
            before = self.bulk_merged
            await self.anti_entropy.pull_keys(proto, keys)
            log.info(
                "took {count} newer records of {keys} health and admin keys from {peer} while loading",
                count=self.bulk_merged - before,
                keys=len(keys),
                peer=proto.peer,
                event="caught_up",
            )

        return defer.ensureDeferred(pull()).addErrback(self._pull_failed, proto)

    def _pull_failed(self, failure: Failure, proto: Link) -> None:
        if failure.check(BadMessage):
            proto.violation(f"malformed answer to a pull: {failure.getErrorMessage()}")
        elif proto.established:
            log.warn("pulling records from {peer} failed: {why}", peer=proto.peer, why=failure.getErrorMessage())

    def ask_first(self, key: str, write: Callable[[], object]) -> None:
        """`write` *key*, unless the group holds it already: while the store loads (and is
        not reconciled), the record might have been written elsewhere while this node was
        down, so every connected peer is asked for it first (`Pull`), and *write* runs only
        if none of them has it (a persistence record: a new one would override the group's
        and move the client). Otherwise, at once. A write asked for while the same key is
        being asked about is dropped: the first one stands for it."""
        channels = [peer.channels[0] for peer in self.peers.values() if peer.channels]
        if not self.anti_entropy.loading or not channels:
            write()
            return
        if key in self._asking:
            return
        self._asking[key] = write

        def asked(_: object) -> None:
            first = self._asking.pop(key)
            if self.store.get(key) is None:
                first()

        pulls = [
            defer.ensureDeferred(self.anti_entropy.pull_keys(proto, [key])).addErrback(self._pull_failed, proto)
            for proto in channels
        ]
        defer.DeferredList(pulls).addCallback(asked)

    def lost(self, proto: Channel, why: str) -> None:
        peer = self.peers.get(proto.peer or "")
        if peer is None or proto not in peer.channels:
            return
        peer.channels.remove(proto)
        if not peer.channels:
            peer.connected_since = None
            peer.silent_since = None
            peer.their_peers = frozenset()
            peer.synced = False  # it may have changed (or lost everything) while apart
            if self.config is not None:
                self.config.lost(peer.name)
            self._announce_connections()
            log.info("peer {peer} disconnected: {why}", peer=peer.name, why=why, event="peer_down")
        else:
            peer.certificate = peer.channels[0].certificate  # (the oldest open connection's)
            self._liveness(peer)  # the connection that was not silent may be the one that went

    def connected_names(self) -> list[str]:
        return [name for name, peer in self.peers.items() if peer.connected]

    def live_names(self) -> list[str]:
        """The peers heard from within `heartbeat_timeout`: their verdicts and quorum votes
        count, and they are the ones we tell our peers we reach. A peer that goes silent
        (its links cut, packets dropped, no reset) leaves this list after the timeout,
        long before its connection is closed for silence (`idle_timeout`)."""
        return [name for name, peer in self.peers.items() if peer.live]

    def silence_changed(self, proto: Link) -> None:
        """*proto* went silent (nothing heard for `heartbeat_timeout`) or was heard again."""
        peer = self.peers.get(proto.peer or "")
        if peer is not None and proto in peer.channels:
            self._liveness(peer)

    def _liveness(self, peer: PeerState) -> None:
        """Tell (log, listeners, peers) when a connected *peer* went silent or was heard again."""
        if not peer.channels:
            return
        if not peer.live and peer.silent_since is None:
            peer.silent_since = self.clock.seconds()
            log.warn(
                "peer {peer} silent for {timeout:g}s: its verdicts no longer count (its connection is "
                "closed if it stays silent for the idle timeout, {idle:g}s)",
                peer=peer.name,
                timeout=self.heartbeat_timeout,
                idle=self.idle_timeout,
                event="peer_silent",
            )
            self._announce_connections()
        elif peer.live and peer.silent_since is not None:
            log.info(
                "peer {peer} heard again after {seconds:.1f}s of silence: its verdicts count again",
                peer=peer.name,
                seconds=self.clock.seconds() - peer.silent_since,
                event="peer_heard",
            )
            peer.silent_since = None
            self._announce_connections()

    def _announce_connections(self) -> None:
        """Tell every peer whom we now reach (so they know what not to relay to us), and
        the local listeners (health counts only the verdicts of connected peers)."""
        for listener in self.peer_listeners:
            listener()
        for peer in self.peers.values():
            if peer.channels:
                peer.channels[0].send_heartbeat()

    def _tell_digest(self) -> None:
        self._digest_call = None
        for peer in self.peers.values():
            if peer.channels:
                peer.channels[0].send_heartbeat()

    def heard_connections(self, proto: Link, connected: str) -> None:
        peer = self.peers.get(proto.peer or "")
        if peer is not None:
            peer.their_peers = frozenset(n for n in connected.split(",") if n in self.members)

    # -- DNSSEC key sets -----------------------------------------------------------------

    def set_dnssec_keys(self, keysets: Mapping[str, str]) -> None:
        """Our signed zones' key-set digests (at start, and after a reload): told to peers
        in Hello, and by a heartbeat on open connections when they change."""
        self.dnssec_keys = dict(keysets)
        self.dnssec_keys_text = keyset.encode(keysets) if keysets else ""
        for peer in self.peers.values():
            peer.compare_keys(self.dnssec_keys)

    def heard_keys(self, proto: Link) -> None:
        """*proto*'s peer told its key-set digests (in its Hello or a heartbeat)."""
        peer = self.peers.get(proto.peer or "")
        if peer is not None and proto.dnssec_keys is not None:
            peer.heard_keys(self.dnssec_keys, proto.dnssec_keys)

    def heard_digest(self, proto: Link, digest: str) -> None:
        peer = self.peers.get(proto.peer or "")
        if peer is not None:
            peer.digest = digest
            peer.last_contact = self.clock.seconds()

    def channel(self, name: str) -> Link | None:
        peer = self.peers.get(name)
        return peer.channels[0] if peer and peer.channels else None

    # -- pushing and relaying -------------------------------------------------------------

    def _changed(self, record: Record) -> None:
        if self._digest_call is None:
            self._digest_call = self.clock.callLater(DIGEST_DELAY, self._tell_digest)
        if self._bulk:
            self.bulk_merged += 1
            return  # the other peers catch up by reconciling with us (see `AntiEntropy._reconcile_counted`)
        if not record.live(self.clock.seconds()):
            return  # an expiry, not news
        origin = record.origin
        for name, peer in self.peers.items():
            if name == self._merging_from or not peer.channels or name == origin:
                continue
            if origin != self.node and origin in peer.their_peers:
                continue  # it hears from the origin directly
            self._outbox.setdefault(name, []).append(record)
        if self._outbox and self._flush is None:
            self._flush = self.clock.callLater(0, self.flush)

    def flush(self) -> None:
        """Send what is queued for each peer, in batches."""
        self._flush = None
        outbox, self._outbox = self._outbox, {}
        now = self.clock.seconds()
        for name, records in outbox.items():
            proto = self.channel(name)
            if proto is None:
                continue
            if proto.blocked:
                # it has not read what went before: it catches up by reconciling once it
                # has (`output_drained`); a flush that blocks it midway sends the rest
                # (MAX_OUTSTANDING bounds that)
                self.peers[name].behind = True
                continue
            latest = {r.key: r for r in records}.values()  # only the newest per key
            for batch, keys in codec.batches(self.anti_entropy.takes(proto, latest), now):
                self._publish(proto, batch, len(keys))

    def _publish(self, proto: Link, batch: bytes, count: int) -> defer.Deferred[Any] | None:
        peer = self.peers[proto.peer or ""]
        if proto.outstanding >= MAX_OUTSTANDING:
            peer.behind = True  # anti-entropy will bring it what it missed
            return None
        proto.outstanding += 1
        peer.sent += count

        def answered(result: Any) -> Any:
            proto.outstanding -= 1
            if peer.behind and proto.outstanding == 0:
                peer.behind = False
                self.anti_entropy.reconcile(proto)
            return result

        d: defer.Deferred[Any] = proto.callRemote(commands.Publish, records=batch)
        d.addBoth(answered)
        d.addErrback(lambda _: None)
        return d

    def output_drained(self, proto: Link) -> None:
        """*proto*'s output, blocked, went out: a peer whose pushes were skipped meanwhile
        and that has none unanswered reconciles now (otherwise when the last is answered)."""
        peer = self.peers.get(proto.peer or "")
        if peer is not None and peer.behind and proto.outstanding == 0 and proto in peer.channels:
            peer.behind = False
            self.anti_entropy.reconcile(proto)

    def receive(self, proto: Link, batch: bytes, bulk: bool = False) -> int:
        """Merge a batch from *proto*'s peer; relay what is new. Raises `BadMessage`."""
        return self._merge(proto, self._decode(proto, batch), bulk)

    def receive_in_slices(
        self, proto: Link, batch: bytes, bulk: bool = False, at_once: bool = True
    ) -> defer.Deferred[int]:
        """Like `receive`, but `MERGE_SLICE` records per reactor turn, the first now (or,
        not *at_once*, in the next turn: a connection resumed after a pause delivers the
        batches it buffered at once, and their first slices merged there and then held the
        reactor 80 ms); fires with the count merged. The whole batch is checked first: a
        malformed one raises `BadMessage` here and nothing of it is merged."""
        merging = _SlicedMerge(self, proto, self._decode(proto, batch), bulk)
        if at_once:
            merging.step(0)
        else:
            self.clock.callLater(0, merging.step, 0)
        return merging.done

    def _decode(self, proto: Link, batch: bytes) -> list[Record]:
        try:
            records = codec.decode(batch, self.clock.seconds(), self.members, self.protocol_version)
        except codec.BadRecord as e:
            self.refused[e.problem.kind, e.problem.reason] += 1
            raise
        peer = self.peers[proto.peer or ""]
        peer.last_contact = self.clock.seconds()
        peer.received += len(records)
        return records

    def _merge(self, proto: Link, records: list[Record], bulk: bool) -> int:
        merged = 0
        self._merging_from = proto.peer
        self._bulk = bulk
        try:
            for record in records:
                if not self._room_for(proto, record):
                    if proto.closed:
                        break  # dropped: the rest is not merged
                    continue
                if self.store.merge(record):
                    merged += 1
        finally:
            self._merging_from = None
            self._bulk = False
        return merged

    def _room_for(self, proto: Link, record: Record) -> bool:
        """Whether *record* stays within its origin's cap for its kind (see the module's
        docstring); when not, it is counted and its sender dropped or its origin capped."""
        kind = kind_of(record.key)
        limit = schema.KINDS[kind].max_records  # (a known kind: the codec checked)
        origin = record.origin
        if self.store.held_by(origin, kind) < limit:
            return True
        held = self.store.raw(record.key)
        if held is not None and held.origin == origin:
            return True  # it replaces one of the origin's own: the count stays
        self.refused[kind, "count"] += 1
        if origin == proto.peer:
            proto.violation(f"it wrote more than {limit} {kind} records, the most one member may hold")
            return False
        kinds = self.capped.setdefault(origin, set())
        if kind not in kinds:
            kinds.add(kind)
            log.warn(
                "{origin} holds {limit} {kind} records here, the most one member may: more of them are refused, "
                "and anti-entropy skips {origin} until it holds fewer",
                origin=origin,
                limit=limit,
                kind=kind,
                event="origin_capped",
            )
        return False

    def still_capped(self, origin: str) -> bool:
        """Whether this node still holds about its cap of *origin*'s records of a kind (the
        cap is lifted once it holds less than `schema.WRITER_SHARE` of it)."""
        kinds = self.capped.get(origin)
        if not kinds:
            return False
        for kind in list(kinds):
            if self.store.held_by(origin, kind) < schema.KINDS[kind].writer_limit:
                kinds.discard(kind)
        if kinds:
            return True
        del self.capped[origin]
        log.info("{origin} holds fewer records than its caps here: reconciled again", origin=origin)
        return False


class _SlicedMerge:
    """One batch merged `MERGE_SLICE` records per reactor turn (`Replicator.receive_in_slices`).
    An object rather than a closure that schedules itself by name: such a closure is a
    reference cycle (the function, its cell), so the batch it holds waits for the garbage
    collector, and a `gc.freeze` while it is under way (`gtmcluster.runtime.heap`) kept it for good."""

    def __init__(self, replicator: Replicator, proto: Link, records: list[Record], bulk: bool) -> None:
        self.replicator = replicator
        self.proto = proto
        self.records = records
        self.bulk = bulk
        self.merged = 0
        self.done: defer.Deferred[int] = defer.Deferred()

    def step(self, start: int) -> None:
        records = self.records
        if not self.proto.closed:  # (the peer is gone: the rest is not merged)
            self.merged += self.replicator._merge(self.proto, records[start : start + MERGE_SLICE], self.bulk)
            if start + MERGE_SLICE < len(records):
                self.replicator.clock.callLater(0, self.step, start + MERGE_SLICE)
                return
        self.records = []
        self.done.callback(self.merged)
