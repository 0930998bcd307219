#!/bin/bash
# Networked sandboxes from the pool vs offline ones: "create + exec
# /bin/true + destroy" with the container tier, in-process (bench_net.c).
# Run by `make bench` after bench/run.sh's container part; see
# bench/README.md for the method. Target: networked <= 1.2x offline (p50).
#
#   bench/run_net.sh BUILD_DIR
#
# Environment:
#   BENCH_NET_N       timed cycles per mode (default 300)
#   BENCH_NET_ROUNDS  interleaved rounds (default 10)
#   BENCH_NET_POOL    pool size (default 32)
#
# bench_net works in a network namespace of its own (bridge, veths and pool
# namespaces die with it). Writes bench/results/net_pool.md and
# bench/results/net_pool-<UTC time>.json. Its temp dir and cgroups are
# removed on exit, also on failure or ^C.
set -eu
set -o pipefail

BUILD=${1:?usage: bench/run_net.sh BUILD_DIR}
cd "$(dirname "$0")/.."
ROOT=$PWD
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
N=${BENCH_NET_N:-300}
ROUNDS=${BENCH_NET_ROUNDS:-10}
BIN=$BUILD/bench/bench_net
RESULTS=$ROOT/bench/results
IMAGE=
for d in "$BUILD/tests/test-images" "$BUILD/test-images"; do
	[ -e "$d/busybox.erofs" ] && IMAGE=$d/busybox.erofs && break
done
if [ ! -x "$BIN" ] || [ -z "$IMAGE" ]; then
	echo "bench: $BIN or the test images are not built (ninja -C $BUILD)" >&2
	exit 1
fi
if [ "$(id -u)" != 0 ]; then
	echo "bench: needs root (namespaces, cgroups, bridges)" >&2
	exit 1
fi

WORK=$(mktemp -d "/tmp/warren-bench-net.$(printf 'X%.0s' 1 2 3 4 5 6)")
chmod 0755 "$WORK"
CG_BASE=warren-bench-net-$$
cleanup() {
	local rc=$?
	trap - EXIT INT TERM HUP
	find /sys/fs/cgroup -mindepth 2 -depth -type d -path "*/$CG_BASE*" \
		-exec rmdir {} \; 2>/dev/null || true
	rm -rf "$WORK"
	exit $rc
}
trap cleanup EXIT INT TERM HUP

OUT=$WORK/out.json
env "WARREN_INIT=$BUILD/warren-init" "WARREN_STATE_DIR=$WORK/state" \
	"WARREN_RUN_DIR=$WORK/run" "WARREN_CGROUP_BASE=$CG_BASE" \
	"$BIN" "$N" "$ROUNDS" "$IMAGE" >"$OUT"

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$RESULTS"
cp "$OUT" "$RESULTS/net_pool-$STAMP.json"
/usr/bin/python3 - "$OUT" "$RESULTS/net_pool.md" "$N" "$ROUNDS" <<'EOF'
import json, os, sys
r = json.load(open(sys.argv[1]))
off, on = r["offline"], r["networked"]
ratio = r["ratio_p50"]
verdict = "met" if ratio <= 1.2 else "NOT met"
lines = [
    "# Networked sandboxes from the pool vs offline ones",
    "",
    f"create + exec /bin/true + destroy, container tier in-process, busybox EROFS image; "
    f"{sys.argv[3]} cycles per mode in {sys.argv[4]} interleaved rounds; pool of "
    f"{r['pool_size']} namespaces (takes that found none ready: {r['pool_waits']}). "
    f"{os.cpu_count()} CPUs, shared with other work (load average "
    f"{os.getloadavg()[0]:.1f} at the end of the run).",
    "",
    "| mode | p50 ms | p90 ms | mean ms |",
    "|---|---|---|---|",
    f"| offline (private netns, loopback) | {off['p50_ms']:.2f} | {off['p90_ms']:.2f} | {off['mean_ms']:.2f} |",
    f"| networked (pool netns, veth, NAT) | {on['p50_ms']:.2f} | {on['p90_ms']:.2f} | {on['mean_ms']:.2f} |",
    "",
    f"Ratio of the p50s: **{ratio:.2f}x** (target <= 1.2x: {verdict}).",
    "",
    "Networked cycles include taking a ready namespace, entering it for the",
    "clone of PID 1, attaching its sysfs and writing /etc/resolv.conf and",
    "/etc/hosts; offline cycles include PID 1's unshare of its own namespace.",
    "The pool's refill and teardown threads run during the timed cycles.",
]
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
