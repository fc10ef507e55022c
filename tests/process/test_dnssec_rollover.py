"""A CSK rollover, and the KSK rollover of a KSK/ZSK pair, on a real node (``twistd gtm``), each
step taken by the ``gtmcluster dnssec`` commands and a reload (SIGHUP), checked by BIND's
`delv`: a wide IP answer and the DNSKEY set validate at every step under the trust anchor a
resolver may hold then — the old DS throughout until the roll is finished, the new DS from
the pre-publication on. (The steps are forced: the waits between them are
tests/unit/test_dnssec_rollwait.py's.)"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_tool
from tests.support import configs, poll
from tests.support.nodeproc import RunningNode, loopback_address, running_node

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("dig_tool")]

GTMCLUSTER = Path(sys.executable).parent / "gtmcluster"
DNS_PORT = 5353


def dnssec(*args: str | Path) -> str:
    done = subprocess.run([GTMCLUSTER, "dnssec", *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def anchors(workdir: Path) -> dict[int, Path]:
    """A trust-anchor file per DS the zone's keys give now, by key tag."""
    out = {}
    for line in dnssec("ds", "example.test", "--dir", workdir / "keys").splitlines():
        tag, alg, digest_type, digest = line.split()[4:8]
        path = workdir / f"anchor-{tag}.conf"
        path.write_text(f'trust-anchors {{ example.test. static-ds {tag} {alg} {digest_type} "{digest}"; }};\n')
        out[int(tag)] = path
    return out


def delv(node: RunningNode, anchor: Path, name: str, rdtype: str) -> str:
    run = subprocess.run(
        ["delv", "-a", str(anchor), "+root=example.test", f"@{node.address}", "-p", str(DNS_PORT), name, rdtype],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return run.stdout + run.stderr


def validates(node: RunningNode, anchor: Path) -> None:
    for name, rdtype in (("gslb.example.test", "A"), ("example.test", "DNSKEY")):
        out = delv(node, anchor, name, rdtype)
        assert out.startswith("; fully validated\n"), (anchor.name, name, out)


def dnskey_count(node: RunningNode) -> int:
    out = subprocess.run(
        ["dig", f"@{node.address}", "-p", str(DNS_PORT), "example.test", "DNSKEY", "+short", "+norec"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    ).stdout
    return len(out.splitlines())


@pytest.fixture(params=["csk"])
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningNode]:
    require_tool("delv", "bind9-dnsutils")
    dnssec("keygen", "example.test", "--dir", tmp_path / "keys", *(["--split"] if request.param == "split" else []))
    address = loopback_address()
    config = configs.base(address, DNS_PORT)
    config["zones"][0]["dnssec"] = {"keys": "keys"}
    path = configs.write(tmp_path, config)
    with running_node(path, "n1", address, DNS_PORT, tmp_path) as n:
        yield n


def reload(node: RunningNode, keys_served: int) -> None:
    """SIGHUP, and wait for the node to log the reload (a roll may serve the same keys in
    other files: nothing on the wire changes) and to serve *keys_served* DNSKEY records."""
    before = node.log_text().count("] reloaded ")
    node.proc.send_signal(signal.SIGHUP)
    poll.until(lambda: node.log_text().count("] reloaded ") > before, what="the reload logged")
    poll.until(lambda: dnskey_count(node) == keys_served, what=f"{keys_served} DNSKEY records after the reload")


def test_a_csk_rollover_validates_at_every_step(node: RunningNode, tmp_path: Path) -> None:
    (old,) = anchors(tmp_path).values()
    validates(node, old)

    dnssec("keygen", "example.test", "--dir", tmp_path / "keys", "--publish-only")
    reload(node, 2)
    both = anchors(tmp_path)
    assert len(both) == 2
    new = next(path for path in both.values() if path != old)
    validates(node, old)  # resolvers that hold the old DS
    validates(node, new)  # and those that took the new DS the parent now has

    dnssec("roll", "example.test", "--dir", tmp_path / "keys", "--force")
    reload(node, 2)
    validates(node, old)  # the old DS is still cached somewhere
    validates(node, new)

    dnssec("roll", "example.test", "--dir", tmp_path / "keys", "--finish", "--force")
    reload(node, 1)
    validates(node, new)
    assert "fully validated" not in delv(node, old, "gslb.example.test", "A")


@pytest.mark.parametrize("node", ["split"], indirect=True)
def test_a_ksk_rollover_validates_under_the_old_and_the_new_ds(node: RunningNode, tmp_path: Path) -> None:
    (old,) = anchors(tmp_path).values()
    validates(node, old)
    zsk_signatures = rrsig_tags(node, "gslb.example.test", "A")

    dnssec("keygen", "example.test", "--dir", tmp_path / "keys", "--publish-only", "--ksk")
    reload(node, 3)  # KSK, new KSK, ZSK
    both = anchors(tmp_path)
    new = next(path for path in both.values() if path != old)
    validates(node, old)  # the key set is signed by both KSKs
    validates(node, new)  # so the parent may take the new DS from here on
    assert len(rrsig_tags(node, "example.test", "DNSKEY")) == 2

    swap = dnssec("roll", "example.test", "--dir", tmp_path / "keys", "--ksk", "--force")
    assert "now swap the DS at the parent" in swap
    reload(node, 3)
    validates(node, old)  # resolvers that still cache the old DS
    validates(node, new)  # and those that fetched the new one the parent now serves

    dnssec("roll", "example.test", "--dir", tmp_path / "keys", "--ksk", "--finish", "--force")
    reload(node, 2)
    validates(node, new)
    assert "fully validated" not in delv(node, old, "example.test", "DNSKEY")
    (new_tag,) = [tag for tag, path in both.items() if path == new]
    assert rrsig_tags(node, "example.test", "DNSKEY") == {new_tag}
    assert rrsig_tags(node, "gslb.example.test", "A") == zsk_signatures  # the ZSK signs the data throughout


def rrsig_tags(node: RunningNode, name: str, rdtype: str) -> set[int]:
    out = subprocess.run(
        ["dig", f"@{node.address}", "-p", str(DNS_PORT), name, rdtype, "+dnssec", "+norec", "+noall", "+answer"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    ).stdout
    return {int(line.split()[10]) for line in out.splitlines() if line.split()[3:4] == ["RRSIG"]}
