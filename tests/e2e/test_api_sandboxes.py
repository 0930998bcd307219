"""Sandbox routes: create, get, list, kill, timeout, events, health, metrics;
lifetimes enforced by the daemon."""
import os
import re
import time
import uuid
from datetime import datetime
from pathlib import Path


def ts(s):
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ")


def wait_state(c, sid, want, limit=15):
    deadline = time.time() + limit
    while time.time() < deadline:
        st = c.get(f"/v1/sandboxes/{sid}").json()["state"]
        if st == want:
            return time.time()
        time.sleep(0.1)
    raise AssertionError(f"{sid} not {want} after {limit}s (is {st})")


def test_create_get_kill(api):
    r = api.post("/v1/sandboxes", {
        "image": "busybox", "cpu": 1.5, "memory_mb": 256, "disk_mb": 64, "pids": 100,
        "env": {"LANG": "C.UTF-8", "GREETING": "hello"}, "workdir": "/tmp", "user": 1000,
        "labels": {"job": "rl-42", "task": "7"}, "timeout": 3600, "idle_timeout": 600,
        "on_timeout": "kill"})
    assert r.status == 201, r
    sb = r.json()
    assert re.fullmatch(r"[0-9a-f]{16}", sb["id"])
    assert sb["state"] == "running" and sb["tier"] == "container" and sb["image"] == "busybox"
    assert (sb["cpu"], sb["memory_mb"], sb["disk_mb"], sb["pids"]) == (1.5, 256, 64, 100)
    assert sb["user"] == 1000 and sb["workdir"] == "/tmp"
    assert sb["labels"] == {"job": "rl-42", "task": "7"}
    assert sb["idle_timeout"] == 600 and sb["on_timeout"] == "kill"
    life = (ts(sb["expires_at"]) - ts(sb["created_at"])).total_seconds()
    assert abs(life - 3600) < 0.01
    assert "env" not in sb  # may hold secrets: never echoed
    sid = sb["id"]
    got = api.get(f"/v1/sandboxes/{sid}").json()
    assert "cpu_s" in got.pop("usage")  # GET of a live sandbox adds its usage
    assert got == sb
    # the spec is in force inside
    out = api.run(sid, "id -u; pwd; echo $GREETING; cat /sys/fs/cgroup/pids.max 2>/dev/null"
                  " || true")
    lines = out["stdout"].split("\n")
    assert lines[:3] == ["1000", "/tmp", "hello"], out
    assert api.kill(sid).status == 204
    got = api.get(f"/v1/sandboxes/{sid}").json()
    assert got["state"] == "killed"
    listed = api.get("/v1/sandboxes?state=killed&label=job=rl-42&label=task=7").json()
    assert sid in [x["id"] for x in listed["sandboxes"]]
    assert sid not in [x["id"] for x in api.get(
        "/v1/sandboxes?state=running&label=job=rl-42").json()["sandboxes"]]


def test_defaults(api):
    sb = api.post("/v1/sandboxes", {"image": "busybox"}).json()
    try:
        assert (sb["memory_mb"], sb["disk_mb"], sb["pids"], sb["user"], sb["workdir"]) == (
            512, 1024, 512, 0, "/")
        assert sb["cpu"] == 0 and sb["labels"] == {} and sb["idle_timeout"] == 0
        life = (ts(sb["expires_at"]) - ts(sb["created_at"])).total_seconds()
        assert abs(life - 300) < 0.01
    finally:
        api.kill(sb["id"])


def test_erofs_image(api, warrend):
    sid = api.create(image="busybox-erofs")
    want = (warrend.images / "busybox/etc/hostname").read_text()
    try:
        assert api.run(sid, ["cat", "/etc/hostname"])["stdout"] == want
    finally:
        api.kill(sid)


def test_list_filters_order_and_pages(api, alice):
    run = uuid.uuid4().hex[:8]
    ids = [api.create(labels={"run": run, "n": str(i), "even": str(i % 2 == 0).lower()})
           for i in range(5)]
    try:
        other = alice.create(labels={"run": run})
        got = api.get(f"/v1/sandboxes?label=run={run}").json()
        assert [s["id"] for s in got["sandboxes"]] == ids  # creation order
        assert "next_page_token" not in got
        evens = api.get(f"/v1/sandboxes?label=run={run}&label=even=true").json()["sandboxes"]
        assert [s["id"] for s in evens] == ids[0::2]
        # pages of 2: 2, 2, 1, the last without a token
        seen, token, pages = [], None, 0
        while True:
            q = f"/v1/sandboxes?label=run={run}&limit=2" + (f"&page_token={token}" if token else "")
            page = api.get(q).json()
            pages += 1
            seen += [s["id"] for s in page["sandboxes"]]
            token = page.get("next_page_token")
            if not token:
                break
        assert seen == ids and pages == 3
        api.kill(ids[1])
        running = api.get(f"/v1/sandboxes?label=run={run}&state=running").json()["sandboxes"]
        assert [s["id"] for s in running] == ids[:1] + ids[2:]
        killed = api.get(f"/v1/sandboxes?label=run={run}&state=killed").json()["sandboxes"]
        assert [s["id"] for s in killed] == [ids[1]]
        # alice's sandbox with the same label is hers alone
        assert [s["id"] for s in alice.get(f"/v1/sandboxes?label=run={run}").json()[
            "sandboxes"]] == [other]
        alice.kill(other)
    finally:
        for sid in ids:
            api.kill(sid)


def test_set_timeout_extends_and_shortens(api):
    sid = api.create(timeout=60)
    r = api.post(f"/v1/sandboxes/{sid}/timeout", {"timeout": 900})
    assert r.status == 200, r
    sb = r.json()
    left = (ts(sb["expires_at"]) - datetime.utcnow()).total_seconds()
    assert 890 < left <= 900
    assert api.get(f"/v1/sandboxes/{sid}").json()["expires_at"] == sb["expires_at"]
    t0 = time.time()
    api.post(f"/v1/sandboxes/{sid}/timeout", {"timeout": 1})
    t1 = wait_state(api, sid, "timed_out")
    assert 0.8 < t1 - t0 < 4


def test_lifetime_enforced_by_the_daemon(api):
    t0 = time.time()
    sid = api.create(timeout=2)
    # a command that would outlive the sandbox is cut short by its end
    out = api.run(sid, ["sleep", "30"])
    t1 = time.time()
    assert out["reason"] == "killed", out
    assert 1.5 < t1 - t0 < 5
    wait_state(api, sid, "timed_out", limit=5)
    ev = [e["type"] for e in api.get(f"/v1/sandboxes/{sid}/events").json()["events"]]
    assert ev[0] == "created" and "timeout" in ev
    r = api.post(f"/v1/sandboxes/{sid}/commands", {"cmd": ["true"]})
    assert r.status == 409 and r.error == ("conflict", None)


def test_idle_timeout(api):
    # on_idle "kill" (the default pauses: test_lifecycle.py)
    sid = api.create(idle_timeout=2, timeout=600, on_idle="kill")
    # activity keeps it alive past its idle timeout
    for _ in range(4):
        time.sleep(0.8)
        assert api.get(f"/v1/sandboxes/{sid}/commands").status == 200
    assert api.get(f"/v1/sandboxes/{sid}").json()["state"] == "running"
    t0 = time.time()
    t1 = wait_state(api, sid, "timed_out", limit=6)
    assert 1.5 < t1 - t0 < 4
    detail = [e for e in api.get(f"/v1/sandboxes/{sid}/events").json()["events"]
              if e["type"] == "timeout"][0]["detail"]
    assert detail == {"reason": "idle"}


def test_pid1_killed_from_outside_is_failed(api):
    sid = api.create()
    # PID 1's host pid: the warren-init in the sandbox's init cgroup
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cg = (p / "cgroup").read_text()
                comm = (p / "comm").read_text().strip()
            except OSError:
                continue
            # PID 1 is warren-init in the sandbox's own cgroup (or its init
            # leaf); commands live in cmd-N leaves
            if comm == "warren-init" and (f"/{sid}\n" in cg or f"/{sid}/init\n" in cg):
                os.kill(int(p.name), 9)
                break
    else:
        raise AssertionError("PID 1 not found")
    wait_state(api, sid, "failed", limit=5)
    ev = api.get(f"/v1/sandboxes/{sid}/events").json()["events"]
    assert ev[-1]["type"] == "failed"


def test_events_order_and_since(api):
    sid = api.create()
    try:
        api.run(sid, ["true"])
        api.run(sid, ["false"])
        evs = api.get(f"/v1/sandboxes/{sid}/events").json()["events"]
        assert [e["type"] for e in evs] == ["created", "command_started", "command_finished",
                                           "command_started", "command_finished"]
        assert [e["seq"] for e in evs] == [1, 2, 3, 4, 5]
        assert evs[4]["detail"]["exit_code"] == 1 and evs[4]["detail"]["id"] == "c2"
        assert all(ts(a["time"]) <= ts(b["time"]) for a, b in zip(evs, evs[1:]))
        tail = api.get(f"/v1/sandboxes/{sid}/events?since=3&limit=1").json()["events"]
        assert [e["seq"] for e in tail] == [4]
    finally:
        api.kill(sid)
    assert api.get(f"/v1/sandboxes/{sid}/events?since=5").json()["events"][0]["type"] == "killed"


def test_health_and_metrics(api):
    h = api.get("/v1/health").json()
    assert h["status"] == "ok" and h["version"] == "0.1.0" and isinstance(h["sandboxes"], int)
    sid = api.create()
    api.run(sid, ["true"])
    api.kill(sid)
    r = api.get("/metrics")
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
    text = r.body.decode()
    for name in ("warren_sandboxes{", "warren_sandbox_creates_total ",
                 "warren_sandbox_create_seconds_bucket{", "warren_command_seconds_count ",
                 'warren_api_errors_total{code="conflict"}',
                 'warren_api_requests_total{route="/v1/sandboxes"}'):
        assert name in text, name
    val = dict(re.findall(r'^(warren_\S+) (\S+)$', text, re.M))
    assert int(val["warren_sandbox_creates_total"]) >= 1
    assert int(val['warren_sandboxes{tier="container",state="killed"}']) >= 1
    assert int(val["warren_command_seconds_count"]) >= 1


def test_keep_alive_reuses_one_connection(api):
    api.get("/v1/health")
    sock = api.conn.sock
    for _ in range(20):
        assert api.get("/v1/health").status == 200
    assert api.conn.sock is sock
