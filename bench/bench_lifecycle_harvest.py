#!/usr/bin/python3
"""Harvesting: 2 CPU-bound "active" sandboxes next to 200 mostly idle
neighbours that wake at random, against the active ones alone: how much
slower the active ones run.

    bench/bench_lifecycle_harvest.py BUILD_DIR
    bench/bench_lifecycle_harvest.py BUILD_DIR --vm microvm|vm

--vm: one idle VM of that tier instead (issue 9: harvesting applies to
microVMs): QEMU's CPU use while idle, its cgroup's memory and PSS while
active, once marked idle, and after the next call; writes the
"vm-harvest-<tier>" section.

Environment: BENCH_HARVEST_NEIGHBOURS (200), BENCH_HARVEST_WAKE_S (mean
seconds a neighbour sleeps between wakes, 20), BENCH_HARVEST_BURST (shell
loop iterations a neighbour runs per wake, 20000: some tens of ms of
CPU), BENCH_HARVEST_WORK (loop iterations of one active job, 500000),
BENCH_HARVEST_ROUNDS (timed jobs per phase, 3).

Each active sandbox asks cpu 1 (no cpu_max: it may burst); neighbours ask
cpu 0.1. Phases, on one daemon each for harvesting on and off: active alone,
with the neighbours, alone again (alone = the mean of both, so drift of the
shared machine's load cancels); the ratio is the slowdown. Writes the
"harvest" section of bench/results/lifecycle.md and
lifecycle-harvest-<UTC time>.json.
"""
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lifecycle_common import RESULTS, Daemon, uptime, write_section  # noqa: E402


def job(api, sid, work):
    cmd = f"i=0; while [ $i -lt {work} ]; do i=$((i+1)); done"
    t0 = time.perf_counter()
    r = api.call("POST", f"/v1/sandboxes/{sid}/commands",
                 {"cmd": ["sh", "-c", cmd], "timeout": 3600})
    assert r["exit_code"] == 0, r
    return time.perf_counter() - t0


def round_of(d, actives, work):
    """Both active sandboxes run one job at once; seconds of each."""
    out = [0.0] * len(actives)

    def run(i):
        out[i] = job(d.api(), actives[i], work)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(actives))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def phase(d, actives, work, rounds):
    v = []
    for _ in range(rounds):
        v += round_of(d, actives, work)
    return {"jobs_s": [round(x, 3) for x in v], "median_s": round(statistics.median(v), 3),
            "load": uptime().split("load average: ")[-1]}


def metrics(api):
    api.c.request("GET", "/metrics")
    m = api.c.getresponse().read().decode()
    keep = ("warren_node_sandboxes_harvest", "warren_harvest_transitions_total",
            "warren_node_cpu_used_cores ", "warren_harvest_sample_seconds ")
    return [line for line in m.splitlines() if line.startswith(keep)]


def run(build, harvest_on, cfg):
    d = Daemon(build, "benchhv", extra={
        "max_sandboxes": cfg["neighbours"] + 50, "max_connections": 1000,
        "admission": {"cpu_overcommit": 100},
        "harvest": {"enabled": harvest_on, "interval_s": 1, "idle_after_s": 5}},
        nofile=65536)
    res = {"harvest": harvest_on}
    try:
        api = d.api()
        actives = [api.call("POST", "/v1/sandboxes", {"image": "busybox", "cpu": 1,
                                                      "timeout": 7200})["id"]
                   for _ in range(2)]
        round_of(d, actives, cfg["work"] // 10)  # warm-up
        res["alone_before"] = phase(d, actives, cfg["work"], cfg["rounds"])
        spec = {"image": "busybox", "cpu": 0.1, "timeout": 7200, "memory_mb": 32}
        wake = cfg["wake_s"]
        # sleep a random 0..2*wake seconds, then spin a burst, forever
        loop = (f"while :; do sleep $((RANDOM % {2 * wake} + 1)); i=0; "
                f"while [ $i -lt {cfg['burst']} ]; do i=$((i+1)); done; done")
        nb = []
        for _ in range(cfg["neighbours"]):
            sid = api.call("POST", "/v1/sandboxes", spec)["id"]
            api.call("POST", f"/v1/sandboxes/{sid}/commands",
                     {"cmd": ["sh", "-c", loop], "background": True, "timeout": 7200})
            nb.append(sid)
        time.sleep(8)  # settle: the quiet ones marked idle
        res["metrics_with"] = metrics(api)
        res["with_neighbours"] = phase(d, actives, cfg["work"], cfg["rounds"])
        res["metrics_after"] = metrics(api)
        for sid in nb:
            api.call("DELETE", f"/v1/sandboxes/{sid}")
        time.sleep(2)
        res["alone_after"] = phase(d, actives, cfg["work"], cfg["rounds"])
        for sid in actives:
            api.call("DELETE", f"/v1/sandboxes/{sid}")
    finally:
        d.close()
    alone = (res["alone_before"]["median_s"] + res["alone_after"]["median_s"]) / 2
    res["alone_s"] = round(alone, 3)
    res["slowdown"] = round(res["with_neighbours"]["median_s"] / alone - 1, 4)
    return res


def qemu_pid(sid):
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and sid.encode() in Path(f"/proc/{p}/cmdline").read_bytes():
                return int(p)
        except OSError:
            pass
    raise RuntimeError(f"no QEMU for {sid}")


def qemu_memory(pid):
    """QEMU's cgroup (vm-<id>, v1 memory) usage and QEMU's PSS, MiB."""
    cg = None
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if "memory" in ctrls.split(","):
            cg = Path(f"/sys/fs/cgroup/{ctrls}{path}").parent
    use = int((cg / "memory.usage_in_bytes").read_text()) if cg else 0
    pss = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            pss = int(line.split()[1]) * 1024
    return round(use / 2**20, 1), round(pss / 2**20, 1)


def vm_memory(build, tier):
    extra = {"harvest": {"interval_s": 1, "idle_after_s": 5}}
    if tier == "microvm":
        g = build / "tests" / "guest"
        extra["microvm"] = {"kernel": str(g / "vmlinux"), "initrd": str(g / "initramfs.cpio")}
        spec = {"tier": "microvm", "image": "busybox-erofs", "cpu": 1, "memory_mb": 256,
                "disk_mb": 64, "timeout": 3600}
        extra["images"] = {"busybox-erofs": str(build / "tests" / "test-images" /
                                                "busybox.erofs")}
        fill = "cat /bin/* > /dev/null 2>&1; true"
    else:
        extra["vm"] = {"accel": "tcg", "boot_timeout": 900, "shutdown_timeout": 60}
        extra["images"] = {"debian-vm": str(build / "tests" / "vm" / "debian-vm.raw")}
        spec = {"tier": "vm", "image": "debian-vm", "cpu": 1, "memory_mb": 512,
                "timeout": 3600}
        fill = "cat /usr/bin/* > /dev/null 2>&1; true"
    d = Daemon(build, "benchvmhv", extra=extra)
    res = {"tier": tier, "memory_mb": spec["memory_mb"]}
    try:
        api = d.api()
        t0 = time.time()
        sid = api.call("POST", "/v1/sandboxes", spec)["id"]
        res["create_s"] = round(time.time() - t0, 2)
        pid = qemu_pid(sid)
        api.call("POST", f"/v1/sandboxes/{sid}/commands", {"cmd": ["sh", "-c", fill]})
        res["active"] = qemu_memory(pid)
        res["active_load"] = uptime()
        u = None
        for _ in range(600):
            u = api.call("GET", f"/v1/sandboxes/{sid}")["usage"]
            if u["harvest"]["state"] == "idle":
                break
            time.sleep(0.5)
        res["idle_cpu_cores"] = u["cpu_cores"]
        res["reclaimed_mib"] = round(u["harvest"]["memory_reclaimed_bytes"] / 2**20, 1)
        res["idle"] = qemu_memory(pid)
        res["idle_load"] = uptime()
        time.sleep(10)
        res["idle_later"] = qemu_memory(pid)
        t0 = time.time()
        api.call("POST", f"/v1/sandboxes/{sid}/commands", {"cmd": ["true"]})
        res["wake_exec_s"] = round(time.time() - t0, 3)
        res["after_call"] = qemu_memory(pid)
        api.call("DELETE", f"/v1/sandboxes/{sid}")
    finally:
        d.close()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"lifecycle-vm-harvest-{tier}-{stamp}.json").write_text(json.dumps(res, indent=1))
    a, i, il, w = res["active"], res["idle"], res["idle_later"], res["after_call"]
    text = f"""## Harvesting an idle {tier} ({spec['memory_mb']} MiB guest)

Run {stamp}, `bench/bench_lifecycle_harvest.py BUILD --vm {tier}`: one VM,
its page cache filled (`{fill}`), then left alone until the
sampler marks it idle (interval 1 s, idle_after_s 5). QEMU's cgroup memory
usage (v1 memory.usage_in_bytes) / QEMU's PSS, MiB:

| state | cgroup MiB | PSS MiB | load |
|---|---:|---:|---|
| active (after the fill) | {a[0]} | {a[1]} | {res['active_load']} |
| marked idle | {i[0]} | {i[1]} | {res['idle_load']} |
| idle, 10 s later | {il[0]} | {il[1]} | |
| after the next call (`true`: {res['wake_exec_s']} s) | {w[0]} | {w[1]} | |

Idle QEMU's CPU when marked: {res['idle_cpu_cores']} CPUs; reported reclaimed:
{res['reclaimed_mib']} MiB.
"""
    write_section(f"vm-harvest-{tier}", text)
    print(text)


def main():
    if len(sys.argv) == 4 and sys.argv[2] == "--vm" and sys.argv[3] in ("microvm", "vm"):
        vm_memory(Path(sys.argv[1]).resolve(), sys.argv[3])
        return
    if len(sys.argv) != 2:
        sys.exit("usage: bench/bench_lifecycle_harvest.py BUILD_DIR [--vm microvm|vm]")
    build = Path(sys.argv[1]).resolve()
    cfg = {"neighbours": int(os.environ.get("BENCH_HARVEST_NEIGHBOURS", "200")),
           "wake_s": int(os.environ.get("BENCH_HARVEST_WAKE_S", "20")),
           "burst": int(os.environ.get("BENCH_HARVEST_BURST", "20000")),
           "work": int(os.environ.get("BENCH_HARVEST_WORK", "500000")),
           "rounds": int(os.environ.get("BENCH_HARVEST_ROUNDS", "3"))}
    out = {"cfg": cfg, "start_load": uptime()}
    out["on"] = run(build, True, cfg)
    out["off"] = run(build, False, cfg)
    out["end_load"] = uptime()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"lifecycle-harvest-{stamp}.json").write_text(json.dumps(out, indent=1))
    rows = []
    for k in ("on", "off"):
        r = out[k]
        rows.append(f"| {'on' if k == 'on' else 'off (weights by request only)'} | "
                    f"{r['alone_before']['median_s']:.2f} / {r['alone_after']['median_s']:.2f} "
                    f"| {r['with_neighbours']['median_s']:.2f} | {r['slowdown'] * 100:+.1f}% | "
                    f"{r['alone_before']['load']} / {r['with_neighbours']['load']} |")
    text = f"""## Harvesting: 2 active sandboxes among {cfg['neighbours']} mostly idle ones

Run {stamp}, `bench/bench_lifecycle_harvest.py`: 2 active sandboxes (cpu 1,
no cpu_max) each run a shell loop of {cfg['work']} iterations at the same
time, {cfg['rounds']} times per phase (median of the {2 * cfg['rounds']} job
times). Neighbours: cpu 0.1, each sleeping a random 1..{2 * cfg['wake_s']} s
and then spinning {cfg['burst']} iterations, forever. Target: the active
ones less than 15% slower with the neighbours than alone.

| harvesting | alone s (before / after) | with neighbours s | slowdown | load (alone / with) |
|---|---:|---:|---:|---|
{chr(10).join(rows)}

Harvest state with the neighbours (on): {'; '.join(out['on']['metrics_with'])}.
"""
    write_section("harvest", text)
    print(text)


if __name__ == "__main__":
    main()
