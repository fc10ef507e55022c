// Admin actions: enable, disable and drain at every level the API offers (data center,
// link, virtual server, pool, pool member, wide IP), for the whole sync group. Offered to
// the operator role and up (`access.may`); each is a JSON POST from this page's origin with
// the bearer token (`common.postJson`), which the API checks again (role, Origin, Host,
// Content-Type).
"use strict";

import { may, needs } from "./access.js";
import { $, clock, data, h, postJson, token } from "./common.js";

// the levels, as the API's path names them, with their words and the names the node knows
const LEVELS = {
  datacenter: { words: "data center", names: () => datacenterNames() },
  link: { words: "link", names: () => Object.keys((data.health && data.health.links) || {}) },
  "virtual-server": { words: "virtual server", names: () => Object.keys((data.health && data.health.virtual_servers) || {}) },
  pool: { words: "pool", names: () => pools().map((p) => p.name) },
  "pool-member": { words: "pool member", names: () => pools().flatMap((p) => p.members.map((m) => `${p.name}/${m.name}`)) },
  wideip: { words: "wide IP", names: () => Object.keys((data.wideips && data.wideips.wideips) || {}) },
};
const ACTIONS = ["enable", "disable", "drain"];

let acting = false;
let after = async () => {};

// what to do once an action has an answer (the page polls again)
export function onActed(fn) {
  after = fn;
}

function datacenterNames() {
  const set = new Set();
  for (const v of Object.values((data.health && data.health.virtual_servers) || {})) set.add(v.datacenter);
  for (const l of Object.values((data.health && data.health.links) || {})) set.add(l.datacenter);
  return [...set].filter(Boolean);
}

function pools() {
  const seen = new Map();
  for (const w of Object.values((data.wideips && data.wideips.wideips) || {})) for (const p of w.pools) seen.set(p.name, p);
  return [...seen.values()];
}

export async function act(name, action, kind, reason) {
  if (acting || !may("operator")) return;
  acting = true;
  document.querySelectorAll("button[data-action]").forEach((b) => { b.disabled = true; });
  const shown = $("acted");
  const level = kind || "virtual-server";
  const path = `/api/v1/admin/${level}/${encodeURIComponent(name)}/${action}`;
  let outcome, ok = false;
  try {
    const answer = await postJson(path, reason ? { reason } : {});
    ok = answer.ok;
    outcome = ok ? "ok" : `HTTP ${answer.status}`;
    const body = answer.body;
    shown.textContent = ok
      ? `${clock(new Date())}: ${LEVELS[level].words} ${name} is now ${body ? body.admin : action} (for the whole sync group).`
      : `${clock(new Date())}: ${action} ${name} failed: HTTP ${answer.status}${body && body.error ? `: ${body.error}` : ""}`;
  } catch (e) {
    outcome = "network";
    shown.textContent = `${clock(new Date())}: ${action} ${name} failed: the node did not answer`;
  }
  for (const where of [shown, $("form-acted")]) {
    where.textContent = shown.textContent;
    where.className = ok ? "acted" : "acted bad";
    where.hidden = false;
  }
  document.body.dataset.acted = `${action} ${name}: ${outcome}`;
  acting = false;
  await after();
}

// the buttons next to an object of the given admin state (v.admin, v.held); none below operator
export function actions(name, v, kind) {
  if (!may("operator")) return null;
  const offered = [];
  if (v.admin !== "enabled" || v.held) offered.push("enable");
  if (v.admin !== "disabled") offered.push("disable");
  if (v.admin !== "drain") offered.push("drain");
  return h("div", { class: "actions" }, offered.map((a) =>
    h("button", { type: "button", "data-action": a, "data-target": name, "data-kind": kind || "virtual-server", disabled: acting, title: `${a} ${name} on every node of the sync group` }, a)));
}

export function adminOf(level, name) {
  const held = ((data.status && data.status.admin) || []).find((a) => a.level === level && a.name === name);
  return held ? held.state : "enabled";
}

// the form of the Admin states panel: any object of any level, with a reason; for a role
// below operator, a note saying what it needs instead
export function renderActionForm() {
  const form = $("act-form");
  const note = $("act-note");
  const allowed = may("operator");
  form.hidden = !allowed;
  note.hidden = allowed;
  $("actions-lead").textContent = allowed
    ? "Enable, disable and drain act on the whole sync group."
    : token
      ? needs("operator", "Enabling, disabling and draining")
      : "To enable, disable or drain here, open this page with an operator's token (gtmcluster dashboard-url prints the address with the node's own).";
  if (!allowed) {
    note.textContent = needs("operator", "Enabling, disabling and draining");
    return;
  }
  const level = $("act-level");
  if (!level.options.length) {
    level.replaceChildren(...Object.entries(LEVELS).map(([k, l]) => h("option", { value: k }, l.words)));
  }
  const select = $("act-name");
  const names = [...LEVELS[level.value].names()].sort();
  const current = [...select.options].map((o) => o.value);
  if (names.join("\n") !== current.join("\n")) {
    const chosen = select.value;
    select.replaceChildren(...names.map((n) => h("option", { value: n, selected: n === chosen }, n)));
  }
}

export function setUpActions() {
  $("dc-list").addEventListener("click", (e) => {
    const button = e.target.closest("button[data-action]");
    if (button) act(button.dataset.target, button.dataset.action, button.dataset.kind);
  });
  $("act-level").addEventListener("change", () => renderActionForm());
  $("act-form").addEventListener("submit", (e) => e.preventDefault());
  for (const action of ACTIONS) {
    $(`act-${action}`).addEventListener("click", () => {
      const name = $("act-name").value;
      if (name) act(name, action, $("act-level").value, $("act-reason").value.trim());
    });
  }
}
