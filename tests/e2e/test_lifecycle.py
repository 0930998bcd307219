"""Pause and resume (the cgroup freezer): state kept, processes frozen and
going on from where they were, auto-resume by calls that need the sandbox
running, the lifetime clock stopped while paused, kill of a paused sandbox,
idleness pausing (or killing), and the daemon crashing around a pause."""
import errno
import time

from lifecycle_util import (count, events, frozen, init_pid, pause, resume, soft_limit,
                            start_counter, state, unified_dir, wait_state)


def test_pause_resume_keeps_files_and_processes(api, warrend):
    sid = api.create()
    api.run(sid, ["sh", "-c", "echo kept > /tmp/file"])
    cid = start_counter(api, sid)
    pid1 = init_pid(sid)
    t0 = time.time()
    sb = pause(api, sid)
    print(f"pause {1000 * (time.time() - t0):.1f} ms")
    assert sb["state"] == "paused" and sb["pause_reason"] == "request", sb
    assert sb["expires_at"] is None and 295 < sb["timeout_remaining"] <= 300, sb
    assert frozen(warrend, sid)
    # its memory is the first the kernel reclaims while it is paused (v1)
    assert soft_limit(warrend, sid) in (0, None)
    # frozen: the counter stands still while paused
    c1 = count(sid, pid1)
    time.sleep(0.6)
    assert count(sid, pid1) == c1
    assert state(api, sid) == "paused"
    # pausing again is a no-op; GET, list and events do not resume it
    assert pause(api, sid)["state"] == "paused"
    r = api.get("/v1/sandboxes?state=paused")
    assert sid in [s["id"] for s in r.json()["sandboxes"]]
    assert api.get(f"/v1/sandboxes/{sid}/commands").status == 200
    assert state(api, sid) == "paused"
    sb = resume(api, sid)
    assert sb["state"] == "running" and sb["expires_at"] and "pause_reason" not in sb, sb
    assert not frozen(warrend, sid)
    limit = soft_limit(warrend, sid)
    assert limit is None or limit > 1 << 50
    # the same process counts on from where it was
    time.sleep(0.3)
    c2 = count(sid, pid1)
    assert c1 < c2 < c1 + 40, (c1, c2)
    cmd = api.get(f"/v1/sandboxes/{sid}/commands/{cid}").json()
    assert cmd["state"] == "running", cmd
    assert api.run(sid, ["cat", "/tmp/file"])["stdout"] == "kept\n"
    assert resume(api, sid)["state"] == "running"  # no-op
    types = [e["type"] for e in events(api, sid)]
    assert types.count("paused") == 1 and types.count("resumed") == 1, types
    ev = [e for e in events(api, sid) if e["type"] == "resumed"][0]["detail"]
    assert ev["reason"] == "request" and ev["paused_reason"] == "request", ev
    assert api.kill(sid).status == 204


def test_auto_resume_on_exec_files_and_wait(api, warrend):
    sid = api.create()
    start_counter(api, sid)
    pause(api, sid)
    out = api.run(sid, ["sh", "-c", "cat /tmp/count"])
    assert out["exit_code"] == 0 and int(out["stdout"]) > 0
    assert state(api, sid) == "running"
    ev = [e for e in events(api, sid) if e["type"] == "resumed"][-1]["detail"]
    assert ev["reason"] == "auto", ev
    # files: read, write, stat
    pause(api, sid)
    r = api.get(f"/v1/sandboxes/{sid}/files?path=/tmp/count")
    assert r.status == 200 and int(r.body) > 0
    assert state(api, sid) == "running"
    pause(api, sid)
    r = api.put(f"/v1/sandboxes/{sid}/files?path=/tmp/up", b"data")
    assert r.status == 200, r
    assert state(api, sid) == "running"
    pause(api, sid)
    assert api.get(f"/v1/sandboxes/{sid}/files/stat?path=/tmp/up").status == 200
    assert state(api, sid) == "running"
    # waiting on a command of a paused sandbox resumes it (it would never end)
    r = api.post(f"/v1/sandboxes/{sid}/commands",
                 {"cmd": ["sh", "-c", "sleep 0.3; echo done"], "background": True})
    cid = r.json()["id"]
    pause(api, sid)
    w = api.get(f"/v1/sandboxes/{sid}/commands/{cid}/wait?timeout=10").json()
    assert w["state"] == "finished" and w["stdout"] == "done\n", w
    assert api.kill(sid).status == 204


def test_paused_time_does_not_count(api):
    sid = api.create(timeout=3)
    pause(api, sid)
    time.sleep(3.5)
    sb = api.get(f"/v1/sandboxes/{sid}").json()
    assert sb["state"] == "paused" and 2.5 < sb["timeout_remaining"] <= 3, sb
    t0 = time.time()
    sb = resume(api, sid)
    assert sb["state"] == "running"
    # it has the ~3 s it had left, no more
    t1 = wait_state(api, sid, "timed_out", limit=8)
    assert 2.0 < t1 - t0 < 5, t1 - t0
    # set-timeout while paused sets the time left
    sid = api.create(timeout=300)
    pause(api, sid)
    r = api.post(f"/v1/sandboxes/{sid}/timeout", {"timeout": 1})
    assert r.status == 200 and r.json()["timeout_remaining"] == 1.0, r
    time.sleep(1.5)
    assert state(api, sid) == "paused"
    resume(api, sid)
    wait_state(api, sid, "timed_out", limit=5)
    # resume with a new lifetime, as E2B's connect(timeout)
    sid = api.create(timeout=300)
    pause(api, sid)
    sb = resume(api, sid, timeout=1)
    wait_state(api, sid, "timed_out", limit=5)


def cg_empty_or_gone(cg):
    """No process in cgroup cg, or cg removed (also while its removal is
    under way: its files then answer ENODEV)."""
    try:
        return (cg / "cgroup.procs").read_text() == ""
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENODEV):
            return True
        raise


def test_kill_paused(api, warrend):
    sid = api.create()
    start_counter(api, sid)
    api.post(f"/v1/sandboxes/{sid}/commands", {"cmd": "sleep 1000 & sleep 1000", "background": True})
    pause(api, sid)
    cg = unified_dir(warrend, sid)
    assert api.kill(sid).status == 204
    assert state(api, sid) == "killed"
    assert cg_empty_or_gone(cg)
    assert pause(api, sid, expect=409)["error"]["code"] == "conflict"
    assert resume(api, sid, expect=409)["error"]["code"] == "conflict"


def test_pause_errors(api, alice):
    sid = api.create()
    r = api.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": "no"})
    assert r.status == 400 and r.error == ("invalid_argument", "keep_memory"), r
    r = api.post(f"/v1/sandboxes/{sid}/pause", {"bogus": 1})
    assert r.status == 400 and r.error == ("invalid_argument", "bogus"), r
    r = api.post(f"/v1/sandboxes/{sid}/resume", {"timeout": 0})
    assert r.status == 400 and r.error == ("invalid_argument", "timeout"), r
    # another tenant's sandbox does not exist for it
    assert alice.post(f"/v1/sandboxes/{sid}/pause").status == 404
    assert alice.post(f"/v1/sandboxes/{sid}/resume").status == 404
    assert api.post("/v1/sandboxes/0123456789abcdef/pause").status == 404
    assert api.get(f"/v1/sandboxes/{sid}/pause").status == 405
    for bad in ({"on_idle": "sleep"}, {"on_timeout": "explode"}, {"on_idle": 3}):
        r = api.post("/v1/sandboxes", dict(image="busybox", **bad))
        assert r.status == 400 and r.error == ("invalid_argument", list(bad)[0]), r
    assert api.kill(sid).status == 204


def test_idle_pauses_and_next_call_resumes(api):
    sid = api.create(idle_timeout=1, timeout=600)
    sb = api.get(f"/v1/sandboxes/{sid}").json()
    assert sb["on_idle"] == "pause" and sb["lease"] is None, sb
    t0 = time.time()
    t1 = wait_state(api, sid, "paused", limit=8)
    assert 0.8 < t1 - t0 < 4, t1 - t0
    sb = api.get(f"/v1/sandboxes/{sid}").json()
    assert sb["pause_reason"] == "idle", sb
    assert api.run(sid, ["echo", "hi"])["stdout"] == "hi\n"
    assert state(api, sid) == "running"
    # idle again later
    wait_state(api, sid, "paused", limit=8)
    assert api.kill(sid).status == 204


def test_idle_counts_cpu_use(api):
    # no API call, but a busy process: not idle
    sid = api.create(idle_timeout=1, timeout=600)
    api.post(f"/v1/sandboxes/{sid}/commands",
             {"cmd": "while :; do :; done", "background": True})
    time.sleep(3.5)
    assert state(api, sid) == "running"
    assert api.kill(sid).status == 204


def test_idle_kill_and_timeout_pause(api):
    sid = api.create(idle_timeout=1, on_idle="kill", timeout=600)
    wait_state(api, sid, "timed_out", limit=8)
    detail = [e for e in events(api, sid) if e["type"] == "timeout"][0]["detail"]
    assert detail == {"reason": "idle"}
    # on_timeout pause: the end of its lifetime pauses it; a resume gives it
    # a fresh lifetime
    sid = api.create(timeout=1, on_timeout="pause")
    wait_state(api, sid, "paused", limit=6)
    sb = api.get(f"/v1/sandboxes/{sid}").json()
    assert sb["pause_reason"] == "timeout" and sb["timeout_remaining"] == 0, sb
    assert api.run(sid, ["true"])["exit_code"] == 0
    wait_state(api, sid, "paused", limit=6)
    assert api.kill(sid).status == 204


def test_restart_while_paused(fresh_daemon):
    d = fresh_daemon().start()
    c = d.client()
    sid = c.create()
    c.run(sid, ["sh", "-c", "echo kept > /tmp/file"])
    start_counter(c, sid)
    pause(c, sid)
    pid1 = init_pid(sid)
    c1 = count(sid, pid1)
    c.close()
    d.kill9()
    time.sleep(0.5)
    assert count(sid, pid1) == c1  # still frozen without a daemon
    d.start()
    c = d.client()
    sb = c.get(f"/v1/sandboxes/{sid}").json()
    assert sb["state"] == "paused" and sb["pause_reason"] == "request", sb
    time.sleep(0.3)
    assert count(sid, pid1) == c1
    resume(c, sid)
    time.sleep(0.3)
    assert count(sid, pid1) > c1
    assert c.run(sid, ["cat", "/tmp/file"])["stdout"] == "kept\n"
    assert c.kill(sid).status == 204
    c.close()


def test_crash_mid_pause_and_mid_resume(fresh_daemon):
    """The two steps of each are freeze/thaw, then the commit: a crash
    between them leaves the old state after the restart."""
    d = fresh_daemon().start()
    c = d.client()
    a = c.create()  # crash after the freeze of a pause, before its commit
    b = c.create()  # crash after the thaw of a resume, before its commit
    start_counter(c, a)
    start_counter(c, b)
    pause(c, b)
    c.close()
    d.kill9()
    (unified_dir(d, a) / "cgroup.freeze").write_text("1")
    (unified_dir(d, b) / "cgroup.freeze").write_text("0")
    d.start()
    c = d.client()
    assert state(c, a) == "running" and not frozen(d, a)
    n = count(a)
    time.sleep(0.3)
    assert count(a) > n
    assert state(c, b) == "paused" and frozen(d, b)
    n = count(b)
    time.sleep(0.3)
    assert count(b) == n
    assert c.run(b, ["true"])["exit_code"] == 0  # resumable
    assert state(c, b) == "running"
    for sid in (a, b):
        assert c.kill(sid).status == 204
    c.close()


def test_usage_and_metrics(api):
    """Requested vs used CPU and memory: GET of a live sandbox and /metrics."""
    sid = api.create(cpu=0.5, memory_mb=64)
    api.run(sid, ["sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"])
    sb = api.get(f"/v1/sandboxes/{sid}").json()
    u = sb["usage"]
    assert sb["cpu"] == 0.5 and sb["memory_mb"] == 64
    assert u["cpu_s"] > 0.05 and 0 < u["memory_bytes"] <= 64 << 20, u
    assert u["memory_peak_bytes"] >= u["memory_bytes"] and u["pids"] >= 1, u
    pause(api, sid)
    assert "usage" in api.get(f"/v1/sandboxes/{sid}").json()  # paused: still live
    m = api.get("/metrics").body.decode()
    line = [x for x in m.splitlines()
            if x.startswith(f'warren_sandbox_cpu_seconds_total{{id="{sid}"')]
    assert line and float(line[0].split()[-1]) > 0.05, line
    assert f'warren_sandbox_cpu_requested_cores{{id="{sid}",tenant="default"}} 0.5' in m
    assert (f'warren_sandbox_memory_requested_bytes{{id="{sid}",tenant="default"}} '
            f'{64 << 20}') in m
    assert 'warren_sandboxes{tier="container",state="paused"}' in m
    assert 'warren_sandbox_pauses_total{reason="request"}' in m
    assert 'warren_leases{state="active"}' in m
    assert "warren_node_cpu_requested_cores" in m and "warren_node_pressure{" in m
    assert api.kill(sid).status == 204
    assert "usage" not in api.get(f"/v1/sandboxes/{sid}").json()  # not live


def test_kill9_during_pause_resume_storm(fresh_daemon):
    """A real crash at a random point of many pauses and resumes in flight:
    after the restart every sandbox's record and freezer agree (running and
    thawed, or paused and frozen) and every one answers a command."""
    import random
    import threading

    from conftest import Client
    d = fresh_daemon().start()
    c = d.client()
    sids = [c.create() for _ in range(4)]
    c.close()
    stop = threading.Event()

    def storm(sid):
        cl = Client(d, timeout=10)
        try:
            while not stop.is_set():
                cl.post(f"/v1/sandboxes/{sid}/pause")
                cl.post(f"/v1/sandboxes/{sid}/resume")
        except Exception:
            pass  # the daemon went away under us
        finally:
            cl.close()

    threads = [threading.Thread(target=storm, args=(s,)) for s in sids]
    for t in threads:
        t.start()
    time.sleep(random.uniform(0.3, 0.9))
    d.kill9()
    stop.set()
    for t in threads:
        t.join()
    d.start()
    print([x for x in d.log_text().splitlines() if "interrupted" in x])
    c = d.client()
    for sid in sids:
        st = state(c, sid)
        assert st in ("running", "paused"), st
        assert frozen(d, sid) == (st == "paused"), (sid, st)
        assert c.run(sid, ["echo", "ok"])["stdout"] == "ok\n"
        assert not frozen(d, sid)
        assert c.kill(sid).status == 204
    c.close()


def test_waiting_on_a_command_holds_idleness_off(api):
    sid = api.create(idle_timeout=1, timeout=600)
    r = api.post(f"/v1/sandboxes/{sid}/commands",
                 {"cmd": ["sh", "-c", "sleep 3; echo done"], "background": True})
    cid = r.json()["id"]
    w = api.get(f"/v1/sandboxes/{sid}/commands/{cid}/wait?timeout=20").json()
    assert w["state"] == "finished" and w["stdout"] == "done\n", w
    assert "paused" not in [e["type"] for e in events(api, sid)]
    wait_state(api, sid, "paused", limit=8)  # idle once nobody waits
    assert api.kill(sid).status == 204
