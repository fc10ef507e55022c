"""The chaos run's invariants and figures, computed from its recorded history alone (pure).

A history is a list of events (dicts, one JSON line each in the history file), each with a
wall-clock time ``t`` and a ``kind``:

- ``setup``: the nodes (member -> WAN address), the virtual servers (name -> address), the
  monitored ones, the admin-written ones, the bounds (`Bounds`), the seed;
- ``dns``: one query of the load generator: ``node``, ``t`` when sent, ``rcode`` (None: no
  reply within the timeout), ``answer`` (the A records);
- ``round``: one pass of the state observer: ``views``: member -> None (its API did not
  answer) or ``{"digest", "records", "peers": {member: connected}, "vs": {vs: {"available",
  "admin", "own"}}}``, ``own`` being the node's own monitor verdict (None: none yet);
- ``nemesis``: a fault or its repair: ``action`` (``cut``, ``heal``, ``loss``, ``kill``,
  ``start``, ``backend_stop``, ``backend_start``, ``episode``, ``final_heal``) and its
  arguments (``node``, ``vs``, ``a``/``b``/``oneway``, ``share``, ``skew``, ``name``/``phase``);
- ``admin``: an admin write (``POST /api/v1/virtual-servers/VS/STATE``): ``node``, ``vs``,
  ``state``, ``acked`` (it returned 200), ``skew`` (that node's clock offset);
- ``final``: each node's admin state per virtual server, read after the last heal;
- ``logs``: per node, how many tracebacks its log and output hold, and the first one;
- ``end``.

The invariants (each a failure line when broken):

1. *DNS never stops answering on a live node*: from a node's first reply after it (re)starts
   until it is killed, no gap between answered queries is longer than ``max_gap``.
2. *No answer names a virtual server that every observer has seen down for longer than the
   bound*: once every node that reports has its own verdict "down" on a server, no node
   answers with it after ``propagation`` seconds; and, against the truth, once a server's
   backend is stopped, no node answers with it after ``failover`` seconds.
3. *Digests agree after the last heal* within ``converge`` seconds.
4. *No acknowledged record is lost*: an admin write that returned 200 is what every node
   holds at the end, unless a write that may carry a higher version superseded it (a later
   one, an unacknowledged one, or an earlier one from a node whose clock was ahead).
5. *Health does not flap under loss*: while the links between the GTMs lose 20% of their
   packets (and nothing else is broken), no node's availability of a server changes.
6. No node logged a traceback (checked by the runner, which reads the logs).
"""

from __future__ import annotations

import itertools
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

Event = Mapping[str, Any]


@dataclass(frozen=True)
class Bounds:
    """What the invariants allow, in seconds."""

    #: longest time a live node may go without answering a query
    max_gap: float = 3.0
    #: after every reporting observer's own verdict is down: the news reaches every node
    #: (pushed at once, or the silent peer is dropped after the sync idle timeout)
    propagation: float = 10.0
    #: after a backend stops: interval x down_after + timeout, plus the idle timeout when a
    #: cut hides a peer's verdict, plus slack
    failover: float = 16.0
    #: after the last heal, until every node's state digest is equal
    converge: float = 45.0
    #: how much a write's send time may be off the version its node stamped (request latency)
    clock_tolerance: float = 1.0


@dataclass
class Report:
    """Figures (JSON-able) and the broken invariants, each a line saying what and where."""

    figures: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def check(history: Iterable[Event]) -> Report:
    """Every invariant and figure of one run's *history*."""
    events = sorted(history, key=lambda e: float(e["t"]))
    setup = next((e for e in events if e["kind"] == "setup"), None)
    if setup is None:
        return Report(failures=["the history has no setup event"])
    bounds = Bounds(**setup.get("bounds", {}))
    nodes = list(setup["nodes"])
    report = Report(figures={"bounds": asdict(bounds), "seed": setup.get("seed"), "seconds": setup.get("seconds")})
    end = max(float(e["t"]) for e in events)
    spans = alive_spans(events, nodes, end)
    answering(events, spans, bounds, report)
    by_address = {address: vs for vs, address in setup["vs"].items()}
    failover_by_observers(events, setup["monitored"], by_address, bounds, report)
    failover_by_truth(events, by_address, bounds, report)
    convergence(events, nodes, bounds, report)
    acknowledged(events, setup.get("admin_vs", []), bounds, report)
    flaps_under_loss(events, setup["monitored"], report)
    tracebacks(events, report)
    loads = [float(e["load"]) for e in events if e["kind"] == "round" and "load" in e]
    if loads:
        report.figures["load"] = {"mean": round(statistics.mean(loads), 2), "max": max(loads)}
    report.figures["episodes"] = dict(
        Counter(
            e["name"] for e in events if e["kind"] == "nemesis" and e["action"] == "episode" and e["phase"] == "start"
        )
    )
    return report


# -- 1. answering -------------------------------------------------------------------------------


def alive_spans(events: Sequence[Event], nodes: Sequence[str], end: float) -> dict[str, list[tuple[float, float]]]:
    """Per node, when its process ran: from each ``start`` to the next ``kill`` (or *end*)."""
    spans: dict[str, list[tuple[float, float]]] = {n: [] for n in nodes}
    started: dict[str, float] = {}
    for e in events:
        if e["kind"] != "nemesis" or e["action"] not in ("start", "kill"):
            continue
        node = e["node"]
        if e["action"] == "start":
            started.setdefault(node, float(e["t"]))
        elif node in started:
            spans[node].append((started.pop(node), float(e["t"])))
    for node, since in started.items():
        spans[node].append((since, end))
    return spans


def answering(
    events: Sequence[Event], spans: Mapping[str, list[tuple[float, float]]], bounds: Bounds, report: Report
) -> None:
    """Invariant 1 and the DNS figures: queries, share answered while live, longest gap."""
    queries: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        if e["kind"] == "dns":
            queries[e["node"]].append(e)
    figures: dict[str, Any] = {}
    for node, node_spans in spans.items():
        mine = queries.get(node, [])
        restarts: list[float] = []  # from a (re)start to the first reply
        rcodes = Counter(str(q["rcode"]) if q["rcode"] is not None else "timeout" for q in mine)
        sent_live = answered_live = 0
        longest = (0.0, 0.0)  # (gap, when it began)
        for start, stop in node_spans:
            inside = [q for q in mine if start <= float(q["t"]) < stop]
            answered = [float(q["t"]) for q in inside if q["rcode"] is not None]
            if not answered:
                if inside:  # it ran, was asked, and never answered
                    gap = float(inside[-1]["t"]) - start
                    longest = max(longest, (gap, start))
                    sent_live += len(inside)
                continue
            live_from = answered[0]  # a restarted node is live once it answers
            if start > node_spans[0][0]:
                restarts.append(round(live_from - start, 2))
            last_sent = float(inside[-1]["t"])
            counted = [q for q in inside if float(q["t"]) >= live_from]
            sent_live += len(counted)
            answered_live += len(answered)
            marks = [*answered, max(last_sent, answered[-1])]
            for before, after in itertools.pairwise(marks):
                longest = max(longest, (after - before, before))
        share = answered_live / sent_live if sent_live else None
        figures[node] = {
            "queries": len(mine),
            "rcodes": dict(rcodes),
            "live_queries": sent_live,
            "live_answered": answered_live,
            "live_share": share,
            "longest_gap": round(longest[0], 3),
            "longest_gap_at": longest[1],
            "live_seconds": round(sum(b - a for a, b in node_spans), 1),
            "restart_to_answer": restarts,
        }
        if longest[0] > bounds.max_gap:
            report.failures.append(
                f"{node} did not answer for {longest[0]:.1f} s while live "
                f"(from t={longest[1]:.1f}; bound {bounds.max_gap:g} s)"
            )
    report.figures["dns"] = figures


# -- 2. failover --------------------------------------------------------------------------------


def _named(e: Event, by_address: Mapping[str, str]) -> set[str]:
    return {by_address[a] for a in e.get("answer") or [] if a in by_address}


def all_down_windows(events: Sequence[Event], vs: str) -> list[tuple[float, float]]:
    """When every node that reported in a round had its own verdict on *vs* down: (the
    first such round, the last such round) for each run of such rounds."""
    windows: list[tuple[float, float]] = []
    since: float | None = None
    last = 0.0
    for e in events:
        if e["kind"] != "round":
            continue
        views = [v for v in e["views"].values() if v is not None and vs in v.get("vs", {})]
        down = bool(views) and all(v["vs"][vs].get("own") is False for v in views)
        t = float(e["t"])
        if down:
            if since is None:
                since = t
            last = t
        elif since is not None:
            windows.append((since, last))
            since = None
    if since is not None:
        windows.append((since, last))
    return windows


def failover_by_observers(
    events: Sequence[Event], monitored: Sequence[str], by_address: Mapping[str, str], bounds: Bounds, report: Report
) -> None:
    """Invariant 2, as the issue words it: answers naming a server every observer has seen
    down for longer than ``propagation``."""
    answers = [e for e in events if e["kind"] == "dns" and e.get("answer")]
    bad: list[str] = []
    windows_total = 0
    for vs in monitored:
        for since, last in all_down_windows(events, vs):
            windows_total += 1
            late = [
                q for q in answers if since + bounds.propagation < float(q["t"]) <= last and vs in _named(q, by_address)
            ]
            for node, count in Counter(q["node"] for q in late).items():
                first = min(float(q["t"]) for q in late if q["node"] == node)
                bad.append(
                    f"{node} answered {vs} {count} times while every observer had seen it down for more than "
                    f"{bounds.propagation:g} s (down since t={since:.1f}, "
                    f"first late answer {first - since:.1f} s after)"
                )
    report.figures["all_observers_down_windows"] = windows_total
    report.failures.extend(bad)


def failover_by_truth(events: Sequence[Event], by_address: Mapping[str, str], bounds: Bounds, report: Report) -> None:
    """Invariant 2 against the truth: after a backend stops, how long each node went on
    answering with its server (figures), and no answer after ``failover``."""
    answers = [e for e in events if e["kind"] == "dns" and e.get("answer")]
    stops: list[dict[str, Any]] = []
    stopped: dict[str, float] = {}
    end = max((float(e["t"]) for e in events), default=0.0)
    for e in events:
        if e["kind"] != "nemesis":
            continue
        if e["action"] == "backend_stop":
            stopped[e["vs"]] = float(e["t"])
        elif e["action"] == "backend_start" and e["vs"] in stopped:
            stops.append({"vs": e["vs"], "from": stopped.pop(e["vs"]), "to": float(e["t"])})
    stops += [{"vs": vs, "from": t, "to": end} for vs, t in stopped.items()]
    for stop in stops:
        vs, t0, t1 = stop["vs"], stop["from"], stop["to"]
        moved: dict[str, float] = {}
        for q in answers:
            t = float(q["t"])
            if t0 < t < t1 and vs in _named(q, by_address):
                moved[q["node"]] = max(moved.get(q["node"], 0.0), t - t0)
        stop["last_answer_after"] = {node: round(s, 2) for node, s in sorted(moved.items())}
        stop["moved_after"] = round(max(moved.values(), default=0.0), 2)
        stop["held"] = round(t1 - t0, 1)
        if stop["moved_after"] > bounds.failover:
            late = {n: s for n, s in moved.items() if s > bounds.failover}
            report.failures.append(
                f"{vs}'s backend stopped at t={t0:.1f}; answers still named it {stop['moved_after']:.1f} s later "
                f"(bound {bounds.failover:g} s) from {', '.join(sorted(late))}"
            )
    report.figures["backend_stops"] = stops


# -- 3. convergence -----------------------------------------------------------------------------


def _agree(e: Event, nodes: Sequence[str]) -> bool:
    views = e["views"]
    digests = {views[n]["digest"] if views.get(n) else None for n in nodes}
    return None not in digests and len(digests) == 1


def convergence(events: Sequence[Event], nodes: Sequence[str], bounds: Bounds, report: Report) -> None:
    """Invariant 3: the last heal to equal digests on every node; and, as figures, every
    episode's end to equal digests (when that came before the next episode)."""
    rounds = [e for e in events if e["kind"] == "round"]
    heals = [e for e in events if e["kind"] == "nemesis" and e["action"] == "final_heal"]
    if not heals:
        report.failures.append("the history has no final heal")
        return
    t_heal = float(heals[-1]["t"])
    agreed = next((float(r["t"]) for r in rounds if float(r["t"]) >= t_heal and _agree(r, nodes)), None)
    if agreed is None:
        report.failures.append(f"the digests never agreed after the last heal (t={t_heal:.1f})")
        report.figures["converged_after_heal"] = None
    else:
        report.figures["converged_after_heal"] = round(agreed - t_heal, 2)
        if agreed - t_heal > bounds.converge:
            report.failures.append(
                f"the digests agreed {agreed - t_heal:.1f} s after the last heal (bound {bounds.converge:g} s)"
            )
    episodes = [e for e in events if e["kind"] == "nemesis" and e["action"] == "episode"]
    per_episode: list[dict[str, Any]] = []
    for i, e in enumerate(episodes):
        if e["phase"] != "end":
            continue
        t_end = float(e["t"])
        nxt = next((float(x["t"]) for x in episodes[i + 1 :] if x["phase"] == "start"), t_heal)
        when = next((float(r["t"]) for r in rounds if t_end <= float(r["t"]) < nxt and _agree(r, nodes)), None)
        per_episode.append({"episode": e["name"], "agreed_after": None if when is None else round(when - t_end, 2)})
    report.figures["converged_after_episodes"] = per_episode


# -- 4. acknowledged records --------------------------------------------------------------------


def acceptable_states(writes: Sequence[Event], tolerance: float) -> tuple[set[str], Event | None]:
    """The admin states a server may end in after *writes* (in send order), and the last
    acknowledged write. The last acknowledged write must win unless another write may hold a
    higher version: one sent after it (unacknowledged: it may have been applied), or one
    whose node's clock was far enough ahead (hybrid clocks order writes by wall clock)."""
    acked = [w for w in writes if w["acked"]]
    if not acked:
        return {"enabled"} | {w["state"] for w in writes}, None
    last = acked[-1]
    stamp = float(last["t"]) + float(last.get("skew") or 0)
    states = {last["state"]}
    for w in writes:
        if w is last:
            continue
        if float(w["t"]) > float(last["t"]) or float(w["t"]) + float(w.get("skew") or 0) > stamp - tolerance:
            states.add(w["state"])
    return states, last


def acknowledged(events: Sequence[Event], admin_vs: Sequence[str], bounds: Bounds, report: Report) -> None:
    """Invariant 4: every acknowledged admin write is present at the end on every node, or
    superseded; with counts."""
    writes: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        if e["kind"] == "admin":
            writes[e["vs"]].append(e)
    finals = [e for e in events if e["kind"] == "final"]
    total = sum(1 for ws in writes.values() for w in ws if w["acked"])
    figures: dict[str, Any] = {
        "writes": sum(len(ws) for ws in writes.values()),
        "acknowledged": total,
        "unacknowledged": sum(1 for ws in writes.values() for w in ws if not w["acked"]),
        "last_present": 0,
        "superseded_by_clock": 0,
        "lost": 0,
    }
    if not finals:
        report.failures.append("the history has no final admin states")
        report.figures["acknowledged"] = figures
        return
    final = finals[-1]["admin"]
    for vs in admin_vs:
        ws = writes.get(vs, [])
        states, last = acceptable_states(ws, bounds.clock_tolerance)
        held = {node: states_of.get(vs) for node, states_of in final.items()}
        if len(set(held.values())) != 1:
            report.failures.append(f"the nodes disagree on {vs}'s admin state at the end: {held}")
        for node, state in held.items():
            if state not in states:
                what = (
                    "no write"
                    if last is None
                    else f"the write of {last['state']!r} acknowledged by {last['node']} at t={float(last['t']):.1f}"
                )
                report.failures.append(
                    f"{node} holds {vs} {state!r} at the end: {what} is lost (acceptable: {sorted(states)})"
                )
        if last is not None:
            outcome = set(held.values())
            if outcome == {last["state"]}:
                figures["last_present"] += 1
            elif outcome <= states:
                figures["superseded_by_clock"] += 1
            else:
                figures["lost"] += 1
    figures["servers"] = len(admin_vs)
    report.figures["acknowledged"] = figures


# -- 5. flaps under loss ------------------------------------------------------------------------


def loss_windows(events: Sequence[Event]) -> list[tuple[float, float]]:
    """When loss was on (a ``loss`` event with a share above 0 until one with 0)."""
    windows: list[tuple[float, float]] = []
    since: float | None = None
    for e in events:
        if e["kind"] == "nemesis" and e["action"] in ("loss", "final_heal"):
            if e.get("share", 0) > 0 and since is None:
                since = float(e["t"])
            elif not e.get("share", 0) and since is not None:
                windows.append((since, float(e["t"])))
                since = None
    if since is not None:
        windows.append((since, max(float(e["t"]) for e in events)))
    return windows


def flaps_under_loss(events: Sequence[Event], monitored: Sequence[str], report: Report) -> None:
    """Invariant 5: no change of any node's availability of a server while only loss is on;
    the changes of the nodes' own verdicts are figures."""
    windows = loss_windows(events)
    availability_changes = own_changes = disconnected = 0
    for t0, t1 in windows:
        previous: dict[tuple[str, str], tuple[Any, Any]] = {}
        for e in events:
            if e["kind"] != "round" or not t0 <= float(e["t"]) <= t1:
                continue
            for node, view in e["views"].items():
                if view is None:
                    continue
                disconnected += sum(1 for connected in view.get("peers", {}).values() if not connected)
                for vs in monitored:
                    now = (view["vs"][vs]["available"], view["vs"][vs].get("own"))
                    before = previous.get((node, vs))
                    previous[node, vs] = now
                    if before is None:
                        continue
                    if before[0] != now[0]:
                        availability_changes += 1
                        report.failures.append(
                            f"{node}: {vs} went {'up' if now[0] else 'down'} at t={float(e['t']):.1f} under loss "
                            f"(window t={t0:.1f}-{t1:.1f})"
                        )
                    if before[1] != now[1]:
                        own_changes += 1
    report.figures["loss"] = {
        "windows": len(windows),
        "seconds": round(sum(b - a for a, b in windows), 1),
        "availability_changes": availability_changes,
        "own_verdict_changes": own_changes,
        "peers_seen_disconnected": disconnected,  # (node, peer) pairs over the rounds under loss
    }


# -- the printed report -------------------------------------------------------------------------


def summary(report: Report) -> list[str]:
    """The figures as lines for a terminal."""
    f = report.figures
    bounds = f.get("bounds", {})
    lines = [f"seed {f.get('seed')}, {f.get('seconds')} s; episodes: {f.get('episodes', {})}"]
    if "load" in f:
        lines.append(f"load average (1 min) during the run: mean {f['load']['mean']}, max {f['load']['max']}")
    for node, d in f.get("dns", {}).items():
        share = d["live_share"]
        lines.append(
            f"DNS {node}: {d['queries']} queries, live {d['live_seconds']} s, answered while live "
            f"{'-' if share is None else f'{share:.2%}'}, longest gap {d['longest_gap']:.2f} s "
            f"(bound {bounds.get('max_gap')} s), rcodes {d['rcodes']}"
            + (
                f", answering {', '.join(f'{r:.1f}' for r in d['restart_to_answer'])} s after restarts"
                if d["restart_to_answer"]
                else ""
            )
        )
    stops = f.get("backend_stops", [])
    if stops:
        moved = [s["moved_after"] for s in stops]
        lines.append(
            f"failover: {len(stops)} backend stops; answers moved after at most {max(moved):.1f} s "
            f"(median {statistics.median(moved):.1f} s; bound {bounds.get('failover')} s)"
        )
    lines.append(
        f"all observers down: {f.get('all_observers_down_windows', 0)} windows; answers later than "
        f"{bounds.get('propagation')} s into one: see failures"
    )
    agreed = [e["agreed_after"] for e in f.get("converged_after_episodes", []) if e["agreed_after"] is not None]
    converged = f.get("converged_after_heal")
    lines.append(
        f"digests agree {'never' if converged is None else f'{converged:.1f} s'} after the last heal "
        f"(bound {bounds.get('converge')} s); after episodes: "
        + (f"median {statistics.median(agreed):.1f} s, max {max(agreed):.1f} s" if agreed else "-")
    )
    a = f.get("acknowledged", {})
    if a:
        lines.append(
            f"admin writes: {a['writes']} ({a['acknowledged']} acknowledged, {a['unacknowledged']} not) on "
            f"{a.get('servers', 0)} servers; at the end the last acknowledged write held on {a['last_present']}, "
            f"superseded by a clock ahead on {a['superseded_by_clock']}, lost on {a['lost']}"
        )
    loss = f.get("loss", {})
    if loss:
        lines.append(
            f"under 20% loss ({loss['windows']} windows, {loss['seconds']} s): availability changes "
            f"{loss['availability_changes']}, own verdict changes {loss['own_verdict_changes']}, "
            f"peers seen disconnected {loss['peers_seen_disconnected']} times"
        )
    return lines


# -- 6. logs ------------------------------------------------------------------------------------


def tracebacks(events: Sequence[Event], report: Report) -> None:
    """No node logged a traceback or an unhandled error (``logs`` events, one per node)."""
    counts = {e["node"]: int(e["tracebacks"]) for e in events if e["kind"] == "logs"}
    report.figures["tracebacks"] = counts
    for e in events:
        if e["kind"] == "logs" and e["tracebacks"]:
            report.failures.append(f"{e['node']} logged {e['tracebacks']} tracebacks; the first:\n{e['excerpt']}")
