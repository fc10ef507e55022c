// The audit view: this node's audit log (GET /api/v1/audit, JSON lines; the viewer role and
// up), newest first: when, who (role, how proven), from where, the change and how it ended.
// Every field is the server's text, shown as text.
"use strict";

import { $, badge, fetchLines, h, table, timeEl } from "./common.js";

const AUDIT = "/api/v1/audit?limit=50";
const AUDIT_MS = 5000;

export async function pollAudit() {
  await refreshAudit();
  setTimeout(pollAudit, AUDIT_MS);
}

export async function refreshAudit() {
  let entries;
  try {
    entries = await fetchLines("audit", AUDIT);
  } catch (e) {
    $("audit-lead").textContent = e.status === 404
      ? "This node keeps no audit log."
      : `The audit log could not be read: ${e.message}`;
    return;
  }
  $("audit-lead").textContent = `The last ${entries.length} entries of this node's audit log (gtmcluster audit merges every member's), newest first: each write is recorded before it is made (requested) and again with how it ended; refused requests too.`;
  if (!entries.length) {
    $("audit-table").replaceChildren(h("p", { class: "empty" }, "No entries yet: nothing was written through this node's API."));
    return;
  }
  const rows = entries.reverse().map((e) => {
    const at = new Date(String(e.time));
    const result = String(e.result || "");
    const level = result === "applied" ? "ok" : result === "refused" ? "bad" : "unk";
    const made = e.origin && e.origin !== e.node ? ` (made on ${e.origin})` : "";
    return h("tr", { "data-audit": String(e.id || ""), "data-who": String(e.who || ""), "data-result": result },
      h("td", { class: "nowrap" }, isNaN(at) ? String(e.time || "") : timeEl(at)),
      h("td", {}, String(e.who || "?"), h("div", { class: "small" }, [e.role, e.proof].filter(Boolean).map(String).join(", "))),
      h("td", { class: "small mono" }, String(e.source || "")),
      h("td", {}, String(e.change || e.route || ""), made, h("div", { class: "small mono" }, String(e.route || ""))),
      h("td", {}, badge(level, e.status && result !== "requested" ? `${result} ${e.status}` : result),
        e.message ? h("div", { class: "reason" }, String(e.message)) : null,
        e.detail ? h("div", { class: "reason" }, String(e.detail)) : null));
  });
  $("audit-table").replaceChildren(table(null, ["Time", "Who", "Source", "Change", "Result"], rows, { "aria-labelledby": "audit-title" }));
}
