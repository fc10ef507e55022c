"""F5 fallback-only pools and disabled objects imported with `gtmcluster import f5`, served by
a real node (``twistd -n gtm``) and asked with the real `dig`: the maintenance pool answers its
fallback-ip, the disabled pool and member are passed over, and the disabled wide IP leaves the
name to its zone; `gtmcluster enable` gives the disabled pool back."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.dig import dig
from tests.support.f5asker import gtmcluster as cli
from tests.support.nodeproc import loopback_address, running_node

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("dig_tool")]

SAMPLE = Path(__file__).parent.parent / "data" / "f5" / "corpus" / "fallback_disabled_gtm.conf"
DNS_PORT = 5353


def test_imported_fallback_and_disabled_objects_answer_as_on_f5(tmp_path: Path) -> None:
    address = loopback_address()
    done = cli("import", "f5", str(SAMPLE), "--site", f"DC1={address}", "-o", "cluster.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    config = tmp_path / "cluster.yaml"
    text = config.read_text()
    text = text.replace(f"'{address}:53'", f"'{address}:{DNS_PORT}'").replace("127.0.0.1:8053", f"{address}:8053")
    config.write_text(text)
    with running_node(config, "gtm-dc1", address, DNS_PORT, tmp_path):
        assert dig(address, DNS_PORT, "maint.example.com").answer_data() == ["10.200.30.43"]
        assert dig(address, DNS_PORT, "sorry.example.com").answer_data() == ["10.200.30.44"]
        assert {tuple(dig(address, DNS_PORT, "www.example.com").answer_data()) for _ in range(3)} == {("10.1.1.20",)}
        old = dig(address, DNS_PORT, "old.example.com")  # the zone has no record there: NODATA
        assert (old.status, old.answer_data(), old.types("authority")) == ("NOERROR", [], ["SOA"])
        enabled = cli("enable", "pool", "web_dc2", "--config", "cluster.yaml", cwd=tmp_path)
        assert enabled.returncode == 0, enabled.stderr
        assert dig(address, DNS_PORT, "www.example.com").answer_data() == ["10.2.1.10"]
        status = cli("status", "--config", "cluster.yaml", cwd=tmp_path)
        assert "pool member web/srv1.vs1 disabled in the config" in status.stdout
        assert "wide IP old.example.com disabled in the config" in status.stdout
