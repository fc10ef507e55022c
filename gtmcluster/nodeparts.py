"""The parts of a running node that take a new config, behind one small interface.

A reload (`nodeservice.NodeService.switching`) is "prepare all, then commit all, or none":
each part's `Reconfigurable.prepare` builds what it needs for the new config (what can
fail), none of it in use yet, and hands back its `Commit`, assignments that do not fail;
only when every part has prepared does the node run the commits, in the order of its list.

`Reload` is what a part prepares from: the new config and what differs from the running
one, the node's answer path built for it (`node.Prepared`: prepared before every part, as
the DNS service answers with its responder and the probes fill its measurements), the
TLS files read for it, and the bundle's base folder. The parts below the node's layer
(DNS, health checks, link traffic, probes, NOTIFY, the sync group, the peers, config
sync) are adapted here; the parts above it (the HTTPS API's TLS settings, the answering
workers) implement `prepare` themselves and are handed to the node by the wiring
(`service.make_service`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from twisted.internet.interfaces import IReactorTime

from gtmcluster.alerts.service import AlertsService
from gtmcluster.config.changes import Changes
from gtmcluster.config.model import Config
from gtmcluster.dns.notify import NotifyService
from gtmcluster.dns.server import DNSService
from gtmcluster.dnssec import keyset
from gtmcluster.health.checker import HealthChecker
from gtmcluster.health.linktraffic import LinkTrafficPoller
from gtmcluster.node import Prepared
from gtmcluster.proximity.budget import Budget
from gtmcluster.proximity.clientprobe import ClientProbeScheduler
from gtmcluster.proximity.scheduler import ProbeScheduler
from gtmcluster.sync.configsync import ConfigSync
from gtmcluster.sync.replicator import Replicator
from gtmcluster.sync.service import PeerService
from gtmcluster.sync.tls import Credentials

#: puts what a part prepared in use: assignments that do not fail
Commit = Callable[[], object]

#: the sync group's timers a reload retunes
TIMERS = ("idle_timeout", "handshake_timeout", "heartbeat_interval", "heartbeat_timeout")


@dataclass(frozen=True)
class Reload:
    """A new config on its way in: what each part prepares from."""

    #: the new config (checked already)
    config: Config
    #: the config running now
    old: Config
    #: what differs between them (compared off the reactor thread), when known
    changes: Changes | None
    #: the node's answer path built for *config* (`node.Node.prepare_reload`)
    answers: Prepared
    #: this member's TLS files of *config* (read and checked already), when a part uses them
    creds: Credentials | None = None
    #: with a bundle's config: the node's own base folder
    own_dir: Path | None = None


class Reconfigurable(Protocol):
    """A part of the node that takes a new config: `prepare` builds (raising if it cannot)
    and returns the commit that puts it in use; *label* names the part in the log and in
    the problems of a refused reload."""

    @property
    def label(self) -> str: ...

    def prepare(self, reload: Reload) -> Commit: ...


class DNSPart:
    """The DNS service: its limits and the new answer path's responder."""

    label = "DNS"

    def __init__(self, dns: DNSService):
        self.dns = dns

    def prepare(self, reload: Reload) -> Commit:
        return self.dns.prepare(reload.config.dns_server, reload.answers.responder)


class HealthChecksPart:
    """The health checks of the new config's monitors (changed checks only)."""

    label = "health checks"

    def __init__(self, checker: HealthChecker):
        self.checker = checker

    def prepare(self, reload: Reload) -> Commit:
        return self.checker.prepare(reload.config, reload.changes)


class LinkTrafficPart:
    """The polls of this data center's links."""

    label = "link traffic"

    def __init__(self, poller: LinkTrafficPoller):
        self.poller = poller

    def prepare(self, reload: Reload) -> Commit:
        return self.poller.prepare(reload.config)


class ProbesPart:
    """The LDNS path probes: the new prober budget, filling the new answer path's
    measurements."""

    label = "probes"

    def __init__(self, probes: ProbeScheduler, clock: IReactorTime):
        self.probes = probes
        self.clock = clock

    def prepare(self, reload: Reload) -> Commit:
        budget = Budget(reload.config.prober, self.clock.seconds)
        measurements = reload.answers.measurements
        probes = self.probes
        return lambda: probes.reconfigure(measurements, budget)


class ClientProbesPart:
    """The client subnet probes: their settings (the prober's budget is the probes')."""

    label = "client probes"

    def __init__(self, probes: ClientProbeScheduler):
        self.probes = probes

    def prepare(self, reload: Reload) -> Commit:
        config, probes = reload.config, self.probes
        return lambda: probes.reconfigure(config)


class NotifyPart:
    """NOTIFY to the secondaries of the zones the reload changed."""

    label = "NOTIFY"

    def __init__(self, notify: NotifyService):
        self.notify = notify

    def prepare(self, reload: Reload) -> Commit:
        notifier, old, new = self.notify.notifier, reload.old, reload.config
        return lambda: notifier.reloaded(old, new)


class SyncGroupPart:
    """The replication: the group's members, the config digest it tells them, its timers."""

    label = "sync group"

    def __init__(self, replicator: Replicator):
        self.replicator = replicator

    def prepare(self, reload: Reload) -> Commit:
        new = reload.config
        names = [m.name for m in new.sync_group.members]
        timers = {key: getattr(new.sync_group.settings, key) for key in TIMERS}
        replicator = self.replicator
        return lambda: replicator.reconfigure(names, new.digest, timers)


class DNSSECKeysPart:
    """The digests of the zone keys the replication tells the peers."""

    label = "DNSSEC keys"

    def __init__(self, replicator: Replicator):
        self.replicator = replicator

    def prepare(self, reload: Reload) -> Commit:
        new, replicator = reload.config, self.replicator
        return lambda: replicator.set_dnssec_keys(keyset.digests(new.dnssec))


class ConfigSyncPart:
    """Whether the group's config sync is on."""

    label = "config sync"

    def __init__(self, exchange: ConfigSync):
        self.exchange = exchange

    def prepare(self, reload: Reload) -> Commit:
        exchange, on = self.exchange, reload.config.sync_group.settings.config_sync
        return lambda: setattr(exchange, "enabled", on)


class PeersPart:
    """The peer connections: whom this member dials, and the certificate new ones use."""

    label = "peers"

    def __init__(self, peers: PeerService, me: str):
        self.peers = peers
        self.me = me

    def prepare(self, reload: Reload) -> Commit:
        peers, creds = self.peers, reload.creds
        others = [m for m in reload.config.sync_group.members if m.name != self.me]

        def dial() -> None:
            peers.reconfigure(others)
            if creds is not None:
                peers.use_credentials(creds)

        return dial


class AlertsPart:
    """The alerts: the webhooks, their caps and the networks they may reach."""

    label = "alerts"

    def __init__(self, alerts: AlertsService):
        self.alerts = alerts

    def prepare(self, reload: Reload) -> Commit:
        return self.alerts.prepare(reload.config)
