#!/bin/bash
# Bootable disks for the vm tier: a raw disk with an MBR partition table, one
# ext4 partition holding a root filesystem, Debian's cloud kernel (with its
# initrd and modules) and extlinux as the bootloader. The guest is driven
# only through qemu-guest-agent, as a stock cloud image would be.
#
#   scripts/mkvmimage.sh OUTDIR [SIZE]
#       the tests' disk: a debootstrapped bookworm (minbase + systemd +
#       qemu-guest-agent + linux-image-cloud-amd64) in OUTDIR/debian-vm.root
#       (the slow part: minutes; kept), the disk OUTDIR/debian-vm.raw (SIZE
#       default 1G), rebuilt only when this script changed. Prints its path.
#   scripts/mkvmimage.sh --from ROOTFS --kernel-root KDIR --out DISK [--size SIZE]
#       `warren image build-vm` (src/image/vmbuild.c runs this argv): ROOTFS
#       is a store image's EROFS blob (or a directory), KDIR a Debian tree
#       holding the cloud kernel (boot/vmlinuz-*, boot/initrd.img-*,
#       lib/modules/*; debootstrapped into KDIR when it has none), DISK the
#       qcow2 written (SIZE: the virtual disk, default 4G). The image brings
#       its own init (systemd) and qemu-guest-agent; the build adds the
#       kernel, fstab, hostname and bootloader.
#
# Nothing from the image is ever run: it is copied (cp -a) and written into
# only below directories checked to be real directories (a symlink in the
# image resolves on the host while the disk is mounted here). The loop
# device and the mounts live in a private mount namespace and are undone
# even on failure.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
MIRROR=${WARREN_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SELF=$(readlink -f "$0")
PKGS=systemd-sysv,udev,kmod,qemu-guest-agent,linux-image-cloud-amd64

die() {
	echo "mkvmimage: $*" >&2
	exit 1
}

# The image lacks what a VM needs (exit 3: vmbuild.c blames the image).
bad_image() {
	echo "$*" >&2
	exit 3
}

need_tools() {
	for t in "$@"; do
		command -v "$t" >/dev/null || die "$t missing (scripts/deps.sh installs it)"
	done
}

# debootstrap a bookworm tree with the cloud kernel into $1 (kept: marked
# complete only at the end; log next to it).
debootstrap_tree() {
	local root=$1
	[ -f "$root/.complete" ] && return 0
	need_tools debootstrap
	rm -rf "$root" "$root.tmp"
	mkdir -p "$(dirname "$root")"
	debootstrap --variant=minbase --include=$PKGS bookworm "$root.tmp" "$MIRROR" \
		>"$root.debootstrap.log" 2>&1 || die "debootstrap failed; see $root.debootstrap.log"
	mv "$root.tmp" "$root"
	touch "$root/.complete"
}

# The guest's configuration, inside the mounted disk $1, with the kernel of
# tree $2. Runs in the private mount namespace below.
configure_guest() {
	local mnt=$1 kroot=$2
	realdir() {
		[ -d "$mnt/$1" ] && [ ! -L "$mnt/$1" ] ||
			bad_image "its /$1 is not a directory (missing or a symlink)"
	}
	put() { # put REL CONTENT: a fresh file (an existing one or a link goes first)
		rm -f "$mnt/$1"
		printf '%s' "$2" >"$mnt/$1"
	}
	[ -e "$mnt/sbin/init" ] || [ -L "$mnt/sbin/init" ] ||
		bad_image "it has no /sbin/init (install systemd-sysv in it)"
	[ -e "$mnt/usr/sbin/qemu-ga" ] || [ -L "$mnt/usr/sbin/qemu-ga" ] ||
		bad_image "it has no /usr/sbin/qemu-ga (install qemu-guest-agent in it)"
	local kver
	kver=$(basename "$(ls "$kroot"/boot/vmlinuz-* | sort | tail -n1)")
	kver=${kver#vmlinuz-}
	[ -n "$kver" ] && [ -d "$kroot/lib/modules/$kver" ] || die "$kroot: no kernel modules"
	realdir etc
	put etc/hostname $'warren-vm\n'
	put etc/hosts $'127.0.0.1 localhost\n127.0.1.1 warren-vm\n'
	put etc/fstab $'/dev/vda1 / ext4 rw,errors=remount-ro 0 1\n'
	# the kernel, its initrd and modules (merged /usr: /lib is usr/lib)
	[ -e "$mnt/boot" ] || [ -L "$mnt/boot" ] || mkdir "$mnt/boot"
	realdir boot
	rm -f "$mnt/boot/vmlinuz-$kver" "$mnt/boot/initrd.img-$kver"
	cp "$kroot/boot/vmlinuz-$kver" "$kroot/boot/initrd.img-$kver" "$mnt/boot/"
	local mods=lib/modules
	if [ -L "$mnt/lib" ]; then
		[ "$(readlink "$mnt/lib")" = usr/lib ] || bad_image "its /lib is a symlink to elsewhere"
		realdir usr
		realdir usr/lib
		mods=usr/lib/modules
	else
		realdir lib
	fi
	[ -e "$mnt/$mods" ] || [ -L "$mnt/$mods" ] || mkdir "$mnt/$mods"
	realdir "$mods"
	rm -rf "${mnt:?}/$mods/$kver"
	cp -a "$kroot/lib/modules/$kver" "$mnt/$mods/"
	rm -rf "$mnt/boot/extlinux"
	mkdir "$mnt/boot/extlinux"
	put boot/extlinux/extlinux.conf "DEFAULT debian
TIMEOUT 0
PROMPT 0
LABEL debian
  LINUX /boot/vmlinuz-$kver
  INITRD /boot/initrd.img-$kver
  APPEND root=/dev/vda1 rw console=ttyS0 quiet systemd.show_status=false
"
}

# make_disk SRC KROOT RAW SIZE: SRC a directory or an EROFS file.
make_disk() {
	local src=$1 kroot=$2 raw=$3 size=$4
	need_tools sfdisk extlinux losetup mkfs.ext4
	local mbr=/usr/lib/EXTLINUX/mbr.bin
	[ -f "$mbr" ] || mbr=/usr/lib/syslinux/mbr/mbr.bin
	rm -f "$raw"
	truncate -s "$size" "$raw"
	echo 'label: dos
start=2048, type=83, bootable' | sfdisk -q "$raw"
	dd if="$mbr" of="$raw" bs=440 count=1 conv=notrunc status=none
	export -f die bad_image configure_guest
	unshare -m --propagation private bash -euo pipefail -c '
		raw=$1 src=$2 kroot=$3
		# the partition as its own loop device (offset 1 MiB): partition
		# nodes need udev, which a build machine may not run
		size=$(stat -c %s "$raw")
		loop=$(losetup --show -f -o 1048576 --sizelimit $((size - 1048576)) "$raw")
		trap "losetup -d $loop" EXIT
		mkfs.ext4 -q -L warren-root "$loop"
		mnt=$(mktemp -d)
		mount "$loop" "$mnt"
		from=$src
		if [ -f "$src" ]; then
			from=$(mktemp -d)
			mount -t erofs -o ro "$src" "$from"
		fi
		cp -a "$from"/. "$mnt"/
		rm -f "$mnt/.complete"
		configure_guest "$mnt" "$kroot"
		extlinux --install "$mnt/boot/extlinux" >/dev/null 2>&1
		[ "$from" = "$src" ] || umount "$from"
		umount "$mnt"
		rmdir "$mnt"
	' _ "$raw" "$src" "$kroot"
}

if [ "${1:-}" = --from ]; then
	FROM= KROOT= OUT= SIZE=4G
	while [ $# -gt 0 ]; do
		case $1 in
		--from) FROM=$2 ;;
		--kernel-root) KROOT=$2 ;;
		--out) OUT=$2 ;;
		--size) SIZE=$2 ;;
		*) die "unknown argument $1" ;;
		esac
		shift 2
	done
	[ -n "$FROM" ] && [ -n "$KROOT" ] && [ -n "$OUT" ] ||
		die "usage: $0 --from ROOTFS --kernel-root KDIR --out DISK [--size SIZE]"
	need_tools qemu-img
	ls "$KROOT"/boot/vmlinuz-* >/dev/null 2>&1 || debootstrap_tree "$KROOT"
	RAW=$OUT.raw.tmp
	trap 'rm -f "$RAW" "$OUT.tmp"' EXIT
	make_disk "$FROM" "$KROOT" "$RAW" "$SIZE"
	qemu-img convert -f raw -O qcow2 "$RAW" "$OUT.tmp"
	mv "$OUT.tmp" "$OUT"
	echo "$OUT"
	exit 0
fi

OUT=${1:?usage: $0 OUTDIR [SIZE] | --from ROOTFS --kernel-root KDIR --out DISK [--size SIZE]}
SIZE=${2:-1G}
mkdir -p "$OUT"
ROOT=$OUT/debian-vm.root
DISK=$OUT/debian-vm.raw
STAMP=$OUT/debian-vm.stamp
if [ -f "$DISK" ] && [ -f "$STAMP" ] && [ "$STAMP" -nt "$SELF" ] && [ "$(cat "$STAMP")" = "$SIZE" ]; then
	echo "$DISK"
	exit 0
fi
debootstrap_tree "$ROOT"
make_disk "$ROOT" "$ROOT" "$OUT/.disk.tmp" "$SIZE"
mv "$OUT/.disk.tmp" "$DISK"
echo "$SIZE" >"$STAMP"
echo "$DISK"
