"""Host probes (client subnets' addresses): ICMP echo first, then TCP to each port in turn,
over real loopback sockets with the real reactor (in a subprocess, as the path probes')."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap

from tests.support.probeservers import ROOT, closed_port

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from ipaddress import ip_address
    from twisted.internet import reactor
    from gtmcluster.probe.hosts import HostProber

    ports = tuple(json.loads(sys.argv[1]))
    prober = HostProber(reactor, 0.5, None, ports=ports)
    samples = []

    def done(sample):
        samples.append([sample.ok, sample.protocol, sample.reason, sample.rtt_us > 0])
        prober.close()
        reactor.stop()

    reactor.callWhenRunning(lambda: prober.probe(ip_address("127.0.0.1")).addCallback(done))
    reactor.run()
    print(json.dumps(samples))
    """
)


def probe(*ports: int) -> list[object]:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(list(ports))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    result: list[object] = json.loads(out.stdout.strip().splitlines()[-1])[0]
    return result


def test_without_a_pinger_the_first_port_that_answers_counts() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(4)
        port = listening.getsockname()[1]
        ok, protocol, reason, timed = probe(port)
    assert (ok, protocol, timed) == (True, f"tcp/{port}", True), reason
    assert str(reason).startswith(f"tcp/{port}:"), reason


def test_a_refusal_is_an_answer_too() -> None:
    port = closed_port(4, socket.SOCK_STREAM)
    ok, protocol, _, _ = probe(port, 80)
    assert (ok, protocol) == (True, f"tcp/{port}")
