// The dashboard page's main script: polls the node's state every 2 s and draws it (tiles,
// data centers, admin states, sync group, changes seen, proximity, wide IPs); the graphs,
// the admin actions, the audit view and the config history are modules of their own.
"use strict";

import { whoami } from "./access.js";
import { actions, adminOf, onActed, renderActionForm, setUpActions } from "./actions.js";
import { pollAudit, refreshAudit } from "./audit.js";
import { ApiFailure, $, badge, clock, data, duration, fetchJson, h, ms, percent, table, timeEl, token } from "./common.js";
import { renderConfig, setUpConfig } from "./config.js";
import { pollHistory } from "./graphs.js";

const POLL_MS = 2000;
const MAX_CHANGES = 200;
const DIGEST_GRACE_S = 10; // a peer's digest may lag behind for a heartbeat or two
const CERT_WARN_DAYS = 21; // a certificate this close to its end warns (as `gtmcluster status` and the alert rule do)
const ENDPOINTS = {
  status: "/api/v1/status",
  health: "/api/v1/health",
  ldns: "/api/v1/ldns",
  wideips: "/api/v1/wideips",
  stats: "/api/v1/stats",
};

let lastSuccess = null; // Date of the last poll where every endpoint answered
let previous = null; // the states observed at the previous poll (for the change list)
let polls = 0;
const changes = [];
const openedAt = new Date();
const differingSince = new Map(); // peer -> Date its digest started to differ

// ---- states -------------------------------------------------------------------------------

function vsState(vs) {
  if (vs.available === true) return "available";
  if (vs.available === false) return vs.serving ? "draining" : "unavailable";
  return "unknown";
}
const LEVEL = {
  available: "ok", up: "ok", connected: "ok", agrees: "ok", matches: "ok", synced: "ok",
  draining: "warn", syncing: "warn", catching: "warn",
  unavailable: "bad", down: "bad", disconnected: "bad", differs: "bad",
  unknown: "unk",
};
const level = (state) => LEVEL[state] || "unk";
const DC_COLUMNS = ["c-name", "c-state", "c-check", "c-observers", "c-why"];

function datacenters() {
  const set = new Set();
  const s = data.status;
  if (s) {
    set.add(s.datacenter);
    for (const p of s.peers) if (p.datacenter) set.add(p.datacenter);
  }
  if (data.health) {
    for (const v of Object.values(data.health.virtual_servers)) set.add(v.datacenter);
    for (const l of Object.values(data.health.links)) set.add(l.datacenter);
  }
  if (data.ldns) for (const e of data.ldns.ldns) for (const p of e.paths) set.add(p.datacenter);
  return [...set].filter(Boolean).sort();
}

// state: this node's status "state"; a peer of an older protocol version holds only the
// records it can, and is compared with our digest over those (state.digest_by_protocol)
function peerDigest(peer, state) {
  if (!peer.connected) return "unknown";
  if (!peer.state_digest) return "unknown";
  const ours = (state.digest_by_protocol || {})[peer.protocol] || state.digest;
  return peer.state_digest === ours ? "agrees" : "differs";
}

async function poll() {
  await refresh();
  setTimeout(poll, POLL_MS);
}

async function refresh() {
  const names = Object.keys(ENDPOINTS);
  const [roleChanged, ...results] = await Promise.allSettled([whoami(), ...names.map((name) => fetchJson(name, ENDPOINTS[name]))]);
  const failures = [];
  const now = new Date();
  results.forEach((r, i) => {
    if (r.status === "fulfilled") data[names[i]] = r.value;
    else failures.push(r.reason instanceof ApiFailure ? r.reason : new ApiFailure(names[i], 0, String(r.reason)));
  });
  const fresh = !failures.some((f) => f.endpoint === "status" || f.endpoint === "health");
  if (!failures.length) lastSuccess = now;
  if (fresh && data.status && data.health) {
    polls += 1;
    document.body.dataset.polls = String(polls);
    track(now);
  }
  showBanner(failures);
  try {
    render(now);
    renderActionForm();
    if (roleChanged.value) renderConfig();
  } catch (e) {
    showBanner([new ApiFailure("page", 0, `the page could not draw the node's data: ${e.message}`)]);
  }
}

function showBanner(failures) {
  const banner = $("banner");
  document.body.dataset.error = failures.length ? String(failures[0].status || "network") : "";
  $("main").classList.toggle("stale", failures.length > 0 && !!data.status);
  $("pulse").classList.toggle("stale", failures.length > 0);
  if (!failures.length) {
    banner.hidden = true;
    banner.replaceChildren();
    return;
  }
  const auth = failures.find((f) => f.status === 401);
  const forbidden = failures.find((f) => f.status === 403);
  let title, detail;
  if (auth) {
    title = token ? "The node refused the bearer token." : "This node's API needs a bearer token.";
    detail = "Open the dashboard as " + location.origin + location.pathname +
      "#token=TOKEN with the API's token: the config's api.token, or the one the node made in its state_dir " +
      "(gtmcluster dashboard-url --config FILE --node NODE prints this address; the part after # is never sent to the server).";
  } else if (forbidden) {
    title = "The bearer token in this page's address is wrong.";
    detail = "Check the #token=… part of the address against the API's token (gtmcluster dashboard-url prints the right address).";
  } else {
    title = "Polling the node failed: " + [...new Set(failures.map((f) => f.message))].join("; ");
    detail = "Failed: " + failures.map((f) => ENDPOINTS[f.endpoint] || f.endpoint).join(", ") + ". Retrying every " + POLL_MS / 1000 + " s.";
  }
  if (lastSuccess) detail += ` The data shown is from ${clock(lastSuccess)}.`;
  banner.replaceChildren(h("strong", {}, title), h("p", {}, detail));
  banner.hidden = false;
}

// ---- changes between polls ----------------------------------------------------------------

function observe() {
  const s = data.status, hl = data.health;
  const o = { vs: {}, links: {}, peers: {}, generation: s.config_generation, ready: s.ready };
  for (const [name, v] of Object.entries(hl.virtual_servers)) {
    o.vs[name] = { state: vsState(v), held: !!v.held, reason: v.reason || "", dc: v.datacenter };
  }
  for (const [name, l] of Object.entries(hl.links)) o.links[name] = { state: l.state, reason: l.reason || "", dc: l.datacenter };
  for (const p of s.peers) o.peers[p.name] = { connected: !!p.connected, dc: p.datacenter };
  return o;
}

function track(now) {
  const current = observe();
  const found = [];
  const add = (kind, subject, from, to, text, detail) => found.push({ time: now, kind, subject, from, to, text, detail });
  if (previous) {
    if (previous.generation !== current.generation) {
      add("config", "config", `generation ${previous.generation}`, `generation ${current.generation}`, "Config reloaded", "");
    }
    for (const [name, v] of Object.entries(current.vs)) {
      const was = previous.vs[name];
      const now_ = v.state + (v.held ? ", held" : "");
      if (!was) { add("vs", name, "—", v.state, `Virtual server ${name} (${v.dc}) added`, v.reason); continue; }
      const then = was.state + (was.held ? ", held" : "");
      if (then !== now_) add("vs", name, then, now_, `Virtual server ${name} (${v.dc})`, v.reason);
    }
    for (const name of Object.keys(previous.vs)) {
      if (!(name in current.vs)) add("vs", name, previous.vs[name].state, "removed", `Virtual server ${name} removed`, "");
    }
    for (const [name, l] of Object.entries(current.links)) {
      const was = previous.links[name];
      if (!was) { add("link", name, "—", l.state, `Link ${name} (${l.dc}) added`, l.reason); continue; }
      if (was.state !== l.state) add("link", name, was.state, l.state, `Link ${name} (${l.dc})`, l.reason);
    }
    for (const [name, p] of Object.entries(current.peers)) {
      const was = previous.peers[name];
      const to = p.connected ? "connected" : "disconnected";
      if (!was) { add("peer", name, "—", to, `Peer ${name} added`, ""); continue; }
      if (was.connected !== p.connected) add("peer", name, was.connected ? "connected" : "disconnected", to, `Peer ${name}${p.dc ? ` (${p.dc})` : ""} ${to}`, "");
    }
  }
  previous = current;
  if (!found.length) return;
  changes.unshift(...found.reverse());
  changes.length = Math.min(changes.length, MAX_CHANGES);
  $("announce").textContent = found.map((c) => `${c.text}: ${c.to}`).join(". ");
}

// ---- rendering ----------------------------------------------------------------------------

function render(now) {
  const s = data.status;
  if (!s) return;
  document.body.dataset.node = s.node;
  document.title = `${s.node} · gtmcluster dashboard`;
  $("node-name").textContent = s.node;
  $("node-sub").replaceChildren(h("span", {},
    "data center ", h("strong", {}, s.datacenter), " · sync group ", h("strong", {}, s.group),
    s.ready ? null : h("span", { class: "tag" }, "starting: not ready yet")));
  renderUpdated();
  renderTiles();
  renderDatacenters();
  renderAdmin();
  renderSync(now);
  renderChanges();
  renderProximity();
  renderWideips();
}

function renderUpdated() {
  const text = $("updated-text");
  if (!lastSuccess) { text.textContent = "not updated yet"; return; }
  const ago = Math.max(0, Math.round((Date.now() - lastSuccess.getTime()) / 1000));
  text.replaceChildren("Last updated ", timeEl(lastSuccess), ago >= 2 ? ` (${ago} s ago)` : "", " · every 2 s");
}

function tile(levelName, label, value, detail) {
  return h("li", { class: `tile ${levelName}` },
    h("div", { class: "label" }, label), h("div", { class: "value" }, value), detail ? h("div", { class: "detail" }, detail) : null);
}

function renderTiles() {
  const s = data.status, hl = data.health;
  const tiles = [];
  if (hl) {
    const counts = { available: 0, draining: 0, unavailable: 0, unknown: 0 };
    for (const v of Object.values(hl.virtual_servers)) counts[vsState(v)] += 1;
    const total = Object.values(counts).reduce((a, b) => a + b, 0);
    const lvl = counts.unavailable ? "bad" : counts.draining || counts.unknown ? "warn" : "ok";
    tiles.push(tile(lvl, "Virtual servers", `${counts.available} of ${total} available`,
      [counts.draining ? `${counts.draining} draining` : null, counts.unavailable ? `${counts.unavailable} unavailable` : null,
        counts.unknown ? `${counts.unknown} unknown` : null].filter(Boolean).join(" · ") || "all taking new clients"));
    const links = Object.values(hl.links);
    if (links.length) {
      const up = links.filter((l) => l.state === "up").length;
      const down = links.filter((l) => l.state === "down").length;
      tiles.push(tile(down ? "bad" : up === links.length ? "ok" : "warn", "Links", `${up} of ${links.length} up`,
        down ? `${down} down` : up === links.length ? "all up" : `${links.length - up} unknown`));
    }
  }
  const peers = s.peers;
  const connected = peers.filter((p) => p.connected).length;
  tiles.push(tile(!peers.length ? "ok" : connected === peers.length ? "ok" : connected ? "warn" : "bad", "Sync group",
    peers.length ? `${connected} of ${peers.length} peers connected` : "no peers",
    peers.length ? `${peers.filter((p) => p.synced).length} synced` : "a group of one"));
  const differing = peers.filter((p) => peerDigest(p, s.state) === "differs").map((p) => p.name);
  tiles.push(tile(differing.length ? (digestLate(differing) ? "bad" : "warn") : "ok", "State digests",
    !peers.length ? "nothing to compare" : differing.length ? `differ: ${differing.join(", ")}` : "agree",
    `${s.state.records} records · ${s.state.digest}`));
  const b = s.bundle;
  const refused = b && b.refused;
  tiles.push(tile(refused ? "bad" : "ok", "Config",
    b ? (b.generation ? `group generation ${b.generation}` : "its own file") : `generation ${s.config_generation}`,
    refused ? `refused generation ${refused.generation}: ${refused.reasons.join("; ")}`
      : `digest ${s.config_digest} · loaded ${duration(s.config_loaded_ago)} ago`));
  const certs = ["node", "ca", "api"].filter((k) => (s.certificates || {})[k]).map((k) => [k, s.certificates[k]]);
  if (certs.length) {
    // the soonest to end decides; within CERT_WARN_DAYS (the shipped alert rule's bound) it warns
    const soonest = Math.min(...certs.map(([, c]) => c.days_left));
    const words = { node: "node", ca: "CA", api: "API" };
    tiles.push(tile(soonest < 7 ? "bad" : soonest < CERT_WARN_DAYS ? "warn" : "ok", "Certificates",
      soonest < 0 ? "one has expired" : `${soonest} day${soonest === 1 ? "" : "s"} left`,
      certs.map(([k, c]) => `${words[k] || k} ${c.days_left} d (${c.not_after.slice(0, 10)})`).join(" · ")));
  }
  if (data.ldns) tiles.push(tile("ok", "Proximity", `${data.ldns.ldns.length} LDNS`, "measured paths in the table"));
  const rum = clientCoverage(s.proximity);
  if (rum) tiles.push(rum);
  $("tiles").replaceChildren(...tiles);
}

// Client proximity (RUM): the client table's size and the share of answers each source
// decided (every wide IP answer of this node, those of a kept decision too).
const SOURCE_NAMES = { client: "client", population: "LDNS population", ldns: "LDNS", none: "no paths" };
function clientCoverage(p) {
  if (!p || !(p.sources || []).some((s) => s !== "ldns")) return null; // client sources off
  const decided = p.decisions || {};
  const total = Object.values(decided).reduce((a, b) => a + b, 0);
  const share = (n) => (total ? Math.round((100 * n) / total) : 0);
  const parts = Object.keys(SOURCE_NAMES).filter((k) => decided[k]).map((k) => `${SOURCE_NAMES[k]} ${share(decided[k])} %`);
  const el = tile(p.subnets || p.populations ? "ok" : "unk", "Client proximity",
    `${p.subnets} client figures · ${p.populations} LDNS populations`,
    total ? `answers decided by ${parts.join(" · ")}` : "no answers decided yet");
  el.dataset.rum = "coverage";
  el.dataset.subnets = String(p.subnets);
  el.dataset.populations = String(p.populations);
  for (const k of Object.keys(SOURCE_NAMES)) el.dataset[`share${k[0].toUpperCase()}${k.slice(1)}`] = String(share(decided[k] || 0));
  return el;
}

// the group's config generation a member runs (config sync), and a newer one it holds
function bundleText(b) {
  if (!b) return "";
  const running = b.generation ? `group generation ${b.generation}` : "its own file";
  return b.held_generation && b.held_digest !== b.digest ? `${running} (holds ${b.held_generation})` : running;
}

function digestLate(names) {
  const now = Date.now();
  return names.some((n) => differingSince.has(n) && (now - differingSince.get(n).getTime()) / 1000 > DIGEST_GRACE_S);
}

function observers(map) {
  const entries = Object.entries(map || {}).sort(([a], [b]) => a.localeCompare(b));
  if (!entries.length) return h("span", { class: "small" }, "—");
  return h("div", { class: "chips" }, entries.map(([node, v]) =>
    h("span", { class: `chip ${v.up ? "ok" : "bad"}`, title: `${node}: ${v.up ? "up" : "down"}${v.reason ? ` (${v.reason})` : ""}, ${duration(v.age)} ago` },
      `${node} ${v.up ? "up" : "down"}`)));
}

function renderDatacenters() {
  const s = data.status, hl = data.health;
  if (!hl) return;
  const cards = datacenters().map((dc) => {
    const members = [s.datacenter === dc ? `${s.node} (this node)` : null,
      ...s.peers.filter((p) => p.datacenter === dc).map((p) => p.name)].filter(Boolean);
    const vss = Object.entries(hl.virtual_servers).filter(([, v]) => v.datacenter === dc).sort(([a], [b]) => a.localeCompare(b));
    const links = Object.entries(hl.links).filter(([, l]) => l.datacenter === dc).sort(([a], [b]) => a.localeCompare(b));
    const counts = {};
    for (const [, v] of vss) counts[vsState(v)] = (counts[vsState(v)] || 0) + 1;
    const dcAdmin = adminOf("datacenter", dc);
    const head = h("header", {},
      h("h3", {}, dc),
      dcAdmin !== "enabled" ? h("span", { class: "tag", "data-dc-admin": dcAdmin }, `admin: ${dcAdmin}`) : null,
      actions(dc, { admin: dcAdmin }, "datacenter"),
      h("span", { class: "small" }, members.length ? `members: ${members.join(", ")}` : "no member here"),
      h("span", { class: "counts" }, ["available", "draining", "unavailable", "unknown"].filter((k) => counts[k]).map((k) => badge(level(k), `${counts[k]} ${k}`))));
    const body = h("div", { class: "body" });
    if (vss.length) {
      body.append(table("Virtual servers", ["Name", "State", "Monitor", "Observers", "Why"], vss.map(([name, v]) => {
        const state = vsState(v);
        const notes = [];
        if (v.held) notes.push(h("span", { class: "tag" }, "held for manual resume"));
        if (v.admin && v.admin !== "enabled") notes.push(h("span", { class: "tag" }, `admin: ${v.admin}`));
        if (v.weight !== undefined && v.weight < 1) notes.push(h("span", { class: "tag" }, `slow start ${Math.round(v.weight * 100)} %`));
        const health = v.health || "unknown";
        return h("tr", { "data-vs": name, "data-state": state, "data-held": v.held ? "true" : "false" },
          h("th", { scope: "row" }, name, h("div", { class: "small mono" }, v.address || v.record || "")),
          h("td", {}, badge(level(state), state), notes, actions(name, v)),
          h("td", { class: "nowrap" }, v.monitor ? [badge(level(health), health), h("div", { class: "small" }, v.monitor)] : h("span", { class: "small" }, "no monitor")),
          h("td", {}, observers(v.observers)),
          h("td", { class: "reason" }, v.reason || ""));
      }), {}, DC_COLUMNS));
    } else {
      body.append(h("p", { class: "empty" }, "No virtual servers in this data center."));
    }
    if (links.length) {
      body.append(table("Links", ["Name", "State", "Targets", "Observers", "Why"], links.map(([name, l]) =>
        h("tr", { "data-link": name, "data-state": l.state || "unknown" },
          h("th", { scope: "row" }, name),
          h("td", {}, badge(level(l.state), l.state || "unknown"), linkUse(l)),
          h("td", { class: "small mono" }, (l.targets || []).join(", ")),
          h("td", {}, observers(l.observers)),
          h("td", { class: "reason" }, [l.full ? h("div", {}, `${l.full}: no new clients`) : null, l.reason || ""]))), {}, DC_COLUMNS));
    }
    return h("article", { class: "dc", "data-dc": dc, "aria-label": `Data center ${dc}` }, head, body);
  });
  $("dc-list").replaceChildren(...(cards.length ? cards : [h("p", { class: "empty" }, "No data centers configured.")]));
}

// a link's measured utilisation next to its state: "93 % of 1000 Mbps" (the busier
// direction), "full" over its max_utilisation, "not measured" with a bandwidth but no figure
function linkUse(l) {
  if (l.bandwidth_mbps === undefined || l.bandwidth_mbps === null) return null;
  const attrs = { class: "small", "data-utilisation": l.utilisation === null ? "" : String(l.utilisation), "data-full": l.full ? "true" : "false" };
  if (l.utilisation === null || l.utilisation === undefined) return h("div", attrs, `not measured, ${l.bandwidth_mbps} Mbps`);
  const pct = Math.round(l.utilisation * 1000) / 10;
  const max = l.max_utilisation ? ` (max ${Math.round(l.max_utilisation * 1000) / 10} %)` : "";
  return h("div", attrs, l.full ? badge("bad", "full") : null, ` ${pct} % of ${l.bandwidth_mbps} Mbps${max}`);
}

function renderAdmin() {
  const held = (data.status && data.status.admin) || [];
  if (!held.length) {
    $("admin-table").replaceChildren(h("p", { class: "empty" }, "No admin state set: everything is left to health."));
    return;
  }
  const words = { datacenter: "data center", link: "link", vs: "virtual server", pool: "pool", member: "pool member", wideip: "wide IP" };
  $("admin-table").replaceChildren(table("Admin states", ["Object", "State", "By", "When", "Node", "Why"], held.map((a) =>
    h("tr", { "data-admin": `${a.level}/${a.name}`, "data-state": a.state },
      h("th", { scope: "row" }, `${words[a.level] || a.level} ${a.name}`),
      h("td", {}, badge(a.state === "enabled" ? "ok" : a.state === "drain" ? "warn" : "bad", a.state)),
      h("td", {}, a.configured ? "the config" : a.by || ""),
      h("td", { class: "nowrap" }, a.at ? timeEl(new Date(a.at * 1000)) : ""),
      h("td", {}, a.node || ""),
      h("td", { class: "reason" }, a.reason || "")))));
}

function renderSync(now) {
  const s = data.status;
  const mine = s.state.digest;
  for (const p of s.peers) {
    if (peerDigest(p, s.state) === "differs") { if (!differingSince.has(p.name)) differingSince.set(p.name, now); }
    else differingSince.delete(p.name);
  }
  const rows = [h("tr", { class: "self", "data-self": s.node },
    h("th", { scope: "row" }, s.node, h("div", { class: "small" }, `${s.datacenter} · this node`)),
    h("td", {}, badge(s.ready ? "ok" : "warn", s.ready ? "ready" : "starting")),
    h("td", {}, h("span", { class: "mono" }, mine), h("div", { class: "small" }, `${s.state.records} records`)),
    h("td", {}, h("span", { class: "mono" }, s.config_digest), h("div", { class: "small" }, bundleText(s.bundle))))];
  for (const p of [...s.peers].sort((a, b) => a.name.localeCompare(b.name))) {
    const digest = peerDigest(p, s.state);
    let digestBadge;
    if (digest === "differs") {
      const since = differingSince.get(p.name);
      const secs = since ? (now - since) / 1000 : 0;
      digestBadge = secs > DIGEST_GRACE_S ? badge("bad", `differs for ${duration(secs)}`) : badge("warn", "differs (catching up)");
    } else if (digest === "agrees") {
      digestBadge = badge("ok", "agrees");
    } else {
      digestBadge = badge("unk", p.connected ? "not reported yet" : "unknown");
    }
    const config = p.bundle && p.bundle.refused ? badge("bad", `refused generation ${p.bundle.refused.generation}`)
      : p.config_matches === true ? badge("ok", "matches") : p.config_matches === false ? badge("bad", "differs") : badge("unk", "unknown");
    rows.push(h("tr", { "data-peer": p.name, "data-connected": p.connected ? "true" : "false", "data-digest": digest },
      h("th", { scope: "row" }, p.name, h("div", { class: "small" }, p.datacenter || "data center not known yet")),
      h("td", {},
        !p.connected ? badge("bad", "disconnected") : p.counted === false ? badge("bad", `silent ${duration(p.silent_for)}: not counted`) : badge("ok", "connected"),
        h("div", { class: "small" }, [
          p.connected ? (p.synced ? `synced · for ${duration(p.connected_for)}` : "syncing…") : null,
          p.last_contact_ago === null ? "never heard from" : `last contact ${duration(p.last_contact_ago)} ago`,
        ].filter(Boolean).join(" · "))),
      h("td", {}, digestBadge, p.state_digest ? h("div", { class: "small mono" }, p.state_digest) : null),
      h("td", {}, config, h("div", { class: "small" }, bundleText(p.bundle)))));
  }
  const peers = s.peers.length;
  const connected = s.peers.filter((p) => p.connected).length;
  const agreeing = s.peers.filter((p) => peerDigest(p, s.state) === "agrees").length;
  $("sync-lead").textContent = peers
    ? `${connected} of ${peers} peers connected; ${agreeing} of ${peers} report the same state digest as ${s.node}.`
    : `${s.node} is the only member of sync group ${s.group}.`;
  $("sync-table").replaceChildren(table(null,
    ["Member", "Connection", "State digest", "Config"], rows, { "aria-labelledby": "sync-title" }));
}

function renderChanges() {
  $("changes-lead").textContent = `Seen by this page between polls since ${clock(openedAt)}, newest first.`;
  if (!changes.length) {
    $("changes-table").replaceChildren(h("p", { class: "empty" }, `No changes since this page opened at ${clock(openedAt)}.`));
    return;
  }
  $("changes-table").replaceChildren(table(null, ["Time", "What", "Change", "Detail"], changes.map((c) =>
    h("tr", { "data-change": c.kind, "data-subject": c.subject, "data-to": c.to },
      h("td", {}, timeEl(c.time)),
      h("td", {}, c.text),
      h("td", { class: "nowrap" }, badge(level(c.from.split(",")[0]), c.from), h("span", { class: "arrow", "aria-label": "to" }, "→"), badge(level(c.to.split(",")[0]), c.to)),
      h("td", { class: "reason" }, c.detail || ""))), { class: "changes", "aria-labelledby": "changes-title" }));
}

function renderProximity() {
  if (!data.ldns) return;
  const entries = [...data.ldns.ldns].sort((a, b) => a.address.localeCompare(b.address, undefined, { numeric: true }));
  if (!entries.length) {
    $("prox-table").replaceChildren(h("p", { class: "empty" },
      "No LDNS measured yet. Paths appear when a resolver asks for a wide IP whose pool uses a path method (rtt, hops, completion rate) and the data centers' probers have measured it."));
    return;
  }
  const dcs = datacenters();
  const rows = entries.map((e) => {
    const byDc = Object.fromEntries(e.paths.map((p) => [p.datacenter, p]));
    const usable = e.paths.filter((p) => p.rtt_us > 0 && p.completion_rate > 0);
    usable.sort((a, b) => a.rtt_us - b.rtt_us || a.datacenter.localeCompare(b.datacenter));
    const winner = usable.length ? usable[0].datacenter : "";
    return h("tr", { "data-ldns": e.address, "data-winner": winner },
      h("th", { scope: "row", class: "mono" }, e.address, h("div", { class: "small" }, `via ${e.probe_protocol || "—"} · forgotten in ${duration(e.ttl)}`)),
      dcs.map((dc) => {
        const p = byDc[dc];
        if (!p) return h("td", { class: "small", "data-dc": dc }, "not measured");
        const ok = p.rtt_us > 0 && p.completion_rate > 0;
        const best = dc === winner;
        return h("td", { class: best ? "best" : null, "data-dc": dc, title: `measured by ${p.measured_by} ${duration(p.age)} ago; last RTT ${ms(p.last_rtt_us)}${p.hops ? `; ${p.hops} hops` : ""}` },
          ok ? h("span", { class: "rtt" }, ms(p.rtt_us)) : badge("bad", "no reply"),
          best ? h("span", { class: "tag" }, "best") : null,
          h("div", { class: "small" }, `${percent(p.completion_rate)} replies · ${p.protocol || "—"}${p.failures ? ` · ${p.failures} failed` : ""}`));
      }),
      h("td", {}, winner ? badge("ok", winner) : badge("unk", "none usable")));
  });
  $("prox-table").replaceChildren(table(null,
    ["LDNS", ...dcs.map((dc) => ({ text: `${dc} RTT`, class: null })), "Wins"], rows, { "aria-labelledby": "prox-title" }));
}

function renderWideips() {
  if (!data.wideips) return;
  const entries = Object.entries(data.wideips.wideips).sort(([a], [b]) => a.localeCompare(b));
  if (!entries.length) {
    $("wip-table").replaceChildren(h("p", { class: "empty" }, "No wide IPs configured."));
    return;
  }
  const rows = entries.map(([name, w]) => {
    const pools = w.pools.map((p) => {
      const up = p.members.filter((m) => m.available).length;
      const methods = p.methods.filter((m) => m && m !== "none");
      return h("div", { class: "pool" },
        h("strong", {}, p.name), " ",
        badge(up === p.members.length ? "ok" : up ? "warn" : "bad", `${up} of ${p.members.length} available`), " ",
        h("span", { class: "small" }, `${methods.length ? methods.join(" → ") : "none"} · TTL ${p.ttl}${w.pools.length > 1 ? ` · ratio ${p.ratio}` : ""}`),
        h("div", { class: "chips" }, p.members.map((m) => {
          const answered = memberAnswers(p.name, m.name);
          return h("span", { class: `chip ${m.available ? "ok" : "bad"}`, title: `${m.address || m.record} in ${m.datacenter} · ${answered} answers`,
            "data-member-answers": `${p.name}/${m.name}`, "data-count": String(answered) },
            `${m.name} ${m.available ? "up" : "out"} · ${answered}`);
        })));
    });
    const st = (data.stats && data.stats.wideips[name]) || null;
    return h("tr", { "data-wideip": name },
      h("th", { scope: "row" }, name, h("div", { class: "small" }, w.types.join(", "))),
      h("td", {}, pools),
      h("td", { class: "small" }, w.pool_lb),
      h("td", { class: "small" }, [w.failure_response, w.last_resort_pool ? `last resort: ${w.last_resort_pool}` : null,
        w.persistence ? `persistence ${duration(w.persistence.ttl)}` : null].filter(Boolean).join(" · ")),
      h("td", { "data-wideip-answers": name, "data-count": String(st ? st.answered : 0) }, answersText(st)));
  });
  $("wip-table").replaceChildren(table(null, ["Wide IP", "Pools", "Pool choice", "When all are down", "Answers"], rows, { "aria-labelledby": "wip-title" }));
}

// the per-object statistics (/api/v1/stats): counts since the node started
function memberAnswers(pool, member) {
  const p = data.stats && data.stats.pools[pool];
  return (p && p.members[member] && p.members[member].answered) || 0;
}

function answersText(st) {
  if (!st) return "none yet";
  const slots = Object.entries(st.slots).map(([slot, n]) => `${slot.replace("_", " ")} ${n}`);
  const other = [["dropped", st.dropped], ["returned to DNS", st.returned_to_dns],
    ...Object.entries(st.rcodes)].filter(([, n]) => n).map(([what, n]) => `${what} ${n}`);
  return h("div", {}, h("strong", {}, `${st.answered} of ${st.requests}`),
    h("div", { class: "small" }, [...slots, ...other].join(" · ")));
}

setUpActions();
setUpConfig();
onActed(async () => { await refresh(); await refreshAudit(); });
setInterval(() => { if (data.status) renderUpdated(); }, 1000);
window.addEventListener("hashchange", () => location.reload());
poll();
pollHistory();
pollAudit();
