#!/bin/bash
# `make demo`: start warrend and run a real sandbox job through its API:
# create a sandbox from an EROFS image, copy a program in, run it with
# output streamed, read its result file back, then kill the sandbox and stop
# the daemon. Also shows the daemon-less one-shot `warren run`.
set -euo pipefail
BUILD=${1:-build}
cd "$(dirname "$0")/.."
ROOT=$PWD
IMAGES=$ROOT/$BUILD/demo-images
"$ROOT/scripts/mkimage.sh" "$IMAGES" >/dev/null
W=$ROOT/$BUILD/warren

DEMO=$(mktemp -d /tmp/warren-demo.XXXXXX)
chmod 755 "$DEMO"
DAEMON_PID=
cleanup() {
	if [ -n "$DAEMON_PID" ]; then
		kill -TERM "$DAEMON_PID" 2>/dev/null || true
		wait "$DAEMON_PID" 2>/dev/null || true
	fi
	rm -rf "$DEMO"
	# the daemon leaves its (empty) cgroup base behind: ours, remove it
	find /sys/fs/cgroup -depth -type d -name warren-demo -exec rmdir {} + 2>/dev/null || true
}
trap cleanup EXIT

cat >"$DEMO/warrend.json" <<JSON
{
  "socket": "$DEMO/warren.sock",
  "state_dir": "$DEMO/state",
  "run_dir": "$DEMO/run",
  "images": {"busybox": "$IMAGES/busybox.erofs"},
  "log_level": "warning"
}
JSON
export WARREN_SOCKET=$DEMO/warren.sock
echo "== starting warrend (socket $WARREN_SOCKET)"
WARREN_CGROUP_BASE=warren-demo "$ROOT/$BUILD/warrend" --config "$DEMO/warrend.json" &
DAEMON_PID=$!
for _ in $(seq 100); do
	[ -S "$WARREN_SOCKET" ] && break
	kill -0 "$DAEMON_PID" 2>/dev/null || { echo "demo: warrend failed to start" >&2; exit 1; }
	sleep 0.1
done

echo "== warren create: a container sandbox (userns, EROFS+overlay, cgroups, seccomp, Landlock)"
SB=$("$W" create --image busybox --memory 128M --pids 64 --disk 64M --timeout 5m --label demo=1)
echo "sandbox $SB"

cat >"$DEMO/job.sh" <<'JOB'
echo "job on $(hostname) as uid $(id -u); PID 1 is $(cat /proc/1/comm)"
echo "capabilities: $(grep CapEff /proc/self/status | tr -s '\t' ' ')"
echo "seccomp mode: $(grep ^Seccomp: /proc/self/status | tr -s '\t' ' ')"
echo "host files visible? $(ls /work 2>&1 | head -1)"
echo "kernel page maps: $(wc -c < /proc/kpagecgroup) bytes"
echo "writing 100 MiB to a 64 MiB disk: $(dd if=/dev/zero of=/tmp/big bs=1M count=100 2>&1 | head -1)"
rm -f /tmp/big
echo "network interfaces: $(ls /sys/class/net)"
echo "result: $((6 * 7))" > /tmp/result.txt
exit 7
JOB
"$W" cp "$DEMO/job.sh" "$SB:/tmp/job.sh"
echo "== warren exec (streams output, passes the exit status through)"
set +e
"$W" exec "$SB" -- sh /tmp/job.sh
rc=$?
set -e
echo "== the job exited with status $rc"
"$W" cp "$SB:/tmp/result.txt" "$DEMO/result.txt"
echo "== result file copied back: $(cat "$DEMO/result.txt")"
"$W" ls
"$W" rm "$SB"
echo "== sandbox $SB killed"

echo "== warren run: the same isolation in one shot, without the daemon"
"$W" run --image "$IMAGES/busybox.erofs" --memory 64M --timeout 10s -- sh -c 'echo "one-shot on $(hostname)"'
[ "$rc" = 7 ] && grep -q "result: 42" "$DEMO/result.txt"
echo "== demo finished"
