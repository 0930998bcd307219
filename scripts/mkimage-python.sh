#!/bin/sh
# Build a minimal Python image for the function tier's tests and benchmark:
#   OUTDIR/python   a rootfs directory: the host's python3.11 and its standard
#                   library (no test suites, no IDLE/tkinter), every shared
#                   library the interpreter and its extension modules link
#                   (from ldd), Debian's static busybox for /bin/sh and
#                   friends, a minimal /etc and the empty mountpoints a
#                   sandbox needs.
#
#   scripts/mkimage-python.sh OUTDIR
#
# Cached: when OUTDIR/python.stamp is newer than python3.11, busybox and this
# script, nothing is rebuilt. Prints the image path on stdout.
set -eu

[ $# -eq 1 ] || {
	echo "usage: $0 OUTDIR" >&2
	exit 2
}
OUT=$1
PY=${PYTHON:-/usr/bin/python3.11}
BUSYBOX=${BUSYBOX:-/bin/busybox}
SELF=$(readlink -f "$0")
[ -x "$PY" ] || {
	echo "mkimage-python: $PY missing (apt-get install python3.11)" >&2
	exit 1
}
[ -x "$BUSYBOX" ] || {
	echo "mkimage-python: $BUSYBOX missing (apt-get install busybox-static)" >&2
	exit 1
}
VER=$(basename "$PY")
LIB=/usr/lib/$VER

mkdir -p "$OUT"
OUT=$(readlink -f "$OUT")
DIR=$OUT/python
STAMP=$OUT/python.stamp
exec 9>"$OUT/.mkimage-python.lock"
flock 9

newer() {
	[ -n "$(find "$1" -prune -newer "$2" 2>/dev/null)" ]
}
if [ -f "$STAMP" ] && [ -d "$DIR" ] && newer "$STAMP" "$PY" && newer "$STAMP" "$BUSYBOX" &&
	newer "$STAMP" "$SELF"; then
	echo "$DIR"
	exit 0
fi

TMP=$(mktemp -d "$OUT/.python.$(printf "X%.0s" 1 2 3 4 5 6)")
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM HUP
R=$TMP/rootfs
umask 022
for d in bin sbin usr/bin usr/lib etc proc sys dev run tmp var/tmp root home/user work lib64; do
	mkdir -p "$R/$d"
done
chmod 1777 "$R/tmp" "$R/var/tmp"
chmod 0700 "$R/root"
chown 1000:1000 "$R/home/user"

cp "$BUSYBOX" "$R/bin/busybox"
for a in sh true false echo cat ls sleep env id kill ps head yes; do
	ln -s busybox "$R/bin/$a"
done
cp "$PY" "$R/usr/bin/$VER"
ln -s "$VER" "$R/usr/bin/python3"

# The standard library without what no call needs.
tar -C / --exclude="$LIB/test" --exclude="$LIB/idlelib" --exclude="$LIB/tkinter" \
	--exclude="$LIB/turtledemo" --exclude="$LIB/ensurepip" --exclude="$LIB/lib2to3/tests" \
	--exclude="$LIB/distutils/tests" --exclude="$LIB/unittest/test" \
	--exclude="$LIB/config-*" -cf - "${LIB#/}" | tar -C "$R" -xf -
[ -d "/etc/$VER" ] && cp -a "/etc/$VER" "$R/etc/"

# Every library the interpreter and its extension modules link, at the path
# ldd resolves it to (symlinks followed, so the image has regular files).
for f in "$PY" "$R$LIB"/lib-dynload/*.so; do
	ldd "$f" 2>/dev/null | awk '/=>/ { print $3 } /^\t\/lib64/ { print $1 }'
done | sort -u | while read -r lib; do
	[ -n "$lib" ] && [ -f "$lib" ] || continue
	mkdir -p "$R$(dirname "$lib")"
	cp -L "$lib" "$R$lib"
done
# /lib, /lib64 and /usr/lib/x86_64-linux-gnu as Debian lays them out.
if [ -d "$R/lib/x86_64-linux-gnu" ]; then
	mkdir -p "$R/usr/lib"
	cp -a "$R/lib/x86_64-linux-gnu" "$R/usr/lib/" 2>/dev/null || true
fi

cat >"$R/etc/passwd" <<'PW'
root:x:0:0:root:/root:/bin/sh
user:x:1000:1000:user:/home/user:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PW
cat >"$R/etc/group" <<'GR'
root:x:0:
user:x:1000:
nogroup:x:65534:
GR
echo warren >"$R/etc/hostname"
: >"$R/etc/resolv.conf"

rm -f "$STAMP"
rm -rf "$DIR"
mv "$R" "$DIR"
touch "$STAMP"
echo "$DIR"
