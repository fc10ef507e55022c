"""The config bundle (config sync, issue 15): what it holds, what it refuses, how it
travels, and which of two is newer."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gtmcluster.config import sharing
from gtmcluster.config.problems import ConfigError
from gtmcluster.config.source import yamlsrc
from gtmcluster.groupconfig import bundle
from gtmcluster.groupconfig.bundle import BadBundle, Bundle
from gtmcluster.runtime import files as configfiles
from tests.support import configs
from tests.support.hostilefiles import DEV_ZERO, make_fifo, memory_capped, released_after


def sample(tmp_path: Path) -> Path:
    """The test config plus a region read from a file in a subfolder and an https
    monitor with its own CA file."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    data = configs.base()
    data["regions"]["listed"] = [{"file": "lists/r.txt"}, "192.0.2.0/24"]
    data["monitors"] = {"web": {"type": "https", "ca_file": "ca/web.pem"}}
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "r.txt").write_text("198.18.0.0/15\n")
    (tmp_path / "ca").mkdir()
    (tmp_path / "ca" / "web.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    return configs.write(tmp_path, data)


def test_a_bundle_holds_the_config_and_every_file_it_names(tmp_path: Path) -> None:
    path = sample(tmp_path)
    made = bundle.make(path, generation=3, based_on=2, publisher="n1", published_at=1000.0)
    assert made.main == "cluster.yaml"
    assert sorted(made.files) == ["ca/web.pem", "cluster.yaml", "example.test.zone", "lists/r.txt"]
    assert made.files["lists/r.txt"] == b"198.18.0.0/15\n"
    assert made.config_text == path.read_bytes()
    # the digest is of the files alone: the same files from another member, another time
    again = bundle.make(path, generation=9, based_on=8, publisher="n2", published_at=2000.0)
    assert again.digest == made.digest
    (tmp_path / "lists" / "r.txt").write_text("198.18.0.0/16\n")
    assert bundle.make(path, 3, 2, "n1", 1000.0).digest != made.digest


@pytest.mark.parametrize(
    ("text", "names"),
    [
        # the sections in any order, a sequence at column 0
        ("zones:\n- {origin: a.test, file: a.zone}\nregions:\n  r: [{file: r.txt}]\n", ["a.zone", "r.txt"]),
        # a nested key is no section
        ("regions:\n  r: [10.0.0.0/8]\nother:\n  zones: [{file: no.zone}]\nzones: [{file: b.zone}]\n", ["b.zone"]),
        # an alias to an anchor in another section
        ("shared: &z {origin: c.test, file: c.zone}\nzones: [*z]\n", ["c.zone"]),
        # "zones" as the start of a longer key is not the key
        ("zonesx: [{file: x.zone}]\nmonitors: {m: {type: https, ca_file: m.pem}}\n", ["m.pem"]),
        # quoted keys are the same keys (issue 30: a text search missed them)
        ("\"zones\": [{origin: q.test, file: q.zone}]\n'geoip': {country: c.mmdb}\n", ["q.zone", "c.mmdb"]),
        # what looks like a key at the start of a line inside a quoted string is not one
        ('x: "a\nzones: [{file: in-a-string.zone}]\ny: b"\nzones: [{file: real.zone}]\n', ["real.zone"]),
        # a merge key brings a mapping's keys in
        ("base: &m {type: https, ca_file: merged.pem}\nmonitors: {m: {<<: *m}}\n", ["merged.pem"]),
    ],
)
def test_the_files_named_are_found_by_parsing_the_yaml(text: str, names: list[str]) -> None:
    found = [name for _, name in sharing.referenced(yamlsrc.parse("c.yaml", text.encode()))]
    assert found == names


def test_a_quoted_zones_key_is_carried_and_its_names_checked(tmp_path: Path) -> None:
    """Issue 30, defect 8: ``"zones":`` is the zones section; its file travels, and an
    absolute name in it is refused."""
    data = configs.base()
    path = configs.write(tmp_path, data)
    text = path.read_text().replace("\nzones:", '\n"zones":')
    assert '\n"zones":' in text
    path.write_text(text)
    assert sorted(bundle.make(path, 1, 0, "n1", 0.0).files) == ["cluster.yaml", "example.test.zone"]
    path.write_text(text.replace("file: example.test.zone", f"file: {tmp_path / 'example.test.zone'}"))
    with pytest.raises(ConfigError, match=r"zones\[0\]\.file: .*an absolute path cannot be shared"):
        bundle.make(path, 1, 0, "n1", 0.0)


def test_a_name_that_leaves_the_folder_or_a_missing_file_is_refused_with_its_key_path(tmp_path: Path) -> None:
    """Every problem at once, in the config's own form: FILE: key.path: problem."""
    data = configs.base()
    data["regions"]["up"] = [{"file": "../outside.txt"}]
    data["regions"]["abs"] = {"file": "/etc/hosts"}
    data["zones"].append({"origin": "other.test", "file": "missing.zone"})
    path = configs.write(tmp_path, data)
    with pytest.raises(ConfigError) as caught:
        bundle.make(path, 1, 0, "n1", 0.0)
    text = str(caught.value)
    assert f"{path}: regions.up[0].file: ../outside.txt: a path that leaves the config's folder" in text
    assert f"{path}: regions.abs.file: /etc/hosts: an absolute path cannot be shared" in text
    assert f"{path}: zones[1].file: cannot read" in text and "missing.zone" in text


def test_a_bundle_over_the_limit_is_refused(tmp_path: Path) -> None:
    path = sample(tmp_path)
    with pytest.raises(ConfigError, match="over the limit of 100"):
        bundle.make(path, 1, 0, "n1", 0.0, max_bytes=100)


def test_the_config_text_parsed_is_the_text_carried(tmp_path: Path) -> None:
    """The config is read once: a save while its text is parsed (or, in a member's reload,
    while the YAML child parses it) changes neither the files the bundle holds nor its
    config: both come from the text parsed."""
    path = sample(tmp_path)
    first = path.read_bytes()
    saved = yaml.safe_load(first)
    saved["regions"]["listed"] = ["192.0.2.0/24"]  # (lists/r.txt no longer named)

    def saved_meanwhile(file: str, text: bytes) -> object:
        path.write_text(yaml.safe_dump(saved, sort_keys=False))
        return yamlsrc.parse(file, text)

    made, raw = bundle.read_and_make(path, 1, 0, "n1", 0.0, parse=saved_meanwhile)
    assert made.config_text == first and raw == yaml.safe_load(first)
    assert "lists/r.txt" in made.files
    assert bundle.check(made, raw) == []


@pytest.mark.parametrize("what", ["fifo", "dev_zero"])
def test_a_config_path_that_is_no_regular_file_is_refused_at_once(tmp_path: Path, what: str) -> None:
    """A FIFO or a link to /dev/zero at the config's own path: one problem, neither waited
    on nor read without end."""
    path = tmp_path / "cluster.yaml"
    if what == "fifo":
        make_fifo(path)
    else:
        path.symlink_to(DEV_ZERO)
    kind = "a FIFO" if what == "fifo" else "a character device"
    with released_after(path, 2.0) if what == "fifo" else memory_capped(), pytest.raises(ConfigError) as caught:
        bundle.make(path, 1, 0, "n1", 0.0)
    assert [str(p) for p in caught.value.problems] == [
        f"{path}: (top level): cannot read the config: {kind}, not a regular file"
    ]


def test_every_file_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The config, its zone file, the file the zone includes and the other files it names
    are each opened once to make the bundle (a zone file read for its includes is carried
    as read), and carried whole."""
    path = sample(tmp_path)
    (tmp_path / "example.test.zone").write_text(configs.ZONE + "$INCLUDE hosts.inc\n")
    (tmp_path / "hosts.inc").write_text("near IN A 192.0.2.8\n")
    opened: list[str] = []
    real_open = configfiles._open

    def counted(name: str, kind: configfiles.Kind) -> int:
        opened.append(os.path.relpath(name, tmp_path))
        return real_open(name, kind)

    monkeypatch.setattr(configfiles, "_open", counted)
    made = bundle.make(path, 1, 0, "n1", 0.0)
    assert sorted(opened) == ["ca/web.pem", "cluster.yaml", "example.test.zone", "hosts.inc", "lists/r.txt"]
    assert all(made.files[name] == (tmp_path / name).read_bytes() for name in opened)


def test_a_bundle_travels_and_is_written_out_as_the_same_files(tmp_path: Path) -> None:
    made = bundle.make(sample(tmp_path / "a"), 4, 3, "n2", 1234.5)
    received = bundle.decode(bundle.encode(made))
    assert received == made
    written = bundle.write(received, tmp_path / "out")
    assert written == tmp_path / "out" / "cluster.yaml"
    for name, data in made.files.items():
        assert (tmp_path / "out" / name).read_bytes() == data
    assert yaml.safe_load(written.read_text())["regions"]["listed"][0] == {"file": "lists/r.txt"}


def _good(tmp_path: Path) -> bytes:
    return bundle.encode(bundle.make(sample(tmp_path), 2, 1, "n1", 10.0))


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda doc: doc.update(format=99), "format"),
        (lambda doc: doc.update(generation="2"), "wrong type"),
        (lambda doc: doc.update(generation=0), "wrong type"),
        (lambda doc: doc["files"].update({"../x": ""}), "leaves the config's folder"),
        (lambda doc: doc["files"].update({"/etc/x": ""}), "absolute path"),
        (lambda doc: doc["files"].update({"x": "not base64!"}), "not base64"),
        (lambda doc: doc["files"].update({"extra": "AAAA"}), "does not match its files"),
        (lambda doc: doc.update(main="other.yaml"), "not among its files"),
        (
            lambda doc: doc["files"].update({"ca/web.pem/x": ""}),
            "ca/web.pem: a file of the bundle that is also the folder",
        ),
    ],
)
def test_a_bundle_received_is_checked_before_anything_uses_it(tmp_path: Path, change: object, problem: str) -> None:
    doc = json.loads(_good(tmp_path))
    change(doc)  # type: ignore[operator]
    with pytest.raises(BadBundle, match=problem):
        bundle.decode(json.dumps(doc).encode())


def test_a_bundle_received_too_big_is_refused_before_it_is_parsed() -> None:
    with pytest.raises(BadBundle, match="over the limit"):
        bundle.decode(b"[" * 200_000, max_bytes=1000)  # (parsed, this would recurse)
    with pytest.raises(BadBundle, match="not JSON"):
        bundle.decode(b"{")


names = st.from_regex(r"[a-z]{1,6}(/[a-z]{1,6}){0,2}", fullmatch=True)
file_maps = st.dictionaries(names, st.binary(max_size=64), min_size=1, max_size=5).filter(
    lambda files: not any(other.startswith(name + "/") for name in files for other in files)  # (no file a folder)
)


@settings(max_examples=100, deadline=None)
@given(file_maps, st.integers(1, 10**6), st.sampled_from(["n1", "n2", "n3"]), st.floats(0, 2e9))
def test_any_bundle_decodes_to_itself(files: dict[str, bytes], generation: int, publisher: str, at: float) -> None:
    main = sorted(files)[0]
    made = Bundle(main, files, generation, generation - 1, publisher, at)
    assert bundle.decode(bundle.encode(made)) == made


bundles = st.builds(
    lambda gen, pub, content: Bundle("c.yaml", {"c.yaml": content}, gen, gen - 1, pub, 0.0),
    st.integers(1, 4),
    st.sampled_from(["n1", "n2", "n3"]),
    st.binary(max_size=4),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(bundles, min_size=1, max_size=6))
def test_every_member_keeps_the_same_newest_bundle_whatever_the_order_of_delivery(delivered: list[Bundle]) -> None:
    """Each member folds `newer` over the bundles as they reach it: every order of
    delivery ends with the same bundle, one of the highest generation."""
    kept = set()
    for order in itertools.islice(itertools.permutations(delivered), 50):
        held: Bundle | None = None
        for b in order:
            held = bundle.newer(held, b)
        assert held is not None
        kept.add((held.generation, held.publisher, held.digest))
    assert len(kept) == 1
    ((generation, _, _),) = kept
    assert generation == max(b.generation for b in delivered)
