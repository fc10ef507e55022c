"""Run the fuzz targets under atheris: ``python -m fuzz.run [--seconds N | --runs N] [TARGET ...]``.

Each target runs in its own process (libFuzzer owns it), reading the checked-in seeds in
``fuzz/corpus/<target>/`` and a working corpus in ``var/fuzz/corpus/<target>/`` (kept
between runs, where the inputs it finds are added; the seeds are never written), with the
tokens of ``fuzz/dicts/<target>.dict`` when there is one. An input
that breaks an invariant is saved as ``var/fuzz/crash-<target>-...``; replay it with
``python -m fuzz <target> FILE``. Prints executions, speed and findings per target; exits 1
when a target found something.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: the targets (modules fuzz/<name>.py) and the modules each instruments for coverage
TARGETS: dict[str, tuple[str, ...]] = {
    "dns_request": ("gtmcluster.dns",),
    "dns_response": ("gtmcluster",),
    "config_load": ("gtmcluster.config", "gtmcluster.dns", "yaml"),
    "peer_decode": ("gtmcluster.sync", "gtmcluster.state", "gtmcluster.proximity"),
    "peer_stream": ("gtmcluster.sync", "gtmcluster.state", "twisted.protocols.amp"),
    "load_body": ("gtmcluster.probe", "prometheus_client"),
    "http_stream": ("gtmcluster.probe",),
    "xfr_stream": ("gtmcluster.dns",),
    "bundle_decode": (
        "gtmcluster.groupconfig.bundle",
        "gtmcluster.config.sharing",
        "gtmcluster.config.source.yamlsrc",
        "gtmcluster.dnsdata.zonefile",
        "gtmcluster.dnsdata.zoneinclude",
    ),
    "zone_include": ("gtmcluster.dnsdata.zonefile", "gtmcluster.dnsdata.zoneinclude"),
    "f5_import": ("gtmcluster.importers",),
}
#: an input that takes longer than this (seconds) is a finding (a hang, an alias bomb)
TIMEOUT = 10
RSS_LIMIT_MB = 2048


@dataclass
class Result:
    target: str
    executions: int
    seconds: float
    corpus: int
    crashed: bool
    output: str


def run(
    target: str,
    *,
    seconds: float | None,
    runs: int | None,
    work: Path,
    extra: list[str],
    module: str | None = None,
    seeds: Path | None = None,
    path: tuple[Path, ...] = (),
) -> Result:
    """Fuzz *target* (the module `fuzz.<target>`, or *module* found on *path*) for *seconds*
    or *runs* executions from its seeds (or *seeds*), its new inputs going to *work*."""
    seeds = seeds or ROOT / "fuzz" / "corpus" / target
    corpus = work / "corpus" / target
    corpus.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "fuzz",
        module or target,
        str(corpus),
        str(seeds),
        f"-timeout={TIMEOUT}",
        f"-rss_limit_mb={RSS_LIMIT_MB}",
        f"-artifact_prefix={work}/crash-{target}-",
        "-print_final_stats=1",
        *([f"-max_total_time={seconds:g}"] if seconds is not None else []),
        *([f"-runs={runs}"] if runs is not None else []),
        *extra,
    ]
    dictionary = ROOT / "fuzz" / "dicts" / f"{target}.dict"
    if dictionary.exists():
        command.insert(-len(extra) if extra else len(command), f"-dict={dictionary}")
    python_path = [str(ROOT), *map(str, path), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, python_path))}
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, errors="replace", check=False)
    elapsed = time.monotonic() - started
    output = done.stdout + done.stderr
    executed = re.findall(r"stat::number_of_executed_units:\s*(\d+)", output)
    units = re.findall(r"#\d+\s+\w+\s+cov: \d+ ft: \d+ corp: (\d+)", output)
    return Result(
        target,
        int(executed[-1]) if executed else 0,
        elapsed,
        int(units[-1]) if units else 0,
        done.returncode != 0,
        output,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", metavar="TARGET", help=f"default: all ({', '.join(TARGETS)})")
    how_long = parser.add_mutually_exclusive_group()
    how_long.add_argument("--seconds", type=float, help="fuzz each target this long (default 60)")
    how_long.add_argument("--runs", type=int, help="run each target this many inputs")
    parser.add_argument("--work", type=Path, default=ROOT / "var" / "fuzz", help="working corpus and crashes")
    parser.add_argument("--libfuzzer", action="append", default=[], help="an extra libFuzzer option (repeat)")
    args = parser.parse_args(argv)
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        parser.error(f"unknown target(s) {', '.join(unknown)}; known: {', '.join(TARGETS)}")
    seconds = args.seconds if args.seconds is not None or args.runs is not None else 60.0
    failed = False
    for target in args.targets or TARGETS:
        result = run(target, seconds=seconds, runs=args.runs, work=args.work, extra=args.libfuzzer)
        rate = result.executions / result.seconds if result.seconds else 0.0
        verdict = "FINDING (output below)" if result.crashed else "ok"
        print(
            f"{target:13} {result.executions:>9} runs in {result.seconds:6.1f} s ({rate:7.0f}/s), "
            f"corpus {result.corpus:>5}: {verdict}",
            flush=True,
        )
        if result.crashed:
            failed = True
            print(result.output[-6000:], flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
