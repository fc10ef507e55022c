"""The cap on fresh signatures for answers over UDP, the guard behind the NSEC chain.

The chain (`dnssec.chain`) makes NXDOMAIN cost no signature, and a kept signature costs a
lookup; what is left that a client can make us sign anew with each name it chooses is an
answer at a name only a wildcard makes (signed at the name asked) and a compact NODATA at
such a name. Those fresh signatures are capped, for all zones together (in each answering
process): a token bucket of `RATE` signatures a second, `BURST` at once. Past the cap a UDP query that needs a fresh
signature is answered empty with TC set (`OverBudget`): a resolver asks again over TCP,
where it gets the signed answer (a TCP client has shown its address, so TCP is not capped;
a flood from spoofed addresses cannot follow). So the fallback stays valid: no answer is
ever left unsigned or signed wrong. What one network may ask is bounded by
`dns_server.rate_limit`.
"""

from __future__ import annotations

from collections.abc import Callable

#: fresh signatures a second over UDP, all zones together (at 50-100 µs each, a tenth of a
#: core at most)
RATE = 1000.0
#: fresh signatures at once (a start or a reload signs the answers given first)
BURST = 2000.0


class OverBudget(Exception):
    """A fresh signature was wanted and the cap is reached: answer with TC instead."""


class FreshSignatures:
    """A token bucket of fresh signatures (see the module docstring)."""

    def __init__(self, clock: Callable[[], float], rate: float = RATE, burst: float = BURST):
        self.clock = clock
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.at = clock()
        #: queries answered with TC because of the cap, for the cost to be seen
        self.refused = 0

    def spend(self) -> None:
        """Take one signature from the bucket, or raise `OverBudget`."""
        now = self.clock()
        if now > self.at:
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1.0:
            self.refused += 1
            raise OverBudget
        self.tokens -= 1.0
