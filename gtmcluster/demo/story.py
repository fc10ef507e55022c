"""The demo's narrated run: topology first, then RTT, agreement, failover and return."""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from gtmcluster.config.addresses import HostPort
from gtmcluster.config.model import Config, Member
from gtmcluster.demo.prepare import DemoFiles, resolver_delays
from gtmcluster.demo.processes import Processes, address_of, busy_addresses, in_use
from gtmcluster.dnsdata.zone import TYPE_A


def say(text: str = "") -> None:
    print(text, flush=True)


def dig(server: HostPort, name: str, source: str, subnet: str | None = None) -> str | None:
    cmd = [
        "dig",
        f"@{server.host}",
        "-p",
        str(server.port),
        "-b",
        source,
        name,
        "A",
        "+norec",
        "+short",
        "+tries=1",
        "+time=2",
    ]
    if subnet:
        cmd.append(f"+subnet={subnet}")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False).stdout.split()
    return out[0] if out else None


def describe(config: Config, address: str | None) -> str:
    for vs in config.virtual_servers.values():
        if str(vs.address) == address:
            return f"{address} ({vs.name} in {vs.datacenter})"
    return address or "no answer"


def until(check: Callable[[], Any], timeout: float, step: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(step)
    return None


class Operator(Protocol):
    """What the story does as an operator would, with the `gtmcluster` command's own pieces
    (`cli.demo` gives them): a node's API read with its token, the LDNS table printed as
    `gtmcluster ldns` prints it, a member's dashboard address with its token."""

    def get(self, member: Member, path: str, params: dict[str, str] | None = None) -> Any:
        """The JSON *member* answers at *path*, or None when it does not answer or refuses."""

    def ldns_table(self, table: Any) -> str:
        """The proximity table as `gtmcluster ldns` prints it."""

    def dashboard_url(self, member: Member) -> str | None:
        """*member*'s dashboard address with its token, or None without a token."""


def shown(path: Path) -> str:
    """*path* as the user would type it from here: relative when below the current folder."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def regions_of(config: Config, address: str) -> str:
    ip = ipaddress.ip_address(address)
    inside = sorted(r.name for r in config.regions.values() if any(ip in n for n in r.networks))
    return f"regions {', '.join(inside)}" if inside else "no region"


class Story:
    def __init__(self, files: DemoFiles, procs: Processes, operator: Operator):
        self.files = files
        #: reads and acts as the CLI does, with each node's own token (the demo's config sets none)
        self.operator = operator
        self.config = files.config
        self.procs = procs
        self.members = list(self.config.sync_group.members)
        self.first = self.members[0]
        self.dns = self.first.dns[0]
        wideip = next((w for w in self.config.wideips.values() if TYPE_A in w.types), None)
        if wideip is None:
            raise RuntimeError("the config has no wide IP of type A")
        self.wideip = wideip.name
        self.resolvers = resolver_delays(self.config)
        self.rtt_ok = True

    def start(self) -> bool:
        c = self.config
        busy = busy_addresses(c, [address for address, _, _ in self.resolvers])
        busy += [
            f"tcp {vs.address}:{vs.port}"
            for vs in self.procs.demo_servers()
            if in_use(str(vs.address), vs.port, socket.SOCK_STREAM)
        ]
        if busy:
            print(
                f"gtmcluster demo: these addresses are in use already (is another demo running?): {', '.join(busy)}",
                file=sys.stderr,
            )
            return False
        group = f"a sync group of {len(self.members)} GTMs on loopback"
        say(f"gtmcluster demo: {group} (files in {shown(self.files.directory)})")
        for vs in self.procs.demo_servers():
            self.procs.start_backend(vs)
        say(f"  backends: {', '.join(f'{vs.name} on {vs.address}:{vs.port}' for vs in self.procs.demo_servers())}")
        for address, _, delays in self.resolvers:
            self.procs.start_resolver(address, delays)
        for member in self.members:
            self.procs.start_node(member, self.files.config_path)
            say(
                f"  {member.name:<9} data center {member.datacenter:<5} DNS {address_of(member.dns[0])}  "
                f"API/dashboard http://{address_of(member.api)}/  log {shown(c.log_dir / (member.name + '.log'))}"
            )
        deadline = time.monotonic() + 30
        for member in self.members:
            if not self.procs.api_up(member, deadline):
                say(f"{member.name} did not start: see {shown(self.files.directory / (member.name + '.stdout'))}")
                return False
        say("waiting for the nodes to connect to each other ...")
        agreed = until(self.digests_agree, 30)
        if not agreed:
            say("the nodes did not all connect in time; carrying on")
        else:
            say(f"  connected; state digests agree on every node ({agreed})")
        return True

    def digests_agree(self) -> str | None:
        statuses = [self.operator.get(m, "/api/v1/status") for m in self.members]
        if any(s is None for s in statuses):
            return None
        if not all(all(p["connected"] for p in s["peers"]) for s in statuses):
            return None
        digests = {s["state"]["digest"] for s in statuses}
        return digests.pop() if len(digests) == 1 else None

    def explain(self, source: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.operator.get(
            self.first, "/api/v1/explain", {"wideip": self.wideip, "ldns": source}
        )
        return found

    def show_answers(self, title: str) -> dict[str, str | None]:
        say(f"\n{title}")
        answers: dict[str, str | None] = {}
        for address, description, _ in self.resolvers:
            answer = dig(self.dns, self.wideip, address)
            answers[address] = answer
            decided = self.explain(address)
            method = decided["method"] if decided else "?"
            say(
                f"  resolver {address:<10} {description:<42} ({regions_of(self.config, address)})"
                f"\n      dig -b {address} {self.wideip}  ->  {describe(self.config, answer)}   [by {method}]"
            )
        return answers

    def paths_complete(self) -> bool:
        table = self.operator.get(self.first, "/api/v1/ldns")
        if table is None:
            return False
        seen = {e["address"]: {p["datacenter"] for p in e["paths"] if p["rtt_us"] > 0} for e in table["ldns"]}
        dcs = {m.datacenter for m in self.members}
        return all(seen.get(address, set()) >= dcs for address, _, _ in self.resolvers)

    def run(self) -> None:
        say(f"\n1. {self.wideip} A, first asked: nothing measured yet, so topology decides at once,")
        say("   and every GTM is asked to probe each resolver from its own data center.")
        before = self.show_answers("   answers now:")
        if not until(self.paths_complete, 20):
            say("\n(the probes did not complete: are the stand-in resolvers running? they need port 53, i.e. root)")
            self.rtt_ok = False
        else:
            table = self.operator.get(self.first, "/api/v1/ldns")
            say(
                f"\n2. The proximity table, the same on every node (gtmcluster ldns --config "
                f"{shown(self.files.config_path)} --node {self.first.name}):"
            )
            say("\n".join("   " + line for line in self.operator.ldns_table(table).splitlines()))
            until(lambda: all((self.operator.get(m, "/api/v1/status") or {}).get("ready") for m in self.members), 10)
            after = self.show_answers(
                "3. Asked again, now RTT decides (the lowest RTT from the resolver's point of view):"
            )
            for address, description, _ in self.resolvers:
                if before.get(address) != after.get(address):
                    say(
                        f"   -> {description} moved from {describe(self.config, before[address])} "
                        f"to {describe(self.config, after[address])}"
                    )
        agreed = until(self.digests_agree, 15)
        say(f"\n4. The sync group agrees: every node holds the same state (digest {agreed or 'DIFFERENT'})")
        self.failover()

    def failover(self) -> None:
        servers = {vs.name: vs for vs in self.procs.demo_servers()}
        address, description, _ = self.resolvers[0]
        current = dig(self.dns, self.wideip, address)
        vs = next((v for v in servers.values() if str(v.address) == current), None)
        if vs is None or not vs.monitors:
            return
        # with every check failing, the server is out once all but (needed - 1) of its
        # monitors are down, and back once `needed` of them are up (monitor_rule)
        needed = vs.monitor_rule.needed(len(vs.monitors))
        m = sorted(vs.monitors, key=lambda m: m.interval * m.down_after + m.timeout)[len(vs.monitors) - needed]
        up = sorted(vs.monitors, key=lambda m: m.interval * m.up_after)[needed - 1]
        bound = m.interval * m.down_after + m.timeout
        which = f" (monitor {m.name})" if len(vs.monitors) > 1 else ""
        say(f"\n5. Failover: stopping {vs.name}'s backend; {description} ({address}) should move within")
        say(
            f"   interval x down_after + timeout{which} = {m.interval:g} x {m.down_after} + {m.timeout:g} = {bound:g} s"
        )
        start = time.monotonic()
        self.procs.stop_backend(vs.name)
        moved = until(lambda: (a := dig(self.dns, self.wideip, address)) != str(vs.address) and a, bound + 10, 0.1)
        took = time.monotonic() - start
        say(f"   -> {describe(self.config, moved)} after {took:.1f} s" if moved else "   -> did not move in time")
        back_after = up.up_after * up.interval
        which = f" (monitor {up.name})" if len(vs.monitors) > 1 else ""
        say(f"   restarting {vs.name}'s backend; it should be back after up_after x interval{which} = {back_after:g} s")
        start = time.monotonic()
        self.procs.start_backend(vs)
        back = until(lambda: dig(self.dns, self.wideip, address) == str(vs.address), bound + 10, 0.1)
        took = time.monotonic() - start
        say(f"   -> {describe(self.config, str(vs.address))} after {took:.1f} s" if back else "   -> not back yet")

    def epilogue(self) -> None:
        say("\nThe group keeps running:")
        for member in self.members:
            url = self.operator.dashboard_url(member) or f"http://{address_of(member.api)}/"
            say(f"  dashboard of {member.name}: {url}")
        say(f"  follow the logs:  gtmcluster logs -f --config {shown(self.files.config_path)}")
        say(f"  status:           gtmcluster status --config {shown(self.files.config_path)}")
        say(f"  ask a GTM:        dig @{self.dns.host} -p {self.dns.port} -b 127.0.2.1 {self.wideip}")
        say(
            f"  why that answer:  gtmcluster explain --config {shown(self.files.config_path)} --node {self.first.name} "
            f"{self.wideip} --ldns 127.0.2.1"
        )
