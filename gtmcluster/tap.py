"""`twistd gtm`: options and the service for one node. Only the tap touches the reactor.

Everything that can fail because of the environment (a config problem, an address in use,
missing certificates, no ICMP sockets, an unusable API token file, a state_dir or log_dir
others may write in) fails here, while twistd can still print a clear usage error, and while
still privileged (so port 53 works with --uid).
"""

from __future__ import annotations

import os
import pwd
import socket
from typing import Any

from twisted.python import usage

from gtmcluster.api import token as api_token
from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.config.problems import ConfigError
from gtmcluster.groupconfig import shared
from gtmcluster.probe.base import IcmpUnavailable
from gtmcluster.probe.icmp import IcmpPinger, open_pinger
from gtmcluster.probe.kinds import needs_pinger
from gtmcluster.rum.part import read_tls
from gtmcluster.runtime import heap, private, sockets
from gtmcluster.sync.tls import CredentialError, Credentials, load_credentials


def uses_icmp(config: Config) -> bool:
    """Whether any virtual server or link is checked by a monitor that sends through the
    node's ICMP socket (an icmp monitor)."""
    monitors = [m for vs in config.virtual_servers.values() for m in vs.monitors]
    monitors += [link.monitor for link in config.links.values()]
    return needs_pinger(monitors)


def _dropped_to(twistd: usage.Options | None) -> tuple[int, int] | None:
    """The (uid, gid) twistd switches to after start (``--uid``/``--gid``, when running as
    root): the owner of the files made before then."""
    if twistd is None or os.geteuid() != 0:
        return None
    uid, gid = twistd.get("uid"), twistd.get("gid")
    if uid is None:
        return None
    if gid is None:
        try:
            gid = pwd.getpwuid(uid).pw_gid
        except KeyError:
            return None  # twistd itself says so when it switches
    return int(uid), int(gid)


class Options(usage.Options):
    synopsis = "--config FILE --node NAME"
    longdesc = "Run one gtmcluster node: the member NAME of the sync group described in FILE."
    optParameters = [
        ["config", "c", None, "the sync group's YAML config file"],
        ["node", "n", None, "this node's member name in the config (optional with one member)"],
    ]

    loaded: Config
    listeners: list[sockets.Listener]
    peer_socket: socket.socket | None
    api_socket: socket.socket | None
    rum_socket: socket.socket | None
    api_token: str
    credentials: Credentials | None
    pinger: IcmpPinger | None
    #: what the node runs: its file, or the group's newest config (config sync)
    start: shared.Start

    def postOptions(self) -> None:
        if not self["config"]:
            raise usage.UsageError("--config FILE is required")
        try:
            self.loaded = load(self["config"])
        except ConfigError as e:
            raise usage.UsageError(f"the config has problems:\n{e}") from None
        config = self.loaded
        members = [m.name for m in config.sync_group.members]
        if not self["node"]:
            if len(members) != 1:
                raise usage.UsageError(f"--node NAME is required; members: {', '.join(members)}")
            self["node"] = members[0]
        if self["node"] not in members:
            raise usage.UsageError(
                f"{self['node']!r} is not a member of sync group {config.sync_group.name!r}; "
                f"members: {', '.join(members)}"
            )
        node = self["node"]
        member = config.member(node)
        owner = _dropped_to(self.parent)
        uid = owner[0] if owner is not None else os.geteuid()
        for what, directory in (("state_dir", config.state_dir_for(node)), ("log_dir", config.log_dir)):
            problem = private.directory_problem(directory, uid, what)
            if problem is not None:
                raise usage.UsageError(problem)
        try:
            self.api_token = api_token.settle(config.state_dir_for(node), owner)
        except api_token.TokenFileError as e:
            raise usage.UsageError(f"the API's token: {e}") from None
        # the group's newest config held here runs instead of the file (config sync)
        self.start = shared.at_start(config, self["config"], node, owner)
        self.loaded = config = self.start.config
        member = config.member(node)
        self.credentials = None
        self.peer_socket = None
        self.api_socket = None
        self.rum_socket = None
        self.rum_tls: tuple[bytes, bytes] | None = None
        self.pinger = None
        self.listeners = []
        try:
            if len(members) > 1 or config.api.tls:
                # a group of one has no peers: no certificates needed (unless the API serves
                # HTTPS with the member's certificate), no peer listener opened
                self.credentials = load_credentials(config.tls_for(node), node)
            self.listeners = sockets.bind(member.dns, config.dns_server.processes)
            if len(members) > 1:
                self.peer_socket = sockets.bind_tcp(member.peer, "sync group peers")
            self.api_socket = sockets.bind_tcp(member.api, "the HTTP API")
            if member.rum is not None:
                self.rum_tls = read_tls(config.rum)
                self.rum_socket = sockets.bind_tcp(member.rum, "the RUM listener")
            if uses_icmp(config):
                from twisted.internet import reactor

                self.pinger = open_pinger(reactor)
        except CredentialError as e:
            self._release()
            what = "sync group TLS" if len(members) > 1 else "the API's TLS (api.tls)"
            raise usage.UsageError(f"{what}: {e}") from None
        except sockets.ListenError as e:
            self._release()
            raise usage.UsageError(str(e)) from None
        except IcmpUnavailable as e:
            self._release()
            raise usage.UsageError(f"icmp monitors cannot run: {e}") from None
        except OSError as e:
            self._release()
            raise usage.UsageError(f"the RUM listener's certificate (rum.tls): {e}") from None

    def _release(self) -> None:
        for listener in self.listeners:
            listener.close()
        for sock in (self.peer_socket, self.api_socket, self.rum_socket):
            if sock is not None:
                sock.close()


def makeService(options: Options) -> Any:
    from twisted.internet import reactor

    from gtmcluster.limits import needed_open_files, raise_open_files
    from gtmcluster.nodelog.audit import AuditFile
    from gtmcluster.nodelog.writer import NodeLog
    from gtmcluster.service import Sockets, make_service

    raise_open_files(needed_open_files(options.loaded, options["node"]))
    threads: Any = reactor  # IReactorThreads, which the typed global reactor does not declare

    service = make_service(
        options.loaded,
        options["node"],
        reactor,
        Sockets(
            options.listeners,
            options.peer_socket,
            options.credentials,
            options.pinger,
            options.api_socket,
            options.api_token,
            options.rum_socket,
            options.rum_tls,
        ),
        options["config"],
        NodeLog(options.loaded.log_dir, options["node"], reactor.seconds, call_from_thread=threads.callFromThread),
        options.start,
        AuditFile(options.loaded.log_dir, options["node"], reactor.seconds),
    )
    # What is alive now (the config, the node, the state it loaded) lives as long as the
    # process: collected once and frozen out of the collector's reach before the first
    # answer. Else the first collections after the start examine the config's million
    # objects, built with the collector paused and so all in its youngest generation: at
    # 5,000 servers three collections of 73, 55 and 125 ms in the first second of answers.
    heap.collect_and_freeze()
    return service
