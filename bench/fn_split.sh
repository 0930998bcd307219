#!/bin/bash
# Where the CPU time of a Python function call goes: `perf record -g` of
# bench_function (samples inherited by the pool's zygote, its slots and the
# calls), each sample given to the process it ran in (host: the benchmark
# and its refill thread; zygote; slot: the forked process from its fork to
# its exit, preparation and call) and to the first matching kernel path of
# its stack. Divided by the number of slots the zygote forked: CPU ms per
# call. Kernel workers (a network namespace's cleanup, RCU) are not the
# benchmark's descendants and are not counted.
#
#   bench/fn_split.sh BUILD_DIR [MODE]     MODE: python (default) or true
#
# Environment: FN_SPLIT_N (timed calls, default 100). Writes a Markdown
# table on stdout. Removes what it made on exit.
set -eu
BUILD=${1:?usage: bench/fn_split.sh BUILD_DIR [python|true]}
MODE=${2:-python}
cd "$(dirname "$0")/.."
ROOT=$PWD
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
N=${FN_SPLIT_N:-100}
WORK=$(mktemp -d -p /tmp warren-fn-split.$$.$(printf "X%.0s" 1 2 3 4 5 6))
chmod 0755 "$WORK"
CG_BASE=warren-fn-split-$$
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
case $MODE in
python) IMG=$("$ROOT/scripts/mkimage-python.sh" "$BUILD/bench-images") ;;
true)
	mapfile -t imgs < <("$ROOT/scripts/mkimage.sh" "$BUILD/bench-images")
	IMG=${imgs[1]}
	;;
*)
	echo "fn_split: unknown mode $MODE" >&2
	exit 2
	;;
esac
export WARREN_INIT=$BUILD/warren-init WARREN_ZYGOTE=${WARREN_ZYGOTE:-$BUILD/warren-zygote}
export WARREN_STATE_DIR=$WORK/state WARREN_RUN_DIR=$WORK/run WARREN_CGROUP_BASE=$CG_BASE
export BENCH_WARMUP=3
mkdir -p "$WORK/state" "$WORK/run"
perf record -q -g -F 4000 -o "$WORK/perf.data" -- \
	"$BUILD/bench/bench_function" "$MODE" "$N" 1 "$IMG" >/dev/null
perf script -i "$WORK/perf.data" --show-task-events -F comm,pid,tid,time,event,ip,sym 2>/dev/null |
	/usr/bin/python3 -c '
import collections, re, sys
data = sys.stdin.read()
forks = collections.Counter(m.group(2) for m in
                            re.finditer(r"PERF_RECORD_FORK\((\d+):\d+\):\((\d+):\d+\)", data))
zyg, nslots = forks.most_common(1)[0]
CATS = [("copy-on-write populate (madvise)", "__x64_sys_madvise"),
        ("page faults", "exc_page_fault"),
        ("fork", "kernel_clone"),
        ("exit", "do_exit"),
        ("namespaces (unshare, setns)", "_sys_unshare|_sys_setns"),
        ("mounts", "_sys_mount|_sys_fsconfig|_sys_fsmount|_sys_move_mount|_sys_fsopen"),
        ("cgroup files, mkdir, rmdir", "cgroup|_sys_mkdir|_sys_rmdir"),
        ("seccomp, Landlock", "_sys_seccomp|landlock"),
        ("other system calls", "entry_SYSCALL"),
        ("other kernel (interrupts, scheduler)", "kallsyms")]
hz = 4000.0
cnt = collections.defaultdict(collections.Counter)
for blk in data.split("\n\n"):
    m = re.search(r"^\s*(\S+)\s+(\d+)/?\d*\s+[\d.]+:\s+\S+:", blk, re.M)
    if not m or "PERF_RECORD" in blk.split("\n")[0]:
        continue
    comm, pid = m.groups()
    role = "host" if comm.startswith("bench") else ("zygote" if pid == zyg else "slot")
    cat = "user (interpreter, libc)"
    for name, pat in CATS:
        if re.search(pat, blk):
            cat = name
            break
    cnt[role][cat] += 1
print("| process | where | CPU ms/call |")
print("|---|---|---:|")
total = 0
for role in ("slot", "zygote", "host"):
    rt = sum(cnt[role].values())
    total += rt
    for cat, v in cnt[role].most_common():
        if v * 1e3 / hz / nslots >= 0.05:
            print("| %s | %s | %.2f |" % (role, cat, v * 1e3 / hz / nslots))
    print("| %s | **all** | **%.2f** |" % (role, rt * 1e3 / hz / nslots))
print("| all | **total** (%d calls, %d slots forked) | **%.2f** |" % (
    int(sys.argv[1]), nslots, total * 1e3 / hz / nslots))
' "$N"
