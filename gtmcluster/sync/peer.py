"""One connection to a peer: TLS identity, the Hello exchange, then the commands.

Its phases (handshake, hello, established, closed) are a state machine of their own
(`sync.phases`): each phase object says what the connection does in it (which commands it
reads, what a whole box or a heartbeat's tick does, what its end means), and this module
asks the phase it is in rather than testing which one it is. Besides them:

    established --a Publish batch------------------->   reading from the peer pauses until the
                                                         batch is merged (a slice per turn)
    established --our output blocked (the peer does
                not read what we send)------------->   its requests (`backpressure.ASKS`) are held, not
                                                         answered, until the output drains;
                                                         its other commands and its answers
                                                         are still read; our pushes to it stop
    established --output blocked for idle_timeout,
                more than MAX_HELD requests held,
                a second SendAll ------------------->   closed (logged)

Misbehaviour ends this connection only: the replicator and the other peers are not
disturbed.

Write-side back-pressure (`sync.backpressure`): the connection registers an `Outlet` with
its transport as a push producer; while the peer leaves our output unread its requests are
held, not answered, and its other commands and answers are still read.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any, cast

from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.interfaces import IDelayedCall, IHandshakeListener
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.protocols import amp
from twisted.python.failure import Failure
from zope.interface import implementer

from gtmcluster.runtime.tokenbucket import TokenBucket
from gtmcluster.sync import commands
from gtmcluster.sync.backpressure import Outlet
from gtmcluster.sync.boxes import MAX_BOX, MAX_COMMAND_RATE, RATE_BURST, box_problem, encoded_size
from gtmcluster.sync.codec import BadMessage
from gtmcluster.sync.link import Host
from gtmcluster.sync.phases import Phase, Phases
from gtmcluster.sync.silence import Silence
from gtmcluster.sync.tls import IdentityError, certificate_summary, handshake_failure, peer_identity

log = Logger()

#: seconds an established connection must last for its end not to count as a refusal
STABLE = 10.0


@implementer(IHandshakeListener)
class PeerProtocol(amp.AMP):
    def __init__(self, replicator: Host, expected: str | None = None):
        super().__init__()
        self.replicator = replicator
        self.expected = expected  # the member we dialled (None: they dialled us)
        self.initiator = expected is not None
        #: where the connection is (`phase` reads it; not `state`: AMP's string parser owns
        #: that attribute), moved only by the inputs of the transition table
        self.phases = Phases()
        self.peer: str | None = None
        #: the peer's certificate (serial in hex, expiry), once the handshake is done
        self.certificate: dict[str, str] = {}
        self.datacenter = ""
        self.version = 0
        self.config_digest = ""
        #: the peer's DNSSEC key-set digests as its Hello (or a later heartbeat) said them
        #: (`dnssec.keyset`), None when it said none (a member that predates them)
        self.dnssec_keys: str | None = None
        #: ours as last told on this connection (a heartbeat tells them again after a reload)
        self._keys_told = ""
        self.outstanding = 0  # our Publish commands not yet answered
        self._timer: IDelayedCall | None = None
        self._heartbeat: IDelayedCall | None = None
        #: heard within `heartbeat_timeout`, or silent (established connections)
        self.silence = Silence(
            replicator.clock,
            lambda: self.replicator.heartbeat_timeout,
            lambda: self.established,
            self._silence_changed,
        )
        self._box_bytes = 0
        self._announced = False  # the replicator knows this connection (and must hear of its end)
        self._was_established = False
        self._established_at = 0.0
        self._why = ""  # why we closed it, when we did
        self._rate = TokenBucket(MAX_COMMAND_RATE, RATE_BURST, 0.0)
        self._merging = 0  # Publish batches of this peer being merged (reading pauses meanwhile)
        self._closed: list[Deferred[None]] = []  # see `when_closed`
        #: our output, as the transport lets it go (registered with it as its producer)
        self.outlet = Outlet(self, replicator.clock, lambda: self.replicator.idle_timeout)
        self._watched = False  # the outlet is registered with the transport
        self._sending_all = False  # a SendAll stream of ours to the peer is under way

    # -- lifecycle ----------------------------------------------------------------------

    def connectionMade(self) -> None:
        super().connectionMade()
        self.replicator.connections.add(self)
        self._rate = TokenBucket(MAX_COMMAND_RATE, RATE_BURST, self.replicator.clock.seconds())
        cast(Any, self.transport).registerProducer(self.outlet, True)
        self._watched = True
        self._arm(self.replicator.handshake_timeout, "no TLS handshake and Hello")

    @property
    def phase(self) -> Phase:
        """The phase the connection is in (`sync.phases`): what it does there."""
        return self.phases.now

    @property
    def established(self) -> bool:
        """Past the Hellos and not closed: commands go both ways (`sync.link.Link`)."""
        return self.phases.now.established

    @property
    def closed(self) -> bool:
        """Refused, dropped or lost (`sync.link.Link`)."""
        return self.phases.now.closed

    def handshakeCompleted(self) -> None:
        r = self.replicator
        try:
            self.peer = peer_identity(self.transport, r.members, r.node, self.expected)
        except IdentityError as e:
            self.violation(f"certificate refused: {e}")
            return
        self.certificate = certificate_summary(self.transport)
        self.phases.verified()
        if self.initiator:
            d = self.callRemote(
                commands.Hello,
                node=r.node,
                group=r.group,
                datacenter=r.datacenter,
                version=r.protocol_version,
                min_version=commands.MIN_PROTOCOL_VERSION,
                config_digest=r.config_digest,
                dnssec_keys=self._tell_keys(),
            )
            d.addCallbacks(self._hello_answered, self._hello_failed)

    def _hello_answered(self, answer: dict[str, Any]) -> None:
        if not self.phase.awaits_answer:
            return
        problem = self.replicator.check_hello(
            self.peer or "", answer["node"], answer["group"], answer["version"], answer["version"]
        )
        if problem:
            self.violation(problem)
            return
        self.dnssec_keys = answer.get("dnssec_keys")
        self._establish(answer["datacenter"], answer["version"], answer["config_digest"])

    def _hello_failed(self, failure: Failure) -> None:
        self.violation(f"our Hello was refused: {failure.getErrorMessage()}")

    @commands.Hello.responder
    def hello(
        self,
        node: str,
        group: str,
        datacenter: str,
        version: int,
        min_version: int,
        config_digest: str,
        dnssec_keys: str | None = None,
    ) -> dict[str, Any]:
        r = self.replicator
        if not self.phase.takes_hello(self.initiator):
            self._close_soon("an unexpected Hello")
            raise commands.Refused("unexpected Hello")
        problem = r.check_hello(self.peer or "", node, group, version, min_version)
        if problem:
            self._close_soon(problem)
            raise commands.Refused(problem)
        agreed = min(version, r.protocol_version)
        self.dnssec_keys = dnssec_keys
        answer = {
            "node": r.node,
            "group": r.group,
            "datacenter": r.datacenter,
            "version": agreed,
            "config_digest": r.config_digest,
            "dnssec_keys": self._tell_keys(),
        }
        self._establish(datacenter, agreed, config_digest)
        return answer

    def _tell_keys(self) -> str:
        """Our key-set digests to tell the peer ("" while we sign nothing)."""
        self._keys_told = self.replicator.dnssec_keys_text
        return self._keys_told

    def _establish(self, datacenter: str, version: int, config_digest: str) -> None:
        self.phases.agreed()
        if self.factory is not None:
            self.factory.proven(self)  # (no longer counts as a connection still to prove itself)
        self._was_established = True
        self._established_at = self.replicator.clock.seconds()
        self.datacenter, self.version, self.config_digest = datacenter, version, config_digest
        self._arm(self.replicator.idle_timeout, self._idle_reason())
        self.schedule_heartbeat()
        self.silence.start(self._established_at)
        if self.initiator:
            self._announced = True
            self.replicator.established(self)
        else:
            # After our answer to their Hello has gone out: nothing of ours may reach the
            # initiator before it knows the Hello succeeded.
            self.replicator.clock.callLater(0, self._announce)

    def _announce(self) -> None:
        if self.established:
            self._announced = True
            self.replicator.established(self)

    def schedule_heartbeat(self) -> None:
        r = self.replicator
        self._heartbeat = r.clock.callLater(min(r.heartbeat_interval, r.idle_timeout / 3), self._beat)

    @property
    def silent(self) -> bool:
        """Nothing heard for `heartbeat_timeout` (`sync.silence`)."""
        return self.silence.silent

    def _silence_changed(self) -> None:
        if self._announced:
            self.replicator.silence_changed(self)

    def _beat(self) -> None:
        self._heartbeat = None
        self.phase.beat(self)

    def send_heartbeat(self) -> None:
        connected = ",".join(self.replicator.live_names())
        digest = self.replicator.anti_entropy.digest_for(self.version)
        # (our key sets again only after a reload changed them: "" says we sign nothing now)
        keys = self.replicator.dnssec_keys_text if self.replicator.dnssec_keys_text != self._keys_told else None
        if keys is not None:
            self._keys_told = keys
        self.callRemote(commands.Heartbeat, connected=connected, digest=digest, dnssec_keys=keys).addErrback(
            lambda _: None
        )

    def handshake_failed(self, reason: Failure) -> None:
        """OpenSSL refused the peer (foreign CA, expired, no certificate, not TLS at all)."""
        log.warn(
            "dropping peer connection {peer} ({direction}): TLS handshake failed: {reason}",
            peer=self.expected or self._address(),
            direction="outgoing" if self.initiator else "incoming",
            reason=handshake_failure(self.transport, reason),
            event="peer_refused",
        )

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.phase.lost(self, reason)
        if self.initiator and self.factory is not None:
            # A connection refused at TLS or Hello, or dropped soon after it got through
            # (the peer refuses what we send, say our clock is a day ahead), makes the
            # dialler wait longer before the next attempt; one that lasted resets the wait.
            lasted = self._was_established and self.replicator.clock.seconds() - self._established_at >= STABLE
            self.factory.refused = 0 if lasted else self.factory.refused + 1
        self.phases.ended()
        for timer in (self._timer, self._heartbeat):
            if timer is not None and timer.active():
                timer.cancel()
        self._timer = self._heartbeat = None
        self.silence.stop()
        self.outlet.close()
        if self.factory is not None:
            self.factory.gone(self)
        self.replicator.connections.discard(self)
        if self._announced:
            self.replicator.lost(self, self._why or reason.getErrorMessage())
        super().connectionLost(reason)
        closed, self._closed = self._closed, []
        for d in closed:
            d.callback(None)

    def when_closed(self) -> Deferred[None]:
        """Fires when this connection is gone (at once if it is)."""
        if self.closed and self not in self.replicator.connections:
            return succeed(None)
        d: Deferred[None] = Deferred()
        self._closed.append(d)
        return d

    # -- limits ---------------------------------------------------------------------------

    def _arm(self, seconds: float, why: str) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = self.replicator.clock.callLater(seconds, self._expired, why)

    def _expired(self, why: str) -> None:
        self._timer = None
        self.violation(why)

    def _idle_reason(self) -> str:
        return f"silent for too long (no complete message in {self.replicator.idle_timeout:g}s)"

    def alive(self) -> None:
        """A whole box came (an established connection's sign of life): the idle timer
        starts again and a silent connection is heard."""
        self._arm(self.replicator.idle_timeout, self._idle_reason())
        self.silence.heard()

    def dataReceived(self, data: bytes) -> None:
        """Count what comes in: every whole box takes its bytes off (`ampBoxReceived`), so
        what is left after AMP read *data* is the part of a box still coming. More than
        `MAX_BOX` of it drops the peer (AMP limits each value to 64 KiB, not a box's count
        of them)."""
        self._box_bytes += len(data)
        super().dataReceived(data)
        if self._box_bytes > MAX_BOX:
            self.violation(f"a message larger than {MAX_BOX} bytes")

    def ampBoxReceived(self, box: amp.AmpBox) -> None:
        """Check a box's shape before AMP reads it: a box that is neither a command nor an
        answer, an answer to no question or an error without its code is malformed (AMP
        itself would raise out of `dataReceived`, a traceback), and drops the peer."""
        self._box_bytes -= encoded_size(box)
        if self.closed:
            return
        problem = box_problem(box)
        if problem is not None:
            self.violation(f"malformed message: {problem}")
            return
        self.phase.whole_box(self)
        answer = amp.ANSWER in box or amp.ERROR in box
        try:
            super().ampBoxReceived(box)
        except KeyError:
            if not answer:
                raise
            # AMP looks the answer's tag up among our questions: it asked none by that tag
            # (an answer's callbacks run inside a Deferred: their errors do not come here)
            self.violation(f"malformed message: an answer to no question ({box.get(amp.ANSWER, box.get(amp.ERROR))!r})")

    def dispatchCommand(self, box: amp.AmpBox) -> Deferred[Any]:
        d = super_dispatch(self, box).addErrback(_swallow_dropped)
        if amp.ASK not in box:
            # No answer was asked for, so a declared error (a refused Hello) has nowhere to
            # go; the responder has logged why. AMP would log it again as a traceback.
            d.addErrback(_unanswered_declared_error)
        return d

    def _dispatch(self, box: amp.AmpBox) -> Deferred[Any]:
        command = box.get(amp.COMMAND)
        if not self.phase.admit(self, command):
            return Deferred()  # (dropped for it, or closed already: never answered)
        if not self._rate.take(1, self.replicator.clock.seconds()):
            self.violation(f"more than {MAX_COMMAND_RATE:g} commands per second")
            return Deferred()
        known = commands.BY_NAME.get(command or b"")
        if known is None:
            # the protocol version was agreed in Hello: its commands are all there is
            self.violation(f"unknown command {command!r}")
            return Deferred()
        # Arguments that do not parse (a missing one, bad UTF-8, not a number) are the
        # peer's mistake: said so and dropped, not a traceback from inside AMP.
        try:
            known.parseArguments(box, self)
        except Exception as e:
            self.violation(f"malformed {known.__name__} command: {type(e).__name__}: {e}")
            return Deferred()
        if self.outlet.holds(command or b""):
            return self.outlet.hold(box, encoded_size(box))
        return amp.AMP.dispatchCommand(self, box)  # type: ignore[no-any-return]

    def violation(self, reason: str, graceful: bool = False, logged: bool = True) -> None:
        """Drop this peer for *reason* (logged, unless not *logged*: the caller tells of
        it); nothing else is disturbed.

        *graceful*: let what we have queued (an error answer saying why) go out first,
        with a forced close if the peer does not let go within 2 seconds.
        """
        if self.closed:
            return
        if logged:
            log.warn(
                "dropping peer connection {peer} ({direction}): {reason}",
                peer=self.peer or self.expected or self._address(),
                direction="outgoing" if self.initiator else "incoming",
                reason=reason,
                event="peer_refused",
            )
        self.phases.ended()
        self._why = reason
        self.outlet.drop_held()
        if self.transport is None:
            return
        transport = cast(Any, self.transport)
        if graceful:
            if self._timer is not None and self._timer.active():
                self._timer.cancel()
            self._unwatch()  # (a transport with a producer waits for it to go before it closes)
            transport.loseConnection()  # flushes the answer, then close_notify
            self._timer = self.replicator.clock.callLater(2.0, transport.abortConnection)
        else:
            transport.abortConnection()

    def close(self) -> None:
        """Close this connection cleanly (TLS close_notify after what is queued)."""
        if self.transport is not None:
            self._unwatch()
            self.transport.loseConnection()

    def _close_soon(self, reason: str) -> None:
        """Close after the current answer goes out (so the peer learns why)."""
        self.replicator.clock.callLater(0, self.violation, reason, True)

    def _address(self) -> str:
        try:
            address: Any = self.transport.getPeer() if self.transport else None
        except Exception:
            address = None
        return f"{address.host}:{address.port}" if hasattr(address, "host") else "unknown"

    # -- write-side back-pressure (`sync.backpressure`) ----------------------------------

    @property
    def blocked(self) -> bool:
        """Our output waits unsent: the peer does not read it."""
        return self.outlet.blocked

    def when_writable(self) -> Deferred[None]:
        """Fires once our output is not blocked (at once when it is not), or the connection ended."""
        return self.outlet.when_writable()

    def answer_held(self, box: amp.AmpBox) -> Deferred[Any]:
        return amp.AMP.dispatchCommand(self, box)  # type: ignore[no-any-return]

    def output_drained(self) -> None:
        if self._announced:
            self.replicator.output_drained(self)

    def _unwatch(self) -> None:
        """Unregister the outlet (before a clean close: see `sync.tls.PeerTLSTransport`)."""
        if not self._watched or self.transport is None:
            return
        self._watched = False
        with suppress(RuntimeError):  # (a test's transport, with none registered any more)
            cast(Any, self.transport).unregisterProducer()

    # -- commands -----------------------------------------------------------------------

    def _guard(self, call: Any, *args: Any) -> Any:
        """Run a replicator call for a command; a malformed message drops the peer."""
        try:
            return call(self, *args)
        except BadMessage as e:
            self.violation(f"malformed {getattr(call, '__name__', 'message')}: {e}")
            raise _Dropped() from None

    @commands.Publish.responder
    def publish(self, records: bytes, bulk: bool | None = None) -> Deferred[dict[str, Any]]:
        """One batch at a time, a slice per reactor turn (`Replicator.receive_in_slices`):
        nothing more is read from this peer until the batch is merged and the reactor has
        turned, so DNS queries are answered in between and a flood waits in the sender's
        socket rather than in this node's memory."""
        # the first batch since the connection paused is merged from now; any other that
        # came in the same read (buffered while paused), from the next turn
        merging: Deferred[int] = self._guard(self.replicator.receive_in_slices, records, bool(bulk), self._merging == 0)
        self._merging += 1
        if not self.paused:
            self.pauseProducing()

        def merged(count: int) -> dict[str, Any]:
            self._merging -= 1
            if not self._merging:
                self.replicator.clock.callLater(0, self._resume)
            return {"merged": count}

        return merging.addCallback(merged)

    def _resume(self) -> None:
        if not self._merging and self.paused and not self.closed and self.transport is not None:
            self.resumeProducing()

    @commands.Summary.responder
    def summary(self, summary: bytes) -> dict[str, Any]:
        """Refused (`commands.Loading`) while this node loads its snapshot (`Replicator.hold_until`)."""
        if self.replicator.anti_entropy.loading:
            raise commands.Loading("still loading its state snapshot; it says Changed when done")
        return {"summary": self.replicator.anti_entropy.summary_message(self)}

    @commands.Buckets.responder
    def buckets(self, origin: str) -> dict[str, Any]:
        return {"buckets": self.replicator.anti_entropy.buckets_message(self, origin)}

    @commands.Listing.responder
    def listing(self, origin: str, buckets: bytes) -> dict[str, Any]:
        entries, rest = self._guard(self.replicator.anti_entropy.listing_message, origin, buckets)
        return {"entries": entries, "rest": rest}

    @commands.Pull.responder
    def pull(self, keys: bytes) -> dict[str, Any]:
        records, rest = self._guard(self.replicator.anti_entropy.pull_message, keys)
        return {"records": records, "rest": rest}

    @commands.SendAll.responder
    def send_all(self, origin: str) -> Deferred[dict[str, Any]]:
        """One stream at a time: an honest member asks for the next once the last is done
        (its reconciliations take turns), so a second one at once drops the peer."""
        if self._sending_all:
            self.violation("asked for a second SendAll while one is under way")
            raise _Dropped()
        self._sending_all = True

        def done(result: Any) -> Any:
            self._sending_all = False
            return result

        sending = self.replicator.anti_entropy.send_all(self, origin).addBoth(done)
        return sending.addCallbacks(lambda n: {"sent": n}, self._unless_closed)

    def _unless_closed(self, failure: Failure) -> Failure:
        """A command's failure, or (the connection went while it ran) no answer at all."""
        if self.closed or failure.check(ConnectionLost, ConnectionDone):
            raise _Dropped()
        return failure

    @commands.Changed.responder
    def changed(self) -> dict[str, Any]:
        self.replicator.anti_entropy.reconcile(self)
        return {}

    @commands.ConfigState.responder
    def config_state(self, state: bytes) -> dict[str, Any]:
        config = self.replicator.config
        if config is not None:
            self._guard(config.heard_state, state)
        return {}

    @commands.ConfigFetch.responder
    def config_fetch(self, generation: int, publisher: str, digest: str, offset: int) -> dict[str, Any]:
        config = self.replicator.config
        if config is None:
            raise commands.NotHeld("this member keeps no config bundles")
        answer: dict[str, Any] = self._guard(lambda proto: config.fetch_answer(generation, publisher, digest, offset))
        return answer

    @commands.Heartbeat.responder
    def heartbeat(
        self, connected: str | None = None, digest: str | None = None, dnssec_keys: str | None = None
    ) -> dict[str, Any]:
        if dnssec_keys is not None:
            self.dnssec_keys = dnssec_keys
            self.replicator.heard_keys(self)
        if connected is not None:
            self.replicator.heard_connections(self, connected)
        if digest is not None:
            self.replicator.heard_digest(self, digest)
        return {}


class _Dropped(Exception):
    """A command whose peer was just dropped: no answer is sent."""


def super_dispatch(proto: PeerProtocol, box: amp.AmpBox) -> Deferred[Any]:
    return proto._dispatch(box)


def _unanswered_declared_error(failure: Failure) -> None:
    failure.trap(amp.RemoteAmpError)  # anything else is a bug: AMP logs it


def _swallow_dropped(failure: Failure) -> Any:
    if failure.check(_Dropped):
        return Deferred()  # never answered: the connection is closing
    return failure
