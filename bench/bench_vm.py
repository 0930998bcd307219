"""The vm tier's benchmark (issue 10), side by side with the microVM tier in
one run of one warrend: boot to ready (create answered: the guest agent
answers) and the first command, restore to ready (a snapshot of a running
sandbox restored as a new one, on both tiers; and the microVM tier's
template restore, which the vm tier does not have), host memory
per idle VM (RSS and PSS of its QEMU from /proc/<pid>/smaps_rollup, after
an idle wait). The load average is recorded before and after every row:
other work on the machine moves absolute times, the ratios less.

    bench_vm.py BUILD_DIR OUT_JSON OUT_MD

Environment: BENCH_VM_N (vm boots, default 1: a TCG boot of a whole OS
takes minutes), BENCH_VM_MVM_N (microVM restores, default 3),
BENCH_VM_IDLE (seconds idle before memory is read, default 30),
BENCH_VM_MEMORY_MB (guest RAM of both tiers, default 512),
BENCH_VM_RESTORE_N (restores from a snapshot per tier, default 3),
BENCH_VM_EXEC_N (execs for the per-command scope's row, default 20),
BENCH_VM_ONLY=exec (one VM and that row only: bench/results/vm-exec.md).
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
    """The QEMU of a sandbox: vm.json where the tier records it (the vm
    tier, for adoption), else the process whose command line names it."""
    rec = d.run / ("vm" if tier == "vm" else "microvm") / sid / "vm.json"
    if rec.exists():
        return json.loads(rec.read_text())["pid"]
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmd = (p / "cmdline").read_bytes()
            cg = (p / "cgroup").read_text()
        except OSError:
            continue
        # its -name, or its cgroup <base>/vm-<id> (a microVM restored from
        # a template keeps the template's command line)
        if sid.encode() in cmd or f"/vm-{sid}" in cg:
            found.append((mem_of(p.name).get("rss", 0), int(p.name)))
    if not found:
        raise RuntimeError(f"no QEMU found for {tier} sandbox {sid}")
    return max(found)[1]


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


def restore_rows(c, tier, sid, n):
    """A snapshot of a running sandbox (RAM, devices, disk: an image of the
    store), then n creates from it, each timed to ready (create answered:
    the state loaded and the guest agent answering) and to its first
    command, each killed before the next; else why not."""
    name = f"bench-{tier}-{os.getpid()}:1"
    t0 = time.monotonic()
    r = c.post(f"/v1/sandboxes/{sid}/snapshot", {"name": name})
    t_snap = time.monotonic() - t0
    if r.status not in (200, 201):
        return {"available": False, "why": f"{r.status}: {r.body[:200].decode(errors='replace')}"}
    snap = r.json()
    runs = []
    l0 = load()
    try:
        for _ in range(n):
            l1 = load()
            nid, ready, first = timed_create(c, image=name, timeout=600)
            runs.append({"ready_s": ready, "first_exec_s": first, "load": [l1, load()]})
            c.kill(nid)
    finally:
        c.delete(f"/v1/images/{name}")
    return {"available": True, "snapshot_s": round(t_snap, 3), "size": snap.get("size"),
            "runs": runs, "load": [l0, load()]}


# In the guest, in one command: n runs of /bin/true, then n runs of it in a
# transient scope exactly as src/tiers/vm_exec.c starts every command
# (systemd-run --scope with its properties); nanoseconds of each loop.
SCOPE_LOOP = r"""n=$1
i=0; t0=$(date +%s%N)
while [ $i -lt $n ]; do /bin/true; i=$((i + 1)); done
t1=$(date +%s%N); i=0
while [ $i -lt $n ]; do
  /usr/bin/systemd-run --scope --quiet --collect --unit="warren-bench-$$-$i" \
    -p TasksMax=25% -p CPUWeight=100 -p KillSignal=SIGKILL -p RuntimeMaxSec=60s -- /bin/true
  i=$((i + 1))
done
t2=$(date +%s%N)
echo $((t1 - t0)) $((t2 - t1))"""


def exec_scope_row(c, sid, n):
    """What the per-command scope costs a VM exec: the API's round trip of
    `true` (median of n, scope included, as every command runs), and in
    the guest, side by side in one command, n times /bin/true alone and n
    times in a scope as vm_exec.c makes it; the difference per command is
    the scope's cost."""
    l0 = load()
    trips = []
    for _ in range(n):
        t0 = time.monotonic()
        x = c.post(f"/v1/sandboxes/{sid}/commands", {"cmd": ["true"]})
        trips.append(time.monotonic() - t0)
        if x.status != 200 or x.json().get("exit_code") != 0:
            raise RuntimeError(f"exec: {x}")
    x = c.post(f"/v1/sandboxes/{sid}/commands",
               {"cmd": ["sh", "-c", SCOPE_LOOP, "sh", str(n)], "timeout": 600})
    if x.status != 200 or x.json().get("exit_code") != 0:
        raise RuntimeError(f"scope loop: {x}")
    plain_ns, scope_ns = (int(v) for v in x.json()["stdout"].split())
    return {"n": n, "api_exec_true_ms": round(med(trips) * 1000, 1),
            "api_exec_true_ms_all": [round(t * 1000, 1) for t in trips],
            "guest_true_ms": round(plain_ns / n / 1e6, 2),
            "guest_scope_true_ms": round(scope_ns / n / 1e6, 2),
            "scope_cost_ms": round((scope_ns - plain_ns) / n / 1e6, 2),
            "load": [l0, load()]}


def report_exec(res, json_name):
    x = res["rows"]["vm_exec_scope"]
    share = x["scope_cost_ms"] / x["api_exec_true_ms"] if x["api_exec_true_ms"] else 0
    return "\n".join([
        "# vm tier: the per-command systemd scope (bench/bench_vm.py, BENCH_VM_ONLY=exec)", "",
        f"Run {res['started']} ({json_name}), TCG, {res['memory_mb']} MiB guest (the tests' "
        "Debian disk), one VM; load average (1, 5, 15 min) before -> after: "
        f"{x['load'][0]} -> {x['load'][1]}.", "",
        "| row | ms per command |", "| --- | --- |",
        f"| API exec of `true`, round trip (median of {x['n']}; scope included) | "
        f"{x['api_exec_true_ms']} |",
        f"| in the guest: `/bin/true` (mean of {x['n']}) | {x['guest_true_ms']} |",
        f"| in the guest: `systemd-run --scope ... /bin/true` as vm_exec.c runs it "
        f"(mean of {x['n']}) | {x['guest_scope_true_ms']} |",
        f"| the scope's cost (difference) | {x['scope_cost_ms']} |", "",
        f"The scope is {share:.0%} of an exec's round trip here. The two guest loops ran "
        "back to back in one command, so they saw the same load.", ""])


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
    lines.append(f"| template restore to first exec, s (median of {len(tr.get('runs', []))}) | "
                 f"{tr_f} (ready {tr_r}) | - (the vm tier has no templates) | - | "
                 f"{ld(tr.get('load'))} |")
    mrs, vrs = r.get("microvm_restore", {}), r.get("vm_restore", {})
    for key, what in (("ready_s", "to ready (create answered)"),
                      ("first_exec_s", "to first exec")):
        a = med([x[key] for x in mrs.get("runs", [])])
        b = med([x[key] for x in vrs.get("runs", [])])
        n = len(vrs.get("runs", []))
        loads = (f"microvm {ld(mrs.get('load'))}, vm {ld(vrs.get('load'))}"
                 if key == "ready_s" else "")
        lines.append(f"| snapshot restore {what}, s (median of {n}) | "
                     f"{a if a is not None else 'not measured'} | "
                     f"{b if b is not None else 'not measured (see below)'} | "
                     f"{ratio(b, a)} | {loads} |")
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
    for name, x in (("microvm", mrs), ("vm", vrs)):
        if x.get("available"):
            lines += [f"{name} snapshot: taken in {x.get('snapshot_s')} s from a running "
                      f"sandbox, {(x.get('size') or 0) / 2**20:.0f} MiB in the store; each "
                      "restore is a new sandbox from it (the state loaded by QEMU, the guest "
                      "agent answering), killed before the next. Every run: "
                      + ", ".join(f"{y['ready_s']} s (load {y['load'][0][0]})"
                                  for y in x.get("runs", [])) + ".", ""]
        else:
            why = " ".join(x.get("why", "?").split())
            lines += [f"{name} snapshot restore: not measured in this run (`{why}`).", ""]
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
    only_exec = os.environ.get("BENCH_VM_ONLY") == "exec"
    try:
        if only_exec:  # one VM and the exec row only
            s3, ready, first = timed_create(c, tier="vm", image="debian-vm", memory_mb=mem)
            live.append(("vm", s3))
            res["rows"]["vm_exec_scope"] = exec_scope_row(
                c, s3, int(os.environ.get("BENCH_VM_EXEC_N", "20")))
        else:
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
            rows["vm_exec_scope"] = exec_scope_row(c, live[-1][1],
                                                   int(os.environ.get("BENCH_VM_EXEC_N", "20")))
            # idle memory: every VM made above, after the idle wait
            time.sleep(idle)
            l0 = load()
            m = {}
            for tier, s in live:
                try:
                    m.setdefault(tier, []).append(mem_of(qemu_pid(d, tier, s)))
                except RuntimeError as e:  # the other rows are still worth having
                    res.setdefault("missed", []).append(str(e))
            rows["idle_memory_mib"] = {"per_vm": m, "load": [l0, load()]}
            # restore to ready from a snapshot, both tiers in turn
            n_rs = int(os.environ.get("BENCH_VM_RESTORE_N", "3"))
            rows["microvm_restore"] = restore_rows(c, "microvm", live[0][1], n_rs)
            rows["vm_restore"] = restore_rows(c, "vm", live[-1][1], n_rs)
    finally:
        for _, s in live:
            try:
                c.kill(s)
            except OSError:
                pass
        c.close()
        rc = d.stop(timeout=120)
        res["daemon_exit"] = rc
        d.clean()  # warrend keeps its base cgroups for a restart: the bench's go
        os.system(f"rm -rf --one-file-system '{tmp}' '{tdir}'")
    res["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out.write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))
    if md:
        md.with_name("vm-exec.md").write_text(report_exec(res, out.name))
        if not only_exec:
            md.write_text(report(res, out.name))


if __name__ == "__main__":
    main()
