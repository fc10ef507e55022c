"""What a node knows of one member of its sync group (`sync.replicator.Replicator.peers`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gtmcluster.dnssec import keyset
from gtmcluster.sync.link import Channel


@dataclass(slots=True)
class PeerState:
    """What this node knows of one member, for status and for choosing a channel."""

    name: str
    datacenter: str = ""
    channels: list[Channel] = field(default_factory=list)
    connected_since: float | None = None
    last_contact: float | None = None
    config_digest: str = ""
    version: int = 0
    behind: bool = False  # pushes were dropped: reconcile when it catches up
    their_peers: frozenset[str] = frozenset()  # members it says it is connected to
    digest: str | None = None  # its state digest, as of its last heartbeat
    sent: int = 0  # records sent to it
    received: int = 0  # records received from it
    synced: bool = False  # one full reconciliation has completed since it connected
    #: the certificate (serial, expiry) its oldest open connection showed, the one
    #: `connected_since` counts from: a second connection built after it renewed does not
    #: hide that the first still runs on the old one (the last one shown once disconnected)
    certificate: dict[str, str] = field(default_factory=dict)
    #: since when every connection to it has been silent (see `live`), or None
    silent_since: float | None = None
    #: its DNSSEC key-set digests by zone (`dnssec.keyset`), None when not told (an older member)
    dnssec_keys: dict[str, str] | None = None
    #: the signed zones whose key sets differ between it and us
    dnssec_mismatch: list[str] = field(default_factory=list)

    @property
    def connected(self) -> bool:
        return bool(self.channels)

    @property
    def live(self) -> bool:
        """Connected and heard from within the heartbeat timeout on some connection: its
        verdicts count (see `Replicator.live_names`)."""
        return any(not proto.silent for proto in self.channels)

    def heard_keys(self, ours: Mapping[str, str], text: str) -> None:
        """It told its key-set digests (*text*, in its Hello or a heartbeat): compared with
        *ours* when they read (malformed ones are logged and left as they were)."""
        told = keyset.heard(self.name, text)
        if told is not None:
            self.dnssec_keys = told
            self.compare_keys(ours)

    def compare_keys(self, ours: Mapping[str, str]) -> None:
        """The zones whose key sets differ between it and *ours* (nothing when it never told)."""
        if self.dnssec_keys is not None:
            self.dnssec_mismatch = keyset.compare(self.name, ours, self.dnssec_keys, self.dnssec_mismatch)
