"""A link's octet counters from its router, by SNMP v2c: `SnmpClient` and `SnmpReader`.

One GET asks for ifHCInOctets and ifHCOutOctets (IF-MIB, 64-bit) of one interface.
pysnmp's API is asyncio, and the node runs Twisted's default reactor (not its asyncio
reactor), so the readings run on an asyncio event loop in a thread of its own
(`SnmpClient`), never on the reactor's thread; each result comes back to the reactor
thread as a Deferred (`SnmpReader`).

One loop and one SNMP engine serve every reading of the node, made on the first: an engine
costs about 150 ms of CPU to make (it loads its MIB modules), a reading with a warm engine
about 3 ms (measured with pysnmp 7.1), so an engine (and a loop) per reading in the
reactor's thread pool would take the CPU, and the GIL, from the reactor at every reading.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorFromThreads

from gtmcluster.config.monitoring import SnmpSource
from gtmcluster.probe.linkrate import COUNTER64, Counters

#: IF-MIB::ifHCInOctets and ifHCOutOctets (the interface's ifIndex follows)
IF_HC_IN_OCTETS = "1.3.6.1.2.1.31.1.1.1.6"
IF_HC_OUT_OCTETS = "1.3.6.1.2.1.31.1.1.1.10"
#: how long `SnmpClient.close` waits for its thread
CLOSE_WAIT = 5.0


class SnmpError(Exception):
    """The agent did not give both counters (the reason says why)."""


class SnmpClient:
    """An asyncio loop in a daemon thread, started at the first reading, with one SNMP
    engine for all readings; `close` stops both."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._engine: Any = None
        #: SNMP engines made (one, however many readings: a figure for tests)
        self.engines_made = 0

    def get(self, source: SnmpSource, timeout: float) -> concurrent.futures.Future[Counters]:
        """Read *source*'s counters (from any thread but the client's own)."""
        with self._lock:
            if self._loop is None:
                loop = self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=loop.run_forever, name="snmp", daemon=True)
                self._thread.start()
            loop = self._loop
        return asyncio.run_coroutine_threadsafe(self._get(source, timeout), loop)

    def close(self) -> None:
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return

        async def shut() -> None:
            if self._engine is not None:
                self._engine.close_dispatcher()
                self._engine = None
            # (the dispatcher's timer and readings in flight: cancelled, and let finish)
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(concurrent.futures.TimeoutError):
            asyncio.run_coroutine_threadsafe(shut(), loop).result(CLOSE_WAIT)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(CLOSE_WAIT)
        if not thread.is_alive():
            loop.close()

    async def _get(self, source: SnmpSource, timeout: float) -> Counters:
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

        if self._engine is None:
            self._engine = SnmpEngine()
            self.engines_made += 1
        address = (str(source.host), source.port)
        if source.host.version == 6:
            target = await Udp6TransportTarget.create(address, timeout=timeout, retries=0)
        else:
            target = await UdpTransportTarget.create(address, timeout=timeout, retries=0)
        oids = [f"{IF_HC_IN_OCTETS}.{source.if_index}", f"{IF_HC_OUT_OCTETS}.{source.if_index}"]
        error, status, index, binds = await get_cmd(
            self._engine,
            CommunityData(source.community, mpModel=1),  # v2c
            target,
            ContextData(),
            *(ObjectType(ObjectIdentity(oid)) for oid in oids),
        )
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


class SnmpReader:
    """Reads one interface's counters through the node's `SnmpClient` (a `TrafficReader`)."""

    def __init__(self, reactor: IReactorFromThreads, client: SnmpClient, source: SnmpSource, timeout: float):
        self.reactor = reactor
        self.client = client
        self.source = source
        self.timeout = timeout

    def describe(self) -> str:
        return str(self.source)

    def read(self) -> Deferred[Counters]:
        d: Deferred[Counters] = Deferred()

        def done(future: concurrent.futures.Future[Counters]) -> None:  # (in the client's thread)
            self.reactor.callFromThread(_fire, d, future)

        self.client.get(self.source, self.timeout).add_done_callback(done)
        return d


def _fire(d: Deferred[Counters], future: concurrent.futures.Future[Counters]) -> None:
    if future.cancelled():
        d.errback(SnmpError("the reading was cancelled (the node is stopping)"))
        return
    error = future.exception()
    if error is not None:
        d.errback(error)
    else:
        d.callback(future.result())
