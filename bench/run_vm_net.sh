#!/bin/bash
# The VM tiers' network cost next to the container tier's (bench/bench_vm_net.py):
#   bench/run_vm_net.sh BUILD_DIR
# It runs on tests/e2e's networked node (netnode.py: namespaces of this run
# only), so it is driven by pytest with the e2e conftest as a plugin.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
cd "$ROOT"
WARREN_BUILD=$BUILD PYTHONPATH=$ROOT/tests/e2e /usr/bin/python3 -m pytest -q -s \
	-p no:cacheprovider "$ROOT/bench/bench_vm_net.py"
