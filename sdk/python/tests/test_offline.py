"""SDK behaviour that needs no daemon: error mapping, NDJSON parsing across
chunk boundaries, request shapes, streaming callbacks, polling, tar safety."""
import asyncio
import io
import json
import os
import tarfile

import httpx
import pytest

import warren
from warren import _http
from warren._ndjson import NDJSONDecoder
from warren._tar import IterReader, build_tar, safe_extract
from warren.exceptions import error_from_response


# ---------------------------------------------------------------- helpers

class Recorder:
    """A MockTransport handler that records requests and answers from a script."""

    def __init__(self, handler):
        self.handler = handler
        self.requests = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        return self.handler(request)


@pytest.fixture
def fake(monkeypatch):
    """Route every SDK request (sync and async) to a handler set by the test."""
    state = {}

    def install(handler):
        rec = Recorder(handler)
        state["rec"] = rec
        monkeypatch.setattr(_http, "_sync_client", lambda cfg: httpx.Client(
            transport=httpx.MockTransport(rec), base_url=cfg.base_url))

        class _AsyncTransport(httpx.AsyncBaseTransport):
            async def handle_async_request(self, request):
                await request.aread()
                rec.requests.append(request)
                resp = handler(request)
                return resp

        async def async_client(cfg):
            return httpx.AsyncClient(transport=_AsyncTransport(), base_url=cfg.base_url)
        monkeypatch.setattr(_http, "_async_client", async_client)
        return rec

    monkeypatch.delenv("WARREN_URL", raising=False)
    monkeypatch.delenv("WARREN_API_KEY", raising=False)
    monkeypatch.delenv("WARREN_SOCKET", raising=False)
    monkeypatch.delenv("WARREN_TOKEN", raising=False)
    return install


def err(status, code, message="m", field=None):
    e = {"code": code, "message": message}
    if field:
        e["field"] = field
    return httpx.Response(status, json={"error": e})


SB = {"id": "5f0c2d7a9b1e4c3d", "tier": "container", "image": "busybox", "state": "running",
      "created_at": "2026-12-02T13:50:00.123Z", "expires_at": "2026-12-02T14:50:00.123Z",
      "cpu": 1.5, "memory_mb": 512, "disk_mb": 1024, "pids": 512, "user": 0,
      "workdir": "/root", "labels": {"job": "rl-42"}, "idle_timeout": 600,
      "on_timeout": "kill"}


# ---------------------------------------------------------------- errors

@pytest.mark.parametrize("status,code,cls", [
    (400, "invalid_argument", warren.InvalidArgumentError),
    (401, "unauthenticated", warren.AuthenticationError),
    (404, "not_found", warren.NotFoundError),
    (405, "method_not_allowed", warren.MethodNotAllowedError),
    (409, "conflict", warren.ConflictError),
    (413, "payload_too_large", warren.PayloadTooLargeError),
    (415, "unsupported_media_type", warren.UnsupportedMediaTypeError),
    (429, "resource_exhausted", warren.ResourceExhaustedError),
    (500, "internal", warren.InternalError),
    (503, "unavailable", warren.UnavailableError),
])
def test_error_codes_map_to_classes(fake, status, code, cls):
    fake(lambda req: err(status, code, "why it failed", "memory_mb" if status == 400 else None))
    with pytest.raises(cls) as ei:
        warren.Sandbox.create(image="busybox", memory_mb=1)
    e = ei.value
    assert isinstance(e, warren.WarrenError)
    assert (e.code, e.status, e.message) == (code, status, "why it failed")
    assert e.field == ("memory_mb" if status == 400 else None)
    assert code in str(e) and "why it failed" in str(e)


def test_error_fallbacks():
    e = error_from_response(404, b"<html>nope</html>")
    assert isinstance(e, warren.NotFoundError) and "nope" in e.message
    e = error_from_response(502, b"")
    assert isinstance(e, warren.InternalError) and e.status == 502
    e = error_from_response(418, b'{"error": {"code": "teapot", "message": "short"}}')
    assert type(e) is warren.WarrenError and e.code == "teapot" and e.status == 418
    # the code wins over the status when they disagree
    e = error_from_response(400, b'{"error": {"code": "conflict", "message": "x"}}')
    assert isinstance(e, warren.ConflictError)
    # InvalidArgumentError is also a ValueError
    assert isinstance(error_from_response(400, b""), ValueError)


def test_transport_errors_are_typed(fake, tmp_path):
    def boom(req):
        raise httpx.ReadTimeout("slow", request=req)
    fake(boom)
    with pytest.raises(warren.RequestTimeoutError) as ei:
        warren.Sandbox.connect("abc")
    assert isinstance(ei.value, TimeoutError)

    def refused(req):
        raise httpx.ConnectError("refused", request=req)
    fake(refused)
    with pytest.raises(warren.WarrenConnectionError):
        warren.Sandbox.connect("abc")


def test_missing_socket_is_connection_error(tmp_path, monkeypatch):
    monkeypatch.delenv("WARREN_URL", raising=False)
    with pytest.raises(warren.WarrenConnectionError) as ei:
        warren.Sandbox.health(socket=str(tmp_path / "nope.sock"))
    assert isinstance(ei.value, warren.UnavailableError) and ei.value.status is None


# ---------------------------------------------------------------- NDJSON

LINES = [{"type": "stdout", "data": "héllo ✓\n"}, {"type": "stderr", "data": "warn\n"},
         {"type": "stdout", "data": "x" * 5000},
         {"type": "exit", "exit_code": 3, "signal": 0, "reason": "exited"}]
WIRE = b"".join(json.dumps(o, ensure_ascii=False).encode() + b"\n" for o in LINES)


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 4096, len(WIRE)])
def test_ndjson_any_chunking(size):
    dec = NDJSONDecoder()
    out = []
    for i in range(0, len(WIRE), size):
        out += dec.feed(WIRE[i:i + size])
    out += dec.close()
    assert out == LINES


def test_ndjson_blank_crlf_and_unterminated_last_line():
    dec = NDJSONDecoder()
    assert dec.feed(b'\n{"a":1}\r\n\n{"b"') == [{"a": 1}]
    assert dec.feed(b':2}') == []
    assert dec.close() == [{"b": 2}]
    with pytest.raises(warren.WarrenError) as ei:
        NDJSONDecoder().feed(b"{not json}\n")
    assert ei.value.code == "bad_response"


def chunked(data, size):
    return [data[i:i + size] for i in range(0, len(data), size)]


def test_streaming_run_callbacks_in_order(fake):
    rec = fake(lambda req: httpx.Response(
        200, headers={"Content-Type": "application/x-ndjson"}, content=iter(chunked(WIRE, 5))))
    sb = warren.Sandbox("5f0c2d7a9b1e4c3d")
    got = []
    r = sb.commands.run(["sh", "-c", "x"], on_stdout=lambda d: got.append(("o", d)),
                        on_stderr=lambda d: got.append(("e", d)))
    assert got == [("o", "héllo ✓\n"), ("e", "warn\n"), ("o", "x" * 5000)]
    assert r.exit_code == 3 and r.stdout == "héllo ✓\n" + "x" * 5000 and r.stderr == "warn\n"
    assert not r.ok and r.error is None
    body = json.loads(rec.requests[0].content)
    assert body == {"cmd": ["sh", "-c", "x"], "stream": True}
    assert rec.requests[0].url.path == "/v1/sandboxes/5f0c2d7a9b1e4c3d/commands"


def test_stream_without_exit_line_is_an_error(fake):
    fake(lambda req: httpx.Response(200, content=iter([b'{"type":"stdout","data":"a"}\n'])))
    with pytest.raises(warren.WarrenError, match="without an exit line"):
        warren.Sandbox("x").commands.run("true", on_stdout=print)


def test_async_streaming_run(fake):
    async def body():
        for c in chunked(WIRE, 3):
            yield c
    fake(lambda req: httpx.Response(200, content=body()))
    got = []

    async def on_err(d):  # coroutine callbacks are awaited
        got.append(("e", d))

    async def main():
        sb = warren.AsyncSandbox("abc")
        return await sb.commands.run("x", on_stdout=lambda d: got.append(("o", d)),
                                     on_stderr=on_err)
    r = asyncio.run(main())
    assert [g[0] for g in got] == ["o", "e", "o"] and r.exit_code == 3


# ---------------------------------------------------------------- request shapes

def test_create_body_and_auth(fake, monkeypatch):
    monkeypatch.setenv("WARREN_URL", "http://10.1.2.3:7070")
    monkeypatch.setenv("WARREN_API_KEY", "tok-env")
    rec = fake(lambda req: httpx.Response(201, json=SB))
    sb = warren.Sandbox.create(image="busybox", cpu=1.5, memory_mb=512, envs={"A": "1"},
                               cwd="/root", user="root", metadata={"job": "rl-42"},
                               timeout=3600, idle_timeout=600, on_timeout="kill")
    req = rec.requests[0]
    assert str(req.url) == "http://10.1.2.3:7070/v1/sandboxes"
    assert req.headers["authorization"] == "Bearer tok-env"
    assert req.headers["content-type"] == "application/json"
    assert json.loads(req.content) == {
        "tier": "container", "image": "busybox", "cpu": 1.5, "memory_mb": 512,
        "env": {"A": "1"}, "workdir": "/root", "user": 0, "labels": {"job": "rl-42"},
        "timeout": 3600, "idle_timeout": 600, "on_timeout": "kill"}
    assert sb.sandbox_id == SB["id"] and sb.info.labels == {"job": "rl-42"}
    assert sb.info.created_at.year == 2026 and sb.info.metadata == {"job": "rl-42"}
    with pytest.raises(TypeError):
        warren.Sandbox.create(image="b", labels={}, metadata={})


def test_config_resolution(monkeypatch):
    monkeypatch.delenv("WARREN_URL", raising=False)
    monkeypatch.delenv("WARREN_SOCKET", raising=False)
    monkeypatch.delenv("WARREN_API_KEY", raising=False)
    monkeypatch.delenv("WARREN_TOKEN", raising=False)
    c = _http.ConnectionConfig.resolve()
    assert c.socket == "/run/warren/warren.sock" and c.api_key is None
    assert "Authorization" not in c.headers()
    monkeypatch.setenv("WARREN_SOCKET", "/tmp/w.sock")
    assert _http.ConnectionConfig.resolve().socket == "/tmp/w.sock"
    monkeypatch.setenv("WARREN_URL", "http://h:1/")
    c = _http.ConnectionConfig.resolve()
    assert c.socket is None and c.base_url == "http://h:1"
    # explicit arguments beat the environment
    assert _http.ConnectionConfig.resolve(socket="/s").socket == "/s"
    c = _http.ConnectionConfig.resolve(base_url="http://x:2", api_key="k")
    assert c.base_url == "http://x:2" and c.headers()["Authorization"] == "Bearer k"


def test_list_follows_pages_with_label_filters(fake):
    pages = {None: {"sandboxes": [dict(SB, id="a"), dict(SB, id="b")], "next_page_token": "t1"},
             "t1": {"sandboxes": [dict(SB, id="c")]}}
    rec = fake(lambda req: httpx.Response(200, json=pages[req.url.params.get("page_token")]))
    got = warren.Sandbox.list(state="running", labels={"job": "rl-42", "task": "7"},
                              page_size=2)
    assert [s.sandbox_id for s in got] == ["a", "b", "c"]
    q = rec.requests[0].url.params
    assert q.get_list("label") == ["job=rl-42", "task=7"]
    assert q["state"] == "running" and q["limit"] == "2"
    assert rec.requests[1].url.params["page_token"] == "t1"

    async def main():
        return [s.sandbox_id for s in await warren.AsyncSandbox.list(labels={"job": "rl-42"})]
    assert asyncio.run(main()) == ["a", "b", "c"]


def test_run_returns_result_without_raising_and_check(fake):
    res = {"exit_code": 2, "signal": 0, "reason": "exited", "stdout": "", "stderr": "bad\n",
           "stdout_truncated": False, "stderr_truncated": False, "duration_ms": 12.5}
    rec = fake(lambda req: httpx.Response(200, json=res))
    sb = warren.Sandbox("abc")
    r = sb.commands.run("exit 2", envs={"K": "V"}, cwd="/tmp", stdin=b"in", timeout=1.5)
    assert r.exit_code == 2 and r.stderr == "bad\n" and r.duration == 0.0125
    assert json.loads(rec.requests[0].content) == {
        "cmd": "exit 2", "env": {"K": "V"}, "cwd": "/tmp", "stdin": "in", "timeout": 1.5}
    with pytest.raises(warren.CommandExitError) as ei:
        sb.commands.run("exit 2", check=True)
    assert ei.value.exit_code == 2 and ei.value.stderr == "bad\n" and "bad" in str(ei.value)


def test_background_wait_polls_until_done(fake):
    answers = iter([{"id": "c3", "state": "running"}, {"id": "c3", "state": "running"},
                    {"id": "c3", "state": "exited", "exit_code": 0, "reason": "exited",
                     "stdout": "done\n", "stderr": ""}])

    def handler(req):
        if req.method == "POST" and req.url.path.endswith("/commands"):
            return httpx.Response(201, json={"id": "c3", "pid": 42, "state": "running"})
        if req.url.path.endswith("/stdin"):
            return httpx.Response(204)
        if req.url.path.endswith("/wait"):
            return httpx.Response(200, json=next(answers))
        if req.method == "DELETE":
            return err(404, "not_found")
        raise AssertionError(req)
    rec = fake(handler)
    h = warren.Sandbox("abc").commands.run("cat", background=True)
    assert (h.id, h.pid) == ("c3", 42)
    h.send_stdin("hi\n")
    h.close_stdin()
    r = h.wait()
    assert r.stdout == "done\n" and r.id == "c3"
    assert h.wait() is r  # cached
    assert h.kill() is False  # already gone
    stdin_bodies = [json.loads(q.content) for q in rec.requests if q.url.path.endswith("/stdin")]
    assert stdin_bodies == [{"data": "hi\n", "eof": False}, {"data": "", "eof": True}]


def test_handle_iteration_and_wait_timeout(fake):
    def handler(req):
        if req.url.path.endswith("/stream"):
            return httpx.Response(200, content=iter(chunked(WIRE, 11)))
        return httpx.Response(200, json={"id": "c1", "state": "running"})
    fake(handler)
    sb = warren.Sandbox("abc")
    h = warren.CommandHandle(sb, "c1")
    with pytest.raises(warren.RequestTimeoutError):
        h.wait(timeout=0.01)
    out = list(h)
    assert out == [("héllo ✓\n", None), (None, "warn\n"), ("x" * 5000, None)]
    assert h.wait().exit_code == 3


def test_files_write_bodies(fake, tmp_path):
    rec = fake(lambda req: httpx.Response(200, json={
        "path": req.url.params["path"], "name": "f", "type": "file", "size": 3,
        "mode": "0644", "uid": 0, "gid": 0, "mtime": "2026-12-02T13:50:00Z"}))
    files = warren.Sandbox("abc").files
    e = files.write("/tmp/f", "abc", mode=0o600)
    assert e.mode == 0o644 and e.is_file and e.mtime.year == 2026
    q = rec.requests[-1]
    assert q.method == "PUT" and q.url.params["mode"] == "0600" and q.url.params["parents"] == "true"
    assert q.content == b"abc"
    p = tmp_path / "big"
    p.write_bytes(os.urandom(3 << 20))
    with open(p, "rb") as f:
        files.write("/tmp/big", f)
    q = rec.requests[-1]
    assert q.headers["content-length"] == str(3 << 20) and q.content == p.read_bytes()
    files.write("/tmp/gen", (bytes([i]) * 10 for i in range(3)))
    q = rec.requests[-1]
    assert q.headers.get("transfer-encoding") == "chunked" and len(q.content) == 30
    files.write("/tmp/path", p)  # os.PathLike = a local file
    assert rec.requests[-1].content == p.read_bytes()


def test_make_dir_false_when_exists_and_exists(fake):
    def handler(req):
        if req.url.path.endswith("/mkdir"):
            return err(409, "conflict", "exists")
        return httpx.Response(200, json={"exists": False})
    fake(handler)
    f = warren.Sandbox("abc").files
    assert f.make_dir("/a") is False
    assert f.exists("/nope") is False


# ---------------------------------------------------------------- tar

def test_tar_round_trip_locally(tmp_path):
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "deep.bin").write_bytes(bytes(range(256)) * 10)
    (src / "top.txt").write_text("top\n")
    (src / "empty").mkdir()
    os.symlink("top.txt", src / "link")
    os.chmod(src / "top.txt", 0o751)
    f, size, n = build_tar(str(src))
    assert n == 6 and size > 0
    with tarfile.open(fileobj=f) as t:
        names = sorted(t.getnames())
        assert all(not x.startswith("/") for x in names)
        assert all(m.uid == 0 for m in t.getmembers())
    f.seek(0)
    dst = tmp_path / "dst"
    data = f.read()
    assert safe_extract(IterReader(chunked(data, 1000)), str(dst)) == 6
    assert (dst / "a/b/deep.bin").read_bytes() == bytes(range(256)) * 10
    assert os.readlink(dst / "link") == "top.txt"
    assert (os.stat(dst / "top.txt").st_mode & 0o777) == 0o751
    assert (dst / "empty").is_dir()


def _tar_with(*members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for ti, data in members:
            t.addfile(ti, io.BytesIO(data) if data is not None else None)
    buf.seek(0)
    return buf


def _ti(name, kind=tarfile.REGTYPE, size=0, linkname=""):
    ti = tarfile.TarInfo(name)
    ti.type, ti.size, ti.linkname = kind, size, linkname
    return ti


@pytest.mark.parametrize("members", [
    [(_ti("../evil", size=1), b"x")],
    [(_ti("/etc/evil", size=1), b"x")],
    [(_ti("ln", tarfile.SYMTYPE, linkname="/etc"), None), (_ti("ln/passwd", size=1), b"x")],
    [(_ti("ln", tarfile.SYMTYPE, linkname=".."), None), (_ti("ln/x", size=1), b"x")],
])
def test_safe_extract_refuses_escapes(tmp_path, members):
    dst = tmp_path / "d"
    with pytest.raises(ValueError):
        safe_extract(_tar_with(*members), str(dst))
    assert not (tmp_path / "evil").exists()


def test_safe_extract_skips_devices(tmp_path):
    dev = _ti("null", tarfile.CHRTYPE)
    n = safe_extract(_tar_with((dev, None), (_ti("./ok", size=2), b"ok")), str(tmp_path / "d"))
    assert n == 1 and not (tmp_path / "d/null").exists()
    assert (tmp_path / "d/ok").read_bytes() == b"ok"


def test_result_with_daemon_error_and_null_exit_code():
    r = warren.CommandResult.from_json({"id": "c2", "state": "finished", "exit_code": None,
                                        "reason": "error", "error": "command helper failed"})
    assert r.exit_code is None and not r.ok
    assert r.error == "command helper failed" and r.reason == "error"
    ok = warren.CommandResult.from_json({"exit_code": 0, "reason": "exited"})
    assert ok.ok and ok.error is None
    t = warren.CommandResult.from_json({"exit_code": 137, "signal": 9, "reason": "timeout"})
    assert t.error == "timeout" and t.signal == 9


def test_async_pools_are_shared_per_loop_and_closed_with_it(tmp_path):
    seen = []

    async def main():
        cfg = _http.ConnectionConfig.resolve(socket=str(tmp_path / "s.sock"))
        a = await _http._async_client(cfg)
        b = await _http._async_client(cfg)
        assert a is b
        other = await _http._async_client(_http.ConnectionConfig.resolve(base_url="http://h:1"))
        assert other is not a
        seen.extend([a, other])
    asyncio.run(main())
    # asyncio.run finalised the loop's async generators, closing its pools
    assert all(c.is_closed for c in seen)
    asyncio.run(main())
    assert seen[2] is not seen[0] and all(c.is_closed for c in seen)


def test_stream_read_errors_early_and_closes(fake):
    def handler(req):
        if req.url.params["path"] == "/missing":
            return err(404, "not_found", "no such file")
        return httpx.Response(200, content=b"abcdef")
    fake(handler)
    files = warren.Sandbox("abc").files
    with pytest.raises(warren.NotFoundError):
        files.read("/missing", format="stream")  # before any iteration
    assert b"".join(files.read("/f", format="stream")) == b"abcdef"
    with files.read("/f", format="stream") as st:
        assert next(iter(st)) == b"abcdef"
    st.close()  # idempotent

    async def main():
        af = warren.AsyncSandbox("abc").files
        with pytest.raises(warren.NotFoundError):
            await af.read("/missing", format="stream")
        st = await af.read("/f", format="stream")
        return b"".join([c async for c in st])
    assert asyncio.run(main()) == b"abcdef"


# ---------------------------------------------------------------- vm tier

VM = dict(SB, tier="vm", image="debian-vm",
          display={"vnc": {"socket": "/run/warren/vm/x/vnc.sock", "password": "abcdEFG2"}})


def test_vm_parameters_sync(fake):
    """display at create, keep_memory at pause, firmware at import and
    build-vm: the API's names and shapes, and nothing sent when not given."""
    def handler(req):
        if req.url.path.startswith("/v1/images"):
            return httpx.Response(201, json={"digest": "sha256:" + "a" * 64, "kind": "vm-disk",
                                             "disk": {"format": "raw", "firmware": "uefi"}})
        return httpx.Response(201 if req.url.path == "/v1/sandboxes" else 200, json=VM)
    rec = fake(handler)
    sb = warren.Sandbox.create("debian-vm", tier="vm", display={"vnc": True},
                               socket="/nonexistent")
    assert json.loads(rec.requests[-1].content) == {"tier": "vm", "image": "debian-vm",
                                                    "display": {"vnc": True}}
    assert sb.info.display["vnc"]["password"] == "abcdEFG2"
    sb.pause(keep_memory=False)
    assert rec.requests[-1].url.path == f"/v1/sandboxes/{SB['id']}/pause"
    assert json.loads(rec.requests[-1].content) == {"keep_memory": False}
    sb.pause()
    assert rec.requests[-1].content == b""
    with pytest.raises(TypeError, match="keep_memory"):
        sb.pause(keep_memory="no")
    with pytest.raises(TypeError, match="display"):
        warren.Sandbox.create("debian-vm", tier="vm", display=True, socket="/nonexistent")
    imgs = warren.images.Images(socket="/nonexistent")
    info = imgs.import_vm_disk(b"disk", ref="d:1", firmware="uefi")
    q = rec.requests[-1].url.params
    assert q["format"] == "vm-disk" and q["firmware"] == "uefi" and q["ref"] == "d:1"
    assert info.disk["firmware"] == "uefi"
    imgs.import_vm_disk(b"disk")
    assert "firmware" not in rec.requests[-1].url.params
    imgs.import_vm_disk("/srv/disk.raw", node_path=True, firmware="bios")
    assert json.loads(rec.requests[-1].content) == {"path": "/srv/disk.raw",
                                                    "format": "vm-disk", "firmware": "bios"}
    imgs.build_vm("debian:12", ref="vm:1", size="8G", firmware="uefi")
    assert json.loads(rec.requests[-1].content) == {"image": "debian:12", "ref": "vm:1",
                                                    "size": "8G", "firmware": "uefi"}


def test_vm_parameters_async(fake):
    def handler(req):
        if req.url.path.startswith("/v1/images"):
            return httpx.Response(201, json={"digest": "sha256:" + "b" * 64, "kind": "vm-disk"})
        return httpx.Response(201 if req.url.path == "/v1/sandboxes" else 200, json=VM)
    rec = fake(handler)

    async def go():
        sb = await warren.AsyncSandbox.create("debian-vm", tier="vm", display={"vnc": True},
                                              socket="/nonexistent")
        assert json.loads(rec.requests[-1].content)["display"] == {"vnc": True}
        assert sb.info.display["vnc"]["socket"].endswith("/vnc.sock")
        await sb.pause(keep_memory=False)
        assert json.loads(rec.requests[-1].content) == {"keep_memory": False}
        imgs = warren.images.AsyncImages(socket="/nonexistent")
        await imgs.import_vm_disk(b"disk", firmware="bios")
        assert rec.requests[-1].url.params["firmware"] == "bios"
        await imgs.build_vm("debian:12", firmware="uefi")
        assert json.loads(rec.requests[-1].content) == {"image": "debian:12",
                                                        "firmware": "uefi"}
    asyncio.run(go())


# ---------------------------------------------------------------- snapshots with processes

def test_processes_parameters(fake):
    """processes at snapshot, fork and create: sent as the API's boolean,
    only when given; anything but a bool refused before a request."""
    label = "dev.warren.snapshot.processes"
    img = {"digest": "sha256:" + "b" * 64, "config": {"labels": {label: "sha256:" + "c" * 64}}}

    def handler(req):
        if req.url.path.endswith("/snapshot"):
            return httpx.Response(201, json=img)
        if req.url.path.endswith("/fork"):
            return httpx.Response(201, json={"snapshot": img, "sandboxes": [SB]})
        return httpx.Response(201 if req.url.path == "/v1/sandboxes" else 200, json=SB)
    rec = fake(handler)
    sb = warren.Sandbox.create("snap:1", processes=False, socket="/nonexistent")
    assert json.loads(rec.requests[-1].content)["processes"] is False
    warren.Sandbox.create("snap:1", socket="/nonexistent")
    assert "processes" not in json.loads(rec.requests[-1].content)
    info = sb.snapshot("s:1", processes=True)
    assert json.loads(rec.requests[-1].content) == {"name": "s:1", "processes": True}
    assert info.processes == "sha256:" + "c" * 64 and info.labels[label] == info.processes
    sb.snapshot("s:2")
    assert json.loads(rec.requests[-1].content) == {"name": "s:2"}
    kids = sb.fork(2, processes=True, memory_mb=64)
    assert json.loads(rec.requests[-1].content) == {"count": 2, "processes": True,
                                                    "memory_mb": 64}
    assert len(kids) == 1
    n = len(rec.requests)
    for bad in (lambda: sb.snapshot(processes=1), lambda: sb.fork(processes="yes"),
                lambda: warren.Sandbox.create("snap:1", processes="no",
                                              socket="/nonexistent")):
        with pytest.raises(TypeError, match="processes"):
            bad()
    assert len(rec.requests) == n
