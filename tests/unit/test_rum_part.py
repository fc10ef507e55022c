"""The RUM listener as a part of the node (`rum.part`): its settings from the config (the
targets, the zones of the one-use names), its own certificate read as the member's files
(the key its owner's alone) and checked at start, and a reload that retunes both, or fails
leaving the running ones."""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock

from gtmcluster.config.load import load
from gtmcluster.config.model import Config
from gtmcluster.rum import part
from gtmcluster.service import Sockets, make_service
from tests.support import configs
from tests.unit.test_rum_tls import pair

TARGETS = {"DC1": "https://dc1.example.net/rum/v1/object"}


def config(tmp_path: Path, **rum: Any) -> Config:
    raw = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    raw["rum"] = {"targets": TARGETS, **rum}
    raw["sync_group"]["members"][0]["rum"] = "127.0.0.1:8443"
    return load(configs.write(tmp_path, raw))


def write_pair(tmp_path: Path, name: str) -> dict[str, str]:
    cert, key = pair(name)
    (tmp_path / f"{name}.pem").write_bytes(cert)
    (tmp_path / f"{name}.key").write_bytes(key)
    (tmp_path / f"{name}.key").chmod(0o600)
    return {"cert": f"{name}.pem", "key": f"{name}.key"}


def test_settings_follow_the_config_and_a_reload_retunes_them(tmp_path: Path) -> None:
    first = config(tmp_path)
    settings = part.settings_of(first)
    assert dict(settings.targets) == TARGETS and settings.zone == "example.test"
    assert settings.zones == frozenset({"example.test"})
    sock = socket.socket()
    try:
        top = make_service(first, "n1", MemoryReactorClock(), Sockets(dns=[], rum=sock))
        site = top.getServiceNamed("rum").factory
        (rum_part,) = [p for p in top.parts if isinstance(p, part.RumPart)]
        wider = dict(TARGETS, DC2="https://dc2.example.net/o")
        commit = rum_part.prepare(SimpleNamespace(config=config(tmp_path / "2", targets=wider, max_body=1024)))  # type: ignore[arg-type]
        assert dict(site.settings.targets) == TARGETS  # (prepared: nothing in use yet)
        commit()
        assert dict(site.settings.targets) == wider and site.settings.max_body == 1024
    finally:
        sock.close()


def test_the_listeners_own_certificate_is_read_checked_and_renewed(tmp_path: Path) -> None:
    first = config(tmp_path, tls=write_pair(tmp_path, "one"))
    pems = part.read_tls(first.rum)
    assert pems is not None and pems[0].startswith(b"-----BEGIN CERTIFICATE")
    sock = socket.socket()
    try:
        top = make_service(first, "n1", MemoryReactorClock(), Sockets(dns=[], rum=sock, rum_tls=pems))
        (rum_part,) = [p for p in top.parts if isinstance(p, part.RumPart)]
        assert rum_part.tls is not None and rum_part.tls.cert_pem == pems[0]
        renewed = config(tmp_path, tls=write_pair(tmp_path, "two"))
        rum_part.prepare(SimpleNamespace(config=renewed))()  # type: ignore[arg-type]
        assert rum_part.tls.cert_pem == (tmp_path / "two.pem").read_bytes()
        # a key that is not the certificate's fails the reload: the running one stays
        (tmp_path / "two.key").write_bytes((tmp_path / "one.key").read_bytes())
        with pytest.raises(OSError, match="not a certificate and its key"):
            rum_part.prepare(SimpleNamespace(config=renewed))  # type: ignore[arg-type]
        assert rum_part.tls.cert_pem == (tmp_path / "two.pem").read_bytes()
    finally:
        sock.close()


def test_a_key_others_may_read_is_refused(tmp_path: Path) -> None:
    files = write_pair(tmp_path, "one")
    (tmp_path / "one.key").chmod(0o644)
    with pytest.raises(OSError):
        part.read_tls(config(tmp_path, tls=files).rum)
