"""Helpers for the on-demand loading tests and the image benchmark: a
counting TCP proxy in front of a registry (bytes the registry sent, optional
latency, a stall switch), lazyfs runs through wr-lazytool, and mounts that are
always undone. Everything listens on 127.0.0.1."""
import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path


class _Answers:
    """Follows the HTTP/1.1 answers of one connection (Content-Length
    bodies; a chunked answer ends the parsing of that connection) and flips
    the bytes of 206 answers for blob `digest` that fall in [lo, hi) of the
    blob (Content-Range gives each body's place)."""

    def __init__(self, proxy, asked):
        self.proxy, self.asked = proxy, asked  # asked: (method, path) in order
        self.head = b""
        self.left = 0      # body bytes still to come
        self.at = None     # blob offset of the next body byte (206), else None
        self.path = ""
        self.lost = False

    def feed(self, data):
        out = bytearray()
        i = 0
        while i < len(data) and not self.lost:
            if self.left == 0:
                j = data.find(b"\n", i)
                j = len(data) if j < 0 else j + 1
                self.head += data[i:j]
                out += data[i:j]
                i = j
                if self.head.endswith(b"\r\n\r\n"):
                    self._start(self.head)
                    self.head = b""
                continue
            n = min(self.left, len(data) - i)
            body = bytearray(data[i:i + n])
            if self.at is not None:
                self.proxy._corrupt(self.path, self.at, body)
                self.at += n
            out += body
            self.left -= n
            i += n
        if self.lost:
            out += data[i:]
        return bytes(out)

    def _start(self, head):
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdr = {}
        for ln in lines[1:]:
            if ":" in ln:
                k, v = ln.split(":", 1)
                hdr[k.strip().lower()] = v.strip()
        method, self.path = self.asked.pop(0) if self.asked else ("GET", "")
        if status < 200:
            return
        if "chunked" in hdr.get("transfer-encoding", ""):
            self.lost = True
            return
        if method == "HEAD" or status in (204, 304):
            return
        self.left = int(hdr.get("content-length", "0"))
        self.at = None
        m = re.match(r"bytes (\d+)-", hdr.get("content-range", ""))
        if status == 206 and m:
            self.at = int(m.group(1))


class CountingProxy:
    """127.0.0.1:<port> -> target; counts the bytes flowing back (what a
    client fetched from the registry). latency: seconds added before each
    answer's first bytes. stall(): hold every answer until resume().
    requests: (method, path) of every request line seen going up.
    corrupt(digest, lo, hi): flip the bytes [lo, hi) of that blob in every
    Range answer from now on (corrupted counts them); corrupt(None) stops."""

    def __init__(self, target_port, latency=0.0):
        self.target = ("127.0.0.1", target_port)
        self.latency = latency
        self.bad = None
        self.corrupted = 0
        self.down_bytes = 0
        self.connections = 0
        self.requests = []
        self.lock = threading.Lock()
        self.running = threading.Event()
        self.running.set()
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(128)
        self.port = self.ls.getsockname()[1]
        self.host = f"127.0.0.1:{self.port}"
        self.socks = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def reset(self):
        with self.lock:
            self.down_bytes = 0

    def manifest_requests(self):
        with self.lock:
            return [r for r in self.requests if "/manifests/" in r[1]]

    def corrupt(self, digest, lo=0, hi=0):
        with self.lock:
            self.bad = (f"/blobs/{digest}", lo, hi) if digest else None

    def _corrupt(self, path, at, body):
        with self.lock:
            bad = self.bad
        if bad is None or not path.endswith(bad[0]):
            return
        lo, hi = max(bad[1], at), min(bad[2], at + len(body))
        for k in range(lo, hi):
            body[k - at] ^= 0xFF
        if hi > lo:
            with self.lock:
                self.corrupted += hi - lo

    def stall(self):
        self.running.clear()

    def resume(self):
        self.running.set()

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(self.target, timeout=5)
                u.settimeout(None)
            except OSError:
                c.close()
                continue
            with self.lock:
                self.connections += 1
                self.socks += [c, u]
            asked = []
            threading.Thread(target=self._pump, args=(c, u, False, asked), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, True, asked), daemon=True).start()

    def _pump(self, src, dst, down, asked):
        first = True
        answers = _Answers(self, asked) if down else None
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if down:
                    if first and self.latency:
                        time.sleep(self.latency)
                    first = False
                    while not self.running.wait(0.1):
                        if self.closed:
                            return
                    with self.lock:
                        self.down_bytes += len(data)
                    data = answers.feed(data)
                else:
                    first = True
                    lines = re.findall(rb"(?m)^(GET|HEAD|POST|PUT|PATCH|DELETE) (\S+) HTTP/1", data)
                    with self.lock:
                        self.requests += [(m.decode(), p.decode()) for m, p in lines]
                        asked += [(m.decode(), p.decode()) for m, p in lines]
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.closed = True
        self.running.set()
        self.ls.close()
        with self.lock:
            for s in self.socks:
                try:
                    s.close()
                except OSError:
                    pass


def lazytool(build, store, run, *args, opts=(), timeout=120, check=True):
    env = dict(os.environ, WARREN_LAZYFS=str(Path(build) / "warren-lazyfs"))
    p = subprocess.run([str(Path(build) / "tests/wr-lazytool"), *opts, str(store), str(run),
                        *map(str, args)], capture_output=True, timeout=timeout, env=env)
    out = p.stdout.decode(errors="replace")
    if check and p.returncode != 0:
        raise AssertionError(f"wr-lazytool {args}: rc={p.returncode} "
                             f"{p.stderr.decode(errors='replace')}")
    kv = {}
    for line in out.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            kv[k] = v
    return p.returncode, kv, out, p.stderr.decode(errors="replace")


class Lazy:
    """One lazyfs (store + run dir) and the EROFS mounts made from its files;
    close() unmounts them all and stops lazyfs, also after a failure."""

    def __init__(self, build, store, run, opts=()):
        self.build, self.store, self.run, self.opts = build, Path(store), Path(run), list(opts)
        self.mounts = []
        self.run.mkdir(parents=True, exist_ok=True)

    def tool(self, *args, **kw):
        return lazytool(self.build, self.store, self.run, *args, opts=self.opts, **kw)

    def acquire(self, ref, holder):
        return self.tool("acquire", ref, holder)[1]

    def stats(self, digest=None):
        kv = self.tool("stats", *([digest] if digest else []))[1]
        return {k: int(v) for k, v in kv.items()}

    def supervisor(self):
        return int((self.run / "lazyfs/pid").read_text())

    def worker(self):
        sup = self.supervisor()
        kids = Path(f"/proc/{sup}/task/{sup}/children").read_text().split()
        return int(kids[0])

    def mount(self, path, where):
        where = Path(where)
        where.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "erofs", "-o", "ro", str(path), str(where)], check=True)
        self.mounts.append(where)
        return where

    def umount(self, where):
        subprocess.run(["umount", str(where)], check=True)
        self.mounts.remove(Path(where))

    def close(self):
        for m in reversed(self.mounts):
            subprocess.run(["umount", "-l", str(m)], capture_output=True)
        self.mounts = []
        pid = None
        try:
            pid = self.supervisor()
        except (OSError, ValueError):
            pass
        self.tool("stop", check=False)
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        mnt = self.run / "lazyfs/mnt"
        for _ in range(50):
            if str(mnt) not in Path("/proc/self/mounts").read_text():
                break
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
            time.sleep(0.1)
        logf = self.run / "lazyfs/lazyfs.log"
        text = logf.read_text(errors="replace") if logf.exists() else ""
        assert "Sanitizer" not in text and "runtime error" not in text, text


def make_tree(root, big_files=110, big_size=1 << 20, small_files=300, seed=1):
    """Incompressible big files (so the blob really is that large) and many
    small text files (what a start touches)."""
    import random
    rnd = random.Random(seed)
    root = Path(root)
    (root / "data").mkdir(parents=True, exist_ok=True)
    (root / "lib").mkdir(parents=True, exist_ok=True)
    for i in range(big_files):
        (root / "data" / f"blob{i:03d}.bin").write_bytes(rnd.randbytes(big_size))
    for i in range(small_files):
        (root / "lib" / f"mod{i:03d}.py").write_text(
            f"# module {i}\n" + "".join(f"VALUE_{j} = {rnd.random()!r}\n" for j in range(40)))
    return root
