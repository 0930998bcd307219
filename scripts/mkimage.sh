#!/bin/sh
# Build the test/demo images into OUTDIR:
#   OUTDIR/busybox        a rootfs directory: Debian's static busybox, every
#                         applet symlinked where busybox puts it, a minimal
#                         /etc and the empty mountpoints a sandbox needs
#   OUTDIR/busybox.erofs  the same tree as an uncompressed, reproducible EROFS
#
#   scripts/mkimage.sh OUTDIR [--add SRC:DEST]...
#
# --add copies the file SRC into the image at DEST (absolute path inside the
# image), mode preserved, owned by root; e.g. the probe:
#   --add build/tests/wr-probe:/usr/bin/wr-probe
# Cached: when OUTDIR/busybox.stamp is newer than every input (busybox, this
# script, each SRC) and records the same --add list, nothing is rebuilt.
# Prints the paths of the images on stdout (also when cached).
set -eu

usage() {
	echo "usage: $0 OUTDIR [--add SRC:DEST]..." >&2
	exit 2
}

[ $# -ge 1 ] || usage
OUT=$1
shift

BUSYBOX=${BUSYBOX:-/bin/busybox}
SELF=$(readlink -f "$0")
# A fixed timestamp and UUID make two builds from the same inputs
# byte-identical.
EPOCH=${SOURCE_DATE_EPOCH:-0}
UUID=6c7ae2f5-3b7e-4a37-9f0e-2d1a9a4c0b01

ADDS=""
while [ $# -gt 0 ]; do
	case $1 in
	--add)
		[ $# -ge 2 ] || usage
		spec=$2
		shift 2
		;;
	--add=*)
		spec=${1#--add=}
		shift
		;;
	*) usage ;;
	esac
	src=${spec%%:*}
	dest=${spec#*:}
	case $spec in *:*) ;; *) usage ;; esac
	case $dest in /*) ;; *)
		echo "mkimage: --add $spec: DEST must be an absolute path" >&2
		exit 2
		;;
	esac
	case $src in *'
'* | *' '*)
		echo "mkimage: --add $spec: no whitespace in paths, please" >&2
		exit 2
		;;
	esac
	if [ ! -f "$src" ]; then
		echo "mkimage: --add $spec: $src is not a regular file" >&2
		exit 1
	fi
	ADDS="$ADDS $(readlink -f "$src"):$dest"
done

if [ ! -x "$BUSYBOX" ]; then
	echo "mkimage: $BUSYBOX missing (apt-get install busybox-static)" >&2
	exit 1
fi
if ! command -v mkfs.erofs >/dev/null 2>&1; then
	echo "mkimage: mkfs.erofs missing (apt-get install erofs-utils)" >&2
	exit 1
fi

mkdir -p "$OUT"
OUT=$(readlink -f "$OUT")
DIR=$OUT/busybox
IMG=$OUT/busybox.erofs
STAMP=$OUT/busybox.stamp

# One builder at a time per OUTDIR (tests may call this concurrently).
exec 9>"$OUT/.mkimage.lock"
flock 9

# POSIX sh has no -nt: "$1 was modified after $2".
newer() {
	[ -n "$(find "$1" -prune -newer "$2" 2>/dev/null)" ]
}

fresh() {
	[ -f "$STAMP" ] && [ -d "$DIR" ] && [ -f "$IMG" ] || return 1
	[ "$(cat "$STAMP")" = "adds:$ADDS" ] || return 1
	newer "$STAMP" "$BUSYBOX" && newer "$STAMP" "$SELF" || return 1
	for a in $ADDS; do
		newer "$STAMP" "${a%%:*}" || return 1
	done
	return 0
}

if fresh; then
	echo "$DIR"
	echo "$IMG"
	exit 0
fi

TMP=$(mktemp -d "$OUT/.busybox.XXXXXX")
cleanup() {
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

R=$TMP/rootfs
umask 022
mkdir -p "$R"
for d in bin sbin usr/bin usr/sbin etc proc sys dev run tmp var/tmp root home/user \
	mnt opt srv lib; do
	mkdir -p "$R/$d"
done
chmod 1777 "$R/tmp" "$R/var/tmp"
chmod 0700 "$R/root"
chown 1000:1000 "$R/home/user"
chmod 0755 "$R/home/user"

cp "$BUSYBOX" "$R/bin/busybox"
chmod 0755 "$R/bin/busybox"

# Every applet at the path busybox itself would install it to, as a
# relative symlink so the tree works wherever it is mounted.
"$BUSYBOX" --list-full | while read -r p; do
	case $p in
	*/*) ;;
	*) continue ;; # "linuxrc": no directory, not wanted
	esac
	[ "$p" = bin/busybox ] && continue
	dir=${p%/*}
	case $dir in
	bin | sbin) target=../bin/busybox ;;
	usr/bin | usr/sbin) target=../../bin/busybox ;;
	*) continue ;;
	esac
	[ -e "$R/$p" ] || [ -L "$R/$p" ] || ln -s "$target" "$R/$p"
done
for need in sh true false echo cat ls sleep; do
	if [ ! -L "$R/bin/$need" ]; then
		echo "mkimage: busybox has no '$need' applet" >&2
		exit 1
	fi
done

cat >"$R/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
user:x:1000:1000:user:/home/user:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
cat >"$R/etc/group" <<'EOF'
root:x:0:
user:x:1000:
nogroup:x:65534:
EOF
cat >"$R/etc/hosts" <<'EOF'
127.0.0.1	localhost
::1	localhost ip6-localhost ip6-loopback
EOF
echo warren >"$R/etc/hostname"
: >"$R/etc/resolv.conf"
chmod 0644 "$R/etc/passwd" "$R/etc/group" "$R/etc/hosts" "$R/etc/hostname" \
	"$R/etc/resolv.conf"

for a in $ADDS; do
	src=${a%%:*}
	dest=${a#*:}
	mkdir -p "$R$(dirname "$dest")"
	cp --preserve=mode "$src" "$R$dest"
	chown 0:0 "$R$dest"
done

# Same timestamps every build (symlinks too: -h).
find "$R" -exec touch -h -d "@$EPOCH" {} +

mkfs.erofs --quiet -T"$EPOCH" -U"$UUID" "$TMP/busybox.erofs" "$R" >/dev/null

# Replace the old outputs; the stamp goes last so an interrupted build is
# never taken as fresh.
rm -f "$STAMP"
rm -rf "$DIR"
mv "$R" "$DIR"
mv "$TMP/busybox.erofs" "$IMG"
echo "adds:$ADDS" >"$STAMP"

echo "$DIR"
echo "$IMG"
