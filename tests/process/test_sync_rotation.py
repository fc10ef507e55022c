"""Certificate rotation without a restart, on real twistd processes over real TLS: n1's
certificate and key are renewed in place (the same paths), n1 reloads, and from then on new
connections see the new certificate while the connection it had keeps working; a bad new
certificate (another CA, a key that does not match, an expired one) is refused by the
reload with the reason, and the certificate in use stays; so are changed paths, under
config sync (a member's own ground never comes from a published config).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.x509.oid import ExtendedKeyUsageOID

from gtmcluster.sync import certs
from tests.support import apiclient
from tests.support.peerattack import Lab, attack, client_context, made_certificate, running_lab

pytestmark = pytest.mark.process

NODE = "n1"
PARTNER = "n2"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with running_lab(tmp_path_factory.mktemp("sync-rotation")) as lab:
        yield lab


def reload(lab: Lab) -> tuple[int, dict[str, Any]]:
    """POST /api/v1/reload to n1: (HTTP status, JSON body)."""
    token = apiclient.token_of(lab.group.config_path, NODE)
    code, body = apiclient.call(lab.group.members[NODE].api, "/api/v1/reload", "POST", token, timeout=20)
    return code, body


def served_serial(lab: Lab) -> str | None:
    """The serial of the certificate n1 shows a new connection (TLS 1.3 shows it before it
    checks the client's, so the client here needs none)."""
    outcome = attack(lab.group, client_context(lab.group.certs / "ca.pem"), within=0.5)
    return outcome.server_serial


def serial_of(path: Path) -> str:
    return f"{certs.load_certificate(path).serial_number:x}"


def peer_view(lab: Lab, node: str, other: str) -> dict[str, Any]:
    return next(p for p in lab.group.status(node)["peers"] if p["name"] == other)


def test_a_renewed_certificate_is_taken_by_a_reload(lab: Lab) -> None:
    """`certs issue n1 --force` writes a new key and certificate over the old files; a reload
    takes them: n1 logs the new serial, its status shows it, a new connection is shown the
    new certificate, the connection to n2 stays up and carries a new record, and when n2
    connects again it sees the new serial."""
    group = lab.group
    old = serial_of(group.certs / "n1.pem")
    assert served_serial(lab) == old
    assert group.status(NODE)["tls"]["serial"] == old
    assert peer_view(lab, PARTNER, NODE)["certificate"]["serial"] == old

    certs.issue(group.certs, NODE, force=True)
    new = serial_of(group.certs / "n1.pem")
    offset = lab.mark()
    code, body = reload(lab)
    assert code == 200, body
    line = lab.wait_line(offset, "new connections use")
    assert f"serial {new}" in line and old in line, line
    assert group.status(NODE)["tls"]["serial"] == new
    assert served_serial(lab) == new

    # the open connection to n2 was not touched and still carries records
    lab.assert_intact()
    token = apiclient.token_of(group.config_path, NODE)
    assert apiclient.call(group.members[NODE].api, "/api/v1/virtual-servers/vs3/disable", "POST", token)[0] == 200
    group.wait_for(
        lambda: group.status(PARTNER)["health"]["virtual_servers"]["vs3"]["admin"] == "disabled",
        10,
        "n2 to hear that n1 disabled vs3",
    )

    # n2 restarts: on its new connections n1 shows (and n2 records) the new certificate
    group.kill(PARTNER)
    group.restart(PARTNER)
    group.wait_converged([NODE, PARTNER])
    assert peer_view(lab, PARTNER, NODE)["certificate"]["serial"] == new
    lab.converged_at = time.monotonic()  # the channel the later tests must keep


BAD = {
    "from another CA": "not signed by the sync group CA",
    "whose key is another's": "is not the key of",
    "that has expired": "expired on",
    "not for server use": "may not be used for serverAuth",
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_new_certificate_is_refused_and_the_old_one_stays(lab: Lab, case: str, tmp_path: Path) -> None:
    """A reload that finds a bad certificate at n1's paths is refused (HTTP 422) with the
    reason, logged; n1 keeps showing the certificate it had, and keeps its peer."""
    group = lab.group
    pem, key = group.certs / "n1.pem", group.certs / "n1.key"
    saved = tmp_path / "saved"
    saved.mkdir()
    shutil.copy2(pem, saved / "n1.pem")
    shutil.copy2(key, saved / "n1.key")
    in_use = served_serial(lab)
    try:
        if case == "from another CA":
            files = certs.issue(lab.other_ca, NODE, force=True)
            shutil.copy2(files.cert, pem)
            shutil.copy2(files.key, key)
        elif case == "whose key is another's":
            shutil.copy2(group.certs / "n3.key", key)
        elif case == "that has expired":
            cert, k = made_certificate(group, NODE, (-30, -1), "expired-n1")
            shutil.copy2(cert, pem)
            shutil.copy2(k, key)
        else:
            cert, k = made_certificate(group, NODE, (-1, 30), "client-only-n1", [ExtendedKeyUsageOID.CLIENT_AUTH])
            shutil.copy2(cert, pem)
            shutil.copy2(k, key)
        offset = lab.mark()
        code, body = reload(lab)
        assert code == 422, body
        assert BAD[case] in json.dumps(body), body
        line = lab.wait_line(offset, "reload refused")
        assert BAD[case] in line, line
        assert served_serial(lab) == in_use
    finally:
        shutil.copy2(saved / "n1.pem", pem)
        shutil.copy2(saved / "n1.key", key)
    lab.assert_intact()


def test_changed_certificate_paths_are_refused_under_config_sync(lab: Lab) -> None:
    """The config now points n1 at certificates in another directory (a new CA file there
    with the same CA): under config sync the reload publishes the file, and a published
    config never moves a member's own certificates (issue 30, rule 3). Refused with the
    reason; the certificate in use stays. (With ``config_sync: false`` a reload takes new
    paths: `tests/unit/test_config_bundle_rules.py`.)"""
    group = lab.group
    elsewhere = group.workdir / "renewed"
    elsewhere.mkdir()
    shutil.copy2(group.certs / "ca.pem", elsewhere / "ca.pem")
    shutil.copy2(group.certs / "ca.key", elsewhere / "ca.key")
    certs.issue(elsewhere, NODE)
    before = served_serial(lab)
    config = yaml.safe_load(group.config_path.read_text())
    config["sync_group"]["tls"] = {"ca": "certs/ca.pem", "cert": "renewed/{node}.pem", "key": "renewed/{node}.key"}
    group.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    try:
        code, body = reload(lab)
        assert code == 422, body
        assert "sync_group.tls changed" in json.dumps(body) and "restart the member" in json.dumps(body), body
        assert served_serial(lab) == before
    finally:
        group.config_path.write_text(yaml.safe_dump(group.config, sort_keys=False))
    lab.assert_intact()
