#!/bin/bash
# Per-call counts of the function tier and its baselines, from the kernel's
# counters rather than wall time (the machine is shared: counts do not move
# with load). For each mode it runs the same program twice under
# `perf stat` (counters inherited by every process and thread the program
# starts: the pool's zygote, its slots and the calls are its descendants),
# once with N1 and once with N2 timed iterations, and divides the
# difference by N2 - N1: the marginal cost of one call, without the pool's
# start, the warm-up and the exit.
#
#   bench/fn_counts.sh BUILD_DIR [MODE...]     (default: all modes)
#
# Modes: bare (fork+exec+wait of /bin/true), fn-true, python-c, py-fork
# (bench/bench_pyfork.py: a warm interpreter forking per call, no isolation),
# fn-python.
# Columns: page faults, system calls (raw_syscalls:sys_enter), context
# switches, CPU time (task-clock, ms) per call. Kernel work done in other
# threads (kworkers: netns and cgroup teardown) is not counted.
# Environment: FN_COUNTS_N1 (default 20), FN_COUNTS_N2 (default 120).
# Writes a Markdown table on stdout. Removes what it made on exit.
set -eu
BUILD=${1:?usage: bench/fn_counts.sh BUILD_DIR [MODE...]}
shift
cd "$(dirname "$0")/.."
ROOT=$PWD
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
MODES=${*:-bare fn-true python-c py-fork fn-python}
N1=${FN_COUNTS_N1:-20}
N2=${FN_COUNTS_N2:-120}
PY=/usr/bin/python3
WORK=$(mktemp -d -p /tmp warren-fn-counts.$$.$(printf "X%.0s" 1 2 3 4 5 6))
chmod 0755 "$WORK"
CG_BASE=warren-fn-counts-$$
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
EROFS=${imgs[1]}
PYIMG=$("$ROOT/scripts/mkimage-python.sh" "$BUILD/bench-images")
export WARREN_INIT=$BUILD/warren-init WARREN_ZYGOTE=${WARREN_ZYGOTE:-$BUILD/warren-zygote}
export WARREN_STATE_DIR=$WORK/state WARREN_RUN_DIR=$WORK/run WARREN_CGROUP_BASE=$CG_BASE
export BENCH_WARMUP=3
mkdir -p "$WORK/state" "$WORK/run"
EV=page-faults,raw_syscalls:sys_enter,context-switches,task-clock

# counts MODE N -> "faults syscalls cs ms" for one run
counts() {
	local mode=$1 n=$2
	local -a cmd
	case $mode in
	bare) cmd=("$BUILD/bench/bench_spawn" bare "$n" 1 -) ;;
	python-c) cmd=("$BUILD/bench/bench_spawn" cmd "$n" 1 - -- "$PY" -c 'print(sum(range(1000)))') ;;
	fn-true) cmd=("$BUILD/bench/bench_function" true "$n" 1 "$EROFS") ;;
	fn-python) cmd=("$BUILD/bench/bench_function" python "$n" 1 "$PYIMG") ;;
	py-fork) cmd=("$PY" "$ROOT/bench/bench_pyfork.py" "$n" 1) ;;
	*) echo "fn_counts: unknown mode $mode" >&2; exit 2 ;;
	esac
	perf stat -x, -e "$EV" -o "$WORK/stat" -- "${cmd[@]}" >/dev/null
	awk -F, '/page-faults/{f=$1} /sys_enter/{s=$1} /context-switches/{c=$1} /task-clock/{t=$1}
		END{print f, s, c, t}' "$WORK/stat"
}

echo "| mode | faults/call | syscalls/call | ctx switches/call | CPU ms/call |"
echo "|---|---:|---:|---:|---:|"
for m in $MODES; do
	read -r f1 s1 c1 t1 < <(counts "$m" "$N1")
	read -r f2 s2 c2 t2 < <(counts "$m" "$N2")
	awk -v m="$m" -v d=$((N2 - N1)) -v f1="$f1" -v f2="$f2" -v s1="$s1" -v s2="$s2" \
		-v c1="$c1" -v c2="$c2" -v t1="$t1" -v t2="$t2" 'BEGIN{
		printf "| %s | %.0f | %.0f | %.1f | %.2f |\n", m, (f2-f1)/d, (s2-s1)/d, (c2-c1)/d, (t2-t1)/d }'
done
