#!/bin/bash
# The vm tier (issue 10): boot to ready, restore to ready from a snapshot
# (both tiers), host memory per idle VM (RSS and PSS of
# QEMU), side by side with the microVM tier in one run of one warrend
# (bench/bench_vm.py). Run by `make bench`-style invocations by hand: a TCG
# boot of a whole Debian takes minutes.
#
#   bench/run_vm.sh BUILD_DIR
#
# Environment: BENCH_VM_N, BENCH_VM_MVM_N, BENCH_VM_IDLE, BENCH_VM_RESTORE_N,
# BENCH_VM_MEMORY_MB (see bench/bench_vm.py).
#
# Writes bench/results/vm.md and bench/results/vm-<UTC time>.json. The
# daemon's state, its VMs and the template directory are removed at the end
# (bench_vm.py), also on failure.
set -eu
set -o pipefail
BUILD=${1:?usage: bench/run_vm.sh BUILD_DIR}
cd "$(dirname "$0")/.."
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
TS=$(date -u +%Y%m%dT%H%M%SZ)
exec /usr/bin/python3 bench/bench_vm.py "$BUILD" "bench/results/vm-$TS.json" bench/results/vm.md
