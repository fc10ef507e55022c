"""How many zone transfers may be sent at once: in all, and to one source
(`gtmcluster.runtime.sources`: an IPv4 address, an IPv6 /64, as for TCP connections).

A transfer takes a slot when a connection begins it and gives it back when its last message
is handed to the transport or the connection goes. Past either cap a request is refused
(REFUSED, as BIND refuses requests past ``transfers-out``): the secondary asks again later.
A connection holds at most one slot, since it reads no request while its transfer is sent
(`dns.stream.DNSStreamProtocol`). The counting is `gtmcluster.runtime.slots`' (the API's answers
count the same way); this adds the caps a reload changes and the refusals, by cap. Pure
bookkeeping, no Twisted: the caps are ``dns_server.transfer`` (`config.dnsserver.TransferLimits`).
"""

from __future__ import annotations

from collections import Counter

from gtmcluster.runtime.slots import IN_ALL, Caps, Held, Slots


class TransferSlots:
    """The transfers in flight, counted in all and per source, against the caps
    *max_in_flight* and *max_per_source* (changed in place by a reload: transfers in flight
    keep their slots, new ones meet the new caps)."""

    def __init__(self, max_in_flight: int, max_per_source: int) -> None:
        self.max_in_flight = max_in_flight
        self.max_per_source = max_per_source
        self._slots = Slots()
        #: requests refused, by which cap was full: "total", "source"
        self.refused = {"total": 0, "source": 0}

    @property
    def in_flight(self) -> int:
        return self._slots.held

    @property
    def by_source(self) -> Counter[str]:
        """Source -> its transfers in flight (sources with none are absent)."""
        return self._slots.by_source

    def take(self, source: str) -> Held | None:
        """A slot for a transfer to *source* (`Held.release` gives it back once), or None
        when a cap is reached (counted)."""
        why = self._slots.take(source, Caps(self.max_in_flight, self.max_per_source))
        if why is not None:
            self.refused["total" if why == IN_ALL else "source"] += 1
            return None
        return Held(self._slots, source)
