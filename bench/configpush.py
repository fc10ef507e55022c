"""Config push at size (issue 15): real members, a large config, one push, measured.

    .venv/bin/python bench/configpush.py                         # 3 members, 1,000 servers
    .venv/bin/python bench/configpush.py --scale 1 --json F      # 5,000 servers (bench/bigconfig.py's)

The config is bench/bigconfig.py's (`tests.support.bigconfig`) at ``--scale`` x 5,000
monitored servers, with ``--members`` real ``twistd gtm`` members on their own loopback
addresses. Once every member answers, dnsperf asks n2 at ``--qps`` throughout, and
``gtmcluster config push`` sends the config with one wide IP more through n1. Measured:

- the push command's time (n1 checks and runs the bundle, then waits for the others);
- from the push to each member answering the new wide IP (a UDP query every 10 ms);
- each member's longest reactor stall over the push (`gtm_reactor_lag_recent_max_seconds`,
  scraped just before and after);
- dnsperf's lost queries and latency.

``--mode reload`` is the reference: the same change made the way it was before config
sync, by writing the file every member reads (``config_sync: false``) and asking each
member to reload it (``POST /api/v1/reload``, all at once).

Not a test: the figures depend on the machine and what else runs (the load average is
printed). Each member runs 1,000 x scale health checks a second; two cores shared by
everything: more members means more contention.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.support of this checkout

from bigworld import Dnsperf, Member  # noqa: E402

from tests.support import bigconfig, dnsclient  # noqa: E402

NEW = "pushed.big.test"
SYNC = {"idle_timeout": 30.0, "handshake_timeout": 10.0, "reconcile_interval": 60.0}
DNSPERF_SOURCE = "127.78.0.2"


def answers(member: Member, name: str) -> list[str]:
    try:
        reply = dnsclient.udp(dnsclient.query(name, "A"), member.dns, timeout=0.5)
    except OSError:
        return []
    return sorted(dnsclient.addresses(dnsclient.parse(reply)))


def say(text: str) -> None:
    print(f"configpush: {text}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=0.2, help="x 5,000 servers (and pools, wide IPs, topology)")
    p.add_argument("--members", type=int, default=3)
    p.add_argument("--qps", type=int, default=2000, help="dnsperf's rate against n2")
    p.add_argument("--address", default="127.0.72", help="members on ADDRESS.1, ADDRESS.2, ...")
    p.add_argument("--mode", choices=("push", "reload"), default="push", help="push, or the reference: reload")
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--keep", action="store_true", help="keep the work folder")
    args = p.parse_args(argv)
    if shutil.which("dnsperf") is None:
        say("dnsperf is not installed (Debian package dnsperf)")
        return 2
    s = args.scale
    shape = bigconfig.Shape(
        servers=round(5000 * s),
        pools=round(500 * s),
        wideips=round(2000 * s),
        topology=round(20000 * s),
        regions=max(1, round(200 * s)),
        members=args.members,
    )
    workdir = Path(tempfile.mkdtemp(prefix="gtm-configpush-"))
    base, backends = bigconfig.open_backends(shape.server_datacenters, 18100)
    shape = bigconfig.Shape(**{**shape.__dict__, "backend_port": base})
    addresses = [f"{args.address}.{i + 1}" for i in range(shape.members)]
    sync = {**SYNC, "config_sync": args.mode == "push"}
    path = bigconfig.write(workdir, shape, addresses, sync=sync)
    (workdir / "queries").write_text("".join(f"{n} A\n" for n in shape.wideip_names()[:200]))
    say(
        f"{shape.servers:,} servers, {shape.wideips:,} wide IPs, {shape.members} members, config "
        f"{path.stat().st_size / 1e6:.1f} MB; load average {os.getloadavg()[0]:.2f}; work folder {workdir}"
    )
    members = [Member(workdir, path, bigconfig.member_name(i), addresses[i]) for i in range(shape.members)]
    report: dict[str, Any] = {"shape": shape.__dict__, "load_average_start": os.getloadavg()}
    perf: Dnsperf | None = None
    try:
        for m in members:
            m.spawn()
        for m in members:
            if m.wait_answering(180) is None:
                say(f"{m.name} did not answer: {m.log_text()[-2000:]}")
                return 2
        time.sleep(5)  # the members connect and settle (a benchmark's pause, not a test's wait)
        raw = yaml.safe_load(path.read_text())
        changed = copy.deepcopy(raw)
        first_pool = next(iter(raw["pools"]))
        changed["wideips"][NEW] = {"type": "A", "pools": [first_pool]}
        edited = workdir / "edit"
        edited.mkdir()
        changed["base_dir"] = ".."
        (edited / path.name).write_text(yaml.dump(changed, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper)))
        perf = Dnsperf(workdir, "push", members[1].dns, workdir / "queries", DNSPERF_SOURCE, args.qps)
        time.sleep(2)  # dnsperf at its pace
        for m in members:
            m.lag()  # resets the "recent" maximum: what follows is the push's
        env = {**os.environ, "GTM_API_TOKEN": bigconfig.TOKEN}
        cli = [sys.executable, "-m", "gtmcluster.cli.main"]
        started = time.monotonic()
        if args.mode == "push":
            command = [*cli, "config", "push", "--config", str(edited / path.name), "--node", members[0].name]
        else:  # every member reads the file again, all at once
            del changed["base_dir"]
            path.write_text(yaml.dump(changed, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper)))
            command = [
                sys.executable,
                "-c",
                "import sys, threading; sys.path[:0] = sys.argv[1:3]; from bigworld import Member; "
                "from pathlib import Path; ms = [Member(Path('.'), Path('.'), n, a) for n, a in "
                "zip(sys.argv[3::2], sys.argv[4::2])]; ts = [threading.Thread(target=m.api, "
                "args=('/api/v1/reload', 'POST')) for m in ms]; [t.start() for t in ts]; [t.join() for t in ts]",
                str(Path(__file__).parent),
                str(ROOT),
                *[x for m in members for x in (m.name, m.address)],
            ]
        push = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        answered: dict[str, float] = {}
        while len(answered) < len(members) and time.monotonic() - started < 180:
            for m in members:
                if m.name not in answered and answers(m, NEW):
                    answered[m.name] = round(time.monotonic() - started, 3)
            time.sleep(0.01)
        out, _ = push.communicate(timeout=180)
        took = time.monotonic() - started
        time.sleep(2)
        stalls = {}
        for m in members:
            lag = m.lag()
            stalls[m.name] = round(lag.max_since_scrape * 1000, 1) if lag else None
        report |= {
            "push_exit": push.returncode,
            "push_output": out,
            "push_s": round(took, 3),
            "answering_s": answered,
            "longest_stall_ms": stalls,
            "dnsperf_n2": perf.stop(),
            "load_average_end": os.getloadavg(),
        }
        perf = None
    finally:
        if perf is not None:
            perf.stop()
        for m in members:
            m.stop()
        for b in backends:
            b.close()
        if args.keep:
            say(f"work folder kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    say(f"push command: {report['push_s']} s, exit {report['push_exit']}")
    say(f"answering the new wide IP, seconds after the push began: {report['answering_s']}")
    say(f"longest reactor stall over the push, ms: {report['longest_stall_ms']}")
    d = report["dnsperf_n2"]
    say(
        f"dnsperf at n2: {d.get('sent')} sent, {d.get('lost')} lost, p99 {d.get('p99_ms')} ms, max {d.get('max_ms')} ms"
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return 0 if report["push_exit"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
