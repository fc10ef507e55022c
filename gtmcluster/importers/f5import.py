"""An F5 import from files to YAML text: read, parse, map each form, complete, render."""

from __future__ import annotations

import codecs
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from gtmcluster.config.load import load
from gtmcluster.config.problems import ConfigError
from gtmcluster.importers import assemble, yamlout
from gtmcluster.importers.f5parse import F5SyntaxError, parse, stanzas
from gtmcluster.importers.f5threedns import ThreeDnsImport, is_threedns
from gtmcluster.importers.f5tmsh import MODULES, TmshImport, is_tmsh
from gtmcluster.importers.model import Imported

#: the largest input file, bytes: a tmsh export of 10,000 wide IPs, each with its pool of two
#: members, is 5.5 MB (imported in 12 s, 384 MB at the peak: some 65 bytes of memory per byte
#: of input), so this is some 58,000 such wide IPs and 2 GB
MAX_INPUT = 32 * 1024 * 1024


#: byte-order marks and their encodings (UTF-32's first: its LE mark starts with UTF-16's)
BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


class InputError(Exception):
    """An input that cannot be read or parsed (the message names file and line)."""


def read_text(file: str) -> str:
    """The text of *file*; `InputError` when it holds more than `MAX_INPUT` bytes, told by
    its size before reading when it has one (a FIFO or a device is read no further than
    that), or when it is not text."""
    with open(file, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(MAX_INPUT + 1) if size <= MAX_INPUT else b""
    if size > MAX_INPUT or len(data) > MAX_INPUT:
        shown = f"{size:,} bytes" if size > MAX_INPUT else f"more than {MAX_INPUT:,} bytes"
        raise InputError(f"{file}: {shown}, over the limit of {MAX_INPUT:,} for an input file")
    return decode(data, file)


def decode(data: bytes, file: str) -> str:
    """*data* as text: UTF-8, or UTF-16 or UTF-32 when it starts with their byte-order mark
    (as Windows editors save), undecodable bytes replaced; a UTF-8 byte-order mark is
    dropped, and Windows line ends (CRLF) read as LF. `InputError` for what is no text: a gzip file
    (a UCS archive, say) or NUL bytes (UTF-16 without its mark)."""
    for bom, codec in BOMS:
        if data.startswith(bom):
            text = data[len(bom) :].decode(codec, errors="replace")
            break
    else:
        if data.startswith(b"\x1f\x8b"):
            raise InputError(
                f"{file}: a gzip archive (a UCS?), not text: give the files in it (config/bigip_gtm.conf, "
                "config/bigip.conf)"
            )
        if b"\x00" in data:
            line = data.count(b"\n", 0, data.index(b"\x00")) + 1
            raise InputError(
                f"{file}:{line}: a NUL byte: not text in UTF-8 (a UTF-16 file needs its byte-order mark: "
                "save it as UTF-8)"
            )
        text = data.decode("utf-8", errors="replace")
    # (a byte-order mark inside, from files joined with cat, would hide the word after it)
    return text.replace("\r\n", "\n").replace("\ufeff", "")


@dataclass
class Result:
    """The config text, the zone files to write (path relative to the config -> text) and
    what was found."""

    text: str
    zone_files: dict[str, str]
    imported: Imported
    members: list[assemble.Member] = field(default_factory=list)


def read(files: list[str]) -> list[tuple[str, str]]:
    """Each file's text; raises `InputError` for one that cannot be read, is larger than
    `MAX_INPUT` or is not text."""
    out = []
    for file in files:
        try:
            out.append((file, read_text(file)))
        except OSError as e:
            raise InputError(f"{file}: cannot read: {e.strerror or e}") from None
    return out


def run(
    files: list[str],
    sites: dict[str, str] | None = None,
    zones: list[str] | None = None,
    geoip_country: str | None = None,
    zone_dir: str = "zones",
) -> Result:
    """Import *files*: tmsh (read object by object: one that does not parse is a finding)
    or 3-DNS (read whole: one that does not parse is an `InputError`), told apart by their
    statements."""
    imp = Imported(geoip_country=geoip_country)
    tmsh, threedns = TmshImport(imp), ThreeDnsImport(imp)
    first_tmsh: str | None = None
    threedns_files = 0
    for file, text in read(files):
        pieces = stanzas(text, file, MODULES)
        if is_tmsh(pieces):
            tmsh.add(file, pieces)
            first_tmsh = first_tmsh or f"{file}:1"
            continue
        try:
            nodes = parse(text, file)
        except F5SyntaxError as e:
            raise InputError(str(e)) from None
        if is_threedns(nodes):
            threedns.add(nodes)
            threedns_files += 1
        elif any(n.key in MODULES for n in nodes):  # tmsh, but indented
            tmsh.add(file, pieces)
            first_tmsh = first_tmsh or f"{file}:1"
        else:
            first = nodes[0].where if nodes else f"{file}:1"
            imp.lost(first, file, "neither tmsh (gtm ...) nor 3-DNS wideip.conf statements: nothing imported")
    if first_tmsh is not None and not tmsh.gtm_seen and not threedns_files:
        imp.lost(first_tmsh, "the input", "no GTM configuration (gtm ...) in any file: nothing imported")
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
