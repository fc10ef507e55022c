#!/usr/bin/env bash
# Wide IP queries per second of one node, measured with dnsperf (Debian package dnsperf).
#
#   bench/dnsperf.sh [SECONDS] [CLIENTS]        (make bench runs it with the defaults)
#
# Runs member gtm-cnc of etc/cluster.yaml on 127.0.0.250:5399 as a real twistd process and
# sends `www.wip.example.com A` (preferred rtt -> alternate topology; health checks are off
# since no backends run, so every server is up)
# and `mail.wip.example.com A` (a static record) at unlimited rate, like the runs in
# shared/PERF-BASELINE.md (dnsperf -c 4 -T 1). Prints queries/s, lost queries, average
# latency and the node's CPU time per query (user+system from /proc). Not a test: figures
# depend on the machine; compare runs made in the same session.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-15}
clients=${2:-4}
py=${PYTHON:-.venv/bin/python}
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT

"$py" - "$work" <<'PY'
import sys, pathlib, yaml
work = pathlib.Path(sys.argv[1])
config = yaml.safe_load(open("etc/cluster.yaml"))
config["base_dir"] = str(pathlib.Path("etc/cluster.yaml").resolve().parent.parent)
for vs in config["virtual_servers"].values():  # no backends here: health checks off, all up
    vs.pop("monitor", None)
    vs.pop("link", None)
member = config["sync_group"]["members"][0]
member["dns"] = ["127.0.0.250:5399"]
member["api"] = "127.0.0.250:8053"
member["peer"] = "127.0.0.250:4353"
(work / "cluster.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
PY

"$py" -c "from twisted.scripts.twistd import run; run()" --nodaemon --logfile="$work/node.log" \
    --pidfile="$work/node.pid" gtm --config="$work/cluster.yaml" --node=gtm-cnc &
pid=$!
for _ in $(seq 100); do
    dig @127.0.0.250 -p 5399 +tries=1 +time=1 wip.example.com SOA >/dev/null 2>&1 && break
    sleep 0.1
done

cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
run() {  # name, query line
    printf '%s\n' "$2" > "$work/queries"
    local before after
    before=$(cpu)
    dnsperf -s 127.0.0.250 -p 5399 -d "$work/queries" -l "$seconds" -c "$clients" -T 1 -q 200 > "$work/out" 2>&1
    after=$(cpu)
    local qps lost latency completed
    qps=$(awk '/Queries per second/ {print $4}' "$work/out")
    lost=$(awk '/Queries lost/ {print $3}' "$work/out")
    completed=$(awk '/Queries completed/ {print $3}' "$work/out")
    latency=$(awk '/Average Latency/ {print $4}' "$work/out")
    local ticks
    ticks=$(getconf CLK_TCK)
    awk -v n="$1" -v q="$qps" -v l="$lost" -v lat="$latency" -v c="$completed" \
        -v d="$((after - before))" -v t="$ticks" 'BEGIN {
        printf "%-28s %10.0f qps  lost %-6s avg latency %.2f ms  node CPU %.1f us/query\n",
               n, q, l, lat * 1000, (c > 0 ? d / t * 1e6 / c : 0) }'
}
echo "dnsperf -c $clients -T 1 -l $seconds against one node (twistd, $("$py" -c 'import platform; print(platform.python_implementation(), platform.python_version())'))"
run "wide IP (rtt->topology)" "www.wip.example.com A"
run "wide IP (ratio, persist)" "api.wip.example.com A"
run "static A record" "mail.wip.example.com A"
