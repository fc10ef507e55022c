"""What each kind of record may be: its key, its value, its TTL, its size, and how many of
them one origin may hold. Pure: no Twisted, no I/O.

A record's kind is its key's first segment. The kinds, their keys and values:

    obs/vs/<vs>/<observer>      {"up": bool, "reason": str}         TTL required
    obs/link/<link>/<observer>  the same; the observer must be the record's origin
    admin/<level>/<name>        {"state": "enabled" | "disabled" | "drain", "by": str,
                                 "reason": str, "at": number, "node": str}
                                (<level>: datacenter, link, vs, pool, wideip; or
                                 admin/member/<pool>/<vs>: see `state.admin`)
    held/vs/<vs>                {"since": number, "reason": str, "by": str}
    metrics/vs/<vs>             load figures (non-negative numbers) and "by"   TTL required
    path/<ldns>/<datacenter>    the eight fields of `proximity.table.PathValue`   TTL required
    probe/<ldns>                {"by": str}                          TTL required
    persist/<wideip>/<qtype>/<client...>   {"pool": str, "members": [str, ...]}   TTL required
                                (<client>: a network, or <resolver network>/ecs/<network>)
    traffic/link/<link>         {"bps_in": number, "bps_out": number, "by": str}  TTL required
                                (a link's measured traffic: `lb.linkload`; version 4)
    client/<subnet>/<dc>        {"rtt": µs, "samples": [µs, ...], "source": "rum" | "probe",
                                 "by": str}   TTL required (a client subnet's RTT; version 5;
                                 <subnet>: 10.1.2.0_24, the "/" written "_")
    pop/<ldns>                  {"subnets": {<subnet>: count}, "rtt": {<dc>: µs}, "n": int}
                                TTL required (an LDNS's measured clients; version 5)
    rumid/<id>                  {"ldns": str, "ecs": str}   TTL required (who resolved a
                                one-use name; version 5)
    cprobe/<subnet>             {"by": str, "failures": int, "silent": bool}   TTL required
                                (a request to probe a client subnet, or the mark of one
                                that never answered; version 5)

A value of None is a tombstone (a deletion) of any kind; it needs a TTL, of at most
`MAX_TOMBSTONE_TTL`.

Every record that comes from a peer (`sync.codec.decode`) or from the snapshot on disk
(`state.snapshot`) is checked here; `problem` says what is wrong with it, or None. A peer
that sends a record with a problem is dropped (as for any malformed message), and a row of
the snapshot with one is skipped with a log line.

How strict, and why:

- An unknown kind is refused: nothing reads it, so it would only take memory and disk on
  every member (40 records of 50 KB with 10-year TTLs, each under an invented kind, were
  accepted before).
- The fields listed must have their types (and, where one is given, their range); a
  field this version does not know is accepted and carried on unchanged, within the kind's
  size. A newer member may add a field (a reason, a figure) without its records being
  refused by the members not yet upgraded: a rolling upgrade keeps the group connected.
  Anything an older member would refuse (a new kind, a new admin state, a field of another
  type) is a new protocol version (`sync.commands.PROTOCOL_VERSION`), and a newer member
  sends it only to peers whose Hello says they speak it (`version_needed` says which
  version a key needs: version 2 brought the admin levels other than vs, version 4 the
  kind traffic).
- Sizes, TTLs and counts are capped per kind (`KINDS`). The writers of this version stay
  within them with room to spare (their text is shortened to `MAX_TEXT`; the config can
  set no TTL beyond a kind's cap, and no bound on records, `prober.max_ldns`,
  `persistence.max_records`, `prober.max_per_second`, beyond a kind's `writer_limit`), so
  an honest member is never refused.
- The forgeries cheap to catch are: a verdict (``obs/...``) whose key names another
  observer than its origin. A record's origin itself cannot be checked (relays carry the
  records of others, and records are not signed): members are trusted (see README, "Trust
  model and limits").
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from gtmcluster.state import keys
from gtmcluster.state.values import Compact, plain

#: the longest text (in characters) of a reason a writer of this version puts in a record;
#: longer text is shortened (`shorten`)
MAX_TEXT = 500
#: a name in a record (a member, a pool, a server) at most, in characters
MAX_NAME = 253
#: a tombstone (a value of None) lives at most this long (`Store.delete` gives it an hour)
MAX_TOMBSTONE_TTL = 86400.0

DAY = 86400.0
#: a verdict lives max(90 s, 3 x interval x max(up_after, down_after)) (`health.checker`):
#: with the config's largest interval (one day) and thresholds (100), 300 days
MAX_OBSERVATION_TTL = 3 * DAY * 100
#: a path lives `prober.inactive_ldns_ttl`, which the config caps at this (366 days)
MAX_PATH_TTL = 366 * DAY
#: a persistence record lives the wide IP's `persistence.ttl`, which the config caps at this
MAX_PERSIST_TTL = 30 * DAY
#: a probe request lives at most a minute (`proximity.scheduler.REQUEST_TTL`)
MAX_PROBE_TTL = 300.0
#: admin and held states have no TTL; a newer version may give one, up to this
MAX_STATE_TTL = 366 * DAY

#: what writers of this version write at most, as a share of a count cap: the records of an
#: origin arrive and expire a little later at its peers than at the origin itself, so an
#: honest origin stays well under the cap its peers apply
WRITER_SHARE = 0.9


class Problem(NamedTuple):
    """What is wrong with a record: its *kind* (a known kind's name, or "unknown"), a
    *reason* (one word, for metrics: key, origin, value, ttl, size, kind, count) and a
    sentence."""

    kind: str
    reason: str
    text: str


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of record and its limits."""

    name: str
    #: the key's segments after the kind (with the record's origin) -> what is wrong, or None
    key: Callable[[list[str], str], str | None]
    #: the value (a dict, or the compact Mapping a store keeps) -> what is wrong, or None
    value: Callable[[Mapping[str, Any]], str | None]
    #: the largest value, in bytes of compact JSON (UTF-8)
    max_size: int
    #: the longest TTL (seconds); whether a live record must have one
    max_ttl: float
    ttl_required: bool
    #: records (tombstones too) one origin may hold, at each receiving member
    max_records: int
    #: for the kinds that come by the million, a value is measured only when it may be too
    #: large: when it has more than `bounded` fields (a value of only the kind's fields is
    #: within `max_size` by `value`'s checks), or `bound` (an upper bound of the size of a
    #: value that passed them) says it may be
    bounded: int = 0
    bound: Callable[[Mapping[str, Any]], int] | None = None

    @property
    def writer_limit(self) -> int:
        """Records of this kind a writer of this version keeps under its own origin at most."""
        return int(self.max_records * WRITER_SHARE)


# -- keys ------------------------------------------------------------------------------------

#: an address in a key: IPv4 or IPv6 text (checked for its characters only; such a key
#: that is not an address is never read, and costs no more than another)
_ADDRESS = re.compile(r"[0-9A-Fa-f:.]{2,45}")


def _observation_key(parts: list[str], origin: str) -> str | None:
    if len(parts) != 3 or parts[0] not in ("vs", "link") or not parts[1] or not parts[2]:
        return "is not obs/vs/<vs>/<observer> or obs/link/<link>/<observer>"
    return None


def _vs_key(parts: list[str], origin: str) -> str | None:
    if len(parts) != 2 or parts[0] != "vs" or not parts[1]:
        return "is not <kind>/vs/<virtual server>"
    return None


def _path_key(parts: list[str], origin: str) -> str | None:
    if len(parts) != 2 or not _ADDRESS.fullmatch(parts[0]) or not parts[1]:
        return "is not path/<LDNS address>/<data center>"
    return None


def _probe_key(parts: list[str], origin: str) -> str | None:
    if len(parts) != 1 or not _ADDRESS.fullmatch(parts[0]):
        return "is not probe/<LDNS address>"
    return None


def _persist_key(parts: list[str], origin: str) -> str | None:
    if len(parts) < 3 or not all(parts) or not parts[1].isdigit():
        return "is not persist/<wide IP>/<qtype>/<client network>"
    return None


# -- values ----------------------------------------------------------------------------------


def _text(value: Mapping[str, Any], field: str, limit: int | None = None, required: bool = False) -> str | None:
    """What is wrong with *field* as text (of at most *limit* characters, when given: the
    kinds whose values are not measured); absent is fine unless *required*."""
    if field not in value:
        return f"has no {field!r}" if required else None
    text = value[field]
    if type(text) is not str:
        return f"{field!r} is not text"
    if limit is not None and len(text) > limit:
        return f"{field!r} is longer than {limit} characters"
    return None


def _integer(value: Mapping[str, Any], field: str, low: int, high: int) -> str | None:
    number = value.get(field)
    if type(number) is not int:
        return f"{field!r} is not a whole number" if field in value else f"has no {field!r}"
    if not low <= number <= high:
        return f"{field!r} is not within {low}..{high}"
    return None


def finite(number: Any) -> bool:
    """A number finite as a float: an integer past a float's range (JSON reads integers of
    hundreds of digits exactly) is not, and must not raise where the record is checked."""
    if type(number) not in (int, float):
        return False
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def _observation(value: Mapping[str, Any]) -> str | None:
    if type(value.get("up")) is not bool:
        return "'up' is not true or false" if "up" in value else "has no 'up'"
    return _text(value, "reason")


ADMIN_STATES = ("enabled", "disabled", "drain")
#: the levels of an admin record's key (`state.admin`); a pool member's is admin/member/<pool>/<vs>
ADMIN_LEVELS = ("datacenter", "link", "vs", "pool", "member", "wideip")
#: the peer protocol version (`sync.commands.PROTOCOL_VERSION`) that brought each admin
#: level: a member of version 1 knows admin/vs/<vs> only, and refuses the others
ADMIN_LEVEL_VERSIONS = {"vs": 1, "datacenter": 2, "link": 2, "pool": 2, "member": 2, "wideip": 2}
#: the peer protocol version that brought each kind of record after version 1 (a member of
#: an older version refuses the kind as unknown)
KIND_VERSIONS = {"traffic": 4, "client": 5, "pop": 5, "rumid": 5, "cprobe": 5}
#: the newest protocol version whose records this schema knows
NEWEST_VERSION = max(*ADMIN_LEVEL_VERSIONS.values(), *KIND_VERSIONS.values())
#: the kinds some of whose keys need a version above 1 (`version_needed`): a node lists the
#: records it withholds from an older peer (the client kinds are up to `rum.max_subnets`
#: times the data centers: listed only while a member of version 4 or older is connected,
#: during a rolling upgrade)
VERSIONED_KINDS = ("admin", "traffic", "client", "pop", "rumid", "cprobe")


def version_needed(key: str) -> int:
    """The lowest peer protocol version whose members take a record at *key*: a member of
    an older version refuses it (and drops the connection that carried it), so it is sent
    only to peers that speak this version (see `sync.replicator`)."""
    if key.startswith(keys.ADMIN):
        return ADMIN_LEVEL_VERSIONS.get(key[len(keys.ADMIN) :].partition("/")[0], 1)
    return KIND_VERSIONS.get(key.partition("/")[0], 1)


def _admin_key(parts: list[str], origin: str) -> str | None:
    wanted = 3 if parts[0] == "member" else 2
    if parts[0] not in ADMIN_LEVELS or len(parts) != wanted or not all(parts):
        return "is not admin/<level>/<name> (levels: datacenter, link, vs, pool, wideip) or admin/member/<pool>/<vs>"
    return None


def _admin(value: Mapping[str, Any]) -> str | None:
    state = value.get("state")
    if state not in ADMIN_STATES or type(state) is not str:
        return f"'state' is not one of {', '.join(ADMIN_STATES)}" if "state" in value else "has no 'state'"
    if "at" in value and not finite(value["at"]):
        return "'at' is not a number"
    return _text(value, "by") or _text(value, "reason") or _text(value, "node")


def _held(value: Mapping[str, Any]) -> str | None:
    if "since" in value and not finite(value["since"]):
        return "'since' is not a number"
    return _text(value, "reason") or _text(value, "by")


#: the load figures a monitor reports (`probe.loadread`); any other number is carried too
LOAD_FIGURES = ("connections", "packets_per_second", "kbps", "capacity")


def _metrics(value: Mapping[str, Any]) -> str | None:
    for field in LOAD_FIGURES:
        if field in value and not (finite(value[field]) and value[field] >= 0):
            return f"{field!r} is not a non-negative number"
    return _text(value, "by")


def _traffic_key(parts: list[str], origin: str) -> str | None:
    if len(parts) != 2 or parts[0] != "link" or not parts[1]:
        return "is not traffic/link/<link>"
    return None


def _traffic(value: Mapping[str, Any]) -> str | None:
    for field in ("bps_in", "bps_out"):
        if field not in value:
            return f"has no {field!r}"
        if not (finite(value[field]) and value[field] >= 0):
            return f"{field!r} is not a non-negative number"
    return _text(value, "by")


#: a client subnet in a key: an address, "_", a prefix length
_SUBNET = re.compile(r"[0-9A-Fa-f:.]{2,45}_[0-9]{1,3}")
#: a client subnet's samples kept at most (`proximity.clients.SAMPLES_PER_DC`)
MAX_CLIENT_SAMPLES = 16
#: the client subnets of one LDNS's population at most, and its data centers
MAX_POPULATION_SUBNETS = 32
MAX_POPULATION_DCS = 64
#: a client figure lives `rum.sample_ttl` (at most 30 days); a one-use name's record
#: `rum.id_ttl` (at most an hour)
MAX_CLIENT_TTL = 30 * DAY
MAX_RUMID_TTL = 3600.0
#: the largest RTT a client figure holds (µs): a beacon's sample is under 60 s
MAX_CLIENT_RTT = 60_000_000
CLIENT_SOURCES = ("rum", "probe")


def _client_key(parts: list[str], origin: str) -> str | None:
    if len(parts) != 2 or not _SUBNET.fullmatch(parts[0]) or not parts[1]:
        return "is not client/<subnet, as 10.1.2.0_24>/<data center>"
    return None


def _pop_key(parts: list[str], origin: str) -> str | None:
    if len(parts) != 1 or not _ADDRESS.fullmatch(parts[0]):
        return "is not pop/<LDNS address>"
    return None


def _rumid_key(parts: list[str], origin: str) -> str | None:
    if len(parts) != 1 or not keys.RUM_ID.fullmatch(parts[0]):
        return "is not rumid/<16 to 32 of a-z and 0-9>"
    return None


def _rtt_us(number: Any) -> bool:
    return type(number) is int and 0 < number <= MAX_CLIENT_RTT


def _client(value: Mapping[str, Any]) -> str | None:
    if not _rtt_us(value.get("rtt")):
        return f"'rtt' is not a whole number of µs within 1..{MAX_CLIENT_RTT}"
    samples = value.get("samples")
    if not isinstance(samples, (list, tuple)) or not 0 < len(samples) <= MAX_CLIENT_SAMPLES:
        return f"'samples' is not a list of 1 to {MAX_CLIENT_SAMPLES} figures"
    if not all(_rtt_us(n) for n in samples):
        return f"'samples' are not whole numbers of µs within 1..{MAX_CLIENT_RTT}"
    if value.get("source") not in CLIENT_SOURCES or type(value.get("source")) is not str:
        return f"'source' is not one of {', '.join(CLIENT_SOURCES)}"
    return _text(value, "by", MAX_NAME, True)


def _pop(value: Mapping[str, Any]) -> str | None:
    subnets, rtts, n = value.get("subnets"), value.get("rtt"), value.get("n")
    if type(subnets) is not dict or not 0 < len(subnets) <= MAX_POPULATION_SUBNETS:
        return f"'subnets' is not a mapping of 1 to {MAX_POPULATION_SUBNETS} subnets"
    counted = (type(k) is str and _SUBNET.fullmatch(k) and type(c) is int and 0 < c < 2**31 for k, c in subnets.items())
    if not all(counted):
        return "'subnets' is not subnet (10.1.2.0_24) -> a positive count"
    if type(rtts) is not dict or len(rtts) > MAX_POPULATION_DCS:
        return f"'rtt' is not a mapping of at most {MAX_POPULATION_DCS} data centers"
    if not all(type(k) is str and 0 < len(k) <= MAX_NAME and _rtt_us(v) for k, v in rtts.items()):
        return f"'rtt' is not data center -> µs within 1..{MAX_CLIENT_RTT}"
    if type(n) is not int or not 0 <= n < 2**31:
        return "'n' is not a count"
    return None


#: a silent client subnet's mark lives its back-off and a day more (`proximity.clientrequests`)
MAX_CPROBE_TTL = 2 * DAY
#: consecutive silent rounds a mark counts at most (the back-off is a day long by then)
MAX_CPROBE_FAILURES = 64


def _cprobe_key(parts: list[str], origin: str) -> str | None:
    if len(parts) != 1 or not _SUBNET.fullmatch(parts[0]):
        return "is not cprobe/<subnet, as 10.1.2.0_24>"
    return None


def _cprobe(value: Mapping[str, Any]) -> str | None:
    wrong = _integer(value, "failures", 0, MAX_CPROBE_FAILURES)
    if wrong:
        return wrong
    if type(value.get("silent")) is not bool:
        return "'silent' is not true or false"
    return _text(value, "by", MAX_NAME, True)


def _rumid(value: Mapping[str, Any]) -> str | None:
    ldns = value.get("ldns")
    if type(ldns) is not str or not _ADDRESS.fullmatch(ldns):
        return "'ldns' is not an address"
    ecs = value.get("ecs", "")
    if type(ecs) is not str or (ecs and not _SUBNET.fullmatch(ecs)):
        return "'ecs' is not a subnet (10.1.2.0_24) or empty"
    return None


#: a link's traffic lives a few of its polling intervals (`health.linktraffic`), which the
#: config caps at an hour
MAX_TRAFFIC_TTL = DAY
#: a link's traffic figures: a few numbers and a member's name
TRAFFIC_SIZE = 1024


#: a path's numbers: rtt and last_rtt in microseconds, completion in 1/10000
_PATH_NUMBERS = (
    ("rtt", 0, 2**53),
    ("last_rtt", 0, 2**53),
    ("hops", 0, 255),
    ("completion", 0, 10_000),
    ("failures", 0, 2**31),
)
#: the window of the last attempts, "1" replied and "0" did not, at most this long
MAX_WINDOW = 64
MAX_PROTOCOL = 32


def _path(value: Mapping[str, Any]) -> str | None:
    # (written out: a full table is millions of paths, each checked when it arrives)
    try:
        rtt, last_rtt, hops, completion = value["rtt"], value["last_rtt"], value["hops"], value["completion"]
        protocol, failures, window, by = value["protocol"], value["failures"], value["window"], value["by"]
    except KeyError as e:
        return f"has no {e.args[0]!r}"
    if (
        type(rtt) is int
        and type(last_rtt) is int
        and type(hops) is int
        and type(completion) is int
        and type(failures) is int
        and 0 <= rtt <= 2**53
        and 0 <= last_rtt <= 2**53
        and 0 <= hops <= 255
        and 0 <= completion <= 10_000
        and 0 <= failures <= 2**31
        and type(protocol) is str
        and type(window) is str
        and type(by) is str
        and len(protocol) <= MAX_PROTOCOL
        and len(window) <= MAX_WINDOW
        and len(by) <= MAX_NAME
        and not window.strip("01")
    ):
        return None
    for field, low, high in _PATH_NUMBERS:
        wrong = _integer(value, field, low, high)
        if wrong:
            return wrong
    wrong = _text(value, "protocol", MAX_PROTOCOL) or _text(value, "window", MAX_WINDOW) or _text(value, "by", MAX_NAME)
    return wrong or "'window' holds more than 0s and 1s"


def _probe(value: Mapping[str, Any]) -> str | None:
    return _text(value, "by", MAX_NAME, True)


PERSIST_SIZE = 4096
#: the largest value of a verdict, an admin or held state, load figures (bytes)
STATE_SIZE = 8192
#: members of a persistence record at most (a pool answers up to 16: `max_answers`)
MAX_PERSIST_MEMBERS = 64


def _persist(value: Mapping[str, Any]) -> str | None:
    wrong = _text(value, "pool", MAX_NAME, True)
    if wrong:
        return wrong
    members = value.get("members")
    if not isinstance(members, (list, tuple)):
        return "'members' is not a list" if "members" in value else "has no 'members'"
    if len(members) > MAX_PERSIST_MEMBERS:
        return f"'members' has more than {MAX_PERSIST_MEMBERS} entries"
    if not all(type(m) is str and len(m) <= MAX_NAME for m in members):
        return f"'members' are not names of at most {MAX_NAME} characters"
    return None


def _persist_bound(value: Mapping[str, Any]) -> int:
    """A checked persistence value's size at most, without encoding it (a character takes
    at most 6 bytes in JSON: \\u00XX)."""
    return 6 * (len(value["pool"]) + sum(len(m) + 1 for m in value["members"])) + 32


#: the kinds, with their caps: value size (bytes), TTL (seconds), records per origin
KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        # (the few kinds whose every value is measured: text of any length within the size,
        # which leaves room for what an older version wrote before writers shortened it)
        Kind("obs", _observation_key, _observation, STATE_SIZE, MAX_OBSERVATION_TTL, True, 200_000),
        Kind("admin", _admin_key, _admin, STATE_SIZE, MAX_STATE_TTL, False, 200_000),
        Kind("held", _vs_key, _held, STATE_SIZE, MAX_STATE_TTL, False, 200_000),
        Kind("metrics", _vs_key, _metrics, STATE_SIZE, MAX_OBSERVATION_TTL, True, 200_000),
        # one per link the origin's data center measures (links are a config's few)
        Kind("traffic", _traffic_key, _traffic, TRAFFIC_SIZE, MAX_TRAFFIC_TTL, True, 10_000),
        # One data center's paths to 1,000,000 LDNSes are one origin's (bench/scale.py): twice
        # that. The config's prober.max_ldns is at most the writer limit, and a node keeps
        # at most that many paths of its own (proximity.scheduler).
        Kind("path", _path_key, _path, 2048, MAX_PATH_TTL, True, 2_000_000, bounded=8),
        # A node holds at most 120 x prober.max_per_second live requests (proximity.budget),
        # which the config caps at 750 a second.
        Kind("probe", _probe_key, _probe, 2048, MAX_PROBE_TTL, True, 100_000, bounded=1),
        # The group keeps persistence.max_records (at most the writer limit), all of which
        # one member may have written.
        Kind(
            "persist",
            _persist_key,
            _persist,
            PERSIST_SIZE,
            MAX_PERSIST_TTL,
            True,
            2_000_000,
            bounded=2,
            bound=_persist_bound,
        ),
        # rum.max_subnets x the data centers measured (the config caps the product at the
        # writer limit): one node may have taken every beacon
        Kind("client", _client_key, _client, 1024, MAX_CLIENT_TTL, True, 2_000_000),
        # rum.max_populations at most (the config caps it at the writer limit)
        Kind("pop", _pop_key, _pop, 4096, MAX_CLIENT_TTL, True, 200_000),
        # rum.max_pending_ids per node, each of which may answer one-use names
        Kind("rumid", _rumid_key, _rumid, 512, MAX_RUMID_TTL, True, 1_000_000),
        # client probe requests (proximity.client_probe's share of each interval) and the
        # marks of silent subnets (a store bound of rum.max_subnets at most)
        Kind("cprobe", _cprobe_key, _cprobe, 512, MAX_CPROBE_TTL, True, 200_000),
    )
}


def size_of(value: Any) -> int:
    """*value*'s size as it travels and is saved: compact JSON, UTF-8."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=plain).encode())


def problem(key: str, value: Any, origin: str, ttl: float | None, version: int = NEWEST_VERSION) -> Problem | None:
    """What is wrong with the record (*key*, *value*, *origin*, *ttl*), or None when it is
    one this version takes. (Checks of the wire itself, versions and ages, are the codec's.)
    *version*: the protocol version of the member checking; a lower one than this schema's
    newest refuses the key shapes newer versions brought (`version_needed`), as the
    members of that version do."""
    name, slash, rest = key.partition("/")
    kind = KINDS.get(name)
    if kind is None or not slash:
        return Problem("unknown", "kind", f"record {key[:60]!r} is of no known kind")
    parts = rest.split("/")
    wrong = kind.key(parts, origin)
    if wrong:
        return Problem(name, "key", f"record {key[:60]!r}: the key {wrong}")
    if version < NEWEST_VERSION and version_needed(key) > version:
        return Problem(name, "key", f"record {key[:60]!r}: the key is of protocol version {version_needed(key)}")
    if name == "obs" and parts[2] != origin:
        return Problem(name, "origin", f"record {key[:60]!r} is a verdict of {parts[2]!r} written by {origin!r}")
    if value is None:
        if ttl is None or ttl > MAX_TOMBSTONE_TTL:
            return Problem(name, "ttl", f"deletion {key[:60]!r} needs a TTL of at most {MAX_TOMBSTONE_TTL:g} s")
        return None
    if ttl is None:
        if kind.ttl_required:
            return Problem(name, "ttl", f"record {key[:60]!r} has no TTL ({name} records need one)")
    elif ttl > kind.max_ttl:
        return Problem(name, "ttl", f"record {key[:60]!r} has a TTL over {kind.max_ttl:g} s")
    if type(value) is not dict and not isinstance(value, Compact):
        return Problem(name, "value", f"record {key[:60]!r}: the value is not a mapping")
    wrong = kind.value(value)
    if wrong:
        return Problem(name, "value", f"record {key[:60]!r}: the value {wrong}")
    if (len(value) > kind.bounded or (kind.bound is not None and kind.bound(value) > kind.max_size)) and size_of(
        value
    ) > kind.max_size:
        return Problem(name, "size", f"record {key[:60]!r} has a value over {kind.max_size} bytes")
    return None


def kind_label(key: str) -> str:
    """The kind of *key* as metrics name it: a known kind, or "unknown" (a peer must not be
    able to make up label values)."""
    name = key.partition("/")[0]
    return name if name in KINDS else "unknown"


def shorten(text: str, limit: int = MAX_TEXT) -> str:
    """*text* cut to *limit* characters (ending in "…" when cut), for a writer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = [
    "ADMIN_LEVELS",
    "ADMIN_LEVEL_VERSIONS",
    "ADMIN_STATES",
    "KINDS",
    "KIND_VERSIONS",
    "MAX_NAME",
    "MAX_TEXT",
    "MAX_TOMBSTONE_TTL",
    "NEWEST_VERSION",
    "VERSIONED_KINDS",
    "Kind",
    "Problem",
    "kind_label",
    "problem",
    "shorten",
    "size_of",
    "version_needed",
]
