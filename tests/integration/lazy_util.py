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


class CountingProxy:
    """127.0.0.1:<port> -> target; counts the bytes flowing back (what a
    client fetched from the registry). latency: seconds added before each
    answer's first bytes. stall(): hold every answer until resume().
    requests: (method, path) of every request line seen going up."""

    def __init__(self, target_port, latency=0.0):
        self.target = ("127.0.0.1", target_port)
        self.latency = latency
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
            threading.Thread(target=self._pump, args=(c, u, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, True), daemon=True).start()

    def _pump(self, src, dst, down):
        first = True
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
                else:
                    first = True
                    lines = re.findall(rb"(?m)^(GET|HEAD|POST|PUT|PATCH|DELETE) (\S+) HTTP/1", data)
                    with self.lock:
                        self.requests += [(m.decode(), p.decode()) for m, p in lines]
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
