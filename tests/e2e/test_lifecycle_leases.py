"""Leases: a training job's heartbeats keep its sandboxes running; missing
heartbeats pause them, a heartbeat resumes them, expiry applies the policy;
explicit suspend/resume/release; tenant scoping; a daemon restart does not
count its downtime as missed heartbeats."""
import time
import uuid

from lifecycle_util import count, events, start_counter, state, wait_state


def lease(c, expect=201, **body):
    r = c.post("/v1/leases", body)
    assert r.status == expect, r
    return r.json()


def lcall(c, lid, op, expect=200, body=None):
    r = c.post(f"/v1/leases/{lid}/{op}", body)
    assert r.status == expect, r
    return r.json()


def lget(c, lid):
    r = c.get(f"/v1/leases/{lid}")
    assert r.status == 200, r
    return r.json()


def uniq(name):
    return f"{name}-{uuid.uuid4().hex[:8]}"


def test_heartbeats_keep_it_running_then_pause_and_resume(api):
    lid = uniq("job")
    lo = lease(api, id=lid, grace_s=1.5, expire_s=60)
    assert lo["state"] == "active" and lo["grace_s"] == 1.5 and lo["on_expire"] == "kill", lo
    a = api.create(lease=lid)
    b = api.create(lease=lid)
    other = api.create()
    assert api.get(f"/v1/sandboxes/{a}").json()["lease"] == lid
    start_counter(api, a)
    assert lget(api, lid)["sandboxes"] == 2
    # heartbeats for longer than the grace: still running
    for _ in range(5):
        time.sleep(0.5)
        assert lcall(api, lid, "heartbeat")["state"] == "active"
    assert state(api, a) == "running" and state(api, b) == "running"
    # the trainer stops: paused after the grace
    t0 = time.time()
    t1 = wait_state(api, a, "paused", limit=6)
    assert 1.0 < t1 - t0 < 3.5, t1 - t0
    wait_state(api, b, "paused", limit=3)
    assert state(api, other) == "running"
    lo = lget(api, lid)
    assert lo["state"] == "suspended" and lo["suspend_reason"] == "heartbeat", lo
    sb = api.get(f"/v1/sandboxes/{a}").json()
    assert sb["pause_reason"] == "lease", sb
    n = count(a)
    time.sleep(0.3)
    assert count(a) == n
    # the job comes back
    assert lcall(api, lid, "heartbeat")["state"] == "active"
    wait_state(api, a, "running", limit=5)
    wait_state(api, b, "running", limit=5)
    time.sleep(0.2)
    assert count(a) > n
    ev = [e for e in events(api, a) if e["type"] == "resumed"][-1]["detail"]
    assert ev["reason"] == "lease", ev
    lcall(api, lid, "release", body={"sandboxes": "kill"})
    for sid in (a, b):
        assert state(api, sid) == "killed"
    assert api.kill(other).status == 204


def test_explicit_suspend_resume(api):
    lid = uniq("job")
    lease(api, id=lid, grace_s=60, expire_s=600)
    a = api.create(lease=lid)
    # paused on its own request first: the lease's resume leaves it paused
    b = api.create(lease=lid)
    api.post(f"/v1/sandboxes/{b}/pause")
    lo = lcall(api, lid, "suspend")
    # answered once its sandboxes are paused
    assert lo["state"] == "suspended" and lo["suspend_reason"] == "request", lo
    assert state(api, a) == "paused"
    # a heartbeat keeps it from expiring but does not undo a suspend
    assert lcall(api, lid, "heartbeat")["state"] == "suspended"
    time.sleep(0.3)
    assert state(api, a) == "paused"
    # no new sandboxes under a suspended lease
    r = api.post("/v1/sandboxes", {"image": "busybox", "lease": lid})
    assert r.status == 409 and r.error == ("conflict", "lease"), r
    lo = lcall(api, lid, "resume")
    assert lo["state"] == "active", lo
    assert state(api, a) == "running"
    assert state(api, b) == "paused"
    # release keeping the sandboxes: they live on, on their own
    api.post(f"/v1/sandboxes/{b}/resume")
    lcall(api, lid, "suspend")
    lo = lcall(api, lid, "release", body={"sandboxes": "keep"})
    assert lo["state"] == "released" and lo["ended_action"] == "keep", lo
    assert state(api, a) == "running" and state(api, b) == "running"
    assert lcall(api, lid, "heartbeat", expect=409)["error"]["code"] == "conflict"
    r = api.post("/v1/sandboxes", {"image": "busybox", "lease": lid})
    assert r.status == 409 and r.error == ("conflict", "lease"), r
    for sid in (a, b):
        assert api.kill(sid).status == 204


def test_expiry_policies(api):
    ids = {}
    for policy in ("kill", "pause", "snapshot"):
        lid = uniq(f"exp-{policy}")
        lease(api, id=lid, grace_s=0.5, expire_s=1.5, on_expire=policy)
        ids[policy] = (lid, api.create(lease=lid))
    lid, sid = ids["kill"]
    wait_state(api, sid, "killed", limit=8)
    lo = lget(api, lid)
    assert lo["state"] == "expired" and lo["ended_action"] == "kill", lo
    detail = [e for e in events(api, sid) if e["type"] == "killed"][0]["detail"]
    assert detail == {"reason": "lease", "lease": lid}, detail
    # pause, and snapshot of a sandbox that cannot be snapshotted (its
    # image is a configured directory, not a store image): the state is
    # kept, paused (test_lifecycle_snapshot.py has the snapshot that works)
    for policy in ("pause", "snapshot"):
        lid, sid = ids[policy]
        deadline = time.time() + 8
        while lget(api, lid)["state"] != "expired" and time.time() < deadline:
            time.sleep(0.1)
        lo = lget(api, lid)
        assert lo["state"] == "expired" and lo["ended_action"] == policy, lo
        assert state(api, sid) == "paused"
        # it can still be resumed by hand and goes on on its own
        assert api.run(sid, ["true"])["exit_code"] == 0
        time.sleep(0.3)
        assert state(api, sid) == "running"
        assert api.kill(sid).status == 204


def test_lease_errors_and_tenants(api, alice, bob):
    lid = uniq("job")
    r = api.post("/v1/sandboxes", {"image": "busybox", "lease": lid})
    assert r.status == 404 and r.error == ("not_found", "lease"), r
    r = api.post("/v1/sandboxes", {"image": "busybox", "lease": "bad id!"})
    assert r.status == 400 and r.error == ("invalid_argument", "lease"), r
    for body, field in (({"grace_s": 0}, "grace_s"), ({"grace_s": "x"}, "grace_s"),
                        ({"grace_s": 10, "expire_s": 5}, "expire_s"),
                        ({"on_expire": "explode"}, "on_expire"), ({"id": "a/b"}, "id"),
                        ({"bogus": 1}, "bogus"), ({"id": "x" * 64}, "id")):
        r = alice.post("/v1/leases", body)
        assert r.status == 400 and r.error == ("invalid_argument", field), (body, r)
    lo = lease(alice, id=lid)
    assert lease(alice, expect=409, id=lid)["error"]["code"] == "conflict"
    # generated ids
    g = lease(alice)
    assert g["id"].startswith("lease-") and g["state"] == "active", g
    # bob does not see alice's lease, and has a "job" of his own
    assert bob.get(f"/v1/leases/{lid}").status == 404
    assert bob.post(f"/v1/leases/{lid}/heartbeat").status == 404
    r = bob.post("/v1/sandboxes", {"image": "busybox", "lease": lid})
    assert r.status == 404 and r.error == ("not_found", "lease"), r
    lease(bob, id=lid)
    sa = alice.create(lease=lid)
    sb = bob.create(lease=lid)
    assert alice.get(f"/v1/leases/{lid}").json()["sandboxes"] == 1
    lcall(bob, lid, "suspend")
    assert state(bob, sb) == "paused" and state(alice, sa) == "running"
    ids = [x["id"] for x in alice.get("/v1/leases").json()["leases"]]
    assert lid in ids and g["id"] in ids
    assert lo["id"] == lid
    lcall(bob, lid, "release")
    assert state(bob, sb) == "killed" and state(alice, sa) == "running"
    # an ended lease's id can be used again
    lease(bob, id=lid)
    for c in (alice, bob):
        lcall(c, lid, "release")
    lcall(alice, g["id"], "release")
    assert state(alice, sa) == "killed"
    r = alice.post(f"/v1/leases/{lid}/release", {"sandboxes": "maybe"})
    assert r.status == 400 and r.error == ("invalid_argument", "sandboxes"), r


def test_restart_does_not_count_downtime(fresh_daemon):
    d = fresh_daemon().start()
    c = d.client()
    lid = uniq("job")
    lease(c, id=lid, grace_s=2, expire_s=4)
    a = c.create(lease=lid)
    paused = uniq("job")
    lease(c, id=paused, grace_s=60, expire_s=600)
    b = c.create(lease=paused)
    lcall(c, paused, "suspend")
    c.close()
    d.kill9()
    time.sleep(4.5)  # down longer than the grace and the expiry
    d.start()
    c = d.client()
    # a fresh grace from the start, not suspended or expired at once
    lo = lget(c, lid)
    assert lo["state"] == "active", lo
    assert state(c, a) == "running"
    lo = lget(c, paused)
    assert lo["state"] == "suspended" and lo["suspend_reason"] == "request", lo
    assert state(c, b) == "paused"
    # and then the lease works as before: no heartbeat -> paused, expired
    wait_state(c, a, "paused", limit=5)
    wait_state(c, a, "killed", limit=5)
    assert lget(c, lid)["state"] == "expired"
    lcall(c, paused, "resume")
    assert state(c, b) == "running"
    lcall(c, paused, "release")
    assert state(c, b) == "killed"
    c.close()


def test_restart_finishes_a_lease_transition(fresh_daemon):
    """A crash after a lease's suspension was committed but before all its
    sandboxes were paused: the next start pauses the rest."""
    import sqlite3

    from lifecycle_util import frozen, unified_dir
    d = fresh_daemon().start()
    c = d.client()
    lid = uniq("job")
    lease(c, id=lid, grace_s=60, expire_s=600)
    a, b = c.create(lease=lid), c.create(lease=lid)
    lcall(c, lid, "suspend")
    assert state(c, a) == "paused" and state(c, b) == "paused"
    c.close()
    d.kill9()
    # as if the crash came before b's pause: its record running, thawed
    db = sqlite3.connect(str(d.state / "warren.db"))
    db.execute("UPDATE sandboxes SET state = 'running', paused_ms = 0, remaining_ms = 0,"
               " pause_reason = '' WHERE id = ?", (b,))
    db.commit()
    db.close()
    (unified_dir(d, b) / "cgroup.freeze").write_text("0")
    d.start()
    c = d.client()
    wait_state(c, b, "paused", limit=10)
    assert frozen(d, b) and state(c, a) == "paused"
    assert c.get(f"/v1/sandboxes/{b}").json()["pause_reason"] == "lease"
    lcall(c, lid, "release")
    assert state(c, a) == "killed" and state(c, b) == "killed"
    c.close()


def test_keep_memory_false_pauses_to_disk(api, warrend):
    """keep_memory: false: when the trainer stops heartbeating, the lease's
    sandboxes are paused to disk (their memory freed, containers with CRIU);
    one that cannot be (a command running on it) is paused in memory, and
    an event says why; the heartbeat brings both back with their state."""
    from test_lifecycle_suspend_container import REPL, memory_bytes, procs_of, repl
    ck = api.get("/v1/health").json()["checkpoint"]
    lid = uniq("disk")
    lo = lease(api, id=lid, grace_s=1, expire_s=120, keep_memory=False)
    assert lo["keep_memory"] is False, lo
    assert lease(api, expect=400, keep_memory="no")["error"]["field"] == "keep_memory"
    import threading
    from conftest import Client
    stop = threading.Event()

    def trainer():  # heartbeats until the job is "preempted"
        c = Client(warrend)
        try:
            while not stop.wait(0.25):
                lcall(c, lid, "heartbeat")
        finally:
            c.close()
    t = threading.Thread(target=trainer)
    t.start()
    try:
        a = api.create(lease=lid, memory_mb=256)
        b = api.create(lease=lid)
        assert api.run(a, ["sh", "-c", REPL])["stdout"] == "ready\n"
        assert repl(api, a, "x=9; echo $x") == "9\n"
        r = api.post(f"/v1/sandboxes/{b}/commands", {"cmd": ["sleep", "60"],
                                                     "background": True})
        assert r.status == 201, r
        before = memory_bytes(api, a)
    finally:
        stop.set()
        t.join()
    wait_state(api, a, "paused", limit=15)
    wait_state(api, b, "paused", limit=15)
    ev_a = [e for e in events(api, a) if e["type"] == "paused"][-1]["detail"]
    assert ev_a["reason"] == "lease", ev_a
    if ck["available"]:
        assert ev_a["keep_memory"] is False, ev_a
        assert procs_of(warrend, a) == set()
        assert memory_bytes(api, a) < before - (40 << 20)
    kept = [e for e in events(api, b) if e["type"] == "memory_kept"]
    assert kept and kept[-1]["detail"]["lease"] == lid, events(api, b)
    assert lcall(api, lid, "heartbeat")["state"] == "active"
    wait_state(api, a, "running", limit=15)
    wait_state(api, b, "running", limit=15)
    assert repl(api, a, "echo $((x+1))") == "10\n"
    assert lcall(api, lid, "release")["state"] == "released"
