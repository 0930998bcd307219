#!/bin/sh
# What cgroup v1 gives to reclaim the memory of a live (idle) cgroup: a
# process in a fresh memory cgroup of its own reads 48 MiB of a file (page
# cache charged to it) and sleeps; then memory.soft_limit_in_bytes = 0 (what
# warrend sets on idle sandboxes on v1) and memory.force_empty are tried.
# Root; removes what it made, also on failure. bench/results/lifecycle.md
# "v1 reclaim".
set -u
M=/sys/fs/cgroup/memory$(grep ':memory:' /proc/self/cgroup | cut -d: -f3)/hv-v1rec-$$
F=/var/tmp/hv-v1rec-$$
KID=
cleanup() {
	[ -n "$KID" ] && kill "$KID" 2>/dev/null && wait "$KID" 2>/dev/null
	sleep 0.3
	rmdir "$M" 2>/dev/null
	rm -f "$F"
}
trap cleanup EXIT INT TERM
mkdir "$M" || exit 1
dd if=/dev/urandom of="$F" bs=1M count=48 conv=fsync status=none
python3 -c "import os; fd=os.open('$F', os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)"
sh -c "echo \$\$ > '$M/cgroup.procs'; cat '$F' > /dev/null; exec sleep 60" &
KID=$!
sleep 2
st() {
	grep -E "^(total_cache|total_rss) " "$M/memory.stat" | tr '\n' ' '
	echo "usage $(cat "$M/memory.usage_in_bytes")"
}
echo "before:        $(st)"
echo 0 >"$M/memory.soft_limit_in_bytes"
sleep 2
echo "soft limit 0:  $(st)"
t0=$(date +%s%N)
rc=0
echo 0 >"$M/memory.force_empty" || rc=1
t1=$(date +%s%N)
echo "force_empty:   rc=$rc $(((t1 - t0) / 1000)) us; $(st)"
kill -0 "$KID" && echo "process alive after force_empty"
