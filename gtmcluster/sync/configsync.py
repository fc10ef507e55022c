"""Config sync: the group's configuration, as bundles, passed from member to member.

A member publishes a bundle (`gtmcluster config push`, or a SIGHUP after its file
changed: see `service.NodeService`); every member keeps the newest bundle it knows of
(`groupconfig.bundle.newer`: generation, then publisher, then digest) on its shelf
(`groupconfig.shelf`) and runs it. Members tell each other what they hold and run with
`ConfigState`, when a connection is established and whenever it changes. A member told
of a newer bundle than its own fetches it from that peer (`ConfigFetch`, in parts of at
most `codec.MAX_BATCH` bytes), checks it (size before anything is parsed, then shape,
digest, and that it is what the peer announced; then, its config parsed, that it carries
exactly the files its config names and no secret: `vet`), keeps it, and tells its peers,
who fetch it in turn: a member that reaches one peer only still gets it, and one that was down
gets it when it connects. Then it runs it, as a reload (`apply`): a bundle it cannot
run (its own sockets changed, a file of its own is missing) is refused, kept, relayed,
and said in its state, so status shows it on every member.

One fetch runs at a time, for the newest bundle any peer offers; one apply at a time,
of the newest bundle held (bundles that came meanwhile are skipped over).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from gtmcluster.config.problems import ConfigError
from gtmcluster.config.source import yamlsrc
from gtmcluster.groupconfig import bundle
from gtmcluster.groupconfig.bundle import Bundle, Header
from gtmcluster.groupconfig.shared import Exchange, Running
from gtmcluster.groupconfig.shelf import Shelf
from gtmcluster.sync import codec, commands
from gtmcluster.sync.codec import BadMessage, ConfigView
from gtmcluster.sync.link import Link
from gtmcluster.sync.peerstate import PeerState

log = Logger()

#: bytes of a bundle per ConfigFetch answer
CHUNK = codec.MAX_BATCH
#: the largest encoded bundle a member fetches (`bundle.decode` checks it again)
MAX_ENCODED = bundle.MAX_BYTES * 4 // 3 + 65536
#: the first protocol version that has config sync
VERSION = 3
#: seconds a peer has to answer one ConfigFetch (a part of at most `CHUNK` bytes): past it
#: the fetch is given up (logged), and the bundle is fetched from whoever offers it next
FETCH_PART_TIMEOUT = 30.0


class Group(Protocol):
    """The node's replication, as config sync sees it (`sync.replicator.Replicator` is one):
    the members, what is known of each (their channels), the clock."""

    members: frozenset[str]
    peers: dict[str, PeerState]
    clock: IReactorTime


class ConfigSync(Exchange):
    """The peers' exchange of the group's config bundles (above): the member's side of
    config sync (`groupconfig.shared.GroupConfig`) runs on it, its `Exchange`."""

    def __init__(self, replicator: Group, shelf: Shelf, enabled: bool = True):
        self.replicator = replicator
        self.shelf = shelf
        #: off (`sync_group.config_sync: false`): nothing is fetched or run; peers are
        #: still told what this member runs, for status
        self.enabled = enabled
        self.running = Running()
        #: the newest bundle this member refused to run, and why (cleared by one it runs)
        self.refused: tuple[Header, tuple[str, ...]] | None = None
        #: what each peer last said (kept after it disconnects, for status)
        self.views: dict[str, ConfigView] = {}
        #: the peers that said it since they connected
        self.heard: set[str] = set()
        #: runs a bundle held (on the shelf) as the member's config; fires with the
        #: problems that kept it from running (none: it runs it)
        self.apply: Callable[[Header], defer.Deferred[list[str]]] | None = None
        #: why a bundle received is not to be kept nor relayed (`bundle.check`), its config
        #: parsed (the service parses it beside the reactor; here at once, as in tests)
        self.vet: Callable[[Bundle], defer.Deferred[list[str]]] = _vet_here
        #: told whenever what this member holds or runs changes
        self.listeners: list[Callable[[], None]] = []
        #: runs file work (writing a bundle: 40 ms at 5,000 servers) off the reactor's
        #: thread (the service gives its thread pool; at once here, as in tests)
        self.in_thread: Callable[[Callable[[], Any]], defer.Deferred[Any]] = defer.maybeDeferred
        self._fetching: Header | None = None
        #: offers whose fetch failed, by peer: not tried again until that peer says more
        self._failed: dict[str, Header] = {}
        self._applying = False
        self._served: tuple[tuple[int, str, str], bytes] | None = None  # the bundle last served

    # -- what this member says -----------------------------------------------------------

    @property
    def held(self) -> Header | None:
        return self.shelf.newest()

    def view(self) -> ConfigView:
        refused, reasons = self.refused if self.refused else (None, ())
        r = self.running
        return ConfigView(self.held, r.generation, r.digest, r.config_digest, refused, reasons)

    def _channels(self) -> list[Link]:
        return [
            p.channels[0] for p in self.replicator.peers.values() if p.channels and p.channels[0].version >= VERSION
        ]

    def tell(self) -> None:
        """Say this member's state to every peer (it changed)."""
        state = codec.config_state(self.view())
        for proto in self._channels():
            _send_state(proto, state)
        for listener in self.listeners:
            listener()

    @property
    def settled(self) -> bool:
        """Every connected peer has said what it holds, and this member holds and runs (or
        refused) the newest of it: it may answer with what its config says."""
        if not self.enabled:
            return True
        if self._fetching is not None or self._applying:
            return False
        held = self.held
        for proto in self._channels():
            if proto.peer not in self.heard:
                return False
            offered = self.views[proto.peer].held
            if (
                offered is not None
                and bundle.newer(held, offered) is not held
                and self._failed.get(proto.peer) != offered
            ):
                return False
        if held is None or held.digest == self.running.digest:
            return True
        return self.refused is not None and self.refused[0].digest == held.digest

    # -- peers ----------------------------------------------------------------------------

    def connected(self, proto: Link) -> None:
        """A peer of version 3 or later connected: tell it."""
        if proto.version >= VERSION:
            _send_state(proto, codec.config_state(self.view()))

    def lost(self, name: str) -> None:
        self.heard.discard(name)
        self._failed.pop(name, None)

    def heard_state(self, proto: Link, data: bytes) -> None:
        """A peer's `ConfigState` (raises `BadMessage` if malformed: the peer is dropped)."""
        view = codec.read_config_state(data)
        name = proto.peer or ""
        self.views[name] = view
        self.heard.add(name)
        self._failed.pop(name, None)
        peer = self.replicator.peers.get(name)
        if peer is not None:
            peer.config_digest = view.config_digest  # (Hello said it only as it was then)
        for listener in self.listeners:
            listener()
        offered = view.held
        if not self.enabled or offered is None:
            return
        if offered.publisher not in self.replicator.members:
            log.warn(
                "peer {peer} offers config generation {generation} published by {publisher}, not a member: ignored",
                peer=name,
                generation=offered.generation,
                publisher=offered.publisher,
                event="config_offer_refused",
            )
            return
        if bundle.newer(self.held, offered) is offered and offered != self.held:
            self._want(proto, offered)

    def _want(self, proto: Link, offered: Header) -> None:
        if self._fetching is not None and bundle.newer(self._fetching, offered) is self._fetching:
            return  # fetching this one, or a newer one
        self._fetching = offered
        defer.ensureDeferred(self._fetch(proto, offered)).addErrback(self._fetch_failed, proto, offered)

    async def _fetch(self, proto: Link, offered: Header) -> None:
        parts: list[bytes] = []
        offset, total = 0, None
        while total is None or offset < total:
            if self._fetching is not offered:
                return  # a newer one is being fetched
            asked = proto.callRemote(
                commands.ConfigFetch,
                generation=offered.generation,
                publisher=offered.publisher,
                digest=offered.digest,
                offset=offset,
            )
            # (a member that holds the answer back, heartbeats going, would stall this
            # generation here until the connection dropped)
            answer = await asked.addTimeout(FETCH_PART_TIMEOUT, self.replicator.clock)
            data, size = answer["data"], answer["total"]
            if size > MAX_ENCODED:
                proto.violation(f"offers a config bundle of {size:,} bytes, over the limit of {MAX_ENCODED:,}")
                raise _Abandoned()
            if (total is not None and size != total) or (offset < size and not data) or offset + len(data) > size:
                raise BadMessage(f"a config bundle's parts do not add up (at {offset} of {size}, {len(data)} bytes)")
            total = size
            parts.append(data)
            offset += len(data)
        data = b"".join(parts)
        # (off the reactor: with GeoIP databases a bundle is tens of megabytes of base64)
        got = await self.in_thread(lambda: bundle.decode(data))
        if got.header != offered:
            raise BadMessage(f"sent config generation {got.generation} ({got.digest[:12]}), not what it offered")
        problems = await self.vet(got)
        if problems:
            self._turned_away(proto, got.header, problems)
            raise _Abandoned()
        log.info(
            "took config generation {generation} ({digest}) published by {publisher} from {peer}",
            generation=got.generation,
            digest=got.digest[:12],
            publisher=got.publisher,
            peer=proto.peer,
            event="config_fetched",
        )
        await self.take(got, data)
        if self._fetching is offered:
            self._fetching = None
        self._next()

    def _turned_away(self, proto: Link, header: Header, problems: list[str]) -> None:
        """Bundle *header*, fetched from *proto*, is not kept nor relayed: said in this
        member's refusal (status shows it on every member) and logged."""
        log.error(
            "config generation {generation} ({digest}) published by {publisher}, from {peer}, is refused and not "
            "kept: {problems}",
            generation=header.generation,
            digest=header.digest[:12],
            publisher=header.publisher,
            peer=proto.peer,
            problems="; ".join(problems),
            event="config_turned_away",
        )
        if self.refused is None or bundle.newer(self.refused[0], header) is header:
            self.refused = (header, tuple(r[: codec.MAX_REASON] for r in problems[: codec.MAX_REASONS]))
            self.tell()

    def _fetch_failed(self, failure: Failure, proto: Link, offered: Header) -> None:
        if self._fetching is offered:
            self._fetching = None
        self._failed[proto.peer or ""] = offered
        if failure.check(BadMessage, bundle.BadBundle):
            proto.violation(f"a bad config bundle: {failure.getErrorMessage()}")
        elif not failure.check(_Abandoned):
            log.warn(
                "fetching config generation {generation} from {peer} failed: {why}",
                generation=offered.generation,
                peer=proto.peer,
                why=failure.getErrorMessage(),
                event="config_fetch_failed",
            )
        self._next()

    def _next(self) -> None:
        """Fetch the newest bundle a connected peer offers, if newer than the one held."""
        best: tuple[Header, Link] | None = None
        for proto in self._channels():
            offered = self.views[proto.peer].held if proto.peer in self.heard else None
            if offered is None or offered.publisher not in self.replicator.members:
                continue
            if self._failed.get(proto.peer or "") == offered:
                continue
            if best is None or bundle.newer(best[0], offered) is offered:
                best = (offered, proto)
        if best is not None and bundle.newer(self.held, best[0]) is best[0] and best[0] != self.held:
            self._want(best[1], best[0])

    def fetch_answer(self, generation: int, publisher: str, digest: str, offset: int) -> dict[str, Any]:
        """A `ConfigFetch`: part of a bundle held here."""
        key = (generation, publisher, digest)
        if self._served is None or self._served[0] != key:
            header = self.shelf.find(generation, digest, publisher)
            if header is None:
                raise commands.NotHeld(f"no config generation {generation} ({digest[:12]}) of {publisher} here")
            try:
                self._served = (key, self.shelf.encoded(header))
            except OSError as e:
                raise commands.NotHeld(f"config bundle {digest[:12]}: {e}") from None
        data = self._served[1]
        if offset < 0 or offset > len(data):
            raise BadMessage(f"offset {offset} outside a bundle of {len(data)} bytes")
        return {"data": data[offset : offset + CHUNK], "total": len(data)}

    # -- taking and running ---------------------------------------------------------------

    def take(self, got: Bundle, encoded: bytes | None = None) -> defer.Deferred[None]:
        """Keep *got* (fetched: *encoded* as it came), tell the peers, and run the newest
        held. Fires once it is held (or could not be written: logged)."""
        written = self.in_thread(lambda: self.shelf.write(got, encoded))
        return written.addCallbacks(self._written, self._unkept, callbackArgs=(got,), errbackArgs=(got,))

    def _written(self, _: object, got: Bundle) -> None:
        self.shelf.hold(got.header)
        self.tell()
        self._next()
        self.run_newest()

    def _unkept(self, failure: Failure, got: Bundle) -> None:
        failure.trap(OSError, bundle.BadBundle)
        log.error(
            "cannot keep config generation {generation} in {dir}: {why}",
            generation=got.generation,
            dir=self.shelf.directory,
            why=failure.getErrorMessage(),
            event="config_unkept",
        )

    def run_newest(self) -> None:
        """Run the newest bundle held, unless it runs already (one at a time)."""
        if self._applying or self.apply is None or not self.enabled:
            return
        held = self.held
        if held is None or held.digest == self.running.digest:
            return
        if self.refused is not None and self.refused[0] == held:
            return
        self._run(held)

    def _run(self, held: Header) -> defer.Deferred[list[str]]:
        assert self.apply is not None
        self._applying = True
        self.shelf.pin(held)
        return self.apply(held).addBoth(self._applied, held)

    def retry(self) -> defer.Deferred[list[str]] | None:
        """Run the newest bundle held again, if it was refused here (a SIGHUP after the
        cause was mended: certificates put in place); fires with the problems. None when
        there is nothing to retry."""
        held = self.held
        if self.refused is None or held is None or self.refused[0] != held or self._applying or self.apply is None:
            return None
        self.refused = None
        return self._run(held)

    def _applied(self, result: list[str] | Failure, held: Header) -> list[str]:
        """The problems that kept *held* from running (none: it runs)."""
        self._applying = False
        self.shelf.unpin(held)
        if isinstance(result, Failure):
            log.failure("running config generation {generation} failed", result, generation=held.generation)
            result = ["an internal error (see the node's log)"]
        newest = self.held
        if result and newest is not None and newest != held and bundle.newer(held, newest) is newest:
            # another bundle won while this one was read (two members published at once):
            # what kept this one from running is moot, and no refusal of it is said
            log.info(
                "config generation {generation} ({digest}) published by {publisher} was superseded by "
                "{newer} ({newer_digest}) published by {newer_publisher} while it was read: {problems}",
                generation=held.generation,
                digest=held.digest[:12],
                publisher=held.publisher,
                newer=newest.generation,
                newer_digest=newest.digest[:12],
                newer_publisher=newest.publisher,
                problems="; ".join(result),
                event="config_superseded",
            )
            self.run_newest()
            return result
        if result:
            self.refused = (held, tuple(r[: codec.MAX_REASON] for r in result[: codec.MAX_REASONS]))
            log.error(
                "config generation {generation} ({digest}) published by {publisher} is refused here, the running "
                "config stays: {problems}",
                generation=held.generation,
                digest=held.digest[:12],
                publisher=held.publisher,
                problems="; ".join(result),
                event="config_refused",
            )
            self.tell()
        self.run_newest()
        return result

    def ran(self, header: Header | None, config_digest: str) -> None:
        """The member now runs *header*'s bundle (None: its own file) with *config_digest*."""
        self.running = Running(header.generation if header else 0, header.digest if header else "", config_digest)
        if header is not None and self.refused is not None and bundle.newer(self.refused[0], header) is header:
            self.refused = None
        self.shelf.running = self.shelf.folder(header) if header else None
        self.shelf.prune()  # the folder it ran before goes, if nothing else keeps it
        self.tell()


def _vet_here(got: Bundle) -> defer.Deferred[list[str]]:
    try:
        raw = yamlsrc.parse(got.main, got.config_text)
    except ConfigError as e:
        return defer.succeed([str(p) for p in e.problems])
    return defer.succeed([str(p) for p in bundle.check(got, raw)])


class _Abandoned(Exception):
    """A fetch given up (the peer was dropped, and why was logged)."""


def _send_state(proto: Link, state: bytes) -> None:
    proto.callRemote(commands.ConfigState, state=state).addErrback(_unanswered)


def _unanswered(failure: Failure) -> None:
    """A ConfigState the peer did not answer: its connection went (and says so)."""
