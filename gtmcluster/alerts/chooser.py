"""Which member sends an event: one per event for the group, chosen alike by every member.

The rule: among the members this node reaches (itself and the peers it has heard from
within ``heartbeat_timeout``, as health counts them), less those an event may not be sent
by (a peer event: the peer it is about), the lowest-named sends (`sender`). Every member of
a whole group sees the same members and chooses the same one; an event only one member
knows of (its own config run, its own certificate: `events.OWN`) is sent by that member.

A member that is not the sender keeps the event for `HANDOVER` seconds (`Handover`): if
the sender leaves its reach meanwhile (it stopped, or the network cut it off, perhaps
before it sent), the event is chosen again among those still reached, and sent if this
member is now the one. Split by a partition, each side sends what it notices: a receiver
may get an event twice (with one id: it drops the repeat) but never none.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable

from gtmcluster.alerts.events import OWN, Event

#: seconds a member that did not send an event keeps it, to send it should the sender go
HANDOVER = 60.0


def sender(event: Event, reached: Iterable[str]) -> str:
    """The member that sends *event*, among the members *reached* (the noticing node's
    view, itself included)."""
    if event.scope == OWN:
        return event.node
    candidates = [m for m in reached if m not in event.excluded]
    return min(candidates) if candidates else event.node


class Handover:
    """Events this node left to another member, kept `HANDOVER` seconds (at most *cap*,
    the oldest forgotten first), each with the sender it was left to."""

    def __init__(self, node: str, clock: Callable[[], float], cap: int):
        self.node = node
        self.clock = clock
        self.cap = cap
        self._kept: OrderedDict[str, tuple[Event, str, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, event: Event, to: str) -> None:
        self._kept.pop(event.id, None)
        self._kept[event.id] = (event, to, self.clock() + HANDOVER)
        while len(self._kept) > self.cap:
            self._kept.popitem(last=False)

    def reached(self, members: frozenset[str]) -> list[Event]:
        """The members reached changed to *members*: the events this node is now to send
        (their sender out of reach, and this node the one chosen among the rest)."""
        now = self.clock()
        mine = []
        for key, (event, to, until) in list(self._kept.items()):
            if until <= now:
                del self._kept[key]
            elif to not in members:
                now_to = sender(event, members | {self.node})
                if now_to == self.node:
                    del self._kept[key]
                    mine.append(event)
                else:
                    self._kept[key] = (event, now_to, until)
        return mine
