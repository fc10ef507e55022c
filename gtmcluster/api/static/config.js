// The config history: the bundles this member holds (GET /api/v1/config/history) and a diff
// between two of them (GET /api/v1/config/bundles/N, decoded here, each file compared as
// lines). These routes need the admin role (a bundle is the group's config text): for a
// lower role the view says so instead.
"use strict";

import { may, needs } from "./access.js";
import { $, fetchJson, h, table, timeEl } from "./common.js";
import { diffLines } from "./linediff.js";

const HISTORY = "/api/v1/config/history";
const HISTORY_MS = 10000;
// bundles larger than this (GeoIP databases) are diffed with `gtmcluster config diff`
const MAX_DIFF_BYTES = 8 * 1024 * 1024;

let held = []; // the headers of the bundles held, newest first
let timer = null;

export function setUpConfig() {
  $("diff-show").addEventListener("click", () => showDiff());
}

// draw the view for the identity's role (again when it changes); an admin's polls the history
export async function renderConfig() {
  clearTimeout(timer);
  const allowed = may("admin");
  $("config-body").hidden = !allowed;
  const note = $("config-note");
  note.hidden = allowed;
  if (!allowed) {
    note.textContent = needs("admin", "The config history (the group's config text)");
    note.dataset.needs = "admin";
    return;
  }
  try {
    const answer = await fetchJson("config", HISTORY);
    held = Array.isArray(answer.bundles) ? answer.bundles : [];
    drawHistory();
  } catch (e) {
    $("config-table").replaceChildren(h("p", { class: "empty" }, e.status === 503
      ? "This node keeps no config bundles (config sync is not running here)."
      : `The config history could not be read: ${e.message}`));
  }
  timer = setTimeout(renderConfig, HISTORY_MS);
}

function drawHistory() {
  if (!held.length) {
    $("config-table").replaceChildren(h("p", { class: "empty" }, "No bundle held: nothing was published in this group yet (gtmcluster config push)."));
  } else {
    $("config-table").replaceChildren(table(null, ["Generation", "Published", "By", "Based on", "Digest", "Size"], held.map((b) =>
      h("tr", { "data-generation": String(b.generation), "data-running": b.running ? "true" : "false" },
        h("th", { scope: "row" }, String(b.generation), b.running ? h("span", { class: "tag" }, "running") : null),
        h("td", { class: "nowrap" }, timeEl(new Date(Number(b.published_at) * 1000))),
        h("td", {}, String(b.publisher)),
        h("td", { class: "num" }, String(b.based_on)),
        h("td", { class: "mono small" }, String(b.digest).slice(0, 12)),
        h("td", { class: "num" }, `${Number(b.size).toLocaleString()} B`))), { "aria-labelledby": "config-title" }));
  }
  for (const [id, pick] of [["diff-from", 1], ["diff-to", 0]]) {
    const select = $(id);
    const kept = select.value;
    const wanted = held.map((b) => String(b.generation));
    if ([...select.options].map((o) => o.value).join() === wanted.join()) continue;
    select.replaceChildren(...wanted.map((g) => h("option", { value: g }, g)));
    select.value = wanted.includes(kept) ? kept : wanted[Math.min(pick, wanted.length - 1)] || "";
  }
  $("diff-show").disabled = held.length < 1;
}

// a file's bytes as text, or null when it is not UTF-8 text (a GeoIP database)
function asText(b64) {
  if (b64 === undefined) return undefined;
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  if (bytes.includes(0)) return null;
  try { return new TextDecoder("utf-8", { fatal: true }).decode(bytes); } catch (e) { return null; }
}

async function showDiff() {
  const from = $("diff-from").value, to = $("diff-to").value;
  const out = $("diff-out");
  const sizes = held.filter((b) => String(b.generation) === from || String(b.generation) === to).map((b) => Number(b.size));
  if (sizes.some((n) => n > MAX_DIFF_BYTES)) {
    out.replaceChildren(h("p", { class: "empty" }, `A bundle over ${MAX_DIFF_BYTES / 1048576} MiB is not diffed here: gtmcluster config diff ${from} ${to} --config FILE --node NODE`));
    return;
  }
  out.replaceChildren(h("p", { class: "empty" }, `Fetching generations ${from} and ${to}…`));
  let a, b;
  try {
    [a, b] = await Promise.all([fetchJson("bundle", `/api/v1/config/bundles/${encodeURIComponent(from)}`), fetchJson("bundle", `/api/v1/config/bundles/${encodeURIComponent(to)}`)]);
  } catch (e) {
    out.replaceChildren(h("p", { class: "acted bad" }, `The bundles could not be read: ${e.message}`));
    return;
  }
  const names = [...new Set([...Object.keys(a.files || {}), ...Object.keys(b.files || {})])].sort();
  const parts = [];
  let changed = 0;
  for (const name of names) {
    const before = asText((a.files || {})[name]), after = asText((b.files || {})[name]);
    const head = [h("div", { class: "diff-head" }, `--- ${before === undefined ? "/dev/null" : `generation ${from}/${name}`}`),
      h("div", { class: "diff-head" }, `+++ ${after === undefined ? "/dev/null" : `generation ${to}/${name}`}`)];
    if (before === null || after === null) {
      if ((a.files || {})[name] === (b.files || {})[name]) continue;
      changed += 1;
      parts.push(h("div", { class: "diff-file", "data-diff-file": name, "data-binary": "true" }, head, h("div", {}, "binary file: differs")));
      continue;
    }
    const d = diffLines(before || "", after || "");
    if (d && !d.hunks.length) continue;
    changed += 1;
    if (!d) {
      parts.push(h("div", { class: "diff-file", "data-diff-file": name }, head, h("div", {}, `too many changes to show here: gtmcluster config diff ${from} ${to}`)));
      continue;
    }
    parts.push(h("div", { class: "diff-file", "data-diff-file": name, "data-added": String(d.added), "data-removed": String(d.removed) }, head,
      d.hunks.map((hunk) => h("div", { class: "diff-hunk" }, hunk.map((o) =>
        h("div", { class: o.op === "+" ? "diff-add" : o.op === "-" ? "diff-del" : "diff-same" }, `${o.op}${o.text}`))))));
  }
  out.replaceChildren(h("p", { class: "small", "data-diff": `${from}..${to}`, "data-files": String(changed) },
    changed ? `${changed} file${changed === 1 ? "" : "s"} differ between generations ${from} and ${to}:` : `Generations ${from} and ${to} hold the same files.`),
  h("pre", { class: "diff" }, parts));
}
