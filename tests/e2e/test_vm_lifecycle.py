"""Lifecycle of the VM tiers (issues 8, 9, 10): pause with keep_memory=false
(the VM's state to a file on disk, QEMU gone, resume restores it), snapshots
of a whole VM as image-store objects restored on a second store, and warrend
killed between steps. TCG is slow: each test boots one VM and reuses it."""
import os
import time

import pytest

from conftest import Client, Daemon
from vmtiers import guest, vm_image



def counter_cmd(path="/n"):
    """A process counting in the background: its value in path."""
    return (f"(i=0; while :; do i=$((i+1)); echo $i > {path}.t; mv {path}.t {path}; "
            "sleep 0.2; done) >/dev/null 2>&1 &")


COUNTER = counter_cmd()


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def qemu_of(sid):
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and sid.encode() in cmdline(p)]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def gone(pids, secs=10):
    for _ in range(int(secs * 10)):
        if not any(os.path.exists(f"/proc/{p}") for p in pids):
            return True
        time.sleep(0.1)
    return False


def counter(c, sid):
    return int(c.run(sid, ["cat", "/n"])["stdout"])


def qmp(vmdir, *cmds):
    """QMP commands on a VM's monitor socket (QEMU listens again once
    warrend is gone); the socket's path goes through /proc/self/fd (long
    test paths overflow sun_path)."""
    import json
    import socket
    dfd = os.open(vmdir, os.O_PATH)
    s = socket.socket(socket.AF_UNIX)
    try:
        s.settimeout(30)
        s.connect(f"/proc/self/fd/{dfd}/qmp.sock")
        f = s.makefile("rw")
        f.readline()  # greeting
        out = []
        for cmd in ("qmp_capabilities",) + cmds:
            f.write(json.dumps({"execute": cmd}) + "\n")
            f.flush()
            while True:
                m = json.loads(f.readline())
                if "return" in m or "error" in m:
                    out.append(m)
                    break
        return out[1:]
    finally:
        s.close()
        os.close(dfd)


def test_microvm_pause_to_disk(fresh_daemon, build):
    """keep_memory=false: the VM's state goes to a file and QEMU ends (its
    memory released); resume restores it and the counting process counts on
    from where it was. A suspended VM survives warrend's kill -9 (adopted
    from its saved state) and a clean restart. (Containers: CRIU,
    test_lifecycle_suspend_container.py.)"""
    d = fresh_daemon(extra={"microvm": guest(build)}).start()
    c = d.client()
    try:
        r = c.post("/v1/sandboxes", {"tier": "microvm", "image": "busybox-erofs",
                                     "memory_mb": 256, "disk_mb": 64, "timeout": 600})
        assert r.status == 201, r
        sid = r.json()["id"]
        c.run(sid, ["sh", "-c", "echo kept > /data; " + COUNTER])
        time.sleep(1)
        q = qemu_of(sid)
        assert len(q) == 1, q
        saved = d.state / "microvm" / "saved" / sid

        # a crash in the middle of a pause to disk, after the state was
        # saved (QEMU stopped, the saved directory published) and before
        # the record was committed: the record says running, so the next
        # start runs the VM again and drops the obsolete saved state
        c.close()
        d.kill9()
        assert qmp(d.run / "microvm" / sid, "stop")[0] == {"return": {}}
        saved.mkdir(parents=True)
        (saved / "meta.json").write_text("{}")
        (saved / "state").write_bytes(b"obsolete")
        d.start()
        c = d.client()
        assert c.get(f"/v1/sandboxes/{sid}").json()["state"] == "running"
        n0 = counter(c, sid)
        time.sleep(1)
        assert counter(c, sid) > n0, "the VM does not run after the recovery"
        assert not saved.exists(), "an uncommitted saved state outlived the recovery"
        assert qemu_of(sid) == q

        rss = rss_kib(q[0])
        t0 = time.monotonic()
        r = c.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": False})
        t_save = time.monotonic() - t0
        assert r.status == 200 and r.json()["state"] == "paused", r
        assert gone(q), "QEMU still runs after keep_memory=false"
        size = (saved / "state").stat().st_size
        assert size > 0 and (saved / "meta.json").exists()
        print(f"\nkeep_memory=false: save {t_save:.2f} s, QEMU RSS {rss // 1024} MiB before, "
              f"process gone after; state file {size / 2**20:.1f} MiB")
        # its time does not run; a second pause is a no-op
        assert c.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": False}).status == 200
        t0 = time.monotonic()
        r = c.post(f"/v1/sandboxes/{sid}/resume", None)
        t_restore = time.monotonic() - t0
        assert r.status == 200 and r.json()["state"] == "running", r
        a = counter(c, sid)
        time.sleep(1.5)
        b = counter(c, sid)
        print(f"resume from disk: {t_restore:.2f} s; counter {a} -> {b}")
        assert a >= 3 and b > a, (a, b)
        assert c.run(sid, ["cat", "/data"])["stdout"] == "kept\n"
        assert c.run(sid, ["hostname"])["stdout"] == f"{sid}\n"
        assert not saved.exists(), "the saved state outlived the resume"
        q2 = qemu_of(sid)
        assert len(q2) == 1 and q2 != q, (q, q2)

        # suspended, then warrend dies (kill -9): the next start finds the
        # saved state and the sandbox resumes from it
        r = c.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": False})
        assert r.status == 200, r
        assert gone(q2)
        c.close()
        d.kill9()
        # as if the crash had cut a resume before its commit: a run
        # directory with the disk linked from the saved state and a
        # vm.json of a QEMU that is gone; the next start removes them and
        # keeps the saved state whole
        run = d.run / "microvm" / sid
        run.mkdir()
        os.link(saved / "disk", run / "rw.ext4")
        (run / "vm.json").write_text('{"pid": 4194000, "start": 1, "uid": 1342177281}')
        d.start()
        assert not run.exists(), "a cut restore's files outlived the recovery"
        assert (saved / "disk").exists()
        c = d.client()
        got = c.get(f"/v1/sandboxes/{sid}").json()
        assert got["state"] == "paused", got
        # auto-resume: an exec on a suspended VM restores it
        a2 = counter(c, sid)
        assert a2 >= b, (b, a2)
        time.sleep(1)
        assert counter(c, sid) > a2

        # pause in memory, then to disk (it stays paused), clean restart
        assert c.post(f"/v1/sandboxes/{sid}/pause", None).status == 200
        q3 = qemu_of(sid)
        r = c.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": False})
        assert r.status == 200 and r.json()["state"] == "paused", r
        assert gone(q3)
        c.close()
        assert d.stop() == 0
        d.start()
        c = d.client()
        r = c.post(f"/v1/sandboxes/{sid}/resume", None)
        assert r.status == 200 and r.json()["state"] == "running", r
        a3 = counter(c, sid)
        time.sleep(1)
        assert counter(c, sid) > a3 >= a2
        ev = c.get(f"/v1/sandboxes/{sid}/events").json()
        types = [e["type"] for e in ev.get("events", ev if isinstance(ev, list) else [])]
        assert "restored" in types, types
        c.kill(sid)
        assert not saved.exists()
    finally:
        c.close()


@pytest.mark.skipif(not os.path.exists("/usr/bin/docker-registry"),
                    reason="docker-registry not installed (scripts/deps.sh)")
def test_microvm_snapshot_second_store(fresh_daemon, build, tmp_path):
    """A running microVM's snapshot (RAM, devices and disk) is a named
    store image: pushed to a registry, pulled by a second warrend with its
    own state and store, and a create from it restores the VM there with
    its counting process counting on. A restore whose QEMU version differs
    from the saved one is refused with a clear error, and nothing is lost."""
    import sys
    from pathlib import Path
    import urllib.parse
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
    from registry_util import Registry
    reg = Registry(tmp_path / "reg")
    d = fresh_daemon(extra={"microvm": guest(build)}).start()
    c = d.client()
    try:
        r = c.post("/v1/sandboxes", {"tier": "microvm", "image": "busybox-erofs",
                                     "memory_mb": 256, "disk_mb": 64, "timeout": 600})
        assert r.status == 201, r
        sid = r.json()["id"]
        c.run(sid, ["sh", "-c", "echo travelled > /data; " + COUNTER])
        time.sleep(1.5)
        name = f"vmsnap{os.getpid()}:1"
        before = counter(c, sid)
        t0 = time.monotonic()
        r = c.post(f"/v1/sandboxes/{sid}/snapshot", {"name": name})
        t_snap = time.monotonic() - t0
        assert r.status == 201, r
        img = r.json()
        at = counter(c, sid)
        time.sleep(1)
        assert counter(c, sid) > at, "the VM does not run after its snapshot"
        print(f"\nsnapshot of a running microVM: {t_snap:.2f} s, image "
              f"{img['size'] / 2**20:.1f} MiB")
        p = c.post(f"/v1/images/{urllib.parse.quote(name, safe='')}/push",
                   {"to": f"{reg.host}/team/vmsnap:1"})
        assert p.status == 200, p

        # the QEMU version is checked before a state is loaded: a saved
        # state that names another version is refused, and kept
        r = c.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": False})
        assert r.status == 200, r
        meta = d.state / "microvm" / "saved" / sid / "meta.json"
        orig = meta.read_text()
        meta.write_text(orig.replace('"qemu_version": "', '"qemu_version": "0.0.0 other '))
        r = c.post(f"/v1/sandboxes/{sid}/resume", None)
        assert r.status == 400 and r.error[1] == "image", r
        assert "QEMU 0.0.0 other" in r.json()["error"]["message"], r
        assert not qemu_of(sid), "a refused restore left a QEMU"
        assert c.get(f"/v1/sandboxes/{sid}").json()["state"] == "paused"
        meta.write_text(orig)
        r = c.post(f"/v1/sandboxes/{sid}/resume", None)
        assert r.status == 200 and r.json()["state"] == "running", r
        assert c.run(sid, ["cat", "/data"])["stdout"] == "travelled\n"
        c.kill(sid)

        node2 = fresh_daemon(extra={"microvm": guest(build)}).start()
        c2 = node2.client()
        try:
            g = c2.post("/v1/images/pull", {"ref": f"{reg.host}/team/vmsnap:1", "as": "snap:1"})
            assert g.status == 200 and g.json()["digest"] == img["digest"], g
            # sizes are the snapshot's
            r = c2.post("/v1/sandboxes", {"image": "snap:1", "memory_mb": 512})
            assert r.status == 400 and r.error[1] == "memory_mb", r
            r = c2.post("/v1/sandboxes", {"image": "snap:1", "tier": "container"})
            assert r.status == 400 and r.error[1] == "tier", r
            t0 = time.monotonic()
            r = c2.post("/v1/sandboxes", {"image": "snap:1", "timeout": 600})
            t_restore = time.monotonic() - t0
            assert r.status == 201, r
            s2 = r.json()
            assert s2["tier"] == "microvm" and s2["memory_mb"] == 256, s2
            sid2 = s2["id"]
            b = counter(c2, sid2)
            time.sleep(1)
            b2 = counter(c2, sid2)
            print(f"create from the pulled snapshot on a second node: {t_restore:.2f} s; "
                  f"counter {before} before the snapshot, {at} after; restored {b} -> {b2}")
            # the state of the snapshot's instant: between the two readings
            assert before <= b <= at and b2 > b, (before, at, b, b2)
            out = c2.run(sid2, ["sh", "-c", "cat /data; hostname"])
            assert out["stdout"] == f"travelled\n{sid2}\n", out
            c2.kill(sid2)
        finally:
            c2.close()
    finally:
        c.close()
        reg.stop()


def test_vm_tier_lifecycle(fresh_daemon, build, tmp_path):
    """One Debian VM (TCG boots are slow): keep_memory=false frees its QEMU
    and resume keeps a counting process; warrend killed (-9) while it is
    suspended; a snapshot restored as a second VM keeps the running
    process; the ACPI shutdown of a kill: a guest that ignores the power
    button is hard-stopped at the deadline. Then the snapshot on a second
    store: it and its base disk pushed to a registry, pulled by a second
    warrend (refused naming the base until the base is there), restored
    there with the process counting on."""
    deadline = 20
    d = fresh_daemon(extra={"vm": {"accel": "tcg", "boot_timeout": 900,
                                   "shutdown_timeout": deadline},
                            "images": {"debian-vm": str(vm_image(build))}}).start()
    c = Client(d, timeout=900)
    try:
        t0 = time.monotonic()
        r = c.post("/v1/sandboxes", {"tier": "vm", "image": "debian-vm", "memory_mb": 512,
                                     "timeout": 3600})
        assert r.status == 201, r
        sid = r.json()["id"]
        print(f"\nvm boot: {time.monotonic() - t0:.1f} s")
        c.run(sid, ["sh", "-c", "echo kept > /root/data; " + counter_cmd("/root/n")])
        time.sleep(2)
        cnt = lambda cl, s: int(cl.run(s, ["cat", "/root/n"])["stdout"])  # noqa: E731
        q = qemu_of(sid)
        assert len(q) == 1, q
        rss = rss_kib(q[0])
        t0 = time.monotonic()
        r = c.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": False})
        t_save = time.monotonic() - t0
        assert r.status == 200 and r.json()["state"] == "paused", r
        assert gone(q), "QEMU still runs after keep_memory=false"
        size = (d.state / "vm-saved" / sid / "state").stat().st_size
        t0 = time.monotonic()
        r = c.post(f"/v1/sandboxes/{sid}/resume", None)
        t_restore = time.monotonic() - t0
        assert r.status == 200 and r.json()["state"] == "running", r
        a = cnt(c, sid)
        time.sleep(2)
        b = cnt(c, sid)
        print(f"vm keep_memory=false: save {t_save:.2f} s (QEMU RSS {rss // 1024} MiB, state "
              f"{size / 2**20:.0f} MiB), resume {t_restore:.2f} s; counter {a} -> {b}")
        assert a >= 3 and b > a, (a, b)

        # suspended, warrend killed: the next start finds the saved state
        assert c.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": False}).status == 200
        c.close()
        d.kill9()
        d.start()
        c = Client(d, timeout=900)
        assert c.get(f"/v1/sandboxes/{sid}").json()["state"] == "paused"
        r = c.post(f"/v1/sandboxes/{sid}/resume", None)
        assert r.status == 200 and r.json()["state"] == "running", r
        b2 = cnt(c, sid)
        assert b2 >= b, (b, b2)

        # a snapshot of the running VM, restored as a second VM
        before = cnt(c, sid)
        t0 = time.monotonic()
        r = c.post(f"/v1/sandboxes/{sid}/snapshot", {"name": f"vmtier{os.getpid()}:1"})
        t_snap = time.monotonic() - t0
        assert r.status == 201, r
        after = cnt(c, sid)
        t0 = time.monotonic()
        r = c.post("/v1/sandboxes", {"image": f"vmtier{os.getpid()}:1", "timeout": 3600})
        t_from = time.monotonic() - t0
        assert r.status == 201, r
        assert r.json()["tier"] == "vm", r
        sid2 = r.json()["id"]
        x = cnt(c, sid2)
        time.sleep(2)
        y = cnt(c, sid2)
        print(f"vm snapshot {t_snap:.2f} s ({r.json().get('memory_mb')} MiB VM), create from it "
              f"{t_from:.2f} s; counter {before}..{after} at the snapshot, restored {x} -> {y}")
        assert before <= x <= after and y > x, (before, after, x, y)
        assert c.run(sid2, ["cat", "/root/data"])["stdout"] == "kept\n"

        # ACPI: the copy honours the power button; the source ignores it
        # (logind, which acts on it, stopped) and is hard-stopped at the
        # deadline
        out = c.run(sid, ["sh", "-c", "systemctl mask --now systemd-logind.service "
                                      ">/dev/null 2>&1; systemctl is-active systemd-logind"],
                    timeout=120)
        assert out["stdout"].strip() != "active", out
        q1, q2 = qemu_of(sid), qemu_of(sid2)
        t0 = time.monotonic()
        c.kill(sid2)
        t_clean = time.monotonic() - t0
        assert gone(q2)
        t0 = time.monotonic()
        c.kill(sid)
        t_hard = time.monotonic() - t0
        assert gone(q1)
        print(f"ACPI shutdown: honoured in {t_clean:.1f} s; ignored: hard stop after "
              f"{t_hard:.1f} s (deadline {deadline} s)")
        assert t_hard >= deadline - 1, t_hard
        assert not (d.state / "vm-saved" / sid).exists()
        if os.path.exists("/usr/bin/docker-registry"):
            vm_snapshot_on_a_second_store(fresh_daemon, build, tmp_path, c,
                                          f"vmtier{os.getpid()}:1", (before, after))
    finally:
        c.close()


def vm_snapshot_on_a_second_store(fresh_daemon, build, tmp_path, c, name, window):
    """A vm snapshot names its base disk by digest: the node that restores
    it needs that disk in its store (a vm-disk image, pulled from the
    registry like the snapshot) or a configured file with that digest."""
    import sys
    import urllib.parse
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
    from registry_util import Registry
    pid = os.getpid()
    reg = Registry(tmp_path / "reg")
    try:
        import hashlib
        snap = c.get(f"/v1/images/{urllib.parse.quote(name, safe='')}").json()
        h = hashlib.sha256()
        with open(vm_image(build), "rb") as f:
            for b in iter(lambda: f.read(1 << 20), b""):
                h.update(b)
        base = "sha256:" + h.hexdigest()
        # the configured disk the VM booted from, as a store image: the
        # same bytes, the digest the snapshot names (its base label)
        r = c.post("/v1/images/import", {"path": str(vm_image(build)), "format": "vm-disk",
                                         "ref": f"debian-vm:{pid}"})
        assert r.status == 201 and r.json()["digest"] == base, (r, base)
        t0 = time.monotonic()
        for ref, to in ((f"debian-vm:{pid}", "team/debian-vm:1"), (name, "team/vmtier:1")):
            p = c.post(f"/v1/images/{urllib.parse.quote(ref, safe='')}/push",
                       {"to": f"{reg.host}/{to}"})
            assert p.status == 200, p
        t_push = time.monotonic() - t0
        node2 = fresh_daemon(extra={"vm": {"accel": "tcg", "boot_timeout": 900,
                                           "shutdown_timeout": 30}}).start()
        c2 = Client(node2, timeout=900)
        try:
            g = c2.post("/v1/images/pull", {"ref": f"{reg.host}/team/vmtier:1", "as": "snap:1"})
            assert g.status == 200 and g.json()["digest"] == snap["digest"], g
            # its base is not on this node yet: refused naming it, nothing made
            r = c2.post("/v1/sandboxes", {"image": "snap:1", "timeout": 600})
            assert r.status == 400 and r.error[1] == "image", r
            assert base in r.json()["error"]["message"], r
            assert c2.get("/v1/sandboxes").json()["sandboxes"] == []
            t0 = time.monotonic()
            g = c2.post("/v1/images/pull", {"ref": f"{reg.host}/team/debian-vm:1"})
            t_pull = time.monotonic() - t0
            assert g.status == 200 and g.json()["digest"] == base, g
            assert g.json()["kind"] == "vm-disk", g
            t0 = time.monotonic()
            r = c2.post("/v1/sandboxes", {"image": "snap:1", "timeout": 600})
            t_restore = time.monotonic() - t0
            assert r.status == 201, r
            s2 = r.json()
            assert s2["tier"] == "vm" and s2["memory_mb"] == 512, s2
            sid2 = s2["id"]
            cnt = lambda: int(c2.run(sid2, ["cat", "/root/n"])["stdout"])  # noqa: E731
            x = cnt()
            time.sleep(2)
            y = cnt()
            print(f"vm snapshot on a second store: push (disk and snapshot) {t_push:.1f} s, "
                  f"base pull {t_pull:.1f} s, create from the snapshot {t_restore:.2f} s; "
                  f"counter {window[0]}..{window[1]} at the snapshot, restored {x} -> {y}")
            assert window[0] <= x <= window[1] and y > x, (window, x, y)
            assert c2.run(sid2, ["cat", "/root/data"])["stdout"] == "kept\n"
            q = qemu_of(sid2)
            c2.kill(sid2)
            assert gone(q, 60)
        finally:
            c2.close()
    finally:
        reg.stop()
