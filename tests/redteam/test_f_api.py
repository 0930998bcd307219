"""Catalog section F (platform API abuse), the cross-tenant pairs, the
canaries and the host invariants. These run from the host through the API
(column "api") or check the host (column "host")."""
import io
import json
import tarfile
import time
from pathlib import Path

import warren
from conftest import BUILD, enc, kernel_log, sha256_file, tree_digest
from redlib import current_key, expect_event, parse, probe, unesc
from warren._http import ConnectionConfig, SyncHTTP


def read_or_empty(p):
    try:
        return p.read_text()
    except OSError:  # the thread ended meanwhile
        return ""


def api(conn):
    return SyncHTTP(ConnectionConfig.resolve(**conn))


def status(http, method, path, **kw):
    try:
        http.request(method, path, **kw)
        return 200
    except warren.exceptions.WarrenError as e:
        return e.status


def attacks(http, sid):
    """Every route naming sandbox `sid`: status of each."""
    p = f"/sandboxes/{sid}"
    return {
        "get": status(http, "GET", p),
        "exec": status(http, "POST", p + "/commands", json={"cmd": ["true"]}),
        "commands": status(http, "GET", p + "/commands"),
        "file-read": status(http, "GET", p + "/files", params={"path": "/root/secret.txt"}),
        "file-write": status(http, "PUT", p + "/files", params={"path": "/tmp/x"},
                             content=b"x"),
        "file-list": status(http, "GET", p + "/files/list", params={"path": "/"}),
        "tar": status(http, "GET", p + "/files/tar", params={"path": "/root"}),
        "events": status(http, "GET", p + "/events"),
        "timeout": status(http, "POST", p + "/timeout", json={"timeout": 5}),
        "kill": status(http, "DELETE", p),
    }


@probe("f-idor", ["api"])
def test_f_idor(rt, rt_key):
    current_key[0] = rt_key
    t0 = time.time()
    alice = api(rt.alice)
    got = attacks(alice, rt.victim.sandbox_id)
    assert got == {k: 404 for k in got}, got
    # the audit's own query: another tenant's sandbox is not there either
    s = status(alice, "GET", "/events", params={"sandbox": rt.victim.sandbox_id})
    assert s == 404 or not alice.json("GET", "/events",
                                      params={"sandbox": rt.victim.sandbox_id})["events"]
    assert rt.victim.is_running()
    # each API refusal is an event of the api layer
    expect_event(rt, rt.alice, "api", "GET /v1/sandboxes/{id}", since=t0)


@probe("x-cross-tenant")
def test_x_cross_tenant(ctx):
    rt = ctx.rt
    if ctx.container:
        mine = ctx.sandbox()
        # bob attacks alice's sandbox, alice attacks bob's: every route 404
        for attacker, sid in ((rt.bob, mine.sandbox_id), (rt.alice, rt.victim.sandbox_id)):
            got = attacks(api(attacker), sid)
            assert got == {k: 404 for k in got}, (sid, got)
        assert mine.is_running()
    assert rt.victim.is_running()
    # and from inside: none of the other's processes, paths or secrets
    lines = ctx.probe("procwalk")
    assert int(parse(lines[0])[2]["count"]) <= 3, lines
    kv = parse(ctx.probe("hunt", "/", 90, *[enc(t) for t in rt.secrets().values()],
                         timeout=150)[-1])[2]
    assert kv["nhits"] == "0", [unesc(h) for h in kv["hits"].split(",")]


@probe("f-token-steal")
def test_f_token_steal(ctx):
    rt = ctx.rt
    toks = list(rt.secrets().values())
    # through a shell: its environ and cmdline are read too
    r = ctx.run(["sh", "-c", "wr-probe hunt / 90 " + " ".join(enc(t) for t in toks)],
                timeout=150)
    kv = parse(r.stdout.splitlines()[-1])[2]
    assert kv.get("done") == "1" and kv["nhits"] == "0", r.stdout[-500:]
    r = ctx.run(["wr-probe", "read", "/proc/self/environ"])
    assert "read ok" in r.stdout
    env = ctx.run(["env"]).stdout
    assert env and "PATH=" in env
    for name in ("WARREN_", "TOKEN", "API_KEY"):
        assert not [ln for ln in env.splitlines() if ln.startswith(name)], env


@probe("f-path-traversal", ["api"])
def test_f_path_traversal(rt, rt_key):
    with warren.Sandbox.create(image="busybox", timeout=120, **rt.alice) as sb:
        http = api(rt.alice)
        p = f"/sandboxes/{sb.sandbox_id}/files"
        host_passwd = open("/etc/passwd", "rb").read()
        inside = sb.files.read("/etc/passwd", format="bytes")
        assert inside != host_passwd
        for path in ("../../../../../../etc/passwd", "/../../../etc/passwd",
                     "/tmp/../../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd"):
            try:
                got = http.request("GET", p, params={"path": path}).content
                assert got == inside, path  # resolved inside the root
            except warren.exceptions.WarrenError as e:
                assert e.code in ("invalid_argument", "not_found"), (path, e)
        for path in ("/etc/passwd\0", "/tmp/\0../x", ""):
            assert status(http, "GET", p, params={"path": path}) == 400, repr(path)
        # a grader file by absolute host path: the sandbox's root, not the host's
        g = str(rt.grader / "expected_answer.txt")
        assert status(http, "GET", p, params={"path": g}) == 404
        # tar upload: ../, absolute names, a symlink then a file beneath it
        for members in ([("../evil", b"x")], [("/abs", b"x")],
                        [("l", "symlink:/etc"), ("l/passwd", b"x")],
                        [("h", "hardlink:/etc/passwd")],
                        [("h2", "hardlink:../../../../etc/shadow")]):
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as t:
                for name, data in members:
                    ti = tarfile.TarInfo(name)
                    if isinstance(data, str):
                        kind, ti.linkname = data.split(":", 1)
                        ti.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
                        t.addfile(ti)
                    else:
                        ti.size = len(data)
                        t.addfile(ti, io.BytesIO(data))
            s = status(http, "PUT", p + "/tar", params={"path": "/tmp"},
                       content=buf.getvalue())
            assert s == 400, (members, s)
        assert open("/etc/passwd", "rb").read() == host_passwd
        # /proc, /sys and /dev are out of the files API's reach: the daemon
        # thread would otherwise read its own /proc/self (its environ holds
        # a canary) or write host-wide sysctls. Harmless probes only: reads,
        # and a write to the thread's own comm.
        for path in ("/proc/self/environ", "/proc/1/environ", "/proc/self/root/etc/hostname",
                     "/proc/sys/kernel/core_pattern", "/sys/kernel/mm/transparent_hugepage/"
                     "enabled", "/dev/null", "/proc/self/fd/0"):
            try:
                body = http.request("GET", p, params={"path": path}).content
                raise AssertionError(f"files API read {path}: {body[:80]!r}")
            except warren.exceptions.WarrenError as e:
                assert e.status in (400, 404), (path, e)
        for path in ("/proc/self/comm", "/proc/thread-self/comm"):
            s = status(http, "PUT", p, params={"path": path}, content=b"pwned")
            assert s in (400, 404, 409), (path, s)
        # the same through a symlink the sandbox planted towards /proc
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            for name, target in (("p", "/proc/self"), ("q", "../../proc/thread-self")):
                ti = tarfile.TarInfo(name)
                ti.type, ti.linkname = tarfile.SYMTYPE, target
                t.addfile(ti)
        http.request("PUT", p + "/tar", params={"path": "/tmp/links"}, content=buf.getvalue())
        for path in ("/tmp/links/p/comm", "/tmp/links/q/comm", "/tmp/links/p/environ"):
            assert status(http, "PUT", p, params={"path": path}, content=b"pwned") in \
                (400, 404, 409), path
            assert status(http, "GET", p, params={"path": path}) in (400, 404), path
        comms = [read_or_empty(t / "comm") for t in
                 Path(f"/proc/{rt.d.proc.pid}/task").iterdir()]
        assert comms and not [c for c in comms if "pwned" in c], comms


@probe("f-symlink-read", ["api"])
def test_f_symlink_read(rt, rt_key):
    g = str(rt.grader / "expected_answer.txt")
    with warren.Sandbox.create(image="busybox", timeout=120, **rt.alice) as sb:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            for name, target in (("shadow", "/etc/shadow"), ("grader", g),
                                 ("rootlink", "/proc/self/root/etc/passwd"),
                                 ("up", "../../../../../../" + g)):
                ti = tarfile.TarInfo(name)
                ti.type, ti.linkname = tarfile.SYMTYPE, target
                t.addfile(ti)
        http = api(rt.alice)
        p = f"/sandboxes/{sb.sandbox_id}/files"
        http.request("PUT", p + "/tar", params={"path": "/tmp/out"}, content=buf.getvalue())
        for name in ("shadow", "grader", "rootlink", "up"):
            info = sb.files.get_info(f"/tmp/out/{name}")
            assert info.type == "symlink", info  # the link is really there
            # resolved inside the root, where nothing is there: 404 (or 400
            # for the magic link), never a host byte
            s = status(http, "GET", p, params={"path": f"/tmp/out/{name}"})
            assert s in (400, 404), (name, s)
        # the download carries links as links, never what they point to
        data = http.request("GET", p + "/tar", params={"path": "/tmp/out"}).content
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            for m in t.getmembers():
                assert m.issym() or m.isdir(), m.name
        rt.check_output("f-symlink-read download", data)


@probe("f-log-inject")
def test_f_log_inject(ctx):
    chunks = []
    r = ctx.run(["wr-probe", "inject"], on_stdout=chunks.append) if ctx.container else \
        ctx.run(["wr-probe", "inject"])
    assert r.reason == "exited" and r.exit_code == 0, r
    # the fake lines arrive as data, byte for byte, and nothing else ended
    assert '{"type":"exit","exit_code":0' in r.stdout and "\x00NUL\x00" in r.stdout
    assert "\x1b[2J" in r.stdout and r.stdout == r.stderr
    if ctx.container:
        assert "".join(chunks) == r.stdout
        assert ctx.sb.is_running()
        types = [e.type for e in ctx.sb.events()]
        assert "killed" not in types and types.count("command_finished") == len(
            [t for t in types if t == "command_started"]), types


@probe("x-canaries", ["host"])
def test_x_canaries(rt, rt_key):
    """Every output so far was checked as it came; here the canaries are
    still in place (so their absence inside meant something) and a whole
    sandbox tree downloaded from the API holds none of them."""
    assert rt.canaries["host-log"] in rt.logfile.read_text()
    assert rt.canaries["grader"] in (rt.grader / "expected_answer.txt").read_text()
    assert rt.canaries["daemon-env"] in open(f"/proc/{rt.d.proc.pid}/environ",
                                             "rb").read().decode(errors="replace")
    assert rt.canaries["config"].lower() in rt.d.config.read_text()
    assert rt.victim.files.read("/root/secret.txt").strip() == rt.canaries["victim-file"]
    # (every probe output so far was already checked as it arrived)
    with warren.Sandbox.create(image="busybox", timeout=120, **rt.alice) as sb:
        sb.commands.run(["sh", "-c", "cp -r /proc/self/environ /etc /tmp/ 2>/dev/null; true"])
        data = api(rt.alice).request("GET", f"/sandboxes/{sb.sandbox_id}/files/tar",
                                     params={"path": "/"}).content
        assert len(data) > 1 << 20
        rt.check_output("x-canaries tar of /", data)


@probe("x-canaries", ["api"])
def test_x_canaries_in_events(rt, rt_key):
    """What the attacking tenant reads back from the audit about its own
    refusals names nothing of the host: no canary, token or host path.
    (It provokes one refusal of its own: an exec through /proc/self/exe.)"""
    with warren.Sandbox.create(image="busybox", timeout=120, **rt.alice) as sb:
        assert sb.commands.run(["/proc/self/exe"]).reason == "start_failed"
        time.sleep(1.5)  # the audit writes in batches
    ev = api(rt.alice).json("GET", "/events", params={"limit": 1000}) or {}
    assert ev.get("events"), "no events to check (the suite provokes many)"
    rt.check_output("GET /v1/events as alice", json.dumps(ev))


@probe("x-host-invariants", ["host"])
def test_x_host_invariants(rt, rt_key):
    """Run last (file order): nothing the probes did reached the host."""
    assert tree_digest(rt.image_dir) == rt.digests["image-tree"]
    assert sha256_file(rt.image_erofs) == rt.digests["image-erofs"]
    for b in ("warrend", "warren-init", "warren-zygote"):
        assert sha256_file(BUILD / b) == rt.digests[b], b
    _, trouble = kernel_log(rt.kmsg_seq0)
    assert not trouble, trouble[:5]
    assert rt.d.proc.poll() is None, "warrend died"
    grew = rt.daemon_rss_kib() - rt.rss0
    assert grew < 512 * 1024, f"daemon RSS grew {grew} KiB over the suite"
    assert rt.disk_bytes(rt.d.root) < 256 << 20
    # nothing in the host mount table from a sandbox
    mounts = open("/proc/self/mountinfo").read()
    assert rt.d.cg_base not in mounts and "wr-probe" not in mounts
    # (the session's end checks that no cgroup, uid range or process is left)
