"""A real net-snmp `snmpd` on a loopback address, serving interface counters the test sets.

The agent's config is made by the test: a read-only v2c community for loopback askers,
and a `pass` script that answers IF-MIB::ifHCInOctets.N and ifHCOutOctets.N (as Counter64)
from files the test writes (`Snmpd.set`), so the figures are exactly what the test says.
The agent is stopped (SIGTERM) when the context ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gtmcluster.probe.snmp import IF_HC_IN_OCTETS, IF_HC_OUT_OCTETS

COMMUNITY = "gtm-test"
#: each counter's file holds "T0_NS BASE OCTETS_PER_SECOND": its value is BASE at T0 (ns of
#: the wall clock), growing at that rate (milliseconds' resolution); at rate 0, BASE as it is
#: (which may be past 2**63, beyond the shell's arithmetic)
PASS_SCRIPT = """#!/bin/sh
# snmpd pass: -g OID (get), -n OID (getnext: not served)
[ "$1" = "-g" ] || exit 0
file="{dir}/$(echo "$2" | tr . _)"
[ -f "$file" ] || exit 0
read t0 base rate < "$file"
echo "$2"
echo counter64
if [ "$rate" = 0 ]; then
  echo "$base"
else
  now=$(date +%s%N)
  echo $(( base + rate * ((now - t0) / 1000000) / 1000 ))
fi
"""


def available() -> bool:
    return shutil.which("snmpd") is not None and shutil.which("snmpget") is not None


@dataclass
class Snmpd:
    address: str
    port: int
    counters: Path
    proc: subprocess.Popen[bytes]

    def set(self, if_index: int, in_octets: int, out_octets: int) -> None:
        """The counters interface *if_index* reports from now on (still)."""
        now = time.time_ns()
        for oid, value in ((IF_HC_IN_OCTETS, in_octets), (IF_HC_OUT_OCTETS, out_octets)):
            self._write(oid, if_index, f"{now} {value} 0")

    def set_rate(self, if_index: int, in_bps: int, out_bps: int) -> None:
        """From now on interface *if_index* counts *in_bps* and *out_bps* bits a second, on
        from where its counters are (from 0 the first time)."""
        now = time.time_ns()
        for oid, bps in ((IF_HC_IN_OCTETS, in_bps), (IF_HC_OUT_OCTETS, out_bps)):
            self._write(oid, if_index, f"{now} {self._value(oid, if_index, now)} {bps // 8}")

    def _file(self, oid: str, if_index: int) -> Path:
        return self.counters / f".{oid}.{if_index}".replace(".", "_")

    def _value(self, oid: str, if_index: int, now: int) -> int:
        file = self._file(oid, if_index)
        if not file.exists():
            return 0
        t0, base, rate = (int(x) for x in file.read_text().split())
        return base + rate * ((now - t0) // 1_000_000) // 1000

    def _write(self, oid: str, if_index: int, line: str) -> None:
        file = self._file(oid, if_index)
        tmp = file.with_name(file.name + ".tmp")
        tmp.write_text(line + "\n")
        tmp.replace(file)

    def snmpget(self, *oids: str, community: str = COMMUNITY) -> str:
        out = subprocess.run(
            ["snmpget", "-v2c", "-c", community, "-On", "-t", "1", "-r", "0", f"{self.address}:{self.port}", *oids],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return out.stdout + out.stderr


@contextmanager
def running_snmpd(workdir: Path, address: str, port: int = 1161) -> Iterator[Snmpd]:
    workdir.mkdir(parents=True, exist_ok=True)
    counters = workdir / "counters"
    counters.mkdir(exist_ok=True)
    script = workdir / "ifhc-pass.sh"
    script.write_text(PASS_SCRIPT.format(dir=counters))
    script.chmod(0o755)
    conf = workdir / "snmpd.conf"
    conf.write_text(
        f"rocommunity {COMMUNITY} 127.0.0.0/8\npass .{IF_HC_IN_OCTETS[: IF_HC_IN_OCTETS.rindex('.')]} {script}\n"
    )
    log = workdir / "snmpd.log"
    env = {**os.environ, "SNMP_PERSISTENT_DIR": str(workdir / "persist"), "MIBS": ""}
    proc = subprocess.Popen(
        ["snmpd", "-f", "-C", "-c", str(conf), "-Lf", str(log), f"udp:{address}:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        env=env,
    )
    agent = Snmpd(address, port, counters, proc)
    try:
        agent.set(999, 0, 0)  # a probe value, to see the agent answer
        deadline = time.monotonic() + 15
        while "Counter64" not in agent.snmpget(f".{IF_HC_IN_OCTETS}.999"):
            if proc.poll() is not None or time.monotonic() > deadline:
                text = log.read_text(errors="replace") if log.exists() else ""
                raise AssertionError(f"snmpd did not answer on {address}:{port}:\n{text}")
            time.sleep(0.1)  # (polling a process we cannot be told about)
        yield agent
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
