"""Anti-entropy of the sync group: how two connected members find and pull what the other
has newer. `AntiEntropy` is a collaborator of the replication (`sync.replicator.Replicator`
holds one): it reads the store, and takes what it needs of the replication through the
narrow `Replica` (the peers, the merge of what a peer sends, the origins capped); a peer
connection asks it as a `sync.link.Reconciler`.

On every new connection both sides reconcile: they exchange per-origin summaries (count and
XOR of (key, version) hashes); for an origin that differs, a side that holds none of it asks
for all of it (`SendAll`), otherwise it compares the origin's 1024 bucket hashes, lists the
(key, version) pairs of the differing buckets and pulls the keys where the peer is newer.
Each side pulls what it lacks, so one round in each direction brings both to the same state.

Mixed versions (a rolling upgrade). A peer that speaks an older protocol version (its
Hello says which) would refuse the records of newer key shapes (`schema.version_needed`:
version 2 brought admin records of every level but vs, version 4 links' traffic) and drop the connection that
carried one. So such records are withheld from it on every path: pushes and relays, pulls,
SendAll streams and listings. Both sides of such a pair compare their digests over the
records both can hold: what this node says of its state to that peer (summary, buckets,
heartbeat digest), and what it compares the peer's answers with, leave the withheld
records out. Otherwise every round would find the origins differing, list the withheld
keys and pull them in vain, for ever. The older member never holds those records; a newer
member reached only through older ones gets them when it connects to one that has them.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from gtmcluster.state import schema
from gtmcluster.state.record import BUCKETS, OriginSummary, Record, bucket_of, fingerprint
from gtmcluster.state.store import Store
from gtmcluster.sync import codec, commands
from gtmcluster.sync.codec import BadMessage
from gtmcluster.sync.link import Link
from gtmcluster.sync.peerstate import PeerState

#: the replicator's log namespace: operators filter the sync group's lines by it (docs/operations.md)
log = Logger(namespace="gtmcluster.sync.replicator")

#: keys per Pull request and buckets per Listing request
PULL_KEYS = 500
LISTING_BUCKETS = 64
#: Publish batches of a SendAll stream unanswered at once
SEND_ALL_WINDOW = 4
#: records of a SendAll stream read from the store at a time
SEND_ALL_CHUNK = 2000


class Replica(Protocol):
    """The replication anti-entropy works for, as it sees it (`sync.replicator.Replicator`
    is one)."""

    @property
    def peers(self) -> Mapping[str, PeerState]:
        """What is known of each member: its connections, whether it was reconciled with."""

    @property
    def bulk_merged(self) -> int:
        """Records merged so far from reconciliation transfers (not relayed one by one)."""

    def receive(self, proto: Link, batch: bytes, bulk: bool = False) -> int:
        """Merge a batch from *proto*'s peer (raises `BadMessage`); the count merged."""

    def still_capped(self, origin: str) -> bool:
        """Whether records of *origin* beyond its cap are still refused here."""


class AntiEntropy:
    """Reconciliation with a peer, both the asking and the answering side."""

    def __init__(self, replica: Replica, store: Store, clock: IReactorTime) -> None:
        self.replica = replica
        self.store = store
        self.clock = clock
        self._reconciling: set[Link] = set()
        #: one reconciliation at a time: a fresh node fills up from its first peer, and the
        #: rounds with the others then find little to pull
        self._lock = defer.DeferredLock()
        #: the store is still loading its snapshot (see `hold_until`)
        self.loading = False

    def hold_until(self, loaded: defer.Deferred[None]) -> defer.Deferred[None]:
        """Hold reconciliations until *loaded* fires (see `Replicator.hold_until`): they
        wait, and peers asking for our summary are told we are still loading. Fires once
        they may go ahead (those held do, from then on)."""
        self.loading = True
        taken = self._lock.acquire()  # free at start (nothing reconciles before peers connect)
        released: defer.Deferred[None] = defer.Deferred()

        def release(_: object) -> None:
            self.loading = False
            self._lock.release()
            released.callback(None)

        taken.addCallback(lambda _: loaded).addBoth(release)
        return released

    # -- peers of older protocol versions ----------------------------------------------------

    def can_take(self, proto: Link, key: str) -> bool:
        """Whether *proto*'s peer takes a record at *key* (its protocol version knows the key)."""
        return proto.version >= schema.NEWEST_VERSION or schema.version_needed(key) <= proto.version

    def takes(self, proto: Link, records: Iterable[Record]) -> Iterable[Record]:
        """*records* but those *proto*'s peer would refuse."""
        if proto.version >= schema.NEWEST_VERSION:
            return records
        return [r for r in records if schema.version_needed(r.key) <= proto.version]

    def withheld(self, version: int) -> list[Record]:
        """The records held here (tombstones too) that a peer of protocol *version* would
        refuse: of `schema.VERSIONED_KINDS` only (admin records, a few thousand at most)."""
        if version >= schema.NEWEST_VERSION:
            return []
        return [
            r
            for kind in schema.VERSIONED_KINDS
            for r in self.store.held_of_kind(kind)
            if schema.version_needed(r.key) > version
        ]

    def summaries_for(self, proto: Link | None) -> dict[str, OriginSummary]:
        """Per-origin summaries of the records *proto*'s peer can hold (all, for None)."""
        summaries = self.store.summaries()
        if proto is None:
            return summaries
        for record in self.withheld(proto.version):
            held = summaries[record.origin]
            held.count -= 1
            held.xor ^= fingerprint(record.key, record.version)
            if not held.count:
                del summaries[record.origin]
        return summaries

    def buckets_for(self, proto: Link, origin: str) -> list[int]:
        """*origin*'s bucket hashes over the records *proto*'s peer can hold."""
        buckets = self.store.buckets(origin)
        for record in self.withheld(proto.version):
            if record.origin == origin:
                buckets[bucket_of(record.key)] ^= fingerprint(record.key, record.version)
        return buckets

    def digest_for(self, version: int) -> str:
        """The state digest over the records a peer of protocol *version* can hold (as
        `Store.digest`): what it is told, and what its own digest is compared with."""
        withheld = self.withheld(version)
        if not withheld:
            return self.store.digest()
        count, _, xor = self.store.digest().partition("-")
        value = int(xor, 16)
        for record in withheld:
            value ^= fingerprint(record.key, record.version)
        return f"{int(count) - len(withheld)}-{value:016x}"

    # -- anti-entropy: the answering side -----------------------------------------------------

    def summary_message(self, proto: Link | None = None) -> bytes:
        """Our per-origin summaries, as *proto*'s peer compares them (see `summaries_for`)."""
        summaries = self.summaries_for(proto)
        return codec.summary({o: (s.count, s.xor) for o, s in summaries.items()})

    def buckets_message(self, proto: Link, origin: str) -> bytes:
        return codec.buckets(self.buckets_for(proto, origin))

    def listing_message(self, proto: Link, origin: str, request: bytes) -> tuple[bytes, bytes]:
        wanted = codec.read_bucket_cursors(request)
        listing = self.store.listing(origin, {b for b, _ in wanted})
        entries: list[Any] = []
        size = 2
        rest: list[list[Any]] = []
        for bucket, after in wanted:
            if rest:
                rest.append([bucket, after])
                continue
            for key, version in listing[bucket]:
                if key <= after or not self.can_take(proto, key):
                    continue
                entry = codec.listing_entry(key, version)
                cost = len(json.dumps(entry)) + 1
                if size + cost > codec.MAX_BATCH:
                    rest.append([bucket, entries[-1][0] if entries and entries[-1][0] > after else after])
                    break
                entries.append(entry)
                size += cost
        return codec.listing(entries), codec.bucket_list(rest)

    def pull_message(self, proto: Link, request: bytes) -> tuple[bytes, bytes]:
        keys = codec.read_keys(request, "keys")
        if len(keys) > 4 * PULL_KEYS:
            raise BadMessage(f"a Pull of {len(keys)} keys")
        now = self.clock.seconds()
        records = [r for k in keys if (r := self.store.raw(k)) is not None and r.live(now) and self.can_take(proto, k)]
        for batch, included in codec.batches(records, now):
            rest = [r.key for r in records[len(included) :]]
            return batch, codec.keys(rest)
        return b"[]", codec.keys([])

    def send_all(self, proto: Link, origin: str) -> defer.Deferred[int]:
        """Stream every record of *origin* to the peer as Publish batches, one at a time."""
        return defer.ensureDeferred(self._send_all(proto, origin))

    async def _send_all(self, proto: Link, origin: str) -> int:
        """Up to `SEND_ALL_WINDOW` batches are unanswered at a time: the peer merges one
        while this node encodes the next; none is sent while the connection's output is
        blocked (the peer does not read it)."""
        sent = 0
        unanswered: deque[tuple[defer.Deferred[Any], int]] = deque()
        try:
            for batch, keys in self._batches_of(origin, proto):
                if proto.blocked:
                    await proto.when_writable()
                if not proto.established:
                    break
                if len(unanswered) >= SEND_ALL_WINDOW:
                    d, count = unanswered.popleft()
                    await d
                    sent += count
                unanswered.append((proto.callRemote(commands.Publish, records=batch, bulk=True), len(keys)))
            while unanswered:
                d, count = unanswered.popleft()
                await d
                sent += count
        finally:
            for d, _ in unanswered:  # the connection failed: these fail alike
                d.addErrback(lambda _: None)
        return sent

    def _batches_of(self, origin: str, proto: Link | None = None) -> Iterator[tuple[bytes, list[str]]]:
        """Publish batches of *origin*'s live records, made as they are asked for: the store
        is read `SEND_ALL_CHUNK` records at a time, between which the reactor runs (a full
        table is millions of records), and each chunk is aged at the time it is encoded.
        For *proto*, the records its peer takes (see the module's docstring)."""
        records = self.store.records_of(origin)
        while chunk := list(itertools.islice(records, SEND_ALL_CHUNK)):
            now = self.clock.seconds()
            live = [r for r in chunk if r.live(now)]
            yield from codec.batches(live if proto is None else self.takes(proto, live), now)

    # -- anti-entropy: the asking side --------------------------------------------------------

    def reconcile(self, proto: Link) -> defer.Deferred[None]:
        """Pull from *proto*'s peer whatever it has newer than we do."""
        if proto in self._reconciling:
            return defer.succeed(None)
        self._reconciling.add(proto)
        d = self._lock.run(lambda: defer.ensureDeferred(self._reconcile_counted(proto)))

        def done(result: Any) -> None:
            self._reconciling.discard(proto)
            if isinstance(result, Failure):
                if result.check(BadMessage):
                    proto.violation(f"malformed reconciliation answer: {result.getErrorMessage()}")
                elif result.check(commands.Loading):
                    log.info(
                        "{peer} is still loading its state snapshot: reconciling when it says it is done",
                        peer=proto.peer,
                        event="peer_loading",
                    )
                elif proto.established:
                    log.warn("reconciliation with {peer} failed: {why}", peer=proto.peer, why=result.getErrorMessage())

        d.addBoth(done)
        return d

    async def _reconcile_counted(self, proto: Link) -> None:
        if not proto.established:
            return
        before = self.replica.bulk_merged
        await self._reconcile(proto)
        if self.replica.bulk_merged > before:
            # What we pulled was not relayed record by record: let the others pull it.
            for peer in self.replica.peers.values():
                if peer.name != proto.peer and peer.channels:
                    self.clock.callLater(0, self.ask_to_reconcile, peer.channels[0])

    def ask_to_reconcile(self, proto: Link) -> None:
        """Have *proto*'s peer pull from us (it reconciles when told we changed)."""
        if proto.established:
            proto.callRemote(commands.Changed).addErrback(lambda _: None)

    async def _reconcile(self, proto: Link) -> None:
        answer = await proto.callRemote(commands.Summary, summary=self.summary_message(proto))
        theirs = codec.read_summary(answer["summary"])
        mine = self.summaries_for(proto)
        for origin, (count, xor) in sorted(theirs.items()):
            held = mine.get(origin)
            if held is not None and (held.count, held.xor) == (count, xor):
                continue
            if self.replica.still_capped(origin):
                continue  # what differs would be refused again (see the module's docstring)
            if held is None:
                await proto.callRemote(commands.SendAll, origin=origin)
                continue
            raw = (await proto.callRemote(commands.Buckets, origin=origin))["buckets"]
            their_buckets = codec.read_buckets(raw)
            my_buckets = self.buckets_for(proto, origin)
            differing = [i for i in range(BUCKETS) if their_buckets[i] != my_buckets[i]]
            await self._pull_buckets(proto, origin, differing)
        peer = self.replica.peers.get(proto.peer or "")
        if peer is not None and not peer.synced:
            peer.synced = True
            log.info("reconciled with {peer}: digest {digest}", peer=peer.name, digest=self.store.digest())
        if proto.established:
            proto.send_heartbeat()  # our digest, now that it may have changed

    async def _pull_buckets(self, proto: Link, origin: str, buckets: list[int]) -> None:
        pending: list[list[Any]] = [[b, ""] for b in buckets]
        wanted: list[str] = []
        while pending:
            request, pending = pending[:LISTING_BUCKETS], pending[LISTING_BUCKETS:]
            answer = await proto.callRemote(commands.Listing, origin=origin, buckets=codec.bucket_list(request))
            for key, version in codec.read_listing(answer["entries"]):
                mine = self.store.version_of(key)
                if mine is None or mine < version:
                    wanted.append(key)
            pending = codec.read_bucket_list(answer["rest"]) + pending
        await self.pull_keys(proto, wanted)

    async def pull_keys(self, proto: Link, wanted: list[str]) -> None:
        """Pull *wanted* from *proto*'s peer, `PULL_KEYS` per request."""
        while wanted:
            keys, wanted = wanted[:PULL_KEYS], wanted[PULL_KEYS:]
            answer = await proto.callRemote(commands.Pull, keys=codec.keys(keys))
            self.replica.receive(proto, answer["records"], bulk=True)
            wanted = codec.read_keys(answer["rest"], "rest") + wanted

    def reconcile_all(self) -> None:
        for peer in self.replica.peers.values():
            if peer.channels:
                self.reconcile(peer.channels[0])

    @property
    def synced(self) -> bool:
        """Every connected peer has been reconciled with at least once."""
        return all(p.synced for p in self.replica.peers.values() if p.connected)
