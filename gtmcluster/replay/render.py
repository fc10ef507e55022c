"""The replay report (`report.build`) as a plain text table, as JSON, and as a
self-contained HTML page with an inline SVG chart of each wide IP's data center shares
before and after (no scripts, no external assets)."""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Iterator
from typing import Any

#: the chart's bars: width of 100 %, height of a bar, colours before / after
_BAR_WIDTH = 360
_BAR_HEIGHT = 14
_LABEL_WIDTH = 140
_BEFORE, _AFTER = "#8a9bb0", "#2f6fb3"
#: clients listed per section in the text report, at most
TEXT_CLIENTS = 100


def to_json(report: dict[str, Any]) -> str:
    return "".join(json_parts(report))


def json_parts(report: dict[str, Any]) -> Iterator[str]:
    """The report as JSON (keys sorted), in pieces: written as they come, a report listing
    many clients is never held as one string (nor as the list of its pieces)."""
    return json.JSONEncoder(indent=1, sort_keys=True).iterencode(report)


def _pct(share: float) -> str:
    return f"{share * 100:.1f}%"


def _header(report: dict[str, Any]) -> list[str]:
    disabled = report["disabled"]
    state = report["state"]
    agreement = report["agreement"]
    lines = [
        f"Replay of {report['queries']} wide IP queries from {', '.join(report['logs'])}"
        + (f" at {report['time']}" if report["time"] else ": the logs hold no query"),
        f"  base:      {report['base']}",
        f"  candidate: {report['config']}" + (f", disabled: {', '.join(disabled)}" if disabled else ""),
        f"  state:     {state['note']}",
        f"  the base replay agrees with {agreement['agree']} of {agreement['compared']} logged decisions",
    ]
    for example in agreement["examples"]:
        lines.append(
            f"    {example['client']} {example['name']}: logged {example['logged']}, replayed {example['replayed']}"
        )
    skipped = report["skipped"]
    if skipped:
        lines.append("  left out: " + ", ".join(f"{count} {why}" for why, count in sorted(skipped.items())))
    lines.extend(f"  note: {note}" for note in report.get("notes", ()))
    return lines


def _table(title: str, rows: dict[str, dict[str, float]]) -> list[str]:
    width = max([len(title), *(len(k) for k in rows)])
    lines = [f"  {title:<{width}}  {'before':>7}  {'after':>7}  change"]
    for key, row in rows.items():
        change = row["after_share"] - row["before_share"]
        mark = f"{change * 100:+.1f}" if abs(change) >= 0.0005 else ""
        lines.append(
            f"  {key:<{width}}  {_pct(row['before_share']):>7}  {_pct(row['after_share']):>7}  {mark}".rstrip()
        )
    return lines


def _clients(title: str, entries: list[dict[str, Any]], before: str, after: str) -> list[str]:
    lines = [f"{title} ({len(entries)})" + ("" if entries else ": none")]
    for e in entries[:TEXT_CLIENTS]:
        was = e[before] if isinstance(e[before], str) else "; ".join(e[before])
        now = e[after] if isinstance(e[after], str) else "; ".join(e[after])
        queries = f"{e['queries']} quer{'y' if e['queries'] == 1 else 'ies'}"
        lines.append(f"  {e['wideip']}  {e['client']}: {was} -> {now}  ({queries})")
    if len(entries) > TEXT_CLIENTS:
        lines.append(f"  ... and {len(entries) - TEXT_CLIENTS} more (all of them in --json and --html)")
    return lines


def to_text(report: dict[str, Any]) -> str:
    lines = _header(report)
    for name, w in report["wideips"].items():
        lines.append("")
        outcomes = w["outcomes"]
        lines.append(
            f"{name}: {w['queries']} queries; failed {outcomes['failed']['before']} -> {outcomes['failed']['after']}, "
            f"fell back {outcomes['fell_back']['before']} -> {outcomes['fell_back']['after']}"
        )
        lines.extend(_table("data center", w["datacenters"]))
        lines.extend(_table("member", w["members"]))
    lines.append("")
    lines.extend(_clients("Clients that move", report["moved"], "from", "to"))
    lines.extend(_clients("Queries that would now fail", report["now_failing"], "before", "after"))
    lines.extend(_clients("Queries that would now fall back", report["now_falling_back"], "before", "after"))
    return "\n".join(lines) + "\n"


def _chart(name: str, rows: dict[str, dict[str, float]]) -> str:
    """Bars of each data center's share before and after, as an inline SVG."""
    row_height = 2 * _BAR_HEIGHT + 10
    height = row_height * len(rows) + 24
    width = _LABEL_WIDTH + _BAR_WIDTH + 70
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="shares" width="{width}" height="{height}" '
        f'role="img" aria-label="data center shares of {html.escape(name)} before and after">',
        f'<rect x="{_LABEL_WIDTH}" y="2" width="10" height="10" fill="{_BEFORE}"/>'
        f'<text x="{_LABEL_WIDTH + 14}" y="11">before</text>'
        f'<rect x="{_LABEL_WIDTH + 70}" y="2" width="10" height="10" fill="{_AFTER}"/>'
        f'<text x="{_LABEL_WIDTH + 84}" y="11">after</text>',
    ]
    for i, (key, row) in enumerate(rows.items()):
        y = 20 + i * row_height
        parts.append(f'<text x="0" y="{y + _BAR_HEIGHT + 4}">{html.escape(key)}</text>')
        for j, (side, colour) in enumerate((("before", _BEFORE), ("after", _AFTER))):
            share = row[f"{side}_share"]
            top = y + j * (_BAR_HEIGHT + 2)
            parts.append(
                f'<rect class="bar {side}" data-datacenter="{html.escape(key)}" data-share="{share}" '
                f'x="{_LABEL_WIDTH}" y="{top}" width="{share * _BAR_WIDTH:.1f}" height="{_BAR_HEIGHT}" '
                f'fill="{colour}"/>'
                f'<text x="{_LABEL_WIDTH + share * _BAR_WIDTH + 4:.1f}" y="{top + _BAR_HEIGHT - 3}">'
                f"{_pct(share)}</text>"
            )
    parts.append("</svg>")
    return "".join(parts)


def _html_table(headers: list[str], rows: Iterable[list[str]]) -> Iterator[str]:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    yield f"<table><thead><tr>{head}</tr></thead><tbody>"
    for row in rows:
        yield "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
    yield "</tbody></table>"


def _share_rows(rows: dict[str, dict[str, float]]) -> list[list[str]]:
    return [[key, _pct(r["before_share"]), _pct(r["after_share"])] for key, r in rows.items()]


def _client_rows(entries: list[dict[str, Any]], before: str, after: str) -> Iterator[list[str]]:
    def text(value: Any) -> str:
        return value if isinstance(value, str) else "; ".join(value)

    for e in entries:
        yield [e["wideip"], e["client"], text(e[before]), text(e[after]), str(e["queries"])]


def to_html(report: dict[str, Any]) -> str:
    return "".join(html_parts(report))


def html_parts(report: dict[str, Any]) -> Iterator[str]:
    """The report as one self-contained HTML page, in pieces (as `json_parts`)."""
    style = (
        "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;margin:.5em 0 1em}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}svg text{font-size:12px}"
    )
    yield (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>gtmcluster replay: {html.escape(report['config'])}</title><style>{style}</style></head>"
        f"<body><h1>What if: {html.escape(report['config'])}</h1>"
    )
    yield f"<pre class='summary'>{html.escape(chr(10).join(_header(report)))}</pre>"
    for name, w in report["wideips"].items():
        yield f"<section class='wideip'><h2>{html.escape(name)}: {w['queries']} queries</h2>"
        yield _chart(name, w["datacenters"])
        yield from _html_table(["data center", "before", "after"], _share_rows(w["datacenters"]))
        yield from _html_table(["member", "before", "after"], _share_rows(w["members"]))
        yield "</section>"
    columns = ["wide IP", "client", "before", "after", "queries"]
    for title, key, before, after in (
        ("Clients that move", "moved", "from", "to"),
        ("Queries that would now fail", "now_failing", "before", "after"),
        ("Queries that would now fall back", "now_falling_back", "before", "after"),
    ):
        entries = report[key]
        yield f"<section id='{key}'><h2>{title} ({len(entries)})</h2>"
        if entries:
            yield from _html_table(columns, _client_rows(entries, before, after))
        else:
            yield "<p>none</p>"
        yield "</section>"
    yield "</body></html>\n"
