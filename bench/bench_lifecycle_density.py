#!/usr/bin/python3
"""Density: as many idle container sandboxes as the node holds, the memory
each costs, and exec latency on a random idle one while they all exist,
against the same execs on a nearly empty node.

    bench/bench_lifecycle_density.py BUILD_DIR

Environment: BENCH_DENSITY_N (sandboxes, default 10000), BENCH_DENSITY_EXECS
(execs timed per phase, default 200), BENCH_DENSITY_FLOOR_MB (stop creating
when the node's MemAvailable falls below this, default 6144: the machine is
shared), BENCH_DENSITY_MAX_S (stop creating after this long, default 2400),
BENCH_DENSITY_CLIENTS (parallel create connections, default 4).

Memory per sandbox, three ways (each a delta between the node before the
first create and after the last, divided by the count): MemAvailable (what
the node lost: every kernel object and process page, but also whatever
other work on the machine did meanwhile), Slab (kernel objects: cgroups,
namespaces, mounts, dentries), and the sandboxes' own memory cgroups
(memory.usage_in_bytes of the base: what is charged to them). Writes the
"density" section of bench/results/lifecycle.md and
lifecycle-density-<UTC time>.json.
"""
import json
import os
import random
import resource
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_lifecycle import summary  # noqa: E402
from lifecycle_common import RESULTS, Daemon, meminfo, rss, uptime, write_section  # noqa: E402

SPEC = {"image": "busybox", "timeout": 86400, "memory_mb": 32, "disk_mb": 16, "pids": 32}


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
            "warrend_rss": sum(rss(d.proc.pid) for d in ds),
            "nprocs": len(os.listdir("/proc")),
            "warrend_fds": sum(len(os.listdir(f"/proc/{d.proc.pid}/fd")) for d in ds)}


def execs(pairs, n):
    """n execs of `true`, each on a random (daemon, sandbox) of pairs."""
    apis = {}
    rng = random.Random(42)
    out = []
    for _ in range(n):
        d, sid = rng.choice(pairs)
        api = apis.setdefault(id(d), d.api())
        t0 = time.perf_counter()
        r = api.call("POST", f"/v1/sandboxes/{sid}/commands", {"cmd": ["true"]})
        out.append((time.perf_counter() - t0) * 1000)
        assert r["exit_code"] == 0, r
    return summary(out)


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


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: bench/bench_lifecycle_density.py BUILD_DIR")
    build = Path(sys.argv[1]).resolve()
    n = int(os.environ.get("BENCH_DENSITY_N", "10000"))
    nexec = int(os.environ.get("BENCH_DENSITY_EXECS", "200"))
    floor = int(os.environ.get("BENCH_DENSITY_FLOOR_MB", "6144")) << 20
    max_s = float(os.environ.get("BENCH_DENSITY_MAX_S", "2400"))
    clients = int(os.environ.get("BENCH_DENSITY_CLIENTS", "4"))
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
    res = {"n_asked": n, "load": {}, "daemons": ndaemons, "per_daemon": per,
           "nofile_hard": hard}
    pairs = []
    try:
        for i in range(ndaemons):
            ds.append(Daemon(build, f"benchdens{i}", extra={
                "max_sandboxes": per + 100, "max_connections": 1000,
                "harvest": {"interval_s": 1, "idle_after_s": 3}}, nofile=hard))
        # baseline: a nearly empty node, 20 idle sandboxes
        base = [(ds[0], ds[0].api().call("POST", "/v1/sandboxes", SPEC)["id"])
                for _ in range(20)]
        time.sleep(5)  # the sampler marks them idle
        res["load"]["baseline"] = uptime()
        res["exec_baseline"] = execs(base, nexec)
        time.sleep(4)
        before = snapshot(ds)
        res["load"]["create_start"] = uptime()
        pairs, errors, took = create_many(ds, n, per, floor, max_s, clients)
        res["created"] = len(pairs)
        res["create_s"] = round(took, 1)
        res["create_errors"] = errors[:5]
        time.sleep(8)  # every one marked idle, memory reclaimed
        after = snapshot(ds)
        res["before"], res["after"] = before, after
        k = max(1, len(pairs))
        res["per_sandbox_bytes"] = {key: round((before[key] - after[key]) / k)
                                    if key == "MemAvailable"
                                    else round((after[key] - before[key]) / k)
                                    for key in before if key not in ("nprocs", "warrend_fds")}
        res["warrend_fds_per_sandbox"] = round((after["warrend_fds"] -
                                                before["warrend_fds"]) / k, 2)
        res["host_procs_per_sandbox"] = round((after["nprocs"] - before["nprocs"]) / k, 2)
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
        res["load"]["full"] = uptime()
        res["exec_full"] = execs(pairs + base, nexec)
        res["load"]["after_execs"] = uptime()
        res["delete_s"] = round(delete_all(pairs + base, clients), 1)
        pairs = []
    finally:
        if pairs:
            delete_all(pairs, clients)
        for d in ds:
            d.close()
    res["after_cleanup"] = {"MemAvailable": meminfo()["MemAvailable"]}
    write(res)


def write(res):
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"lifecycle-density-{stamp}.json").write_text(json.dumps(res, indent=1))
    per = res["per_sandbox_bytes"]
    b, f = res["exec_baseline"], res["exec_full"]
    kib = 1024
    text = f"""## Density: idle container sandboxes

Run {stamp}, `bench/bench_lifecycle_density.py` (BENCH_DENSITY_N={res['n_asked']}):
{res['created']} sandboxes created in {res['create_s']} s
({res['created'] / max(res['create_s'], 0.001):.0f}/s, 4 clients) on
{res['daemons']} daemon(s) of at most {res['per_daemon']} sandboxes each (the
daemon's hard fd limit here is {res['nofile_hard']}, ~{res['warrend_fds_per_sandbox']} fds
per sandbox), each
`{json.dumps(SPEC)}`, PID 1 only, marked idle by the sampler
({res['idle_marked']} of them when measured). Stopped because:
{'; '.join(res['create_errors']) or 'the count was reached'}.
Deleted in {res['delete_s']} s.

Memory per sandbox (delta over the run / count):

| measure | per sandbox |
|---|---:|
| node MemAvailable (everything, other work included) | {per['MemAvailable'] / kib:.0f} KiB |
| Slab (kernel objects) | {per['Slab'] / kib:.0f} KiB |
| of which unreclaimable (SUnreclaim) | {per['SUnreclaim'] / kib:.0f} KiB |
| KernelStack | {per['KernelStack'] / kib:.0f} KiB |
| PageTables | {per['PageTables'] / kib:.0f} KiB |
| Percpu (per-CPU counters: memory cgroups) | {per['Percpu'] / kib:.0f} KiB |
| charged to the sandboxes' memory cgroups | {per['cgroup'] / kib:.0f} KiB |
| warrend RSS (all daemons) | {per['warrend_rss'] / kib:.1f} KiB |

Host processes per sandbox: {res['host_procs_per_sandbox']}. Sampler pass
per daemon: {', '.join(res['sample_seconds'])} s (every 1 s).

Exec `true` on a random idle sandbox (n={b['n']} each):

| node | p50 ms | p99 ms | mean ms | load (uptime) |
|---|---:|---:|---:|---|
| 20 sandboxes | {b['p50_ms']:.2f} | {b['p99_ms']:.2f} | {b['mean_ms']:.2f} | {res['load']['baseline'].split('load average: ')[-1]} |
| {res['created']} sandboxes | {f['p50_ms']:.2f} | {f['p99_ms']:.2f} | {f['mean_ms']:.2f} | {res['load']['full'].split('load average: ')[-1]} |
"""
    write_section("density", text)
    print(text)


if __name__ == "__main__":
    main()
