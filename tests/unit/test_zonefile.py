"""The master-file reader: layout, directives, record types, and exact error lines."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gtmcluster.dnsdata import names, zonefile, zoneinclude
from gtmcluster.dnsdata.zone import TYPE_A, TYPE_MX, TYPE_NS, TYPE_SOA, TYPE_TXT, RRset

HEAD = "$TTL 300\n@ IN SOA ns1 hostmaster 1 3600 600 86400 60\n  IN NS ns1\nns1 IN A 192.0.2.1\n"


def load(tmp_path: Path, text: str, origin: str = "example.test") -> dict[tuple[str, int], RRset]:
    path = tmp_path / "z.zone"
    path.write_text(text)
    data = zonefile.load(str(path), origin)
    return {(names.to_text(r.owner), r.rtype): r for r in data.rrsets}


def problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "z.zone"
    path.write_text(text)
    with pytest.raises(zonefile.ZoneFileError) as caught:
        zonefile.load(str(path), "example.test")
    return [f"{p.line}: {p.message}" for p in caught.value.problems]


def test_layout_parentheses_comments_quotes_and_blank_owners(tmp_path: Path) -> None:
    """Multi-line records, comments, quoted ';' and inherited owners read as RFC 1035 says."""
    rrsets = load(
        tmp_path,
        "$TTL 1h\n"
        "@ IN SOA ns1 hostmaster ( 7 ; serial\n   3600 600\n   86400 60 )\n"
        "  IN NS ns1\n"
        "  IN MX 10 mail\n"
        'txt 60 IN TXT "a; not a comment" "b"\n'
        "ns1 IN A 192.0.2.1\n"
        "    IN A 192.0.2.2 ; same owner\n",
    )
    soa = rrsets[("example.test.", TYPE_SOA)]
    assert soa.ttl == 3600
    assert soa.rdatas[0][-1][:4] == (7).to_bytes(4, "big")
    assert rrsets[("txt.example.test.", TYPE_TXT)].ttl == 60
    assert rrsets[("txt.example.test.", TYPE_TXT)].rdatas[0][0] == b"\x10a; not a comment\x01b"
    assert len(rrsets[("ns1.example.test.", TYPE_A)].rdatas) == 2
    assert ("example.test.", TYPE_MX) in rrsets


def test_origin_ttl_class_order_and_generic_types(tmp_path: Path) -> None:
    """$ORIGIN, class before TTL, relative and absolute names, and RFC 3597 TYPE syntax."""
    rrsets = load(
        tmp_path,
        HEAD + "$ORIGIN sub.example.test.\nhost IN 120 A 192.0.2.9\nabs.example.test. A 192.0.2.10\n"
        "gen TYPE1234 \\# 2 abcd\n",
    )
    assert rrsets[("host.sub.example.test.", TYPE_A)].ttl == 120
    assert ("abs.example.test.", TYPE_A) in rrsets
    assert rrsets[("gen.sub.example.test.", 1234)].rdatas == ((b"\xab\xcd",),)


def test_names_in_rdata_stay_compressible(tmp_path: Path) -> None:
    """NS, MX and SOA targets are kept as names so the encoder may compress them."""
    rrsets = load(tmp_path, HEAD + "@ IN MX 10 mail\n")
    assert rrsets[("example.test.", TYPE_NS)].rdatas[0] == ((b"ns1", b"example", b"test"),)
    assert rrsets[("example.test.", TYPE_MX)].rdatas[0] == (b"\x00\x0a", (b"mail", b"example", b"test"))


def test_include_is_relative_to_the_including_file(tmp_path: Path) -> None:
    """$INCLUDE reads a file next to the zone file, with an optional origin."""
    (tmp_path / "hosts.inc").write_text("www IN A 192.0.2.80\n")
    rrsets = load(tmp_path, HEAD + "$INCLUDE hosts.inc lab.example.test.\n")
    assert ("www.lab.example.test.", TYPE_A) in rrsets


def test_duplicates_merge_and_rrset_takes_lowest_ttl(tmp_path: Path) -> None:
    """Identical records count once; one RRset has one TTL (RFC 2181 5.2)."""
    rrsets = load(tmp_path, HEAD + "www 300 IN A 192.0.2.1\nwww 60 IN A 192.0.2.2\nwww 30 IN A 192.0.2.1\n")
    www = rrsets[("www.example.test.", TYPE_A)]
    assert len(www.rdatas) == 2
    assert www.ttl == 30


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        ("bad IN A 1.2.3\n", "5: bad A data: Text input is malformed"),
        ("x IN BOGUS 1\n", "5: unknown record type"),
        ("www IN CNAME ns1\nwww IN A 192.0.2.1\n", "5: a CNAME beside other data at this name (A)"),
        ('t IN TXT "open\n', "5: unterminated quoted string"),
        ("y IN A ( 192.0.2.1\n", "5: '(' is never closed"),
        ("z IN A 192.0.2.1 )\n", "5: ')' without a matching '('"),
        ("other.test. IN A 192.0.2.1\n", "5: the owner name is outside the zone example.test."),
        ("c CH TXT x\n", "5: class CH is not served"),
        ("d IN DNAME example.net.\n", "5: DNAME records are not supported"),
        ("$GENERATE 1-2 h$ A 192.0.2.$\n", "5: unsupported directive: $GENERATE"),
        ("$INCLUDE missing.inc\n", "5: cannot read"),
        ("t 99999999999 IN A 192.0.2.1\n", "5: bad TTL"),
        ("q IN AXFR\n", "5: AXFR is not a record type that can be stored"),
        ("\n\nlate IN MX x y\n", "7: bad MX data"),
    ],
)
def test_errors_name_the_line(tmp_path: Path, tail: str, expected: str) -> None:
    """Every problem names the line its record starts on."""
    found = problems(tmp_path, HEAD + tail)
    assert any(p.startswith(expected) for p in found), found


def test_multi_line_record_errors_name_the_first_line(tmp_path: Path) -> None:
    """A record spread over lines is reported at the line it starts on."""
    found = problems(tmp_path, HEAD + "mx IN MX (\n  10\n  bad..name )\n")
    assert found[0].startswith("5: bad MX data")


def test_all_problems_are_reported_together(tmp_path: Path) -> None:
    """Several bad lines give several problems, in file order."""
    found = problems(tmp_path, HEAD + "a IN A x\nb IN A y\nc IN A z\n")
    assert [p.split(":")[0] for p in found] == ["5", "6", "7"]


def test_missing_soa_and_ns_are_errors(tmp_path: Path) -> None:
    """A zone needs exactly one SOA and NS records at its apex."""
    found = problems(tmp_path, "$TTL 60\nwww IN A 192.0.2.1\n")
    assert any("no SOA record" in p for p in found)
    assert any("no NS records" in p for p in found)
    two = problems(tmp_path, HEAD + "@ IN SOA ns2 hm 2 1 1 1 1\n")
    assert any("more than one SOA" in p for p in two)


def test_record_without_any_ttl_is_an_error(tmp_path: Path) -> None:
    """Without $TTL or an earlier TTL a record has none; SOA falls back to its minimum."""
    inherited = load(tmp_path, "@ IN SOA ns1 hm 1 1 1 1 60\n@ IN NS ns1\n")
    assert inherited[("example.test.", TYPE_NS)].ttl == 60  # the previous record's TTL
    found = problems(tmp_path, "@ IN NS ns1\n@ IN SOA ns1 hm 1 1 1 1 60\n")
    assert any(p.startswith("1: no TTL") for p in found)


def test_unreadable_file_is_a_problem(tmp_path: Path) -> None:
    """A missing zone file is reported, not raised as OSError."""
    with pytest.raises(zonefile.ZoneFileError) as caught:
        zonefile.load(str(tmp_path / "nope.zone"), "example.test")
    assert "cannot read" in str(caught.value)


# -- $INCLUDE: confined to the zone file's folder, bounded, never echoed (issue 30) ----------

SECRET_LINES = "API_TOKEN=s3cr3t-t0ken-value hunter2xyz\nPASSWORD topsecretword\n"


def include_problems(folder: Path, text: str, includes: zoneinclude.Includes | None = None) -> list[str]:
    path = folder / "z.zone"
    path.write_text(text)
    with pytest.raises(zonefile.ZoneFileError) as caught:
        zonefile.load(str(path), "example.test", includes or zoneinclude.Includes())
    return [str(p) for p in caught.value.problems]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("$INCLUDE {outside}", "$INCLUDE names an absolute path"),
        ("$INCLUDE ../secret.txt", "$INCLUDE names a path with '..'"),
        ("$INCLUDE sub/../../secret.txt", "$INCLUDE names a path with '..'"),
        ("$INCLUDE link.inc", "$INCLUDE names a file outside the zone file's folder"),
    ],
)
def test_an_include_leaving_the_zone_folder_is_refused_unread(tmp_path: Path, line: str, expected: str) -> None:
    """An absolute path, '..' or a link out of the folder: refused, the file never read and
    nothing of it in the problems."""
    (tmp_path / "secret.txt").write_text(SECRET_LINES)
    zones = tmp_path / "zones"
    zones.mkdir()
    (zones / "link.inc").symlink_to(tmp_path / "secret.txt")
    found = include_problems(zones, HEAD + line.format(outside=tmp_path / "secret.txt") + "\n")
    assert [p.split(": ", 1)[1] for p in found] == [found[0].split(": ", 1)[1]]
    assert found[0].startswith(f"{zones / 'z.zone'}:5: {expected}"), found
    assert not any(word in "\n".join(found) for word in ("s3cr3t", "hunter2", "topsecret", "API_TOKEN"))


def test_an_include_of_a_fifo_is_refused_unopened(tmp_path: Path) -> None:
    """A FIFO named by an $INCLUDE inside the zone's folder: one problem saying what it is,
    at once (a reload reads zone files on the reactor: the open would have blocked it). A
    device is reached only through a link, and a link out of the folder is refused anyway."""
    os.mkfifo(tmp_path / "hosts.inc")
    found = include_problems(tmp_path, HEAD + "$INCLUDE hosts.inc\n")
    assert len(found) == 1 and "a FIFO, not a regular file" in found[0], found


def test_problems_in_an_included_file_never_quote_it(tmp_path: Path) -> None:
    """Every line of an included file that is not a zone is a problem naming its line, not
    its words."""
    (tmp_path / "notes.inc").write_text(SECRET_LINES + "www IN A 192.0.2.1.5\nx IN MX 10 mail extra-word-q\n")
    found = include_problems(tmp_path, HEAD + "$INCLUDE notes.inc\n")
    text = "\n".join(found)
    assert f"{tmp_path / 'notes.inc'}:1: " in text and f"{tmp_path / 'notes.inc'}:2: " in text
    assert f"{tmp_path / 'notes.inc'}:3: bad A data" in text
    assert not any(w in text for w in ("s3cr3t", "hunter2", "topsecret", "API_TOKEN", "PASSWORD", "extra-word-q")), text


def test_outside_config_sync_an_include_may_be_absolute_inside_an_opened_folder(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "hosts.inc").write_text("www IN A 192.0.2.80\n")
    zones = tmp_path / "zones"
    zones.mkdir()
    text = HEAD + f"$INCLUDE {shared / 'hosts.inc'}\n"
    local = zoneinclude.Includes(shared=False, dirs=(str(shared),))
    path = zones / "z.zone"
    path.write_text(text)
    data = zonefile.load(str(path), "example.test", local)
    assert any(names.to_text(r.owner) == "www.example.test." for r in data.rrsets)
    # not opened: outside the zone's folder; shared: not even looked at
    found = include_problems(zones, text, zoneinclude.Includes(shared=False))
    assert "$INCLUDE names a file outside the zone file's folder" in found[0]
    assert "absolute path" in include_problems(zones, text)[0]


def test_include_loops_and_fans_are_bounded(tmp_path: Path) -> None:
    """A file that includes itself is said once per line; one included by many lines is
    read at most MAX_INCLUDES times; nesting stops at MAX_INCLUDE_DEPTH."""
    (tmp_path / "a.inc").write_text("$INCLUDE b.inc\n")
    (tmp_path / "b.inc").write_text("$INCLUDE a.inc\n")
    found = include_problems(tmp_path, HEAD + "$INCLUDE a.inc\n")
    assert found == [
        f"{tmp_path / 'b.inc'}:1: $INCLUDE of a file that is being read (it includes itself, directly or not)"
    ]
    # a fan: each level includes the next 4 times, 6 levels: 4**6 reads unbounded
    for level in range(6):
        (tmp_path / f"f{level}.inc").write_text(f"$INCLUDE f{level + 1}.inc\n" * 4)
    (tmp_path / "f6.inc").write_text("x IN A 192.0.2.1\n")
    found = include_problems(tmp_path, HEAD + "$INCLUDE f0.inc\n")
    assert any(f"more than {zonefile.MAX_INCLUDES} files included by the zone" in p for p in found)
    # nesting
    for level in range(12):
        (tmp_path / f"n{level}.inc").write_text(f"$INCLUDE n{level + 1}.inc\n")
    (tmp_path / "n12.inc").write_text("")
    found = include_problems(tmp_path, HEAD + "$INCLUDE n0.inc\n")
    assert found == [f"{tmp_path / 'n7.inc'}:1: $INCLUDE nested more than {zonefile.MAX_INCLUDE_DEPTH} deep"]


def test_included_lists_what_load_reads(tmp_path: Path) -> None:
    """`included` follows the directives as `load` does (without reading the records)."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.inc").write_text("$include b.inc other.example.test.\nw IN A 192.0.2.7\n")
    (tmp_path / "sub" / "b.inc").write_text("v IN A 192.0.2.8\n")
    (tmp_path / "z.zone").write_text(HEAD + "$INCLUDE sub/a.inc\n$INCLUDE sub/a.inc\n$INCLUDE /etc/hostname\n")
    found, problems = zonefile.included("z.zone", base=str(tmp_path))
    assert found == ["sub/a.inc", "sub/b.inc"]
    assert [str(p) for p in problems] == [
        "z.zone:7: $INCLUDE names an absolute path: a zone shared by config sync "
        "includes a file by its name relative to the zone file's folder (the "
        "bundle carries it)"
    ]
    files = {"z.zone": (tmp_path / "z.zone").read_bytes(), "sub/a.inc": b"$INCLUDE b.inc\n"}

    def read(name: str) -> bytes:
        if name not in files:
            raise FileNotFoundError(2, "not in the bundle")
        return files[name]

    found, problems = zonefile.included("z.zone", read=read)
    assert found == ["sub/a.inc"]
    assert any(str(p) == "sub/a.inc:1: cannot read the included file sub/b.inc: not in the bundle" for p in problems)


def test_load_names_what_it_included_and_included_keeps_what_it_read(tmp_path: Path) -> None:
    """`ZoneData.included`: the files `load` included, as `included` finds them from the
    same path (a config bundle's files need not be found again); `included(kept=)`: the
    bytes of each file it read, whole, by name (a bundle carries them as read)."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.inc").write_text("$include b.inc\nw IN A 192.0.2.7\n")
    (tmp_path / "sub" / "b.inc").write_text("v IN A 192.0.2.8\n")
    (tmp_path / "z.zone").write_text(HEAD + "$INCLUDE sub/a.inc\n$INCLUDE sub/a.inc\n")
    zone = str(tmp_path / "z.zone")
    assert zonefile.load(zone, "example.test").included == tuple(zonefile.included(zone)[0])
    assert zonefile.load(zone, "example.test").included == (f"{tmp_path}/sub/a.inc", f"{tmp_path}/sub/b.inc")
    kept: dict[str, bytes] = {}
    assert zonefile.included("z.zone", base=str(tmp_path), kept=kept) == (["sub/a.inc", "sub/b.inc"], [])
    assert kept == {name: (tmp_path / name).read_bytes() for name in ("z.zone", "sub/a.inc", "sub/b.inc")}


def test_included_bytes_are_capped_and_the_zone_file_itself_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MAX_INCLUDED_BYTES through includes, a problem (the rest not even read); the
    zone file itself is read whole, whatever its size."""
    monkeypatch.setattr(zonefile, "MAX_INCLUDED_BYTES", 300)
    (tmp_path / "small.inc").write_text("a IN A 192.0.2.1\n")  # 17 bytes
    (tmp_path / "big.inc").write_text("".join(f"h{i} IN A 192.0.2.{i}\n" for i in range(40)))  # over 300
    hosts = "".join(f"host{i} IN A 192.0.2.{i}\n" for i in range(40))  # the zone: over 300 bytes
    rrsets = load(tmp_path, HEAD + hosts + "$INCLUDE small.inc\n")
    assert ("host39.example.test.", TYPE_A) in rrsets and ("a.example.test.", TYPE_A) in rrsets
    found = problems(tmp_path, HEAD + hosts + "$INCLUDE small.inc\n$INCLUDE big.inc\n")
    assert found == ["46: the files included by the zone are over 300 bytes"]
