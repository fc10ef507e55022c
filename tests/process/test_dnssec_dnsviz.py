"""DNSViz over a signed zone served by a real node (``twistd gtm``): `dnsviz probe` asks the
node as the zone's only authoritative server (its loopback address and port given with
``-x``; ``+``: the zone is the top of the analysis, no ancestor is asked), for the apex, static names, a CNAME,
a wildcard and the wide IP (whose answers are decided per query), and for the names and
types it makes up to test denial; `dnsviz grok`, with the zone's DNSKEY as trust anchor,
must find no error. Its warnings, if any, are listed in the failure message of the test
that names them (see docs/dnssec.md, "DNSViz")."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import require_tool
from tests.support import configs
from tests.support.dnsseckeys import VARIANTS, keygen_and_ds
from tests.support.nodeproc import loopback_address, running_node

pytestmark = [pytest.mark.process]

DNS_PORT = 5353
#: `dnsviz grok`, through a shim: with trusted keys (-t), Debian's dnsviz 0.9.4 checks the
#: version of pygraphviz in `pygraphviz.release`, which pygraphviz 1.7 (Debian's) no longer
#: has, and refuses to run (dnsviz/dnsviz#98); the shim gives it the version pygraphviz has
DNSVIZ_GROK = [
    "/usr/bin/python3",
    "-c",
    "import sys, types, pygraphviz\n"
    "release = types.ModuleType('pygraphviz.release')\n"
    "release.version = pygraphviz.__version__\n"
    "sys.modules['pygraphviz.release'] = pygraphviz.release = release\n"
    "sys.argv[0] = '/usr/bin/dnsviz'\n"
    "exec(compile(open('/usr/bin/dnsviz').read(), '/usr/bin/dnsviz', 'exec'))\n",
    "grok",
]
NAMES = ["example.test", "gslb.example.test", "www.example.test", "alias.example.test", "x.wild.example.test"]


def zone_text(address: str) -> str:
    return (
        "$TTL 3600\n"
        "@        IN SOA ns1.example.test. hostmaster.example.test. 1 3600 600 86400 300\n"
        "         IN NS  ns1\n"
        "         IN MX  10 mail\n"
        f"ns1      IN A   {address}\n"
        "mail     IN A   192.0.2.25\n"
        'www      IN TXT "static text"\n'
        "www      IN A   192.0.2.80\n"
        "alias    IN CNAME www\n"
        "*.wild   IN A   192.0.2.99\n"
    )


@dataclass
class Grokked:
    """`dnsviz grok`'s analysis, and the command lines that made it."""

    analysis: dict[str, Any]
    commands: str


def findings(node: Any, kind: str, where: str = "") -> list[str]:
    """Every entry of *kind* ("errors" or "warnings") anywhere in grok's JSON, with its path."""
    out: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == kind and isinstance(value, list):
                out += [f"{where}: {item.get('code', '?')}: {item.get('description', item)}" for item in value]
            else:
                out += findings(value, kind, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += findings(value, kind, f"{where}[{i}]")
    return out


@pytest.fixture(scope="module", params=VARIANTS)
def grokked(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Grokked]:
    require_tool("dnsviz", "dnsviz")
    workdir = tmp_path_factory.mktemp("dnsviz")
    listed = keygen_and_ds(workdir / "keys", request.param, "example.test", "--dnskey")
    # the trust anchor: the DNSKEY the DS points at (a KSK or CSK, flags 257)
    anchor = workdir / "trusted-keys"
    anchor.write_text("".join(line.split(" ;")[0] + "\n" for line in listed.splitlines() if " DNSKEY 257 " in line))
    address = loopback_address()
    config = configs.base(address, DNS_PORT)
    config["zones"][0]["dnssec"] = {"keys": "keys"}
    path = configs.write(workdir, config, zone=zone_text(address))
    probed = workdir / "probe.json"
    probe = [
        "dnsviz", "probe", "-A",
        "-x", f"example.test+:ns1.example.test={address}:{DNS_PORT}",
        "-t", "1", "-o", str(probed), *NAMES,
    ]  # fmt: skip
    grok = [*DNSVIZ_GROK, "-P", "-t", str(anchor), "-r", str(probed), *NAMES]
    with running_node(path, "n1", address, DNS_PORT, workdir):
        run = subprocess.run(probe, capture_output=True, text=True, timeout=120, check=False)
        assert run.returncode == 0, run.stderr
    done = subprocess.run(grok, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    yield Grokked(json.loads(done.stdout), f"{' '.join(probe)}\n{' '.join(grok)}")


def test_the_signed_zone_has_no_dnsviz_error(grokked: Grokked) -> None:
    errors = findings(grokked.analysis, "errors")
    assert errors == [], "\n".join([grokked.commands, *errors])


def test_every_answer_and_denial_is_secure(grokked: Grokked) -> None:
    """From the trust anchor, every DNSKEY, every answer (wide IP, CNAME, wildcard, apex) and
    every denial dnsviz asked for is SECURE, including the name it made up to get an
    NXDOMAIN (proved by the zone's NSEC chain: a secure NXDOMAIN)."""
    zone = grokked.analysis["example.test."]
    assert zone["status"] == "NOERROR"
    assert {key["status"] for key in zone["dnskey"]} == {"SECURE"}
    statuses: dict[str, list[str]] = {}
    for name in NAMES:
        for query, result in grokked.analysis[f"{name}."].get("queries", {}).items():
            for kind in ("answer", "nodata", "nxdomain"):
                statuses.setdefault(query, []).extend(f"{kind} {r.get('status')}" for r in result.get(kind, []))
    assert {s.split()[1] for got in statuses.values() for s in got} == {"SECURE"}, statuses
    for query in ("gslb.example.test./IN/A", "alias.example.test./IN/A", "x.wild.example.test./IN/A"):
        assert statuses[query] == ["answer SECURE"], statuses
    assert statuses["gslb.example.test./IN/AAAA"] == ["nodata SECURE"]  # no IPv6 server where topology sends us
    made_up = [q for q in statuses if q.split("./")[0] not in NAMES]
    assert made_up and all(statuses[q] == ["nxdomain SECURE"] for q in made_up), statuses


def test_the_warnings_are_the_known_ones(grokked: Grokked) -> None:
    warnings = findings(grokked.analysis, "warnings")
    assert warnings == [], "\n".join([grokked.commands, *warnings])
