"""CRIU for container checkpoints (pause with keep_memory=false): warrend
finds its criu by configuration, runs `criu check` once at start, says in
/v1/health whether checkpointing is available, and refuses keep_memory=false
on a container with the reason."""
import subprocess

from harness import BUILD, Daemon


def criu_check(path):
    try:
        return subprocess.run([path, "check"], capture_output=True, timeout=60).returncode == 0
    except OSError:
        return False


def test_health_reports_the_configured_criu(api):
    ck = api.get("/v1/health").json()["checkpoint"]
    # the default: the build's own warren-criu (scripts/criu-build.sh) when
    # it was built, else an installed one, else Debian's
    built = BUILD / "warren-criu"
    if built.exists():
        assert ck["criu"] == str(built), ck
    assert ck["criu"].startswith("/"), ck
    # the daemon's verdict is criu check's own
    assert ck["available"] == criu_check(ck["criu"]), ck
    assert ("reason" in ck) == (not ck["available"]), ck
    # either way a container's keep_memory=false is refused, saying why
    sid = api.create()
    r = api.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": False})
    assert r.status == 400 and r.error == ("invalid_argument", "keep_memory"), r
    msg = r.json()["error"]["message"]
    if ck["available"]:
        assert "CRIU works on this node" in msg and "Landlock" in msg, msg
    else:
        assert ck["reason"] in msg, msg
    assert api.get(f"/v1/sandboxes/{sid}").json()["state"] == "running"
    assert api.kill(sid).status == 204


def test_unusable_criu_is_reported_and_refused(fresh_daemon, tmp_path):
    bad = tmp_path / "no-such-criu"
    d = fresh_daemon(extra={"criu": str(bad)}).start()
    c = d.client()
    try:
        ck = c.get("/v1/health").json()["checkpoint"]
        assert ck["available"] is False and ck["criu"] == str(bad), ck
        assert str(bad) in ck["reason"] and "No such file" in ck["reason"], ck
        sid = c.create()
        r = c.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": False})
        assert r.status == 400 and r.error == ("invalid_argument", "keep_memory"), r
        msg = r.json()["error"]["message"]
        assert "CRIU" in msg and str(bad) in msg, msg
        # nothing changed: still running, and an in-memory pause works
        assert c.get(f"/v1/sandboxes/{sid}").json()["state"] == "running"
        assert c.post(f"/v1/sandboxes/{sid}/pause").status == 200
        assert c.kill(sid).status == 204
    finally:
        c.close()


def test_failing_criu_check_is_reported(fresh_daemon, tmp_path):
    fake = tmp_path / "criu"
    fake.write_text("#!/bin/sh\necho 'Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area "
                    "bounds' >&2\nexit 1\n")
    fake.chmod(0o755)
    d = fresh_daemon(extra={"criu": str(fake)}).start()
    c = d.client()
    try:
        ck = c.get("/v1/health").json()["checkpoint"]
        assert ck["available"] is False, ck
        assert "criu check" in ck["reason"] and "vDSO area bounds" in ck["reason"], ck
    finally:
        c.close()


def test_bad_criu_config_is_refused(tmp_path):
    d = Daemon(BUILD, tmp_path / "d", "badcriu", extra={"criu": 5})  # never started
    p = subprocess.run([str(d.build / "warrend"), "--config", str(d.config)],
                       capture_output=True, text=True, timeout=60, env=d.env)
    assert p.returncode != 0 and "criu" in p.stderr, p.stderr
