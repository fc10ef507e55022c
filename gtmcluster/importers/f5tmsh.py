"""BIG-IP DNS (GTM) tmsh configuration (``bigip_gtm.conf``) mapped onto an `Imported`.

Objects are read from all files first (one may refer to another's), then mapped in the order
references need: data centers, monitors, servers and their virtual servers, pools, regions,
topology records, wide IPs. A tmsh listing leaves out settings at their defaults, so absent
ones take BIG-IP DNS's defaults (pool modes round-robin, round-robin, return-to-dns; TTL 30;
wide IP pool-lb-mode round-robin). Every setting not read is a finding.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from gtmcluster.importers import f5methods, f5monitors, f5names
from gtmcluster.importers.f5parse import Node
from gtmcluster.importers.f5topology import Selector, TopologyMapper, selector
from gtmcluster.importers.model import MAX_PERSIST_TTL, MAX_RATIO, MAX_TTL, Entry, Imported, digits

POOL_TYPES = ("a", "aaaa", "cname", "mx", "srv", "naptr")
#: settings kept only in the comment above the object
DESCRIPTIVE = {"description", "location", "contact"}
QOS = {
    "qos-rtt": "rtt",
    "qos-hops": "hops",
    "qos-hit-ratio": "completion_rate",
    "qos-topology": "topology",
    "qos-vs-capacity": "vs_capacity",
    "qos-packet-rate": "packet_rate",
    "qos-kilobytes-second": "kbps",
}


def is_tmsh(nodes: list[Node]) -> bool:
    """Whether *nodes* look like tmsh (statements starting ``gtm``, ``ltm``, ``sys`` ...)."""
    return any(n.key in ("gtm", "ltm", "sys", "net", "auth", "cm", "apm", "security") for n in nodes)


def value(node: Node) -> str:
    return " ".join(node.words[1:])


class TmshImport:
    """One import of tmsh files into *imp*."""

    def __init__(self, imp: Imported) -> None:
        self.imp = imp
        self.objects: dict[str, list[Node]] = defaultdict(list)
        self.dc_disabled: set[str] = set()
        #: our virtual server name -> monitors given by pools (applied when it has none)
        self.pool_monitors: dict[str, list[str]] = defaultdict(list)
        self.vs_has_monitor: set[str] = set()
        self.topology = TopologyMapper(imp, self.datacenter_name, self.pool_ref)
        self.first_dc: str | None = None
        #: F5 monitors by name (for defaults-from), and unknown monitors reported already
        self.monitor_defs: dict[str, Node] = {}
        self.warned_monitors: set[str] = set()
        #: (address, port) -> our virtual server (older listings name pool members so)
        self.by_address: dict[tuple[str, int], str] = {}

    def add(self, nodes: list[Node]) -> None:
        skipped: dict[str, Node] = {}
        for node in nodes:
            if node.key == "gtm" and len(node.words) >= 2:
                self.objects[node.words[1]].append(node)
            else:
                skipped.setdefault(node.key or "?", node)
        for key, node in skipped.items():
            self.imp.unmapped(node.where, f"'{key}' statements", "not GTM configuration (skipped)")

    def run(self) -> None:
        for node in self.objects.pop("datacenter", []):
            self.datacenter(node)
        monitors = self.objects.pop("monitor", [])
        self.monitor_defs = {f5names.strip_partition(n.words[3]): n for n in monitors if len(n.words) >= 4}
        for node in monitors:
            self.monitor(node)
        for node in self.objects.pop("server", []):
            self.server(node)
        for node in self.objects.pop("pool", []):
            self.pool(node)
        for node in self.objects.pop("region", []):
            self.region(node)
        records = []
        for node in self.objects.pop("topology", []):
            records.extend([node] if len(node.words) > 2 else node.children())
        self.topology_records(records)
        for node in self.objects.pop("wideip", []):
            self.wideip(node)
        for node in self.objects.pop("global-settings", []):
            self.global_settings(node)
        for kind, nodes in self.objects.items():
            why = {
                "prober-pool": "every member of the sync group probes; prober pools have no equivalent",
                "rule": "iRules have no equivalent",
                "link": "F5 links are not imported: define links by hand (docs/links.md)",
                "listener": "listeners are the members' dns addresses (sync_group.members)",
            }.get(kind, "no equivalent")
            for node in nodes:
                self.imp.unmapped(node.where, " ".join(node.words), why)
        self.apply_pool_monitors()
        self.check_dependencies()

    # -- helpers ------------------------------------------------------------------------

    def leftovers(self, node: Node, handled: set[str], what: str) -> None:
        for child in node.children():
            if child.words and child.key not in handled and child.key not in DESCRIPTIVE:
                self.imp.unmapped(child.where, f"{what}: {child.text()}", "no equivalent (not imported)")

    def comment(self, node: Node) -> str:
        extra = [" ".join(c.words[1:]) for c in node.children() if c.key in DESCRIPTIVE and len(c.words) > 1]
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

    # -- objects --------------------------------------------------------------------------

    def datacenter(self, node: Node) -> None:
        if len(node.words) < 3:
            self.imp.unmapped(node.where, node.text(), "a data center without a name")
            return
        f5 = node.words[2]
        ours = self.imp.namespace("datacenter").name(f5)
        self.renamed("datacenter", f5, ours, node.where)
        self.first_dc = self.first_dc or ours
        if any(c.key == "disabled" for c in node.children()):
            self.dc_disabled.add(ours)
        self.imp.datacenters[ours] = Entry(ours, node.where, self.comment(node))
        self.leftovers(node, {"enabled", "disabled"}, f"datacenter {f5}")

    def monitor(self, node: Node) -> None:
        if len(node.words) < 4:
            self.imp.unmapped(node.where, node.text(), "a monitor needs a type and a name")
            return
        f5_type, f5 = node.words[2], node.words[3]
        if f5_type not in f5monitors.TYPES:
            self.imp.unmapped(node.where, f"monitor {f5}", f"monitor type {f5_type} has no equivalent")
            return
        values = f5monitors.settings(node)
        parent = f5names.strip_partition(values.get("defaults-from", f5_type))
        seen = {f5names.strip_partition(f5)}
        while parent not in f5monitors.BUILTIN and parent in self.monitor_defs and parent not in seen:
            seen.add(parent)
            inherited = f5monitors.settings(self.monitor_defs[parent])
            values = {**inherited, **values}
            parent = f5names.strip_partition(inherited.get("defaults-from", f5_type))
        ours = self.imp.namespace("monitor").name(f5)
        mapped, problems = f5monitors.to_ours(f5_type, values)
        for problem in problems:
            self.imp.unmapped(node.where, f"monitor {f5}", problem)
        self.leftovers(node, f5monitors.HANDLED, f"monitor {f5}")
        self.imp.monitors[ours] = Entry(mapped, node.where, self.comment(node))

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
            self.imp.unmapped(node.where, f"{what}: {node.text()}", why)
            extra = {}
        elif "monitor_rule" in extra and len(out) < 2:
            extra = {}
        return out, extra

    def monitor_for(self, f5: str, where: str, what: str) -> str | None:
        ns = self.imp.namespace("monitor")
        ours = ns.get(f5)
        if ours is not None and ours in self.imp.monitors:
            return ours
        name = f5names.strip_partition(f5)
        if name in f5monitors.BUILTIN:
            ours = ns.name(f5)
            mapped, problems = f5monitors.to_ours(f5monitors.BUILTIN[name], {})
            for problem in problems:
                self.imp.unmapped(where, f"built-in monitor {name}", problem)
            self.imp.monitors[ours] = Entry(mapped, where, f"F5 built-in monitor {name}")
            return ours
        if name not in self.warned_monitors:
            self.warned_monitors.add(name)
            why = (
                "the bigip monitor reads the LTM's own status over iQuery; no equivalent"
                if name == "bigip"
                else "not an imported monitor"
            )
            self.imp.unmapped(where, f"{what}: monitor {f5}", why + " (the virtual servers count as up)")
        return None

    def server(self, node: Node) -> None:
        if len(node.words) < 3:
            self.imp.unmapped(node.where, node.text(), "a server without a name")
            return
        f5 = node.words[2]
        settings = {c.key: c for c in node.children() if c.words}
        dc_node = settings.get("datacenter")
        dc = self.datacenter_name(value(dc_node)) if dc_node else None
        if dc is None:
            self.imp.lost(node.where, f"server {f5}", "no data center that was imported; its virtual servers are lost")
            return
        disabled = "disabled" in settings or dc in self.dc_disabled
        monitors: list[str] = []
        extra: dict[str, Any] = {}
        if "monitor" in settings:
            monitors, extra = self.monitor_names(settings["monitor"], f"server {f5}")
        for vs_node in settings["virtual-servers"].children() if "virtual-servers" in settings else []:
            self.virtual_server(f5, vs_node, dc, disabled, monitors, extra)
        for key in ("addresses", "product"):
            if key in settings:  # (one finding for all servers: the renderer groups them)
                why = "the server's own addresses and product are not needed (virtual servers carry theirs)"
                self.imp.unmapped(settings[key].where, f"gtm server {key}", why)
        handled = {"datacenter", "monitor", "virtual-servers", "enabled", "disabled", "addresses", "product"}
        self.leftovers(node, handled, f"server {f5}")

    def virtual_server(
        self, server: str, node: Node, dc: str, disabled: bool, monitors: list[str], extra: dict[str, Any]
    ) -> None:
        f5 = f"{f5names.strip_partition(server)}:{f5names.strip_partition(node.key)}"
        what = f"virtual server {f5}"
        settings = {c.key: c for c in node.children() if c.words}
        if "destination" not in settings:
            self.imp.lost(node.where, what, "no destination address")
            return
        dest = f5names.address_port(value(settings["destination"]))
        if dest is None:
            self.imp.lost(node.where, what, f"destination {value(settings['destination'])!r} is not an address")
            return
        same = self.by_address.get((str(dest[0]), dest[1] or 80))
        if same is not None:  # ours are told apart by address and port
            self.imp.namespace("virtual_server").alias(f5, same)
            why = f"same address and port as {same} ({self.imp.virtual_servers[same].where}): imported as that one"
            self.imp.unmapped(node.where, what, why)
            return
        ours = self.imp.namespace("virtual_server").name(f5)
        self.renamed("virtual server", f5, ours, node.where)
        vs: dict[str, Any] = {"address": str(dest[0]), "port": dest[1] or 80, "datacenter": dc}
        if dest[1] is None:
            self.imp.unmapped(node.where, what, "any port: port 80 is used for its checks")
        if "monitor" in settings:
            monitors, extra = self.monitor_names(settings["monitor"], what)
        if monitors:
            vs["monitor"] = monitors[0] if len(monitors) == 1 else monitors
            vs.update(extra)
            self.vs_has_monitor.add(ours)
        if disabled or "disabled" in settings:
            vs["admin_state"] = "disabled"
        if "depends-on" in settings:
            deps = [c.key for c in settings["depends-on"].children()] or settings["depends-on"].words[1:]
            vs["depends_on"] = [self.imp.namespace("virtual_server").name(d) for d in deps]
        self.leftovers(node, {"destination", "monitor", "enabled", "disabled", "depends-on"}, what)
        self.imp.virtual_servers[ours] = Entry(vs, node.where, f"gtm server {server} virtual-servers {node.key}")
        self.by_address.setdefault((vs["address"], vs["port"]), ours)

    def pool(self, node: Node) -> None:
        words = node.words
        kind, f5 = (words[2], words[3]) if len(words) >= 4 and words[2] in POOL_TYPES else ("a", words[-1])
        what = f"pool {kind} {f5}"
        if len(words) < 3:
            self.imp.lost(node.where, node.text(), "a pool without a name")
            return
        if kind not in ("a", "aaaa", "cname"):
            self.imp.lost(node.where, what, f"{kind} pools are not imported (only a, aaaa, cname)")
            return
        ours = self.imp.namespace("pool").name(f5, kind)
        self.renamed("pool", f5, ours, node.where)
        settings = {c.key: c for c in node.children() if c.words}
        members = self.members(settings.get("members"), kind, what)
        if not members:
            self.imp.lost(node.where, what, "no member could be imported")
            return
        pool: dict[str, Any] = {"members": [m if r == 1 else {"virtual_server": m, "ratio": r} for m, r in members]}
        fallback_ip = value(settings["fallback-ip"]) if "fallback-ip" in settings else ""
        has_fallback = fallback_ip not in ("", "0.0.0.0", "any", "::", "any6")
        if has_fallback:
            pool["fallback_ip"] = f5names.strip_route_domain(fallback_ip)
        pool["load_balancing"] = self.methods(settings, what, has_fallback, node.where)
        for key, ours_key, default, hi in (("ttl", "ttl", 30, MAX_TTL), ("max-answers-returned", "max_answers", 1, 16)):
            if key in settings:
                at = settings[key]
                pool[ours_key] = self.imp.number(
                    value(at), default, 0 if key == "ttl" else 1, hi, at.where, f"{what}: {key}"
                )
        qos = {
            QOS[k]: self.imp.number(value(c), 0, 0, 1_000_000, c.where, f"{what}: {k}")
            for k, c in settings.items()
            if k in QOS
        }
        if qos:
            pool["qos"] = qos
        if "monitor" in settings:
            monitors, _ = self.monitor_names(settings["monitor"], what)
            for vs, _ratio in members:
                self.pool_monitors[vs].extend(m for m in monitors if m not in self.pool_monitors[vs])
        handled = {
            "members", "fallback-ip", "load-balancing-mode", "alternate-mode", "fallback-mode", "ttl",
            "max-answers-returned", "monitor", "enabled", *QOS,
        }  # fmt: skip
        self.leftovers(node, handled, what)
        self.imp.pools[ours] = Entry(pool, node.where, self.comment(node))

    def methods(self, settings: dict[str, Node], what: str, has_fallback: bool, pool_where: str) -> dict[str, str]:
        out = {}
        for slot, key in (
            ("preferred", "load-balancing-mode"),
            ("alternate", "alternate-mode"),
            ("fallback", "fallback-mode"),
        ):
            node = settings.get(key)
            f5 = value(node) if node else f5methods.DEFAULTS[slot]
            where = node.where if node else pool_where
            ours, why = f5methods.member_method(f5)
            if ours == "fallback_ip" and not has_fallback:
                ours, why = None, "the pool has no fallback-ip address"
            if ours is None:
                report = self.imp.lost if slot == "preferred" else self.imp.unmapped
                report(where, f"{what}: {key} {f5}", f"{why}; 'none' is used (the next method runs)")
                ours = "none"
            out[slot] = ours
        return out

    def members(self, node: Node | None, kind: str, what: str) -> list[tuple[str, int]]:
        if node is None:
            return []
        found: list[tuple[int, int, str, int]] = []
        for position, child in enumerate(node.children()):
            settings = {c.key: c for c in child.children() if c.words}
            key = "member-order" if "member-order" in settings else "order"  # (older listings: order)
            order_text = value(settings[key]) if key in settings else ""
            order = int(order_text) if digits(order_text) else position
            ratio_text = value(settings["ratio"]) if "ratio" in settings else None
            ratio = self.imp.number(ratio_text, 1, 0, MAX_RATIO, child.where, f"{what} member {child.key} ratio")
            ours: str | None
            if kind == "cname":
                ours = self.cname_member(child)
            else:
                ours = self.imp.namespace("virtual_server").get(child.key)
                by_address = f5names.address_port(child.key)
                if ours is None and by_address is not None:
                    ours = self.by_address.get((str(by_address[0]), by_address[1] or 80))
                if ours is None or ours not in self.imp.virtual_servers:
                    self.imp.lost(child.where, f"{what} member {child.key}", "no such virtual server was imported")
                    continue
            if kind != "cname" and (":" in self.imp.virtual_servers[ours].value["address"]) != (kind == "aaaa"):
                family = "IPv6" if kind == "a" else "IPv4"
                self.imp.lost(
                    child.where, f"{what} member {child.key}", f"an {family} server cannot answer {kind} queries"
                )
                continue
            if "disabled" in settings:
                self.imp.unmapped(child.where, f"{what} member {child.key}", "disabled in the pool: left out")
                continue
            if any(name == ours for _, _, name, _ in found):
                self.imp.unmapped(child.where, f"{what} member {child.key}", f"{ours} is in the pool already")
                continue
            handled = {"member-order", "order", "ratio", "enabled", "static-target"}
            self.leftovers(child, handled, f"{what} member {child.key}")
            found.append((order, position, ours, ratio))
        return [(name, ratio) for _, _, name, ratio in sorted(found)]

    def cname_member(self, node: Node) -> str:
        target = node.key
        ours = self.imp.namespace("virtual_server").name(f"cname-{target}")
        if ours not in self.imp.virtual_servers:
            dc = self.first_dc or "DC1"
            if self.first_dc is None:
                self.first_dc = dc
                self.imp.datacenters[dc] = Entry(dc, node.where, "placeholder: the config has no data center")
            self.imp.virtual_servers[ours] = Entry(
                {"cname": target, "datacenter": dc}, node.where, f"CNAME pool member {target}",
                note=f"F5 CNAME members have no data center: {dc} is a placeholder",
            )  # fmt: skip
        return ours

    def region(self, node: Node) -> None:
        f5 = node.words[2] if len(node.words) > 2 else "?"
        members: list[tuple[Selector, str]] = []
        for child in node.children():
            if child.key != "region-members":
                if child.words and child.key not in DESCRIPTIVE:
                    self.imp.unmapped(child.where, f"region {f5}: {child.text()}", "no equivalent")
                continue
            for member in child.children():
                sel = selector(member.words)
                if sel is None:
                    self.imp.lost(member.where, f"region {f5} member {member.text()}", "not a region member")
                else:
                    members.append((sel, member.where))
        self.topology.region(f5, members, node.where, self.comment(node))

    def topology_records(self, nodes: list[Node]) -> None:
        parsed = []
        for position, node in enumerate(nodes):
            words = [w for w in node.words if w not in ("gtm", "topology")]
            if "ldns:" not in words or "server:" not in words:
                self.imp.lost(node.where, node.text(), "a topology record needs 'ldns:' and 'server:'")
                continue
            i, j = words.index("ldns:"), words.index("server:")
            ldns, server = selector(words[i + 1 : j]), selector(words[j + 1 :])
            found = {c.key: value(c) for c in node.children() if c.words}
            score, order = found.get("score", "1"), found.get("order", "")
            if ldns is None or server is None or not digits(score):
                self.imp.lost(node.where, node.text(), "not a topology record we can read")
                continue
            parsed.append((int(order) if digits(order) else 1 << 62, position, ldns, server, int(score), node))
        for _, _, ldns_sel, server_sel, points, node in sorted(parsed, key=lambda t: (t[0], t[1])):
            self.topology.record(ldns_sel, server_sel, points, node.where, " ".join(node.words))

    def wideip(self, node: Node) -> None:
        words = node.words
        kind, f5 = (words[2], words[3]) if len(words) >= 4 and words[2] in POOL_TYPES else ("a", words[-1])
        what = f"wideip {kind} {f5}"
        name = f5names.strip_partition(f5)
        if kind not in ("a", "aaaa", "cname"):
            self.imp.lost(node.where, what, f"{kind} wide IPs are not imported (only a, aaaa, cname)")
            return
        settings = {c.key: c for c in node.children() if c.words}
        refs: list[tuple[int, int, Any]] = []
        for position, child in enumerate(settings["pools"].children() if "pools" in settings else []):
            sub = {c.key: value(c) for c in child.children() if c.words}
            ours = self.pool_ref(child.key, kind)
            if ours is None or ours not in self.imp.pools:
                self.imp.lost(child.where, f"{what} pool {child.key}", "no such pool was imported")
                continue
            ratio = self.imp.number(sub.get("ratio"), 1, 0, MAX_RATIO, child.where, f"{what} pool {child.key} ratio")
            order = int(sub["order"]) if digits(sub.get("order", "")) else position
            refs.append((order, position, ours if ratio == 1 else {"pool": ours, "ratio": ratio}))
        if "pools-cname" in settings:
            self.imp.lost(
                settings["pools-cname"].where, f"{what} pools-cname", "CNAME pools in an A wide IP are not imported"
            )
        if not refs:
            self.imp.lost(node.where, what, "no pool could be imported: the wide IP is not imported")
            return
        wideip: dict[str, Any] = {"type": kind.upper(), "pools": [r for _, _, r in sorted(refs, key=lambda t: t[:2])]}
        mode = value(settings["pool-lb-mode"]) if "pool-lb-mode" in settings else "round-robin"
        pool_lb, why = f5methods.pool_method(mode)
        if pool_lb is None:
            self.imp.lost(settings["pool-lb-mode"].where, f"{what}: pool-lb-mode {mode}", f"{why}; round_robin is used")
            pool_lb = "round_robin"
        wideip["pool_lb"] = pool_lb
        if "aliases" in settings:
            aliases = [w for c in settings["aliases"].children() for w in c.words] + settings["aliases"].words[1:]
            wideip["aliases"] = [f5names.strip_partition(a) for a in aliases]
        if "persistence" in settings and value(settings["persistence"]) == "enabled":
            wideip["persistence"] = {
                "ttl": self.number(settings, "ttl-persistence", 3600, 1, MAX_PERSIST_TTL, what),
                "ipv4_prefix": self.number(settings, "persist-cidr-ipv4", 32, 0, 32, what),
                "ipv6_prefix": self.number(settings, "persist-cidr-ipv6", 128, 0, 128, what),
            }
        if "last-resort-pool" in settings:
            words = settings["last-resort-pool"].words[1:]
            ours = self.pool_ref(words[-1], words[0] if len(words) > 1 else kind) if words else None
            if ours is None or ours not in self.imp.pools:
                self.imp.lost(
                    settings["last-resort-pool"].where, f"{what} last-resort-pool", "no such pool was imported"
                )
            else:
                wideip["last_resort_pool"] = ours
        if "rules" in settings:
            self.imp.lost(settings["rules"].where, f"{what} rules", "iRules have no equivalent")
        if "disabled" in settings:
            self.imp.unmapped(
                settings["disabled"].where,
                what,
                "disabled on F5: imported enabled (disable it with gtmcluster disable)",
            )
        handled = {"pools", "pool-lb-mode", "aliases", "persistence", "ttl-persistence", "persist-cidr-ipv4",
                   "persist-cidr-ipv6", "last-resort-pool", "rules", "enabled", "disabled", "pools-cname"}  # fmt: skip
        self.leftovers(node, handled, what)
        self.add_wideip(name, wideip, node.where, self.comment(node))

    def add_wideip(self, name: str, wideip: dict[str, Any], where: str, source: str) -> None:
        """Add a wide IP; an A and an AAAA wide IP of one name become one of both types."""
        old = self.imp.wideips.get(name)
        if old is None:
            self.imp.wideips[name] = Entry(wideip, where, source)
            return
        types = old.value["type"] if isinstance(old.value["type"], list) else [old.value["type"]]
        if "CNAME" in (*types, wideip["type"]) or wideip["type"] in types:
            self.imp.lost(where, f"wideip {name}", f"a second wide IP of this name (also {old.where})")
            return
        old.value["type"] = [*types, wideip["type"]]
        old.value["pools"] = old.value["pools"] + [p for p in wideip["pools"] if p not in old.value["pools"]]
        if wideip.get("pool_lb") != old.value.get("pool_lb"):
            self.imp.unmapped(
                where, f"wideip {name}", f"pool-lb-mode differs from the other type's; {old.value['pool_lb']} is used"
            )
        old.source += f"; {source} ({where})"

    def number(self, settings: dict[str, Node], key: str, default: int, lo: int, hi: int, what: str) -> int:
        if key not in settings:
            return default
        return self.imp.number(value(settings[key]), default, lo, hi, settings[key].where, f"{what}: {key}")

    def global_settings(self, node: Node) -> None:
        for child in node.children():
            for setting in child.children() or [child]:
                if setting.words[:2] == ["topology-longest-match", "no"]:
                    self.imp.unmapped(
                        setting.where, "topology-longest-match no", "ours always consult records longest match first"
                    )
                elif setting.words:
                    self.imp.unmapped(
                        setting.where, f"gtm global-settings {child.key}: {setting.text()}", "no equivalent"
                    )

    def check_dependencies(self) -> None:
        """depends-on names only imported virtual servers (F5 may name one defined later)."""
        for name, entry in self.imp.virtual_servers.items():
            deps = entry.value.get("depends_on")
            if deps is None:
                continue
            missing = [d for d in deps if d not in self.imp.virtual_servers]
            for d in missing:
                self.imp.unmapped(
                    entry.where, f"virtual server {name} depends-on {d}", "no such virtual server was imported"
                )
            entry.value["depends_on"] = [d for d in deps if d not in missing]
            if not entry.value["depends_on"]:
                del entry.value["depends_on"]

    def apply_pool_monitors(self) -> None:
        for vs, monitors in self.pool_monitors.items():
            entry = self.imp.virtual_servers.get(vs)
            if entry is None or vs in self.vs_has_monitor or not monitors:
                continue
            entry.value["monitor"] = monitors[0] if len(monitors) == 1 else monitors
            if len(monitors) > 1:
                entry.note = "monitors of all its pools (all must pass; on F5 each pool used its own)"
