"""What differs between the reactor a node runs on and a test's, in one value: `Runtime`.

A node on the real reactor runs file work in the reactor's thread pool, cuts long work
into steps a few milliseconds per reactor turn, and spawns processes (the reload's YAML
child). A test's reactor (`twisted.internet.testing.MemoryReactorClock`, `task.Clock`)
has no thread pool and spawns nothing: the same work is done at once, in the calling
thread. The parts that care are handed a `Runtime` and ask it, never the reactor.

The reactor itself is typed with what each user calls of it. One Twisted interface where
one does (`IReactorTime` for timers); where a user needs several, the structural protocols
here, one per interface (`Time`, `FDSet`, `TCP`, `UDP`, `Socket`, `Threads`, `Process`,
`Core`: the methods of it this package's users call) and their intersections (`TimeFDSetTCP`,
`Reloading`, ...): mypy cannot intersect zope interfaces, but a protocol inheriting several
protocols is one, and a reactor, real or a test's (`MemoryReactorClock`, `task.Clock`, a
test's subclass adding ``listenUDP`` or ``spawnProcess``), matches it by its methods.
Twisted's own functions want the interface itself (`LoopingCall.clock`, `deferLater`,
`FileDescriptor`): `as_time` and `as_fdset` give a protocol-typed reactor as one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from socket import AddressFamily
from typing import Any, AnyStr, Protocol, TypeVar, cast

from twisted.internet import defer, threads
from twisted.internet.interfaces import (
    IDelayedCall,
    IListeningPort,
    IProcessProtocol,
    IProcessTransport,
    IReactorFDSet,
    IReactorFromThreads,
    IReactorProcess,
    IReactorThreads,
    IReactorTime,
    IReadDescriptor,
    IWriteDescriptor,
)
from twisted.internet.posixbase import PosixReactorBase
from twisted.internet.protocol import DatagramProtocol
from twisted.python.threadpool import ThreadPool

from gtmcluster.runtime import slices

T = TypeVar("T")


class Time(Protocol):
    """`IReactorTime`'s timers."""

    def seconds(self) -> float: ...

    def callLater(
        self, delay: float, callable: Callable[..., Any], *args: object, **kwargs: object
    ) -> IDelayedCall: ...


class FDSet(Protocol):
    """`IReactorFDSet`: descriptors the reactor watches."""

    def addReader(self, reader: IReadDescriptor) -> None: ...

    def addWriter(self, writer: IWriteDescriptor) -> None: ...

    def removeReader(self, reader: IReadDescriptor) -> None: ...

    def removeWriter(self, writer: IWriteDescriptor) -> None: ...


class TCP(Protocol):
    """`IReactorTCP`'s client side (what Twisted's TCP endpoints call)."""

    def connectTCP(self, host: str, port: int, factory: Any, timeout: float = 30.0, bindAddress: Any = None) -> Any: ...


class UDP(Protocol):
    """`IReactorUDP`."""

    def listenUDP(
        self, port: int, protocol: DatagramProtocol, interface: str = "", maxPacketSize: int = 8192
    ) -> IListeningPort: ...


class Socket(Protocol):
    """`IReactorSocket`: sockets opened elsewhere, adopted."""

    def adoptStreamPort(self, fileDescriptor: int, addressFamily: AddressFamily, factory: Any) -> IListeningPort: ...

    def adoptStreamConnection(self, fileDescriptor: int, addressFamily: AddressFamily, factory: Any) -> None: ...

    def adoptDatagramPort(
        self, fileDescriptor: int, addressFamily: AddressFamily, protocol: DatagramProtocol, maxPacketSize: int
    ) -> IListeningPort: ...


class FromThreads(Protocol):
    """`IReactorFromThreads`."""

    def callFromThread(self, callable: Callable[..., Any], /, *args: object) -> None: ...


class Threads(FromThreads, Protocol):
    """`IReactorThreads`: its thread pool, and calls back from it."""

    def getThreadPool(self) -> ThreadPool: ...


class Process(Protocol):
    """`IReactorProcess`."""

    def spawnProcess(
        self,
        processProtocol: IProcessProtocol,
        executable: bytes | str,
        args: Sequence[bytes | str],
        /,
        env: Mapping[AnyStr, AnyStr] | None = None,
        path: bytes | str | None = None,
        uid: int | None = None,
        gid: int | None = None,
        usePTY: bool = False,
        childFDs: Mapping[int, int | str] | None = None,
    ) -> IProcessTransport: ...


class Core(Protocol):
    """`IReactorCore`: whether it runs, and stopping it."""

    running: bool

    def stop(self) -> None: ...


def as_time(reactor: Time) -> IReactorTime:
    """*reactor* as the `IReactorTime` Twisted's functions want (`LoopingCall.clock`,
    `deferLater`) and this project's timers take; every reactor, real or a test's, declares
    it (an adaptation: one that did not would fail here, at once)."""
    return IReactorTime(reactor)


def as_fdset(reactor: FDSet) -> IReactorFDSet:
    """*reactor* as the `IReactorFDSet` Twisted's `FileDescriptor` wants (an adaptation,
    as `as_time`)."""
    return IReactorFDSet(reactor)


def polls_descriptors(reactor: object) -> bool:
    """Whether *reactor* polls real descriptors (epoll, poll, select: a `PosixReactorBase`),
    so a socket of ours can be watched by it (`probe.bare`); a test's memory reactor cannot.
    With `Runtime.of`, the one place that asks what a reactor is."""
    return isinstance(reactor, PosixReactorBase)


def to_pool(reactor: Threads, f: Callable[..., T], *args: Any) -> defer.Deferred[T]:
    """`f(*args)` in *reactor*'s thread pool, its result handed back on the reactor thread
    (Twisted's `deferToThreadPool`, which types the reactor `IReactorFromThreads` and calls
    its ``callFromThread`` alone: a test's reactor may have that without declaring it)."""
    return threads.deferToThreadPool(cast(IReactorFromThreads, reactor), reactor.getThreadPool(), f, *args)


# -- intersections: what one user calls of its reactor


class TimeFromThreads(Time, FromThreads, Protocol):
    """Timers, and calls back from another thread (`heap.HeapKeeper`, the node's reload signal)."""


class TimeFDSet(Time, FDSet, Protocol):
    """Timers and watched descriptors (the ICMP pinger, the path prober's sockets)."""


class TimeFDSetTCP(Time, FDSet, TCP, Protocol):
    """Timers, watched descriptors and TCP clients (the tcp and http checks: a bare socket
    where the reactor polls descriptors, Twisted's client elsewhere)."""


class TimeUDP(Time, UDP, Protocol):
    """Timers and UDP ports (the udp and dns checks, the NOTIFY sender)."""


class TimeTCPSocket(Time, TCP, Socket, Protocol):
    """Timers, TCP clients and adopted listening sockets (the sync group's peer service)."""


class Spawning(Threads, Process, Protocol):
    """Processes, and the thread pool to fall back on (a reload's YAML child,
    `config.source.yamlchild.Child`)."""


class Reloading(Time, Spawning, Protocol):
    """A reload's YAML child, and the model built from what it parsed a slice per turn
    (`config.reload`, `groupconfig.shared.parsed_beside`)."""


class Supervising(Time, Process, Socket, Protocol):
    """Timers, processes and adopted sockets: the answering workers' supervisor
    (`fanout.supervisor`: it spawns them and hands them sockets)."""


class Answering(Reloading, Socket, Core, Protocol):
    """An answering worker's reactor (`fanout.worker`): adopted sockets, its own reloads,
    and stopping when the node has gone."""


@dataclass(frozen=True)
class Runtime:
    """The reactor's clock, and its thread pool and process spawning where it has them."""

    clock: IReactorTime
    #: runs work in a thread pool; None: work is done at once (a test's reactor)
    threads: IReactorThreads | None = None
    #: spawns processes (a reload's YAML child, with the thread pool it falls back on);
    #: None: what a child would do is done in-process
    processes: Reloading | None = None

    @classmethod
    def of(cls, reactor: Time) -> Runtime:
        """The runtime of *reactor*: the one place that asks a reactor what it provides."""
        return cls(
            as_time(reactor),
            reactor if IReactorThreads.providedBy(reactor) else None,
            reactor if IReactorProcess.providedBy(reactor) and IReactorThreads.providedBy(reactor) else None,
        )

    def in_thread(self, f: Callable[..., T], *args: Any) -> defer.Deferred[T]:
        """`f(*args)` in the reactor's thread pool (at once without one)."""
        if self.threads is None:
            return defer.maybeDeferred(f, *args)
        return threads.deferToThreadPool(self.threads, self.threads.getThreadPool(), f, *args)

    def in_turns(self, steps: slices.Steps[T]) -> defer.Deferred[T]:
        """*steps* run a few milliseconds per reactor turn (`slices.run`); at once where
        work is done at once (the steps are the same)."""
        if self.threads is None:
            return defer.succeed(slices.whole(steps))
        return slices.run(steps, self.clock)
