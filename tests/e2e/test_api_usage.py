"""A sandbox's usage counts the OOM kills of every command it ran. Each
command runs in a leaf cgroup of its own that goes when it ends, and the
kernel counts an OOM kill in the victim's cgroup alone (cgroup v1's
memory.oom_control; v2's memory.events.local): the daemon reads the leaf's
count before the leaf's rmdir and records it, so the sandbox's count
outlives the command and a restart of the daemon (kill -9 or SIGTERM), and
counts each kill once."""


def usage(c, sid):
    r = c.get(f"/v1/sandboxes/{sid}")
    assert r.status == 200, r
    return r.json()["usage"]


def test_oom_kills_outlive_their_commands_and_restarts(fresh_daemon):
    d = fresh_daemon().start()
    c = d.client()
    sid = c.create(memory_mb=32)
    assert usage(c, sid)["oom_kills"] == 0
    out = c.run(sid, ["wr-probe", "membomb", "128"])
    assert out["reason"] == "oom", out
    # the command ended and its cgroup is gone: the kill is still counted
    u = usage(c, sid)
    assert u["oom_kills"] == 1, u
    # a shell's child taken, the shell then failing: its command says oom
    out = c.run(sid, ["sh", "-c", "wr-probe membomb 128; exit 5"])
    assert out["reason"] == "oom" and out["exit_code"] == 5, out
    assert usage(c, sid)["oom_kills"] == 2
    # commands that do not hit the limit add nothing
    assert c.run(sid, "true")["exit_code"] == 0
    assert usage(c, sid)["oom_kills"] == 2
    c.close()
    d.kill9()
    d.start()
    c = d.client()
    assert usage(c, sid)["oom_kills"] == 2
    c.close()
    assert d.stop() == 0
    d.start()
    c = d.client()
    assert usage(c, sid)["oom_kills"] == 2
    # and the adopted sandbox goes on counting
    out = c.run(sid, ["wr-probe", "membomb", "128"])
    assert out["reason"] == "oom", out
    assert usage(c, sid)["oom_kills"] == 3
    assert c.kill(sid).status == 204
    c.close()
