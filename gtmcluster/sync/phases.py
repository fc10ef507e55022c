"""The phases of a peer connection (`sync.peer.PeerProtocol`) as an explicit state machine
(Automat): handshake, hello, established, closed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from automat import TypeMachineBuilder, pep614

HANDSHAKE = "handshake"
HELLO = "hello"
ESTABLISHED = "established"
CLOSED = "closed"


class Phases(Protocol):
    """The inputs of a peer connection's phases: one transition table, owned by the
    connection (`PeerProtocol.phases`)::

        handshake --verified--> hello --agreed--> established
        handshake, hello, established --ended--> closed (and ended again: no change)

    An input the table does not allow where the connection is raises
    `automat.NoTransition`: a bug here, not a peer's doing (a peer's command out of turn is
    refused before it comes to an input)."""

    def verified(self) -> None:
        """The peer's certificate names a member of the group."""

    def agreed(self) -> None:
        """The Hellos agree (group, version)."""

    def ended(self) -> None:
        """The connection is refused, dropped or lost."""


class Where:
    """The phase a connection is in: what the table's transitions move (an object of its
    own, so that the machine does not refer back to the connection: no cycle)."""

    __slots__ = ("phase",)

    def __init__(self) -> None:
        self.phase = HANDSHAKE


def _phases() -> Callable[[Where], Phases]:
    builder = TypeMachineBuilder(Phases, Where)
    handshake = builder.state(HANDSHAKE)
    hello = builder.state(HELLO)
    established = builder.state(ESTABLISHED)
    closed = builder.state(CLOSED)

    @pep614(handshake.upon(Phases.verified).to(hello))
    def greet(phases: Phases, where: Where) -> None:
        where.phase = HELLO

    @pep614(hello.upon(Phases.agreed).to(established))
    def establish(phases: Phases, where: Where) -> None:
        where.phase = ESTABLISHED

    def close(phases: Phases, where: Where) -> None:
        where.phase = CLOSED

    for state in (handshake, hello, established):
        state.upon(Phases.ended).to(closed)(close)
    closed.upon(Phases.ended).loop().returns(None)
    return builder.build()


PHASES = _phases()
