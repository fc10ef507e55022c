"""The state one tmsh import shares across its mappers, and the helpers they all use.

`TmshState` holds what an import has learnt so far (our names of F5 objects live in the
`Imported`'s namespaces): the F5 statements by kind, disabled data centers, monitors given by
pools, virtual servers by address, the topology mapper. Its helpers report leftover settings,
make an object's source comment, resolve references to data centers, pools and monitors; a
monitor that is lost or changed is reported once its users are known (`report_monitors`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from gtmcluster.importers import f5monitors, f5names
from gtmcluster.importers.f5parse import Node
from gtmcluster.importers.f5topology import TopologyMapper
from gtmcluster.importers.model import Entry, Imported, digits

POOL_TYPES = ("a", "aaaa", "cname", "mx", "srv", "naptr")
#: settings kept only in the comment above the object
DESCRIPTIVE = {"description", "location", "contact"}
#: settings that change no answer and no verdict here (how F5 finds its own devices, logs,
#: or stamps objects): a plain finding; any other setting not read is CHANGED
COSMETIC = {
    "metadata", "app-service", "partition", "load-balancing-decision-log-verbosity",
    "devices", "addresses", "product", "virtual-server-discovery", "link-discovery",
    "iq-allow-path", "iq-allow-service-check", "iq-allow-snmp", "expose-route-domains",
    "prober-preference", "prober-fallback", "prober-pool",
}  # fmt: skip


def value(node: Node) -> str:
    return " ".join(node.words[1:])


class TmshState:
    """What one import of tmsh files into *imp* has learnt so far."""

    def __init__(self, imp: Imported) -> None:
        self.imp = imp
        self.objects: dict[str, list[Node]] = defaultdict(list)
        self.dc_disabled: set[str] = set()
        #: our virtual server name -> monitors given by pools (applied when it has none)
        self.pool_monitors: dict[str, list[str]] = defaultdict(list)
        self.vs_has_monitor: set[str] = set()
        self.topology = TopologyMapper(imp, self.datacenter_name, self.pool_ref)
        self.first_dc: str | None = None
        #: F5 monitors by name without /Common/ (for defaults-from)
        self.monitor_defs: dict[str, Node] = {}
        #: by the same names: what is still to be said of a monitor (lost, or changed) once
        #: its users are known, and who uses it (`report_monitors`)
        self.monitor_pending: dict[str, PendingMonitor] = {}
        self.monitor_users: dict[str, list[str]] = defaultdict(list)
        #: (address, port) -> our virtual server (older listings name pool members so)
        self.by_address: dict[tuple[str, int], str] = {}

    def leftovers(self, node: Node, handled: set[str], what: str) -> None:
        """A finding for each setting of *node* not in *handled*: CHANGED unless it is one
        that changes no answer (`COSMETIC`)."""
        for child in node.children():
            if not child.words or child.key in handled or child.key in DESCRIPTIVE:
                continue
            if child.key in COSMETIC:
                self.imp.unmapped(child.where, f"{what}: {child.text()}", "changes no answer here (not imported)")
            else:
                why = "not read: F5 applied it, this import does not (decide whether it matters)"
                self.imp.changed(child.where, f"{what}: {child.text()}", why)

    def comment(self, node: Node) -> str:
        extra = [value(c) for c in node.children() if c.key in DESCRIPTIVE and c.words[1:] not in ([], ["none"])]
        return " ".join(node.words) + (f" ({'; '.join(extra)})" if extra else "")

    def datacenter_name(self, f5: str) -> str | None:
        return self.imp.namespace("datacenter").get(f5)

    def pool_ref(self, f5: str, kind: str = "") -> str | None:
        """Our name of an imported F5 pool (of type *kind*, or the first type that has one)."""
        ns = self.imp.namespace("pool")
        for t in [kind] if kind else POOL_TYPES:
            ours = ns.get(f5, t)
            if ours is not None and ours in self.imp.pools:
                return ours
        return None

    def renamed(self, ns: str, f5: str, ours: str, where: str) -> None:
        """A finding when our name is not F5's (beyond the documented ``/Common/`` and ``:``)."""
        expected = f5names.strip_partition(f5).replace(":", ".")
        if ours == expected:
            return
        why = "our names allow letters, digits, _ - . (at most 63)"
        if f5names.sanitise(f5) == expected:
            why = "another imported object has that name"
        self.imp.unmapped(where, f"{ns} {f5}", f"renamed {ours!r}: {why}")

    def number(self, settings: dict[str, Node], key: str, default: int, lo: int, hi: int, what: str) -> int:
        if key not in settings:
            return default
        return self.imp.number(value(settings[key]), default, lo, hi, settings[key].where, f"{what}: {key}")

    def monitor_names(self, node: Node, what: str) -> tuple[list[str], dict[str, Any]]:
        """A ``monitor`` setting (``a``, ``a and b``, ``min N of { a b }``): our monitor names
        (made from built-ins as needed) and extra virtual server keys (monitor_rule)."""
        words = node.words[1:]
        extra: dict[str, Any] = {}
        names = [w for w in words if w not in ("and", "{", "}")]
        if words[:1] == ["min"] and len(words) >= 3:
            count = int(words[1]) if digits(words[1]) else 1
            names = [w for c in node.children() for w in c.words] + [w for w in words[3:] if w != "of"]
            extra["monitor_rule"] = {"at_least": count}
        out: list[str] = []
        for name in names:
            ours = self.monitor_for(name, node.where, what)
            if ours is not None and ours not in out:
                out.append(ours)
        if "monitor_rule" in extra and len(out) < extra["monitor_rule"]["at_least"]:
            why = f"fewer monitors imported than {node.text()} asks: all of them must pass"
            self.imp.changed(node.where, f"{what}: {node.text()}", why)
            extra = {}
        elif "monitor_rule" in extra and len(out) < 2:
            extra = {}
        return out, extra

    def monitor_for(self, f5: str, where: str, what: str) -> str | None:
        """Our name of the monitor *f5* used by *what* (a built-in one made on first use),
        or None when it is not imported (`report_monitors` then says so, naming its users)."""
        name = f5names.strip_partition(f5)
        if what not in self.monitor_users[name]:
            self.monitor_users[name].append(what)
        ns = self.imp.namespace("monitor")
        ours = ns.get(f5)
        if ours is not None and ours in self.imp.monitors:
            return ours
        if name in self.monitor_pending and self.monitor_pending[name].lost:
            return None
        if name in f5monitors.BUILTIN and name not in self.monitor_defs:
            f5_type, values = f5monitors.BUILTIN[name]
            return self.add_monitor(f5, f5_type, dict(values), where, f"F5 built-in monitor {name}")
        if name not in self.monitor_pending:
            why = "not defined in the input (another file or partition?) nor a built-in monitor this import knows"
            self.monitor_pending[name] = PendingMonitor(f5, where, lost=why)
        return None

    def add_monitor(
        self, f5: str, f5_type: str, values: dict[str, str], where: str, source: str, problems: tuple[str, ...] = ()
    ) -> str | None:
        """Map F5's monitor *f5*; its notes are findings now, what else it lost or changed
        (with *problems* found on the way) waits for `report_monitors`. Our name, or None
        when it is lost."""
        mapped = f5monitors.to_ours(f5_type, values)
        name = f5names.strip_partition(f5)
        for note in mapped.notes:
            self.imp.unmapped(where, f"monitor {f5}", note)
        self.monitor_pending[name] = PendingMonitor(f5, where, [*problems, *mapped.changes], mapped.lost)
        if mapped.monitor is None:
            return None
        ours = self.imp.namespace("monitor").name(f5)
        self.imp.monitors[ours] = Entry(mapped.monitor, where, source)
        return ours

    def report_monitors(self) -> None:
        """What monitors lost or changed, now that their users are known: LOST or CHANGED
        naming them where something uses the monitor, a plain finding where nothing does."""
        for name, pending in self.monitor_pending.items():
            users = self.monitor_users.get(name, [])
            shown = ", ".join(users[:5]) + (f" and {len(users) - 5} more" if len(users) > 5 else "")
            what = f"monitor {pending.f5}"
            if pending.lost and users:
                why = f"{pending.lost}; not imported, so these are not checked by it: {shown}"
                self.imp.lost(pending.where, what, why)
            elif pending.lost:
                self.imp.unmapped(pending.where, what, f"{pending.lost}; not imported (nothing uses it)")
            for change in pending.changes:
                if users:
                    self.imp.changed(pending.where, what, f"{change} (used by {shown})")
                else:
                    self.imp.unmapped(pending.where, what, f"{change} (nothing uses it)")


@dataclass
class PendingMonitor:
    """What a monitor lost or changed, said once its users are known."""

    f5: str
    where: str
    changes: list[str] = field(default_factory=list)
    lost: str = ""
