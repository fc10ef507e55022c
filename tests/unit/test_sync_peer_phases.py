"""A peer connection's phases: one transition table the connection owns (`phases.Phases`)."""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from gtmcluster.state.store import Store
from gtmcluster.sync import peer, phases
from gtmcluster.sync.replicator import Replicator


def connection() -> peer.PeerProtocol:
    clock = Clock()
    replicator = Replicator(
        Store("gtm-a", clock.seconds),
        clock,
        node="gtm-a",
        group="g",
        datacenter="DC1",
        members=["gtm-a", "gtm-b"],
        config_digest="d",
    )
    return peer.PeerProtocol(replicator)


def test_a_connection_goes_through_its_phases_in_order() -> None:
    proto = connection()
    seen = [proto.phase]
    proto.phases.verified()
    seen.append(proto.phase)
    proto.phases.agreed()
    seen.append(proto.phase)
    proto.phases.ended()
    seen.append(proto.phase)
    proto.phases.ended()  # dropped, then lost: still closed
    seen.append(proto.phase)
    assert seen == [phases.HANDSHAKE, phases.HELLO, phases.ESTABLISHED, phases.CLOSED, phases.CLOSED]


@pytest.mark.parametrize("ended_in", [phases.HANDSHAKE, phases.HELLO])
def test_a_connection_can_end_in_any_phase(ended_in: phases.Phase) -> None:
    proto = connection()
    if ended_in == phases.HELLO:
        proto.phases.verified()
    proto.phases.ended()
    assert proto.phase == phases.CLOSED


def test_an_input_out_of_turn_is_a_bug_that_says_so() -> None:
    """Agreeing before the certificate is checked, or anything after the end, is not in
    the table: it raises instead of moving the connection somewhere it cannot be."""
    proto = connection()
    with pytest.raises(phases.OutOfTurn):
        proto.phases.agreed()
    assert proto.phase == phases.HANDSHAKE
    proto.phases.ended()
    with pytest.raises(phases.OutOfTurn):
        proto.phases.verified()
    assert proto.phase == phases.CLOSED
