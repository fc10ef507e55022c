"""tmsh one-line listings (``tmsh list gtm ... one-line``) split into the statements tmsh
prints on separate lines.

The parser ends a statement at a newline, ``;``, ``{`` or ``}``, so ``gtm pool a /Common/p {
load-balancing-mode ratio ttl 60 members { ... } }`` gives one statement ``load-balancing-mode
ratio ttl 60 members { ... }``. `split` cuts such runs by the shapes of tmsh's settings
(`TABLE`, written from F5's tmsh reference for ``gtm datacenter``, ``server`` and its
``virtual-servers``, ``pool`` and its ``members``, ``wideip``, ``region``, ``topology``,
``monitor``, ``prober-pool``, ``global-settings``): a flag (``disabled``), a key and its
values (``ttl 60``, ``user-defined NAME VALUE``), a key and a block (``members { ... }``, or
``none``), and the forms of ``monitor`` (``a``, ``a and b``, ``min 1 of { a b }``) and
``last-resort-pool`` (``a /Common/p``). Quoted strings are one word already.

Only a statement that starts on the line of the statement that holds it is cut: the
multi-line form, one setting a line, is never touched. A word that no shape places (a setting
this table does not know) is read with the words up to the next known setting, and is a
CHANGED finding naming file and line: its extent was a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

from gtmcluster.importers.f5parse import Node
from gtmcluster.importers.model import Imported

POOL_TYPES = ("a", "aaaa", "cname", "mx", "srv", "naptr")


@dataclass(frozen=True)
class Shape:
    """How one tmsh setting is written: *kind* ``flag``, ``value`` (*values* words after
    the key), ``block`` (a ``{ }`` whose statements are settings of *inner*, or ``none``),
    ``items`` (a ``{ }`` of named items, each with an optional ``{ }`` of settings of
    *inner*), ``names`` (a ``{ }`` of names), ``monitor`` or ``last-resort-pool``."""

    kind: str
    values: int = 0
    inner: str | None = None


FLAG = Shape("flag")
VALUE = Shape("value", 1)
NAMES = Shape("names")
MONITOR = Shape("monitor")


def items(inner: str | None) -> Shape:
    return Shape("items", inner=inner)


def _limits(*keys: str) -> dict[str, Shape]:
    return {f"limit-{k}{s}": VALUE for k in keys for s in ("", "-status")}


COMMON = {"app-service": VALUE, "description": VALUE, "partition": VALUE, "metadata": items("metadata")}
STATE = {"enabled": FLAG, "disabled": FLAG}
PROBERS = {"prober-fallback": VALUE, "prober-pool": VALUE, "prober-preference": VALUE}

#: the settings of each tmsh context (an object kind, or a block inside one)
TABLE: dict[str, dict[str, Shape]] = {
    "metadata": {"value": VALUE, "persist": VALUE},
    "datacenter": {**COMMON, **STATE, **PROBERS, "contact": VALUE, "location": VALUE},
    "server": {
        **COMMON, **STATE, **PROBERS, **_limits("cpu-usage", "max-bps", "max-connections", "max-pps", "mem-avail"),
        "addresses": items("server-address"), "datacenter": VALUE, "devices": items("device"),
        "expose-route-domains": VALUE, "iq-allow-path": VALUE, "iq-allow-service-check": VALUE,
        "iq-allow-snmp": VALUE, "link-discovery": VALUE, "monitor": MONITOR, "product": VALUE,
        "virtual-server-discovery": VALUE, "virtual-servers": items("virtual-server"),
    },
    "server-address": {"device-name": VALUE, "translation": VALUE},
    "device": {"description": VALUE, "addresses": items("device-address")},
    "device-address": {"translation": VALUE},
    "virtual-server": {
        **COMMON, **STATE, **_limits("max-bps", "max-connections", "max-pps"),
        "depends-on": items(None), "destination": VALUE, "explicit-link-name": VALUE, "link": VALUE,
        "ltm-name": VALUE, "monitor": MONITOR, "translation-address": VALUE, "translation-port": VALUE,
    },
    "pool": {
        **COMMON, **STATE, **_limits("max-bps", "max-connections", "max-pps"),
        "alternate-mode": VALUE, "dynamic-ratio": VALUE, "fallback-ip": VALUE, "fallback-mode": VALUE,
        "load-balancing-mode": VALUE, "manual-resume": VALUE, "max-answers-returned": VALUE,
        "members": items("pool-member"), "min-members-up-mode": VALUE, "min-members-up-value": VALUE,
        "monitor": MONITOR, "ttl": VALUE, "verify-member-availability": VALUE,
        **{f"qos-{q}": VALUE for q in ("hit-ratio", "hops", "kilobytes-second", "lcs", "packet-rate", "rtt",
                                       "topology", "vs-capacity", "vs-score")},
    },
    "pool-member": {
        **COMMON, **STATE, **_limits("max-bps", "max-connections", "max-pps"),
        "depends-on": items(None), "member-order": VALUE, "monitor": MONITOR, "ratio": VALUE,
        "static-target": VALUE, "order": VALUE, "priority": VALUE, "weight": VALUE, "port": VALUE,
        "flags": VALUE, "preference": VALUE, "service": VALUE,
    },
    "wideip": {
        **COMMON, **STATE,
        "aliases": NAMES, "failure-rcode": VALUE, "failure-rcode-response": VALUE, "failure-rcode-ttl": VALUE,
        "last-resort-pool": Shape("last-resort-pool"), "load-balancing-decision-log-verbosity": NAMES,
        "minimal-response": VALUE, "persist-cidr-ipv4": VALUE, "persist-cidr-ipv6": VALUE,
        "persistence": VALUE, "pool-lb-mode": VALUE, "pools": items("wideip-pool"),
        "pools-cname": items("wideip-pool"), "rules": NAMES, "topology-prefer-edns0-client-subnet": VALUE,
        "ttl-persistence": VALUE,
    },
    "wideip-pool": {"order": VALUE, "ratio": VALUE},
    "region": {**COMMON, "region-members": items(None)},
    "topology": {"description": VALUE, "order": VALUE, "score": VALUE},
    "prober-pool": {**COMMON, **STATE, "load-balancing-mode": VALUE, "members": items("prober-member")},
    "prober-member": {"order": VALUE},
    # every monitor setting and global setting is ``key value`` (an external monitor's
    # ``user-defined NAME VALUE`` two): the context's default, `DEFAULT`
    "monitor": {"user-defined": Shape("value", 2)},
    "global-settings": {"metrics-collection-protocols": NAMES},
}  # fmt: skip
#: contexts where a key the table does not name takes one value
DEFAULT = {"monitor": VALUE, "global-settings": VALUE}
#: the context of each ``gtm`` object kind (others are not cut)
KINDS = {k: k for k in ("datacenter", "server", "pool", "wideip", "region", "topology", "monitor", "prober-pool",
                        "global-settings")}  # fmt: skip


def split(node: Node, imp: Imported) -> None:
    """Cut the one-line runs in *node* (a ``gtm`` object) into statements, in place."""
    context = KINDS.get(node.words[1]) if len(node.words) > 1 else None
    if context == "topology" and "ldns:" not in node.words:
        return  # (a block of records, as some old listings have)
    if context is not None:
        _walk(node, context, " ".join(node.words[:4]), imp)


def _walk(node: Node, context: str, what: str, imp: Imported) -> None:
    if node.block is None:
        return
    table = TABLE[context]
    cut: list[Node] = []
    for child in node.block:
        pieces = _cut(child, context, what, imp) if child.line == node.line and child.words else [child]
        for piece in pieces:
            shape = table.get(piece.key)
            if shape is None or shape.inner is None or piece.block is None:
                continue
            if shape.kind == "block":
                _walk(piece, shape.inner, what, imp)
            elif shape.kind == "items":
                for item in piece.block:
                    _walk(item, shape.inner, what, imp)
        cut.extend(pieces)
    node.block = cut


def _cut(stmt: Node, context: str, what: str, imp: Imported) -> list[Node]:
    """*stmt* as the statements its words make in *context* (itself when it is one)."""
    words, n, has_block = stmt.words, len(stmt.words), stmt.block is not None
    spans: list[tuple[int, int]] = []
    i = 0
    while i < n:
        end = _end(words, i, context, has_block)
        if end is None:  # not placed: up to the next setting that is
            end = next((j for j in range(i + 1, n) if _end(words, j, context, has_block) is not None), n)
            if i or end < n:
                read = " ".join(stmt.raw[i:end] if len(stmt.raw) == n else words[i:end])
                why = (
                    f"one-line listing: '{words[i]}' is no tmsh setting this import knows here; "
                    f"read as '{read}', up to the next known setting (check that line)"
                )
                imp.changed(stmt.where, f"{what}: {words[i]}", why)
        spans.append((i, end))
        i = end
    if len(spans) == 1:
        return [stmt]
    raw = stmt.raw if len(stmt.raw) == n else list(words)
    last = len(spans) - 1
    return [
        Node(words[a:b], stmt.line, stmt.file, stmt.block if k == last else None, raw[a:b])
        for k, (a, b) in enumerate(spans)
    ]


def _end(words: list[str], i: int, context: str, has_block: bool) -> int | None:
    """Where the setting that starts at *words[i]* ends (None: no setting of *context*
    starts there, or it does not fit)."""
    n = len(words)
    shape = TABLE[context].get(words[i]) or DEFAULT.get(context)
    if shape is None:
        return None
    if shape.kind == "flag":
        return i + 1
    if shape.kind == "value":
        return i + 1 + shape.values if i + 1 + shape.values <= n else None
    if shape.kind == "monitor":
        if words[i + 1 : i + 2] == ["min"]:  # min N of { a b }: the block ends the statement
            return n if n == i + 4 and words[i + 3] == "of" and has_block else None
        j = i + 2
        while j + 1 < n and words[j] == "and":
            j += 2
        return j if j <= n else None
    if shape.kind == "last-resort-pool":  # a /Common/p (the type is left out before v12)
        return i + 3 if i + 2 < n and words[i + 1] in POOL_TYPES else i + 2 if i + 1 < n else None
    # a block: the statement's own, so the key is its last word; or 'none'
    if i + 1 == n and has_block:
        return n
    return i + 2 if words[i + 1 : i + 2] == ["none"] else None
