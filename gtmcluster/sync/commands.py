"""The peer protocol's commands (Twisted AMP), and its version.

    Hello       who I am (node, group, data center), the protocol versions I speak,
                my config's digest and my DNSSEC key sets' digests; the first command on
                a connection, from its initiator
    Publish     a batch of records (new ones, relayed ones, or answers to a pull)
    Summary     per-origin (count, XOR) of what I hold; answered with the peer's
    Buckets     the 1024 bucket XORs of one origin
    Listing     (key, version) of one origin's records in some buckets
    Pull        the records at these keys (answered with as many as fit, and the rest)
    SendAll     stream me every record of one origin (as Publish batches), then answer
    Heartbeat   the members I hear from and my state digest; sent every heartbeat_interval
                on every connection, so a peer that goes silent (cut off without a reset)
                stops counting after heartbeat_timeout (see `peer`)
    ConfigState the config bundle I hold (its header), the one I run, and one I refused;
                sent when a connection is established and whenever one of them changes
    ConfigFetch a part of a bundle I hold, by its generation, publisher and digest, from an
                offset (`sync.configsync`)

Values stay under AMP's 64 KiB limit: record batches, listings and key lists are cut to
fit. A node refuses a peer whose range does not overlap its own; the two speak the lower
of their versions (the answer to Hello says which), and a node sends a peer no record of a
newer version than that (`state.schema.version_needed`, `sync.replicator`). The versions:

    1   the first
    2   admin records of every level (admin/datacenter/..., link, pool, member, wideip);
        version 1 knows admin/vs/... only, and drops a peer that sends the others
    3   config sync: ConfigState and ConfigFetch (sent to peers of version 3 only; an
        older member neither takes nor relays the group's bundles)
    4   links' traffic records (``traffic/link/<link>``)
    5   client proximity's records: ``client/<subnet>/<dc>``, ``pop/<ldns>``, ``rumid/<id>``
"""

from __future__ import annotations

from twisted.protocols import amp

#: the newest version this node speaks (`state.schema.NEWEST_VERSION` is the newest of
#: the records it knows: version 3 brought commands, not records; version 4 the records of
#: links' traffic, ``traffic/link/<link>``; version 5 client proximity's, `state.schema`)
PROTOCOL_VERSION = 5
#: the oldest version it still speaks (a member of version 1 is taken: see `sync.replicator`)
MIN_PROTOCOL_VERSION = 1


class Refused(Exception):
    """The peer will not talk to us (wrong group, name, or protocol version)."""


class Hello(amp.Command):
    arguments = [
        (b"node", amp.Unicode()),
        (b"group", amp.Unicode()),
        (b"datacenter", amp.Unicode()),
        (b"version", amp.Integer()),
        (b"min_version", amp.Integer()),
        (b"config_digest", amp.Unicode()),
        # the digests of my signed zones' DNSKEY sets (`dnssec.keyset`, JSON); optional: a
        # member that predates it sends none, and ignores ours (AMP skips unknown arguments)
        (b"dnssec_keys", amp.Unicode(optional=True)),
    ]
    response = [
        (b"node", amp.Unicode()),
        (b"group", amp.Unicode()),
        (b"datacenter", amp.Unicode()),
        (b"version", amp.Integer()),
        (b"config_digest", amp.Unicode()),
        (b"dnssec_keys", amp.Unicode(optional=True)),
    ]
    errors = {Refused: b"REFUSED"}
    fatalErrors = {Refused: b"REFUSED"}


class Publish(amp.Command):
    #: bulk: part of a reconciliation transfer (the receiver does not relay it record by
    #: record; it reconciles with its other peers afterwards instead)
    arguments = [(b"records", amp.String()), (b"bulk", amp.Boolean(optional=True))]
    response = [(b"merged", amp.Integer())]


class Loading(Exception):
    """The member asked is still loading its state snapshot: its digests describe part of
    its state. It says `Changed` when it is done, and the asker reconciles then."""


class Summary(amp.Command):
    arguments = [(b"summary", amp.String())]
    response = [(b"summary", amp.String())]
    errors = {Loading: b"LOADING"}


class Buckets(amp.Command):
    arguments = [(b"origin", amp.Unicode())]
    response = [(b"buckets", amp.String())]


class Listing(amp.Command):
    arguments = [(b"origin", amp.Unicode()), (b"buckets", amp.String())]
    response = [(b"entries", amp.String()), (b"rest", amp.String())]


class Pull(amp.Command):
    arguments = [(b"keys", amp.String())]
    response = [(b"records", amp.String()), (b"rest", amp.String())]


class SendAll(amp.Command):
    arguments = [(b"origin", amp.Unicode())]
    response = [(b"sent", amp.Integer())]


class Changed(amp.Command):
    """I took in a bulk transfer: reconcile with me (you may lack what I pulled)."""

    arguments = []
    response = []


class Heartbeat(amp.Command):
    #: the members the sender is connected to and hears from (not silent): a record whose
    #: origin is among them reaches the sender directly, so nobody needs to relay it there
    #: digest: the sender's state digest, so status pages can say whether nodes agree
    #: dnssec_keys: the sender's key-set digests (as in Hello), only when they changed since
    #: it last told them on this connection (a reload)
    arguments = [
        (b"connected", amp.Unicode(optional=True)),
        (b"digest", amp.Unicode(optional=True)),
        (b"dnssec_keys", amp.Unicode(optional=True)),
    ]
    response = []


class ConfigState(amp.Command):
    #: state: `codec.config_state` (JSON)
    arguments = [(b"state", amp.String())]
    response = []


class NotHeld(Exception):
    """The bundle asked for is not (or no longer) held here."""


class ConfigFetch(amp.Command):
    #: the bundle: its generation, publisher and digest (two publishers may publish the
    #: same files as one generation); data: at most `codec.MAX_BATCH` bytes of the bundle
    #: as sent (`groupconfig.bundle.encode`) from offset; total: its whole length
    arguments = [
        (b"generation", amp.Integer()),
        (b"publisher", amp.Unicode()),
        (b"digest", amp.Unicode()),
        (b"offset", amp.Integer()),
    ]
    response = [(b"data", amp.String()), (b"total", amp.Integer())]
    errors = {NotHeld: b"NOT_HELD"}


#: every command of the protocol, by its name on the wire
BY_NAME: dict[bytes, type[amp.Command]] = {
    c.commandName: c
    for c in (Hello, Publish, Summary, Buckets, Listing, Pull, SendAll, Changed, Heartbeat, ConfigState, ConfigFetch)
}
