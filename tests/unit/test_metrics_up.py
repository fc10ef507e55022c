"""The /metrics families the shipped alerts read that were added for them: each server's
health apart from its admin state, each pool's members that may take new clients
(`api.upfamilies`), and when the certificates the node loaded expire (`api.certfamilies`)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.core import Metric
from twisted.internet.testing import MemoryReactorClock

from gtmcluster.api.metricfamilies import FAMILIES
from gtmcluster.api.scrape import Scrape
from gtmcluster.config.load import load
from gtmcluster.nodeservice import NodeService
from gtmcluster.service import Sockets, make_service
from gtmcluster.sync import certs
from gtmcluster.sync.tls import load_credentials
from tests.support import configs
from tests.unit.test_certs import TWISTED_PYOPENSSL_DEPRECATION


def samples(service: NodeService, family: str) -> dict[tuple[str, ...], float]:
    """The samples of *family* in a scrape now, by their label values."""
    scrape = Scrape(service, service.reactor.seconds())
    for collector in FAMILIES:
        for metric in collector(scrape):
            if isinstance(metric, Metric) and metric.name == family:
                return {tuple(s.labels.values()): s.value for s in metric.samples}
    return {}


def test_a_disabled_server_is_healthy_but_not_available_and_pools_count_usable_members(tmp_path: Path) -> None:
    """An operator's disabled server (or pool member) is out of its pools' count but not
    unhealthy: "down" alerts read health, not admin state. A server its monitor found down is
    unhealthy. A pool whose members are all out reads 0."""
    raw = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    raw["monitors"] = {"tcp": {"type": "tcp", "interval": 5, "timeout": 2, "port": 80}}
    raw["virtual_servers"]["vs3"]["monitor"] = "tcp"
    raw["pools"]["q"] = {"members": [{"virtual_server": "vs2", "admin_state": "disabled"}]}
    service = make_service(load(configs.write(tmp_path, raw)), "n1", MemoryReactorClock(), Sockets(dns=[]))
    store = service.node.store
    store.put("admin/vs/vs1", {"state": "disabled"})
    store.put("obs/vs/vs3/n1", {"up": False, "reason": "refused"}, ttl=90)
    service.reactor.advance(0.1)
    assert samples(service, "gtm_virtual_server_healthy") == {
        ("vs1", "DC1"): 1.0,  # disabled, not down
        ("vs1-6", "DC1"): 1.0,
        ("vs2", "DC2"): 1.0,
        ("vs2-6", "DC2"): 1.0,
        ("vs3", "DC3"): 0.0,  # its monitor says down
    }
    assert samples(service, "gtm_virtual_server_available")[("vs1", "DC1")] == 0.0
    assert samples(service, "gtm_pool_members_available") == {("p",): 1.0, ("p6",): 2.0, ("q",): 0.0}
    store.put("admin/member/p/vs2", {"state": "drain"})
    store.put("admin/vs/vs1", {"state": "enabled"})
    service.reactor.advance(0.1)
    assert samples(service, "gtm_pool_members_available")[("p",)] == 1.0  # vs1 back, vs2 drained in p
    store.put("admin/member/q/vs2", {"state": "enabled"})  # an operator's record over the config's state
    service.reactor.advance(0.1)
    assert samples(service, "gtm_pool_members_available")[("q",)] == 1.0


@pytest.fixture
def group(tmp_path: Path) -> Path:
    directory = tmp_path / "certs"
    certs.init_ca(directory, days=3650)
    certs.issue(directory, "n1", days=90)
    return directory


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    """A bound TCP socket for the service to adopt (the service is never started)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock
    finally:
        sock.close()


def not_after(path: Path) -> float:
    return certs.load_certificate(path).not_valid_after_utc.timestamp()


@TWISTED_PYOPENSSL_DEPRECATION
@pytest.mark.parametrize("shape", ["peers", "https-api", "both", "neither"])
def test_certificate_expiry_is_that_of_the_certificates_the_node_loaded(
    tmp_path: Path, group: Path, listening: socket.socket, shape: str
) -> None:
    """node and ca from the peers' credentials (or the HTTPS API's in a group of one), api
    from the API's; a group of one without HTTPS loads no certificate and shows none. A
    renewal the node takes (new credentials) shows at the next scrape."""
    raw: dict[str, Any] = configs.base()
    raw["state_dir"] = str(tmp_path / "state")
    peers = shape in ("peers", "both")
    if peers:
        configs.add_member(raw, "n2", "DC2", "127.0.0.2")
    if shape in ("https-api", "both"):
        raw["api"] = {"token": "a-token-of-sixteen-or-more", "tls": True}
    (tmp_path / "certs").mkdir(exist_ok=True)
    config = load(configs.write(tmp_path, raw))
    loaded = shape != "neither"
    creds = load_credentials(config.tls_for("n1"), "n1") if loaded else None
    sockets = Sockets(dns=[], credentials=creds, peer=listening if peers else None, api=listening)
    service = make_service(config, "n1", MemoryReactorClock(), sockets)
    node, ca = not_after(group / "n1.pem"), not_after(group / "ca.pem")
    expected = {}
    if loaded:
        expected = {("node",): node, ("ca",): ca}
    if shape in ("https-api", "both"):
        expected[("api",)] = node
    assert samples(service, "gtm_certificate_expiry_timestamp_seconds") == expected
    if service.peers is not None:
        certs.issue(group, "n1", days=200, force=True)
        service.peers.use_credentials(load_credentials(config.tls_for("n1"), "n1"))
        renewed = samples(service, "gtm_certificate_expiry_timestamp_seconds")
        assert renewed[("node",)] == not_after(group / "n1.pem") > node
        assert renewed[("ca",)] == ca
