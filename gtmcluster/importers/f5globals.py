"""tmsh ``gtm global-settings``: what of it changes answers, mapped or reported.

Only the ``load-balancing`` block decides answers. Its static-persistence prefixes
(``static-persist-cidr-ipv4/ipv6``, F5's defaults 32 and 128) become the ``static_persist``
prefixes of every pool that uses static persistence; its other settings are CHANGED when they
differ from F5's defaults (``topology-longest-match no``: ours always consult records longest
match first), nothing at the defaults. The ``general`` and ``metrics`` blocks are the
device's own (synchronisation, discovery, how paths are measured): listed only.
"""

from __future__ import annotations

from gtmcluster.importers.f5parse import Node
from gtmcluster.importers.model import NOT_READ, Imported

#: F5's defaults of the load-balancing settings that change answers, and what differs here
LOAD_BALANCING = {
    "topology-longest-match": ("yes", "ours always consult topology records longest match first"),
    "topology-allow-zero-scores": ("no", "ours never answer a candidate whose topology score is 0"),
    "verify-vs-availability": ("yes", "ours always answer with available virtual servers only"),
    "respect-fallback-dependency": ("no", "ours' fallback method passes over a member whose dependency is down"),
    "fb-respect-depends": ("no", "ours' fallback method passes over a member whose dependency is down"),
    "fb-respect-acl": ("no", "there are no ACLs here"),
    "ignore-path-ttl": ("no", "ours use a measured path only while it is fresh"),
}
PREFIXES = {"static-persist-cidr-ipv4": ("ipv4_prefix", 32), "static-persist-cidr-ipv6": ("ipv6_prefix", 128)}


def read(imp: Imported, node: Node, prefixes: dict[str, int]) -> None:
    """Findings for ``gtm global-settings BLOCK { ... }`` (or one setting on its line); the
    static-persistence prefixes it sets go into *prefixes* (``ipv4_prefix``, ``ipv6_prefix``)."""
    block = node.words[2] if len(node.words) > 2 else ""
    for child in node.children():
        for setting in child.children() or [child]:
            if not setting.words:
                continue
            section = child.key if child.children() else block
            key, value = setting.key, " ".join(setting.words[1:])
            what = f"gtm global-settings {section}: {setting.text()}".replace(" :", ":")
            if key in PREFIXES:
                ours, most = PREFIXES[key]
                if value.isascii() and value.isdigit() and 0 <= int(value) <= most:
                    prefixes[ours] = int(value)
                else:
                    imp.changed(setting.where, what, f"not a prefix length of 0 to {most}: {most} is used")
            elif key in LOAD_BALANCING:
                default, why = LOAD_BALANCING[key]
                if value != default:
                    imp.changed(setting.where, what, why)
            elif section == "load-balancing":
                imp.changed(setting.where, what, NOT_READ)
            else:
                imp.unmapped(setting.where, what, "the device's own settings (no answer depends on them)")


def apply_static_persist(imp: Imported, prefixes: dict[str, int]) -> None:
    """Give every pool that uses static persistence the global prefixes (ours default to
    F5's, 32 and 128: nothing is written then)."""
    wanted = {k: v for k, v in prefixes.items() if v != dict(PREFIXES.values())[k]}
    if not wanted:
        return
    for entry in imp.pools.values():
        if "static_persist" in entry.value.get("load_balancing", {}).values():
            entry.value["static_persist"] = {"ipv4_prefix": 32, "ipv6_prefix": 128, **wanted}
