#!/bin/bash
# The API's overhead: "create a sandbox + run `true` in it + kill it" through
# a real warrend (libwarren over its Unix socket) next to the same cycle
# in-process through the library, at concurrency 1, 8 and 64. Run by
# `make bench` after bench/run.sh; see bench/README.md for the method.
#
#   bench/run_api.sh BUILD_DIR
#
# Environment:
#   BENCH_API_N       timed cycles per mode and concurrency (default 192; at
#                     least BENCH_API_PER_THREAD (4) per thread and round:
#                     1024 at concurrency 64 in 4 rounds)
#   BENCH_API_ROUNDS  interleaved rounds the N cycles are split into (4); the
#                     order of the modes alternates from round to round
#   BENCH_API_WARMUP  untimed cycles per thread and round first (1)
#   BENCH_API_CONC    concurrencies (default "1 8 64")
#   BENCH_API_SPAWNERS  the daemon's `spawners` (default: as shipped, one
#                     per CPU up to 4)
#   BENCH_API_ADMISSION  "open" (default: the daemon's admission pressure
#                     limits at 1, so other work's memory or CPU pressure on
#                     the host does not turn creates into 429s) or "shipped"
#   BENCH_API_MODES   subset of: lib api api-thread (default all three;
#                     api = one client shared by the threads, api-thread =
#                     a client per thread)
#
# Starts its own warrend (temp state and run dirs, its own socket and cgroup
# base, the busybox EROFS image registered as "busybox"), writes
# bench/results/api.md, bench/results/api-<UTC time>.json and the section of
# README.md between the bench:api markers. On exit, also on failure or ^C,
# every sandbox still running is killed through the API, the daemon stopped,
# and whatever is left (processes, cgroups named after this run, mounts, the
# temp dir) removed.
set -eu
set -o pipefail

BUILD=${1:?usage: bench/run_api.sh BUILD_DIR}
cd "$(dirname "$0")/.."
ROOT=$PWD
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
export PATH=$PATH:/usr/sbin:/sbin
. "$ROOT/bench/lib.sh"

N=${BENCH_API_N:-192}
ROUNDS=${BENCH_API_ROUNDS:-4}
PER_THREAD=${BENCH_API_PER_THREAD:-4}
CONC=${BENCH_API_CONC:-1 8 64}
MODES=${BENCH_API_MODES:-lib api api-thread}
export BENCH_WARMUP=${BENCH_API_WARMUP:-1}
PY=/usr/bin/python3
BIN=$BUILD/bench/bench_api
RESULTS=$ROOT/bench/results

for f in "$BIN" "$BUILD/warrend" "$BUILD/warren-init"; do
	if [ ! -x "$f" ]; then
		echo "bench-api: $f not built (ninja -C $BUILD)" >&2
		exit 1
	fi
done
if [ "$(id -u)" != 0 ]; then
	echo "bench-api: needs root (namespaces, cgroups)" >&2
	exit 1
fi
for mode in $MODES; do
	case $mode in
	lib | api | api-thread) ;;
	*)
		echo "bench-api: unknown mode '$mode'" >&2
		exit 2
		;;
	esac
done

WORK=$(mktemp -d /tmp/warren-benchapi.XXXXXX)
# mktemp makes it 0700; the sandboxes' mapped root must traverse it to reach
# their mountpoints under the run dirs.
chmod 0755 "$WORK"
CG=warren-benchapi-$$ # cgroup bases: $CG-d (the daemon), $CG-lib (in-process)
SOCK=$WORK/d/run/warren.sock
DLOG=${BENCH_API_DLOG:-$WORK/warrend.log}
DPID=""

# daemon_call health|delete-all|metrics: a few raw requests on the socket.
daemon_call() {
	"$PY" - "$SOCK" "$1" <<'EOF'
import http.client, json, socket, sys
sock, what = sys.argv[1], sys.argv[2]

class Conn(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(sock)

def call(method, path):
    c = Conn("localhost", timeout=60)
    c.request(method, path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body

if what == "health":
    st, body = call("GET", "/v1/health")
    if st != 200:
        sys.exit(1)
    print(json.loads(body)["sandboxes"])
elif what == "metrics":
    st, body = call("GET", "/metrics")
    sys.stdout.write(body.decode())
elif what == "delete-all":
    n = 0
    while True:
        st, body = call("GET", "/v1/sandboxes?state=running&limit=1000")
        ids = [s["id"] for s in json.loads(body)["sandboxes"]] if st == 200 else []
        if not ids:
            break
        for sid in ids:
            call("DELETE", "/v1/sandboxes/" + sid)
            n += 1
    print(n)
EOF
}

cleanup() {
	local rc=$? i
	trap - EXIT INT TERM HUP
	if [ -n "$DPID" ] && kill -0 "$DPID" 2>/dev/null; then
		# Sandboxes survive a daemon stop (the next start adopts them):
		# kill them through the API first.
		daemon_call delete-all >/dev/null 2>&1 || true
		kill -TERM "$DPID" 2>/dev/null || true
		for i in $(seq 300); do
			kill -0 "$DPID" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$DPID" 2>/dev/null || true
		wait "$DPID" 2>/dev/null || true
	fi
	# Whatever is still in a cgroup named after this run (a daemon that
	# died, a killed bench_api): kill it, then remove the cgroups.
	bench_reap_cgroups -name "$CG-*"
	bench_remove_work "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# ---- image and daemon ----------------------------------------------------
mapfile -t imgs < <("$ROOT/scripts/mkimage.sh" "$BUILD/bench-images")
EROFS=${imgs[1]}
mkdir -p "$WORK/d" "$WORK/lib/state" "$WORK/lib/run"
# Defaults for everything that is not about where things live: workers,
# max_sandboxes, max_commands and max_connections as shipped.
"$PY" - "$WORK/warrend.json" "$SOCK" "$EROFS" "${BENCH_API_SPAWNERS:-}" \
	"${BENCH_API_ADMISSION:-open}" <<'EOF'
import json, sys
path, sock, erofs, spawners, admission = sys.argv[1:]
cfg = {"socket": sock, "images": {"busybox": erofs}, "log_level": "warning"}
if spawners:
    cfg["spawners"] = int(spawners)
# The node's pressure comes from whatever else shares the machine: the
# admission check still runs on every create (it reads the PSI files), but
# refuses nothing, as the library has no admission at all.
if admission == "open":
    cfg["admission"] = {"cpu_pressure_max": 1, "memory_pressure_max": 1}
with open(path, "w") as f:
    json.dump(cfg, f, indent=1)
EOF
WARREN_STATE_DIR=$WORK/d/state WARREN_RUN_DIR=$WORK/d/run WARREN_CGROUP_BASE=$CG-d \
	WARREN_INIT=$BUILD/warren-init \
	"$BUILD/warrend" --config "$WORK/warrend.json" >"$DLOG" 2>&1 &
DPID=$!
for i in $(seq 300); do
	if ! kill -0 "$DPID" 2>/dev/null; then
		echo "bench-api: warrend exited at start:" >&2
		tail -n 20 "$DLOG" >&2
		exit 1
	fi
	daemon_call health >/dev/null 2>&1 && break
	[ "$i" -lt 300 ] || {
		echo "bench-api: warrend did not answer on $SOCK in 30 s" >&2
		tail -n 20 "$DLOG" >&2
		exit 1
	}
	sleep 0.1
done

# ---- the runs ------------------------------------------------------------
# The N cycles of every cell (mode x concurrency) are split into ROUNDS
# rounds; each round runs every cell in turn, lib and api back to back at
# the same concurrency, so a swing in the machine's load hits both alike.
OUT=$WORK/out
mkdir -p "$OUT"
failed=""
PER=$(((N + ROUNDS - 1) / ROUNDS))

# run MODE CONCURRENCY: one bench_api invocation; appends its samples to
# $OUT/MODE.cC.raw, its JSON to .jsonl and any error text to .error.
run() {
	local mode=$1 c=$2 f per=$PER rc=0 err
	local cmd=(env BENCH_RAW="$OUT/$1.c$2.raw")
	f=$OUT/$mode.c$c
	# At least PER_THREAD cycles per thread: a thread's first cycle after
	# the start barrier waits behind fewer creates than its later ones.
	[ "$per" -ge $((PER_THREAD * c)) ] || per=$((PER_THREAD * c))
	case $mode in
	lib)
		cmd+=(WARREN_INIT="$BUILD/warren-init" WARREN_STATE_DIR="$WORK/lib/state"
			WARREN_RUN_DIR="$WORK/lib/run" WARREN_CGROUP_BASE="$CG-lib"
			"$BIN" lib "$c" "$per" "$EROFS")
		;;
	api) cmd+=(WARREN_SOCKET="$SOCK" BENCH_API_CLIENT=shared "$BIN" api "$c" "$per" busybox) ;;
	api-thread) cmd+=(WARREN_SOCKET="$SOCK" BENCH_API_CLIENT=thread "$BIN" api "$c" "$per" busybox) ;;
	esac
	printf 'bench-api: round %s/%s %-10s x%-2s n=%-4s ' "$round" "$ROUNDS" "$mode" "$c" "$per" >&2
	if [ "$mode" != lib ] && ! kill -0 "$DPID" 2>/dev/null; then
		echo "FAILED: warrend is gone" >&2
		echo "warrend died; its log ends: $(tail -n 5 "$DLOG" | tr '\n' ' ')" >>"$f.error"
		failed="$failed $mode.c$c"
		return 0
	fi
	# the machine's load next to every number (other work shares the CPUs)
	printf '%s %s\n' "$round" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$f.load"
	"${cmd[@]}" >"$f.last" 2>"$f.err" || rc=$?
	if grep -q '^{' "$f.last"; then
		cat "$f.last" >>"$f.jsonl"
		"$PY" -c 'import json,sys; r=json.load(open(sys.argv[1]));
print("p50 %7.1f ms  p99 %7.1f ms  %6.1f/s  errors %d" % (r.get("p50_us", 0) / 1e3,
      r.get("p99_us", 0) / 1e3, r["per_sec"], r["errors"] + r["warmup_errors"]))' \
			"$f.last" >&2
	fi
	if [ "$rc" != 0 ]; then
		err=$(grep -v '^$' "$f.err" | head -n 3 | tr '\n' ' ')
		[ -n "$(cat "$f.last")" ] || echo "FAILED (exit $rc): $err" >&2
		printf '%s\n' "round $round: ${err:-exit status $rc}" >>"$f.error"
		failed="$failed $mode.c$c"
	fi
}

# The order of the modes alternates (lib first, then last), so neither
# side always runs right after the other's sandboxes were torn down.
REVMODES=$(printf '%s\n' $MODES | tac | tr '\n' ' ')
UPTIME0=$(uptime)
T0=$(date +%s)
for round in $(seq 1 "$ROUNDS"); do
	order=$MODES
	[ $((round % 2)) = 1 ] || order=$REVMODES
	for c in $CONC; do
		for mode in $order; do
			run "$mode" "$c"
		done
	done
done
T1=$(date +%s)
UPTIME1=$(uptime)

# Nothing may be left: no live sandbox in the daemon, no sandbox cgroup.
LEFT=""
if kill -0 "$DPID" 2>/dev/null; then
	live=$(daemon_call health 2>/dev/null || echo "?")
	[ "$live" = 0 ] || LEFT="$LEFT warrend still has $live live sandboxes;"
	daemon_call metrics >"$OUT/metrics.txt" 2>/dev/null || true
else
	LEFT="$LEFT warrend died (log: $(tail -n 5 "$DLOG" | tr '\n' ' '));"
fi
# Stop the daemon now (it must exit 0 on SIGTERM); cleanup() does the rest.
DSTATUS=gone
if kill -0 "$DPID" 2>/dev/null; then
	kill -TERM "$DPID"
	DSTATUS=0
	wait "$DPID" || DSTATUS=$?
fi
DPID=""
[ "$DSTATUS" = 0 ] || LEFT="$LEFT warrend exited with status $DSTATUS on SIGTERM;"
# No cgroup may remain under either base once the daemon is gone (while it
# runs it holds <base>/bpf-anchor, src/daemon/hookwarm.c).
while read -r d; do
	n=$(find "$d" -mindepth 1 -type d | wc -l)
	[ "$n" = 0 ] || LEFT="$LEFT $n cgroups left under $d;"
done < <(find /sys/fs/cgroup -mindepth 2 -type d -name "$CG-*" -prune 2>/dev/null)
# At log_level warning the log holds only warnings and errors.
grep -v '^$' "$DLOG" | head -n 20 >"$OUT/daemon-log.txt" || true

# ---- report --------------------------------------------------------------
mkdir -p "$RESULTS"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
"$PY" - "$OUT" "$RESULTS" "$STAMP" "$ROOT/README.md" "$N" "$ROUNDS" "$BENCH_WARMUP" \
	"$CONC" "$MODES" "$((T1 - T0))" "$LEFT" "$UPTIME0" "$UPTIME1" "$PER_THREAD" <<'EOF'
import json, os, platform, sys, time
(out, results, stamp, readme, n, rounds, warmup, conc, modes, wall,
 left, uptime0, uptime1, per_thread) = sys.argv[1:]
sys.path.insert(0, os.path.join(os.path.dirname(readme), "bench"))
from reportlib import cpu_model, pct, replace_readme_section, version
conc = [int(c) for c in conc.split()]
modes = modes.split()

def load(mode, c):
    """Merge the rounds of one cell: raw samples (ns) and per-round JSON."""
    base = os.path.join(out, "%s.c%d" % (mode, c))
    r = {"mode": mode, "concurrency": c}
    try:
        with open(base + ".error") as f:
            r["error"] = f.read().strip()
    except OSError:
        pass
    runs = []
    try:
        with open(base + ".jsonl") as f:
            runs = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        pass
    raw = []
    try:
        with open(base + ".raw") as f:
            raw = [[int(x) for x in line.split()] for line in f if line.strip()]
    except (OSError, ValueError):
        pass
    r["rounds"] = len(runs)
    try:
        with open(base + ".load") as f:
            r["load1"] = [float(line.split()[1]) for line in f if line.strip()]
    except (OSError, ValueError, IndexError):
        r["load1"] = []
    r["errors"] = sum(x["errors"] for x in runs)
    r["warmup_errors"] = sum(x["warmup_errors"] for x in runs)
    firsts = [x["first_error"] for x in runs if x.get("first_error")]
    if firsts:
        r["first_error"] = firsts[0]
    if not raw or not runs:
        r.setdefault("error", "no result")
        return r
    tot = sorted(x[0] for x in raw)
    elapsed = sum(x["elapsed_s"] for x in runs)
    r.update({"n": len(tot), "p50_us": pct(tot, 50) / 1e3, "p99_us": pct(tot, 99) / 1e3,
              "mean_us": sum(tot) / len(tot) / 1e3, "min_us": tot[0] / 1e3,
              "max_us": tot[-1] / 1e3, "per_sec": len(tot) / elapsed if elapsed else None,
              "elapsed_s": elapsed,
              "rounds_p50_us": [x.get("p50_us") for x in runs],
              "rounds_per_sec": [x["per_sec"] for x in runs]})
    for i, name in ((1, "create"), (2, "exec"), (3, "destroy")):
        r[name + "_p50_us"] = pct(sorted(x[i] for x in raw), 50) / 1e3
    return r

cpu = cpu_model()
machine = {
    "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    "nproc": os.cpu_count(),
    "kernel": platform.release(),
    "cpu": cpu,
    "commit": version(["git", "-C", os.path.dirname(readme), "describe", "--always",
                       "--dirty"]),
    "loadavg": open("/proc/loadavg").read().split()[:3],
}
rows = {(m, c): load(m, c) for c in conc for m in modes}

# Ratios to lib at the same concurrency: p50 latency (api / lib) and
# throughput (lib per-sec / api per-sec), plus the paired estimate least
# moved by load: in every round, api's p50 over lib's p50 of the same round
# (they ran back to back); the median of those.
for (m, c), r in rows.items():
    lib = rows.get(("lib", c), {})
    if m == "lib" or "p50_us" not in r or "p50_us" not in lib:
        continue
    r["ratio_p50"] = r["p50_us"] / lib["p50_us"]
    r["ratio_p99"] = r["p99_us"] / lib["p99_us"]
    r["ratio_mean"] = r["mean_us"] / lib["mean_us"]
    if r.get("per_sec") and lib.get("per_sec"):
        r["ratio_per_sec"] = lib["per_sec"] / r["per_sec"]
    pr = sorted(a / b for a, b in zip(r["rounds_p50_us"], lib["rounds_p50_us"])
                if a and b)
    if pr:
        r["ratio_p50_rounds"] = pr
        r["ratio_p50_round_median"] = pr[(len(pr) - 1) // 2]
    ps = sorted(b / a for a, b in zip(r["rounds_per_sec"], lib["rounds_per_sec"]) if a and b)
    if ps:
        r["ratio_per_sec_rounds"] = ps

def fmt(v, nd=1, scale=1.0):
    return "n/a" if v is None else "%.*f" % (nd, v / scale)

def errcell(r):
    if not r["rounds"]:
        return "n/a"
    if r["warmup_errors"]:
        return "%d (+%d in warm-up)" % (r["errors"], r["warmup_errors"])
    return str(r["errors"])

hdr = ["mode", "concurrency", "p50 (ms)", "p99 (ms)", "mean (ms)", "per sec", "errors",
       "load (1 min)", "api/lib p50", "api/lib p99", "api/lib mean", "lib/api per sec"]

def ratio(r, k):
    if r["mode"] == "lib":
        return "-"
    v = r.get(k)
    return "n/a" if v is None else "%.2fx" % v

def loads(r):
    v = r.get("load1") or []
    return "%.1f-%.1f" % (min(v), max(v)) if v else "n/a"

table = ["| " + " | ".join(hdr) + " |",
         "|" + "|".join(["---", "---:"] + ["---:"] * (len(hdr) - 2)) + "|"]
for c in conc:
    for m in modes:
        r = rows[(m, c)]
        table.append("| " + " | ".join([
            m, str(c), fmt(r.get("p50_us"), 1, 1e3), fmt(r.get("p99_us"), 1, 1e3),
            fmt(r.get("mean_us"), 1, 1e3), fmt(r.get("per_sec")), errcell(r), loads(r),
            ratio(r, "ratio_p50"), ratio(r, "ratio_p99"), ratio(r, "ratio_mean"),
            ratio(r, "ratio_per_sec")]) + " |")

# Verdict on the documented client use (api: one shared client).
target = 1.3
errs = sum(r["errors"] + r["warmup_errors"] for r in rows.values())
bad = [r for r in rows.values() if "error" in r]
verdict = []
if "api" in modes and "lib" in modes:
    keys = (("ratio_per_sec", "throughput"), ("ratio_mean", "mean"), ("ratio_p50", "p50"),
            ("ratio_p99", "p99"))
    allok = True
    for c in conc:
        r = rows[("api", c)]
        parts, ok = [], True
        for k, name in keys:
            v = r.get(k)
            if v is None:
                parts.append("%s not measured" % name)
                ok = False
                continue
            parts.append("%s %.2fx %s" % (name, v, "met" if v <= target else "NOT met"))
            ok = ok and v <= target
        allok = allok and ok
        verdict.append("- x%d: %s: %s." % (c, "; ".join(parts), "met" if ok else "NOT met"))
    verdict.insert(0, "Target: API overhead <= %.1fx the library (shared client; throughput, "
                   "mean, p50 and p99 each) at every concurrency: %s." %
                   (target, "met" if allok else "NOT met"))
    verdict.insert(1, "")
verdict.append("")
verdict.append("Target: no error at any concurrency: %s."
               % ("met (0 errors)" if not errs and not bad
                  else "NOT met (%d failed cycles)" % errs))

notes = []
paired = ["%s x%d %s" % (m, c, ", ".join("%.2fx" % x for x in r["ratio_p50_rounds"]))
          for (m, c), r in rows.items() if "ratio_p50_rounds" in r]
if paired:
    notes.append("- api/lib p50 in each round (the two ran back to back; sorted): "
                 + "; ".join(paired))
paired = ["%s x%d %s" % (m, c, ", ".join("%.2fx" % x for x in r["ratio_per_sec_rounds"]))
          for (m, c), r in rows.items() if "ratio_per_sec_rounds" in r]
if paired:
    notes.append("- lib/api per sec in each round (sorted): " + "; ".join(paired))
# A closed loop (every thread starts its next cycle when one ends): by
# Little's law the mean cycle time is concurrency / throughput, so the mean
# ratio and the throughput ratio agree; p50 also depends on how the waiting
# is shared out (FIFO queues vs. the CPU scheduler).
little = []
for (m, c), r in rows.items():
    if r.get("per_sec") and r.get("mean_us"):
        little.append("%s x%d %.0f/%.0f ms" % (m, c, c / r["per_sec"] * 1e3, r["mean_us"] / 1e3))
if little:
    notes.append("- Little's law check, concurrency / throughput vs. measured mean: "
                 + "; ".join(little))
for r in rows.values():
    if r.get("p50_us") and r.get("mean_us") and r["concurrency"] > 1:
        r["p50_over_mean"] = r["p50_us"] / r["mean_us"]
shape = ["%s x%d %.2f" % (m, c, r["p50_over_mean"]) for (m, c), r in rows.items()
         if "p50_over_mean" in r]
if shape:
    notes.append("- p50 / mean (how the waiting is shared out): " + "; ".join(shape))
notes.append("- uptime before the runs: %s; after: %s" % (uptime0.strip(), uptime1.strip()))
notes.append("- daemon: spawners %s, admission %s (bench/README.md)"
             % (os.environ.get("BENCH_API_SPAWNERS") or "as shipped",
                os.environ.get("BENCH_API_ADMISSION") or "open"))
for c in conc:
    parts = []
    for m in modes:
        r = rows[(m, c)]
        if "create_p50_us" in r:
            parts.append("%s create %.1f / exec %.1f / %s %.1f" % (
                m, r["create_p50_us"] / 1e3, r["exec_p50_us"] / 1e3,
                "destroy" if m == "lib" else "kill", r["destroy_p50_us"] / 1e3))
    if parts:
        notes.append("- phases at x%d, p50 ms: %s" % (c, "; ".join(parts)))
for r in rows.values():
    if r.get("first_error"):
        notes.append("- %s x%d: FAILED: %d timed and %d warm-up cycles failed; the first: %s"
                     % (r["mode"], r["concurrency"], r["errors"], r["warmup_errors"],
                        r["first_error"].strip()))
    elif "error" in r:
        notes.append("- %s x%d: FAILED: %s" % (r["mode"], r["concurrency"],
                                                r["error"].replace("\n", " | ")))
metrics = {}
try:
    with open(os.path.join(out, "metrics.txt")) as f:
        for line in f:
            if line.startswith("warren_api_errors_total"):
                k, v = line.rsplit(None, 1)
                metrics[k] = float(v)
except OSError:
    pass
nonzero = {k: v for k, v in metrics.items() if v}
notes.append("- warrend /metrics after the runs: warren_api_errors_total %s"
             % (", ".join("%s = %g" % kv for kv in nonzero.items()) if nonzero
                else "all 0"))
try:
    with open(os.path.join(out, "daemon-log.txt")) as f:
        dlog = [l.rstrip() for l in f if l.strip()]
except OSError:
    dlog = []
if dlog:
    notes.append("- warrend logged (first %d warnings/errors): %s"
                 % (len(dlog), " | ".join(dlog)))
if left.strip():
    notes.append("- LEFT BEHIND / daemon: %s" % left.strip())

env_line = ("%s; %s CPUs; kernel %s; %s; commit %s; load average %s at the end; "
            "N=%s cycles per cell (at least %s per thread and round) in %s interleaved "
            "rounds (mode order alternating), %s warm-up cycle(s) per thread and round; image busybox.erofs; %s s of runs"
            % (machine["date"], machine["nproc"], machine["kernel"], machine["cpu"],
               machine["commit"], " ".join(machine["loadavg"]), n, per_thread, rounds, warmup,
               wall))
what = ["- lib: in-process, src/tiers/container.h: wr_container_create + "
        "wr_container_exec({\"true\"}) + wr_container_destroy, one thread per concurrent cycle",
        "- api: libwarren against warrend on its Unix socket: warren_sandbox_create + "
        "warren_sandbox_exec({\"true\"}) + warren_sandbox_kill; one warren_client shared by "
        "all threads (the documented use)",
        "- api-thread: the same with a warren_client per thread"]
what = [w for w in what if w.split(":")[0][2:] in modes]
md = ["# API overhead: create + exec `true` + kill, warrend vs. in-process", "",
      env_line, ""] + table + [""] + verdict + ["", "Modes:", ""] + what + [""]
md += ["Notes:", ""] + notes + [""]
md += ["Raw: api-%s.json. Method: bench/README.md." % stamp, ""]
with open(os.path.join(results, "api.md"), "w") as f:
    f.write("\n".join(md))
with open(os.path.join(results, "api-%s.json" % stamp), "w") as f:
    json.dump({"machine": machine, "n": int(n), "rounds": int(rounds), "warmup": int(warmup),
               "concurrency": conc, "image": "busybox.erofs", "wall_s": int(wall),
               "left_behind": left.strip(), "api_errors_metrics": metrics,
               "uptime_before": uptime0.strip(), "uptime_after": uptime1.strip(),
               "daemon_log": dlog, "results": list(rows.values())}, f, indent=1)
    f.write("\n")

start, end = "<!-- bench:api:start -->", "<!-- bench:api:end -->"
sec = [start, "### Benchmark: API overhead", "",
       "create + exec `true` + kill through warrend's API (libwarren, Unix socket) vs. the "
       "same cycle in-process through the library (`make bench`; method in "
       "[bench/README.md](bench/README.md), full results in "
       "[bench/results/api.md](bench/results/api.md)).", "",
       env_line, ""] + table + [""] + verdict + ["", end]
replace_readme_section(readme, start, end, "\n".join(sec), readme + ".bench-api.tmp")
print("bench-api: wrote %s, api-%s.json and the README section"
      % (os.path.join(results, "api.md"), stamp), file=sys.stderr)
for line in verdict:
    print("bench-api: " + line, file=sys.stderr)
EOF

if [ -n "$failed" ] || [ -n "$LEFT" ]; then
	echo "bench-api: failed:$failed${LEFT:+ (left behind:$LEFT)}" >&2
	exit 1
fi
