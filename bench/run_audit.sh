#!/bin/bash
# The refusal audit's hot path: what one refused syscall costs the refusing
# thread with no record (SECCOMP_RET_ERRNO), with a kernel audit record
# (SECCOMP_FILTER_FLAG_LOG, warren's choice) without and with a reader of
# the records, and with SECCOMP_RET_USER_NOTIF answered by a thread. Run by
# `make bench` after bench/run.sh; the choice is explained in
# docs/ARCHITECTURE.md ("Refusal audit").
#
#   bench/run_audit.sh BUILD_DIR
#
# Environment:
#   BENCH_AUDIT_N       refused calls per run (default 200000)
#   BENCH_AUDIT_ROUNDS  runs of every mode; the median is reported (default 5)
#
# Writes bench/results/audit.md and bench/results/audit-<UTC time>.json.
# Creates nothing outside bench/results (each mode is a child process).
set -eu
set -o pipefail

BUILD=${1:?usage: bench/run_audit.sh BUILD_DIR}
cd "$(dirname "$0")/.."
ROOT=$PWD
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
N=${BENCH_AUDIT_N:-200000}
ROUNDS=${BENCH_AUDIT_ROUNDS:-5}
BIN=$BUILD/bench/bench_audit
[ -x "$BIN" ] || { echo "bench: $BIN missing: run ninja -C $BUILD" >&2; exit 1; }
RAW=$(mktemp)
trap 'rm -f "$RAW"' EXIT
for _ in $(seq "$ROUNDS"); do
	"$BIN" "$N" >>"$RAW"
done
/usr/bin/python3 - "$RAW" "$ROOT/bench/results" "$N" "$ROUNDS" <<'PY'
import json, os, statistics, subprocess, sys, time
raw, results, n, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = [json.loads(l) for l in open(raw) if l.strip()]
modes = ["errno", "log", "log-reader", "user-notif"]
out = {}
for m in modes:
    r = [x for x in rows if x["mode"] == m]
    out[m] = {"refused_ns_p50": statistics.median(x["refused_ns"] for x in r),
              "allowed_ns_p50": statistics.median(x["allowed_ns"] for x in r),
              "received_min": min(x["received"] for x in r), "runs": len(r)}
stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
load = os.getloadavg()[0]
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                        text=True).stdout.strip()
meta = {"date": stamp, "n": n, "rounds": rounds, "loadavg_1m": load, "commit": commit,
        "kernel": os.uname().release, "cpus": os.cpu_count()}
with open(os.path.join(results, f"audit-{stamp}.json"), "w") as f:
    json.dump({"meta": meta, "modes": out, "raw": rows}, f, indent=1)
base = out["errno"]["refused_ns_p50"]
lines = ["# Refusal audit: the cost of a refused syscall", "",
         f"{n} refused keyctl(2) calls per run, median of {rounds} runs; "
         f"kernel {meta['kernel']}, {meta['cpus']} CPUs, load average {load:.1f} "
         f"when run (commit {commit}, {stamp}).", "",
         "| mode | refused call | vs errno | allowed call | records received |",
         "|---|---|---|---|---|"]
for m in modes:
    o = out[m]
    rec = "-" if o["received_min"] < 0 else f"{o['received_min']} / {n}"
    lines.append(f"| `{m}` | {o['refused_ns_p50'] / 1000:.2f} us | "
                 f"{o['refused_ns_p50'] / base:.1f}x | {o['allowed_ns_p50'] / 1000:.2f} us | {rec} |")
lines += ["", "`errno`: SECCOMP_RET_ERRNO, nothing recorded. `log`: + SECCOMP_FILTER_FLAG_LOG "
          "(an audit record per refusal; warren's choice), no reader. `log-reader`: the same "
          "with a thread reading NETLINK_AUDIT's read-log group, as warrend does. "
          "`user-notif`: SECCOMP_RET_USER_NOTIF answered with EPERM by a thread of the same "
          "process (warrend would answer from another process: a lower bound). Allowed calls "
          "cost the same in every mode: only refusals pay.", ""]
with open(os.path.join(results, "audit.md"), "w") as f:
    f.write("\n".join(lines))
print("\n".join(lines))
PY
