"""The figures of bench/compare.py's runs and its report: each run as measured (`Run`), the
medians per mix and server (`summarize`), the table printed per mix with the ratios to NSD
and the floor, and the verdicts against the targets of issues 7 and 34 (`report`).
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import peers
import randommix

if TYPE_CHECKING:
    from compare import Bench

TARGETS: dict[str, dict[str, float]] = {"wideip": {"qps": 0.8, "cpu": 1.3}, "static": {"qps": 0.9}}
P99_TARGET = 0.002  # seconds, our node at 70% of its max


@dataclass
class Run:
    """One dnsperf run against one server, as measured."""

    round: int
    mix: str
    server: str
    pinning: str
    kind: str  # "max" (unlimited rate) or "fixed" (-Q)
    seconds: float
    target_qps: float | None
    qps: float
    sent: int
    completed: int
    lost: int
    rcodes: dict[str, int]
    avg_latency: float
    server_cpu: float  # seconds
    cpu_us_per_query: float
    load_cpu_us_per_query: float
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    p999: float | None = None
    timeouts: int = 0
    commands: tuple[str, ...] = ()


def fmt_qps(q: float) -> str:
    return f"{q / 1000:.1f}k"


def fmt_ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.3f} ms"


def median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarize(runs: list[Run], mix: str, server: str, pinning: str) -> dict[str, Any]:
    top = [r for r in runs if (r.mix, r.server, r.pinning, r.kind) == (mix, server, pinning, "max")]
    fixed = [r for r in runs if (r.mix, r.server, r.pinning, r.kind) == (mix, server, pinning, "fixed")]
    rcodes: dict[str, int] = {}
    for r in top + fixed:
        for code, n in r.rcodes.items():
            rcodes[code] = rcodes.get(code, 0) + n
    return {
        "qps": median([r.qps for r in top]),
        "qps_min": min(r.qps for r in top),
        "qps_max": max(r.qps for r in top),
        "cpu_us_per_query": median([r.cpu_us_per_query for r in top]),
        "sent": sum(r.sent for r in top),
        "lost": sum(r.lost for r in top),
        "avg_latency": median([r.avg_latency for r in top]),
        "load_cpu_us_per_query": median([r.load_cpu_us_per_query for r in top]),
        "fixed_target_qps": median([r.target_qps for r in fixed]),
        "fixed_qps": median([r.qps for r in fixed]),
        "fixed_lost": sum(r.lost for r in fixed),
        "fixed_sent": sum(r.sent for r in fixed),
        "fixed_cpu_us_per_query": median([r.cpu_us_per_query for r in fixed]),
        "fixed_core_share": median([r.server_cpu / r.seconds for r in fixed]),
        "p50": median([r.p50 for r in fixed]),
        "p99": median([r.p99 for r in fixed]),
        "p99_worst": max((r.p99 for r in fixed if r.p99 is not None), default=None),
        "p999": median([r.p999 for r in fixed]),
        "rcodes": rcodes,
    }


def _target(pinning: str, mix: str, what: str, value: float | None, target: str, met: bool) -> dict[str, Any]:
    return {"pinning": pinning, "mix": mix, "what": what, "value": value, "target": target, "met": met}


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def nsd_targets(
    a: argparse.Namespace, pinning: str, mix: str, ours: dict[str, Any], nsd: dict[str, Any]
) -> list[dict[str, Any]]:
    """Print ours/NSD against the targets of issue 7; the verdicts."""
    found: list[dict[str, Any]] = []
    qps_ratio = ours["qps"] / nsd["qps"] if nsd["qps"] else 0.0
    cpu_ratio = ours["cpu_us_per_query"] / nsd["cpu_us_per_query"] if nsd["cpu_us_per_query"] else 0.0
    goal = TARGETS[mix]
    line = f"  ours/NSD: qps {qps_ratio:.2f}x (target >= {goal['qps']}x: {verdict(qps_ratio >= goal['qps'])})"
    found.append(_target(pinning, mix, "qps ratio", qps_ratio, f">= {goal['qps']}", qps_ratio >= goal["qps"]))
    if "cpu" in goal:
        line += f"; CPU/query {cpu_ratio:.2f}x (target <= {goal['cpu']}x: {verdict(cpu_ratio <= goal['cpu'])})"
        met = cpu_ratio <= goal["cpu"]
        found.append(_target(pinning, mix, "CPU/query ratio", cpu_ratio, f"<= {goal['cpu']}", met))
    else:
        line += f"; CPU/query {cpu_ratio:.2f}x (no target)"
    p99 = ours["p99"]
    p99_ok = p99 is not None and p99 < P99_TARGET
    line += f"; our p99 at {a.fixed_label}: {fmt_ms(p99)} (target at 70%: < 2 ms: {verdict(p99_ok)})"
    found.append(_target(pinning, mix, f"our p99 at {a.fixed_label}", p99, "< 0.002 s", p99_ok))
    print(line)
    if nsd["p99"] is not None and nsd["p99"] >= P99_TARGET:
        print(
            f"  note: NSD's own p99 at {a.fixed_label} is {fmt_ms(nsd['p99'])}: the machine (load generator,"
            " other work), not only the server, sets the tail here; try --pin-load or a quieter machine"
        )
    return found


def report(bench: Bench, elapsed: float) -> dict[str, Any]:
    a = bench.args
    summary: dict[str, Any] = {}
    targets: list[dict[str, Any]] = []
    for pinning in bench.pinnings():
        for mix in a.mixes:
            m = bench.mixes[mix]
            where = f", dnsperf on CPU {a.pin_load}, servers on the others" if pinning == "pinned" else ""
            print(f"\nmix {mix} ({pinning}{where}): {m.description}")
            print(f"  clients: {m.clients}")
            print(
                f"  {'':<8}{'max load: qps (min-max)':<27}{'CPU us/q':>9}{'lost':>9}{'avg lat':>11}{'dnsperf us/q':>13}"
                f"  | {f'at {a.fixed_label}: qps':<13}{'p50':>10}{'p99':>10}{'p99.9':>10}{'CPU us/q':>9}{'lost':>6}"
            )
            s = {key: summarize(bench.runs, mix, key, pinning) for key in bench.servers}
            summary[f"{pinning}/{mix}"] = s
            for key, server in bench.servers.items():
                f = s[key]
                span = f"{fmt_qps(f['qps'])} ({fmt_qps(f['qps_min'])}-{fmt_qps(f['qps_max'])})"
                short = f["fixed_qps"] < 0.95 * (f["fixed_target_qps"] or 0)
                fixed_qps = fmt_qps(f["fixed_qps"]) + (f" of {fmt_qps(f['fixed_target_qps'])}!" if short else "")
                print(
                    f"  {server.label:<8}{span:<27}{f['cpu_us_per_query']:>9.1f}{f['lost']:>9}"
                    f"{fmt_ms(f['avg_latency']):>11}{f['load_cpu_us_per_query']:>13.1f}"
                    f"  | {fixed_qps:<13}{fmt_ms(f['p50']):>10}{fmt_ms(f['p99']):>10}"
                    f"{fmt_ms(f['p999']):>10}{f['fixed_cpu_us_per_query']:>9.1f}{f['fixed_lost']:>6}"
                )
            print("\n".join(peers.ratio_lines(s)))
            if "ours" in s and "nsd" in s and mix in TARGETS:
                targets += nsd_targets(a, pinning, mix, s["ours"], s["nsd"])
            if "ours" in s and "floor" in s and mix not in TARGETS:
                targets += randommix.floor_target(pinning, mix, s["ours"], s["floor"])
            for key, server in bench.servers.items():
                codes = s[key]["rcodes"]
                total = sum(codes.values()) or 1
                text = ", ".join(f"{c} {n / total:.1%}" for c, n in sorted(codes.items(), key=lambda kv: -kv[1]))
                lost = s[key]["lost"] + s[key]["fixed_lost"]
                sent = s[key]["sent"] + s[key]["fixed_sent"]
                print(f"  {server.label} rcodes: {text}; lost {lost} of {sent}")
    print(f"\n{len(bench.runs)} runs in {elapsed:.0f} s; load average now {os.getloadavg()[0]:.2f}")
    return {"summary": summary, "targets": targets}
