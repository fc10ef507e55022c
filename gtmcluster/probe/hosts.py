"""Host probes: one round trip from this node to an arbitrary host (a client subnet's
address, `proximity.clientprobe`), by what any host may answer.

`HostProber.probe` tries, in order, until one gets a reply:

- ``icmp``: an echo request through the node's shared `IcmpPinger` (none without one);
- ``tcp/443``, then ``tcp/80``: a connection attempt, a SYN-ACK or a refusal (RST) counting;
  the connection is closed at once.

These are the LDNS prober's own attempts (`probe.paths.PathProber`, its sockets, timing and
clean-ups), to the ports a client's network most likely answers on. No DNS is sent: a
client host is no resolver. Each attempt waits `timeout` seconds at most.
"""

from __future__ import annotations

import socket

from twisted.internet.defer import Deferred

from gtmcluster.probe.base import IPAddress
from gtmcluster.probe.icmp import IcmpPinger, SocketFactory
from gtmcluster.probe.paths import PathProber, Sample
from gtmcluster.runtime.reactors import TimeFDSet

#: the TCP ports tried, in order, after the echo request
PORTS = (443, 80)


class HostProber:
    """Measures the round trip to hosts by ICMP echo, then TCP to `PORTS`."""

    def __init__(
        self,
        reactor: TimeFDSet,
        timeout: float,
        pinger: IcmpPinger | None = None,
        *,
        sockets: SocketFactory = socket.socket,
        source: IPAddress | None = None,
        ports: tuple[int, ...] = PORTS,
    ) -> None:
        def prober(protocols: tuple[str, ...], port: int) -> PathProber:
            return PathProber(reactor, protocols, timeout, pinger, dns_port=port, sockets=sockets, source=source)

        first, *rest = ports
        self._ports = ports
        #: a prober per port, icmp riding with the first
        self._steps = [prober(("icmp", "tcp"), first), *(prober(("tcp",), port) for port in rest)]

    def probe(self, host: IPAddress) -> Deferred[Sample]:
        """One sample of the round trip to *host*; never errbacks. A sample's protocol says
        what answered: ``icmp``, ``tcp/443`` or ``tcp/80``."""
        out: Deferred[Sample] = Deferred()
        failures: list[str] = []

        def step(index: int) -> None:
            if index >= len(self._steps):
                out.callback(Sample(False, 0, 0, "", "all protocols failed: " + "; ".join(failures)))
                return
            port = self._ports[index]

            def judged(sample: Sample) -> None:
                if sample.ok:
                    protocol = f"tcp/{port}" if sample.protocol == "tcp" else sample.protocol
                    reason = sample.reason.replace("tcp:", f"tcp/{port}:", 1)
                    out.callback(Sample(True, sample.rtt_us, sample.hops, protocol, reason))
                    return
                failures.append(sample.reason.replace("all protocols failed: ", "").replace("tcp:", f"tcp/{port}:"))
                step(index + 1)

            self._steps[index].probe(host).addCallback(judged)

        step(0)
        return out

    def close(self) -> None:
        for prober in self._steps:
            prober.close()
