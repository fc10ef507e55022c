"""Keys for a signed test zone, made as an operator makes them: with the real CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

GTMCLUSTER = Path(sys.executable).parent / "gtmcluster"

#: the key sets the process tests sign with: a combined key at algorithm 13, a KSK/ZSK pair at 15
VARIANTS = ("13", "15-split")


def keygen_and_ds(directory: Path, variant: str, zone: str = "example.test", *ds_options: str) -> str:
    """Make *zone*'s keys in *directory* (`dnssec keygen`, per *variant*); what `dnssec ds`
    then prints for them (with *ds_options*, e.g. ``--dnskey``)."""
    keygen: list[str | Path] = [GTMCLUSTER, "dnssec", "keygen", zone, "--dir", directory]
    if variant == "15-split":
        keygen += ["--algorithm", "15", "--split"]
    subprocess.run(keygen, check=True, capture_output=True)
    return subprocess.run(
        [GTMCLUSTER, "dnssec", "ds", zone, "--dir", directory, *ds_options],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
