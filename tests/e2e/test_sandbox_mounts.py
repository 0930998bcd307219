"""The mount table of a container sandbox (docs/ARCHITECTURE.md, "Mount
table of a container sandbox"): as few superblocks of its own as its
behaviour allows, since each costs memory in every memory cgroup of the
node. Read from the host in PID 1's mountinfo: an idle sandbox that never
ran a command has overlay and one tmpfs, the writable layer's, whose
directories also serve /dev, /dev/shm and the masks (so /dev/shm counts
against the disk quota); offline sandboxes share one read-only sysfs;
/proc (with its masks) and devpts come before the first command, once,
also after a daemon restart."""
import errno
import os
import time
from pathlib import Path

from conftest import own_cgroup_dirs


# counts the mounts on /proc and /dev/pts in a mountinfo
PROC_PTS = '$5 == "/proc" || $5 == "/dev/pts" { n++ } END { print n }'


def init_pid(d, sid):
    for p in own_cgroup_dirs(d.cg_base):
        for f in (p / sid / "cgroup.procs", p / sid / "init" / "cgroup.procs"):
            if f.exists() and f.read_text().split():
                return int(f.read_text().split()[0])
    raise AssertionError(f"no PID 1 of {sid}")


def mounts(d, sid):
    """mount point -> (device, fstype, root, options) of PID 1's mountinfo."""
    out = {}
    for line in Path(f"/proc/{init_pid(d, sid)}/mountinfo").read_text().splitlines():
        f = line.split()
        sep = f.index("-")
        out[f[4]] = (f[2], f[sep + 1], f[3], f[5])
    return out


def pts_mounts(d, sid):
    text = Path(f"/proc/{init_pid(d, sid)}/mountinfo").read_text()
    return sum(1 for line in text.splitlines() if line.split()[4] == "/dev/pts")


def host_devs():
    return {line.split()[2] for line in Path("/proc/self/mountinfo").read_text().splitlines()}


def own(m, other):
    """fstypes of the devices of m that neither the host nor other shows."""
    shared = host_devs() | {v[0] for v in other.values()}
    return sorted({(v[0], v[1]) for v in m.values() if v[0] not in shared})


def test_idle_sandbox_superblocks_and_first_command(warrend, api):
    a, b = api.create(disk_mb=8), api.create()
    try:
        ma, mb = mounts(warrend, a), mounts(warrend, b)
        # never ran a command: no /proc and no devpts yet; own: overlay and
        # one tmpfs
        assert "/dev/pts" not in ma and "/proc" not in ma, ma
        assert sorted(fs for _, fs in own(ma, mb)) == ["overlay", "tmpfs"], own(ma, mb)
        # one read-only sysfs for every offline sandbox
        assert ma["/sys"][1] == "sysfs" and "ro" in ma["/sys"][3].split(","), ma["/sys"]
        assert ma["/sys"][0] == mb["/sys"][0]
        # /dev, /dev/shm and the masks: directories of devfs/ in the
        # writable layer's tmpfs (its size, nosuid, noexec, nodev)
        dev = ma["/dev"][0]
        assert ma["/dev"][1:3] == ("tmpfs", "/devfs/dev") and "ro" in ma["/dev"][3].split(",")
        assert ma["/dev/shm"][:3] == (dev, "tmpfs", "/devfs/shm")
        for k in ("/dev", "/dev/shm"):
            assert {"nosuid", "noexec", "nodev"} <= set(ma[k][3].split(",")), (k, ma[k])
        assert "rw" in ma["/dev/shm"][3].split(",")

        def check_masks(m):
            masks = [k for k in m if k.startswith(("/proc/", "/sys/")) and m[k][1] == "tmpfs"]
            for k in masks:
                assert m[k][0] == dev and m[k][2] in ("/devfs/mask", "/devfs/maskf"), (k, m[k])
                assert "ro" in m[k][3].split(","), (k, m[k])
            return masks

        assert "/sys/firmware" in check_masks(ma)
        # the first command finds its /proc (of its PID namespace, masked)
        # and its devpts (ptmx included), each mounted once
        r = api.run(a, ["sh", "-c", "test -c /dev/pts/ptmx && test -c /dev/ptmx && "
                        "grep -c ' /dev/pts ' /proc/self/mountinfo && "
                        "awk '$5 == \"/proc\"' /proc/self/mountinfo | wc -l && "
                        "cat /proc/1/comm"])
        assert r["exit_code"] == 0 and r["stdout"] == "1\n1\nwarren-init\n", r
        r = api.run(a, ["awk", PROC_PTS, "/proc/self/mountinfo"])
        assert r["stdout"] == "2\n", r
        ma = mounts(warrend, a)
        assert ma["/dev/pts"][1] == "devpts", ma["/dev/pts"]
        assert ma["/proc"][1] == "proc", ma["/proc"]
        assert {"nosuid", "noexec", "nodev"} <= set(ma["/proc"][3].split(",")), ma["/proc"]
        assert sorted(fs for _, fs in own(ma, mb)) == ["devpts", "overlay", "proc", "tmpfs"]
        masks = check_masks(ma)
        assert {"/proc/keys", "/proc/kpageflags", "/proc/timer_list", "/sys/firmware"} <= set(masks), masks
        for k in ("/proc/sys", "/proc/bus", "/proc/irq"):
            assert ma[k][1] == "proc" and "ro" in ma[k][3].split(","), (k, ma[k])
        # b never ran one: still neither
        mb = mounts(warrend, b)
        assert "/proc" not in mb and "/dev/pts" not in mb, mb
        # /dev/shm takes files, the masks and /dev take none
        r = api.run(a, ["sh", "-c", "echo x > /dev/shm/f && cat /dev/shm/f; "
                        "touch /proc/acpi/x /dev/x 2>&1; ls -A /proc/acpi /sys/firmware; "
                        "df -k /dev/shm | tail -1"])
        out = r["stdout"]
        assert out.startswith("x\n") and out.count("Read-only file system") == 2, out
        # /dev/shm is the disk quota's (disk_mb 8), shared with the root:
        # 6 MiB in /dev/shm leave less than 2 for /, and freeing them gives
        # the root its space back
        assert out.split("\n")[-2].split()[1] == "8192", out
        r = api.run(a, ["sh", "-c", "dd if=/dev/zero of=/dev/shm/big bs=1M count=6 2>/dev/null"
                        " && ! dd if=/dev/zero of=/big bs=1M count=3 2>/dev/null; rm -f /big;"
                        " rm /dev/shm/big && dd if=/dev/zero of=/big bs=1M count=3 2>/dev/null"
                        " && echo ok"])
        assert r["exit_code"] == 0 and r["stdout"] == "ok\n", r
    finally:
        api.kill(a)
        api.kill(b)


def test_devpts_once_across_restart(fresh_daemon):
    d = fresh_daemon().start()
    c = d.client()
    used = c.create()
    fresh = c.create()
    try:
        assert c.run(used, ["true"])["exit_code"] == 0
        assert mounts(d, used)["/dev/pts"][1] == "devpts"
        d.kill9()
        d.start()
        c = d.client()
        for sid in (used, fresh):
            # adopted: an existing /proc and devpts are found, missing ones
            # made (fresh: from the masks' source PID 1 kept)
            r = c.run(sid, ["awk", PROC_PTS, "/proc/self/mountinfo"])
            assert r["stdout"] == "2\n", (sid, r)
            assert pts_mounts(d, sid) == 1
            r = c.run(sid, ["sh", "-c", "cat /proc/kpageflags | wc -c; ls -A /proc/acpi"])
            assert r["stdout"] == "0\n", (sid, r)
        assert c.run(fresh, ["true"])["exit_code"] == 0 and pts_mounts(d, fresh) == 1
    finally:
        c.kill(used)
        c.kill(fresh)


def test_pid1_upper_fd_leads_only_into_upper(warrend, api):
    """PID 1 keeps the writable layer's upper/ open (the host reads the
    sandbox's changes through it): that fd is a mount of upper/ alone, so
    ".." from it is upper/ again, never the tmpfs with work/ and devfs/
    (the masks' source, /dev, /dev/shm). Its other fd, the masks' source
    for /proc at the first command, is a read-only mount of devfs/ alone."""
    sid = api.create()
    try:
        fds = Path(f"/proc/{init_pid(warrend, sid)}/fd")
        kept = [p for p in fds.iterdir() if int(p.name) > 2]
        assert len(kept) == 2, [(p.name, p.readlink()) for p in kept]
        writable = [p for p in kept if os.access(p, os.W_OK) and not is_ro(p)]
        assert len(writable) == 1, kept
        upper = writable[0]
        top = upper / ".."
        assert not (top / "devfs").exists() and not (top / "work").exists(), sorted(
            q.name for q in top.iterdir())
        # the same directory: what the sandbox writes shows on both sides
        assert api.put(f"/v1/sandboxes/{sid}/files?path=/marker", b"x").status in (200, 201, 204)
        assert (upper / "marker").exists() and (top / "marker").exists()
        masks = [p for p in kept if p != upper][0]
        assert is_ro(masks)
        assert sorted(q.name for q in (masks / "..").iterdir()) == ["dev", "mask", "maskf", "shm"]
        try:
            (masks / "mask" / "x").write_text("x")
        except OSError as e:
            assert e.errno == errno.EROFS, e
        else:
            raise AssertionError("the masks' source took a file")
    finally:
        api.kill(sid)


def is_ro(p):
    return bool(os.statvfs(p).f_flag & os.ST_RDONLY)


FAST_IDLE = {"harvest": {"interval_s": 0.2, "idle_after_s": 1}}


def wait_mounts(d, sid, present, limit=10):
    """Until /proc and /dev/pts are both mounted (present) or both not."""
    deadline = time.time() + limit
    while True:
        m = mounts(d, sid)
        if all((k in m) == present for k in ("/proc", "/dev/pts")):
            return m
        if time.time() > deadline:
            raise AssertionError(f"{sid}: /proc, /dev/pts mounted {not present}: {sorted(m)}")
        time.sleep(0.1)


def test_idle_sandbox_gives_back_proc_and_devpts(fresh_daemon):
    """Marked idle by the sampler, a sandbox with no process but PID 1
    unmounts its /proc (with its masks) and devpts: superblocks it holds
    for commands only. The next command mounts them again, masks included;
    a sandbox with a process left (a background job) keeps them."""
    d = fresh_daemon(extra=FAST_IDLE).start()
    c = d.client()
    a = b = None
    try:
        a, b = c.create(), c.create()
        assert c.run(a, ["true"])["exit_code"] == 0
        r = c.post(f"/v1/sandboxes/{b}/commands",
                   {"cmd": "sleep 1000", "background": True})
        assert r.status in (200, 201, 202), r
        wait_mounts(d, a, True)
        # a: idle with PID 1 alone -> both gone, masks with them
        m = wait_mounts(d, a, False)
        assert not [k for k in m if k.startswith("/proc/")], sorted(m)
        # b: idle too, but its sleep may look at /proc: kept
        wait_harvest(c, b, "idle")
        mb = mounts(d, b)
        assert "/proc" in mb and "/dev/pts" in mb, sorted(mb)
        # the next command of a finds both, masked, mounted once
        r = c.run(a, ["sh", "-c", "awk '" + PROC_PTS + "' /proc/self/mountinfo; "
                      "cat /proc/1/comm; ls -A /proc/acpi; test -c /dev/ptmx && echo pty"])
        assert r["exit_code"] == 0 and r["stdout"] == "2\nwarren-init\npty\n", r
        m = mounts(d, a)
        assert m["/proc/keys"][2] in ("/devfs/mask", "/devfs/maskf"), m["/proc/keys"]
        assert m["/proc/sys"][1] == "proc" and "ro" in m["/proc/sys"][3].split(","), m
        # idle again -> gone again; many rounds keep one mount of each
        wait_mounts(d, a, False)
        for _ in range(3):
            r = c.run(a, ["awk", PROC_PTS, "/proc/self/mountinfo"])
            assert r["stdout"] == "2\n", r
    finally:
        for sid in (a, b):
            if sid:
                c.kill(sid)
        c.close()


def wait_harvest(c, sid, state, limit=10):
    deadline = time.time() + limit
    while time.time() < deadline:
        if c.get(f"/v1/sandboxes/{sid}").json()["usage"]["harvest"]["state"] == state:
            return
        time.sleep(0.1)
    raise AssertionError(f"{sid} not {state}")


def test_proc_without_its_masks_is_made_again(fresh_daemon):
    """A /proc found without all its masks (its helper died between the
    attach and the last mask; here: the read-only /proc/sys bind removed
    from the host) never serves a command: the next command's helper
    detaches it and mounts a masked one."""
    import subprocess
    d = fresh_daemon().start()
    c = d.client()
    sid = c.create()
    try:
        assert c.run(sid, ["true"])["exit_code"] == 0
        pid = init_pid(d, sid)
        subprocess.run(["nsenter", "-t", str(pid), "-m", "umount", "/proc/sys"], check=True)
        subprocess.run(["nsenter", "-t", str(pid), "-m", "umount", "/proc/keys"], check=True)
        assert "/proc/sys" not in mounts(d, sid)
        d.kill9()
        d.start()
        c = d.client()
        r = c.run(sid, ["sh", "-c", "awk '" + PROC_PTS + "' /proc/self/mountinfo; "
                        "awk '$5 == \"/proc/sys\" && $6 ~ /^ro/' /proc/self/mountinfo | wc -l; "
                        "wc -c < /proc/keys"])
        assert r["stdout"] == "2\n1\n0\n", r
        m = mounts(d, sid)
        assert m["/proc/sys"][1] == "proc" and "ro" in m["/proc/sys"][3].split(","), m
        assert m["/proc/keys"][2] == "/devfs/maskf", m["/proc/keys"]
    finally:
        c.kill(sid)
