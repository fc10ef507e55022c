"""BIG-IP DNS (GTM) tmsh configuration (``bigip_gtm.conf``) mapped onto an `Imported`.

Objects are read from all files first (one may refer to another's), then mapped in the order
references need: data centers, monitors, servers and their virtual servers, pools, regions,
topology records, wide IPs. A tmsh listing leaves out settings at their defaults, so absent
ones take BIG-IP DNS's defaults (pool modes round-robin, round-robin, return-to-dns; TTL 30;
wide IP pool-lb-mode round-robin). Every setting not read is a finding.

A file is read object by object (`f5parse.stanzas`), so a whole ``bigip.conf`` or
``bigip_script.conf`` from a UCS imports its gtm objects and skips the rest (iRules, scripts,
APM policies) with one summary finding; one-line listings are cut into statements first
(`f5oneline`).
"""

from __future__ import annotations

from collections import Counter

from gtmcluster.importers import f5globals, f5names, f5oneline, f5pools, f5servers, f5wideips
from gtmcluster.importers.f5parse import F5SyntaxError, Node, Stanza, statements
from gtmcluster.importers.f5state import DESCRIPTIVE, TmshState, value
from gtmcluster.importers.f5topology import Selector, selector
from gtmcluster.importers.model import NOT_READ, Imported, digits

#: gtm objects that change no answer here (one plain finding each)
UNUSED = {
    "prober-pool": "every member of the sync group probes; prober pools have no equivalent",
    "rule": "an iRule no wide IP names does nothing (one a wide IP names is LOST there)",
    "listener": "listeners are the members' dns addresses (sync_group.members)",
}
#: gtm objects F5 answers by that are not imported: CHANGED, with what to do
OTHER = {
    "link": "F5 links (limits, costs, link answers) are not imported: define links by hand (docs/links.md)",
}

#: the words a tmsh top-level object starts with (its module), at column 0
MODULES = frozenset(
    ("analytics", "apm", "asm", "auth", "cli", "cm", "gtm", "ilx", "ltm", "net", "pem", "security", "sys", "vcmp",
     "wam", "wom")
)  # fmt: skip
NOT_GTM = MODULES - {"gtm"}


def is_tmsh(pieces: list[Stanza]) -> bool:
    """Whether a file cut into *pieces* (`f5parse.stanzas` at `MODULES`) is tmsh: it has a
    line starting ``gtm ``, ``ltm ``, ``sys `` ... at column 0."""
    return any(p.head for p in pieces)


class TmshImport:
    """One import of tmsh files into *imp*."""

    def __init__(self, imp: Imported) -> None:
        self.imp = imp
        self.s = TmshState(imp)
        #: the gtm objects seen in all files (read or not)
        self.gtm_seen = 0

    def add(self, file: str, pieces: list[Stanza]) -> None:
        """The gtm objects of *file*, cut into *pieces*, each parsed on its own: another
        module's object (``ltm rule`` with its Tcl, ``apm policy``, ``sys`` ...) is counted,
        never parsed; a gtm iRule is kept unparsed (its body is Tcl); a gtm object that does
        not parse is LOST and the others are read. One finding sums up what was skipped."""
        skipped: Counter[str] = Counter()
        first: str | None = None  # where the first statement skipped is
        seen = self.gtm_seen
        for piece in pieces:
            module = piece.head[0] if piece.head else ""
            if module in NOT_GTM:
                skipped[module] += 1
                first = first or piece.where
                continue
            self.gtm_seen += module == "gtm"
            if piece.head[1:2] == ("rule",):  # an iRule: Tcl, not F5 syntax
                self.s.objects["rule"].append(Node(list(piece.head), piece.line, file))
                continue
            read = False
            try:
                for node in statements(piece.text, file, piece.line):
                    read = True
                    if node.key == "gtm" and len(node.words) >= 2:
                        self.gtm_seen += module != "gtm"
                        f5oneline.split(node, self.imp)
                        self.s.objects[node.words[1]].append(node)
                    else:
                        skipped[node.key if node.key in NOT_GTM else "other"] += 1
                        first = first or node.where
            except F5SyntaxError as e:
                head = " ".join(piece.head) or "text before the first tmsh object"
                at = f" (line {piece.line})" if e.line != piece.line else ""
                if module == "gtm" and not read:
                    self.imp.lost(f"{file}:{e.line}", head + at, f"{e.message}: not imported")
                else:
                    what = f"text after {head}{at}" if piece.head else head
                    self.imp.lost(f"{file}:{e.line}", what, f"{e.message}: not read")
        if skipped:
            counts = ", ".join(f"{k} {n}" for k, n in skipped.most_common())
            none = "; the file holds no GTM configuration" if self.gtm_seen == seen else ""
            total = sum(skipped.values())
            what = f"{total} statement{'s' if total > 1 else ''} that are not GTM configuration"
            self.imp.unmapped(first or f"{file}:1", what, f"skipped ({counts}){none}")
        elif self.gtm_seen == seen:
            self.imp.unmapped(f"{file}:1", file, "no GTM configuration in it")

    def run(self) -> None:
        for node in self.s.objects.pop("datacenter", []):
            f5servers.datacenter(self.s, node)
        monitors = self.s.objects.pop("monitor", [])
        self.s.monitor_defs = {f5names.strip_partition(n.words[3]): n for n in monitors if len(n.words) >= 4}
        for node in monitors:
            f5servers.monitor(self.s, node)
        for node in self.s.objects.pop("server", []):
            f5servers.server(self.s, node)
        for node in self.s.objects.pop("pool", []):
            f5pools.pool(self.s, node)
        for node in self.s.objects.pop("region", []):
            self.region(node)
        self.s.topology.resolve()  # (each region after those it names: tmsh lists them alphabetically)
        records = []
        for node in self.s.objects.pop("topology", []):
            records.extend([node] if len(node.words) > 2 else node.children())
        self.topology_records(records)
        for node in self.s.objects.pop("wideip", []):
            f5wideips.wideip(self.s, node)
        prefixes: dict[str, int] = {}
        for node in self.s.objects.pop("global-settings", []):
            f5globals.read(self.imp, node, prefixes)
        f5globals.apply_static_persist(self.imp, prefixes)
        for kind, nodes in self.s.objects.items():
            for node in nodes:
                if kind in UNUSED:
                    self.imp.unmapped(node.where, " ".join(node.words), UNUSED[kind])
                else:
                    why = OTHER.get(kind, NOT_READ)
                    self.imp.changed(node.where, " ".join(node.words), why)
        f5servers.apply_pool_monitors(self.s)
        self.s.report_monitors()
        f5servers.check_dependencies(self.s)

    def region(self, node: Node) -> None:
        f5 = node.words[2] if len(node.words) > 2 else "?"
        members: list[tuple[Selector, str]] = []
        for child in node.children():
            if child.key != "region-members":
                if child.words and child.key not in DESCRIPTIVE:
                    self.imp.changed(child.where, f"region {f5}: {child.text()}", NOT_READ)
                continue
            for member in child.children():
                sel = selector(member.words)
                if sel is None:
                    self.imp.lost(member.where, f"region {f5} member {member.text()}", "not a region member")
                else:
                    members.append((sel, member.where))
        self.s.topology.region(f5, members, node.where, self.s.comment(node))

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
            self.s.topology.record(ldns_sel, server_sel, points, node.where, " ".join(node.words))
