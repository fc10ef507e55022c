"""`twistd gtm`: options and the service for one node. Only the tap touches the reactor."""

from __future__ import annotations

from typing import Any

from twisted.python import usage

from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.config.problems import ConfigError
from gtmcluster.dns import sockets
from gtmcluster.probe.base import IcmpUnavailable
from gtmcluster.probe.icmp import IcmpPinger, open_pinger


def uses_icmp(config: Config) -> bool:
    """Whether any virtual server or link is checked with an icmp monitor."""
    monitors = [vs.monitor for vs in config.virtual_servers.values()] + [link.monitor for link in config.links.values()]
    return any(m is not None and m.type == "icmp" for m in monitors)


class Options(usage.Options):
    synopsis = "--config FILE --node NAME"
    longdesc = "Run one gtmcluster node: the member NAME of the sync group described in FILE."
    optParameters = [
        ["config", "c", None, "the sync group's YAML config file"],
        ["node", "n", None, "this node's member name in the config (optional with one member)"],
    ]

    loaded: Config
    pinger: IcmpPinger | None
    listeners: list[sockets.Listener]

    def postOptions(self) -> None:
        if not self["config"]:
            raise usage.UsageError("--config FILE is required")
        try:
            self.loaded = load(self["config"])
        except ConfigError as e:
            raise usage.UsageError(f"the config has problems:\n{e}") from None
        members = [m.name for m in self.loaded.sync_group.members]
        if not self["node"]:
            if len(members) != 1:
                raise usage.UsageError(f"--node NAME is required; members: {', '.join(members)}")
            self["node"] = members[0]
        if self["node"] not in members:
            raise usage.UsageError(
                f"{self['node']!r} is not a member of sync group {self.loaded.sync_group.name!r}; "
                f"members: {', '.join(members)}"
            )
        try:
            self.listeners = sockets.bind(self.loaded.member(self["node"]).dns)
        except sockets.ListenError as e:
            raise usage.UsageError(str(e)) from None
        self.pinger = None
        if uses_icmp(self.loaded):
            from twisted.internet import reactor

            try:
                self.pinger = open_pinger(reactor)
            except IcmpUnavailable as e:
                for listener in self.listeners:
                    listener.close()
                raise usage.UsageError(f"icmp monitors cannot run: {e}") from None


def makeService(options: Options) -> Any:
    from twisted.internet import reactor

    from gtmcluster.service import make_service

    return make_service(options.loaded, options["node"], options.listeners, reactor, options.pinger)
