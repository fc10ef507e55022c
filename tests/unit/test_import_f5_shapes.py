"""Input shapes F5 operators hand the importer: `tmsh list gtm one-line` listings, files saved
on Windows (CRLF, a byte-order mark, UTF-16), a whole bigip.conf from a UCS (iRules, a cli
script, APM policies, sys settings beside the GTM objects), and pasted listings with junk.
Each is imported with the real CLI or `f5import.run` and then asked what F5 would answer (the
corpus files' decision tables, in tests/data/f5/corpus/shape-*.yaml, ask more)."""

from __future__ import annotations

import codecs
import collections
import gzip
from pathlib import Path
from typing import Any

import pytest
import yaml

from gtmcluster.cli import main as cli
from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.importers import f5import
from gtmcluster.lb.trace import Action
from tests.support.f5asker import CORPUS, Asker, imported

SECTIONS = ("datacenters", "monitors", "virtual_servers", "regions", "pools", "wideips")


def objects(result: f5import.Result) -> dict[str, Any]:
    """What an import made, by section (values only: where each came from is left out)."""
    imp = result.imported
    out: dict[str, Any] = {s: {k: e.value for k, e in getattr(imp, s).items()} for s in SECTIONS}
    out["topology"] = [e.value for e in imp.topology]
    return out


def findings(result: f5import.Result, lines: bool = True) -> list[tuple[object, ...]]:
    """The findings without the file's name (with their line numbers unless *lines* is false)."""
    return [
        ((f.where.rpartition(":")[2],) if lines else ()) + (f.level, f.what, f.why) for f in result.imported.findings
    ]


# -- one-line listings -----------------------------------------------------------------------


def test_a_one_line_listing_imports_as_its_multi_line_twin() -> None:
    """`tmsh list gtm one-line` (every object on one line) gives the objects and findings
    of the same configuration listed one setting a line (on main: no wide IP, servers LOST
    for want of a data center, a monitor read without its recv)."""
    one = f5import.run([str(CORPUS / "shape-oneline.conf")])
    multi = f5import.run([str(CORPUS / "shape-multiline.conf")])
    assert objects(one) == objects(multi)
    assert findings(one, lines=False) == findings(multi, lines=False)
    assert sorted(one.imported.wideips) == ["api.example.com", "shop.example.com", "www.example.com"]
    assert one.imported.pools["p_ratio"].value["members"] == [
        {"virtual_server": "lb1.vs_www", "ratio": 3},
        "lb2.vs_www",
    ]
    assert not one.imported.failed


@pytest.fixture(scope="module")
def oneline(tmp_path_factory: pytest.TempPathFactory) -> Config:
    return imported(tmp_path_factory.mktemp("oneline"), "corpus/shape-oneline.conf")


def test_a_one_line_listing_answers_as_f5(oneline: Config) -> None:
    """The one-line listing, imported by the CLI (exit 0, `check` OK), answers as F5 would:
    ratio 3:1 over new resolvers; topology sends a resolver in the inside region to DC1 and
    the rest to DC2 (the 0.0.0.0/0 record); with both api members down, the wide IP's
    global availability takes the next pool, whose first member by member-order is lb2's."""
    asker = Asker(oneline)
    counts = collections.Counter(asker.answer("www.example.com", f"198.18.{i}.53")[0] for i in range(40))
    assert counts == {"192.0.2.1": 30, "198.51.100.2": 10}
    assert asker.answer("api.example.com", "10.20.30.40") == ["192.0.2.3"]
    assert asker.answer("api.example.com", "172.16.9.9") == ["192.0.2.3"]
    assert asker.answer("api.example.com", "8.8.8.8") == ["198.51.100.4"]
    d = asker.ask("api.example.com", "10.20.30.40")
    assert (d.pool, d.method) == ("p_topo", "topology")
    assert asker.answer("api2.example.com", "10.20.30.40") == ["192.0.2.3"]  # (the alias)
    asker.availability.down = {"lb1.vs_api", "lb2.vs_api"}
    d = asker.ask("api.example.com", "10.20.30.40")
    assert (d.pool, [str(a) for a in d.addresses]) == ("p_ga", ["198.51.100.2"])
    asker.availability.down |= {"lb1.vs_www", "lb2.vs_www"}
    d = asker.ask("api.example.com", "10.20.30.40")
    assert (d.action, [str(a) for a in d.addresses], d.method) == (Action.ANSWER, ["203.0.113.53"], "fallback_ip")


# -- files saved on Windows ------------------------------------------------------------------


def windows(text: str, codec: str) -> bytes:
    """*text* as Notepad saves it: CRLF line ends, the byte-order mark of *codec*."""
    bom = {
        "utf-8": codecs.BOM_UTF8,
        "utf-16-le": codecs.BOM_UTF16_LE,
        "utf-16-be": codecs.BOM_UTF16_BE,
        "utf-32-le": codecs.BOM_UTF32_LE,
    }[codec]
    return bom + text.replace("\n", "\r\n").encode(codec)


@pytest.mark.parametrize("codec", ["utf-8", "utf-16-le", "utf-16-be", "utf-32-le"])
@pytest.mark.parametrize(
    "twin",
    [
        "shape-multiline.conf",  # starts with '#TMSH-VERSION: 15.1.0'
        "shape-multiline.conf:bare",  # starts with 'gtm datacenter', as a pasted listing does
        "shape-oneline.conf",
    ],
)
def test_a_file_saved_on_windows_imports_as_its_lf_twin(tmp_path: Path, twin: str, codec: str) -> None:
    """CRLF line ends and a byte-order mark (UTF-8, UTF-16 or UTF-32) change nothing: the same
    objects and findings at the same lines (on main the mark glued to the first word hid the
    first stanza, DC1, and with it the server in it; UTF-16 read as nothing)."""
    name, _, variant = twin.partition(":")
    text = (CORPUS / name).read_text()
    if variant == "bare":
        text = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))
    lf, saved = tmp_path / "lf.conf", tmp_path / "saved.conf"
    lf.write_text(text)
    saved.write_bytes(windows(text, codec))
    a, b = f5import.run([str(lf)]), f5import.run([str(saved)])
    assert objects(b) == objects(a)
    assert findings(b) == findings(a)
    assert "DC1" in b.imported.datacenters and "www.example.com" in b.imported.wideips
    assert not any("\ufeff" in f.what or "\r" in f.what for f in b.imported.findings)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            "gtm datacenter /Common/DC1 { }\n".encode("utf-16-le"),
            "{file}:1: a NUL byte: not text in UTF-8 (a UTF-16 file needs its byte-order mark: save it as UTF-8)",
        ),
        (
            gzip.compress(b"config/bigip_gtm.conf", mtime=0),
            "{file}: a gzip archive (a UCS?), not text: give the files in it "
            "(config/bigip_gtm.conf, config/bigip.conf)",
        ),
    ],
    ids=["utf-16-without-its-mark", "gzip"],
)
def test_what_is_not_text_is_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes, message: str
) -> None:
    """UTF-16 without its mark, or a UCS archive given whole: one line, exit 1, nothing out."""
    path = tmp_path / "in.conf"
    path.write_bytes(data)
    assert cli.main(["import", "f5", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.err == "gtmcluster import f5: " + message.format(file=path) + "\n"
    assert captured.out == ""


# -- a whole bigip.conf from a UCS -----------------------------------------------------------


def cli_import(tmp_path: Path, capsys: pytest.CaptureFixture[str], *files: str) -> tuple[int, str, list[str]]:
    """The real CLI on *files*: exit code, the config, the stderr lines."""
    out = tmp_path / "cluster.yaml"
    code = cli.main(["import", "f5", *(str(CORPUS / f) for f in files), "-o", str(out), "--no-zone-files"])
    return code, out.read_text(), capsys.readouterr().err.splitlines()


def loaded(folder: Path, result: f5import.Result) -> Config:
    """The config an import made (with its zone files), loaded as a node would."""
    for relative, text in {"cluster.yaml": result.text, **result.zone_files}.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)
    return load(folder / "cluster.yaml")


def uncommented(config: str) -> list[str]:
    return [line for line in config.splitlines() if not line.lstrip().startswith("#")]


def test_a_whole_bigip_conf_imports_its_gtm_part(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A bigip.conf with APM policies (a `{` with no name before it), a cli script and LTM
    iRules (Tcl at column 0, quotes and braces in comments, `"\\{"`) and sys settings beside
    its GTM objects imports them as the GTM part alone would: same config, same exit code,
    plus one summary line of what was skipped (on main: aborted at the APM policy)."""
    code, config, err = cli_import(tmp_path / "whole", capsys, "shape-ucs-bigip.conf")
    alone_code, alone, alone_err = cli_import(tmp_path / "alone", capsys, "shape-ucs-gtm.conf")
    assert (code, alone_code) == (0, 0)
    assert uncommented(config) == uncommented(alone)
    whole = str(CORPUS / "shape-ucs-bigip.conf")
    summary = [line for line in err if "not GTM configuration" in line]
    assert summary == [
        f"{whole}:6: not mapped: 10 statements that are not GTM configuration: skipped (apm 3, ltm 3, sys 3, cli 1)"
    ]
    assert len(err) == len(alone_err) + 1
    assert [line for line in err if line.startswith(f"{whole}:52: not mapped: gtm rule /Common/internal_view: ")]
    assert err[-1].endswith("1 wide IPs, 1 pools, 2 virtual servers, 0 topology records; 4 findings, 0 LOST, 0 CHANGED")


@pytest.fixture(scope="module")
def ucs(tmp_path_factory: pytest.TempPathFactory) -> Config:
    return imported(tmp_path_factory.mktemp("ucs"), "corpus/shape-ucs-bigip.conf")


def test_the_gtm_part_of_a_bigip_conf_answers_as_f5(ucs: Config) -> None:
    """Global availability: lb2's server first (member-order 0), lb1's when it is down."""
    asker = Asker(ucs)
    assert asker.answer("www.example.com", "192.0.2.200") == ["198.51.100.10"]
    asker.availability.down = {"lb2.vs_web"}
    assert asker.answer("www.example.com", "192.0.2.200") == ["192.0.2.10"]


LTM_ONLY = """#TMSH-VERSION: 15.1.0
ltm pool /Common/web_pool {
    members {
        /Common/10.1.1.10:80 {
            address 10.1.1.10
        }
    }
}
ltm rule /Common/r {
when HTTP_REQUEST {
  HTTP::redirect "https://[HTTP::host][HTTP::uri]"
}
}
sys global-settings {
    hostname bigip1.example.com
}
"""


def test_a_file_without_gtm_configuration_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Alone, a bigip.conf without GTM objects imports nothing: LOST, exit 1. Beside a
    GTM file (a UCS's config/ given whole) it is a note, and the GTM file decides."""
    ltm = tmp_path / "bigip.conf"
    ltm.write_text(LTM_ONLY)
    assert cli.main(["import", "f5", str(ltm), "-o", str(tmp_path / "a.yaml"), "--no-zone-files"]) == 1
    err = capsys.readouterr().err.splitlines()
    note = (
        f"{ltm}:2: not mapped: 3 statements that are not GTM configuration: skipped (ltm 2, sys 1); "
        "the file holds no GTM configuration"
    )
    assert err[:2] == [note, f"{ltm}:1: LOST: the input: no GTM configuration (gtm ...) in any file: nothing imported"]
    args = [str(ltm), str(CORPUS / "shape-ucs-gtm.conf"), "-o", str(tmp_path / "b.yaml"), "--no-zone-files"]
    assert cli.main(["import", "f5", *args]) == 0
    assert note in capsys.readouterr().err.splitlines()


# -- junk and a broken object: per stanza ----------------------------------------------------


def test_junk_and_a_cut_object_cost_only_themselves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A listing pasted with its prompts, one object cut inside a quoted string: that object
    is LOST at its line, the prompts are summed up, everything else is imported and answers
    (on main: the whole import stopped at the cut string)."""
    code, _, err = cli_import(tmp_path, capsys, "shape-junk.conf")
    junk = str(CORPUS / "shape-junk.conf")
    assert code == 1
    assert err[:2] == [
        f"{junk}:4: LOST: gtm pool a /Common/p_cut: a quoted string is never closed: not imported",
        f"{junk}:1: not mapped: 2 statements that are not GTM configuration: skipped (other 2)",
    ]
    result = f5import.run([junk])
    assert sorted(result.imported.pools) == ["p_www"]
    assert sorted(result.imported.virtual_servers) == ["lb1.vs_old", "lb1.vs_www"]
    asker = Asker(loaded(tmp_path / "run", result))
    assert asker.answer("www.example.com", "192.0.2.200") == ["192.0.2.1"]


def test_control_characters_in_the_input_never_break_the_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A control character in a description or a name (fuzz/f5_import found \\x01 and \\x03)
    is written escaped in the comments: the config is YAML and loads (before, PyYAML refused
    the whole file: "special characters are not allowed")."""
    text = (
        'gtm datacenter /Common/DC1 {\n    description "rack\x01 \x03 row\u2028b"\n}\n'
        "gtm server /Common/lb1 {\n    datacenter /Common/DC1\n    virtual-servers {\n"
        "        /Common/v\x02s {\n            destination 192.0.2.1:80\n        }\n    }\n}\n"
        "gtm pool a /Common/p {\n    members {\n        /Common/lb1:/Common/v\x02s { }\n    }\n}\n"
        "gtm wideip a /Common/www.example.com {\n    pools {\n        /Common/p { }\n    }\n}\n"
    )
    path = tmp_path / "ctl\x01.conf"
    path.write_text(text)
    result = f5import.run([str(path)])
    assert yaml.safe_load(result.text)["wideips"]["www.example.com"]["pools"] == ["p"]
    assert "rack\\x01 \\x03 row b" in result.text
    assert not result.imported.failed, [f.render() for f in result.imported.findings]
    assert f"# F5 {tmp_path}/ctl\\x01.conf:1:" in result.text
    # the findings on the terminal: escaped too (an ESC from a file obeyed by no terminal)
    (tmp_path / "esc.conf").write_text(text.replace("\x02", "\x1b[2J"))
    cli.main(["import", "f5", str(tmp_path / "esc.conf"), "-o", str(tmp_path / "out.yaml")])
    err = capsys.readouterr().err
    assert "\x1b" not in err and "lb1:v\\x1b[2Js" in err
