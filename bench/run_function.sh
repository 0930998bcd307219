#!/bin/bash
# The function tier: per-second and p50/p99 of (a) `/bin/true` calls and
# (b) a Python `print(sum(range(1000)))` call on a warm pool, at concurrency
# 1 and 2, side by side in one run with a bare fork+exec+wait of /bin/true,
# `python3 -c` of the same code on the host, a bare fork of a warm
# interpreter running it (py-fork: the floor of any fork-per-call design,
# bench/bench_pyfork.py), and the container tier's create+exec+destroy. Run by `make bench` after bench/run.sh; method in
# bench/README.md ("Function tier").
#
#   bench/run_function.sh BUILD_DIR
#
# Environment:
#   BENCH_FN_N       timed iterations per mode and concurrency (default 300)
#   BENCH_FN_ROUNDS  interleaved rounds the N are split into (default 10)
#   BENCH_FN_WARMUP  untimed iterations per worker and round (default 3)
#   BENCH_FN_MODES   subset of: bare bare-img fn-true python-c py-fork fn-python
#                    fn-python-full container
#   BENCH_FN_GAP_MS  fn-python-full's untimed pause before each call (default 200)
#   BENCH_FN_COUNTS  0: skip the counts per call (bench/fn_counts.sh) that
#                    are otherwise appended to function.md
#   BENCH_FN_SPLIT   0: skip the CPU split of a Python call (bench/fn_split.sh)
#                    that is otherwise appended to function.md
#
# Writes bench/results/function.md, bench/results/function-<UTC time>.json
# and the README.md section between the bench:function markers. Everything
# it creates (temp dirs, cgroups named after this run, pools' processes) is
# removed on exit, also on failure or ^C.
set -eu
set -o pipefail

BUILD=${1:?usage: bench/run_function.sh BUILD_DIR}
cd "$(dirname "$0")/.."
ROOT=$PWD
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
export PATH=$PATH:/usr/sbin:/sbin

N=${BENCH_FN_N:-300}
ROUNDS=${BENCH_FN_ROUNDS:-10}
MODES=${BENCH_FN_MODES:-bare bare-img fn-true python-c py-fork fn-python fn-python-full container}
export BENCH_WARMUP=${BENCH_FN_WARMUP:-3}
PY=/usr/bin/python3
SPAWN=$BUILD/bench/bench_spawn
FN=$BUILD/bench/bench_function
RESULTS=$ROOT/bench/results
CODE='print(sum(range(1000)))'

for f in "$SPAWN" "$FN" "$BUILD/warren-init" "$BUILD/warren-zygote"; do
	if [ ! -x "$f" ]; then
		echo "bench-function: $f not built (ninja -C $BUILD)" >&2
		exit 1
	fi
done
if [ "$(id -u)" != 0 ]; then
	echo "bench-function: needs root (namespaces, cgroups)" >&2
	exit 1
fi

WORK=$(mktemp -d -p /tmp warren-bench-fn.$$.$(printf "X%.0s" 1 2 3 4 5 6))
chmod 0755 "$WORK"
CG_BASE=warren-bench-fn-$$

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

cleanup() {
	local rc=$?
	trap - EXIT INT TERM HUP
	bench_reap_cgroups -name "$CG_BASE"
	rm -rf --one-file-system "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

mapfile -t imgs < <("$ROOT/scripts/mkimage.sh" "$BUILD/bench-images")
ROOTFS=${imgs[0]}
EROFS=${imgs[1]}
PYIMG=$("$ROOT/scripts/mkimage-python.sh" "$BUILD/bench-images")

export WARREN_INIT=$BUILD/warren-init WARREN_ZYGOTE=$BUILD/warren-zygote
export WARREN_STATE_DIR=$WORK/state WARREN_RUN_DIR=$WORK/run WARREN_CGROUP_BASE=$CG_BASE
mkdir -p "$WORK/state" "$WORK/run"

OUT=$WORK/out
mkdir -p "$OUT"
PER=$(((N + ROUNDS - 1) / ROUNDS))
[ "$PER" -ge 2 ] || PER=2
failed=""

# run LABEL PAR CMD...: one invocation, samples appended to LABEL.pPAR.raw
run() {
	local label=$1 par=$2 f err
	shift 2
	f=$OUT/$label.p$par
	case " $failed " in *" $label "*) return 0 ;; esac
	printf 'bench-function: round %s/%s %-10s x%s n=%-4s ' "$round" "$ROUNDS" "$label" "$par" \
		"$PER" >&2
	if BENCH_RAW=$f.raw "$@" >"$f.last" 2>"$f.err"; then
		cat "$f.last" >>"$f.jsonl"
		"$PY" -c 'import json,sys; r=json.load(open(sys.argv[1]));
print("p50 %8.0f us  p99 %8.0f us  %7.1f/s" % (r["p50_us"], r["p99_us"], r["per_sec"]))' \
			"$f.last" >&2
	else
		err=$(grep -v '^$' "$f.err" | tail -n 3 | tr '\n' ' ')
		echo "FAILED: $err" >&2
		printf '%s\n' "${err:-failed}" >"$f.error"
		failed="$failed $label"
	fi
}

for round in $(seq 1 "$ROUNDS"); do
	uptime >>"$OUT/uptime" # the machine's load next to every round
	for mode in $MODES; do
		for p in 1 2; do
			case $mode in
			bare) run bare "$p" "$SPAWN" bare "$PER" "$p" - ;;
			bare-img) run bare-img "$p" "$SPAWN" bare-img "$PER" "$p" "$ROOTFS" ;;
			fn-true) run fn-true "$p" "$FN" true "$PER" "$p" "$EROFS" ;;
			python-c) run python-c "$p" "$SPAWN" cmd "$PER" "$p" - -- "$PY" -c "$CODE" ;;
			py-fork) run py-fork "$p" "$PY" "$ROOT/bench/bench_pyfork.py" "$PER" "$p" ;;
			fn-python) run fn-python "$p" "$FN" python "$PER" "$p" "$PYIMG" ;;
			fn-python-full)
				run fn-python-full "$p" env BENCH_GAP_MS="${BENCH_FN_GAP_MS:-200}" "$FN" python \
					"$PER" "$p" "$PYIMG"
				;;
			container) run container "$p" "$SPAWN" warren "$PER" "$p" "$EROFS" ;;
			*)
				echo "bench-function: unknown mode '$mode'" >&2
				exit 2
				;;
			esac
		done
	done
done

mkdir -p "$RESULTS"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
"$PY" "$ROOT/bench/report_function.py" "$OUT" "$RESULTS" "$STAMP" "$ROOT/README.md" "$N" \
	"$ROUNDS" "$BENCH_WARMUP" "$MODES"
if [ "${BENCH_FN_COUNTS:-1}" != 0 ]; then
	# Counts per call, from the kernel's counters: they do not move with the
	# machine's load the way wall times do (method: bench/README.md).
	counts=$("$ROOT/bench/fn_counts.sh" "$BUILD" bare fn-true python-c py-fork fn-python) || {
		echo "bench-function: counts failed" >&2
		failed="$failed counts"
	}
	{
		echo
		echo "Counts per call (bench/fn_counts.sh, perf stat, marginal cost of one call):"
		echo
		printf '%s\n' "$counts"
	} >>"$RESULTS/function.md"
fi
if [ "${BENCH_FN_SPLIT:-1}" != 0 ]; then
	# Where a Python call's CPU time goes, per process and kernel path.
	split=$("$ROOT/bench/fn_split.sh" "$BUILD" python) || {
		echo "bench-function: split failed" >&2
		failed="$failed split"
	}
	{
		echo
		echo "CPU time of one Python call by process and path (bench/fn_split.sh, perf record, load $(cut -d' ' -f1-3 /proc/loadavg)):"
		echo
		printf '%s\n' "$split"
	} >>"$RESULTS/function.md"
fi
if [ -n "$failed" ]; then
	echo "bench-function: failed:$failed" >&2
	exit 1
fi
