#!/bin/bash
# Run every test: format check, unit tests (ASan+UBSan build), then the
# integration, red-team and end-to-end suites (pytest, as root) against the
# same build. Prints one closing "N passed, N failed" line over all suites.
#   scripts/test.sh BUILD_DIR [suite...]   suites: format unit integration redteam e2e
set -uo pipefail
BUILD=${1:?usage: test.sh BUILD_DIR [suite...]}
shift
SUITES=${*:-format unit integration redteam e2e}
cd "$(dirname "$0")/.."
ROOT=$PWD
export WARREN_BUILD=$ROOT/$BUILD
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
PY=/usr/bin/python3
passed=0
failed=0
failed_names=()

count() { # name rc npass nfail
	passed=$((passed + $3))
	failed=$((failed + $4))
	if [ "$2" != 0 ] && [ "$4" = 0 ]; then
		failed=$((failed + 1))
	fi
	[ "$2" != 0 ] && failed_names+=("$1")
}

for s in $SUITES; do
	case $s in
	format)
		if scripts/format-check.sh; then count format 0 1 0; else count format 1 0 1; fi
		;;
	unit)
		log=$(mktemp)
		meson test -C "$BUILD" --suite unit --print-errorlogs 2>&1 | tee "$log"
		rc=${PIPESTATUS[0]}
		ok=$(sed -n 's/^Ok: *\([0-9]*\).*/\1/p' "$log" | tail -1)
		ko=$(sed -n 's/^Fail: *\([0-9]*\).*/\1/p' "$log" | tail -1)
		count unit "$rc" "${ok:-0}" "${ko:-0}"
		rm -f "$log"
		;;
	integration | redteam | e2e)
		dir=tests/$s
		if ! ls "$dir"/test_*.py >/dev/null 2>&1; then
			continue
		fi
		log=$(mktemp)
		$PY -m pytest -q -p no:cacheprovider "$dir" 2>&1 | tee "$log"
		rc=${PIPESTATUS[0]}
		line=$(grep -E '^[=]* *[0-9]+ (passed|failed)' "$log" | tail -1)
		ok=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+')
		ko=$(echo "$line" | grep -oE '[0-9]+ (failed|error)' | awk '{s+=$1} END {print s+0}')
		count "$s" "$rc" "${ok:-0}" "${ko:-0}"
		rm -f "$log"
		;;
	*)
		echo "test.sh: unknown suite '$s'" >&2
		exit 2
		;;
	esac
done

echo
[ ${#failed_names[@]} -gt 0 ] && echo "failing suites: ${failed_names[*]}"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
