"""Removing a member whose key leaked, as README "Trust model and limits" tells operators to,
on real twistd processes over real TLS: there is no revocation list, so the group moves to
a new CA. A new CA, certificates from it for the members (n3's name too: its site gets a
new key), written over each staying member's files (their paths are the member's own
ground, which a config shared by config sync never moves: issue 30), a reload of n1 and
n2; from then on the leaked key
and certificate (here in the hands of the still running n3, and of an attacker) get nowhere:
n3's open connections are closed at the reload, and every new one is refused at TLS, while
n1 and n2 reconnect to each other and agree."""

from __future__ import annotations

import shutil
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.sync import certs
from tests.support import apiclient
from tests.support.peerattack import assert_refused_silently, attack
from tests.support.trio import Group, running_group

pytestmark = pytest.mark.process

STAYING = ("n1", "n2")
LEAKED = "n3"
#: how long n3 is watched after the reload, still trying with the leaked certificate
WATCH = 6.0


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    with running_group(tmp_path, 3) as group:
        group.wait_converged(list(group.members))
        yield group


def reload(group: Group, node: str) -> tuple[int, dict[str, Any]]:
    token = apiclient.token_of(group.config_path, node)
    code, body = apiclient.call(group.members[node].api, "/api/v1/reload", "POST", token, timeout=20)
    return code, body


def connected(group: Group, node: str, other: str) -> bool:
    return any(p["name"] == other and p["connected"] for p in group.status(node)["peers"])


def test_a_new_ca_and_a_reload_cut_off_a_member_whose_key_leaked(group: Group, tmp_path: Path) -> None:
    leaked = tmp_path / "leaked"
    leaked.mkdir()
    shutil.copy2(group.certs / f"{LEAKED}.pem", leaked / "cert.pem")
    shutil.copy2(group.certs / f"{LEAKED}.key", leaked / "key.pem")

    # the operator's steps: a new CA (its key kept offline), a certificate from it for every
    # member, written over the files each member that stays uses, a reload of each of them
    # (the members share one certs folder here: n3's files in memory stay the leaked ones)
    renewed = group.workdir / "certs-2"
    certs.init_ca(renewed)
    for name in group.members:
        certs.issue(renewed, name)
    shutil.copy2(renewed / "ca.pem", group.certs / "ca.pem")
    for name in STAYING:
        shutil.copy2(renewed / f"{name}.pem", group.certs / f"{name}.pem")
        shutil.copy2(renewed / f"{name}.key", group.certs / f"{name}.key")
    offsets = {node: group.log_size(node) for node in STAYING}
    for node in STAYING:
        code, body = reload(group, node)
        assert code == 200, body
    for node in STAYING:
        line = group.wait_log(node, "peers must now chain to the CA", since=offsets[node])
        assert "open peer connections are closed" in line, line

    # n1 and n2 meet again over the new CA; n3, still running on the leaked key, stays out
    group.wait_converged(list(STAYING), timeout=30)
    deadline = time.monotonic() + WATCH
    while time.monotonic() < deadline:
        for node in STAYING:
            assert not connected(group, node, LEAKED), f"{node} is connected to {LEAKED} after the new CA"
        time.sleep(0.2)  # the sampling period of a watch that nothing happens: no event to wait for
    for node in STAYING:  # n3 was tried (dialled, or dialling) and refused at TLS
        address = group.members[LEAKED].address

        def refused(node: str = node, address: str = address) -> bool:
            lines = group.log_text(node, offsets[node]).splitlines()
            return any("TLS handshake failed" in line and (f" {LEAKED} " in line or address in line) for line in lines)

        group.wait_for(refused, 30, f"{node} to log a refused TLS handshake with {LEAKED}")

    # an attacker with the leaked files: refused during the handshake, no data
    attacker = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    attacker.check_hostname = False
    attacker.verify_mode = ssl.CERT_NONE
    attacker.load_cert_chain(str(leaked / "cert.pem"), str(leaked / "key.pem"))
    for node in STAYING:
        assert_refused_silently(attack(group, attacker, target=node))

    # what n3 writes reaches neither of them; what they write reaches each other
    token = apiclient.token_of(group.config_path, LEAKED)
    assert apiclient.call(group.members[LEAKED].api, "/api/v1/virtual-servers/vs3/disable", "POST", token)[0] == 200
    token = apiclient.token_of(group.config_path, "n1")
    assert apiclient.call(group.members["n1"].api, "/api/v1/virtual-servers/vs2/drain", "POST", token)[0] == 200
    group.wait_for(
        lambda: group.status("n2")["health"]["virtual_servers"]["vs2"]["admin"] == "drain",
        10,
        "n2 to hear that n1 drained vs2",
    )
    time.sleep(1.0)  # (n3's write would have been pushed at once)
    for node in STAYING:
        assert group.status(node)["health"]["virtual_servers"]["vs3"]["admin"] != "disabled"
