"""Zone transfer out (RFC 5936 AXFR, RFC 1995 IXFR) of the static zones, with TSIG (RFC 8945).

A zone is handed out when its config has ``transfer`` (`ZoneTransfer`) to sources in its
``allow`` networks, and, when it names a ``tsig`` key, only to requests signed with that
key; the replies are then signed, every message of a multi-message transfer included.

A signed request is verified first (RFC 8945 5.2): a missing, unknown or wrong signature
gets NOTAUTH with the TSIG error RFC 8945 5.3.2 names (BADKEY and BADSIG unsigned, BADTIME
signed). Then the refusals: a name that is not a zone apex, AXFR over UDP, or a source
outside ``allow`` get REFUSED (as knotd and gdnsd answer them), signed when the request was
verified (RFC 8945 5.3); an unsigned request for a zone with ``tsig`` gets NOTAUTH. A zone
without ``transfer`` is refused by the responder, unsigned, unless the request verifies
with the key of another zone's ``transfer``: then this REFUSED is signed too.

AXFR (and IXFR from a serial the journal does not know) is the whole zone over TCP. IXFR
from a serial the zone's `Journal` holds is the incremental form of RFC 1995 4: our SOA,
then per step the old SOA, the deletions, the step's new SOA, the additions, and our SOA
again. A client at our serial (or a newer one, RFC 1982) gets our SOA alone. Over UDP
(RFC 1995 2) IXFR is answered incrementally when the difference fits the client's size,
else by our SOA alone, which tells the client to ask again over TCP.

What is transferred is the zone file's content: wide IP names carry no records of their
own in a transfer (as F5 BIG-IP DNS transfers none), so a secondary answers them from the
zone file's static records at those names, if any.

Off the reactor's back: encoding a big zone takes a while (about 0.5 s for 50,000
records), and DNS answers wait while the reactor thread works. So a transfer of more than
`SMALL` names (or journal records) is encoded cooperatively (a twisted `Cooperator`,
`PER_TURN`): one message of about 32 KB per reactor turn, the reactor answering queries in
between, and the request is answered when the last message is made. Not a thread: the
encoder is pure Python, so a thread would hold the GIL as long and contend with the reactor
for it, and the zone and journal would have to be shown safe to read from another thread;
one message at a time keeps each pause short and everything on one thread. A whole-zone
transfer is encoded once per config and kept (requests arriving meanwhile wait for the
same encoding); each transfer then only patches the request's ID and question into the
kept messages and signs them. Incremental transfers are encoded per request: their cost is
the change's.

Over TCP a transfer that may be sent is answered by an `Outgoing`: checked, not begun. The
connection begins it when a transfer slot is free (`dns.xfrslots`) or refuses it, and then
asks for its messages one at a time, as its client reads them: a transfer costs one
message of memory beyond the kept encoding, however slowly (or never) the client reads.

TSIG time (RFC 8945 5.2.3): a request signed further from our clock than its own fudge, or
than ``dns_server.transfer.tsig_max_fudge`` (300 s) whichever is less, gets BADTIME: a
request cannot widen its own replay window by stating a large fudge (up to 65,535 s).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Union

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import dns.tsig
from twisted.internet.defer import Deferred
from twisted.internet.task import CooperativeTask, Cooperator
from twisted.logger import Logger
from twisted.python.failure import Failure

from gtmcluster.config.dnsserver import TSIGKey, ZoneTransfer
from gtmcluster.dns import wire
from gtmcluster.dns.journal import Journal, Step, newer, rrsets_of, serial_of
from gtmcluster.dns.xfrwire import algorithm, dns_key, finish, finish_each, messages, name_wire, single, tsig_room
from gtmcluster.dnsdata import names
from gtmcluster.dnsdata.names import Name
from gtmcluster.dnsdata.zone import TYPE_AXFR, TYPE_IXFR, TYPE_SOA, RRset, Zone, ZoneSet
from gtmcluster.runtime.sources import address_of

__all__ = ["Outgoing", "Transfers", "serial_of", "to_dnspython", "transfer_type"]

log = Logger()

#: transfers of at most this many names (or journal records) are encoded at once; bigger
#: ones a message at a time, the reactor running in between (a few ms at most at once)
SMALL = 500

#: encodes big transfers one message (about 8 ms of work) per reactor turn; twisted's own
#: `task.cooperate` works on for 10 ms per turn, so a query could wait for two messages
PER_TURN = Cooperator(terminationPredicateFactory=lambda: lambda: True)

#: a transfer's messages, made one at a time as they are asked for; or a Deferred firing
#: with them once the transfer is encoded (a big one: `PER_TURN`)
Messages = Union[Iterator[bytes], "Deferred[Iterator[bytes]]"]
#: runs an iterator a step at a time, letting the reactor work in between (`PER_TURN`)
Cooperate = Callable[[Iterator[None]], "CooperativeTask[Iterator[None]]"]


class Outgoing:
    """A transfer over TCP that may be sent (its zone, ``allow`` and TSIG checked), not yet
    begun: `start` begins it (the encoding, the log line), `refuse` answers REFUSED
    instead (signed when the request was: RFC 8945 5.3), when no transfer slot is free.
    *answered* is told the rcode given, NOERROR or REFUSED (the responder counts it)."""

    def __init__(self, kind: str, start: Callable[[], Messages], refusal: Callable[[], bytes]):
        self.kind = kind
        self._start = start
        self._refusal = refusal
        self.answered: Callable[[int], None] = lambda rcode: None

    def start(self) -> Messages:
        self.answered(dns.rcode.NOERROR)
        return self._start()

    def refuse(self) -> bytes:
        self.answered(dns.rcode.REFUSED)
        return self._refusal()


#: the answer to a transfer request: messages (a refusal, or over UDP the one reply), or
#: over TCP a transfer to begin
Reply = list[bytes] | Outgoing


def transfer_type(data: bytes) -> int:
    """AXFR or IXFR if *data* is a QUERY for one (read from the question, cheaply), else 0."""
    if len(data) < 17 or (data[2] >> 3) & 0xF != 0:
        return 0
    offset = 12
    while offset < len(data):
        length = data[offset]
        if length == 0:
            break
        if length & 0xC0:
            return 0
        offset += 1 + length
    if offset + 5 > len(data):
        return 0
    qtype = (data[offset + 1] << 8) | data[offset + 2]
    return qtype if qtype in (TYPE_AXFR, TYPE_IXFR) else 0


def to_dnspython(rrset: RRset) -> dns.rrset.RRset:
    """One of our RRsets as dnspython's."""
    owner = dns.name.Name((*rrset.owner, b""))
    rclass = dns.rdataclass.RdataClass(rrset.rclass)
    rtype = dns.rdatatype.RdataType(rrset.rtype)
    out = dns.rrset.RRset(owner, rclass, rtype)
    for pieces in rrset.rdatas:
        data = b"".join(p if isinstance(p, bytes) else name_wire(p) for p in pieces)
        out.add(dns.rdata.from_wire(rclass, rtype, data, 0, len(data)), rrset.ttl)
    return out


class Transfers:
    """Answers AXFR and IXFR for the zones of one config that have ``transfer``.

    *previous*: the running config's, whose journals this one continues (each zone's
    `Journal.after` the old zone and the new one). *cooperate*: how big transfers are
    encoded a message at a time (`PER_TURN.cooperate`); None encodes them at once.
    *max_fudge*: the widest TSIG time window accepted, whatever a request's fudge says
    (``dns_server.transfer.tsig_max_fudge``); *now*: our clock, in seconds since the epoch."""

    def __init__(
        self,
        zones: ZoneSet,
        settings: Mapping[Name, ZoneTransfer],
        previous: Transfers | None = None,
        cooperate: Cooperate | None = None,
        max_fudge: int = 300,
        now: Callable[[], float] = time.time,
    ):
        self.zones = zones
        self.settings = settings
        self.cooperate = cooperate
        self.max_fudge = max_fudge
        self.now = now
        #: zone origin -> the changes kept for IXFR (zones with none are absent)
        self.journals: dict[Name, Journal] = _journals(zones, settings, previous)
        #: the zones' keys by DNS name (a refusal of a request signed with one is signed)
        self._keys = {dns.name.from_text(s.tsig.name): s.tsig for s in settings.values() if s.tsig is not None}
        #: zone origin -> its whole transfer as messages to patch and sign (made on first use)
        self._bodies_of: dict[Name, list[bytes]] = {}
        #: zone origin -> the requests waiting for its whole transfer being encoded
        self._waiting: dict[Name, list[Deferred[list[bytes]]]] = {}

    def __bool__(self) -> bool:
        return bool(self.settings)

    def answer(self, data: bytes, source: str, tcp: bool, udp_size: int = 1232) -> Reply | None:
        """The answer to the transfer request *data* from *source*: the messages of a
        refusal, over TCP the `Outgoing` transfer to begin, or None to let the responder
        answer it (a zone without ``transfer``, a malformed request). Over UDP (*tcp*
        false) the answer is one message of at most the client's EDNS size (512 without),
        capped by *udp_size*."""
        try:
            query = dns.message.from_wire(data, keyring=False)
        except (dns.exception.DNSException, ValueError):
            return None
        if len(query.question) != 1 or query.flags & dns.flags.QR:
            return None
        question = query.question[0]
        key = names.key(tuple(question.name.labels[:-1]))
        zone = self.zones.find(key)
        if zone is None or question.rdclass != dns.rdataclass.IN:
            return None
        settings = self.settings.get(zone.origin_key)
        if settings is None:
            return self._not_transferred(data, query)
        signer = None
        if query.had_tsig:
            verified = self._verify(data, query, settings.tsig)
            if isinstance(verified, bytes):
                return [verified]
            query, signer = verified, settings.tsig
        ixfr = question.rdtype == dns.rdatatype.IXFR
        if key != zone.origin_key or not (tcp or ixfr) or not _allowed(source, settings):
            return [_error(query, dns.rcode.REFUSED)]  # (signed if the request was: RFC 8945 5.3)
        if settings.tsig is not None and signer is None:
            return [_error(query, dns.rcode.NOTAUTH)]
        theirs = _client_serial(query) if ixfr else None
        ours = serial_of(zone)
        steps: tuple[Step, ...] | None = None
        if theirs is not None and (theirs == ours or newer(theirs, ours)):
            steps = ()  # up to date: our SOA alone
        elif theirs is not None and zone.origin_key in self.journals:
            steps = self.journals[zone.origin_key].chain_from(theirs)
        if not tcp:
            limit = min(max(query.payload, wire.MIN_UDP), udp_size) if query.edns >= 0 else wire.MIN_UDP
            return [self._udp(data, query, zone, steps, signer, limit)]
        start = partial(self._start, data, query, zone, steps, signer, source, theirs)
        return Outgoing("IXFR" if ixfr else "AXFR", start, partial(_error, query, dns.rcode.REFUSED))

    def _start(
        self,
        data: bytes,
        query: dns.message.Message,
        zone: Zone,
        steps: tuple[Step, ...] | None,
        signer: TSIGKey | None,
        source: str,
        theirs: int | None,
    ) -> Messages:
        """Begin the transfer `answer` allowed: encode it (or take the kept encoding) and
        finish its messages one at a time (`finish_each`) as they are asked for."""
        if steps == ():
            return finish_each(data, query, list(messages(zone, [zone.soa])), signer)
        where = f"{names.to_text(zone.origin)} serial {serial_of(zone)} to {source}"
        try:
            if steps is not None:
                log.info("IXFR of {where}: incremental from serial {theirs}", where=where, theirs=theirs)
                size = sum(step.size for step in steps)
                bodies = self._encode(zone, _incremental(zone, steps), size <= SMALL)
            else:
                kind = "AXFR" if theirs is None else f"IXFR from serial {theirs}"
                log.info("{kind} of {where}: the whole zone", kind=kind, where=where)
                bodies = self._whole(zone)
        except ValueError:  # (encoded at once: a transfer that cannot be sent)
            return iter(_failed(query, zone, Failure()))
        if isinstance(bodies, Deferred):
            return bodies.addCallbacks(
                partial(finish_each, data, query, key=signer), lambda f: iter(_failed(query, zone, f))
            )
        return finish_each(data, query, bodies, signer)

    def _not_transferred(self, data: bytes, query: dns.message.Message) -> list[bytes] | None:
        """A zone without ``transfer``: REFUSED signed when the request is signed with a key
        of another zone's transfer and verifies; else None (the responder refuses it)."""
        if not query.had_tsig or query.keyname is None:
            return None
        key = self._keys.get(query.keyname)
        if key is None or query.keyalgorithm != algorithm(key):
            return None
        try:
            verified = dns.message.from_wire(data, keyring={query.keyname: dns_key(key)})
        except dns.exception.DNSException:
            return None
        return [_error(verified, dns.rcode.REFUSED)]

    def _verify(self, data: bytes, query: dns.message.Message, key: TSIGKey | None) -> dns.message.Message | bytes:
        """The signed request verified with *key*, or the NOTAUTH reply saying why not."""
        assert query.keyname is not None
        if key is None or query.keyname != dns.name.from_text(key.name) or query.keyalgorithm != algorithm(key):
            return _tsig_error(query, dns.rcode.BADKEY, None, self.now())
        ring = {dns.name.from_text(key.name): dns_key(key)}
        try:
            verified = dns.message.from_wire(data, keyring=ring)
        except dns.tsig.BadTime:
            return _tsig_error(query, dns.rcode.BADTIME, key, self.now())
        except (dns.tsig.BadSignature, dns.tsig.BadKey, dns.tsig.BadAlgorithm, dns.message.UnknownTSIGKey):
            return _tsig_error(query, dns.rcode.BADSIG, None, self.now())
        except dns.exception.DNSException:
            return _error(query, dns.rcode.FORMERR)
        # (dnspython checked the time against the request's own fudge: ours caps it)
        assert query.tsig is not None
        signed = query.tsig[0]
        if abs(self.now() - signed.time_signed) > min(signed.fudge, self.max_fudge):
            return _tsig_error(query, dns.rcode.BADTIME, key, self.now())
        return verified

    def _udp(
        self,
        data: bytes,
        query: dns.message.Message,
        zone: Zone,
        steps: tuple[Step, ...] | None,
        key: TSIGKey | None,
        limit: int,
    ) -> bytes:
        """An IXFR over UDP: the difference if it fits in *limit*, else our SOA alone."""
        room = limit - tsig_room(key)
        body = None
        # (each record takes 12 bytes at least: a change that cannot fit is not encoded)
        if steps and sum(step.size for step in steps) * 12 < room:
            body = single(zone, list(_incremental(zone, steps)), room)
        if body is None:
            body = single(zone, [zone.soa], room)
        assert body is not None
        return finish(data, query, [body], key)[0]

    def _whole(self, zone: Zone) -> list[bytes] | Deferred[list[bytes]]:
        """The zone's whole transfer as messages (ID 0, the question a placeholder): made
        once per config, on the first transfer; each transfer then only patches and signs
        them. Requests arriving while it is made wait for the same encoding."""
        origin = zone.origin_key
        kept = self._bodies_of.get(origin)
        if kept is not None:
            return kept
        small = len(zone.nodes) <= SMALL
        if small or self.cooperate is None:
            kept = self._bodies_of[origin] = list(messages(zone, _whole_zone(zone)))
            return kept
        waiter: Deferred[list[bytes]] = Deferred()
        waiting = self._waiting.get(origin)
        if waiting is not None:
            waiting.append(waiter)
            return waiter
        self._waiting[origin] = [waiter]
        encoding = self._encode(zone, _whole_zone(zone), False)
        assert isinstance(encoding, Deferred)
        encoding.addCallbacks(partial(self._made, origin), partial(self._not_made, origin))
        return waiter

    def _made(self, origin: Name, bodies: list[bytes]) -> None:
        self._bodies_of[origin] = bodies
        for waiter in self._waiting.pop(origin, []):
            waiter.callback(bodies)

    def _not_made(self, origin: Name, failure: Failure) -> None:
        for waiter in self._waiting.pop(origin, []):
            waiter.errback(failure)

    def _encode(self, zone: Zone, rrsets: Iterator[RRset], small: bool) -> list[bytes] | Deferred[list[bytes]]:
        """*rrsets* as messages: at once when *small* (or without a cooperator), else one
        message per iteration of the cooperator (the reactor runs in between)."""
        if small or self.cooperate is None:
            return list(messages(zone, rrsets))
        out: list[bytes] = []

        def work() -> Iterator[None]:
            for message in messages(zone, rrsets):
                out.append(message)
                yield None

        done: Deferred[Iterator[None]] = self.cooperate(work()).whenDone()
        return done.addCallback(lambda _: out)


def _journals(zones: ZoneSet, settings: Mapping[Name, ZoneTransfer], previous: Transfers | None) -> dict[Name, Journal]:
    """Each transferable zone's journal, continued from *previous* (the running config's)."""
    out: dict[Name, Journal] = {}
    if previous is None:
        return out
    for origin in settings:
        new, old = zones.by_origin.get(origin), previous.zones.by_origin.get(origin)
        if new is None or old is None:
            continue
        journal = previous.journals.get(origin, Journal()).after(old, new)
        if journal.steps:
            out[origin] = journal
    return out


def _whole_zone(zone: Zone) -> Iterator[RRset]:
    """The zone as AXFR sends it: SOA first and last, every other RRset in between."""
    yield zone.soa
    for node in zone.nodes.values():
        yield from (r for t, r in node.rrsets.items() if t != TYPE_SOA or r is not zone.soa)
    yield zone.soa


def _incremental(zone: Zone, steps: tuple[Step, ...]) -> Iterator[RRset]:
    """The incremental transfer of RFC 1995 4: our SOA, per step the old SOA, what it
    deleted, its new SOA, what it added; then our SOA again."""
    yield zone.soa
    for step in steps:
        yield step.old
        yield from rrsets_of(step.deleted)
        yield step.new
        yield from rrsets_of(step.added)
    yield zone.soa


def _client_serial(query: dns.message.Message) -> int | None:
    """The serial of the SOA an IXFR request carries in its authority section."""
    for rrset in query.authority:
        if rrset.rdtype == dns.rdatatype.SOA and len(rrset):
            return int(rrset[0].serial)
    return None


def _failed(query: dns.message.Message, zone: Zone, failure: Failure) -> list[bytes]:
    """SERVFAIL for a transfer that could not be encoded (an RRset over 64 KiB)."""
    failure.trap(ValueError)
    log.error("zone {zone} cannot be transferred: {error}", zone=names.to_text(zone.origin), error=failure.value)
    return [_error(query, dns.rcode.SERVFAIL)]


def _error(query: dns.message.Message, rcode: dns.rcode.Rcode) -> bytes:
    """An error reply: signed when *query* was verified (dnspython keeps its key then)."""
    response = dns.message.make_response(query)
    response.flags &= ~dns.flags.AA
    response.set_rcode(rcode)
    return response.to_wire()


def _tsig_error(query: dns.message.Message, error: int, key: TSIGKey | None, now: float) -> bytes:
    """NOTAUTH with a TSIG record carrying *error* and our time *now*: signed with *key*
    (BADTIME), else with an empty MAC (BADKEY, BADSIG; RFC 8945 5.3.2)."""
    response = dns.message.make_response(query)
    response.flags &= ~dns.flags.AA
    response.set_rcode(dns.rcode.NOTAUTH)
    assert query.tsig is not None and query.keyname is not None
    request = query.tsig[0]
    if key is not None:
        ours = struct.pack("!Q", int(now))[2:]  # RFC 8945 5.2.3: our time
        response.use_tsig(dns_key(key), query.keyname, request.fudge, query.id, error, ours, algorithm=algorithm(key))
        response.request_mac = request.mac
        return response.to_wire()
    tsig = dns.message.Message._make_tsig(
        query.keyname, request.algorithm, int(now), request.fudge, b"", query.id, error, b""
    )
    response.tsig = tsig
    response.want_tsig_sign = False
    return response.to_wire()


def _allowed(source: str, settings: ZoneTransfer) -> bool:
    try:
        address = address_of(source)
    except ValueError:
        return False
    return any(address in network for network in settings.allow)
