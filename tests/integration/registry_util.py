"""Helpers for the registry tests: a real Debian docker-registry on loopback,
a JWT token server for its bearer auth, fake registries for failure modes,
OCI layout builders and wr-regtool runs. Everything listens on 127.0.0.1
and is stopped by the fixture that started it."""
import base64
import gzip
import hashlib
import http.server
import io
import json
import os
import signal
import socket
import subprocess
import tarfile
import threading
import time
import warnings
from pathlib import Path

REGISTRY_BIN = "/usr/bin/docker-registry"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=15.0, proc=None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


class Registry:
    """docker-registry serve CONFIG, storage in a temp dir."""

    def __init__(self, workdir, auth=None):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.storage = self.dir / "storage"
        lines = [
            "version: 0.1",
            "log:",
            "  level: error",
            "  accesslog:",
            "    disabled: true",
            "storage:",
            "  filesystem:",
            f"    rootdirectory: {self.storage}",
            "  delete:",
            "    enabled: true",
            "http:",
            f"  addr: {self.host}",
        ]
        if auth:
            lines += auth
        (self.dir / "config.yml").write_text("\n".join(lines) + "\n")
        self.log = open(self.dir / "registry.log", "wb")
        self.proc = subprocess.Popen([REGISTRY_BIN, "serve", str(self.dir / "config.yml")],
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        try:
            wait_port(self.port, proc=self.proc)
        except Exception:
            self.stop()
            raise

    def blob_data(self, digest):
        hexd = digest.split(":", 1)[1]
        return (self.storage / "docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data")

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def htpasswd_line(user, password):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt
    return f"{user}:{crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))}"


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenServer:
    """The Docker token spec's token endpoint: checks basic credentials,
    issues RS256 JWTs (signed by the openssl CLI) the registry verifies
    through the x5c certificate chain. Counts requests per scope."""

    def __init__(self, workdir, user, password, service="warren-test", issuer="warren-issuer",
                 expires_in=300):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.key = self.dir / "key.pem"
        self.cert = self.dir / "cert.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                        "-keyout", str(self.key), "-out", str(self.cert), "-days", "2",
                        "-subj", "/CN=warren-token"], check=True, capture_output=True)
        der = subprocess.run(["openssl", "x509", "-in", str(self.cert), "-outform", "DER"],
                             check=True, capture_output=True).stdout
        self.x5c = base64.b64encode(der).decode()
        self.user, self.password = user, password
        self.service, self.issuer, self.expires_in = service, issuer, expires_in
        self.requests = []  # (scopes, authorized)
        self.lock = threading.Lock()
        ts = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                from urllib.parse import urlparse, parse_qs
                q = parse_qs(urlparse(self.path).query)
                scopes = q.get("scope", [])
                auth = self.headers.get("Authorization", "")
                good = "Basic " + base64.b64encode(f"{ts.user}:{ts.password}".encode()).decode()
                with ts.lock:
                    ts.requests.append((tuple(scopes), auth == good))
                if auth != good:
                    self.send_response(401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps({"token": ts.sign(scopes), "expires_in": ts.expires_in}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.port = free_port()
        self.realm = f"http://127.0.0.1:{self.port}/token"
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), H)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def sign(self, scopes):
        access = []
        for sc in scopes:
            typ, name, actions = sc.split(":")[0], ":".join(sc.split(":")[1:-1]), sc.split(":")[-1]
            access.append({"type": typ, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        header = {"alg": "RS256", "typ": "JWT", "x5c": [self.x5c]}
        claims = {"iss": self.issuer, "sub": self.user, "aud": self.service, "exp": now + 600,
                  "nbf": now - 10, "iat": now, "jti": os.urandom(8).hex(), "access": access}
        signing = (b64url(json.dumps(header).encode()) + "." +
                   b64url(json.dumps(claims).encode())).encode()
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)],
                             input=signing, check=True, capture_output=True).stdout
        return signing.decode() + "." + b64url(sig)

    def registry_auth(self):
        return ["auth:", "  token:", f"    realm: {self.realm}", f"    service: {self.service}",
                f"    issuer: {self.issuer}", f"    rootcertbundle: {self.cert}"]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class FakeBlobRegistry:
    """A minimal registry serving one blob, for failure modes: after
    `good` answers it stalls (never answers) or, with ignore_range, answers
    Range requests with the whole blob (HTTP 200)."""

    def __init__(self, blob, good=1 << 30, ignore_range=False, drop_after=None,
                 cut_first_get=None):
        self.blob = blob
        self.digest = "sha256:" + hashlib.sha256(blob).hexdigest()
        self.good = good
        self.ignore_range = ignore_range
        self.drop_after = drop_after
        self.cut_first_get = cut_first_get  # the first whole-blob GET breaks off after N bytes
        self.ranges = []
        self.count = 0
        self.release = threading.Event()
        fk = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                fk.count += 1
                if fk.count > fk.good:
                    fk.release.wait(120)  # a dead registry: the socket stays open, silent
                    return
                if self.path == "/v2/":
                    return self.reply(200, b"{}")
                if not self.path.endswith("/blobs/" + fk.digest):
                    return self.reply(404, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}')
                rng = self.headers.get("Range")
                fk.ranges.append(rng)
                if rng is None and fk.cut_first_get is not None:
                    n, fk.cut_first_get = fk.cut_first_get, None
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(fk.blob)))
                    self.end_headers()
                    self.wfile.write(fk.blob[:n])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if rng and not fk.ignore_range:
                    a, b = rng.split("=")[1].split("-")
                    a, b = int(a), int(b) if b else len(fk.blob) - 1
                    b = min(b, len(fk.blob) - 1)
                    part = fk.blob[a:b + 1]
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {a}-{b}/{len(fk.blob)}")
                    self.send_header("Content-Length", str(len(part)))
                    self.end_headers()
                    if fk.drop_after is not None:
                        self.wfile.write(part[:fk.drop_after])
                        self.wfile.flush()
                        fk.release.wait(120)  # stalls mid-body
                        return
                    self.wfile.write(part)
                    return
                self.reply(200, fk.blob)

            def reply(self, code, body):
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), H)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


# ---- OCI layouts ------------------------------------------------------------

def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tar_layer(entries):
    """entries: list of (path, bytes | None for a dir | ('symlink', target)).
    Returns (gzip blob, diff_id)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
        for path, data in entries:
            ti = tarfile.TarInfo(path)
            ti.mtime = 1700000000
            if data is None:
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                t.addfile(ti)
            elif isinstance(data, tuple):
                ti.type, ti.linkname = tarfile.SYMTYPE, data[1]
                t.addfile(ti)
            else:
                ti.size, ti.mode = len(data), 0o644
                t.addfile(ti, io.BytesIO(data))
    tar = raw.getvalue()
    return gzip.compress(tar, mtime=0), sha(tar)


def write_blob(layout, data):
    d = sha(data)
    p = Path(layout) / "blobs/sha256" / d.split(":")[1]
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return {"digest": d, "size": len(data)}


def image_manifest(layout, layers, arch="amd64", env=None, cmd=None, workdir=None, user=None):
    blobs, diff_ids = [], []
    for entries in layers:
        gz, diff = tar_layer(entries)
        blobs.append(dict(write_blob(layout, gz),
                          mediaType="application/vnd.oci.image.layer.v1.tar+gzip"))
        diff_ids.append(diff)
    cfg = {"architecture": arch, "os": "linux", "config": {},
           "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    if env:
        cfg["config"]["Env"] = env
    if cmd:
        cfg["config"]["Cmd"] = cmd
    if workdir:
        cfg["config"]["WorkingDir"] = workdir
    if user:
        cfg["config"]["User"] = user
    cdesc = dict(write_blob(layout, json.dumps(cfg).encode()),
                 mediaType="application/vnd.oci.image.config.v1+json")
    man = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
           "config": cdesc, "layers": blobs}
    return dict(write_blob(layout, json.dumps(man).encode()),
                mediaType="application/vnd.oci.image.manifest.v1+json",
                platform={"architecture": arch, "os": "linux"})


def oci_layout(layout, tag, top):
    """top: a manifest or index descriptor to name `tag`."""
    Path(layout).mkdir(parents=True, exist_ok=True)
    (Path(layout) / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    top = dict(top)
    top.pop("platform", None)
    top["annotations"] = {"org.opencontainers.image.ref.name": tag}
    (Path(layout) / "index.json").write_text(json.dumps({"schemaVersion": 2,
                                                          "manifests": [top]}))


def index_of(layout, manifests):
    idx = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
           "manifests": manifests}
    return dict(write_blob(layout, json.dumps(idx).encode()),
                mediaType="application/vnd.oci.image.index.v1+json")


# ---- wr-regtool -------------------------------------------------------------

class ToolResult:
    def __init__(self, p, elapsed):
        self.rc = p.returncode
        self.out = p.stdout.decode(errors="replace")
        self.err = p.stderr.decode(errors="replace")
        self.elapsed = elapsed
        self.kv = {}
        for line in self.out.splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                self.kv[k] = v
        self.stats = {}
        for line in self.err.splitlines():
            if line.startswith("stats "):
                for part in line.split()[1:]:
                    k, v = part.split("=")
                    self.stats[k] = int(v)

    @property
    def errno(self):
        for line in self.err.splitlines():
            if line.startswith("E") and ":" in line:
                name = line.split(":", 1)[0]
                return "ENOTSUP" if name == "EOPNOTSUPP" else name
        return ""

    def __repr__(self):
        return f"rc={self.rc} out={self.out!r} err={self.err!r}"


def regtool(build, *args, timeout=180):
    t0 = time.monotonic()
    p = subprocess.run([str(Path(build) / "tests/wr-regtool"), *map(str, args)],
                       capture_output=True, timeout=timeout)
    return ToolResult(p, time.monotonic() - t0)


def extract_blob(blob, dest):
    """Unpack an EROFS blob to dest with fsck.erofs (no mount needed)."""
    subprocess.run(["fsck.erofs", f"--extract={dest}", str(blob)], check=True,
                   capture_output=True)
    return Path(dest)
