#!/bin/sh
# Fails (listing the files) when any tracked C source differs from
# clang-format's output.
set -eu
bad=""
for f in $(git ls-files '*.c' '*.h'); do
	if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
		bad="$bad $f"
	fi
done
if [ -n "$bad" ]; then
	echo "format-check: not clang-formatted (run 'make format'):$bad" >&2
	exit 1
fi
echo "format-check: ok"
