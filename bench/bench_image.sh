#!/bin/bash
# Image distribution: time to first exec and bytes fetched, a lazily pulled
# image (warren-lazyfs) vs a full pull, from a docker-registry on loopback;
# and 20 sandboxes starting from the same cold image at once. Run by
# `make bench` after bench/run.sh; method in bench/bench_image.py.
#
#   bench/bench_image.sh BUILD_DIR
#
# Environment:
#   BENCH_IMAGE_MB      size of the generated image (default 1100 MiB)
#   BENCH_IMAGE_TRIALS  trials of each mode, medians reported (default 3)
#   BENCH_IMAGE_PAR     sandboxes started at once (default 20)
#
# Writes bench/results/images.md, bench/results/images-<UTC time>.json and
# the section of README.md between the bench:images markers. Everything it
# starts (registry, daemons, lazyfs, mounts, the temp dir) is removed on
# exit, also on failure.
set -eu
BUILD=${1:?usage: bench/bench_image.sh BUILD_DIR}
cd "$(dirname "$0")/.."
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
export PATH=$PATH:/usr/sbin:/sbin
for f in warrend warren-lazyfs warren-init tests/wr-lazytool tests/test-images/busybox; do
	if [ ! -e "$BUILD/$f" ]; then
		echo "bench-image: $BUILD/$f not built (ninja -C $BUILD)" >&2
		exit 1
	fi
done
if [ ! -x /usr/bin/docker-registry ]; then
	echo "bench-image: /usr/bin/docker-registry missing (scripts/deps.sh)" >&2
	exit 1
fi
exec /usr/bin/python3 bench/bench_image.py "$BUILD"
