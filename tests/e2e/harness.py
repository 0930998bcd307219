"""The end-to-end harness, importable by any suite (tests/e2e/conftest.py
re-exports it; tests/redteam and tests/e2e/netnode.py import it directly,
so no conftest has to be loaded as a module by another suite): raw HTTP
over the Unix socket or TCP (`Client`), and `Daemon`, one real warrend with
its own state dir, run dir, socket, cgroup base and TCP port, two tenants
with bearer tokens, and the test image registered as "busybox". Its
`finish()` deletes every sandbox through the API, stops the daemon with
SIGTERM (it must exit 0), and reports whatever is left (cgroup, uid range,
process), after cleaning it up."""
import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("WARREN_BUILD", ROOT / "build-test"))


# ---------------------------------------------------------------- raw HTTP

class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=120):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


class Resp:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)

    @property
    def error(self):
        """(code, field) of an error body."""
        e = self.json()["error"]
        return e["code"], e.get("field")

    def __repr__(self):
        return f"<{self.status} {self.body[:300]!r}>"


class Client:
    """One keep-alive connection; use one Client per thread."""

    def __init__(self, daemon, tcp=False, token=None, timeout=120):
        self.daemon = daemon
        self.tcp = tcp
        self.token = token
        self.timeout = timeout
        self.conn = None

    def _connect(self):
        if self.tcp:
            return http.client.HTTPConnection("127.0.0.1", self.daemon.port,
                                              timeout=self.timeout)
        return UnixHTTPConnection(str(self.daemon.sock), timeout=self.timeout)

    def close(self):
        if self.conn:
            self.conn.close()
            self.conn = None

    def request(self, method, path, body=None, json_body=None, headers=None,
                stream=False):
        hdrs = {}
        if self.token:
            hdrs["Authorization"] = f"Bearer {self.token}"
        if json_body is not None:
            body = json.dumps(json_body).encode()
            hdrs["Content-Type"] = "application/json"
        if isinstance(body, str):
            body = body.encode()
        hdrs.update(headers or {})
        for attempt in range(2):
            if self.conn is None:
                self.conn = self._connect()
            try:
                self.conn.request(method, path, body=body, headers=hdrs)
                r = self.conn.getresponse()
                break
            except (ConnectionError, http.client.RemoteDisconnected,
                    http.client.CannotSendRequest, BrokenPipeError):
                # a keep-alive connection the server closed: retry once
                self.close()
                if attempt:
                    raise
        if stream:
            return r
        data = r.read()
        if r.getheader("Connection", "").lower() == "close":
            self.close()
        return Resp(r.status, r.headers, data)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, json_body=body, **kw)

    def put(self, path, data, **kw):
        return self.request("PUT", path, body=data, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    # conveniences for tests
    def create(self, expect=201, **spec):
        spec.setdefault("image", "busybox")
        spec.setdefault("timeout", 300)
        r = self.post("/v1/sandboxes", spec)
        assert r.status == expect, r
        return r.json()["id"] if expect == 201 else r

    def run(self, sid, cmd, expect=200, **kw):
        r = self.post(f"/v1/sandboxes/{sid}/commands", dict(cmd=cmd, **kw))
        assert r.status == expect, r
        return r.json()

    def kill(self, sid):
        return self.delete(f"/v1/sandboxes/{sid}")

    def ndjson(self, method, path, body=None):
        """Lines of an NDJSON answer as they arrive: (status, [objects])."""
        r = self.request(method, path, json_body=body, stream=True)
        if r.status != 200:
            return r.status, [json.loads(r.read())]
        out = [json.loads(line) for line in r if line.strip()]
        return r.status, out


# ---------------------------------------------------------------- the daemon

def own_cgroup_dirs(base):
    """The directory `base` under this process's cgroup, per hierarchy."""
    dirs = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if ctrls == "":
            mount = Path("/sys/fs/cgroup/unified")
            if not (mount / "cgroup.procs").exists():
                mount = Path("/sys/fs/cgroup")
        elif ctrls.startswith("name="):
            continue
        else:
            mount = Path("/sys/fs/cgroup") / ctrls
        dirs.append(mount / path.lstrip("/") / base)
    return dirs


def find_images(build):
    for d in (build / "test-images", build / "tests" / "test-images"):
        if (d / "busybox").is_dir():
            return d
    out = build / "test-images"
    subprocess.run([str(ROOT / "scripts/mkimage.sh"), str(out), "--add",
                    f"{build / 'tests/wr-probe'}:/usr/bin/wr-probe"],
                   check=True, stdout=subprocess.DEVNULL)
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """One warrend with private state; start/stop/kill9/restart."""

    def __init__(self, build, root, name, workers=8, extra=None):
        self.build = build
        self.root = Path(root)
        self.state = self.root / "state"
        self.run = self.root / "run"
        self.sock = self.run / "warren.sock"
        self.cg_base = f"warren-e2e-{name}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.port = free_port()
        self.tokens = {"alice": "tok-alice-" + uuid.uuid4().hex,
                       "bob": "tok-bob-" + uuid.uuid4().hex}
        self.images = find_images(build)
        self.log = self.root / "warrend.log"
        cfg = {
            "socket": str(self.sock),
            "listen": f"127.0.0.1:{self.port}",
            "unix_tenant": "default",
            "tokens": [{"tenant": t, "sha256": hashlib.sha256(k.encode()).hexdigest()}
                       for t, k in self.tokens.items()],
            "images": {"busybox": str(self.images / "busybox"),
                       "busybox-erofs": str(self.images / "busybox.erofs")},
            "workers": workers,
            "shutdown_timeout": 10,
            "log_level": "info",
        }
        cfg.update(extra or {})
        self.root.mkdir(parents=True, exist_ok=True)
        self.config = self.root / "warrend.json"
        self.config.write_text(json.dumps(cfg, indent=1))
        self.env = dict(os.environ,
                        WARREN_STATE_DIR=str(self.state), WARREN_RUN_DIR=str(self.run),
                        WARREN_CGROUP_BASE=self.cg_base,
                        WARREN_INIT=str(build / "warren-init"),
                        ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
                        UBSAN_OPTIONS="print_stacktrace=1")
        self.proc = None

    def start(self):
        logf = open(self.log, "ab")
        self.proc = subprocess.Popen([str(self.build / "warrend"), "--config", str(self.config)],
                                     env=self.env, stdout=logf, stderr=logf)
        logf.close()
        deadline = time.time() + 30
        while time.time() < deadline:
            assert self.proc.poll() is None, f"warrend exited: {self.log_text()}"
            try:
                c = Client(self, timeout=5)
                if c.get("/v1/health").status == 200:
                    c.close()
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"warrend did not come up: {self.log_text()}")

    def stop(self, timeout=30):
        """SIGTERM; returns the exit status."""
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = "hung"
        self.proc = None
        return rc

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def client(self, tenant=None):
        if tenant is None:
            return Client(self)
        return Client(self, tcp=True, token=self.tokens[tenant])

    def log_text(self):
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def sanitizer_reports(self):
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return [line for line in text.splitlines()
                if "AddressSanitizer" in line or "runtime error:" in line
                or "LeakSanitizer" in line]

    def delete_all(self):
        """Kill every running sandbox of every tenant through the API."""
        for c in [self.client()] + [self.client(t) for t in self.tokens]:
            while True:
                ids = []
                for state in ("running", "paused"):
                    r = c.get(f"/v1/sandboxes?state={state}&limit=1000")
                    assert r.status == 200, r
                    ids += [s["id"] for s in r.json()["sandboxes"]]
                if not ids:
                    break
                for sid in ids:
                    d = c.kill(sid)
                    assert d.status in (204, 409), d
            c.close()

    def leftovers(self):
        found = []
        idmap = self.state / "idmap"
        if idmap.exists():
            found += [f"uid range {p.name}" for p in idmap.iterdir()]
        for d in own_cgroup_dirs(self.cg_base):
            if d.exists():
                # bpf-anchor: the daemon's own while it runs (hookwarm.c)
                found += [f"cgroup {c}" for c in d.iterdir()
                          if c.is_dir() and c.name != "bpf-anchor"]
        for p in Path("/proc").iterdir():
            if not p.name.isdigit():
                continue
            try:
                if f"/{self.cg_base}/" in (p / "cgroup").read_text():
                    found.append(f"process {p.name}")
            except OSError:
                pass
        return found

    def clean(self):
        """Remove whatever a failed run left: kill, then rmdir, bottom up."""
        for d in own_cgroup_dirs(self.cg_base):
            if not d.exists():
                continue
            for kill in d.rglob("cgroup.kill"):
                try:
                    kill.write_text("1")
                except OSError:
                    pass
            for procs in d.rglob("cgroup.procs"):
                try:
                    for pid in procs.read_text().split():
                        os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.2)
            subprocess.run(["sh", "-c", f"find '{d}' -depth -type d -exec rmdir {{}} + "
                            "2>/dev/null"], check=False)
        idmap = self.state / "idmap"
        if idmap.exists():
            for p in idmap.iterdir():
                p.unlink()

    def stop_lazyfs(self):
        """lazyfs outlives warrend by design (its mounts serve sandboxes
        across a restart): a test daemon's, started by a lazy pull, goes
        with it."""
        if not (self.run / "lazyfs").exists():
            return
        env = dict(os.environ, WARREN_LAZYFS=str(Path(self.build) / "warren-lazyfs"))
        subprocess.run([str(Path(self.build) / "tests/wr-lazytool"), str(self.state / "images"),
                        str(self.run), "stop"], capture_output=True, timeout=60, env=env,
                       check=False)

    def finish(self):
        """Delete every sandbox, stop, verify nothing is left; clean up."""
        problems = []
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.delete_all()
            except Exception as e:  # keep going: the cleanup must happen
                problems.append(f"delete_all: {e!r}")
            rc = self.stop()
            if rc != 0:
                problems.append(f"warrend exited with {rc}")
        self.stop_lazyfs()
        deadline = time.time() + 5
        while self.leftovers() and time.time() < deadline:
            time.sleep(0.1)
        left = self.leftovers()
        if left:
            problems.append(f"left behind: {left[:20]}")
        self.clean()
        problems += self.sanitizer_reports()
        return problems
