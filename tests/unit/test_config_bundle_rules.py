"""Issue 30's rules for config sync bundles, on a node's real routes (``POST
/api/v1/config``, bytes in and out) and at start:

- a bundle holds exactly the files its config names (and the files its zones
  ``$INCLUDE``): one that carries more is refused, with the file's name;
- a bundle never carries an inline secret (``api.token``, ``tsig_keys.*.secret``);
- a bundle never changes a member's own ground (certificates, API TLS and token, state and
  log folders, query log), and names a new file of the member's own (a TSIG key's
  ``secret_file``) only inside the member's folder, never in its state folder;
- ``$INCLUDE``d files travel with their zone.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from twisted.logger import capturedLogs

from gtmcluster.cli import check
from gtmcluster.config.load import load
from gtmcluster.config.problems import ConfigError
from gtmcluster.dnsdata import names
from gtmcluster.groupconfig import bundle
from gtmcluster.groupconfig.bundle import Bundle
from gtmcluster.groupconfig.shared import at_start
from gtmcluster.groupconfig.shelf import Shelf
from gtmcluster.nodeservice import NodeService
from gtmcluster.runtime import files as configfiles
from tests.support import configs
from tests.unit.test_api_admin import ask
from tests.unit.test_api_config import SHOP, made, sharing, with_shop

OWN = "a member's own ground never comes from the group's config"
KEY = "bWFrZS1hLXJlYWwta2V5LXdpdGgtdHNpZy1rZXlnZW4="


@pytest.fixture
def raw(tmp_path: Path) -> dict[str, Any]:
    raw = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    return raw


@pytest.fixture
def service(tmp_path: Path, raw: dict[str, Any]) -> NodeService:
    return sharing(tmp_path, raw)


def nothing_held(service: NodeService, tmp_path: Path) -> bool:
    return (
        ask(service, "GET", "/api/v1/config/history")[1]["bundles"] == []
        and list((tmp_path / "state" / "bundles").glob("*/files")) == []
    )


def test_a_push_carrying_a_file_its_config_does_not_name_is_refused(
    service: NodeService, tmp_path: Path, raw: dict[str, Any]
) -> None:
    honest = bundle.decode(made(tmp_path, with_shop(raw)))
    files = {**honest.files, "certs/evil-ca.pem": b"-----BEGIN CERTIFICATE-----\n", "certs/n1.key": b"key"}
    code, answer = ask(service, "POST", "/api/v1/config", bundle.encode(Bundle("gtm.yaml", files, 1, 0, "n1", 1.0)))
    assert code == 422, answer
    for name in ("certs/evil-ca.pem", "certs/n1.key"):
        assert f"gtm.yaml: (top level): {name}: the bundle carries a file its config does not name" in answer["error"]
    assert SHOP not in service.node.config.wideips and nothing_held(service, tmp_path)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda raw: raw.update(api={"token": "an-inline-token-0123"}),
            "gtm.yaml: api.token: an inline token is not published to the group (a bundle never carries a "
            "secret): name the member's own file with api.token_file, or set sync_group.config_sync: false",
        ),
        (
            lambda raw: raw.update(tsig_keys={"xfr": {"secret": KEY}}),
            "gtm.yaml: tsig_keys.xfr.secret: an inline secret is not published to the group (a bundle never "
            "carries a secret): name the member's own file with secret_file, or set sync_group.config_sync: false",
        ),
    ],
)
def test_a_push_with_an_inline_secret_is_refused(
    service: NodeService, tmp_path: Path, raw: dict[str, Any], change: Any, expected: str
) -> None:
    changed = with_shop(raw)
    change(changed)
    code, answer = ask(service, "POST", "/api/v1/config", made(tmp_path, changed))
    assert code == 422 and expected in answer["error"], answer
    assert SHOP not in service.node.config.wideips and nothing_held(service, tmp_path)


def test_a_sighup_does_not_publish_an_inline_secret(service: NodeService, tmp_path: Path, raw: dict[str, Any]) -> None:
    changed = with_shop(raw)
    changed["tsig_keys"] = {"xfr": {"secret": KEY}}
    Path(service.config_path).write_text(yaml.safe_dump(changed, sort_keys=False))
    problems: list[list[str]] = []
    service.reload().addCallback(problems.append)
    assert any("tsig_keys.xfr.secret: an inline secret is not published" in p for p in problems[0]), problems
    assert SHOP not in service.node.config.wideips and nothing_held(service, tmp_path)


def _with_token_file(raw: dict[str, Any], tmp_path: Path) -> None:
    configs.write_secret(tmp_path / "token", "a-token-of-the-members-own\n")
    raw["api"] = {"token_file": "token"}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda raw, tmp: raw["sync_group"].update(tls={"ca": "state/bundles/x/files/ca.pem"}), "sync_group.tls"),
        (_with_token_file, "the API token changed from none (the member's own state_dir/api-token) to the file"),
        (lambda raw, tmp: raw.update(state_dir=str(tmp / "elsewhere")), "state_dir changed"),
        (lambda raw, tmp: raw.update(log_dir="other-logs"), "log_dir changed"),
        (
            lambda raw, tmp: raw.update(dns_server={"query_log": {"path": "var/log/gtm.yaml", "keep": 0}}),
            "dns_server.query_log changed (now path ",
        ),
        (
            lambda raw, tmp: raw.update(dns_server={"query_log": {"path": "q/x.dnstap", "dir": "q"}}),
            "dns_server.query_log changed (now path ",
        ),
    ],
)
def test_a_push_that_changes_the_members_own_ground_is_refused(
    service: NodeService, tmp_path: Path, raw: dict[str, Any], change: Any, expected: str
) -> None:
    """Issue 30, rule 3: refused with the reason, nothing changed, no file touched."""
    changed = with_shop(raw)
    change(changed, tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    code, answer = ask(service, "POST", "/api/v1/config", made(tmp_path, changed))
    assert code == 422, answer
    assert expected in answer["error"] and OWN in answer["error"], answer["error"]
    assert SHOP not in service.node.config.wideips and nothing_held(service, tmp_path)
    assert {p: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


@pytest.mark.parametrize(
    ("secret_file", "problem"),
    [
        ("secrets/xfr.key", None),
        ("{tmp}/secrets/xfr.key", "a file of the member's own that it does not use now is named inside its own folder"),
        ("secrets/../secrets/xfr.key", "(no absolute path, no '..')"),
        ("state/xfr.key", "a file of the member's own cannot be in its state_dir or log_dir"),
    ],
)
def test_a_new_tsig_key_names_its_secret_file_inside_the_members_folder(
    service: NodeService, tmp_path: Path, raw: dict[str, Any], secret_file: str, problem: str | None
) -> None:
    """A new key's secret stays in a file of each member's own (the bundle names it): taken
    inside the member's folder, and not where it keeps the bundles it receives."""
    for folder in (tmp_path / "secrets", tmp_path / "state"):
        folder.mkdir(exist_ok=True)
        configs.write_secret(folder / "xfr.key", KEY + "\n")
    changed = with_shop(raw)
    changed["tsig_keys"] = {"xfr": {"secret_file": secret_file.format(tmp=tmp_path)}}
    code, answer = ask(service, "POST", "/api/v1/config", made(tmp_path, changed))
    if problem is None:
        assert code == 200, answer
        assert SHOP in service.node.config.wideips
    else:
        assert code == 422 and problem in answer["error"], answer
        assert SHOP not in service.node.config.wideips


def test_included_zone_files_travel_with_their_zone(service: NodeService, tmp_path: Path, raw: dict[str, Any]) -> None:
    """The bundle carries hosts.inc under the zone's folder; the member answers from it; a
    bundle without it is refused, naming it (not where the member wrote the bundle)."""
    folder = tmp_path / "edit"
    (folder / "zones").mkdir(parents=True)
    (folder / "zones" / "example.test.zone").write_text(configs.ZONE + "$INCLUDE hosts.inc\n")
    (folder / "zones" / "hosts.inc").write_text("included IN A 192.0.2.77\n")
    changed = copy.deepcopy(raw)
    changed["zones"][0]["file"] = "zones/example.test.zone"
    (folder / "gtm.yaml").write_text(yaml.safe_dump(changed, sort_keys=False))
    pushed = bundle.make(folder / "gtm.yaml", 1, 0, "n1", 1.0)
    assert sorted(pushed.files) == ["gtm.yaml", "zones/example.test.zone", "zones/hosts.inc"]
    files = {k: v for k, v in pushed.files.items() if k != "zones/hosts.inc"}
    code, answer = ask(service, "POST", "/api/v1/config", bundle.encode(Bundle("gtm.yaml", files, 1, 0, "n1", 1.0)))
    assert code == 422
    assert "gtm.yaml: zones[0].file: zones/example.test.zone:" in answer["error"]
    assert "cannot read the included file zones/hosts.inc" in answer["error"] and "bundles" not in answer["error"]
    code, answer = ask(service, "POST", "/api/v1/config", bundle.encode(pushed))
    assert code == 200, answer
    zone = next(iter(service.node.config.zones))
    assert zone.exists(names.key(names.from_text("included.example.test")))


@pytest.mark.parametrize("otherwise_good", [True, False])
def test_a_bundle_written_out_holds_what_its_zones_include_and_nothing_more(
    tmp_path: Path, raw: dict[str, Any], otherwise_good: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read to run, a bundle's files are those its config names and its zones include
    (nested, in a subfolder: known from reading the zones, each read once), and a file
    besides them is refused by name; the same beside another problem (the includes then
    found by reading the zone files again)."""
    folder = tmp_path / "edit"
    (folder / "zones" / "inc").mkdir(parents=True)
    (folder / "zones" / "example.test.zone").write_text(configs.ZONE + "$INCLUDE inc/a.inc\n")
    (folder / "zones" / "inc" / "a.inc").write_text("$INCLUDE b.inc\na IN A 192.0.2.77\n")
    (folder / "zones" / "inc" / "b.inc").write_text("b IN A 192.0.2.78\n")
    changed = copy.deepcopy(raw)
    changed["zones"][0]["file"] = "zones/example.test.zone"
    if not otherwise_good:
        changed["bogus"] = 1
    (folder / "gtm.yaml").write_text(yaml.safe_dump(changed, sort_keys=False))
    honest = bundle.make(folder / "gtm.yaml", 1, 0, "n1", 1.0)
    assert sorted(honest.files) == ["gtm.yaml", "zones/example.test.zone", "zones/inc/a.inc", "zones/inc/b.inc"]
    own = tmp_path / "own"
    if otherwise_good:
        load(bundle.write(honest, tmp_path / "honest"), own)
    stray = Bundle("gtm.yaml", {**honest.files, "zones/inc/c.inc": b"c IN A 192.0.2.79\n"}, 1, 0, "n1", 1.0)
    path = bundle.write(stray, tmp_path / "stray")
    opened: list[str] = []
    real_open = configfiles._open

    def counted(name: str, kind: configfiles.Kind) -> int:
        opened.append(name)
        return real_open(name, kind)

    monkeypatch.setattr(configfiles, "_open", counted)
    with pytest.raises(ConfigError) as caught:
        load(path, own)
    found = [str(p) for p in caught.value.problems]
    read_again = 0 if otherwise_good else 1
    for name in ("example.test.zone", "inc/a.inc", "inc/b.inc"):
        assert opened.count(str(path.parent / "zones" / name)) == 1 + read_again, opened
    assert (
        f"{path}: (top level): zones/inc/c.inc: the bundle carries a file its config does not name (refused: a "
        "bundle holds exactly the files its config names and their zones include) (line 1)"
    ) in found
    assert len(found) == (1 if otherwise_good else 2), found


def test_check_and_the_bundle_agree_on_includes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`check` says what a push would be refused for (issue 30, defect 7a)."""
    outside = tmp_path / "outside.inc"
    outside.write_text("far IN A 192.0.2.9\n")
    path = configs.write(tmp_path / "c", configs.base(), zone=configs.ZONE + f"$INCLUDE {outside}\n")
    assert check.run(argparse.Namespace(config=str(path))) == 1
    err = capsys.readouterr().err
    assert "zones[0].file: " in err and "$INCLUDE names an absolute path" in err
    (tmp_path / "c" / "hosts.inc").write_text("near IN A 192.0.2.8\n")
    (tmp_path / "c" / "example.test.zone").write_text(configs.ZONE + "$INCLUDE hosts.inc\n")
    assert check.run(argparse.Namespace(config=str(path))) == 0
    assert "hosts.inc" in bundle.make(path, 1, 0, "n1", 0.0).files


def test_a_held_bundle_that_changes_the_members_own_ground_does_not_run_at_start(
    tmp_path: Path, raw: dict[str, Any]
) -> None:
    path = configs.write(tmp_path, raw)
    other = with_shop(raw)
    other["log_dir"] = "elsewhere"
    files = {"cluster.yaml": yaml.safe_dump(other).encode(), "example.test.zone": configs.ZONE.encode()}
    Shelf(tmp_path / "state" / "bundles").put(Bundle("cluster.yaml", files, 1, 0, "n1", 1.0))
    with capturedLogs() as events:
        start = at_start(load(path), str(path), "n1")
    assert start.header is None and SHOP not in start.config.wideips
    said = [e for e in events if e.get("event") == "config_bundle_unusable"]
    assert len(said) == 1 and "log_dir changed" in said[0]["problems"]


def test_include_dirs_open_folders_only_outside_config_sync(tmp_path: Path) -> None:
    """``zones[].include_dirs``: validated, refused in a shared config, and the only way a
    zone outside config sync includes a file outside its folder."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "ns.inc").write_text("far IN A 192.0.2.9\n")
    raw = configs.base()
    raw["zones"][0]["include_dirs"] = [str(shared)]
    path = configs.write(tmp_path / "c", raw, zone=configs.ZONE + f"$INCLUDE {shared / 'ns.inc'}\n")
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert f"{path}: zones[0].include_dirs: opens folders to $INCLUDE only outside config sync" in str(caught.value)
    raw["sync_group"]["config_sync"] = False
    config = load(configs.write(tmp_path / "c", raw))
    assert next(iter(config.zones)).exists(names.key(names.from_text("far.example.test")))
    raw["zones"][0]["include_dirs"] = ["missing", 7]
    with pytest.raises(ConfigError) as caught:
        load(configs.write(tmp_path / "c", raw))
    text = str(caught.value)
    assert f"zones[0].include_dirs[0]: {tmp_path / 'c' / 'missing'} is not a folder" in text
    assert "zones[0].include_dirs[1]: " in text
    del raw["zones"][0]["include_dirs"]
    with pytest.raises(ConfigError, match="names a file outside the zone file's folder"):
        load(configs.write(tmp_path / "c", raw))


def test_with_config_sync_off_a_reload_takes_a_change_of_the_nodes_own_ground(
    tmp_path: Path, raw: dict[str, Any]
) -> None:
    """Rule 3 is about what a group publishes: a node's own file, not shared, still moves
    its query log by a reload."""
    raw["sync_group"]["config_sync"] = False
    top = sharing(tmp_path, raw)
    changed = with_shop(raw)
    changed["dns_server"] = {"query_log": {"path": "var/log/queries.dnstap", "keep": 0}}
    Path(top.config_path).write_text(yaml.safe_dump(changed, sort_keys=False))
    problems: list[list[str]] = []
    top.reload().addCallback(problems.append)
    assert problems == [[]] and SHOP in top.node.config.wideips
    assert top.node.config.dns_server.query_log is not None
