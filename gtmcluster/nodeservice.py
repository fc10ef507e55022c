"""The running node as a Twisted service: its parts started and stopped in order, and the
reload that swaps its config in one step (every part takes it, or none does). The parts
are built and wired by `service.make_service`; its log lines keep the system name
``gtmcluster.service`` that operators know.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

from twisted.application.service import IService, MultiService, Service
from twisted.internet import defer
from twisted.logger import Logger

from gtmcluster.config import reload as config_reload
from gtmcluster.config.changes import Changes, between, restart_needed
from gtmcluster.config.model import Config
from gtmcluster.config.problems import ConfigError
from gtmcluster.dns.server import DNSService
from gtmcluster.groupconfig.bundle import Header
from gtmcluster.groupconfig.shared import GroupConfig
from gtmcluster.health.checker import HealthChecker
from gtmcluster.history import History
from gtmcluster.node import Node, Prepared
from gtmcluster.nodelog.audit import AuditFile
from gtmcluster.nodelog.writer import NodeLog
from gtmcluster.nodeparts import Commit, Reconfigurable, Reload
from gtmcluster.proximity.scheduler import ProbeScheduler
from gtmcluster.runtime import slices
from gtmcluster.runtime.heap import HeapKeeper
from gtmcluster.runtime.reactorlag import ReactorLag
from gtmcluster.runtime.reactors import Runtime
from gtmcluster.state.snapshotter import Snapshotter
from gtmcluster.sync.configsync import ConfigSync
from gtmcluster.sync.replicator import Replicator
from gtmcluster.sync.service import PeerService
from gtmcluster.sync.tls import CredentialError, Credentials

log = Logger(namespace="gtmcluster.service")
T = TypeVar("T")

#: seconds a stopping node waits for its parts (except the snapshot, always written, and
#: the answering workers, killed after `fanout.supervisor.STOP_TIMEOUT`)
STOP_DEADLINE = 2.5


class WorkerSlot(Protocol):
    """One answering worker, as the API counts it."""

    @property
    def index(self) -> int: ...

    @property
    def answered(self) -> int: ...


class AnsweringWorkers(Protocol):
    """The answering workers (`fanout.supervisor.Workers`, given by the wiring), as the
    node stops them and the API shows them."""

    @property
    def slots(self) -> Sequence[WorkerSlot]: ...

    @property
    def running_workers(self) -> int: ...

    def describe(self) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class RumCounts:
    """The counts of a member's RUM listener (for /metrics): beacons by result ("kept", or
    why refused), beacons' ids by what became of them, and the ids awaiting their record."""

    beacons: Mapping[str, int]
    ties: Mapping[str, int]
    pending: Callable[[], int]


class NodeService(MultiService):
    """The node: its parts as services, and the reload that swaps its config.

    Everything is handed to the constructor (by `service.make_service`, or a test): the
    node's *services*, started in that order and stopped in reverse; the *parts* that take
    a new config (`nodeparts.Reconfigurable`), switched in that order after the answer
    path; and, by name, the parts the API reads (None: this node has no such part).
    *read_credentials* reads and checks this member's TLS files of a new config, where a
    part uses them (the peers, the HTTPS API). *group_config* makes the group's shared
    config (`groupconfig.shared`) over this node, when it was started with one. *runtime*:
    what differs between *reactor* and a test's (`reactors.Runtime`)."""

    def __init__(
        self,
        node: Node,
        replicator: Replicator,
        reactor: Any,
        config_path: str,
        services: Sequence[IService] = (),
        parts: Sequence[Reconfigurable] = (),
        *,
        runtime: Runtime,
        read_credentials: Callable[[Config], defer.Deferred[Credentials]] | None = None,
        snapshots: Snapshotter | None = None,
        workers: AnsweringWorkers | None = None,
        dns: DNSService | None = None,
        checker: HealthChecker | None = None,
        probes: ProbeScheduler | None = None,
        peers: PeerService | None = None,
        heap: HeapKeeper | None = None,
        lag: ReactorLag | None = None,
        history: History | None = None,
        rum: RumCounts | None = None,
        node_log: NodeLog | None = None,
        group_config: Callable[[NodeService], GroupConfig[ConfigSync]] | None = None,
        audit_log: AuditFile | None = None,
    ):
        super().__init__()
        self.node = node
        self.replicator = replicator
        self.reactor = reactor
        #: what differs between this reactor and a test's (threads, processes)
        self.runtime = runtime
        self.config_path = config_path
        for service in services:
            service.setServiceParent(self)
        #: what takes a new config, in the order it switches (after the answer path)
        self.parts = tuple(parts)
        self.read_credentials = read_credentials
        self.snapshots = snapshots
        self.workers = workers
        self.dns = dns
        self.checker = checker
        self.probes = probes
        self.peers = peers
        self.heap = heap
        self.lag = lag
        #: the last hour of samples and events, for the dashboard's graphs
        self.history = history
        #: the node's own log file (gtmcluster.nodelog), when the tap made one; not a
        #: child: started before the children, stopped after them
        self.node_log = node_log
        #: the node's audit log (gtmcluster.nodelog.audit), when the tap made one: the API
        #: records every write there, and refuses one it cannot record
        self.audit_log = audit_log
        #: what the member's RUM listener and its join counted, when it has a listener
        #: (``members[].rum``; `gtmcluster.rum.listener`, `proximity.rumjoin`)
        self.rum = rum
        self._previous_hup: Any = None
        self._reload_lock = defer.DeferredLock()
        #: the config file run now: the node's own (`config_path`), or a bundle's
        self.running_path = str(node.config.path)
        #: with a bundle's: the node's own base folder (`config.load.build`)
        self.running_own_dir: Path | None = None
        #: reads and checks a config file while the reactor answers (gtmcluster.config.reload)
        self.read_config: Callable[[str, Path | None], defer.Deferred[Config]] = lambda path, own_dir: (
            config_reload.read(reactor, path, own_dir)
        )
        #: what differs between the running config and a new one, compared off the reactor
        #: thread (at once on a reactor without threads, as in tests)
        self.compare_configs: Callable[[Config, Config], defer.Deferred[Changes]] = lambda old, new: runtime.in_thread(
            between, old, new
        )
        #: runs file work in the reactor's thread pool (at once on a reactor without
        #: threads, as in tests)
        self.in_thread: Callable[[Callable[[], Any]], defer.Deferred[Any]] = runtime.in_thread
        #: runs steps a few milliseconds per reactor turn (at once on a reactor without
        #: threads, as in tests: the steps are the same)
        self.in_turns: Callable[[slices.Steps[None]], defer.Deferred[None]] = runtime.in_turns
        #: the group's shared config (`groupconfig.shared`), when the node was started with it
        self.group_config = group_config(self) if group_config is not None else None
        #: told each config this member runs or refuses, by a reload or a bundle of the
        #: group's: (bundle generation, 0 for its own file; digest; publisher; the problems)
        self.config_listeners: list[Callable[[int, str, str, list[str]], object]] = []

    def startService(self) -> None:
        if self.node_log is not None:
            self.node_log.startService()  # first: the node's own log has every line of the start
        c = self.node.config
        log.info(
            "gtmcluster node {node} (data center {datacenter}) of sync group {group}: "
            "{zones} zones, {wideips} wide IPs, config digest {digest}",
            node=self.node.member.name,
            datacenter=self.node.member.datacenter,
            group=c.sync_group.name,
            zones=len(list(c.zones)),
            wideips=len(c.wideips),
            digest=c.digest,
        )
        if self.audit_log is not None:
            try:
                self.audit_log.open()
            except OSError as e:
                log.error(
                    "the audit log cannot be written: {path}: {problem}; writes through the API are refused "
                    "until it can be",
                    path=str(self.audit_log.path),
                    problem=e.strerror or str(e),
                )
        super().startService()
        if threading.current_thread() is threading.main_thread():
            self._previous_hup = signal.signal(signal.SIGHUP, self._sighup)

    def stopService(self) -> defer.Deferred[Any]:
        """Stop every part (in reverse order of start, all at once as `MultiService` does).
        Fires when the snapshot is written, the answering workers have exited (each is
        killed `fanout.supervisor.STOP_TIMEOUT` after SIGTERM) and every other part has
        stopped or `STOP_DEADLINE` seconds have passed: a part still stopping then is logged
        and left behind (peer connections that do not close are aborted before that, see
        `PeerService`), so SIGTERM ends the node within seconds whatever its peers do, with
        its state on disk."""
        if self._previous_hup is not None:
            signal.signal(signal.SIGHUP, self._previous_hup)
            self._previous_hup = None
        Service.stopService(self)
        must: list[defer.Deferred[Any]] = []
        parts: dict[str, defer.Deferred[Any]] = {}
        for service in reversed(list(self)):
            name = service.name or repr(service)
            d = defer.maybeDeferred(service.stopService).addErrback(_stop_failed, name)
            if service is self.snapshots or service is self.workers:
                must.append(d)  # the state on disk; no worker left holding the DNS port
            else:
                parts[name] = d
        bounded: defer.Deferred[None] = defer.Deferred()

        def done(late: list[str]) -> None:
            if bounded.called:
                return
            if late:
                log.warn(
                    "stopping: {parts} still stopping after {deadline:g}s; exiting without waiting for them",
                    parts=", ".join(late),
                    deadline=STOP_DEADLINE,
                    event="stop_deadline",
                )
            if call.active():
                call.cancel()
            bounded.callback(None)

        call = self.reactor.callLater(
            STOP_DEADLINE, lambda: done(sorted(name for name, d in parts.items() if not d.called))
        )
        defer.gatherResults(list(parts.values())).addBoth(lambda _: done([]))
        stopped = defer.gatherResults([*must, bounded])
        if self.node_log is not None:
            # last: once every part has stopped (the final snapshot written), as it logs that
            node_log = self.node_log

            def stop_log(result: Any) -> Any:
                node_log.stopService()
                return result

            stopped.addBoth(stop_log)
        if self.audit_log is not None:
            audit = self.audit_log

            def close_audit(result: Any) -> Any:
                audit.close()
                return result

            stopped.addBoth(close_audit)
        return stopped

    def _sighup(self, signum: int, frame: Any) -> None:
        self.reactor.callFromThread(self.reload)

    def reload(self) -> defer.Deferred[list[str]]:
        """Read the config file again and switch to it (SIGHUP, or the API's reload); fires
        with the problems if refused. With config sync (`group_config`), a file that
        changed is published to the group instead (`groupconfig.shared`).

        The file is parsed in a child process and the config built a few milliseconds per
        reactor turn (`gtmcluster.config.reload`: a big config takes seconds, and the
        reactor keeps answering meanwhile); the switch happens in one step. One reload
        runs at a time: a second waits for the first. A refused config (invalid, or a
        change that needs a restart) is logged and the old one keeps serving.
        """
        if self.group_config is not None and self.node.config.sync_group.settings.config_sync:
            return self.group_config.reload()
        return self.exclusive(lambda: self.read_and_switch(self.config_path, None, None))

    def exclusive(self, work: Callable[[], Coroutine[Any, Any, T]]) -> defer.Deferred[T]:
        """Run *work* when no other reload (or publication) runs."""
        return self._reload_lock.run(lambda: defer.ensureDeferred(work()))

    async def read_and_switch(
        self, path: str, own_dir: Path | None, header: Header | None, before: Callable[[], object] | None = None
    ) -> list[str]:
        """Read the config at *path* (*own_dir*: it is a bundle's, *header*) and switch to
        it; the problems if refused. *before*: run once it is found good, just before the
        switch. Call it within `exclusive`."""
        node = self.node
        try:
            new = await self.read_config(path, own_dir)
        except ConfigError as e:
            problems = [str(p) for p in e.problems]
        except Exception:
            log.failure("reading {path} failed", path=path)
            problems = [f"{path}: could not be read (an internal error, see the node's log)"]
        else:
            problems = restart_needed(node.config, new, node.member.name, bundle=own_dir is not None)
        creds = None
        changes = None
        if not problems:
            changes = await self.compare_configs(node.config, new)
        if not problems and self.read_credentials is not None:
            # renewed certificates (same paths, new files) or new paths: checked before use
            try:
                creds = await self.read_credentials(new)
            except CredentialError as e:
                problems = [f"sync group TLS: {e}"]
            except Exception:
                log.failure("reading the TLS files failed")
                problems = ["sync group TLS: the files could not be read (an internal error, see the node's log)"]
        if not problems:
            if before is not None:
                before()
            try:
                await self.in_turns(self.switching(new, creds, changes, own_dir))
            except NotTaken as e:
                problems = [f"{path}: {e}"]
            else:
                self.running_path, self.running_own_dir = path, own_dir
                if self.group_config is not None:
                    self.group_config.sync.ran(header, new.digest)
                self._tell_config(header, new.digest, [])
                return []
        log.error(
            "reload refused, the running config stays: {problems}",
            problems="; ".join(problems),
            event="reload_refused",
        )
        self._tell_config(header, "", problems)
        return problems

    def _tell_config(self, header: Header | None, digest: str, problems: list[str]) -> None:
        """Tell `config_listeners` of a config run (no *problems*) or refused."""
        generation = header.generation if header is not None else 0
        for listener in self.config_listeners:
            listener(
                generation,
                header.digest if header is not None else digest,
                header.publisher if header else "",
                problems,
            )

    def switch(self, new: Config, creds: Credentials | None = None, changes: Changes | None = None) -> None:
        """Answer from *new* (checked already) from now on, and retune every part; new peer
        connections use *creds* (checked already), when given; *changes* (what differs
        from the running config, compared off the reactor thread) spares the parts comparing.

        All or nothing: first every part builds what it needs for *new* (what can fail:
        answers, DNS fast path and rate limits, health checks, probe budget), none of it in
        use yet; if one part cannot, `NotTaken` says which and why, and every part keeps the
        old config. Then each part switches, by assignments that do not fail (should one fail
        anyway, a bug, the others still switch, and `PartlyTaken` says which did not)."""
        slices.whole(self.switching(new, creds, changes))

    def switching(
        self, new: Config, creds: Credentials | None = None, changes: Changes | None = None, own_dir: Path | None = None
    ) -> slices.Steps[None]:
        """`switch` in steps (`gtmcluster.runtime.slices`): the answer path, then each part of
        `parts` in turn, builds what it needs in a step of its own (at 5,000 servers: the
        answer path and its fast path's table 12-15 ms, the health checks 11-19 ms, the
        health index 12 ms), so a reload run in turns holds no turn for all of them; the
        commits are the last step. A reload runs one at a time and only a reload changes what
        the parts build from, so what was built in an earlier turn is still right in the last."""
        node = self.node
        commits: list[tuple[str, Commit]] = []

        def prepare(part: str, make: Callable[[], Commit]) -> None:
            try:
                commits.append((part, make()))
            except Exception as e:
                log.failure("{part} cannot take the new config", part=part)
                raise NotTaken(part, f"{type(e).__name__}: {e}") from e

        answers: list[Prepared] = []

        def answer_path() -> Commit:
            answers.append(node.prepare_reload(new, changes))
            return lambda: node.switch_to(answers[0])

        prepare("answers", answer_path)
        yield
        reload = Reload(new, node.config, changes, answers[0], creds, own_dir)
        for part in self.parts:
            prepare(part.label, partial(part.prepare, reload))
            yield
        # the old config is freed in the next turns (a million objects at 5,000 servers: tens
        # of milliseconds), not in the same turn as the switch
        config_reload.free_in_turns(self.reactor, node.config)
        failed = []
        for part_label, commit in commits:
            try:
                commit()
            except Exception:
                log.failure("{part} failed to switch to the new config", part=part_label)
                failed.append(part_label)
        if failed:
            raise PartlyTaken(failed)
        log.info(
            "reloaded {path}: generation {generation}, config digest {digest}",
            path=new.path,
            generation=node.generation,
            digest=new.digest,
            event="reloaded",
        )


def _stop_failed(failure: Any, part: str) -> None:
    log.failure("stopping {part} failed", failure, part=part)


class NotTaken(Exception):
    """A part of the node cannot take a new config (nothing was switched)."""

    def __init__(self, part: str, why: str):
        super().__init__(f"{part} cannot take the new config: {why}")
        self.part = part


class PartlyTaken(Exception):
    """Parts of the node failed to switch to a new config that the others took (a bug)."""

    def __init__(self, parts: list[str]):
        super().__init__(
            f"{', '.join(parts)} failed to switch to the new config (see the node's log): restart the node"
        )
