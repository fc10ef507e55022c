// The dashboard's graphs of the node's last hour: /api/v1/history drawn as inline SVG every 10 s.
"use strict";

import { $, clock, fetchJson, h, timeEl } from "./common.js";

const HISTORY = "/api/v1/history";
const HISTORY_MS = 10000; // the node samples every 10 s
let history = null;

export async function pollHistory() {
  try {
    history = await fetchJson("history", HISTORY);
    renderHistory();
  } catch (e) {
    // the other endpoints' banner says what is wrong with the node; keep the last graphs
  }
  setTimeout(pollHistory, HISTORY_MS);
}

const SVG_NS = "http://www.w3.org/2000/svg";
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}
const PALETTE = ["#2357d3", "#17a34a", "#d97706", "#c026d3", "#0891b2", "#dc2626", "#65a30d", "#7c3aed", "#db2777", "#0d9488", "#8a8f98"];
const W = 600, H = 170, PAD = { left: 46, right: 10, top: 10, bottom: 22 };

// the top of a y axis of 4 steps: 4 x a round step (1, 2, 2.5 or 5 x a power of 10)
function niceMax(v) {
  if (!(v > 0)) return 1;
  const quarter = v / 4;
  const p = Math.pow(10, Math.floor(Math.log10(quarter)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= quarter) return 4 * m * p;
  return 40 * p;
}
function short(v) {
  if (v >= 1000) return `${(v / 1000).toFixed(v >= 10000 ? 0 : 1)}k`;
  if (v >= 10 || v === 0) return String(Math.round(v));
  return String(Number(v.toPrecision(2)));
}

// the time the graphs span, ending at the node's "now": the node's whole window (an hour)
// once it holds that much, else what it holds (at least 5 minutes)
function span(hist) {
  const held = hist.times.length ? hist.now - hist.times[0] : 0;
  return Math.min(hist.window, Math.max(300, Math.ceil(held / 300) * 300));
}
function xScale(hist) {
  const t1 = hist.now, t0 = hist.now - span(hist);
  return (t) => PAD.left + ((t - t0) / (t1 - t0)) * (W - PAD.left - PAD.right);
}

function xAxis(hist, x, height) {
  const parts = [s("line", { class: "axis", x1: PAD.left, y1: height - PAD.bottom, x2: W - PAD.right, y2: height - PAD.bottom })];
  const minutes = span(hist) / 60;
  const step = [1, 2, 5, 10, 15].find((m) => minutes / m <= 6) || 15;
  for (let ago = 0; ago <= minutes; ago += step) {
    const px = x(hist.now - ago * 60);
    parts.push(s("line", { class: "grid", x1: px, y1: PAD.top, x2: px, y2: height - PAD.bottom }));
    const label = ago === 0 ? "now" : `−${ago} min`;
    parts.push(s("text", { x: px, y: height - 6, "text-anchor": ago === 0 ? "end" : ago === minutes ? "start" : "middle" }, label));
  }
  return parts;
}

function eventMarks(hist, x, height, withTitles) {
  const t0 = hist.now - span(hist);
  return (hist.events || []).filter((e) => e.at >= t0).map((e) => {
    const px = x(e.at);
    const line = s("line", { class: `ev-${e.kind}`, "data-event": e.kind, x1: px, y1: PAD.top, x2: px, y2: height - PAD.bottom });
    if (withTitles) line.append(s("title", {}, `${clock(new Date(e.at * 1000))} ${e.text}`));
    return line;
  });
}

// one line chart: series {name: [value or null, ...]} aligned with hist.times
function lineChart(kind, title, unit, series) {
  const hist = history;
  const x = xScale(hist);
  const names = Object.keys(series);
  let max = 0;
  for (const n of names) for (const v of series[n]) if (v !== null && v > max) max = v;
  const top = niceMax(max);
  const y = (v) => H - PAD.bottom - (v / top) * (H - PAD.top - PAD.bottom);
  const parts = [];
  for (let i = 0; i <= 4; i += 1) {
    const v = (top * i) / 4;
    parts.push(s("line", { class: i ? "grid" : "axis", x1: PAD.left, y1: y(v), x2: W - PAD.right, y2: y(v) }));
    parts.push(s("text", { x: PAD.left - 4, y: y(v) + 3, "text-anchor": "end" }, short(v)));
  }
  parts.push(...xAxis(hist, x, H));
  parts.push(...eventMarks(hist, x, H, false));
  let total = 0;
  const legend = [];
  names.forEach((name, i) => {
    const colour = PALETTE[Math.min(i, PALETTE.length - 1)];
    let d = "", pen = false, points = 0, last = null;
    series[name].forEach((v, j) => {
      if (v === null || v === undefined) { pen = false; return; }
      const px = x(hist.times[j]).toFixed(1), py = y(v).toFixed(1);
      d += `${pen ? "L" : "M"}${px},${py} `;
      pen = true;
      points += 1;
      last = [px, py, v];
    });
    total += points;
    parts.push(s("path", { class: "series", d: d.trim() || "M0,0", stroke: colour, "data-series": name, "data-points": points },
      s("title", {}, name)));
    if (last) parts.push(s("circle", { cx: last[0], cy: last[1], r: 2.5, fill: colour }));
    legend.push(h("li", {}, h("span", { class: "swatch", style: `background:${colour}` }), name,
      h("span", { class: "small" }, last ? `${short(last[2])} ${unit}` : "—")));
  });
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title, "data-graph": kind, "data-points": total }, parts);
  return h("figure", { class: "graph" },
    h("figcaption", {}, title, h("span", { class: "small" }, unit)),
    svg,
    names.length ? h("ul", { class: "legend" }, legend) : h("p", { class: "empty" }, "nothing yet"));
}

function eventChart() {
  const hist = history;
  const height = 64;
  const x = xScale(hist);
  const parts = [...xAxis(hist, x, height), ...eventMarks(hist, x, height, true)];
  for (const e of hist.events) {
    if (e.at < hist.now - span(hist)) continue;
    parts.push(s("circle", { class: `ev-dot-${e.kind}`, cx: x(e.at), cy: e.kind === "admin" ? 18 : 30, r: 3.5 }));
  }
  const svg = s("svg", { viewBox: `0 0 ${W} ${height}`, role: "img", "aria-label": "Failovers and admin changes", "data-graph": "events", "data-points": hist.events.length }, parts);
  const list = [...hist.events].reverse().map((e) =>
    h("li", { "data-kind": e.kind }, timeEl(new Date(e.at * 1000)), h("span", { class: `swatch ${e.kind}` }), e.text));
  return h("figure", { class: "graph" },
    h("figcaption", {}, "Failovers and admin changes", h("span", { class: "small" }, `${hist.events.length} in the last hour`)),
    svg,
    h("ul", { class: "legend" },
      h("li", {}, h("span", { class: "swatch failover" }), "availability changed"),
      h("li", {}, h("span", { class: "swatch admin" }), "admin change")),
    list.length ? h("ul", { class: "events" }, list) : h("p", { class: "empty" }, "none"));
}

function renderHistory() {
  if (!history) return;
  const more = history.wideips_with_queries > Object.keys(history.queries_per_second).filter((n) => n !== "(other)").length
    ? `, the ${Object.keys(history.queries_per_second).filter((n) => n !== "(other)").length} busiest of ${history.wideips_with_queries}` : "";
  $("graphs").replaceChildren(
    lineChart("queries", `Queries per wide IP${more}`, "queries/s", history.queries_per_second),
    lineChart("answers", "Answers per data center", "answers/s", history.answers_per_second),
    lineChart("rtt", "RTT per data center", "ms (median of the newest paths)", history.rtt_ms),
    eventChart());
}

