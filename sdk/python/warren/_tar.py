"""Tar helpers for ``files.upload_dir`` / ``files.download_dir``.

Uploads contain only what the daemon accepts: relative names, regular files,
directories and symlinks (no hard links, devices or FIFOs; those are skipped),
owned by uid/gid 0 of the sandbox. Downloads are extracted defensively: no
absolute names, no ``..``, nothing written through a symlink, no device nodes,
no setuid bits. (Debian 12's Python 3.11.2 predates ``tarfile``'s ``filter=``.)
"""
from __future__ import annotations

import os
import shutil
import stat
import tarfile
import tempfile
from typing import IO, Any, Iterable, Iterator, Optional, Tuple

SPOOL = 16 << 20  # archives below 16 MiB stay in memory


def _info(name: str, st: os.stat_result, kind: bytes) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.mode = stat.S_IMODE(st.st_mode) & 0o7777 & ~0o6000
    ti.mtime = int(st.st_mtime)
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def build_tar(local_dir: str) -> Tuple[IO[bytes], int, int]:
    """Archive the *contents* of ``local_dir`` (names relative to it).

    Returns ``(file positioned at 0, archive size, number of entries)``.
    """
    root = os.fspath(local_dir)
    if not os.path.isdir(root):
        raise NotADirectoryError(root)
    out = tempfile.SpooledTemporaryFile(max_size=SPOOL)
    n = 0
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, root)
            for name in sorted(dirnames) + sorted(filenames):
                full = os.path.join(dirpath, name)
                rel = name if rel_dir == "." else f"{rel_dir}/{name}".replace(os.sep, "/")
                st = os.lstat(full)
                if stat.S_ISLNK(st.st_mode):
                    ti = _info(rel, st, tarfile.SYMTYPE)
                    ti.linkname = os.readlink(full)
                    tar.addfile(ti)
                elif stat.S_ISDIR(st.st_mode):
                    tar.addfile(_info(rel, st, tarfile.DIRTYPE))
                elif stat.S_ISREG(st.st_mode):
                    ti = _info(rel, st, tarfile.REGTYPE)
                    ti.size = st.st_size
                    with open(full, "rb") as f:
                        tar.addfile(ti, f)
                else:
                    continue  # sockets, FIFOs, devices: not transferable
                n += 1
            # os.walk does not descend into symlinked dirs (followlinks=False)
    size = out.tell()
    out.seek(0)
    return out, size, n


def iter_file(f: IO[bytes], chunk: int = 1 << 20) -> Iterator[bytes]:
    while True:
        b = f.read(chunk)
        if not b:
            return
        yield b


class IterReader:
    """A read-only file object over an iterator of byte chunks (for ``r|`` tar)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._it = iter(chunks)
        self._buf = b""

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            rest = self._buf + b"".join(self._it)
            self._buf = b""
            return rest
        while len(self._buf) < n:
            try:
                self._buf += next(self._it)
            except StopIteration:
                break
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def readable(self) -> bool:
        return True


def _clean(name: str) -> Optional[str]:
    """Normalise a member name; ``None`` for the archive root; raises if unsafe."""
    if name.startswith("/"):
        raise ValueError(f"unsafe tar entry {name!r}: absolute name")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise ValueError(f"unsafe tar entry {name!r}: '..' component")
    return "/".join(parts) if parts else None


def _inside(root: str, path: str) -> bool:
    rp = os.path.realpath(path)
    return rp == root or rp.startswith(root + os.sep)


def safe_extract(fileobj: Any, dest: str) -> int:
    """Extract a tar stream into ``dest`` (created if needed); return entry count."""
    os.makedirs(dest, exist_ok=True)
    root = os.path.realpath(dest)
    n = 0
    dir_modes = []
    with tarfile.open(fileobj=fileobj, mode="r|*") as tar:
        for m in tar:
            rel = _clean(m.name)
            if rel is None:
                continue
            target = os.path.join(root, *rel.split("/"))
            parent = os.path.dirname(target)
            if not _inside(root, parent):
                raise ValueError(f"unsafe tar entry {m.name!r}: its parent leaves {dest}")
            if m.isdir():
                if os.path.islink(target):
                    os.unlink(target)
                os.makedirs(target, exist_ok=True)
                dir_modes.append((target, m.mode & 0o777, m.mtime))
            elif m.isreg():
                os.makedirs(parent, exist_ok=True)
                if os.path.islink(target):
                    os.unlink(target)
                src = tar.extractfile(m)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,
                             0o600)
                with os.fdopen(fd, "wb") as out:
                    if src is not None:
                        shutil.copyfileobj(src, out, 1 << 20)
                os.chmod(target, m.mode & 0o777)
                os.utime(target, (m.mtime, m.mtime))
            elif m.issym():
                os.makedirs(parent, exist_ok=True)
                if os.path.lexists(target):
                    if os.path.isdir(target) and not os.path.islink(target):
                        shutil.rmtree(target)
                    else:
                        os.unlink(target)
                os.symlink(m.linkname, target)
            elif m.islnk():
                src_rel = _clean(m.linkname)
                if src_rel is None:
                    continue
                src = os.path.join(root, *src_rel.split("/"))
                if not _inside(root, src) or not os.path.isfile(src):
                    raise ValueError(f"unsafe tar entry {m.name!r}: hard link to {m.linkname!r}")
                os.makedirs(parent, exist_ok=True)
                if os.path.lexists(target):
                    os.unlink(target)
                shutil.copy2(src, target)
            else:
                continue  # devices, FIFOs: never created on the client
            n += 1
    for path, mode, mtime in reversed(dir_modes):
        os.chmod(path, mode | 0o700)
        os.utime(path, (mtime, mtime))
    return n
