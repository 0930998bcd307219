#!/usr/bin/python3
"""Density: as many idle container sandboxes as the node holds, the memory
each costs, and exec latency on a random idle one while they all exist,
against the same execs on a nearly empty node.

    bench/bench_lifecycle_density.py BUILD_DIR

Environment: BENCH_DENSITY_N (sandboxes, default 10000), BENCH_DENSITY_EXECS
(execs timed per phase, default 200), BENCH_DENSITY_FLOOR_MB (stop creating
when the node's MemAvailable falls below this, default 6144: the machine is
shared), BENCH_DENSITY_MAX_S (stop creating after this long, default 2400),
BENCH_DENSITY_CLIENTS (parallel create connections, default 4),
BENCH_DENSITY_MEMCGS (empty memory cgroups of the baseline, default 200),
BENCH_DENSITY_OLD_BUILD and BENCH_DENSITY_OLD_N (optional: first the same
run with another build, e.g. one before a change, for a side-by-side
comparison under the same kernel state).

Memory per sandbox, three ways (each a delta between the node before the
first create and after the last, divided by the count): MemAvailable (what
the node lost: every kernel object and process page, but also whatever
other work on the machine did meanwhile), Slab (kernel objects: cgroups,
namespaces, mounts, dentries), and the sandboxes' own memory cgroups
(memory.usage_in_bytes of the base: what is charged to them); plus kernel
objects in use (the sum of active objects x size over /proc/slabinfo, which
freed slots left by an earlier phase do not hide) and kmalloc-1k objects
(the kernel's per-memory-cgroup shrinker_info units live there).

Baseline, side by side in the same run: the same deltas for empty memory
cgroups (no process, no mount), made and removed right before the
sandboxes. A memory cgroup gets one shrinker_info unit per 64 shrinker ids
the kernel has ever handed out at once (the table never shrinks), and every
superblock registers a shrinker: so what an empty memory cgroup costs here
is the floor of what a sandbox can cost on this node until a reboot.

Every snapshot waits first until the kernel has freed what removed memory
cgroups held (settle(): seconds after an rmdir), else the baseline's or the
previous phase's frees land in the sandboxes' window and their cost comes
out low (by ~280 KiB per sandbox in a run of 800 after 200 empty memory
cgroups). Memory cgroups per sandbox: the delta of /proc/cgroups, dying
ones included.

Superblocks per sandbox: the distinct devices in PID 1's mountinfo and
under PID 1's open files (a superblock mounted nowhere in the sandbox shows
only there), those no other sandbox and not the host show counted as its
own, read on idle sandboxes and again after each ran one command; plus the
IPC namespace's mqueue, which nothing shows. With them, a projection to
10,000 sandboxes on a freshly booted node (projection()). Writes the
"density" section of bench/results/lifecycle.md and
lifecycle-density-<UTC time>.json.
"""
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_lifecycle import remove_cgroups, summary  # noqa: E402
from lifecycle_common import RESULTS, Daemon, meminfo, rss, uptime, write_section  # noqa: E402

SPEC = {"image": "busybox", "timeout": 86400, "memory_mb": 32, "disk_mb": 16, "pids": 32}


def slabinfo():
    """name -> (active objects, object size) from /proc/slabinfo."""
    out = {}
    for line in Path("/proc/slabinfo").read_text().splitlines()[2:]:
        f = line.split()
        out[f[0]] = (int(f[1]), int(f[3]))
    return out


def slab_active():
    si = slabinfo()
    return sum(a * sz for a, sz in si.values()), si.get("kmalloc-1k", (0, 0))[0]


def memcgs():
    """Memory cgroups of the node, dying ones included (/proc/cgroups)."""
    for line in Path("/proc/cgroups").read_text().splitlines()[1:]:
        f = line.split()
        if f[0] == "memory":
            return int(f[2])
    return 0


def settle(limit_s=90):
    """Wait until the kernel has freed what removed memory cgroups held:
    a memory cgroup's shrinker_info units (and the rest of it) go after an
    RCU grace period and a worker, seconds after its rmdir, so a snapshot
    taken at once counts them as still there and the next delta comes out
    low by the removed ones. Returns the seconds waited (the limit if
    kmalloc-1k in use was still falling)."""
    t0 = time.time()
    last = slab_active()[1]
    while time.time() - t0 < limit_s:
        time.sleep(3)
        cur = slab_active()[1]
        if cur > last - 64:
            return round(time.time() - t0, 1)
        last = cur
    return limit_s


def memcg_baseline(k):
    """Per empty memory cgroup: deltas of kernel objects in use, kmalloc-1k
    objects, Percpu and MemAvailable, over k made beneath our own memory
    cgroup (and removed again)."""
    own = next(line.split(":", 2)[2] for line in
               Path("/proc/self/cgroup").read_text().splitlines()
               if line.split(":", 2)[1].split(",").count("memory"))
    top = Path("/sys/fs/cgroup/memory" + own) / f"benchdens-memcg-{os.getpid()}"
    top.mkdir()
    made = []
    try:
        a_bytes, a_1k = slab_active()
        a = meminfo()
        for i in range(k):
            (top / f"m{i}").mkdir()
            made.append(top / f"m{i}")
        b_bytes, b_1k = slab_active()
        b = meminfo()
        nb = memcgs()
    finally:
        for m in made:
            m.rmdir()
        top.rmdir()
    # their frees must not land in the sandboxes' window
    waited = settle()
    return {"n": k, "settle_s": waited, "memcgs_after": nb,
            "slab_active": round((b_bytes - a_bytes) / k),
            "kmalloc_1k": round((b_1k - a_1k) / k, 1),
            "Percpu": round((b["Percpu"] - a["Percpu"]) / k),
            "MemAvailable": round((a["MemAvailable"] - b["MemAvailable"]) / k)}


def init_pid(d, sid):
    for sub in ("", "init"):
        p = d.cg("memory") / sid / sub / "cgroup.procs"
        if p.exists():
            pids = p.read_text().split()
            if pids:
                return int(pids[0])
    return None


def superblocks(pairs):
    """Per sandbox: (all, own) distinct devices in PID 1's mountinfo and
    under PID 1's open files (which show a superblock mounted nowhere, as
    the writable layer's tmpfs was before /dev moved into it: PID 1 keeps
    its upper directory open; "unmounted" then)."""
    sets = []
    for d, sid in pairs:
        pid = init_pid(d, sid)
        lines = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
        st = {(line.split()[2], line.split(" - ")[1].split()[0]) for line in lines}
        seen = {dev for dev, _ in st}
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                dv = os.stat(f"/proc/{pid}/fd/{fd}").st_dev
            except OSError:
                continue
            dev = f"{os.major(dv)}:{os.minor(dv)}"
            if dev not in seen:
                st.add((dev, "unmounted"))
                seen.add(dev)
        sets.append(st)
    host = {line.split()[2] for line in Path("/proc/self/mountinfo").read_text().splitlines()}
    out = []
    for i, st in enumerate(sets):
        others = set().union(*(x for j, x in enumerate(sets) if j != i))
        own = sorted(fs for dev, fs in st if dev not in host and
                     dev not in {dv for dv, _ in others})
        out.append({"all": len(st), "own": own})
    return out


def cg_usage(d):
    m = d.cg("memory")
    try:
        return int((m / "memory.usage_in_bytes").read_text()) if m else 0
    except OSError:
        return 0


def snapshot(ds):
    mi = meminfo()
    return {"MemAvailable": mi["MemAvailable"], "Slab": mi["Slab"],
            "SUnreclaim": mi["SUnreclaim"], "KernelStack": mi.get("KernelStack", 0),
            "PageTables": mi.get("PageTables", 0), "Percpu": mi.get("Percpu", 0),
            "cgroup": sum(cg_usage(d) for d in ds),
            "slab_active": slab_active()[0], "kmalloc_1k": slab_active()[1],
            "memcgs": memcgs(),
            "caches": {k: a * sz for k, (a, sz) in slabinfo().items()},
            "warrend_rss": sum(rss(d.proc.pid) for d in ds),
            "nprocs": len(os.listdir("/proc")),
            "warrend_fds": sum(len(os.listdir(f"/proc/{d.proc.pid}/fd")) for d in ds)}


def execs(pairs, n, k=100):
    """Execs of `true` on idle sandboxes: first the first command of each
    of k random ones of pairs (it also mounts the sandbox's devpts), then,
    once the sampler has marked them idle again, n more, each on a random
    one of the k. Split so that the node with 20 sandboxes (whose first
    commands are a few of n) and the full one (where nearly every random
    pick would be a first command) compare like with like. Returns
    (first commands, later commands)."""
    apis = {}
    rng = random.Random(42)

    def one(d, sid):
        api = apis.setdefault(id(d), d.api())
        t0 = time.perf_counter()
        r = api.call("POST", f"/v1/sandboxes/{sid}/commands", {"cmd": ["true"]})
        assert r["exit_code"] == 0, r
        return (time.perf_counter() - t0) * 1000

    sample = rng.sample(pairs, min(k, len(pairs)))
    first = [one(d, sid) for d, sid in sample]
    time.sleep(6)  # idle again (idle_after_s 3, sampled every second)
    later = [one(*rng.choice(sample)) for _ in range(n)]
    return summary(first), summary(later)


def create_many(ds, n, per, floor, max_s, clients):
    ids, errors = [], []
    lock = threading.Lock()
    stop = threading.Event()
    t_end = time.time() + max_s

    count = {id(d): 0 for d in ds}

    def pick():
        for d in ds:
            if count[id(d)] < per:
                count[id(d)] += 1
                return d
        return None

    def worker():
        apis = {}
        while not stop.is_set():
            with lock:
                if len(ids) >= n:
                    return
                d = pick()
            if d is None:
                return
            api = apis.setdefault(id(d), d.api())
            try:
                sid = (d, api.call("POST", "/v1/sandboxes", SPEC)["id"])
            except Exception as e:  # noqa: BLE001 (a refusal ends the run)
                with lock:
                    errors.append(str(e)[:300])
                stop.set()
                return
            with lock:
                ids.append(sid)
                k = len(ids)
            if k % 500 == 0:
                avail = meminfo()["MemAvailable"]
                print(f"density: {k} sandboxes, MemAvailable {avail >> 20} MiB, "
                      f"{uptime()}", flush=True)
                if avail < floor:
                    errors.append(f"stopped at MemAvailable {avail >> 20} MiB")
                    stop.set()
            if time.time() > t_end:
                errors.append(f"stopped after {max_s} s")
                stop.set()

    t0 = time.time()
    ts = [threading.Thread(target=worker) for _ in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return ids, errors, time.time() - t0


def delete_all(pairs, clients):
    chunks = [pairs[i::clients] for i in range(clients)]

    def worker(part):
        apis = {}
        for d, sid in part:
            api = apis.setdefault(id(d), d.api())
            try:
                api.call("DELETE", f"/v1/sandboxes/{sid}", expect=(204, 404, 409))
            except Exception:  # noqa: BLE001 (the daemon's close kills the rest)
                pass

    t0 = time.time()
    ts = [threading.Thread(target=worker, args=(c,)) for c in chunks]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.time() - t0


def phase(build, n, nexec, floor, max_s, clients, nmemcg, label):
    """One build: baseline memcgs, n idle sandboxes, their cost, execs
    (nexec > 0), then everything deleted."""
    # Each sandbox holds ~13 fds in its daemon (pidfds, cgroup directories,
    # the network filter's BPF links). A daemon whose hard RLIMIT_NOFILE
    # cannot be raised (no CAP_SYS_RESOURCE, as in this container) holds
    # only so many: then several daemons share the node, each with its own
    # state and cgroup base, and the report says so.
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    per = int(os.environ.get("BENCH_DENSITY_PER_DAEMON", "0")) or \
        max(100, min(n, (hard - 1000) // 14))
    ndaemons = (n + per - 1) // per
    ds = []
    res = {"label": label, "build": str(build), "n_asked": n, "load": {},
           "daemons": ndaemons, "per_daemon": per, "nofile_hard": hard}
    pairs, base = [], []
    try:
        for i in range(ndaemons):
            name = f"benchdens{label}{i}"
            try:
                ds.append(Daemon(build, name, extra={
                    "max_sandboxes": per + 100, "max_connections": 1000,
                    "harvest": {"interval_s": 1, "idle_after_s": 3}}, nofile=hard))
            except Exception:
                # a daemon that did not come up leaves its cgroups and dir
                remove_cgroups(f"warren-{name}-{os.getpid()}")
                for w in Path(tempfile.gettempdir()).glob(f"warren-{name}.*"):
                    subprocess.run(["rm", "-rf", "--one-file-system", str(w)], check=False)
                raise
        # baseline: a nearly empty node, 20 idle sandboxes
        base = [(ds[0], ds[0].api().call("POST", "/v1/sandboxes", SPEC)["id"])
                for _ in range(20)]
        time.sleep(5)  # the sampler marks them idle
        if nexec:
            res["load"]["baseline"] = uptime()
            res["exec_baseline_first"], res["exec_baseline"] = execs(base, nexec)
        time.sleep(4)
        res["load"]["memcg_baseline"] = uptime()
        res["memcg_baseline"] = memcg_baseline(nmemcg)
        before = snapshot(ds)
        res["load"]["create_start"] = uptime()
        pairs, errors, took = create_many(ds, n, per, floor, max_s, clients)
        res["created"] = len(pairs)
        res["create_s"] = round(took, 1)
        res["create_errors"] = errors[:5]
        time.sleep(8)  # every one marked idle, memory reclaimed
        after = snapshot(ds)
        res["load"]["full"] = uptime()
        res["before"], res["after"] = before, after
        k = max(1, len(pairs))
        res["per_sandbox_bytes"] = {key: round((before[key] - after[key]) / k)
                                    if key == "MemAvailable"
                                    else round((after[key] - before[key]) / k)
                                    for key in before
                                    if key not in ("nprocs", "warrend_fds", "kmalloc_1k",
                                                   "caches", "memcgs")}
        res["memcgs_per_sandbox"] = round((after["memcgs"] - before["memcgs"]) / k, 2)
        bc, ac = before.pop("caches"), after.pop("caches")
        top = sorted(((ac.get(c, 0) - bc.get(c, 0)) / k, c) for c in set(ac) | set(bc))
        res["top_caches_per_sandbox"] = [(c, round(v)) for v, c in reversed(top[-12:])]
        res["kmalloc_1k_per_sandbox"] = round((after["kmalloc_1k"] -
                                               before["kmalloc_1k"]) / k, 1)
        res["warrend_fds_per_sandbox"] = round((after["warrend_fds"] -
                                                before["warrend_fds"]) / k, 2)
        res["host_procs_per_sandbox"] = round((after["nprocs"] - before["nprocs"]) / k, 2)
        # superblocks of 3 idle sandboxes that never ran a command, and of
        # the same after one command each (the execs below pick at random:
        # these may be among them, after this command)
        sample = pairs[:3]
        res["superblocks_idle"] = superblocks(sample)
        for d, sid in sample:
            d.api().call("POST", f"/v1/sandboxes/{sid}/commands", {"cmd": ["true"]})
        res["superblocks_after_exec"] = superblocks(sample)
        res["idle_marked"] = 0
        res["sample_seconds"] = []
        for d in ds:
            api = d.api()
            api.c.request("GET", "/metrics")
            m = api.c.getresponse().read().decode()
            res["idle_marked"] += sum(1 for line in m.splitlines()
                                      if line.startswith("warren_sandbox_idle{") and
                                      line.endswith(" 1"))
            res["sample_seconds"] += [line.split()[-1] for line in m.splitlines()
                                      if line.startswith("warren_harvest_sample_seconds ")]
        if nexec:
            # pairs[3:]: sandboxes that never ran a command
            res["exec_full_first"], res["exec_full"] = execs(pairs[3:], nexec)
            res["load"]["after_execs"] = uptime()
        res["delete_s"] = round(delete_all(pairs + base, clients), 1)
        pairs = base = []
    finally:
        if pairs or base:
            delete_all(pairs + base, clients)
        for d in ds:
            d.close()
    # the next phase's snapshots must not see these memory cgroups go
    res["settle_after_delete_s"] = settle()
    res["after_cleanup"] = {"MemAvailable": meminfo()["MemAvailable"]}
    return res


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: bench/bench_lifecycle_density.py BUILD_DIR")
    build = Path(sys.argv[1]).resolve()
    n = int(os.environ.get("BENCH_DENSITY_N", "10000"))
    nexec = int(os.environ.get("BENCH_DENSITY_EXECS", "200"))
    floor = int(os.environ.get("BENCH_DENSITY_FLOOR_MB", "6144")) << 20
    max_s = float(os.environ.get("BENCH_DENSITY_MAX_S", "2400"))
    clients = int(os.environ.get("BENCH_DENSITY_CLIENTS", "4"))
    nmemcg = int(os.environ.get("BENCH_DENSITY_MEMCGS", "200"))
    out = {"kernel": os.uname().release}
    old = os.environ.get("BENCH_DENSITY_OLD_BUILD")
    for b in [build] + ([Path(old)] if old else []):
        for f in ("warrend", "warren-init", "warren-zygote"):
            if not (b / f).exists():
                sys.exit(f"bench_lifecycle_density: no {b / f} (ninja -C {b})")
    if old:
        out["old"] = phase(Path(old).resolve(), int(os.environ.get("BENCH_DENSITY_OLD_N", n)),
                           0, floor, max_s, clients, nmemcg, "old")
    out["new"] = phase(build, n, nexec, floor, max_s, clients, nmemcg, "new")
    write(out)


IDS_NODE = 1000  # shrinker ids of the node's own superblocks (assumed)


def projection(p, n):
    """KiB per sandbox at n sandboxes on a freshly booted node: each memory
    cgroup holds one 1 KiB slot (a 520-byte shrinker_info unit in
    kmalloc-1k) per 64 shrinker ids in use, and each superblock takes one
    id; plus what a sandbox costs beyond its memory cgroups (measured here:
    per sandbox minus per empty memory cgroup, both over the same table,
    which that difference does not depend on). Returns (s idle, s after a
    command, rest KiB by MemAvailable, rest KiB by kernel objects,
    (idle, after a command) KiB by each)."""
    # + 1: the IPC namespace's mqueue, which no mount table shows
    s_idle = max(len(r["own"]) for r in p["superblocks_idle"]) + 1
    s_cmd = max(len(r["own"]) for r in p["superblocks_after_exec"]) + 1
    m = p["memcgs_per_sandbox"]
    mb, ps = p["memcg_baseline"], p["per_sandbox_bytes"]
    rest_avail = (ps["MemAvailable"] - m * mb["MemAvailable"]) / 1024
    rest_obj = (ps["slab_active"] + ps["KernelStack"] + ps["PageTables"] + ps["Percpu"] -
                m * (mb["slab_active"] + mb["Percpu"])) / 1024

    def table(s):
        return m * -(-(n * s + IDS_NODE) // 64)

    return s_idle, s_cmd, rest_avail, rest_obj, [
        (table(s_idle) + r, table(s_cmd) + r) for r in (rest_avail, rest_obj)]


def sb_text(rows):
    own = sorted({tuple(r["own"]) for r in rows})
    return "; ".join(f"{len(o)} ({', '.join(o)})" for o in own)


def load(s):
    return s.split("load average: ")[-1]


def write(out):
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"lifecycle-density-{stamp}.json").write_text(json.dumps(out, indent=1))
    kib = 1024
    phases = [out[k] for k in ("old", "new") if k in out]
    res = out["new"]
    head = " | ".join(f"{p['label']} build: {p['created']} sandboxes" for p in phases)
    rows = []
    for key, what in (("MemAvailable", "node MemAvailable (everything, other work included)"),
                      ("slab_active", "kernel objects in use (slabinfo active x size)"),
                      ("Slab", "Slab (kernel objects, pages)"),
                      ("SUnreclaim", "of which unreclaimable (SUnreclaim)"),
                      ("KernelStack", "KernelStack"), ("PageTables", "PageTables"),
                      ("Percpu", "Percpu (per-CPU counters: memory cgroups)"),
                      ("cgroup", "charged to the sandboxes' memory cgroups"),
                      ("warrend_rss", "warrend RSS (all daemons)")):
        cells = " | ".join(f"{p['per_sandbox_bytes'][key] / kib:.0f} KiB" for p in phases)
        mb = phases[-1]["memcg_baseline"].get(key)
        rows.append(f"| {what} | {cells} | {'' if mb is None else f'{mb / kib:.0f} KiB'} |")
    cells = " | ".join(f"{p['memcgs_per_sandbox']}" for p in phases)
    rows.append(f"| memory cgroups (/proc/cgroups, dying ones included) | {cells} | 1 |")
    cells = " | ".join(f"{p['kmalloc_1k_per_sandbox']}" for p in phases)
    rows.append(f"| kmalloc-1k objects (shrinker_info units among them) | {cells} | "
                f"{phases[-1]['memcg_baseline']['kmalloc_1k']} |")
    tops = "\n".join(
        f"* {p['label']}: " + ", ".join(f"{c} {v / kib:.0f}" for c, v in
                                       p["top_caches_per_sandbox"]) for p in phases)
    sbrows = "\n".join(
        f"| {p['label']} | {sb_text(p['superblocks_idle'])} | "
        f"{sb_text(p['superblocks_after_exec'])} |" for p in phases)
    runs = "\n".join(
        f"* {p['label']} build (`{p['build']}`): {p['created']} of {p['n_asked']} created in "
        f"{p['create_s']} s on {p['daemons']} daemon(s) (load at the start "
        f"{load(p['load']['create_start'])}, full {load(p['load']['full'])}); stopped: "
        f"{'; '.join(p['create_errors']) or 'the count was reached'}; "
        f"{p['idle_marked']} marked idle; deleted in {p['delete_s']} s; "
        f"{p['warrend_fds_per_sandbox']} daemon fds and {p['host_procs_per_sandbox']} "
        f"host processes per sandbox." for p in phases)
    b, f = res["exec_baseline"], res["exec_full"]
    b1, f1 = res["exec_baseline_first"], res["exec_full_first"]
    text = f"""## Density: idle container sandboxes

Run {stamp}, `bench/bench_lifecycle_density.py`, kernel {out['kernel']}, each sandbox
`{json.dumps(SPEC)}`, PID 1 only, marked idle by the sampler:

{runs}

Memory per sandbox (delta over the run / count) and, side by side in the
same run, per empty memory cgroup (no process, no mount;
{res['memcg_baseline']['n']} made and removed right before the sandboxes, load
{load(res['load']['memcg_baseline'])}):

| measure | {head} | empty memory cgroup |
|---|{'---:|' * len(phases)}---:|
{chr(10).join(rows)}

Kernel object caches that grew most, KiB per sandbox (active objects x
size; kmalloc-1k holds the shrinker_info units):

{tops}

Superblocks of a sandbox's own (distinct devices in PID 1's mountinfo and
open files that no other sandbox and not the host show; "unmounted": a
superblock no mount of the sandbox shows, the writable layer's tmpfs
before /dev moved into it; not listed: the mqueue instance the kernel
makes with every IPC namespace, +1 each):

| build | idle, never ran a command | after one command |
|---|---|---|
{sbrows}

Exec `true` on a random idle sandbox (new build): first the first command
of each of up to 100 random idle sandboxes that never ran one (it also
mounts their devpts), then, once they are marked idle again, n={b['n']} on
a random one of them:

| node | command | n | p50 ms | p99 ms | mean ms | load (uptime) |
|---|---|---:|---:|---:|---:|---|
| 20 sandboxes | first | {b1['n']} | {b1['p50_ms']:.2f} | {b1['p99_ms']:.2f} | {b1['mean_ms']:.2f} | {load(res['load']['baseline'])} |
| 20 sandboxes | later | {b['n']} | {b['p50_ms']:.2f} | {b['p99_ms']:.2f} | {b['mean_ms']:.2f} | {load(res['load']['baseline'])} |
| {res['created']} sandboxes | first | {f1['n']} | {f1['p50_ms']:.2f} | {f1['p99_ms']:.2f} | {f1['mean_ms']:.2f} | {load(res['load']['full'])} |
| {res['created']} sandboxes | later | {f['n']} | {f['p50_ms']:.2f} | {f['p99_ms']:.2f} | {f['mean_ms']:.2f} | {load(res['load']['after_execs'])} |
"""
    base = res["memcg_baseline"]
    prow = []
    for p in phases:
        si, sc, ra, ro, est = projection(p, 10000)
        prow.append(f"| {p['label']} | {si} / {sc} | {ra:.0f} / {ro:.0f} | "
                    f"{est[0][0] / kib:.2f} / {est[0][1] / kib:.2f} | "
                    f"{est[1][0] / kib:.2f} / {est[1][1] / kib:.2f} |")
    text += f"""
Projection to 10,000 sandboxes on a freshly booted node (not measured: this
node's shrinker table is sized by its largest run so far, and never
shrinks: an empty memory cgroup costs {base['kmalloc_1k']} kmalloc-1k
objects here, ids up to ~{base['kmalloc_1k'] * 64:.0f}). Each memory cgroup
holds one 1 KiB slot per 64 shrinker ids, every superblock takes one, so
at 10,000 sandboxes each superblock a sandbox has costs ~156 KiB per memory
cgroup; s counts the mqueue, {IDS_NODE} ids assumed for the node's own
superblocks; the rest is what a sandbox costs beyond its memory cgroups
(per sandbox minus per empty memory cgroup, by MemAvailable and by kernel
objects + stacks + page tables + per-CPU):

| build | s idle / after a command | rest KiB | MiB per sandbox (rest by MemAvailable): idle / after a command | same, rest by kernel objects |
|---|---|---:|---:|---:|
{chr(10).join(prow)}
"""
    write_section("density", text)
    print(text)


if __name__ == "__main__":
    main()
