"""The microVM tier through warrend's API (TCG here): the same create, run
and kill as the container tier with tier="microvm". One VM per test: boots
take seconds."""
import os
import time

import pytest


def guest(build):
    g = build / "tests" / "guest"
    k, i = g / "vmlinux", g / "initramfs.cpio"
    if not (k.exists() and i.exists()):
        pytest.fail(f"the guest is not built ({g}); ninja builds it with the tests")
    return {"kernel": str(k), "initrd": str(i)}


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:  # gone meanwhile
        return b""


def test_microvm_create_run_kill(fresh_daemon, build):
    d = fresh_daemon(extra={"microvm": guest(build)}).start()
    c = d.client()
    try:
        r = c.post("/v1/sandboxes", {"tier": "microvm", "image": "busybox-erofs",
                                     "memory_mb": 256, "disk_mb": 64, "timeout": 300,
                                     "env": {"WHO": "vm"}})
        assert r.status == 201, r
        sid = r.json()["id"]
        got = c.get(f"/v1/sandboxes/{sid}").json()
        assert got["tier"] == "microvm" and got["state"] == "running", got
        out = c.run(sid, ["sh", "-c", "echo $WHO; hostname; uname -r; exit 4"])
        assert out["exit_code"] == 4, out
        lines = out["stdout"].splitlines()
        assert lines[0] == "vm" and lines[1] == sid, out
        # its own kernel, not the host's
        assert lines[2] != os.uname().release, out
        # state persists between commands
        c.run(sid, ["sh", "-c", "echo kept > /data"])
        assert c.run(sid, ["cat", "/data"])["stdout"] == "kept\n"
        # files go through the guest's agent (test_api_files.py has the rest)
        r = c.get(f"/v1/sandboxes/{sid}/files?path=/data")
        assert r.status == 200 and r.body == b"kept\n", r
        # a timeout is enforced
        t = c.run(sid, ["sleep", "100"], timeout=1)
        assert t["reason"] == "timeout", t
        qemu = [p for p in os.listdir("/proc") if p.isdigit() and sid.encode() in cmdline(p)]
        assert qemu, "no QEMU process names the sandbox"
        c.kill(sid)
        # destroy follows the answer: QEMU reaped, the VM's files removed
        for _ in range(100):
            if not any(os.path.exists(f"/proc/{p}") for p in qemu) and \
                    not (d.run / "microvm" / sid).exists():
                break
            time.sleep(0.1)
        assert not any(os.path.exists(f"/proc/{p}") for p in qemu), "QEMU outlived the kill"
        assert not (d.run / "microvm" / sid).exists()
        # the first create made the image's template; this one is restored
        # from it and still has its own identity
        tdir = d.run / "microvm-templates"
        made = [p for p in tdir.iterdir() if not p.name.endswith(".lock")]
        assert len(made) == 1 and (made[0] / "meta.json").exists(), made
        t0 = time.monotonic()
        r = c.post("/v1/sandboxes", {"tier": "microvm", "image": "busybox-erofs",
                                     "memory_mb": 256, "disk_mb": 64, "timeout": 300})
        assert r.status == 201, r
        sid2 = r.json()["id"]
        out = c.run(sid2, ["sh", "-c", "hostname; cat /data 2>/dev/null || echo fresh"])
        print(f"restore + first exec through the API: {time.monotonic() - t0:.2f} s")
        assert out["stdout"] == f"{sid2}\nfresh\n", out
        # pause/resume (QMP stop/cont) keeps a counting process's state
        c.run(sid2, ["sh", "-c", "(i=0; while :; do i=$((i+1)); echo $i > /n.t; mv /n.t /n; "
                                 "sleep 0.2; done) >/dev/null 2>&1 &"])
        time.sleep(1)
        r = c.post(f"/v1/sandboxes/{sid2}/pause", None)
        assert r.status == 200 and r.json()["state"] == "paused", r
        r = c.post(f"/v1/sandboxes/{sid2}/resume", None)
        assert r.status == 200 and r.json()["state"] == "running", r
        a = int(c.run(sid2, ["cat", "/n"])["stdout"])
        time.sleep(1.5)
        b = int(c.run(sid2, ["cat", "/n"])["stdout"])
        assert a >= 1 and b > a, (a, b)
        got = c.get(f"/v1/sandboxes/{sid2}").json()
        assert "usage" in got, got
        c.kill(sid2)
    finally:
        c.close()


def test_microvm_bad_requests(fresh_daemon, build, warrend):
    # a node without a guest kernel has no microvm tier
    c = warrend.client()
    try:
        r = c.post("/v1/sandboxes", {"tier": "microvm", "image": "busybox-erofs"})
        assert r.status == 400 and r.error == ("invalid_argument", "tier"), r
        # function calls have their own routes
        r = c.post("/v1/sandboxes", {"tier": "function", "image": "busybox"})
        assert r.status == 400 and r.error == ("invalid_argument", "tier"), r
        assert "/v1/functions" in r.json()["error"]["message"], r
    finally:
        c.close()
    d = fresh_daemon(extra={"microvm": guest(build)}).start()
    c = d.client()
    try:
        # a directory image cannot be a VM's disk
        r = c.post("/v1/sandboxes", {"tier": "microvm", "image": "busybox"})
        assert r.status == 400 and r.error[1] == "image", r
        r = c.post("/v1/sandboxes", {"tier": "microvm", "image": "busybox-erofs",
                                     "layers": ["busybox-erofs"]})
        assert r.status == 400 and r.error[1] == "layers", r
        # a node without networking (network.enable): only mode none
        r = c.post("/v1/sandboxes", {"tier": "microvm", "image": "busybox-erofs",
                                     "network": {"mode": "open"}})
        assert r.status == 400 and r.error[1] == "network.mode", r
    finally:
        c.close()


def qemu_of(sid):
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and sid.encode() in cmdline(p)]


def test_microvm_adopted_after_kill9(fresh_daemon, build):
    """warrend dies (kill -9) with two microVMs running: QEMU outlives it;
    the next start adopts one (QEMU verified by pid and start time, its
    QMP, agent and console sockets connected again, the agent resynced):
    its files and exec keep working. The other cannot be adopted (its
    state file is gone): it is failed, its QEMU killed, its files and
    cgroup removed. A clean restart (SIGTERM) adopts a paused VM, which
    then resumes. Nothing is left after the kill."""
    d = fresh_daemon(extra={"microvm": dict(guest(build), templates="")}).start()
    c = d.client()
    try:
        sids = []
        for _ in range(2):
            r = c.post("/v1/sandboxes", {"tier": "microvm", "image": "busybox-erofs",
                                         "memory_mb": 128, "disk_mb": 32, "timeout": 600,
                                         "env": {"WHO": "adopted"}})
            assert r.status == 201, r
            sids.append(r.json()["id"])
        keep, lose = sids
        c.run(keep, ["sh", "-c", "echo before > /f; (sleep 1000 &)"])
        qk, ql = qemu_of(keep), qemu_of(lose)
        assert len(qk) == 1 and len(ql) == 1, (qk, ql)
        c.close()
        d.kill9()
        time.sleep(0.5)
        # the VMs outlived the daemon
        assert os.path.exists(f"/proc/{qk[0]}") and os.path.exists(f"/proc/{ql[0]}")
        (d.run / "microvm" / lose / "vm.json").unlink()
        d.start()
        c = d.client()
        got = c.get(f"/v1/sandboxes/{keep}").json()
        assert got["state"] == "running", got
        out = c.run(keep, ["sh", "-c", "cat /f; echo $WHO; hostname"])
        assert out["exit_code"] == 0 and out["stdout"] == f"before\nadopted\n{keep}\n", out
        assert qemu_of(keep) == qk
        got = c.get(f"/v1/sandboxes/{lose}").json()
        assert got["state"] == "failed", got
        for _ in range(50):
            if not os.path.exists(f"/proc/{ql[0]}"):
                break
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{ql[0]}"), "the unadoptable VM's QEMU lives on"
        assert not (d.run / "microvm" / lose).exists()
        # a second restart, clean this time (SIGTERM), of a paused VM: its
        # guest cannot answer the resync until it is resumed
        r = c.post(f"/v1/sandboxes/{keep}/pause", None)
        assert r.status == 200 and r.json()["state"] == "paused", r
        c.close()
        assert d.stop() == 0
        d.start()
        c = d.client()
        assert c.get(f"/v1/sandboxes/{keep}").json()["state"] == "paused"
        r = c.post(f"/v1/sandboxes/{keep}/resume", None)
        assert r.status == 200 and r.json()["state"] == "running", r
        assert c.run(keep, ["cat", "/f"])["stdout"] == "before\n"
        c.kill(keep)
        for _ in range(100):
            if not os.path.exists(f"/proc/{qk[0]}") and not (d.run / "microvm" / keep).exists():
                break
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{qk[0]}"), "QEMU outlived the kill"
        assert not (d.run / "microvm" / keep).exists()
    finally:
        c.close()
