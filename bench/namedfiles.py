"""Files a config names that are no regular file, and what the GeoIP copy costs.

    .venv/bin/python bench/namedfiles.py            # both parts
    .venv/bin/python bench/namedfiles.py --reload   # only the node's reload
    .venv/bin/python bench/namedfiles.py --geoip    # only the GeoIP database's copy
    .venv/bin/python bench/namedfiles.py --config-path  # only the config's own path (config sync on)

1. A node (one member, on a loopback address, config sync off so that a reload reads the
   file itself) is reloaded with ``/dev/zero`` and then a FIFO named as ``api.token_file``
   and as a region's address list, while a thread asks it a DNS question every 20 ms: the
   reload's time and answer, the node's RSS before, at its peak and after, the questions
   answered and not. The node runs under RLIMIT_AS 4 GiB (code that reads ``/dev/zero``
   whole fails there rather than taking the machine's memory); a reload that has not
   answered after 5 s is counted as such and the FIFO released.
   With ``--config-path``: a node with config sync on (a reload first reads its file to
   make the bundle it would publish) is reloaded with its config's own path made a link
   to ``/dev/zero`` and then a FIFO, measured the same way.
2. A generated country database (150,000 networks, about 6 MB) is opened and looked up
   200,000 times at random addresses in a fresh process: the time to open it, the time per
   uncached lookup, and the process's RSS by kind before and after (the private copy shows
   as ``RssShmem`` when it is a memory file, ``RssFile`` when it is a file in ``$TMPDIR``).

Run from a checkout (``PYTHONPATH=.`` picks the code measured). Figures depend on the
machine: compare runs of the same session only.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from tests.support import configs, dnsclient  # noqa: E402
from tests.support.hostilefiles import DEV_ZERO, make_fifo, release  # noqa: E402
from tests.support.nodeproc import RunningNode, loopback_address, running_node  # noqa: E402

TOKEN = "a-long-enough-token-for-the-bench"
ADDRESS_SPACE = 4 << 30


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _rss_mb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    return -1


def _reload(node: RunningNode) -> str:
    request = urllib.request.Request(
        f"http://{node.address}:8053/api/v1/reload",
        method="POST",
        data=b"{}",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return str(response.status)
    except urllib.error.HTTPError as e:
        return f"{e.code} {json.loads(e.read())['error'].splitlines()[-1]}"
    except OSError as e:
        return f"no answer ({e!r})"


def _ask(node: RunningNode, seen: dict[str, int], done: threading.Event) -> None:
    """A DNS question every 20 ms until *done*, counted in *seen* with the node's peak RSS."""
    wire = dnsclient.query("gslb.example.test")
    while not done.wait(0.02):
        try:
            dnsclient.udp(wire, node.server, timeout=0.5)
            seen["answered"] += 1
        except OSError:
            seen["unanswered"] += 1
        seen["peak"] = max(seen["peak"], _rss_mb(node.proc.pid))


def reloads(directory: Path) -> None:
    address = loopback_address()
    raw = configs.base(address, 5353)
    raw["api"] = {"token": TOKEN}
    raw["sync_group"]["config_sync"] = False
    path = configs.write(directory, raw)
    fifo = make_fifo(directory / "fifo")
    with running_node(path, "n1", address, 5353, directory, preexec_fn=_limited) as node:
        for place in ("token_file", "address_list"):
            for what, target in (("/dev/zero", DEV_ZERO), ("a FIFO", fifo)):
                changed: dict[str, Any] = yaml.safe_load(yaml.safe_dump(raw))
                if place == "token_file":
                    changed["api"] = {"token_file": str(target)}
                else:
                    changed["regions"]["r3"] = [{"file": str(target)}]
                path.write_text(yaml.safe_dump(changed, sort_keys=False))
                seen = {"answered": 0, "unanswered": 0, "peak": 0}
                done = threading.Event()
                before = _rss_mb(node.proc.pid)
                asking = threading.Thread(target=_ask, args=(node, seen, done), daemon=True)
                asking.start()
                started = time.monotonic()
                outcome = _reload(node)
                elapsed = time.monotonic() - started
                if target == fifo:
                    release(fifo)
                time.sleep(0.3)
                done.set()
                asking.join()
                print(
                    f"{place} = {what}: reload {elapsed:.2f} s, {outcome}; RSS before {before} MB, "
                    f"peak {seen['peak']} MB, after {_rss_mb(node.proc.pid)} MB; DNS questions "
                    f"answered {seen['answered']}, unanswered {seen['unanswered']}"
                )
                path.write_text(yaml.safe_dump(raw, sort_keys=False))


def config_path_reloads(directory: Path) -> None:
    directory.mkdir()
    address = loopback_address()
    raw = configs.base(address, 5353)
    raw["api"] = {"token_file": str(configs.write_secret(directory / "api-token", TOKEN + "\n"))}
    path = configs.write(directory, raw)
    saved = path.read_bytes()
    with running_node(path, "n1", address, 5353, directory, preexec_fn=_limited) as node:
        for what in ("/dev/zero", "a FIFO"):
            path.unlink()
            if what == "a FIFO":
                make_fifo(path)
            else:
                path.symlink_to(DEV_ZERO)
            seen = {"answered": 0, "unanswered": 0, "peak": 0}
            done = threading.Event()
            before = _rss_mb(node.proc.pid)
            asking = threading.Thread(target=_ask, args=(node, seen, done), daemon=True)
            asking.start()
            started = time.monotonic()
            outcome = _reload(node)
            elapsed = time.monotonic() - started
            if what == "a FIFO":
                release(path)
            time.sleep(0.3)
            done.set()
            asking.join()
            print(
                f"config path = {what}: reload {elapsed:.2f} s, {outcome}; RSS before {before} MB, "
                f"peak {seen['peak']} MB, after {_rss_mb(node.proc.pid)} MB; DNS questions "
                f"answered {seen['answered']}, unanswered {seen['unanswered']}"
            )
            path.unlink()
            path.write_bytes(saved)


GEOIP_PROBE = """
import ipaddress, random, sys, time
from pathlib import Path
from gtmcluster.runtime import slices
from gtmcluster.topology.geoip import GeoIP, open_database
def status():
    keys = ("VmRSS", "RssAnon", "RssFile", "RssShmem")
    return {l.split(":")[0]: int(l.split()[1]) // 1024 for l in open("/proc/self/status") if l.startswith(keys)}
before = status()
started = time.monotonic()
database = slices.whole(open_database("country", Path(sys.argv[1])))
opened = time.monotonic() - started
geoip = GeoIP([database], cache_entries=1)
rnd = random.Random(2)
started = time.monotonic()
for _ in range(200000):
    geoip.facts(ipaddress.IPv4Address(rnd.getrandbits(32)), frozenset(["country"]))
per = (time.monotonic() - started) / 200000 * 1e6
copy = [l.split()[-2] for l in open("/proc/self/maps") if "gtm-geoip" in l][:1]
print(f"open {opened * 1000:.0f} ms, {per:.1f} us per lookup, RSS MB before {before} after {status()}, copy {copy}")
"""


def geoip(directory: Path) -> None:
    from mmdb_writer import MMDBWriter
    from netaddr import IPSet  # type: ignore[import-untyped]

    path = directory / "country.mmdb"
    writer = MMDBWriter(ip_version=6, database_type="GeoLite2-Country", ipv4_compatible=True)
    rnd = random.Random(1)
    networks: set[str] = set()
    while len(networks) < 150_000:
        networks.add(f"{rnd.randrange(1, 224)}.{rnd.randrange(256)}.{rnd.randrange(256)}.0/24")
    codes = ["US", "JP", "DE", "CN", "FR", "GB", "BR", "IN"]
    for i, network in enumerate(sorted(networks)):
        code = codes[i % len(codes)]
        record = {"country": {"iso_code": code, "names": {"en": code * 20}}, "continent": {"code": "NA"}}
        writer.insert_network(IPSet([network]), record)
    writer.to_db_file(str(path))
    print(f"database: {path.stat().st_size / 1e6:.1f} MB")
    for _ in range(2):
        subprocess.run([sys.executable, "-c", GEOIP_PROBE, str(path)], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reload", action="store_true", help="only the node's reload")
    parser.add_argument("--geoip", action="store_true", help="only the GeoIP copy")
    parser.add_argument("--config-path", action="store_true", help="only the config's own path, config sync on")
    args = parser.parse_args()
    both = not args.reload and not args.geoip and not args.config_path
    with tempfile.TemporaryDirectory(prefix="gtm-namedfiles-") as directory:
        if args.config_path:
            config_path_reloads(Path(directory) / "shared")
        if args.reload or both:
            reloads(Path(directory) / "node")
        if args.geoip or both:
            geoip(Path(directory))


if __name__ == "__main__":
    main()
