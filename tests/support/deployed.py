"""The multi-site world as deployed: HTTPS APIs on the site addresses, one site over IPv6,
and a management host that is neither site.

`Deployed` is `MultiSite` (``tests/support/multisite.py``: sites ``cnc`` and ``tel``, resolvers
``ldns1`` and ``ldns2``, joined by the WAN emulator) with these changes:

- the WAN also carries IPv6 (``fd77::/64``; each host's IPv6 address is numbered like its
  IPv4 one: 10.77.2.1 is fd77::201);
- site ``tel`` is reached over IPv6 only: its member's DNS, peer and API addresses are its
  IPv6 address, so the sync group runs over IPv6, and the resolvers ask it over IPv6 (its
  name server has only an AAAA record). Its virtual server stays on IPv4 (the wide IP is an A
  record);
- every member's API is on its site address, port 8443, over HTTPS (``api.tls``) with the
  member's certificate from the group CA; it requires a client certificate from the group
  CA (``api.client_certificates: required``; the operator's is `OPERATOR`'s, made with
  `certs.issue_client`) and the token `TOKEN` (``api.token_file``) for every request (beyond
  loopback the API asks for it on reads too);
- a fifth host ``mgmt`` (10.77.200.1, fd77::c801) runs the operator's `gtmcluster` commands
  (`Deployed.cli`): they use the config (its token), the CA certificate and the operator's
  client certificate (``GTM_API_CLIENT_CERT``), and reach every node through the WAN.

The test process itself polls a node's status (`Deployed.status`) through the CLI's own
client (`gtmcluster.cli.nodeapi`: HTTPS, the group CA, the member's name, the operator's
certificate, the token) from a
thread inside the ``mgmt`` namespace.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from gtmcluster.cli import nodeapi
from gtmcluster.sync import certs
from tests.support.multisite import (
    BACKEND_PORT,
    DNS_PORT,
    LDNSES,
    PEER_PORT,
    PROBER,
    SITES,
    SUBNET,
    ZONE,
    MultiSite,
    group_config,
    gtmcluster_command,
    in_namespace,
    unbound_config,
)
from tests.support.nodeproc import twistd
from tests.tools import wanem
from tests.tools.wanem import WanProcess

SUBNET6 = "fd77::/64"
API_PORT = 8443
#: the API's bearer token (api.token), for every request
TOKEN = "deployed-test-token-0123456789"
#: the file that holds it, beside the config (every member's and the management host's)
TOKEN_FILE = "api-token"
#: the site reached over IPv6 only
IPV6_SITE = "tel"
MGMT = "mgmt"
MGMT_ADDRESS = "10.77.200.1"
#: the operator's client certificate: certs/clients/OPERATOR.pem
OPERATOR = "alice"


def endpoint(address: str, port: int) -> str:
    """ADDRESS:PORT, an IPv6 address in brackets."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


class Deployed(MultiSite):
    """The deployed world in *workdir* (see the module's docstring)."""

    def __init__(
        self,
        workdir: Path,
        prefix: str,
        delays: Mapping[tuple[str, str], float],
        hops: Mapping[tuple[str, str], int] | None = None,
    ):
        super().__init__(workdir, prefix, delays, hops)
        hosts = {site: address for site, (address, _, _, _) in SITES.items()} | dict(LDNSES) | {MGMT: MGMT_ADDRESS}
        self.wan = WanProcess(prefix, hosts, subnet=SUBNET, subnet6=SUBNET6)
        self.addresses = dict(hosts)
        self._nodeapi_config: Any = None

    # -- names --------------------------------------------------------------------------------

    def gtm_address(self, site: str) -> str:
        """The address the GTM at *site* is reached at: IPv6 for `IPV6_SITE`, else IPv4."""
        return self.wan.address(site, 6) if site == IPV6_SITE else self.addresses[site]

    @property
    def operator_cert(self) -> Path:
        """The operator's client certificate (its key beside it, .key)."""
        return self.workdir / "certs" / "clients" / f"{OPERATOR}.pem"

    # -- building -----------------------------------------------------------------------------

    def zone_text(self) -> str:
        """The gslb.test zone: SOA, the two GTMs as name servers, with an A or AAAA record."""
        lines = ["$TTL 60", f"@        IN SOA gtm-cnc.{ZONE}. hostmaster.{ZONE}. 1 3600 600 86400 1"]
        lines += [f"         IN NS  {member}" for _, member, _, _ in SITES.values()]
        for site, (_, member, _, _) in SITES.items():
            rdtype = "AAAA" if site == IPV6_SITE else "A"
            lines.append(f"{member:<8} IN {rdtype:<4} {self.gtm_address(site)}")
        return "\n".join(lines) + "\n"

    def group_config(self) -> dict[str, Any]:
        """The group's config: each member's DNS, peer and API on its site address (IPv6 at
        `IPV6_SITE`), the API over HTTPS with client certificates and `TOKEN`; www.gslb.test answered by RTT, then
        topology (TEL for everybody), then global availability; the prober may probe the
        LDNSes' IPv4 and IPv6 addresses."""
        config = group_config(self.addresses)  # the servers, pools and wide IP of the two sites
        config["sync_group"]["members"] = [
            {
                "name": member,
                "datacenter": dc,
                "peer": endpoint(self.gtm_address(site), PEER_PORT),
                "dns": [endpoint(self.gtm_address(site), DNS_PORT)],
                "api": endpoint(self.gtm_address(site), API_PORT),
            }
            for site, (_, member, dc, _) in SITES.items()
        ]
        # (the token in a file of the members' own: a config shared by config sync never
        # carries a secret, issue 30)
        config["api"] = {"tls": True, "client_certificates": "required", "token_file": TOKEN_FILE}
        config["prober"] = {**PROBER, "allow": [SUBNET, SUBNET6]}
        return config

    def write_config(self) -> None:
        """The group's YAML, zone file and certificates (CA, one per member, the operator's)
        in workdir."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / f"{ZONE}.zone").write_text(self.zone_text())
        token = os.open(self.workdir / TOKEN_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(token, "w") as f:
            f.write(TOKEN + "\n")
        self.config_path.write_text(yaml.safe_dump(self.group_config(), sort_keys=False))
        certs.init_ca(self.workdir / "certs")
        for _, member, _, _ in SITES.values():
            certs.issue(self.workdir / "certs", member)
        certs.issue_client(self.workdir / "certs", OPERATOR)

    def start(self, timeout: float = 30.0) -> None:
        """As `MultiSite.start`, with the resolvers on their IPv4 and IPv6 addresses, asking
        the IPv6 site over IPv6."""
        self.wan.start()
        self.write_config()  # after the WAN: the IPv6 addresses come from it
        self.set_delays(self.delays)
        for (a, b), count in self.hops.items():
            self.wan.set_hops(a, b, count)
        for site, (address, _, _, vs) in SITES.items():
            backend = [sys.executable, "-m", "gtmcluster.cli.backend", "--listen", f"{address}:{BACKEND_PORT}"]
            self._spawn(f"backend-{site}", site, [*backend, "--name", vs])
        for site in SITES:
            self._wait_process(f"backend-{site}", site, partial(self._backend_accepts, site), timeout)
        for site, (_, member, _, _) in SITES.items():
            node = [*twistd(), "--nodaemon", f"--logfile={self.log_path(site)}"]
            node += [f"--pidfile={self.workdir / (member + '.pid')}", "gtm", f"--config={self.config_path}"]
            self._spawn(member, site, [*node, f"--node={member}"])
        gtms = [self.gtm_address(site) for site in SITES]
        for host, address in LDNSES.items():
            conf = self.workdir / f"{host}-unbound.conf"
            text = unbound_config(self.workdir, host, address, gtms).replace("do-ip6: no", "do-ip6: yes")
            ipv6 = f"    interface: {self.wan.address(host, 6)}\n"
            conf.write_text(text.replace(f"    interface: {address}\n", f"    interface: {address}\n{ipv6}"))
            self._spawn(f"unbound-{host}", host, ["unbound", "-d", "-c", str(conf)])
        for site in SITES:
            self._wait_process(self.member(site), site, partial(self._node_answers, site), timeout)
        for host in LDNSES:
            self._wait_process(f"unbound-{host}", host, partial(self._unbound_answers, host), timeout)

    # -- asking -------------------------------------------------------------------------------

    def status(self, site: str) -> dict[str, Any] | None:
        """GET /api/v1/status of the node at *site*, from the management host, over HTTPS with
        the token (the CLI's client); None when it does not answer."""
        if self._nodeapi_config is None:
            self._nodeapi_config = nodeapi.load_config(str(self.config_path))
        config = self._nodeapi_config
        m = nodeapi.member(config, self.member(site))
        tokens = nodeapi.Tokens(config, environ={}, client_cert=str(self.operator_cert))

        def get() -> dict[str, Any]:
            body: dict[str, Any] = nodeapi.get(m, "/api/v1/status", tokens=tokens)
            return body

        try:
            return in_namespace(self.wan.namespace(MGMT), get)
        except (OSError, nodeapi.CliError, ValueError):
            return None

    def cli(self, site: str | None, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """``gtmcluster COMMAND --config ... [--node <member>] ARGS`` on the management host
        (no --node when *site* is None)."""
        argv, env = self.cli_command(site, *args)
        return self.wan.run(MGMT, argv, capture_output=True, text=True, timeout=timeout, cwd=self.workdir, env=env)

    def cli_command(self, site: str | None, *args: str) -> tuple[list[str], dict[str, str]]:
        """The argv and environment of `cli` (the operator's certificate, no colours)."""
        command, *rest = args
        node = ["--node", self.member(site)] if site is not None else []
        argv = [*gtmcluster_command(), command, "--config", str(self.config_path), *node, *rest]
        env = {k: v for k, v in os.environ.items() if not k.startswith("GTM_")}
        env |= {"NO_COLOR": "1", "GTM_API_CLIENT_CERT": str(self.operator_cert)}
        return argv, env


@contextmanager
def running_deployed(
    workdir: Path,
    prefix: str,
    delays: Mapping[tuple[str, str], float],
    hops: Mapping[tuple[str, str], int] | None = None,
) -> Iterator[Deployed]:
    """A started `Deployed`; every process stopped and every namespace deleted afterwards."""
    world = Deployed(workdir, prefix, delays, hops)
    try:
        world.start()
        yield world
    finally:
        with contextlib.suppress(Exception):
            world.close()
        wanem.cleanup(prefix)
