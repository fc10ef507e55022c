"""Properties of the F5 import over generated tmsh and 3-DNS configurations: it never fails
with anything but findings, and what it writes always loads."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gtmcluster.config.load import load
from gtmcluster.importers import f5import

NAMES = st.sampled_from(["a", "b", "/Common/c", "/P/d", "e:f", "g h", "x" * 70])
DCS = st.sampled_from(["D1", "/Common/D2", "D3"])
MODES = st.sampled_from(
    ["round-robin", "ratio", "global-availability", "topology", "round-trip-time", "fallback-ip", "cpu", "none", "junk"]
)
DESTS = st.sampled_from(
    ["192.0.2.1:80", "192.0.2.2:http", "2001:db8::1.80", "198.51.100.7:any", "nowhere", "192.0.2.1:80"]
)
NUMS = st.sampled_from(["0", "1", "3", "70000", "x", "4294967295"])
SELECTORS = st.sampled_from(
    [
        "subnet 10.0.0.0/8",
        "subnet 0.0.0.0/0",
        "not subnet 10.1.0.0/16",
        "region /Common/r1",
        "region /Common/r2",
        "country CN",
        "isp x",
        "datacenter /Common/D2",
        "datacenter D1",
        "pool /Common/c",
        "pool a",
        "subnet bogus",
    ]
)


@st.composite
def tmsh(draw: st.DrawFn) -> str:
    out = [f"gtm datacenter {dc} {{ }}" for dc in ("D1", "/Common/D2", "D3")]
    out.append('gtm monitor http m1 {\n    interval 5\n    timeout 16\n    recv "ok("\n}')
    out.append(
        "gtm region /Common/r1 {\n    region-members {\n        subnet 10.0.0.0/8 { }\n"
        "        datacenter D1 { }\n    }\n}"
    )
    out.append("gtm region /Common/r2 {\n    region-members {\n        not subnet 10.2.0.0/16 { }\n    }\n}")
    monitors = st.sampled_from(
        ["m1", "/Common/http", "bigip", "m1 and /Common/tcp", "min 2 of { m1 bigip }", "min 1 of { m1 m1 }"]
    )
    for i in range(draw(st.integers(1, 3))):
        vss = "\n".join(
            f"        {draw(NAMES)} {{\n            destination {draw(DESTS)}\n"
            f"            monitor {draw(monitors)}\n        }}"
            for _ in range(draw(st.integers(0, 3)))
        )
        out.append(f"gtm server s{i} {{\n    datacenter {draw(DCS)}\n    virtual-servers {{\n{vss}\n    }}\n}}")
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["a", "aaaa", "cname", "mx"]))
        members = "\n".join(
            f"        s{draw(st.integers(0, 2))}:{draw(NAMES)} {{\n            member-order {draw(NUMS)}\n"
            f"            ratio {draw(NUMS)}\n        }}"
            if kind != "cname"
            else f"        t{draw(st.integers(0, 9))}.example.net {{ }}"
            for _ in range(draw(st.integers(0, 3)))
        )
        out.append(
            f"gtm pool {kind} {draw(NAMES)} {{\n    load-balancing-mode {draw(MODES)}\n"
            f"    alternate-mode {draw(MODES)}\n    fallback-ip {draw(st.sampled_from(['0.0.0.0', '192.0.2.9']))}\n"
            f"    ttl {draw(NUMS)}\n    members {{\n{members}\n    }}\n}}"
        )
    for _ in range(draw(st.integers(0, 3))):
        out.append(f"gtm topology ldns: {draw(SELECTORS)} server: {draw(SELECTORS)} {{\n    score {draw(NUMS)}\n}}")
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["a", "aaaa", "cname"]))
        wideip_names = st.sampled_from(
            ["www.example.com", "api.example.com", "w?.example.com", "*.x.example.com", "top"]
        )
        name, alias = draw(wideip_names), draw(wideip_names)
        out.append(
            f"gtm wideip {kind} {name} {{\n    pool-lb-mode {draw(MODES)}\n    aliases {{\n        {alias}\n    }}\n"
            f"    persistence enabled\n    ttl-persistence {draw(NUMS)}\n"
            f"    pools {{\n        {draw(NAMES)} {{\n            order {draw(NUMS)}\n        }}\n    }}\n}}"
        )
    return "\n".join(out) + "\n"


def check_result(text: str, name: str) -> None:
    """The import finishes, and what it wrote loads, whatever it lost on the way (the
    mappers drop what they cannot map, never leave a dangling or invalid object)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_text(text)
        result = f5import.run([str(path)])
        assert [f for f in result.imported.findings if "does not load" in f.why] == []
        out = Path(folder) / "out.yaml"
        out.write_text(result.text)
        for relative, zone in result.zone_files.items():
            (Path(folder) / relative).parent.mkdir(parents=True, exist_ok=True)
            (Path(folder) / relative).write_text(zone)
        load(out)  # raises ConfigError if it does not


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tmsh())
def test_tmsh_imports_always_load(text: str) -> None:
    check_result(text, "bigip_gtm.conf")


@st.composite
def threedns(draw: st.DrawFn) -> str:
    out = ['datacenter {\n  name "CNC"\n  server 10.1.1.5\n}']
    vs = f'  vs {{\n    address {draw(DESTS)}\n    name "v1"\n  }}'
    out.append(f'server {{\n  address 10.1.1.5\n  name "b1"\n{vs}\n}}')
    for _ in range(draw(st.integers(0, 3))):
        members = "\n".join(f"    address {draw(DESTS)} ratio {draw(NUMS)}" for _ in range(draw(st.integers(0, 3))))
        modes = st.sampled_from(["rr", "ga", "topology", "rtt", "qos", "null", "return_to_dns", "vs_score", "?"])
        out.append(
            f'wideip {{\n  name "{draw(st.sampled_from(["a.example.com", "b.example.com", "bad name"]))}"\n'
            f'  pool_lbmode {draw(modes)}\n  pool {{\n    name "{draw(NAMES)}"\n    preferred {draw(modes)}\n'
            f"    alternate {draw(modes)}\n{members}\n  }}\n}}"
        )
    servers = st.sampled_from(['dc."CNC"', 'pool."a"', '!dc."CNC"', 'region."r"'])
    ldnses = st.sampled_from(["10.0.0.0/8", 'country."CN"', "junk"])
    records = "\n".join(f"  {draw(servers)} {draw(ldnses)} {draw(NUMS)}" for _ in range(draw(st.integers(0, 3))))
    out.append(f"topology {{\n{records}\n}}")
    return "\n".join(out) + "\n"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(threedns())
def test_threedns_imports_always_load(text: str) -> None:
    check_result(text, "wideip.conf")
