"""What `gtmcluster import f5` costs as its input grows (the figures behind
`importers.f5import.MAX_INPUT`).

    .venv/bin/python bench/importsize.py [--wideips 1000 10000 20000]

For each count, writes a tmsh ``bigip_gtm.conf`` of that many ``gtm wideip a``, each with
its ``gtm pool a`` of two members on two ``gtm server``s, then runs ``gtmcluster import f5
FILE --no-zone-files`` on it in a child process and prints the file's size, the import's
wall time and its peak resident memory (ru_maxrss). Not a test: figures depend on the
machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def tmsh(wideips: int) -> str:
    """A tmsh config of *wideips* wide IPs, a pool each of two members in two data centers."""
    out = ["gtm datacenter /Common/DC1 { }", "gtm datacenter /Common/DC2 { }"]
    for dc in (1, 2):
        servers = "\n".join(
            f"        /Common/vs{dc}_{i} {{\n            destination 10.{dc}.{i // 250}.{i % 250 + 1}:80\n        }}"
            for i in range(wideips)
        )
        out.append(
            f"gtm server /Common/srv{dc} {{\n    addresses {{\n        192.0.2.{dc} {{ }}\n    }}\n"
            f"    datacenter /Common/DC{dc}\n    product generic-host\n    virtual-servers {{\n{servers}\n    }}\n}}"
        )
    for i in range(wideips):
        out.append(
            f"gtm pool a /Common/pool{i} {{\n    load-balancing-mode round-robin\n    members {{\n"
            f"        /Common/srv1:/Common/vs1_{i} {{\n            member-order 0\n        }}\n"
            f"        /Common/srv2:/Common/vs2_{i} {{\n            member-order 1\n        }}\n    }}\n    ttl 30\n}}"
        )
        out.append(
            f"gtm wideip a /Common/w{i}.example.com {{\n    pool-lb-mode round-robin\n    pools {{\n"
            f"        /Common/pool{i} {{\n            order 0\n        }}\n    }}\n}}"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wideips", type=int, nargs="+", default=[1000, 10000, 20000])
    args = parser.parse_args()
    for count in args.wideips:
        with tempfile.TemporaryDirectory() as folder:
            source = Path(folder) / "bigip_gtm.conf"
            source.write_text(tmsh(count))
            start = time.monotonic()
            with subprocess.Popen(
                [sys.executable, "-m", "gtmcluster.cli.main", "import", "f5", str(source), "--no-zone-files"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            ) as proc:
                _, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = os.waitstatus_to_exitcode(status)
            print(
                json.dumps(
                    {
                        "wideips": count,
                        "file_mb": round(source.stat().st_size / 1e6, 1),
                        "seconds": round(time.monotonic() - start, 1),
                        "peak_mb": round(usage.ru_maxrss * 1024 / 1e6),
                        "exit": proc.returncode,
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
