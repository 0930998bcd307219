#!/bin/bash
# A quick side-by-side of some function-tier modes, for working on the tier:
# ROUNDS interleaved rounds of N iterations of each mode at concurrency PAR,
# the p50 of each round and the median over rounds of each mode's p50 over
# the first mode's p50 of the same round (paired ratios: the machine is
# shared). Writes nothing to bench/results (bench/run_function.sh does).
#
#   bench/fn_quick.sh BUILD_DIR [MODE...]    (default: bare bare-img fn-true)
#
# Modes as in bench/run_function.sh: bare bare-img fn-true python-c py-fork
# fn-python fn-python-full (a Python call on a full pool: an untimed
# FN_QUICK_GAP_MS pause, default 200, before each call), and true@DIR,
# python@DIR, python-full@DIR: fn-true, fn-python, fn-python-full with the
# bench_function and zygote of another build DIR (e.g. a copy of main's
# build), for a paired before/after in one run (the Python zygote's source
# is built into the library). Environment: FN_QUICK_N (default 100),
# FN_QUICK_ROUNDS (5), FN_QUICK_PAR (1); WARREN_FN_PHASES=1: each fn-true
# or fn-python run prints where its calls' time went. Removes what it made on exit.
set -eu
BUILD=${1:?usage: bench/fn_quick.sh BUILD_DIR [MODE...]}
shift
cd "$(dirname "$0")/.."
ROOT=$PWD
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
MODES=${*:-bare bare-img fn-true}
N=${FN_QUICK_N:-100}
ROUNDS=${FN_QUICK_ROUNDS:-5}
PAR=${FN_QUICK_PAR:-1}
PY=/usr/bin/python3
WORK=$(mktemp -d -p /tmp warren-fn-quick.$$.$(printf "X%.0s" 1 2 3 4 5 6))
chmod 0755 "$WORK"
CG_BASE=warren-fn-quick-$$
cleanup() {
	local rc=$?
	trap - EXIT INT TERM HUP
	find /sys/fs/cgroup -mindepth 2 -type d -name "$CG_BASE" -prune 2>/dev/null |
		while read -r d; do find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true; done
	rm -rf --one-file-system "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
mapfile -t imgs < <("$ROOT/scripts/mkimage.sh" "$BUILD/bench-images")
ROOTFS=${imgs[0]}
EROFS=${imgs[1]}
GAP=${FN_QUICK_GAP_MS:-200}
case " $MODES " in *" fn-python"* | *" python"*) PYIMG=$("$ROOT/scripts/mkimage-python.sh" "$BUILD/bench-images") ;; esac
export WARREN_INIT=$BUILD/warren-init WARREN_ZYGOTE=${WARREN_ZYGOTE:-$BUILD/warren-zygote}
export WARREN_STATE_DIR=$WORK/state WARREN_RUN_DIR=$WORK/run WARREN_CGROUP_BASE=$CG_BASE
export BENCH_WARMUP=3
mkdir -p "$WORK/state" "$WORK/run"

for r in $(seq 1 "$ROUNDS"); do
	echo "round $r: $(uptime)" >&2
	for m in $MODES; do
		case $m in
		bare) cmd=("$BUILD/bench/bench_spawn" bare "$N" "$PAR" -) ;;
		bare-img) cmd=("$BUILD/bench/bench_spawn" bare-img "$N" "$PAR" "$ROOTFS") ;;
		python-c) cmd=("$BUILD/bench/bench_spawn" cmd "$N" "$PAR" - -- "$PY" -c 'print(sum(range(1000)))') ;;
		fn-true) cmd=("$BUILD/bench/bench_function" true "$N" "$PAR" "$EROFS") ;;
		true@*)
			B=${m#true@}
			cmd=(env WARREN_ZYGOTE="$B/warren-zygote" WARREN_INIT="$B/warren-init"
				"$B/bench/bench_function" true "$N" "$PAR" "$EROFS")
			;;
		fn-python) cmd=("$BUILD/bench/bench_function" python "$N" "$PAR" "$PYIMG") ;;
		fn-python-full) cmd=(env BENCH_GAP_MS="$GAP" "$BUILD/bench/bench_function" python "$N" "$PAR" "$PYIMG") ;;
		python@* | python-full@*)
			B=${m#*@}
			gap=0
			case $m in python-full@*) gap=$GAP ;; esac
			cmd=(env BENCH_GAP_MS="$gap" WARREN_ZYGOTE="$B/warren-zygote" WARREN_INIT="$B/warren-init"
				"$B/bench/bench_function" python "$N" "$PAR" "$PYIMG")
			;;
		py-fork) cmd=("$PY" "$ROOT/bench/bench_pyfork.py" "$N" "$PAR") ;;
		*) echo "fn_quick: unknown mode $m" >&2; exit 2 ;;
		esac
		p50=$("${cmd[@]}" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["p50_us"])')
		echo "$r $m $p50" >>"$WORK/p50"
		printf '  %-10s p50 %8.0f us\n' "$m" "$p50" >&2
	done
done
"$PY" - "$WORK/p50" $MODES <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
modes = sys.argv[2:]
by = {}
for r, m, v in rows:
    by.setdefault(r, {})[m] = float(v)
base = modes[0]
for m in modes:
    vals = [d[m] for d in by.values() if m in d]
    ratios = [d[m] / d[base] for d in by.values() if m in d and base in d]
    print("%-10s p50 median %8.0f us   /%s paired %.2fx (%.2f-%.2f)" % (
        m, statistics.median(vals), base, statistics.median(ratios), min(ratios), max(ratios)))
EOF
