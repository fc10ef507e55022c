"""A member's side of the group's shared config (config sync): which config it starts
with, and what may be published.

At start a member reads its own file (``--config``). With ``sync_group.config_sync`` on
(the default) and a bundle held (`groupconfig.shelf`), it runs the newest bundle instead,
with its own things (certificates, key, token file, folders) from its own file's base
folder, and says so; the group may then have a newer one, which it fetches from its peers
before it answers with measured methods (`sync.coldstart.ColdStart`). A bundle it cannot
read (a file of its own missing) is logged, and it runs its own file.

Its file is published when it changed since the member last read it (``local.json`` on
the shelf): by a SIGHUP or a reload through the API. A SIGHUP to a file that did not
change reads the running config again (renewed certificates), and publishes nothing.

A bundle holds exactly the files its config names (`sharing.names`, from the YAML as the
config reader parses it: in the reload's child process, a big config being a second of
parsing), and never a secret. A bundle received from a peer is checked so before it is
kept or relayed (`vet`); one published here is checked when it is read to run it
(`load.build`); and what a bundle may not change of the member's own ground is refused
when it would run (`changes.own_ground`), at start too.
"""

from __future__ import annotations

import datetime
import gc
import os
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from twisted.internet import defer
from twisted.logger import Logger

from gtmcluster.config import sharing
from gtmcluster.config.changes import own_ground
from gtmcluster.config.load import SECTION_ORDER, config_value, load
from gtmcluster.config.model import Config, Member
from gtmcluster.config.problems import ConfigError, Problem
from gtmcluster.config.source import yamlsrc
from gtmcluster.config.source.yamlchild import MEMORY, Child
from gtmcluster.config.source.yamlsrc import Resplit
from gtmcluster.groupconfig import bundle
from gtmcluster.groupconfig.bundle import Bundle, Header
from gtmcluster.groupconfig.shelf import Shelf
from gtmcluster.runtime import slices
from gtmcluster.runtime.gcpause import collection_paused
from gtmcluster.runtime.reactors import Reloading, Runtime, as_time

log = Logger()
T = TypeVar("T")


class RunningNode(Protocol):
    """The node as the group's config sees it: who it is and what config it runs."""

    @property
    def member(self) -> Member: ...

    @property
    def config(self) -> Config: ...


class NodeSide(Protocol):
    """What the group's config needs of the running node (`nodeservice.NodeService` is
    one): its runtime (`reactors.Runtime`) and config files, and its reload, run one at a time."""

    @property
    def node(self) -> RunningNode: ...

    @property
    def runtime(self) -> Runtime: ...

    @property
    def config_path(self) -> str: ...

    @property
    def running_path(self) -> str: ...

    running_own_dir: Path | None

    def exclusive(self, work: Callable[[], Coroutine[Any, Any, T]]) -> defer.Deferred[T]: ...

    async def read_and_switch(
        self, path: str, own_dir: Path | None, header: Header | None, before: Callable[[], object] | None = None
    ) -> list[str]: ...


@dataclass(frozen=True)
class Running:
    """What this member runs: a bundle's generation and digest (0 and "": its own file)
    and the config's digest."""

    generation: int = 0
    digest: str = ""
    config_digest: str = ""


class Exchange(Protocol):
    """What the member's side needs of config sync's exchange with the peers
    (`sync.configsync.ConfigSync` is it, given by the wiring): it runs the bundles the group
    publishes with `apply`, checks those received with `vet`, tells the peers what this
    member holds and runs, and does file work off the reactor's thread (`in_thread`)."""

    #: runs a bundle held (on the shelf) as the member's config; fires with the problems
    #: that kept it from running
    apply: Callable[[Header], defer.Deferred[list[str]]] | None
    #: why a bundle received is not to be kept nor relayed
    vet: Callable[[Bundle], defer.Deferred[list[str]]]
    running: Running
    in_thread: Callable[[Callable[[], Any]], defer.Deferred[Any]]

    def tell(self) -> None: ...

    def retry(self) -> defer.Deferred[list[str]] | None: ...


E = TypeVar("E", bound=Exchange)


@dataclass
class Start:
    """The config a member starts with."""

    config: Config
    #: the bundle it runs, or None: its own file
    header: Header | None
    shelf: Shelf
    #: its own base folder (its own file's): its own things are there
    own_dir: Path


def at_start(local: Config, path: str, node: str, owner: tuple[int, int] | None = None) -> Start:
    """What member *node* runs, having read its own file *path* as *local* (*owner*: the
    user it runs as once it has dropped privileges, see `Shelf`)."""
    shelf = Shelf(local.state_dir_for(node) / "bundles", owner=owner)
    own_dir = local.base_dir
    start = Start(local, None, shelf, own_dir)
    if not local.sync_group.settings.config_sync:
        return start
    try:
        # (what `load` just read: not parsed again)
        made, raw = bundle.read_and_make(path, 1, 0, node, 0.0, parse=config_value)
        mine = made.digest
        secrets = [f"{'.'.join(str(k) for k in at)}: {why}" for at, why in sharing.secrets(raw)]
    except (ConfigError, OSError) as e:
        mine, secrets = "", []
        log.warn("{path} cannot be shared with the group: {why}", path=path, why=e, event="config_not_shareable")
    if secrets:
        log.warn(
            "{path} holds inline secrets, which config sync does not publish: a change to it is refused until "
            "they are in files of the member's own ({secrets})",
            path=path,
            secrets="; ".join(secrets),
            event="config_not_shareable",
        )
    changed = shelf.local_digest() not in (None, mine)
    if shelf.local_digest() is None and mine:
        try:
            shelf.set_local_digest(mine)
        except OSError as e:
            log.warn("cannot note {path}'s digest in {dir}: {why}", path=path, dir=shelf.directory, why=e)
    newest = shelf.newest()
    if newest is None:
        return start
    try:
        config = load(shelf.config_path(newest), own_dir)
    except ConfigError as e:
        log.error(
            "the group's config generation {generation} cannot be run here, {path} is: {problems}",
            generation=newest.generation,
            path=path,
            problems=str(e),
            event="config_bundle_unusable",
        )
        return start
    if node not in {m.name for m in config.sync_group.members}:
        log.error(
            "the group's config generation {generation} has no member {node}: {path} is run",
            generation=newest.generation,
            node=node,
            path=path,
            event="config_bundle_unusable",
        )
        return start
    differ = own_ground(local, config, node)
    if differ:
        log.error(
            "the group's config generation {generation} cannot be run here, {path} is: {problems}",
            generation=newest.generation,
            path=path,
            problems="; ".join(differ),
            event="config_bundle_unusable",
        )
        return start
    log.info(
        "running the group's config generation {generation} ({digest}), published by {publisher} at {at}, not "
        "{path}{changed}",
        generation=newest.generation,
        digest=newest.digest[:12],
        publisher=newest.publisher,
        at=when(newest.published_at),
        path=path,
        changed=" (which changed since this node last read it: a SIGHUP or `gtmcluster config push` publishes it)"
        if changed
        else "",
        event="config_from_group",
    )
    return Start(config, newest, shelf, own_dir)


class Stale(Exception):
    """A publication based on an older generation than the group's."""


def stamped(candidate: Bundle, held: Header | None, publisher: str, based_on: int | None, force: bool) -> Bundle | None:
    """*candidate*'s files as the next generation after *held*, published by *publisher*;
    None if they are *held*'s files already (nothing to publish). Raises `Stale` when
    *based_on* (the generation the publisher started from) is older than *held*'s,
    unless *force*."""
    current = held.generation if held is not None else 0
    if based_on is not None and based_on < current and not force:
        assert held is not None
        raise Stale(
            f"this push is based on generation {based_on}, but the group is at generation {current}, "
            f"published by {held.publisher} at {when(held.published_at)}: pull it (`gtmcluster config pull`), "
            "merge your change, and push again, or push with --force to replace it"
        )
    if held is not None and candidate.digest == held.digest and not force:
        return None
    return Bundle(
        candidate.main,
        candidate.files,
        current + 1,
        current if based_on is None else based_on,
        publisher,
        time.time(),
    )


def as_named(problems: list[str], path: Path) -> list[str]:
    """*problems* with the bundle's files named as the bundle names them (``cluster.yaml:
    zones[0].file: ...``, ``example.test.zone:17: ...``), not where this member wrote them."""
    folder = f"{path.parent}{os.sep}"
    return [p.replace(folder, "") for p in problems]


def when(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@dataclass
class Published:
    """What became of a publication: the bundle (None: the group holds none), whether it
    was the group's already, and the problems that refused it (then nothing changed)."""

    header: Header | None
    unchanged: bool = False
    problems: list[str] = field(default_factory=list)


class GroupConfig(Generic[E]):
    """The member's side of config sync: it publishes (a push, a rollback, its file after a
    SIGHUP) and runs what the group publishes (*sync*, the exchange with the peers, fetches
    it: `sync.configsync`)."""

    def __init__(self, service: NodeSide, start: Start, sync: E):
        self.service = service
        self.shelf = start.shelf
        self.own_dir = start.own_dir
        self.node = service.node.member.name
        config = service.node.config
        self.sync = sync
        self.sync.apply = self.apply
        self.sync.vet = self.vet
        #: parses a config's text as the config reader does (fires with its value, fails
        #: with `ConfigError`): in the reload's YAML child where the reactor runs processes
        processes = service.runtime.processes
        self.parse: Callable[[str, bytes], defer.Deferred[Any]] = (
            (lambda file, text: defer.ensureDeferred(parsed_beside(processes, file, text)))
            if processes is not None
            else lambda file, text: defer.maybeDeferred(yamlsrc.parse, file, text)
        )
        self.sync.running = Running(
            start.header.generation if start.header else 0, start.header.digest if start.header else "", config.digest
        )
        self.shelf.running = self.shelf.folder(start.header) if start.header else None
        if start.header is not None:
            service.running_own_dir = self.own_dir

    def running_header(self) -> Header | None:
        r = self.sync.running
        return self.shelf.find(r.generation, r.digest) if r.generation else None

    def vet(self, got: Bundle) -> defer.Deferred[list[str]]:
        """Why bundle *got*, received, is not to be kept nor relayed (`bundle.check`): its
        config parsed beside the reactor, then checked in the thread pool."""

        def checked(raw: Any) -> defer.Deferred[list[str]]:
            # (in the thread pool: each bundled zone that has an $INCLUDE is split into entries
            # for the files it includes, some 0.17 s a megabyte)
            return self.sync.in_thread(lambda: [str(p) for p in bundle.check(got, raw)])

        def unparsed(failure: Any) -> list[str]:
            failure.trap(ConfigError)
            return [str(p) for p in failure.value.problems]

        return self.parse(got.main, got.config_text).addCallbacks(checked, unparsed)

    def apply(self, header: Header) -> defer.Deferred[list[str]]:
        """Run bundle *header* (held): a reload from its files, once no other reload or
        publication runs; unless by then a newer bundle is held (this member published one
        meanwhile: two pushes at once), which is then the one to run, never this one."""
        path = self.shelf.config_path(header)

        async def run() -> list[str]:
            newest = self.shelf.newest()
            if newest is not None and newest != header and bundle.newer(header, newest) is newest:
                return [
                    f"superseded by generation {newest.generation} ({newest.digest[:12]}) published by "
                    f"{newest.publisher} before it ran"
                ]
            return as_named(await self.service.read_and_switch(str(path), self.own_dir, header), path)

        return self.service.exclusive(run)

    def publish(self, candidate: Bundle, based_on: int | None, force: bool) -> defer.Deferred[Published]:
        """Publish *candidate*'s files as the group's next generation: checked by reading
        it as a reload does, run here, then held and offered to the peers. Fails with
        `Stale` (see `stamped`)."""
        return self.service.exclusive(lambda: self._publish(candidate, based_on, force))

    async def _publish(self, candidate: Bundle, based_on: int | None, force: bool) -> Published:
        held = self.shelf.newest()
        new = stamped(candidate, held, self.node, based_on, force)
        if new is None:
            return Published(held, unchanged=True)
        try:
            path = await self.sync.in_thread(lambda: self.shelf.stage(new))
        except (OSError, bundle.BadBundle) as e:
            log.error("cannot keep a bundle in {dir}: {why}", dir=self.shelf.directory, why=e, event="config_unkept")
            return Published(new.header, problems=[f"{self.shelf.directory}: cannot keep the bundle: {e}"])
        problems = as_named(await self.service.read_and_switch(str(path), self.own_dir, new.header), path)
        if problems:
            self.shelf.discard(new)
            return Published(new.header, problems=problems)
        try:
            await self.sync.in_thread(lambda: self.shelf.seal(new))
            self.shelf.hold(new.header)
        except OSError as e:  # it runs here; the peers are not offered it
            log.error("cannot keep a bundle in {dir}: {why}", dir=self.shelf.directory, why=e, event="config_unkept")
        log.info(
            "published config generation {generation} ({digest}, {size} bytes in {files} files), based on {based_on}",
            generation=new.generation,
            digest=new.digest[:12],
            size=new.size,
            files=len(new.files),
            based_on=new.based_on,
            event="config_published",
        )
        self.sync.tell()
        return Published(new.header)

    def reload(self) -> defer.Deferred[list[str]]:
        """A SIGHUP (or the API's reload): the member's file published if it changed since
        it was last read, else the running config read again. Its YAML is parsed beside
        the reactor (the files it names are found in it), its files read in the thread pool."""
        return defer.ensureDeferred(self._reload())

    async def _reload(self) -> list[str]:
        service = self.service
        path = service.config_path
        try:
            # (`bundle.read_and_make`, its parse in the YAML child: the text parsed is the text carried)
            text = await self.sync.in_thread(lambda: bundle.read_config(path))
            raw = await self.parse(path, text)
            made = await self.sync.in_thread(lambda: bundle.from_text(path, text, raw, 1, 0, self.node, 0.0))
        except ConfigError as e:
            problems = [str(p) for p in e.problems]
        except Exception:
            log.failure("reading {path} failed", path=path)
            problems = [f"{path}: could not be read (an internal error, see the node's log)"]
        else:
            return await self._reloaded(made)
        log.error("reload refused, the running config stays: {problems}", problems="; ".join(problems))
        return problems

    def _reloaded(self, made: Bundle) -> defer.Deferred[list[str]]:
        service = self.service
        held = self.shelf.newest()
        if made.digest == self.shelf.local_digest() or (held is not None and made.digest == held.digest):
            self.shelf.set_local_digest(made.digest)
            retried = self.sync.retry()
            if retried is not None:
                log.info(
                    "{path} has nothing new for the group: trying the group's generation {generation} again, "
                    "refused here before",
                    path=service.config_path,
                    generation=held.generation if held else 0,
                    event="config_retried",
                )
                return retried
            header = self.running_header()
            log.info(
                "{path} has nothing new for the group (unchanged since read, or the group's already): "
                "reading the running config again",
                path=service.config_path,
                event="config_not_published",
            )
            return service.exclusive(
                lambda: service.read_and_switch(service.running_path, service.running_own_dir, header)
            )

        def published(result: Published) -> list[str]:
            if not result.problems:
                self.shelf.set_local_digest(made.digest)
            return result.problems

        return self.publish(made, None, False).addCallback(published)  # (no based_on: never stale)


async def parsed_beside(reactor: Reloading, file: str, text: bytes) -> Any:
    """*text*'s value as the config reader reads it, parsed in the reload's YAML child
    process (`yamlchild`: a big config is a second of parsing, not to be done in the
    reactor's thread), the sections whose text it read last taken from memory; those it
    parsed are remembered, so that reading this config again to run it parses nothing
    twice. Raises `ConfigError`."""
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError([Problem(file, (), f"cannot read the config: {e}")]) from None
    with collection_paused():  # (as a reload: a million young objects, see `config.reload`)
        for split in (True, False):
            child = Child(reactor, file, decoded, SECTION_ORDER, split, MEMORY if split else None)
            parsed = await child.start()
            try:
                await slices.run(parsed.complete(), as_time(reactor))
            except Resplit:
                continue  # read whole
            if parsed.pieces:
                MEMORY.keep(parsed)
            gc.freeze()
            return parsed.value
    raise AssertionError("unreachable: a file read whole is not cut again")
