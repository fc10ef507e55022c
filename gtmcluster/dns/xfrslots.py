"""How many zone transfers may be sent at once: in all, and to one source
(`gtmcluster.sources`: an IPv4 address, an IPv6 /64, as for TCP connections).

A transfer takes a slot when a connection begins it and gives it back when its last message
is handed to the transport or the connection goes. Past either cap a request is refused
(REFUSED, as BIND refuses requests past ``transfers-out``): the secondary asks again later.
A connection holds at most one slot, since it reads no request while its transfer is sent
(`dns.stream.DNSStreamProtocol`). Pure bookkeeping, no Twisted: the caps are
``dns_server.transfer`` (`config.model.TransferLimits`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)
class Slot:
    """One transfer's place; `release` gives it back (once, however often called)."""

    slots: TransferSlots
    source: str
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.slots._give_back(self.source)


@dataclass
class TransferSlots:
    """The transfers in flight, counted in all and per source, against the caps
    *max_in_flight* and *max_per_source* (changed in place by a reload: transfers in flight
    keep their slots, new ones meet the new caps)."""

    max_in_flight: int
    max_per_source: int
    in_flight: int = 0
    #: source -> its transfers in flight (sources with none are absent)
    by_source: dict[str, int] = field(default_factory=dict)
    #: requests refused, by which cap was full: "total", "source"
    refused: dict[str, int] = field(default_factory=lambda: {"total": 0, "source": 0})

    def take(self, source: str) -> Slot | None:
        """A slot for a transfer to *source*, or None when a cap is reached (counted)."""
        if self.in_flight >= self.max_in_flight:
            self.refused["total"] += 1
            return None
        held = self.by_source.get(source, 0)
        if held >= self.max_per_source:
            self.refused["source"] += 1
            return None
        self.in_flight += 1
        self.by_source[source] = held + 1
        return Slot(self, source)

    def _give_back(self, source: str) -> None:
        self.in_flight -= 1
        held = self.by_source[source] - 1
        if held:
            self.by_source[source] = held
        else:
            del self.by_source[source]
