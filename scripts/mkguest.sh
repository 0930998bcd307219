#!/bin/bash
# Build what a microVM guest boots from, into OUTDIR:
#   OUTDIR/vmlinux          the uncompressed kernel of Debian's cloud kernel
#                           package (an ELF with a PVH note: QEMU boots it
#                           directly, about 1 s sooner than the bzImage)
#   OUTDIR/initramfs.cpio   newc archive: /init = warren-agent, the modules
#                           a guest needs (virtio-mmio, -blk, -console, -net,
#                           erofs, overlay, their dependencies) and
#                           /etc/warren/modules, their load order
#   OUTDIR/kernel.version   the kernel package version (part of a
#                           template's identity)
#
#   scripts/mkguest.sh OUTDIR WARREN_AGENT [--busybox]
#
# The kernel package is fetched with `apt-get download` (never installed:
# the host's /boot and modules are untouched) and unpacked here. --busybox
# adds /bin/busybox and a few applets to the initramfs, for tests that run
# commands in it (warren.root=none). Cached: nothing is rebuilt when
# OUTDIR/guest.stamp is newer than the agent and this script and records
# the same options. Prints OUTDIR/vmlinux and OUTDIR/initramfs.cpio.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin

usage() {
	echo "usage: $0 OUTDIR WARREN_AGENT [--busybox]" >&2
	exit 2
}
[ $# -ge 2 ] || usage
OUT=$1
AGENT=$2
BUSYBOX=""
[ "${3:-}" = "--busybox" ] && BUSYBOX=/bin/busybox
[ -x "$AGENT" ] || {
	echo "mkguest: $AGENT is not an executable" >&2
	exit 1
}
SELF=$(readlink -f "$0")
OPTS="busybox=${BUSYBOX:-no}"
mkdir -p "$OUT"
STAMP=$OUT/guest.stamp

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$OPTS" ] && [ "$STAMP" -nt "$AGENT" ] &&
	[ "$STAMP" -nt "$SELF" ] && [ -f "$OUT/vmlinux" ] && [ -f "$OUT/initramfs.cpio" ]; then
	echo "$OUT/vmlinux"
	echo "$OUT/initramfs.cpio"
	exit 0
fi

WORK=$(mktemp -d "$OUT/.work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# ---- the kernel package -------------------------------------------------
META=linux-image-cloud-amd64
PKG=$(apt-cache depends "$META" 2>/dev/null | awk '/Depends: linux-image-/ { print $2; exit }')
if [ -z "$PKG" ]; then
	echo "mkguest: apt-cache knows no $META (apt-get update?)" >&2
	exit 1
fi
VER=$(apt-cache policy "$PKG" | awk '/Candidate:/ { print $2 }')
DEB=$(ls "$OUT"/"${PKG}"_*.deb 2>/dev/null | head -n1 || true)
if [ -z "$DEB" ]; then
	(cd "$WORK" && apt-get download "$PKG" >/dev/null 2>&1) || {
		echo "mkguest: apt-get download $PKG failed" >&2
		exit 1
	}
	mv "$WORK"/"${PKG}"_*.deb "$OUT/"
	DEB=$(ls "$OUT"/"${PKG}"_*.deb | head -n1)
fi
dpkg-deb -x "$DEB" "$WORK/pkg"
KREL=${PKG#linux-image-}
VMLINUZ=$WORK/pkg/boot/vmlinuz-$KREL
MODDIR=$WORK/pkg/lib/modules/$KREL/kernel

# The bzImage holds the kernel ELF compressed; find it by each format's
# magic and keep the first candidate that decompresses to an ELF.
extract() {
	local magic=$1 cmd=$2 off
	for off in $(LC_ALL=C grep -aboP "$magic" "$VMLINUZ" | cut -d: -f1); do
		tail -c +$((off + 1)) "$VMLINUZ" | $cmd >"$WORK/vmlinux" 2>/dev/null || true
		if [ "$(head -c 4 "$WORK/vmlinux" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then
			return 0
		fi
	done
	return 1
}
extract '\x02\x21\x4c\x18' "lz4 -dc" || extract '\x28\xb5\x2f\xfd' "zstd -dc" ||
	extract '\xfd\x37\x7a\x58\x5a\x00' "xz -dc" || extract '\x1f\x8b\x08' "gzip -dc" || {
	echo "mkguest: no kernel ELF found in $VMLINUZ" >&2
	exit 1
}

# ---- the initramfs --------------------------------------------------------
ROOT=$WORK/root
mkdir -p "$ROOT/etc/warren" "$ROOT/lib/modules" "$ROOT/proc" "$ROOT/sys" "$ROOT/dev" \
	"$ROOT/tmp"
install -m 0755 "$AGENT" "$ROOT/init"

depends_of() {
	objcopy -O binary --only-section=.modinfo "$1" "$WORK/modinfo" 2>/dev/null || return 0
	tr '\0' '\n' <"$WORK/modinfo" | sed -n 's/^depends=//p' | tr ',' ' '
}
declare -A SEEN=()
ORDER=()
# add NAME: NAME's dependencies first, then NAME (built-in ones have no .ko)
add() {
	local name=$1 ko dep
	[ -n "${SEEN[$name]:-}" ] && return 0
	SEEN[$name]=1
	ko=$(find "$MODDIR" -name "$name.ko" -o -name "${name//_/-}.ko" | head -n1)
	[ -n "$ko" ] || return 0
	for dep in $(depends_of "$ko"); do
		add "$dep"
	done
	cp "$ko" "$ROOT/lib/modules/$name.ko"
	ORDER+=("/lib/modules/$name.ko")
}
for m in virtio_mmio virtio_blk virtio_console virtio_net erofs overlay; do
	add "$m"
done
printf '%s\n' "${ORDER[@]}" >"$ROOT/etc/warren/modules"
if [ -n "$BUSYBOX" ]; then
	mkdir -p "$ROOT/bin"
	cp "$BUSYBOX" "$ROOT/bin/busybox"
	for a in sh echo cat ls sleep true false head yes wc id hostname mount; do
		ln -s busybox "$ROOT/bin/$a"
	done
fi
(cd "$ROOT" && find . -print0 | LC_ALL=C sort -z |
	cpio --null -o -H newc --reproducible --owner=0:0 --quiet) >"$WORK/initramfs.cpio"

mv "$WORK/vmlinux" "$OUT/vmlinux"
mv "$WORK/initramfs.cpio" "$OUT/initramfs.cpio"
echo "$PKG $VER" >"$OUT/kernel.version"
echo "$OPTS" >"$STAMP"
echo "$OUT/vmlinux"
echo "$OUT/initramfs.cpio"
