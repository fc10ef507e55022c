/* gtmcluster RUM snippet: measures this browser's round trip to each data center and posts
 * one beacon to the gtmcluster node that served it. No third-party code, no cookies.
 * Use: <script async src="https://RUM-LISTENER/rum/v1/snippet.js?zone=ZONE"></script>
 * After the page loads: makes a one-use id; asks for https://ID.rum.ZONE/ only so that the
 * browser's resolver looks the name up (the node answering it ties the resolver to the id);
 * fetches each DC's target once, timed by Resource Timing (responseStart - requestStart,
 * without DNS and connect, where the target answers CORS and sends Timing-Allow-Origin;
 * else, fetched again without CORS, the whole duration);
 * posts {"samples": {DC: ms}, "id": ID} to this listener's /rum/v1/beacon. */
(function (C) {
  var w = window, P = w.performance, s = document.currentScript, u;
  if (!w.fetch || !w.Promise || !w.crypto || !P || !P.now) return;
  try { u = new URL("/rum/v1/beacon", C.origin || s.src).href; } catch (e) { return; }
  var a = "abcdefghijklmnopqrstuvwxyz0123456789", r = new Uint8Array(20), id = "", i;
  w.crypto.getRandomValues(r);
  for (i = 0; i < 20; i++) id += a[r[i] % 36];
  function get(url, ms, mode) {
    return Promise.race([
      fetch(url, {mode: mode || "no-cors", cache: "no-store", credentials: "omit"}).then(function (x) { return x.arrayBuffer(); }),
      new Promise(function (ok, no) { setTimeout(no, ms); })
    ]);
  }
  function time(dc, url, out) {
    url = new URL(url, location.href);
    url.searchParams.set("gtmrum", id);
    url = url.href;
    var t0 = P.now();
    return get(url, 10000, "cors").catch(function () { t0 = P.now(); return get(url, 10000); }).then(function () {
      var t = P.getEntriesByName ? P.getEntriesByName(url).pop() : null, v = P.now() - t0;
      if (t) v = t.responseStart > 0 && t.requestStart > 0 ? t.responseStart - t.requestStart : t.duration;
      if (v > 0 && v < 60000) out[dc] = Math.round(v * 10) / 10;
    }, function () {});
  }
  function go() {
    var out = {}, p = C.zone ? get("https://" + id + ".rum." + C.zone + "/", 3000).catch(function () {}) : Promise.resolve();
    Object.keys(C.targets).forEach(function (dc) {
      p = p.then(function () { return time(dc, C.targets[dc], out); });
    });
    p.then(function () {
      if (!Object.keys(out).length) return;
      var b = JSON.stringify({samples: out, id: id});
      if (!(navigator.sendBeacon && navigator.sendBeacon(u, b)))
        fetch(u, {method: "POST", body: b, keepalive: true, credentials: "omit"}).catch(function () {});
    });
  }
  if (document.readyState === "complete") setTimeout(go, 500);
  else w.addEventListener("load", function () { setTimeout(go, 500); });
})(/*CONFIG*/{"origin": "", "targets": {}, "zone": ""});
