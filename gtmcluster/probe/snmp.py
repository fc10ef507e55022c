"""`SnmpReader`: a link's octet counters from its router, by SNMP v2c.

It asks for ifHCInOctets and ifHCOutOctets (IF-MIB, 64-bit) of one interface with one GET.
pysnmp's API is asyncio; the node runs Twisted's default reactor, so each read runs in the
reactor's thread pool with an event loop (and an SNMP engine) of its own, and its result
comes back to the reactor thread as a Deferred. Reads are a few a minute per link, so the
engine is not kept between them.
"""

from __future__ import annotations

import asyncio

from twisted.internet import threads
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorFromThreads, IReactorThreads

from gtmcluster.config.model import SnmpSource
from gtmcluster.probe.linkrate import COUNTER64, Counters

#: IF-MIB::ifHCInOctets and ifHCOutOctets (the interface's ifIndex follows)
IF_HC_IN_OCTETS = "1.3.6.1.2.1.31.1.1.1.6"
IF_HC_OUT_OCTETS = "1.3.6.1.2.1.31.1.1.1.10"


class SnmpError(Exception):
    """The agent did not give both counters (the reason says why)."""


class SnmpReader:
    """Reads one interface's counters from an SNMP v2c agent."""

    def __init__(self, reactor: IReactorThreads, source: SnmpSource, timeout: float):
        self.reactor = reactor
        self.source = source
        self.timeout = timeout

    def describe(self) -> str:
        return str(self.source)

    def read(self) -> Deferred[Counters]:
        reactor = self.reactor
        assert IReactorFromThreads.providedBy(reactor)
        return threads.deferToThreadPool(reactor, reactor.getThreadPool(), get_counters, self.source, self.timeout)


def get_counters(source: SnmpSource, timeout: float) -> Counters:
    """Blocking: one GET of both counters (run in a thread, never the reactor's)."""
    return asyncio.run(_get(source, timeout))


async def _get(source: SnmpSource, timeout: float) -> Counters:
    # (imported here: loading pysnmp takes a while, and only nodes reading links need it)
    from pysnmp.hlapi.v3arch.asyncio import (
        CommunityData,
        ContextData,
        ObjectIdentity,
        ObjectType,
        SnmpEngine,
        Udp6TransportTarget,
        UdpTransportTarget,
        get_cmd,
    )

    engine = SnmpEngine()
    try:
        address = (str(source.host), source.port)
        if source.host.version == 6:
            target = await Udp6TransportTarget.create(address, timeout=timeout, retries=0)
        else:
            target = await UdpTransportTarget.create(address, timeout=timeout, retries=0)
        oids = [f"{IF_HC_IN_OCTETS}.{source.if_index}", f"{IF_HC_OUT_OCTETS}.{source.if_index}"]
        error, status, index, binds = await get_cmd(
            engine,
            CommunityData(source.community, mpModel=1),  # v2c
            target,
            ContextData(),
            *(ObjectType(ObjectIdentity(oid)) for oid in oids),
        )
    finally:
        engine.close_dispatcher()
    if error:
        raise SnmpError(str(error))
    if status:
        raise SnmpError(f"{status.prettyPrint()} at {index}")
    values = []
    for oid, (_, value) in zip(oids, binds, strict=True):
        if value.__class__.__name__ != "Counter64":
            raise SnmpError(f"{oid}: {value.prettyPrint()} (not a 64-bit counter)")
        number = int(value)
        if not 0 <= number < COUNTER64:
            raise SnmpError(f"{oid}: {number} is out of a 64-bit counter's range")
        values.append(number)
    return Counters(values[0], values[1])
