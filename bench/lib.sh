# Shell functions shared by bench/run.sh, run_api.sh and run_function.sh (sourced).

# bench_reap_cgroups FIND-TEST...: every cgroup below /sys/fs/cgroup that
# the find tests select (e.g. -name "x-*"): kill what runs in it, then
# remove it with everything beneath.
bench_reap_cgroups() {
	local d m
	find /sys/fs/cgroup -mindepth 2 -type d \( "$@" \) -prune 2>/dev/null |
		while read -r d; do
			find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null |
				while read -r m; do
					kill -KILL "$m" 2>/dev/null || true
				done
			sleep 0.1
			find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
		done
}

# bench_remove_work DIR: detach every mount below DIR (deepest first), then
# remove DIR without crossing into another filesystem.
bench_remove_work() {
	local m
	awk -v w="$1/" 'index($5, w) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
		while read -r m; do
			umount -l "$m" 2>/dev/null || true
		done
	rm -rf --one-file-system "$1"
}
