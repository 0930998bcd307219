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
#                        [--firmware bios|uefi|uefi-secure]
#       `warren image build-vm` (src/image/vmbuild.c runs this argv): ROOTFS
#       is a store image's EROFS blob (or a directory), KDIR a Debian tree
#       holding the cloud kernel (boot/vmlinuz-*, boot/initrd.img-*,
#       lib/modules/*; debootstrapped into KDIR when it has none), DISK the
#       qcow2 written (SIZE: the virtual disk, default 4G). The image brings
#       its own init (systemd) and qemu-guest-agent; the build adds the
#       kernel, fstab, hostname and bootloader. --firmware uefi: a GPT disk
#       with an EFI system partition (FAT, 64 MiB) holding GRUB for UEFI
#       (grub-mkstandalone from Debian's grub-efi-amd64-bin, its grub.cfg
#       built in) as the removable-media path EFI/BOOT/BOOTX64.EFI, which
#       OVMF starts with an empty variable store; the root is partition 2.
#       --firmware uefi-secure: the same disk with the Secure Boot chain on
#       its ESP instead (install_signed_efi): Debian's shim (signed by
#       Microsoft's UEFI CA) as EFI/BOOT/BOOTX64.EFI, Debian's signed GRUB,
#       and the signed cloud kernel, so OVMF with Microsoft's keys enrolled
#       verifies every step (shim-signed, grub-efi-amd64-signed).
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
	# debootstrap's own log in the tree names the build host's paths (the
	# build directory): a guest must not learn them (redteam a-log-hunt)
	if [ -f "$root/.complete" ]; then
		rm -f "$root/var/log/bootstrap.log"
		return 0
	fi
	need_tools debootstrap
	rm -rf "$root" "$root.tmp"
	mkdir -p "$(dirname "$root")"
	debootstrap --variant=minbase --include=$PKGS bookworm "$root.tmp" "$MIRROR" \
		>"$root.debootstrap.log" 2>&1 || die "debootstrap failed; see $root.debootstrap.log"
	rm -f "$root.tmp/var/log/bootstrap.log"
	mv "$root.tmp" "$root"
	touch "$root/.complete"
}

# The guest's NIC (warren's vm tier gives a networked sandbox a virtio-net
# NIC behind QEMU's user-mode network: DHCP hands out 10.0.2.15/24, gateway
# 10.0.2.2, DNS 10.0.2.3; an offline sandbox has no NIC): systemd-networkd
# asks DHCP on any en*/eth* link, when the image has networkd. The image's
# /etc/resolv.conf, unless a resolver manages it (a symlink), names the DNS
# alias: a copy of the build host's would lead nowhere.
configure_network() {
	local mnt=$1 unit=
	for d in lib usr/lib; do
		[ -f "$mnt/$d/systemd/system/systemd-networkd.service" ] && unit=/$d/systemd/system
	done
	[ -n "$unit" ] || return 0
	local d
	for d in etc/systemd etc/systemd/network etc/systemd/system \
		etc/systemd/system/multi-user.target.wants etc/systemd/system/sockets.target.wants; do
		[ -e "$mnt/$d" ] || [ -L "$mnt/$d" ] || mkdir "$mnt/$d"
		realdir "$d"
	done
	put etc/systemd/network/80-warren-dhcp.network '[Match]
Name=en* eth*

[Network]
DHCP=ipv4
LinkLocalAddressing=no
IPv6AcceptRA=no
'
	rm -f "$mnt/etc/systemd/system/multi-user.target.wants/systemd-networkd.service" \
		"$mnt/etc/systemd/system/sockets.target.wants/systemd-networkd.socket"
	ln -s "$unit/systemd-networkd.service" \
		"$mnt/etc/systemd/system/multi-user.target.wants/systemd-networkd.service"
	ln -s "$unit/systemd-networkd.socket" \
		"$mnt/etc/systemd/system/sockets.target.wants/systemd-networkd.socket"
	[ -L "$mnt/etc/resolv.conf" ] || put etc/resolv.conf $'nameserver 10.0.2.3\n'
}

# qemu-guest-agent must outlive what commands do to the guest (src/tiers/
# vm_exec.c drives everything through it): the OOM killer leaves it alone
# (a root memory bomb would otherwise take it with the bomb, and the
# command in flight with it), and systemd starts it again whenever it ends,
# without a start limit. An image brought its own drop-ins: ours comes last
# (zz-), so these settings win. A user image made without `warren image
# build-vm` needs the same (docs/SECURITY.md).
configure_agent() {
	local mnt=$1 unit=
	for d in lib usr/lib; do
		[ -f "$mnt/$d/systemd/system/qemu-guest-agent.service" ] && unit=y
	done
	[ -n "$unit" ] || return 0
	local d
	for d in etc/systemd etc/systemd/system etc/systemd/system/qemu-guest-agent.service.d; do
		[ -e "$mnt/$d" ] || [ -L "$mnt/$d" ] || mkdir "$mnt/$d"
		realdir "$d"
	done
	put etc/systemd/system/qemu-guest-agent.service.d/zz-warren.conf '[Unit]
StartLimitIntervalSec=0

[Service]
OOMScoreAdjust=-1000
Restart=always
RestartSec=1
'
}

# The guest's configuration, inside the mounted disk $1, with the kernel of
# tree $2. Runs in the private mount namespace below.
configure_guest() {
	local mnt=$1 kroot=$2 rootdev=${3:-/dev/vda1}
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
	put etc/fstab "$rootdev / ext4 rw,errors=remount-ro 0 1
"
	configure_network "$mnt"
	configure_agent "$mnt"
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
  APPEND root=$rootdev rw console=ttyS0 quiet systemd.show_status=false
"
}

# GRUB for UEFI onto the FAT filesystem of device or file $1 (written with
# mtools: no vfat mount needed), booting kernel $2 from the ext4 partition
# labelled warren-root (root=/dev/vda2). Host tools only.
install_grub_efi() {
	local esp=$1 kver=$2 cfg efi
	cfg=$(mktemp)
	efi=$(mktemp)
	printf '%s\n' 'set timeout=0' \
		'search --no-floppy --label warren-root --set=root' \
		"linux /boot/vmlinuz-$kver root=/dev/vda2 rw console=ttyS0 quiet systemd.show_status=false" \
		"initrd /boot/initrd.img-$kver" 'boot' >"$cfg"
	grub-mkstandalone -O x86_64-efi -o "$efi" \
		--modules="part_gpt ext2 search search_label linux normal" \
		--locales= --themes= --fonts= "boot/grub/grub.cfg=$cfg"
	MTOOLS_SKIP_CHECK=1 mmd -i "$esp" ::/EFI ::/EFI/BOOT
	MTOOLS_SKIP_CHECK=1 mcopy -i "$esp" "$efi" ::/EFI/BOOT/BOOTX64.EFI
	rm -f "$cfg" "$efi"
}

# Secure Boot's chain onto the FAT filesystem $1, booting kernel $2 as
# install_grub_efi does: shim (Debian's shim-signed, signed by Microsoft's
# UEFI CA, which OVMF_VARS_4M.ms.fd trusts) at the removable-media path,
# Debian's signed GRUB next to it as grubx64.efi (shim verifies it with
# Debian's key built into shim; no fbx64.efi, so shim starts GRUB directly
# instead of writing boot entries and resetting), and GRUB's configuration
# where that GRUB looks: EFI/debian/grub.cfg (its built-in prefix) and
# EFI/BOOT/grub.cfg (its fallback, the directory it was started from). The
# signed GRUB has its modules built in (it loads none under Secure Boot)
# and verifies the kernel through shim: Debian's cloud kernel is signed.
SHIM_SIGNED=/usr/lib/shim/shimx64.efi.signed
GRUB_SIGNED=/usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed
install_signed_efi() {
	local esp=$1 kver=$2 cfg
	cfg=$(mktemp)
	printf '%s\n' 'set timeout=0' \
		'search --no-floppy --label warren-root --set=root' \
		"linux /boot/vmlinuz-$kver root=/dev/vda2 rw console=ttyS0 quiet systemd.show_status=false" \
		"initrd /boot/initrd.img-$kver" 'boot' >"$cfg"
	MTOOLS_SKIP_CHECK=1 mmd -i "$esp" ::/EFI ::/EFI/BOOT ::/EFI/debian
	MTOOLS_SKIP_CHECK=1 mcopy -i "$esp" "$SHIM_SIGNED" ::/EFI/BOOT/BOOTX64.EFI
	MTOOLS_SKIP_CHECK=1 mcopy -i "$esp" "$GRUB_SIGNED" ::/EFI/BOOT/grubx64.efi
	MTOOLS_SKIP_CHECK=1 mcopy -i "$esp" "$cfg" ::/EFI/debian/grub.cfg
	MTOOLS_SKIP_CHECK=1 mcopy -i "$esp" "$cfg" ::/EFI/BOOT/grub.cfg
	rm -f "$cfg"
}

# The EXIT trap of make_disk's and make_disk_uefi's mount namespaces: their
# temporary mount points ($ftmp, $mnt of the caller, empty once removed)
# are unmounted and removed on every exit (a bad image exits from
# configure_guest), then the loop devices given are detached.
disk_cleanup() {
	# shellcheck disable=SC2154 # set by the caller
	for d in "$ftmp" "$mnt"; do
		[ -z "$d" ] || { umount "$d" 2>/dev/null; rmdir "$d"; } || true
	done
	for l in "$@"; do
		losetup -d "$l"
	done
}

# make_disk SRC KROOT RAW SIZE [FIRMWARE]: SRC a directory or an EROFS file.
make_disk() {
	local src=$1 kroot=$2 raw=$3 size=$4 fw=${5:-bios}
	need_tools sfdisk losetup mkfs.ext4
	if [ "$fw" = uefi ]; then
		need_tools grub-mkstandalone mkfs.vfat mcopy mmd
		[ -d /usr/lib/grub/x86_64-efi ] || die "grub-efi-amd64-bin missing (scripts/deps.sh installs it)"
		make_disk_uefi "$@"
		return
	fi
	if [ "$fw" = uefi-secure ]; then
		need_tools mkfs.vfat mcopy mmd
		[ -f "$SHIM_SIGNED" ] || die "$SHIM_SIGNED missing: shim-signed (scripts/deps.sh installs it)"
		[ -f "$GRUB_SIGNED" ] ||
			die "$GRUB_SIGNED missing: grub-efi-amd64-signed (scripts/deps.sh installs it)"
		make_disk_uefi "$@"
		return
	fi
	need_tools extlinux
	local mbr=/usr/lib/EXTLINUX/mbr.bin
	[ -f "$mbr" ] || mbr=/usr/lib/syslinux/mbr/mbr.bin
	rm -f "$raw"
	truncate -s "$size" "$raw"
	echo 'label: dos
start=2048, type=83, bootable' | sfdisk -q "$raw"
	dd if="$mbr" of="$raw" bs=440 count=1 conv=notrunc status=none
	export -f die bad_image configure_guest configure_network configure_agent disk_cleanup
	unshare -m --propagation private bash -euo pipefail -c '
		raw=$1 src=$2 kroot=$3
		# the partition as its own loop device (offset 1 MiB): partition
		# nodes need udev, which a build machine may not run
		size=$(stat -c %s "$raw")
		loop=$(losetup --show -f -o 1048576 --sizelimit $((size - 1048576)) "$raw")
		mnt= ftmp=
		trap "disk_cleanup $loop" EXIT
		mkfs.ext4 -q -L warren-root "$loop"
		mnt=$(mktemp -d)
		mount "$loop" "$mnt"
		from=$src
		if [ -f "$src" ]; then
			ftmp=$(mktemp -d)
			from=$ftmp
			mount -t erofs -o ro "$src" "$from"
		fi
		cp -a "$from"/. "$mnt"/
		rm -f "$mnt/.complete"
		configure_guest "$mnt" "$kroot"
		extlinux --install "$mnt/boot/extlinux" >/dev/null 2>&1
		# unmounted here, so a failure (data not written) fails the build
		[ -z "$ftmp" ] || { umount "$ftmp"; rmdir "$ftmp"; ftmp=; }
		umount "$mnt"
		rmdir "$mnt"
		mnt=
	' _ "$raw" "$src" "$kroot"
}

# The UEFI layout: GPT, ESP at 1 MiB (64 MiB), root ext4 after it.
make_disk_uefi() {
	local src=$1 kroot=$2 raw=$3 size=$4 fw=$5
	rm -f "$raw"
	truncate -s "$size" "$raw"
	# the root partition's size is given (whole MiB, 1 MiB left at the end
	# for the backup GPT): the loop device below must be exactly as large
	local rs
	rs=$((($(stat -c %s "$raw") / 512 - 133120 - 2048) / 2048 * 2048))
	echo "label: gpt
start=2048, size=131072, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=EFI
start=133120, size=$rs, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=root" | sfdisk -q "$raw"
	export -f die bad_image configure_guest configure_network configure_agent install_grub_efi \
		install_signed_efi disk_cleanup
	export SHIM_SIGNED GRUB_SIGNED
	unshare -m --propagation private bash -euo pipefail -c '
		raw=$1 src=$2 kroot=$3 rs=$4 fw=$5
		esp=$(losetup --show -f -o 1048576 --sizelimit 67108864 "$raw")
		root=$(losetup --show -f -o 68157440 --sizelimit $((rs * 512)) "$raw")
		mnt= ftmp=
		trap "disk_cleanup $esp $root" EXIT
		mkfs.vfat -F 32 -n EFI "$esp" >/dev/null
		mkfs.ext4 -q -L warren-root "$root"
		mnt=$(mktemp -d)
		mount "$root" "$mnt"
		from=$src
		if [ -f "$src" ]; then
			ftmp=$(mktemp -d)
			from=$ftmp
			mount -t erofs -o ro "$src" "$from"
		fi
		cp -a "$from"/. "$mnt"/
		rm -f "$mnt/.complete"
		configure_guest "$mnt" "$kroot" /dev/vda2
		rm -rf "$mnt/boot/extlinux"
		kver=$(basename "$(ls "$kroot"/boot/vmlinuz-* | sort | tail -n1)")
		kver=${kver#vmlinuz-}
		if [ "$fw" = uefi-secure ]; then
			install_signed_efi "$esp" "$kver"
		else
			install_grub_efi "$esp" "$kver"
		fi
		[ -z "$ftmp" ] || { umount "$ftmp"; rmdir "$ftmp"; ftmp=; }
		umount "$mnt"
		rmdir "$mnt"
		mnt=
	' _ "$raw" "$src" "$kroot" "$rs" "$fw"
}

if [ "${1:-}" = --from ]; then
	FROM= KROOT= OUT= SIZE=4G FW=bios
	while [ $# -gt 0 ]; do
		case $1 in
		--from) FROM=$2 ;;
		--kernel-root) KROOT=$2 ;;
		--out) OUT=$2 ;;
		--size) SIZE=$2 ;;
		--firmware) FW=$2 ;;
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
	case $FW in bios | uefi | uefi-secure) ;; *) die "--firmware: bios, uefi or uefi-secure, not $FW" ;; esac
	make_disk "$FROM" "$KROOT" "$RAW" "$SIZE" "$FW"
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
