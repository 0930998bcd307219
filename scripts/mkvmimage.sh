#!/bin/bash
# Build a small bootable Debian disk image for the vm tier (and its tests):
# a raw disk with an MBR partition table, one ext4 partition holding a
# debootstrapped bookworm (minbase + systemd + qemu-guest-agent + Debian's
# cloud kernel) and extlinux as the bootloader. The guest is driven only
# through qemu-guest-agent, as a stock cloud image would be.
#
#   scripts/mkvmimage.sh OUTDIR [SIZE]        (SIZE default 1G)
#
# Writes OUTDIR/debian-vm.raw; prints its path. Cached: the debootstrap tree
# (OUTDIR/debian-vm.root, the slow part: minutes) is kept and the disk is
# rebuilt only when this script changed. The loop device and the mounts
# live in a private mount namespace and are undone even on failure.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
OUT=${1:?usage: $0 OUTDIR [SIZE]}
SIZE=${2:-1G}
SELF=$(readlink -f "$0")
MIRROR=${WARREN_DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$OUT"
ROOT=$OUT/debian-vm.root
DISK=$OUT/debian-vm.raw
STAMP=$OUT/debian-vm.stamp

if [ -f "$DISK" ] && [ -f "$STAMP" ] && [ "$STAMP" -nt "$SELF" ] && [ "$(cat "$STAMP")" = "$SIZE" ]; then
	echo "$DISK"
	exit 0
fi
for t in debootstrap sfdisk extlinux losetup mkfs.ext4; do
	command -v "$t" >/dev/null || {
		echo "mkvmimage: $t missing (scripts/deps.sh installs it)" >&2
		exit 1
	}
done
MBR=/usr/lib/EXTLINUX/mbr.bin
[ -f "$MBR" ] || MBR=/usr/lib/syslinux/mbr/mbr.bin

if [ ! -f "$ROOT/.complete" ]; then
	rm -rf "$ROOT"
	debootstrap --variant=minbase \
		--include=systemd-sysv,udev,kmod,qemu-guest-agent,linux-image-cloud-amd64 \
		bookworm "$ROOT.tmp" "$MIRROR" >"$OUT/debootstrap.log" 2>&1 || {
		echo "mkvmimage: debootstrap failed; see $OUT/debootstrap.log" >&2
		exit 1
	}
	mv "$ROOT.tmp" "$ROOT"
	touch "$ROOT/.complete"
fi

# Guest configuration: a console on ttyS0, the agent started by its udev
# rule when the port appears, no password logins.
echo warren-vm >"$ROOT/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 warren-vm\n' >"$ROOT/etc/hosts"
echo '/dev/vda1 / ext4 rw,errors=remount-ro 0 1' >"$ROOT/etc/fstab"
KVER=$(basename "$(ls "$ROOT"/boot/vmlinuz-* | sort | tail -n1)")
KVER=${KVER#vmlinuz-}
mkdir -p "$ROOT/boot/extlinux"
cat >"$ROOT/boot/extlinux/extlinux.conf" <<EOF
DEFAULT debian
TIMEOUT 0
PROMPT 0
LABEL debian
  LINUX /boot/vmlinuz-$KVER
  INITRD /boot/initrd.img-$KVER
  APPEND root=/dev/vda1 rw console=ttyS0 quiet systemd.show_status=false
EOF

TMP=$OUT/.disk.tmp
rm -f "$TMP"
truncate -s "$SIZE" "$TMP"
echo 'label: dos
start=2048, type=83, bootable' | sfdisk -q "$TMP"
dd if="$MBR" of="$TMP" bs=440 count=1 conv=notrunc status=none

# Loop device and mounts in a private mount namespace: whatever happens,
# nothing of it stays mounted on the host.
unshare -m --propagation private bash -euo pipefail -c '
	tmp=$1 root=$2
	# the partition as its own loop device (offset 1 MiB): partition
	# nodes need udev, which a build machine may not run
	size=$(stat -c %s "$tmp")
	loop=$(losetup --show -f -o 1048576 --sizelimit $((size - 1048576)) "$tmp")
	trap "losetup -d $loop" EXIT
	mkfs.ext4 -q -L warren-root "$loop"
	mnt=$(mktemp -d)
	mount "$loop" "$mnt"
	cp -a "$root"/. "$mnt"/
	rm -f "$mnt/.complete"
	extlinux --install "$mnt/boot/extlinux" >/dev/null 2>&1
	umount "$mnt"
	rmdir "$mnt"
' _ "$TMP" "$ROOT"
mv "$TMP" "$DISK"
echo "$SIZE" >"$STAMP"
echo "$DISK"
