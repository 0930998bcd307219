#!/bin/bash
# connect() latency through the network filter's BPF hooks vs. an unfiltered
# cgroup and vs. hooks that allow at once (bench/bench_net_connect.c), side
# by side in one run; writes bench/results/net.md and
# bench/results/net-<UTC date>.json, with the machine's load before and
# after. Target: <= 5% overhead at p50.
#   bench/run_net_connect.sh BUILD_DIR     (BENCH_NET_N, default 30000)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
BIN=$BUILD/bench/bench_net_connect
[ -x "$BIN" ] || { echo "bench: $BIN not built" >&2; exit 1; }
stamp=$(date -u +%Y%m%dT%H%M%SZ)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
out=$("$BIN" "${BENCH_NET_N:-30000}" 10)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
out=$(/usr/bin/python3 -c 'import json, sys
d = json.loads(sys.argv[1]); d["load_before"] = sys.argv[2]; d["load_after"] = sys.argv[3]
d["nproc"] = int(sys.argv[4]); print(json.dumps(d))' "$out" "$load_before" "$load_after" "$(nproc)")
echo "$out" > "$ROOT/bench/results/net-$stamp.json"
/usr/bin/python3 - "$ROOT/bench/results/net.md" "$stamp" "$out" <<'PY'
import json, sys
path, stamp, d = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
ok = d["overhead_p50"] <= 0.05
rows = "\n".join(
    f"| {m} | {d[m + '_p50_us']:.2f} | {d[m + '_mean_us']:.2f} | {d[m + '_p99_us']:.2f} |"
    for m in ("plain", "floor", "filtered"))
progs = "\n".join(
    f"| {h} | {v['ns_per_run']:.0f} | {v['floor_ns_per_run']:.0f} | {v['runs']} |"
    for h, v in d["programs"].items() if v["runs"])
with open(path, "w") as f:
    f.write(f"""# connect() through the network filter ({stamp})

TCP connect() to a listener in another network namespace over a veth pair,
{d['n']} per cgroup in {d['rounds']} interleaved rounds (the order rotates),
from three cgroups side by side in one run: `plain` (no program), `floor`
(programs on the same six hooks that return "allow" at once) and
`filtered` (the network filter: allowlist of 16 rules, the match the most
specific; a deny set of 8 prefixes like the daemon's).
`bench/run_net_connect.sh`. Load average (1/5/15 min) on {d['nproc']} cores:
{d['load_before']} before, {d['load_after']} after (other work shares the
machine: ratios within this run are meaningful, absolute times are not).

| | p50 (us) | mean (us) | p99 (us) |
|---|---|---|---|
{rows}

Overhead of the filter vs plain: {d['overhead_p50']*100:+.1f}% at p50,
{d['overhead_mean']*100:+.1f}% mean (target <= 5% at p50: {'met' if ok else 'NOT met'}).
Of which running cgroup hooks at all (floor vs plain):
{d['floor_overhead_p50']*100:+.1f}% at p50, {d['floor_overhead_mean']*100:+.1f}% mean.

Per program, from the kernel's statistics (BPF_ENABLE_STATS, an untimed
pass of 5,000 connects per cgroup; egress runs on the SYN, the ACK and the
RST of each connection):

| hook | filter ns/run | floor ns/run | runs |
|---|---|---|---|
{progs}
""")
print(f"bench: wrote {path}", file=sys.stderr)
PY
