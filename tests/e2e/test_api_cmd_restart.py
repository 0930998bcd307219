"""Background commands across a daemon restart (kill -9 and SIGTERM): the
handles of an adopted sandbox are still listed; a command that still runs
can be waited for (its exit code comes from a pidfd) and killed (its whole
tree); one that ended while no daemon ran says its exit is unknowable; the
output of before the restart is documented as not available."""
import time


def bg(c, sid, cmd, long=True):
    r = c.post(f"/v1/sandboxes/{sid}/commands", {"cmd": cmd, "background": True})
    assert r.status == 201, r
    d = r.json()
    if long:  # the answer comes once it runs: with its pid in the sandbox
        assert d["state"] == "running" and d["pid"] > 0, d
    return d["id"], d["pid"]


def listed(c, sid):
    r = c.get(f"/v1/sandboxes/{sid}/commands")
    assert r.status == 200, r
    return {x["id"]: x for x in r.json()["commands"]}


def test_commands_survive_kill_9(fresh_daemon):
    d = fresh_daemon().start()
    c = d.client()
    sid = c.create()
    done_id, _ = bg(c, sid, "echo before; exit 3", long=False)
    w = c.get(f"/v1/sandboxes/{sid}/commands/{done_id}/wait?timeout=30").json()
    assert w["exit_code"] == 3 and w["stdout"] == "before\n", w
    # exits on its own after the restart, with a code the daemon can learn
    c.run(sid, "mkfifo /tmp/go")
    late_id, late_pid = bg(c, sid, ["sh", "-c", "read x < /tmp/go; exit 7"])
    # killed through the API after the restart, tree included
    tree_id, _ = bg(c, sid, "sleep 600 & sleep 600")
    # ends while no daemon runs: its exit is unknowable
    gap_id, _ = bg(c, sid, "sleep 1")
    c.close()
    d.kill9()
    time.sleep(1.5)  # gap_id ends meanwhile
    d.start()
    c = d.client()
    cmds = listed(c, sid)
    assert set(cmds) >= {done_id, late_id, tree_id, gap_id}, cmds
    for x in cmds.values():
        assert x["output_available"] is False and x["background"] is True, x
    assert cmds[done_id]["state"] == "finished" and cmds[done_id]["exit_code"] == 3
    assert cmds[late_id]["state"] == "running" and cmds[tree_id]["state"] == "running"
    g = c.get(f"/v1/sandboxes/{sid}/commands/{gap_id}").json()
    assert g["state"] == "finished", g
    # known while nobody reaped it yet (a zombie of the same start time),
    # else said to be unknowable
    if g["exit_code"] is None:
        assert g["reason"] == "daemon_restarted", g
    else:
        assert g["exit_code"] == 0 and g["reason"] == "exited", g
    got = c.get(f"/v1/sandboxes/{sid}/commands/{late_id}").json()
    assert got["pid"] == late_pid, got
    # the running one: wait sees its real exit
    c.run(sid, "echo go > /tmp/go")
    w = c.get(f"/v1/sandboxes/{sid}/commands/{late_id}/wait?timeout=30").json()
    assert w["state"] == "finished" and w["exit_code"] == 7 and w["reason"] == "exited", w
    assert w["stdout"] == "" and w["output_available"] is False, w
    # the other one: killed with its whole tree
    assert c.delete(f"/v1/sandboxes/{sid}/commands/{tree_id}").status == 204
    w = c.get(f"/v1/sandboxes/{sid}/commands/{tree_id}/wait?timeout=30").json()
    assert w["state"] == "finished" and w["reason"] == "killed", w
    # none is left running (the adopted one may stay a zombie until the
    # host's init, its parent since the restart, reaps it)
    live = "cat /proc/[0-9]*/stat 2>/dev/null | grep -c '(sleep) [^Z]' || true"
    deadline = time.time() + 10
    while c.run(sid, live)["stdout"].strip() != "0" and time.time() < deadline:
        time.sleep(0.1)
    assert c.run(sid, live)["stdout"].strip() == "0"
    # its stream ends with the exit line at once
    st, lines = c.ndjson("GET", f"/v1/sandboxes/{sid}/commands/{tree_id}/stream")
    assert st == 200 and lines[-1]["type"] == "exit" and lines[-1]["reason"] == "killed", lines
    # new commands get fresh ids, and everything is remembered by the next start
    new_id, _ = bg(c, sid, "exit 0", long=False)
    assert new_id not in (done_id, late_id, tree_id, gap_id)
    c.get(f"/v1/sandboxes/{sid}/commands/{new_id}/wait?timeout=30")
    c.close()
    assert d.stop() == 0
    d.start()
    c = d.client()
    cmds = listed(c, sid)
    assert cmds[late_id]["exit_code"] == 7 and cmds[tree_id]["reason"] == "killed", cmds
    assert cmds[new_id]["exit_code"] == 0 and cmds[gap_id]["reason"] == g["reason"], cmds
    assert c.kill(sid).status == 204
    c.close()
