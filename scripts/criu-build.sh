#!/bin/sh
# Build the CRIU warrend checkpoints container sandboxes with (pause with
# keep_memory=false), cached in the build directory:
#   scripts/criu-build.sh BUILD_DIR      -> BUILD_DIR/warren-criu
#
# Why not Debian 12's criu package: its 3.17.1 cannot start on kernels from
# 6.13 on (this node runs 6.18): the kernel split the vvar mapping in two
# ([vvar] and [vvar_vclock]) and 3.17's vDSO parser refuses the layout
# ("Unexpected rt vDSO area bounds"; CRIU issue 2532, fixed by "vdso: handle
# vvar_vclock vma-s", in CRIU 4.1). Debian's 3.17.1 source tarball is not
# served by the archive any more, so we build the source Debian ships in
# trixie (criu_4.1.1.orig.tar.xz from Debian's pool, checked against the
# SHA-256 of Debian's Sources index below) with Debian 12's build
# dependencies. Only the criu binary is built (no docs, no plugins, no
# Python), with warren's patches (scripts/criu-patches/*.patch, applied in
# order; each says why). See docs/API-LIFECYCLE.md, "Checkpoint with CRIU".
#
# Never fails the build: when CRIU cannot be had (no network, a build
# error) it says so in one line and leaves no binary; warrend then reports
# checkpointing unavailable and refuses keep_memory=false with the reason.
set -u
BUILD=${1:?usage: criu-build.sh BUILD_DIR}
VER=4.1.1
SHA=f80a66cb3726bb2116266d4759ce3bcbfab7abdb6b6d430bf20dd41911717afe
URL=http://deb.debian.org/debian/pool/main/c/criu/criu_$VER.orig.tar.xz
OUT=$BUILD/warren-criu
STAMP=$BUILD/warren-criu.version
PATCHES=$(dirname "$0")/criu-patches
# The version with the patches' digest: a changed patch rebuilds.
STAMPVER="$VER+$(cat "$PATCHES"/*.patch 2>/dev/null | sha256sum | cut -c1-12)"
DEPS="libbsd-dev libcap-dev libnet1-dev libnl-3-dev libprotobuf-c-dev libprotobuf-dev
protobuf-c-compiler protobuf-compiler pkg-config libnftables-dev libgnutls28-dev xz-utils curl make gcc patch"

if [ -x "$OUT" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$STAMPVER" ]; then
	exit 0
fi
mkdir -p "$BUILD" || exit 0
log=$BUILD/warren-criu.log
fail() {
	echo "criu-build: $1 (log: $log); checkpointing (keep_memory=false) stays off" >&2
	exit 0
}

missing=""
for p in $DEPS; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' ||
		missing="$missing $p"
done
if [ -n "$missing" ]; then
	[ "$(id -u)" = 0 ] || fail "missing build packages:$missing"
	apt-get update -qq >"$log" 2>&1
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing \
		>>"$log" 2>&1 || fail "cannot install$missing"
fi

work=$(mktemp -d "$BUILD/warren-criu-src.XXXXXX") || fail "no temporary directory"
trap 'rm -rf "$work"' EXIT
echo "criu-build: building CRIU $VER from Debian's source (a few minutes)" >&2
curl -sSf --retry 3 -o "$work/criu.tar.xz" "$URL" >>"$log" 2>&1 || fail "cannot download $URL"
echo "$SHA  $work/criu.tar.xz" | sha256sum -c --quiet >>"$log" 2>&1 ||
	fail "criu_$VER.orig.tar.xz does not match Debian's SHA-256"
tar -xJf "$work/criu.tar.xz" -C "$work" >>"$log" 2>&1 || fail "cannot unpack the source"
for p in "$PATCHES"/*.patch; do
	[ -e "$p" ] || continue
	patch -d "$work/criu-$VER" -p1 --forward --batch <"$p" >>"$log" 2>&1 ||
		fail "cannot apply $(basename "$p")"
done
# -j2: the machines have 2 cores
make -C "$work/criu-$VER" -j2 criu >>"$log" 2>&1 || fail "the CRIU build failed"
install -m 0755 "$work/criu-$VER/criu/criu" "$OUT.new" && mv -f "$OUT.new" "$OUT" ||
	fail "cannot install $OUT"
echo "$STAMPVER" >"$STAMP"
exit 0
