#!/bin/sh
# Install every Debian package warren's build, tests and benchmarks need.
# Idempotent: prints nothing and touches nothing when all are present.
set -eu

PKGS="
meson ninja-build pkg-config gcc clang llvm clang-format
libseccomp-dev libcap-dev libbpf-dev bpftool
libmicrohttpd-dev libnftables-dev libcurl4-openssl-dev libssl-dev libjansson-dev libsqlite3-dev sqlite3 libarchive-dev
libfuse3-dev fuse3 erofs-utils zstd criu
qemu-system-x86 docker-registry skopeo
cpio lz4 qemu-utils debootstrap extlinux syslinux-common fdisk e2fsprogs ovmf
grub-efi-amd64-bin grub-common dosfstools mtools shim-signed grub-efi-amd64-signed
libcmocka-dev python3-pytest python3-httpx python3-dnslib python3-cryptography
libldns-dev
busybox-static iproute2 nftables
bubblewrap crun runc hyperfine
"

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed'; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" != 0 ]; then
	echo "deps: missing packages:$missing (run as root, or: sudo apt-get install$missing)" >&2
	exit 1
fi
echo "deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
# docker-registry starts a service on install; we only want the binary.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d 2>/dev/null && chmod +x /usr/sbin/policy-rc.d || true
apt-get update -qq >/dev/null
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
rm -f /usr/sbin/policy-rc.d
