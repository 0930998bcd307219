"""The vm tier's benchmark (issue 10), side by side with the microVM tier in
one run of one warrend: boot to ready (create answered: the guest agent
answers) and the first command, restore to ready (a snapshot restored to a
running sandbox, where the node's API offers it for the tier), host memory
per idle VM (RSS and PSS of its QEMU from /proc/<pid>/smaps_rollup, after
an idle wait). The load average is recorded before and after every row:
other work on the machine moves absolute times, the ratios less.

    bench_vm.py BUILD_DIR OUT_JSON OUT_MD

Environment: BENCH_VM_N (vm boots, default 1: a TCG boot of a whole OS
takes minutes), BENCH_VM_MVM_N (microVM restores, default 3),
BENCH_VM_IDLE (seconds idle before memory is read, default 30),
BENCH_VM_MEMORY_MB (guest RAM of both tiers, default 512).
"""
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from conftest import Client, Daemon  # noqa: E402


def load():
    return [round(float(x), 2) for x in Path("/proc/loadavg").read_text().split()[:3]]


def mem_of(pid):
    """RSS and PSS of a process in MiB (smaps_rollup)."""
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("Rss", "Pss"):
            out[k.lower()] = round(int(v.split()[0]) / 1024, 1)
    return out


def qemu_pid(d, tier, sid):
    sub = "vm" if tier == "vm" else "microvm"
    return json.loads((d.run / sub / sid / "vm.json").read_text())["pid"]


def timed_create(c, **spec):
    t0 = time.monotonic()
    r = c.post("/v1/sandboxes", spec)
    t1 = time.monotonic()
    if r.status != 201:
        raise RuntimeError(f"create {spec.get('tier')}: {r}")
    sid = r.json()["id"]
    x = c.post(f"/v1/sandboxes/{sid}/commands", {"cmd": ["true"]})
    t2 = time.monotonic()
    if x.status != 200 or x.json().get("exit_code") != 0:
        raise RuntimeError(f"first exec {spec.get('tier')}: {x}")
    return sid, round(t1 - t0, 3), round(t2 - t0, 3)


def restore_row(c, tier, sid, mem):
    """A snapshot of the sandbox restored to a running one, where the API
    has it for this tier; else why not."""
    r = c.post(f"/v1/sandboxes/{sid}/snapshot", {})
    if r.status not in (200, 201):
        return {"available": False, "why": f"{r.status}: {r.body[:200].decode(errors='replace')}"}
    snap = r.json()
    t0 = time.monotonic()
    rr = c.post("/v1/sandboxes", {"tier": tier, "snapshot": snap.get("id"), "memory_mb": mem})
    t1 = time.monotonic()
    if rr.status != 201:
        return {"available": False, "why": f"restore {rr.status}: {rr.body[:200]!r}"}
    nid = rr.json()["id"]
    c.post(f"/v1/sandboxes/{nid}/commands", {"cmd": ["true"]})
    t2 = time.monotonic()
    c.kill(nid)
    return {"available": True, "restore_s": round(t1 - t0, 3), "first_exec_s": round(t2 - t0, 3)}


def med(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


def report(res, json_name):
    r = res["rows"]
    mc, tr, vb = r.get("microvm_cold", {}), r.get("microvm_template_restore", {}), r.get(
        "vm_boot", {})
    mem = r.get("idle_memory_mib", {}).get("per_vm", {})
    lines = [
        "# vm tier benchmark (issue 10)", "",
        f"One run of `bench/run_vm.sh` ({res['started']} to {res['finished']}), raw numbers in "
        f"`{json_name}`. TCG (no KVM here), guest RAM {res['memory_mb']} MiB on both tiers, "
        f"one warrend (build dir `{res.get('build', '?')}`: the daemon's build type does not "
        "touch QEMU's boot or memory) serving both. Load average (1, 5, 15 min) before and after each row: "
        "other sessions share this 2-core machine, so the ratios mean more than the "
        "absolute times.", "",
        "| row | microvm | vm | vm / microvm | load before -> after |",
        "| --- | --- | --- | --- | --- |"]

    def ratio(a, b):
        return f"{a / b:.1f}x" if a and b else "-"

    def ld(pair):
        # the 1-minute load average before and after
        return f"{pair[0][0]} -> {pair[1][0]}" if pair else "-"
    vr = med([x["ready_s"] for x in vb.get("runs", [])])
    vf = med([x["first_exec_s"] for x in vb.get("runs", [])])
    vl = vb["runs"][0]["load"] if vb.get("runs") else None
    lines.append(f"| boot to ready (create answered), s | {mc.get('ready_s')} (cold, makes "
                 f"the template) | {vr} | {ratio(vr, mc.get('ready_s'))} | "
                 f"microvm {ld(mc.get('load'))}, vm {ld(vl)} |")
    lines.append(f"| boot to first exec, s | {mc.get('first_exec_s')} | {vf} | "
                 f"{ratio(vf, mc.get('first_exec_s'))} | |")
    tr_r = med([x["ready_s"] for x in tr.get("runs", [])])
    tr_f = med([x["first_exec_s"] for x in tr.get("runs", [])])
    vrs = r.get("vm_restore", {})
    vrest = vrs.get("first_exec_s") if vrs.get("available") else None
    lines.append(f"| restore to first exec, s (median of {len(tr.get('runs', []))}) | "
                 f"{tr_f} (template restore; ready {tr_r}) | "
                 f"{vrest if vrest is not None else 'not measured (see below)'} | "
                 f"{ratio(vrest, tr_f)} | {ld(tr.get('load'))} |")
    for k in ("rss", "pss"):
        a = med([x[k] for x in mem.get("microvm", [])])
        b = med([x[k] for x in mem.get("vm", [])])
        lines.append(f"| idle QEMU {k.upper()}, MiB (median; {len(mem.get('microvm', []))} "
                     f"microvm, {len(mem.get('vm', []))} vm) | {a} | {b} | {ratio(b, a)} | "
                     f"{ld(r.get('idle_memory_mib', {}).get('load'))} |")
    lines += ["", "Idle memory is QEMU's: the guest's RAM as QEMU holds it (pages the guest "
              "touched) plus QEMU's own (TCG's translation cache, bounded at 128 MiB, "
              "devices). A full Debian (systemd, udev, qemu-guest-agent) touches far more of "
              "its RAM while booting than the microVM's agent-as-init; restored microVMs "
              "share their template's pages (PSS below RSS).", ""]
    if not vrs.get("available"):
        why = " ".join(vrs.get("why", "?").split())
        lines += ["vm restore to ready: not measured in this run; the node answered the "
                  f"snapshot request with `{why}`. VM snapshots are another branch's work "
                  "(vmsnap); run bench/run_vm.sh again once they are merged.", ""]
    return "\n".join(lines)


def main():
    if sys.argv[1] == "--report":
        # the table again from a run's JSON: bench_vm.py --report JSON MD
        js = Path(sys.argv[2])
        Path(sys.argv[3]).write_text(report(json.loads(js.read_text()), js.name))
        return
    build, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    md = Path(sys.argv[3]) if len(sys.argv) > 3 else None
    n_vm = int(os.environ.get("BENCH_VM_N", "1"))
    n_mvm = int(os.environ.get("BENCH_VM_MVM_N", "3"))
    idle = int(os.environ.get("BENCH_VM_IDLE", "30"))
    mem = int(os.environ.get("BENCH_VM_MEMORY_MB", "512"))
    disk = build / "tests" / "vm" / "debian-vm.raw"
    guest = build / "tests" / "guest"
    for f in (disk, guest / "vmlinux", guest / "initramfs.cpio", build / "warrend"):
        if not f.exists():
            sys.exit(f"bench-vm: {f} not built (ninja -C {build}; the disks come with the tests)")
    tmp = Path(tempfile.mkdtemp(prefix=f"warren-bench-vm.{os.getpid()}.", dir="/tmp"))
    tdir = Path(f"/dev/shm/warren-bench-vm-{os.getpid()}")
    from conftest import find_images
    erofs = find_images(build) / "busybox.erofs"
    d = Daemon(build, tmp, f"benchvm{os.getpid()}", extra={
        "microvm": {"kernel": str(guest / "vmlinux"), "initrd": str(guest / "initramfs.cpio"),
                    "accel": "tcg", "templates": str(tdir)},
        "vm": {"accel": "tcg", "boot_timeout": 1200, "shutdown_timeout": 30},
        "images": {"debian-vm": str(disk), "busybox-erofs": str(erofs)}})
    res = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "memory_mb": mem,
           "build": build.name,
           "idle_s": idle, "accel": "tcg", "rows": {}}
    d.start()
    c = Client(d, timeout=1800)
    live = []
    try:
        # microVM: the first create boots and makes the template; later
        # ones restore from it
        rows = res["rows"]
        l0 = load()
        sid, ready, first = timed_create(c, tier="microvm", image="busybox-erofs",
                                         memory_mb=mem, disk_mb=128)
        live.append(("microvm", sid))
        rows["microvm_cold"] = {"ready_s": ready, "first_exec_s": first, "load": [l0, load()]}
        tr = []
        l0 = load()
        for _ in range(n_mvm):
            s2, ready, first = timed_create(c, tier="microvm", image="busybox-erofs",
                                            memory_mb=mem, disk_mb=128)
            tr.append({"ready_s": ready, "first_exec_s": first})
            live.append(("microvm", s2))
        rows["microvm_template_restore"] = {"runs": tr, "load": [l0, load()]}
        # vm: a whole Debian (systemd, qemu-guest-agent) booted from the disk
        vb = []
        for _ in range(n_vm):
            l0 = load()
            s3, ready, first = timed_create(c, tier="vm", image="debian-vm", memory_mb=mem)
            vb.append({"ready_s": ready, "first_exec_s": first, "load": [l0, load()]})
            live.append(("vm", s3))
        rows["vm_boot"] = {"runs": vb}
        # idle memory: every VM made above, after the idle wait
        time.sleep(idle)
        l0 = load()
        m = {}
        for tier, s in live:
            m.setdefault(tier, []).append(mem_of(qemu_pid(d, tier, s)))
        rows["idle_memory_mib"] = {"per_vm": m, "load": [l0, load()]}
        # restore to ready: a snapshot of a running VM, where offered
        rows["vm_restore"] = restore_row(c, "vm", live[-1][1], mem)
    finally:
        for _, s in live:
            try:
                c.kill(s)
            except OSError:
                pass
        c.close()
        rc = d.stop(timeout=120)
        res["daemon_exit"] = rc
        os.system(f"rm -rf --one-file-system '{tmp}' '{tdir}'")
    res["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out.write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))
    if md:
        md.write_text(report(res, out.name))


if __name__ == "__main__":
    main()
