#!/bin/sh
# `make demo`: build the demo image and run a real job in a hardened
# sandbox: a small shell program that reports what it sees, hits its limits,
# and exits with a status that warren passes through.
set -eu
BUILD=${1:-build}
cd "$(dirname "$0")/.."
IMAGES=$BUILD/demo-images
scripts/mkimage.sh "$IMAGES" >/dev/null
W=$BUILD/warren

echo "== warren run: a job in a container sandbox (EROFS image, overlay, userns, seccomp, Landlock)"
set +e
"$W" run --image "$IMAGES/busybox.erofs" --memory 128M --pids 64 --disk 64M --timeout 30s \
	--hostname demo --env JOB=demo-1 -- sh -c '
echo "job $JOB on $(hostname) as uid $(id -u); PID 1 is $(cat /proc/1/comm)"
echo "capabilities: $(grep CapEff /proc/self/status | tr -s "\t" " ")"
echo "seccomp mode: $(grep ^Seccomp: /proc/self/status | tr -s "\t" " ")"
echo "host files visible? $(ls /work 2>&1 | head -1)"
echo "kernel memory maps: $(wc -c < /proc/kpagecgroup) bytes"
echo "writing 100 MiB to a 64 MiB disk: $(dd if=/dev/zero of=/tmp/big bs=1M count=100 2>&1 | tail -1)"
echo "network: $(ls /sys/class/net)"
exit 7'
rc=$?
set -e
echo "== the job exited with status $rc (warren passes it through)"
[ "$rc" = 7 ]
