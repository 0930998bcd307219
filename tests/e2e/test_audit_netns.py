"""Seccomp and Landlock events of a warrend that runs in a network namespace
other than the initial one (issue 7). The kernel multicasts its audit records
only to netlink sockets of the initial namespace, so a socket made in the
daemon's own namespace receives none; warrend makes its audit socket in the
initial one (src/daemon/audit_netns.c). The node is netnode.py's: its
warrend is started by nsenter into the test's "host" namespace, and this
machine does not let it open /proc/1/ns/net."""
import os
import time

import pytest
from netnode import probe


def wait_events(c, query, pred, timeout=10):
    deadline = time.time() + timeout
    while True:
        r = c.get(f"/v1/events?{query}")
        assert r.status == 200, r
        ev = r.json()["events"]
        if pred(ev) or time.time() > deadline:
            return ev
        time.sleep(0.1)


def test_daemon_in_a_netns_gets_seccomp_and_landlock_events(napi, netd):
    # the case this is about: the daemon's namespace is not ours (the
    # initial one)
    assert (os.stat(f"/proc/{netd.proc.pid}/ns/net").st_ino
            != os.stat("/proc/self/ns/net").st_ino)
    off = napi.create()
    on = napi.create(network={"mode": "open"})
    try:
        for sid in (off, on):
            assert probe(napi, sid, "sys", "keyctl").startswith("keyctl errno=EPERM")
            assert "errno=EPERM" in probe(napi, sid, "socket", "raw4")
            # PID 1 (warren-init) is outside the command's Landlock domain
            assert probe(napi, sid, "kill", "1", "TERM").startswith("kill errno=EPERM")
            ev = wait_events(napi, f"sandbox={sid}&layer=seccomp",
                             lambda e: {x["action"] for x in e} >= {"keyctl", "socket"})
            got = {x["action"]: x for x in ev}
            assert {"keyctl", "socket"} <= set(got), (sid, ev)
            assert got["socket"]["what"]["errno"] == "EPERM", ev
            assert got["keyctl"]["process"]["comm"] == "wr-probe", ev
            ev = wait_events(napi, f"sandbox={sid}&layer=landlock",
                             lambda e: any(x["action"] == "scope.signal" for x in e))
            sig = [x for x in ev if x["action"] == "scope.signal"]
            assert sig and sig[0]["what"]["target_comm"] == "warren-init", (sid, ev)
    finally:
        napi.kill(off)
        napi.kill(on)


def test_configured_initial_namespace_is_used(fresh_netd):
    """audit.init_netns names the initial namespace (here: this test's
    own, by /proc/<pid>/ns/net); "listen" would fail the start without it
    if it were wrong (below)."""
    d = fresh_netd(extra={"audit": {"kernel_audit": "listen",
                                    "init_netns": f"/proc/{os.getpid()}/ns/net"}}).start()
    c = d.client()
    sid = c.create()
    try:
        assert probe(c, sid, "sys", "keyctl").startswith("keyctl errno=EPERM")
        ev = wait_events(c, f"sandbox={sid}&layer=seccomp", lambda e: e)
        assert [x["action"] for x in ev] == ["keyctl"], ev
    finally:
        c.kill(sid)
        c.close()


def test_a_wrong_initial_namespace_fails_the_start(fresh_netd):
    d = fresh_netd(extra={"audit": {"kernel_audit": "listen",
                                    "init_netns": "/etc/hostname"}})
    with pytest.raises(AssertionError):
        d.start()
    d.proc.wait(timeout=30)
    assert d.proc.returncode != 0
    assert "audit.init_netns: /etc/hostname is not a network namespace" in d.log_text()
    d.proc = None
