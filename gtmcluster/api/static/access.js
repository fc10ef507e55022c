// Who this page's token proves it is (GET /api/v1/whoami) and what that identity's role may
// do: viewer reads, operator changes admin state, admin changes the config. The page shows
// only what the role may do; the API checks every request all the same.
"use strict";

import { $, fetchJson } from "./common.js";

const RANKS = { viewer: 1, operator: 2, admin: 3 };
const ASK_EVERY = 30; // polls (a minute): a users file reloaded may change a role

// name, role and proof of the identity; role null until the node has said
export const me = { name: null, role: null, proof: null };
let asked = 0;

// whether the identity's role is *role* or above
export function may(role) {
  return !!me.role && (RANKS[me.role] || 0) >= RANKS[role];
}

// ask the node who the page is, at the first poll, every ASK_EVERY polls, and while it
// has not said; true when the role changed (the page then draws again what depends on it)
export async function whoami() {
  asked += 1;
  if (me.role && asked % ASK_EVERY !== 1) return false;
  const before = me.role;
  try {
    const answer = await fetchJson("whoami", "/api/v1/whoami");
    me.name = String(answer.name);
    me.role = RANKS[answer.role] ? answer.role : null;
    me.proof = String(answer.proof);
  } catch (e) {
    // a wrong or missing token: the banner says so (the other endpoints fail the same way)
    me.name = me.role = me.proof = null;
  }
  document.body.dataset.role = me.role || "";
  document.body.dataset.identity = me.name || "";
  $("whoami").textContent = me.role
    ? `${me.name === "anonymous" ? "no identity (a loopback reader)" : me.name} · ${me.role}`
    : "";
  return me.role !== before;
}

// what an identity of *role* may not do here, for a note where a view or an action needs it
export function needs(role, what) {
  const who = me.role ? `${me.name} is ${me.role === "viewer" ? "a" : "an"} ${me.role}` : "this page has no identity";
  return `${what} needs the ${role} role; ${who}.`;
}
