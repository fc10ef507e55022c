"""The phases of a peer connection (`sync.peer.PeerProtocol`) as an explicit state machine:
one object per phase, holding what the connection does in it.

    handshake --TLS done, certificate names a member-->  hello
    handshake --certificate refused / timeout-------->   closed (logged)
    hello     --initiator: our Hello answered OK----->   established
    hello     --responder: their Hello is right------>   established
    hello     --wrong name/group/version, timeout---->   closed (logged)
    established --any whole box (command, answer)-->   (dispatched; idle timer reset; heard:
                                                         a silent connection is live again)
    established --every heartbeat_interval---------->   a Heartbeat sent
    established --no whole box for heartbeat_timeout->  silent: the peer's verdicts stop
                                                         counting while every connection
                                                         to it is silent (still open)
    established --no whole box for idle_timeout---->   closed (a box trickled byte by
                                                         byte never completes, so it
                                                         does not keep the connection)
    any       --a command before established, a box
                too large, too many commands/second,
                a malformed box or argument -------->   closed (logged)
    closed    --anything--------------------------->   nothing: what still comes is not
                                                         read, a drop is not repeated

The phases move on three inputs only (`Phases`: ``verified``, ``agreed``, ``ended``); an
input the table does not allow where the connection is raises `OutOfTurn`, a bug here,
not a peer's doing (a peer's command out of turn is refused by the phase it comes in).

Each phase (`Handshake`, `Hello`, `Established`, `Closed`) answers what the connection asks
of it as things happen (a command, a Hello, a whole box, a heartbeat's tick, the end of
the connection); what it does to the connection goes through `Connection`, the connection
as its phases see it, so this module imports nothing of the peer's (no circle). The phase
objects hold no data of a connection: there is one of each (`HANDSHAKE`, `HELLO`,
`ESTABLISHED`, `CLOSED`), shared by every connection.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from twisted.python.failure import Failure


class OutOfTurn(Exception):
    """An input the transition table does not allow in the phase the connection is in."""


class Connection(Protocol):
    """A peer connection, as its phases see it (`sync.peer.PeerProtocol` is one)."""

    #: we dialled it (we send the Hello; the other side answers it)
    initiator: bool

    def violation(self, reason: str, graceful: bool = False, logged: bool = True) -> None:
        """Drop the connection for *reason*."""

    def alive(self) -> None:
        """A whole box came: the idle timer starts again and a silent connection is heard."""

    def send_heartbeat(self) -> None: ...

    def schedule_heartbeat(self) -> None:
        """The next heartbeat's tick (`Phase.beat`)."""

    def handshake_failed(self, reason: Failure) -> None:
        """Say why the TLS handshake failed (OpenSSL refused the peer)."""


class Phase:
    """What a connection does in one phase. The defaults are those of the phases before
    the Hellos agree (`Handshake`, `Hello`); each phase overrides where it differs."""

    name: ClassVar[str]
    #: past the Hellos and not closed: commands go both ways (`sync.link.Link.established`)
    established: ClassVar[bool] = False
    #: refused, dropped or lost: nothing more is read or sent (`sync.link.Link.closed`)
    closed: ClassVar[bool] = False
    #: our Hello (the initiator's) is out and its answer still counts
    awaits_answer: ClassVar[bool] = False

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__

    # -- the transition table -----------------------------------------------------------

    def verified(self) -> Phase:
        """The peer's certificate names a member of the group."""
        raise OutOfTurn(f"certificate verified in the {self.name} phase")

    def agreed(self) -> Phase:
        """The Hellos agree (group, version)."""
        raise OutOfTurn(f"Hellos agreed in the {self.name} phase")

    def ended(self) -> Phase:
        """The connection is refused, dropped or lost."""
        return CLOSED

    # -- behaviour ------------------------------------------------------------------------

    def admit(self, conn: Connection, command: bytes | None) -> bool:
        """A command of the peer's came: whether it goes on to be read (rate, arguments,
        responder). Before the Hellos agree only a Hello does; any other drops the peer."""
        if command == b"Hello":
            return True
        conn.violation(f"command {command!r} before Hello")
        return False

    def takes_hello(self, initiator: bool) -> bool:
        """A Hello of the peer's, to answer: whether it is checked (rather than refused as
        unexpected, the connection closed once the refusal is out)."""
        return False

    def whole_box(self, conn: Connection) -> None:
        """A whole, well-formed box came (a command or an answer), about to be read."""

    def beat(self, conn: Connection) -> None:
        """The heartbeat's tick (`Connection.schedule_heartbeat`)."""

    def lost(self, conn: Connection, reason: Failure) -> None:
        """The connection is gone (before its phase moves to closed)."""


class Handshake(Phase):
    """TLS: the peer's certificate is not checked yet. Its end here was OpenSSL's doing
    (a foreign CA, an expired certificate, none, not TLS at all): we refuse certificates
    and time out in the later phases, each logged as it happens."""

    name = "handshake"

    def verified(self) -> Phase:
        return HELLO

    def lost(self, conn: Connection, reason: Failure) -> None:
        conn.handshake_failed(reason)


class Hello(Phase):
    """The certificate names a member; the Hellos are exchanged. Only the connection's
    initiator sends Hello; the other side answers it."""

    name = "hello"
    awaits_answer = True

    def agreed(self) -> Phase:
        return ESTABLISHED

    def takes_hello(self, initiator: bool) -> bool:
        return not initiator


class Established(Phase):
    """Past the Hellos: every command is read (a second Hello is refused); whole boxes are
    the signs of life (not bytes: a box trickled byte by byte keeps nothing alive), and a
    heartbeat goes out at each tick."""

    name = "established"
    established = True

    def admit(self, conn: Connection, command: bytes | None) -> bool:
        return True

    def whole_box(self, conn: Connection) -> None:
        conn.alive()

    def beat(self, conn: Connection) -> None:
        conn.send_heartbeat()
        conn.schedule_heartbeat()


class Closed(Phase):
    """Refused, dropped or lost: what still comes is not read (a command is left
    unanswered, no second drop is logged) and nothing is sent."""

    name = "closed"
    closed = True

    def admit(self, conn: Connection, command: bytes | None) -> bool:
        return False


HANDSHAKE: Phase = Handshake()
HELLO: Phase = Hello()
ESTABLISHED: Phase = Established()
CLOSED: Phase = Closed()


class Phases:
    """Where one connection is (`now`), moved only by the inputs of the transition table."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now: Phase = HANDSHAKE

    def verified(self) -> None:
        """The peer's certificate names a member of the group."""
        self.now = self.now.verified()

    def agreed(self) -> None:
        """The Hellos agree (group, version)."""
        self.now = self.now.agreed()

    def ended(self) -> None:
        """The connection is refused, dropped or lost (again: no change)."""
        self.now = self.now.ended()
