"""An F5 import from files to YAML text: read, parse, map each form, complete, render."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from gtmcluster.config.load import load
from gtmcluster.config.problems import ConfigError
from gtmcluster.importers import assemble, yamlout
from gtmcluster.importers.f5parse import F5SyntaxError, Node, parse
from gtmcluster.importers.f5threedns import ThreeDnsImport, is_threedns
from gtmcluster.importers.f5tmsh import TmshImport, is_tmsh
from gtmcluster.importers.model import Imported

#: the largest input file, bytes: a tmsh export of 10,000 wide IPs, each with its pool of two
#: members, is 5.5 MB (imported in 12 s, 384 MB at the peak: some 65 bytes of memory per byte
#: of input), so this is some 58,000 such wide IPs and 2 GB
MAX_INPUT = 32 * 1024 * 1024


class InputError(Exception):
    """An input that cannot be read or parsed (the message names file and line)."""


def read_text(file: str) -> str:
    """The text of *file* (undecodable bytes replaced); `InputError` when it holds more than
    `MAX_INPUT` bytes, told by its size before reading when it has one (a FIFO or a device
    is read no further than that)."""
    with open(file, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(MAX_INPUT + 1) if size <= MAX_INPUT else b""
    if size > MAX_INPUT or len(data) > MAX_INPUT:
        shown = f"{size:,} bytes" if size > MAX_INPUT else f"more than {MAX_INPUT:,} bytes"
        raise InputError(f"{file}: {shown}, over the limit of {MAX_INPUT:,} for an input file")
    return data.decode("utf-8", errors="replace")


@dataclass
class Result:
    """The config text, the zone files to write (path relative to the config -> text) and
    what was found."""

    text: str
    zone_files: dict[str, str]
    imported: Imported
    members: list[assemble.Member] = field(default_factory=list)


def read(files: list[str]) -> list[tuple[str, list[Node]]]:
    """Each file's statements; raises `InputError` for one that cannot be read or parsed,
    or that is larger than `MAX_INPUT`."""
    out = []
    for file in files:
        try:
            text = read_text(file)
        except OSError as e:
            raise InputError(f"{file}: cannot read: {e.strerror or e}") from None
        try:
            out.append((file, parse(text, file)))
        except F5SyntaxError as e:
            raise InputError(str(e)) from None
    return out


def run(
    files: list[str],
    sites: dict[str, str] | None = None,
    zones: list[str] | None = None,
    geoip_country: str | None = None,
    zone_dir: str = "zones",
) -> Result:
    """Import *files* (each tmsh or 3-DNS, told apart by their statements)."""
    imp = Imported(geoip_country=geoip_country)
    tmsh, threedns = TmshImport(imp), ThreeDnsImport(imp)
    for file, nodes in read(files):
        if is_tmsh(nodes):
            tmsh.add(nodes)
        elif is_threedns(nodes):
            threedns.add(nodes)
        else:
            first = nodes[0].where if nodes else f"{file}:1"
            imp.lost(first, file, "neither tmsh (gtm ...) nor 3-DNS wideip.conf statements: nothing imported")
    tmsh.run()
    threedns.run()
    assemble.check_names(imp)
    members = assemble.members(imp, sites or {})
    origins = assemble.zones(imp, zones or [])
    zone_files = {o: f"{zone_dir}/{o}.zone" for o in origins}
    contents = {zone_files[o]: assemble.zone_text(o, members) for o in origins}
    text = yamlout.render(imp, files, members, origins, zone_files)
    if verify(text, contents, imp):
        text = yamlout.render(imp, files, members, origins, zone_files)  # (the header counts findings)
    return Result(text, contents, imp, members)


def verify(text: str, zone_files: dict[str, str], imp: Imported) -> bool:
    """Load *text* as `gtmcluster check` would; each problem is an essential finding (the
    mapping missed something). Whether there were any."""
    with tempfile.TemporaryDirectory(prefix="gtm-import-") as folder:
        for relative, content in zone_files.items():
            (Path(folder) / relative).parent.mkdir(parents=True, exist_ok=True)
            (Path(folder) / relative).write_text(content, encoding="utf-8")
        config = Path(folder) / "cluster.yaml"
        config.write_text(text, encoding="utf-8")
        try:
            load(config)
        except ConfigError as e:
            for p in e.problems:
                where = f"output line {p.line}" if p.line else "output"
                imp.lost(
                    where,
                    ".".join(map(str, p.path)) or "(top level)",
                    f"the imported config does not load: {p.message}",
                )
            return True
    return False
