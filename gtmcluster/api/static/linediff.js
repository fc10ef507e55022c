// A line diff of two texts, as `gtmcluster config diff` shows one (unified, 3 lines of
// context): the common head and tail are set aside, and the longest common subsequence of
// what is left is found, up to MAX_CELLS comparisons (beyond: too big to show here).
"use strict";

const MAX_CELLS = 4000000;

// {hunks: [[{op: " " | "-" | "+", text}]], added, removed}, or null when too big
export function diffLines(before, after, context = 3) {
  const a = splitLines(before), b = splitLines(after);
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head += 1;
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail += 1;
  const x = a.slice(head, a.length - tail), y = b.slice(head, b.length - tail);
  if ((x.length + 1) * (y.length + 1) > MAX_CELLS) return null;
  const w = y.length + 1;
  const lcs = new Uint32Array((x.length + 1) * w); // lcs[i][j]: of x[i..] and y[j..]
  for (let i = x.length - 1; i >= 0; i -= 1) {
    for (let j = y.length - 1; j >= 0; j -= 1) {
      lcs[i * w + j] = x[i] === y[j] ? lcs[(i + 1) * w + j + 1] + 1 : Math.max(lcs[(i + 1) * w + j], lcs[i * w + j + 1]);
    }
  }
  const ops = a.slice(0, head).map((text) => ({ op: " ", text }));
  let i = 0, j = 0, added = 0, removed = 0;
  while (i < x.length || j < y.length) {
    if (i < x.length && j < y.length && x[i] === y[j]) { ops.push({ op: " ", text: x[i] }); i += 1; j += 1; }
    else if (i < x.length && (j === y.length || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1])) { ops.push({ op: "-", text: x[i] }); i += 1; removed += 1; }
    else { ops.push({ op: "+", text: y[j] }); j += 1; added += 1; }
  }
  ops.push(...a.slice(a.length - tail).map((text) => ({ op: " ", text })));
  return { hunks: hunks(ops, context), added, removed };
}

function splitLines(text) {
  if (text === null || text === undefined || text === "") return [];
  const lines = text.split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  return lines;
}

// the changed lines with *context* unchanged ones around each; near changes share a hunk
function hunks(ops, context) {
  const out = [];
  let current = null, lastChange = -Infinity;
  ops.forEach((o, k) => {
    if (o.op === " ") {
      if (current && k - lastChange <= context) current.push(o);
      return;
    }
    if (!current || k - lastChange > 2 * context) {
      current = [];
      out.push(current);
      for (let c = Math.max(0, k - context, lastChange + context + 1); c < k; c += 1) current.push(ops[c]);
    } else {
      for (let c = lastChange + context + 1; c < k; c += 1) current.push(ops[c]);
    }
    current.push(o);
    lastChange = k;
  });
  return out;
}
