"""A whole sync group in one process: real TLS and the real protocol over in-memory
transports (twisted.test.iosim), one fake clock for everyone. Milliseconds per test.

A member named in `versions` runs an older protocol version: its Hello announces that
version and its schema refuses the records of newer versions (the real code, with
`Replicator.protocol_version` lowered), as a member not yet upgraded does.

Each node's listener is the real one (`sync.service.ListenerFactory`, with its `Gate`), and
every connection runs over the peer connections' own TLS transport (`sync.tls`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twisted.internet import task
from twisted.internet.address import IPv4Address
from twisted.test import iosim

from gtmcluster.config.model import TLSFiles
from gtmcluster.state.store import Store
from gtmcluster.sync import certs, commands
from gtmcluster.sync.replicator import Replicator
from gtmcluster.sync.service import Gate, ListenerFactory, PeerFactory
from gtmcluster.sync.tls import Credentials, PeerTLSFactory, client_options, load_credentials, server_options


@dataclass
class Link:
    a: str
    b: str
    client: Any
    server: Any
    pump: iosim.IOPump

    def cut(self) -> None:
        """Both ends see the connection lost."""
        self.pump.clientIO.loseConnection()
        self.pump.serverIO.loseConnection()
        self.pump.flush()


@dataclass
class MemoryCluster:
    names: list[str]
    directory: Path
    clock: task.Clock = field(default_factory=task.Clock)
    stores: dict[str, Store] = field(default_factory=dict)
    replicators: dict[str, Replicator] = field(default_factory=dict)
    credentials: dict[str, Credentials] = field(default_factory=dict)
    #: each node's listener caps
    gates: dict[str, Gate] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)
    group: str = "test"
    #: members running an older protocol version than `commands.PROTOCOL_VERSION`
    versions: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        certs.init_ca(self.directory)
        for name in self.names:
            certs.issue(self.directory, name)
            self.add(name)

    def files(self, name: str) -> TLSFiles:
        return TLSFiles(self.directory / "ca.pem", self.directory / f"{name}.pem", self.directory / f"{name}.key")

    def add(self, name: str, store: Store | None = None) -> Replicator:
        """(Re)create node *name* with a fresh (or the given) store."""
        if store is None:  # (not `or`: an empty store is falsy, having a length)
            store = Store(name, self.clock.seconds)
        self.stores[name] = store
        self.credentials[name] = load_credentials(self.files(name), name)
        replicator = Replicator(
            store,
            self.clock,
            node=name,
            group=self.group,
            datacenter=f"DC-{name}",
            members=self.names,
            config_digest="digest",
            protocol_version=self.versions.get(name, commands.PROTOCOL_VERSION),
        )
        self.replicators[name] = replicator
        self.gates[name] = Gate(self.clock)
        return replicator

    def connect(self, a: str, b: str, server_creds: Credentials | None = None, source: str = "192.0.2.1") -> Link:
        """*a* dials *b* (from address *source*, as *b* sees it); the TLS handshake and Hello
        run as the pump moves bytes."""
        server_factory = ListenerFactory(
            server_options(server_creds or self.credentials[b]), self.replicators[b], self.gates[b], self.clock
        )
        client_factory = PeerTLSFactory(
            client_options(self.credentials[a], b), True, PeerFactory(self.replicators[a], expected=b), self.clock
        )
        address = IPv4Address("TCP", source, 40000 + len(self.links))
        client, server, pump = iosim.connectedServerAndClient(
            lambda: server_factory.buildProtocol(address),
            lambda: client_factory.buildProtocol(None),
            greet=False,
            clock=self.clock,
        )
        link = Link(a, b, client, server, pump)
        self.links.append(link)
        self.settle()
        return link

    def settle(self, rounds: int = 200) -> None:
        """Move bytes on every link until nothing moves (running zero-delay calls)."""
        for _ in range(rounds):
            moved = False
            for link in list(self.links):
                if link.pump.pump():
                    moved = True
            self.clock.advance(0)
            if not moved:
                return

    def digests(self) -> dict[str, str]:
        return {name: store.digest() for name, store in self.stores.items()}

    def converged(self) -> bool:
        return len(set(self.digests().values())) == 1

    def write(self, name: str, key: str, value: Any, ttl: float | None = None) -> None:
        self.stores[name].put(key, value, ttl)
        self.settle()

    def advance(self, seconds: float, step: float = 1.0, each: Callable[[], None] | None = None) -> None:
        done = 0.0
        while done < seconds:
            self.clock.advance(min(step, seconds - done))
            done += step
            if each:
                each()
            self.settle()
