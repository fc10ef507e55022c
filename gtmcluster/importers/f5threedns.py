"""3-DNS Controller ``wideip.conf`` mapped onto an `Imported`.

The form (3-DNS 2.x to 4.x): ``datacenter { name "CNC" server 10.1.1.1 }``; servers as
``server { type bigip address ... name "..." vs { address A:PORT name "..." } }`` (or the
older ``bigip { ... }`` / ``host { ... }``); ``wideip { name "..." alias "..." ttl N
pool_lbmode rr persist yes pool { name "..." ratio N preferred rtt alternate topology
fallback ga address A:PORT ratio N ... } }``; ``topology { [longest_match yes] SERVER LDNS
SCORE ... }`` with selectors such as ``dc."CNC"``, ``pool."web"``, ``region."cnc"``,
``country."CN"`` or a CIDR, and ``region_db NAME { region { name "cnc" 202.106.0.0/16 ...
} }``. A server no data center lists is in ``generic-ADDRESS``, as 3-DNS did. A wide IP's
pools are its own, so a pool name used by two wide IPs is told apart (``web-NAME``).
"""

from __future__ import annotations

from typing import Any

from gtmcluster.importers import f5methods, f5names
from gtmcluster.importers.f5parse import Node
from gtmcluster.importers.f5topology import Selector, TopologyMapper, selector
from gtmcluster.importers.model import MAX_PERSIST_TTL, MAX_RATIO, MAX_TTL, NOT_READ, Entry, Imported, digits

SERVER_STATEMENTS = ("server", "bigip", "host", "3dns", "edgefx", "gtm")
TOP_LEVEL = (*SERVER_STATEMENTS, "datacenter", "wideip", "topology", "globals", "region_db", "region", "sync_group")
FAMILIES = {4: "A", 6: "AAAA"}


def is_threedns(nodes: list[Node]) -> bool:
    return any(n.key in TOP_LEVEL and n.block is not None for n in nodes)


def first(node: Node, key: str) -> Node | None:
    return next((c for c in node.children() if c.key == key), None)


def word(node: Node, key: str, default: str = "") -> str:
    found = first(node, key)
    return found.words[1] if found is not None and len(found.words) > 1 else default


class ThreeDnsImport:
    """One import of wideip.conf files into *imp*."""

    def __init__(self, imp: Imported) -> None:
        self.imp = imp
        self.nodes: list[Node] = []
        #: (address, port) -> our virtual server name
        self.by_address: dict[tuple[str, int], str] = {}
        #: server address -> our data center
        self.server_dc: dict[str, str] = {}
        self.topology = TopologyMapper(imp, self.dc_name, self.pool_name)

    def dc_name(self, f5: str) -> str | None:
        return self.imp.namespace("datacenter").get(f5)

    def pool_name(self, f5: str) -> str | None:
        """Our name of the imported pool *f5* (of the first wide IP that has one so named)."""
        ns = self.imp.namespace("pool")
        return next((ours for (name, _), ours in ns.by_f5.items() if name == f5 and ours in self.imp.pools), None)

    def add(self, nodes: list[Node]) -> None:
        self.nodes.extend(nodes)

    def run(self) -> None:
        by_kind: dict[str, list[Node]] = {}
        for node in self.nodes:
            by_kind.setdefault(node.key, []).append(node)
        for node in by_kind.pop("datacenter", []):
            self.datacenter(node)
        for kind in SERVER_STATEMENTS:
            for node in by_kind.pop(kind, []):
                self.server(node)
        for node in by_kind.pop("region_db", []):
            for region in node.children():
                self.region(region)
        for node in by_kind.pop("region", []):
            self.region(node)
        self.topology.resolve()
        for node in by_kind.pop("wideip", []):
            self.wideip(node)
        for node in by_kind.pop("topology", []):
            self.topology_block(node)
        for kind, nodes in by_kind.items():
            for node in nodes:
                if kind in ("globals", "sync_group"):
                    self.imp.unmapped(node.where, f"{kind} statement", "settings of the 3-DNS itself")
                else:
                    self.imp.changed(node.where, f"{kind} statement", NOT_READ)

    def datacenter(self, node: Node) -> None:
        f5 = word(node, "name")
        if not f5:
            self.imp.unmapped(node.where, "datacenter", "no name: skipped")
            return
        ours = self.imp.namespace("datacenter").name(f5)
        self.imp.datacenters[ours] = Entry(ours, node.where, f'datacenter "{f5}"')
        for child in node.children():
            if child.key == "server":
                for address in child.words[1:]:
                    self.server_dc[address] = ours
            elif child.key not in ("name", "location", "contact"):
                self.imp.changed(child.where, f"datacenter {f5}: {child.text()}", NOT_READ)

    def server(self, node: Node) -> None:
        address = word(node, "address")
        name = word(node, "name", address)
        dc = self.server_dc.get(address)
        if dc is None:
            dc = self.generic_dc(address or name, node.where)
        for child in node.children():
            if child.key == "vs":
                self.virtual_server(name, child, dc)
            elif child.key not in ("address", "name", "type", "probe_protocol", "port"):
                self.imp.changed(child.where, f"server {name}: {child.text()}", NOT_READ)

    def generic_dc(self, address: str, where: str) -> str:
        ours = self.imp.namespace("datacenter").name(f"generic-{address}")
        if ours not in self.imp.datacenters:
            self.imp.datacenters[ours] = Entry(
                ours, where, f"generic data center of {address} (no datacenter lists it)"
            )
        return ours

    def virtual_server(self, server: str, node: Node, dc: str) -> str | None:
        text = word(node, "address") or (node.words[1] if len(node.words) > 1 else "")
        parsed = f5names.address_port(text)
        if parsed is None:
            self.imp.lost(node.where, f"server {server} vs {text!r}", "not an address")
            return None
        port = parsed[1] or f5names.port(word(node, "port", "80")) or 80
        name = word(node, "name") or f"{parsed[0]}-{port}"
        for child in node.children():
            if child.key not in ("address", "name", "port", "probe", "service"):
                self.imp.changed(child.where, f"vs {name}: {child.text()}", NOT_READ)
        return self.add_vs(server, name, str(parsed[0]), port, dc, node.where, f"server {server} vs {text}")

    def add_vs(self, server: str, name: str, address: str, port: int, dc: str, where: str, source: str) -> str:
        same = self.by_address.get((address, port))
        if same is not None:  # ours are told apart by address and port
            why = f"same address and port as {same} ({self.imp.virtual_servers[same].where}): imported as that one"
            self.imp.unmapped(where, f"server {server} vs {name}", why)
            return same
        ours = self.imp.namespace("virtual_server").name(f"{server}:{name}")
        vs: dict[str, Any] = {"address": address, "port": port, "datacenter": dc}
        self.imp.virtual_servers[ours] = Entry(vs, where, source)
        self.by_address[(address, port)] = ours
        return ours

    def member(self, text: str, default_port: int, where: str) -> str | None:
        parsed = f5names.address_port(text)
        if parsed is None:
            self.imp.lost(where, f"pool member {text!r}", "not an address")
            return None
        address, port = str(parsed[0]), parsed[1] or default_port
        if (address, port) not in self.by_address:
            dc = self.generic_dc(address, where)
            self.imp.unmapped(where, f"pool member {text}", f"no server lists this address: placed in data center {dc}")
            name = f"{address}-{port}"
            self.add_vs(f"generic-{address}", name, address, port, dc, where, f"pool member {text}")
        return self.by_address[(address, port)]

    def wideip(self, node: Node) -> None:
        name = word(node, "name")
        what = f'wideip "{name}"'
        if not name:
            self.imp.lost(node.where, "wideip", "no name: not imported")
            return
        default_port = f5names.port(word(node, "port", "80")) or 80
        ttl = word(node, "ttl")
        pools: list[Any] = []
        families: set[int] = set()
        for child in node.children():
            if child.key == "pool":
                ours = self.pool(child, name, default_port, ttl)
                if ours is not None:
                    at = first(child, "ratio")
                    ratio = self.imp.number(word(child, "ratio"), 1, 0, MAX_RATIO, (at or child).where, f"{what} ratio")
                    pools.append(ours if ratio == 1 else {"pool": ours, "ratio": ratio})
                    families |= {4 if ":" not in m["address"] else 6 for m in self.pool_members(ours)}
            elif child.key not in ("name", "alias", "ttl", "port", "pool_lbmode", "persist", "persist_ttl", "address"):
                self.imp.changed(child.where, f"{what}: {child.text()}", NOT_READ)
        if not pools:
            self.imp.lost(node.where, what, "no pool could be imported: the wide IP is not imported")
            return
        types = [FAMILIES[f] for f in sorted(families)] or ["A"]
        wideip: dict[str, Any] = {"type": types[0] if len(types) == 1 else types, "pools": pools}
        mode = word(node, "pool_lbmode", "rr")
        pool_lb, why = f5methods.pool_method(mode)
        if pool_lb is None:
            self.imp.lost(node.where, f"{what}: pool_lbmode {mode}", f"{why}; round_robin is used")
            pool_lb = "round_robin"
        wideip["pool_lb"] = pool_lb
        aliases = [w for c in node.children() if c.key == "alias" for w in c.words[1:]]
        if aliases:
            wideip["aliases"] = aliases
        if word(node, "persist") == "yes":
            at = first(node, "persist_ttl")
            ttl_value = self.imp.number(word(node, "persist_ttl"), 3600, 1, MAX_PERSIST_TTL, (at or node).where, what)
            wideip["persistence"] = {"ttl": ttl_value}
        self.imp.wideips[name] = Entry(wideip, node.where, what)

    def pool_members(self, pool: str) -> list[dict[str, Any]]:
        members = self.imp.pools[pool].value["members"]
        names = [m if isinstance(m, str) else m["virtual_server"] for m in members]
        return [self.imp.virtual_servers[n].value for n in names]

    def pool(self, node: Node, wideip: str, default_port: int, ttl: str) -> str | None:
        f5 = word(node, "name") or f"{wideip}-pool"
        what = f'pool "{f5}" of wideip "{wideip}"'
        ours = self.imp.namespace("pool").name(f5, wideip)
        members: list[Any] = []
        methods: dict[str, str] = {}
        for child in node.children():
            if child.key == "address" and len(child.words) > 1:
                vs = self.member(child.words[1], default_port, child.where)
                settings = dict(zip(child.words[2::2], child.words[3::2], strict=False))
                ratio = self.imp.number(settings.get("ratio"), 1, 0, MAX_RATIO, child.where, f"{what} member ratio")
                if vs is not None and any(
                    m == vs or (isinstance(m, dict) and m["virtual_server"] == vs) for m in members
                ):
                    self.imp.unmapped(child.where, f"{what} member {child.words[1]}", f"{vs} is in the pool already")
                elif vs is not None:
                    members.append(vs if ratio == 1 else {"virtual_server": vs, "ratio": ratio})
            elif child.key in ("preferred", "alternate", "fallback") and len(child.words) > 1:
                mapped, why = f5methods.member_method(child.words[1])
                if mapped is None or mapped == "fallback_ip":
                    why = why or "3-DNS pools have no fallback address here"
                    report = self.imp.lost if child.key == "preferred" else self.imp.changed
                    report(child.where, f"{what}: {child.text()}", f"{why}; 'none' is used (the next method runs)")
                    mapped = "none"
                methods[child.key] = mapped
            elif child.key not in ("name", "ratio", "ttl"):
                self.imp.changed(child.where, f"{what}: {child.text()}", NOT_READ)
        if not members:
            self.imp.lost(node.where, what, "no member could be imported")
            return None
        defaults = {slot: f5methods.member_method(m)[0] or "none" for slot, m in f5methods.DEFAULTS.items()}
        pool: dict[str, Any] = {"members": members, "load_balancing": {**defaults, **methods}}
        pool_ttl = word(node, "ttl") or ttl
        if pool_ttl:
            pool["ttl"] = self.imp.number(pool_ttl, 30, 0, MAX_TTL, node.where, f"{what} ttl")
        self.imp.pools[ours] = Entry(pool, node.where, what)
        return ours

    def region(self, node: Node) -> None:
        f5 = word(node, "name")
        members: list[tuple[Selector, str]] = []
        for child in node.children():
            if child.key == "name":
                continue
            sel = selector(child.words)
            if sel is None:
                self.imp.lost(child.where, f"region {f5} member {child.text()}", "not a region member")
            else:
                members.append((sel, child.where))
        if f5:
            self.topology.region(f5, members, node.where, f'region "{f5}"')

    def topology_block(self, node: Node) -> None:
        for child in node.children():
            words = child.words
            if child.key == "longest_match":
                if words[1:2] == ["no"]:
                    self.imp.changed(child.where, child.text(), "ours always consult records longest match first")
                continue
            parsed = self.topology_record(words)
            if parsed is None:
                self.imp.lost(child.where, f"topology record {child.text()}", "not SERVER LDNS SCORE")
                continue
            server, ldns, score = parsed
            self.topology.record(ldns, server, score, child.where, child.text())

    @staticmethod
    def topology_record(words: list[str]) -> tuple[Selector, Selector, int] | None:
        """``SERVER LDNS SCORE`` (each selector one or two words, maybe after ``not``/``!``)."""
        if len(words) < 3 or not digits(words[-1]):
            return None
        rest = words[:-1]
        for k in range(1, len(rest)):
            server, ldns = selector(rest[:k]), selector(rest[k:])
            if server is not None and ldns is not None:
                return server, ldns, int(words[-1])
        return None
