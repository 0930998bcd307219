#!/bin/bash
# The microVM tier (issue 9): cold boot to first exec, template restore to
# first exec, host memory per idle VM (RSS and PSS of QEMU), creates/s with
# templates at concurrency 2; side by side in one run with the container
# tier's create + exec true + destroy (bench_spawn warren) on the same
# EROFS image. Run by `make bench` after bench/run.sh.
#
#   bench/run_microvm.sh BUILD_DIR
#
# Environment: BENCH_MVM_COLD, BENCH_MVM_RESTORE, BENCH_MVM_IDLE,
# BENCH_MVM_PAR_N (bench/bench_microvm.c), BENCH_MVM_CT_N (container
# iterations per concurrency, default 40).
#
# Writes bench/results/microvm.md and bench/results/microvm-<UTC time>.json.
# Everything it creates (temp dirs, the template directory on /dev/shm,
# cgroups named after this run) is removed on exit, also on failure or ^C.
set -eu
set -o pipefail

BUILD=${1:?usage: bench/run_microvm.sh BUILD_DIR}
cd "$(dirname "$0")/.."
ROOT=$PWD
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
export PATH=$PATH:/usr/sbin:/sbin
PY=/usr/bin/python3
MVM=$BUILD/bench/bench_microvm
SPAWN=$BUILD/bench/bench_spawn
GUEST=$BUILD/tests/guest
RESULTS=$ROOT/bench/results
CT_N=${BENCH_MVM_CT_N:-40}

for f in "$MVM" "$SPAWN" "$GUEST/vmlinux" "$GUEST/initramfs.cpio"; do
	if [ ! -e "$f" ]; then
		echo "bench-microvm: $f not built (ninja -C $BUILD; the guest comes with the tests)" >&2
		exit 1
	fi
done

WORK=$(mktemp -d -p /tmp warren-bench-mvm.$$.$(printf "X%.0s" 1 2 3 4 5 6))
chmod 0755 "$WORK"
TDIR=/dev/shm/warren-bench-mvm-$$
CG_BASE=warren-bench-mvm-$$
cleanup() {
	local rc=$? d m
	trap - EXIT INT TERM HUP
	find /sys/fs/cgroup -mindepth 2 -type d -name "$CG_BASE" -prune 2>/dev/null |
		while read -r d; do
			find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null |
				while read -r m; do kill -KILL "$m" 2>/dev/null || true; done
			sleep 0.2
			find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
		done
	rm -rf --one-file-system "$WORK" "$TDIR"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

mapfile -t imgs < <("$ROOT/scripts/mkimage.sh" "$BUILD/bench-images")
EROFS=${imgs[1]}
mkdir -p "$WORK/state" "$WORK/run" "$WORK/ct-state" "$WORK/ct-run"

echo "bench-microvm: microVM tier (TCG unless /dev/kvm)" >&2
WARREN_STATE_DIR=$WORK/state WARREN_RUN_DIR=$WORK/run BENCH_MVM_TEMPLATES=$TDIR \
	"$MVM" "$GUEST/vmlinux" "$GUEST/initramfs.cpio" "$EROFS" >"$WORK/mvm.json"

echo "bench-microvm: container tier, same image" >&2
for p in 1 2; do
	WARREN_INIT=$BUILD/warren-init WARREN_ZYGOTE=$BUILD/warren-zygote \
		WARREN_STATE_DIR=$WORK/ct-state WARREN_RUN_DIR=$WORK/ct-run WARREN_CGROUP_BASE=$CG_BASE \
		"$SPAWN" warren "$CT_N" "$p" "$EROFS" >"$WORK/ct.p$p.json"
done

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
"$PY" - "$WORK" "$RESULTS" "$STAMP" "$(nproc)" "$(uname -r)" \
	"$(qemu-system-x86_64 --version | head -1)" <<'PYEOF'
import json, os, sys
work, results, stamp, ncpu, kernel, qemu = sys.argv[1:]
m = json.load(open(os.path.join(work, "mvm.json")))
ct = {p: json.load(open(os.path.join(work, f"ct.p{p}.json"))) for p in (1, 2)}
doc = {"microvm": m, "container": ct, "nproc": ncpu, "kernel": kernel, "qemu": qemu}
with open(os.path.join(results, f"microvm-{stamp}.json"), "w") as f:
    json.dump(doc, f, indent=1)
r, c = m["restore_ms"], m["cold_ms"]
lines = [
    "# MicroVM tier benchmark",
    "",
    f"Run {stamp} by `bench/run_microvm.sh` on a shared machine ({ncpu} cores, other "
    f"helpers' builds and tests running: absolute numbers are noisy), kernel {kernel}, "
    f"{qemu}, accelerator **{m['accel']}**. In-process (`bench/bench_microvm.c`); "
    "the container tier through `bench_spawn warren` on the same EROFS busybox image "
    "in the same run.",
    "",
    "| what | n | p50 | min | max |",
    "|---|---|---|---|---|",
    f"| microVM cold boot → first exec (ms) | {c['n']} | {c['p50']:.0f} | {c['min']:.0f} | {c['max']:.0f} |",
    f"| microVM first create of an image: template made + restored → first exec (ms) | 1 | {m['build_ms']:.0f} | | |",
    f"| **microVM template restore → first exec (ms)** (target ≤ 500) | {r['n']} | **{r['p50']:.0f}** | {r['min']:.0f} | {r['max']:.0f} |",
    f"| container create + exec true + destroy (ms) | {ct[1]['n']} | {ct[1]['p50_us']/1000:.1f} | {ct[1]['min_us']/1000:.1f} | {ct[1]['max_us']/1000:.1f} |",
    "",
    "| host memory per idle VM (QEMU, smaps_rollup) | n | RSS MiB | PSS MiB |",
    "|---|---|---|---|",
    f"| restored from a template (target PSS ≤ 64 MiB) | {m['idle_restored']['n']} | {m['idle_restored']['rss_kib']/1024:.0f} | **{m['idle_restored']['pss_kib']/1024:.0f}** |",
    f"| cold boot | 1 | {m['idle_cold']['rss_kib']/1024:.0f} | {m['idle_cold']['pss_kib']/1024:.0f} |",
    "",
    "| creates per second at concurrency 2 | n | per s |",
    "|---|---|---|",
    f"| microVM (restore + exec true + destroy) | {m['par2']['n']} | {m['par2']['per_sec']:.2f} |",
    f"| container (create + exec true + destroy) | {ct[2]['n']} | {ct[2]['per_sec']:.1f} |",
    "",
    "Guest RAM 256 MiB, 1 vCPU, 256 MiB writable disk. Restored VMs share the "
    "template's RAM file copy-on-write, hence PSS well under RSS. KVM: not "
    "measured (no /dev/kvm here).",
    "",
]
with open(os.path.join(results, "microvm.md"), "w") as f:
    f.write("\n".join(lines))
print("\n".join(lines))
PYEOF
