// The dashboard's common parts: building elements from text (never HTML from the API),
// formatting, and asking the API with the bearer token of the page's #token=... fragment.
"use strict";

export const TIMEOUT_MS = 5000;
// the page's bearer token: the part after # is never sent to the server (no cookie either)
export const token = new URLSearchParams(location.hash.replace(/^#/, "")).get("token");
// the last good answer of each of the API's endpoints the page polls
export const data = {};

// ---- DOM helpers: text only, never HTML from the API -------------------------------------

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}
export const $ = (id) => document.getElementById(id);

const GLYPH = { ok: "✓", warn: "◐", bad: "✕", unk: "?" };
export function badge(level, text, title) {
  return h("span", { class: `badge ${level}`, title },
    h("span", { class: "glyph", "aria-hidden": "true" }, GLYPH[level] || "•"), text);
}
export function table(caption, heads, rows, attrs, cols) {
  return h("table", attrs || {},
    caption ? h("caption", {}, caption) : null,
    cols ? h("colgroup", {}, cols.map((c) => h("col", { class: c }))) : null,
    h("thead", {}, h("tr", {}, heads.map((x) =>
      typeof x === "string" ? h("th", { scope: "col" }, x) : h("th", { scope: "col", class: x.class }, x.text)))),
    h("tbody", {}, rows));
}

// ---- formatting ---------------------------------------------------------------------------

export function clock(date) {
  return date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
}
export function duration(s) {
  if (s === null || s === undefined) return "—";
  if (s < 1) return `${s.toFixed(1)} s`;
  if (s < 60) return `${Math.round(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}
export function ms(us) {
  const v = us / 1000;
  return `${v < 1 ? v.toFixed(2) : v < 10 ? v.toFixed(1) : Math.round(v)} ms`;
}
export function percent(per10000) {
  return `${Math.round(per10000 / 100)} %`;
}
export function timeEl(date) {
  return h("time", { datetime: date.toISOString(), title: date.toString() }, clock(date));
}

// ---- fetching -----------------------------------------------------------------------------

export class ApiFailure extends Error {
  constructor(endpoint, status, message) {
    super(message);
    this.endpoint = endpoint;
    this.status = status;
  }
}

export async function fetchJson(name, path) {
  const response = await ask(name, path, {});
  let body = null;
  try {
    body = await response.json();
  } catch (e) {
    throw new ApiFailure(name, response.status, `HTTP ${response.status}: the answer is not JSON`);
  }
  if (!response.ok) {
    throw new ApiFailure(name, response.status, `HTTP ${response.status}: ${(body && body.error) || response.statusText}`);
  }
  return body;
}


// a request with the token and a deadline: the Response, else ApiFailure(name, 0, why)
async function ask(name, path, init) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), TIMEOUT_MS);
  const headers = { Accept: "application/json", ...(init.headers || {}) };
  if (token) headers.Authorization = `Bearer ${token}`;
  try {
    return await fetch(path, { ...init, headers, cache: "no-store", signal: controller.signal });
  } catch (e) {
    const why = e.name === "AbortError" ? `no answer within ${TIMEOUT_MS / 1000} s` : "the node did not answer (is it running?)";
    throw new ApiFailure(name, 0, why);
  } finally {
    clearTimeout(timer);
  }
}

// an answer of JSON lines (application/x-ndjson: the audit log) as a list of objects;
// lines that are not JSON objects are left out
export async function fetchLines(name, path) {
  const response = await ask(name, path, {});
  const text = await response.text();
  if (!response.ok) {
    let error = response.statusText;
    try { error = JSON.parse(text).error || error; } catch (e) { /* not JSON: the status says it */ }
    throw new ApiFailure(name, response.status, `HTTP ${response.status}: ${error}`);
  }
  const out = [];
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    try {
      const entry = JSON.parse(line);
      if (entry && typeof entry === "object" && !Array.isArray(entry)) out.push(entry);
    } catch (e) { /* a line cut short: left out */ }
  }
  return out;
}

// a write: a JSON POST from this page's own origin (the API refuses any other, and any
// body that is not application/json); {ok, status, body}
export async function postJson(path, fields) {
  const response = await ask("write", path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(fields || {}),
  });
  let body = null;
  try { body = await response.json(); } catch (e) { body = null; }
  return { ok: response.ok, status: response.status, body };
}
