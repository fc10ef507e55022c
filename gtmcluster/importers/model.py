"""What an import produces: config objects with their F5 source, and findings.

`Imported` holds the mapped objects by section, each an `Entry` (the YAML value, the F5
``file:line`` it came from and the F5 statement), in the order F5 listed them. A `Finding` is
something that could not be mapped (or only approximately), with its ``file:line`` and why,
at one of three levels:

- LOST: an object or setting not imported (a wide IP, pool or topology record, a preferred
  method with no equivalent): the import fails (exit 1);
- CHANGED: imported, but it would not behave as on F5 (a monitor that checks less, a setting
  not read, a disabled object imported enabled): the import fails too, for the operator must
  decide; the finding says what to decide;
- not mapped: only what does not change an answer or a verdict (a description, a renamed
  object, a server's own addresses): listed, exit 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gtmcluster.importers.f5names import Namespace, one_line

MAX_RATIO = 65535
MAX_TTL = 2**31 - 1
MAX_PERSIST_TTL = 2592000
#: why a setting not read is CHANGED
NOT_READ = "not read: F5 applied it, this import does not (decide whether it matters)"


def digits(text: str) -> bool:
    """Whether *text* is a whole number F5 wrote: ASCII digits only (str.isdigit() also
    takes "²", which int() refuses)."""
    return text.isascii() and text.isdigit()


@dataclass(frozen=True)
class Finding:
    """Something not mapped (or mapped approximately) at *where* (``file:line``)."""

    where: str
    what: str
    why: str
    essential: bool = False
    #: imported, but not as F5 behaves (essential too)
    changed: bool = False

    @property
    def level(self) -> str:
        return "CHANGED" if self.changed else "LOST" if self.essential else "not mapped"

    def render(self) -> str:
        """The finding on one line (`one_line`), as the command prints it."""
        return one_line(f"{self.where}: {self.level}: {self.what}: {self.why}")


@dataclass
class Entry:
    """One config object: its YAML value and the F5 statement it came from."""

    value: Any
    where: str
    source: str
    note: str = ""


@dataclass
class Imported:
    """The config objects an import made, by section, and what it could not map."""

    datacenters: dict[str, Entry] = field(default_factory=dict)
    monitors: dict[str, Entry] = field(default_factory=dict)
    virtual_servers: dict[str, Entry] = field(default_factory=dict)
    regions: dict[str, Entry] = field(default_factory=dict)
    topology: list[Entry] = field(default_factory=list)
    pools: dict[str, Entry] = field(default_factory=dict)
    wideips: dict[str, Entry] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    #: our names of F5 objects, per kind of object
    names: dict[str, Namespace] = field(default_factory=dict)
    #: a GeoIP country database given on the command line (country and continent selectors)
    geoip_country: str | None = None

    def namespace(self, kind: str) -> Namespace:
        return self.names.setdefault(kind, Namespace(kind))

    def lost(self, where: str, what: str, why: str) -> None:
        """Record an essential loss (the import fails)."""
        self.findings.append(Finding(where, what, why, True))

    def changed(self, where: str, what: str, why: str) -> None:
        """Record something imported that would not behave as on F5 (the import fails)."""
        self.findings.append(Finding(where, what, why, True, True))

    def unmapped(self, where: str, what: str, why: str) -> None:
        """Record something not mapped that does not change the answers much (listed only)."""
        self.findings.append(Finding(where, what, why, False))

    def number(self, text: str | None, default: int, lo: int, hi: int, where: str, what: str) -> int:
        """A whole number F5 wrote (*default* when absent), kept within what we accept; a
        value that is not a number, or is cut to the range, is a finding."""
        if text is None or text == "":
            return default
        if not digits(text):
            self.unmapped(where, f"{what} {text}", f"not a whole number: {default} is used")
            return default
        value = int(text)
        if not lo <= value <= hi:
            kept = min(max(value, lo), hi)
            self.unmapped(where, f"{what} {text}", f"out of our range ({lo} to {hi}): {kept} is used")
            return kept
        return value

    @property
    def failed(self) -> bool:
        return any(f.essential for f in self.findings)
