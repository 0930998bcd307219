#!/usr/bin/python3
"""Pause and resume latency through warrend's API (p50/p99), on an idle
sandbox and on a busy one (a spinning process and 20 sleeping ones), next to
the kernel's part alone (cgroup.freeze written and cgroup.events waited on
directly), and the cost of auto-resume: `true` run in a paused sandbox vs a
running one.

    bench/bench_lifecycle.py BUILD_DIR

Environment: BENCH_LIFE_N (timed pause+resume cycles per kind, default 200),
BENCH_LIFE_WARMUP (untimed cycles first, default 5).

Starts its own warrend (temp state and run dirs, socket, cgroup base named
after this run) and removes everything it made on exit, also on failure or
^C. Writes bench/results/lifecycle.md and lifecycle-<UTC time>.json.
"""
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class Conn(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=120)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


class Api:
    def __init__(self, sock):
        self.c = Conn(sock)

    def call(self, method, path, body=None, expect=(200, 201, 204)):
        hdrs = {}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        self.c.request(method, path, body=data, headers=hdrs)
        r = self.c.getresponse()
        out = r.read()
        if r.status not in expect:
            raise RuntimeError(f"{method} {path}: {r.status} {out[:300]!r}")
        return json.loads(out) if out else None


def pct(v, p):
    s = sorted(v)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def summary(v):
    return {"n": len(v), "p50_ms": round(pct(v, 50), 3), "p99_ms": round(pct(v, 99), 3),
            "mean_ms": round(statistics.fmean(v), 3), "min_ms": round(min(v), 3)}


def cgroup_dirs(base):
    """<own cgroup>/<base> in every hierarchy (the daemon's cgroups)."""
    out = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if ctrls.startswith("name="):
            continue
        if ctrls == "":
            m = Path("/sys/fs/cgroup/unified")
            if not (m / "cgroup.procs").exists():
                m = Path("/sys/fs/cgroup")
        else:
            m = Path("/sys/fs/cgroup") / ctrls
        out.append(m / path.lstrip("/") / base)
    return out


def remove_cgroups(base):
    for d in cgroup_dirs(base):
        if not d.exists():
            continue
        for k in d.rglob("cgroup.kill"):
            try:
                k.write_text("1")
            except OSError:
                pass
        for p in d.rglob("cgroup.procs"):
            try:
                for pid in p.read_text().split():
                    os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.2)
        for sub in sorted((x for x in d.rglob("*") if x.is_dir()), key=lambda x: -len(x.parts)):
            try:
                sub.rmdir()
            except OSError:
                pass
        try:
            d.rmdir()
        except OSError:
            pass


def kernel_freeze(cg, n):
    """cgroup.freeze written, cgroup.events polled until it says so."""
    fz, ev = cg / "cgroup.freeze", cg / "cgroup.events"
    out = {"freeze": [], "thaw": []}
    for _ in range(n):
        for want, key in (("1", "freeze"), ("0", "thaw")):
            t0 = time.perf_counter()
            fz.write_text(want)
            while f"frozen {want}" not in ev.read_text():
                pass
            out[key].append((time.perf_counter() - t0) * 1000)
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: bench/bench_lifecycle.py BUILD_DIR")
    build = Path(sys.argv[1]).resolve()
    n = int(os.environ.get("BENCH_LIFE_N", "200"))
    warm = int(os.environ.get("BENCH_LIFE_WARMUP", "5"))
    if os.geteuid() != 0:
        sys.exit("bench-lifecycle: needs root (namespaces, cgroups)")
    for f in ("warrend", "warren-init"):
        if not (build / f).exists():
            sys.exit(f"bench-lifecycle: {build / f} not built (ninja -C {build})")
    imgs = subprocess.run([str(ROOT / "scripts/mkimage.sh"), str(build / "bench-images")],
                          check=True, capture_output=True, text=True).stdout.split()
    erofs = imgs[1]
    work = Path(tempfile.mkdtemp(prefix="warren-benchlife."))
    work.chmod(0o755)
    base = f"warren-benchlife-{os.getpid()}"
    sock = work / "run" / "warren.sock"
    cfg = work / "warrend.json"
    cfg.write_text(json.dumps({"socket": str(sock), "images": {"busybox": erofs},
                               "log_level": "warning"}))
    env = dict(os.environ, WARREN_STATE_DIR=str(work / "state"),
               WARREN_RUN_DIR=str(work / "run"), WARREN_CGROUP_BASE=base,
               WARREN_INIT=str(build / "warren-init"))
    log = open(work / "warrend.log", "wb")
    d = subprocess.Popen([str(build / "warrend"), "--config", str(cfg)], env=env,
                         stdout=log, stderr=log)
    res = {}
    try:
        for _ in range(300):
            if d.poll() is not None:
                raise RuntimeError("warrend exited: "
                                   + (work / "warrend.log").read_text()[-2000:])
            try:
                Api(str(sock)).call("GET", "/v1/health")
                break
            except OSError:
                time.sleep(0.1)
        api = Api(str(sock))
        kinds = {}
        kinds["idle"] = api.call("POST", "/v1/sandboxes",
                                 {"image": "busybox", "timeout": 3600})["id"]
        kinds["busy"] = api.call("POST", "/v1/sandboxes",
                                 {"image": "busybox", "timeout": 3600, "cpu": 0.5,
                                  "cpu_max": 0.5})["id"]
        api.call("POST", f"/v1/sandboxes/{kinds['busy']}/commands", {
            "cmd": "for i in $(seq 20); do sleep 100000 & done; while :; do :; done",
            "background": True})
        time.sleep(0.5)
        for kind, sid in kinds.items():
            p, r = [], []
            for i in range(warm + n):
                t0 = time.perf_counter()
                api.call("POST", f"/v1/sandboxes/{sid}/pause")
                t1 = time.perf_counter()
                api.call("POST", f"/v1/sandboxes/{sid}/resume")
                t2 = time.perf_counter()
                if i >= warm:
                    p.append((t1 - t0) * 1000)
                    r.append((t2 - t1) * 1000)
            res[f"api_pause_{kind}"] = summary(p)
            res[f"api_resume_{kind}"] = summary(r)
            cg = next(x / sid for x in cgroup_dirs(base) if (x / sid / "cgroup.freeze").exists())
            k = kernel_freeze(cg, n)
            res[f"kernel_freeze_{kind}"] = summary(k["freeze"])
            res[f"kernel_thaw_{kind}"] = summary(k["thaw"])
        # auto-resume: exec true on a paused sandbox vs a running one
        sid = kinds["idle"]
        run, paused = [], []
        for i in range(warm + n // 2):
            t0 = time.perf_counter()
            api.call("POST", f"/v1/sandboxes/{sid}/commands", {"cmd": ["true"]})
            t1 = time.perf_counter()
            api.call("POST", f"/v1/sandboxes/{sid}/pause")
            t2 = time.perf_counter()
            api.call("POST", f"/v1/sandboxes/{sid}/commands", {"cmd": ["true"]})
            t3 = time.perf_counter()
            if i >= warm:
                run.append((t1 - t0) * 1000)
                paused.append((t3 - t2) * 1000)
        res["exec_true_running"] = summary(run)
        res["exec_true_paused_auto_resume"] = summary(paused)
        for sid in kinds.values():
            api.call("DELETE", f"/v1/sandboxes/{sid}")
        checkpoints(api, res)
        snapshots(api, res, imgs[0])
    finally:
        try:
            d.send_signal(signal.SIGTERM)
            d.wait(timeout=30)
        except Exception:
            d.kill()
            d.wait()
        log.close()
        remove_cgroups(base)
        subprocess.run(["rm", "-rf", "--one-file-system", str(work)], check=False)
    write(res, n)


# A process holding 64 MiB of its own memory (an awk string), started as
# an orphan of a command so that no API call runs on the sandbox.
HOLD64 = ("awk 'BEGIN { s = sprintf(\"%67108864s\", \"x\"); print \"held\" > \"/tmp/held\"; "
          "close(\"/tmp/held\"); while (1) system(\"sleep 1000\") }'")


def checkpoints(api, res):
    """Pause to disk and resume of a container (CRIU): an idle sandbox (PID
    1, after one command) and one with a 64 MiB process, with its memory
    cgroup before and after the dump."""
    ck = api.call("GET", "/v1/health").get("checkpoint", {})
    if not ck.get("available"):
        res["checkpoint"] = {"skipped": ck.get("reason", "no checkpoint in /v1/health")}
        return
    n = int(os.environ.get("BENCH_LIFE_CKPT_N", "20"))
    for kind in ("idle", "mem64"):
        sid = api.call("POST", "/v1/sandboxes",
                       {"image": "busybox", "timeout": 3600, "memory_mb": 512})["id"]
        if kind == "mem64":
            api.call("POST", f"/v1/sandboxes/{sid}/commands", {"cmd": [
                "sh", "-c", HOLD64 + " >/dev/null 2>&1 </dev/null & "
                "while [ ! -e /tmp/held ]; do sleep 0.05; done"]})
        else:
            api.call("POST", f"/v1/sandboxes/{sid}/commands", {"cmd": ["true"]})
        dump, rest, before, after = [], [], [], []
        for i in range(n + 1):
            before.append(api.call("GET", f"/v1/sandboxes/{sid}")["usage"]["memory_bytes"])
            t0 = time.perf_counter()
            api.call("POST", f"/v1/sandboxes/{sid}/pause", {"keep_memory": False})
            t1 = time.perf_counter()
            after.append(api.call("GET", f"/v1/sandboxes/{sid}")["usage"]["memory_bytes"])
            t2 = time.perf_counter()
            api.call("POST", f"/v1/sandboxes/{sid}/resume")
            t3 = time.perf_counter()
            if i > 0:  # the first makes the sandbox's /proc and pins
                dump.append((t1 - t0) * 1000)
                rest.append((t3 - t2) * 1000)
        res[f"ckpt_dump_{kind}"] = summary(dump)
        res[f"ckpt_restore_{kind}"] = summary(rest)
        res[f"ckpt_memory_{kind}"] = {"before_bytes": statistics.median(before),
                                      "after_bytes": statistics.median(after)}
        api.call("DELETE", f"/v1/sandboxes/{sid}")


def snapshots(api, res, rootfs):
    """Snapshots of a container holding a 64 MiB process: files only vs
    with its processes, a create from each, and a fork of 4 with
    processes (docs/API-LIFECYCLE.md "Snapshot with processes")."""
    ck = api.call("GET", "/v1/health").get("checkpoint", {})
    if not ck.get("available"):
        res["snapshot"] = {"skipped": ck.get("reason", "no checkpoint in /v1/health")}
        return
    n = int(os.environ.get("BENCH_LIFE_SNAP_N", "10"))
    api.call("POST", "/v1/images/import", {"path": rootfs, "ref": "benchbase:1"})
    sid = api.call("POST", "/v1/sandboxes", {"image": "benchbase:1", "timeout": 3600,
                                             "memory_mb": 512})["id"]
    api.call("POST", f"/v1/sandboxes/{sid}/commands", {"cmd": [
        "sh", "-c", HOLD64 + " >/dev/null 2>&1 </dev/null & "
        "while [ ! -e /tmp/held ]; do sleep 0.05; done"]})
    t = {"snap_files": [], "snap_procs": [], "create_files": [], "create_procs": [],
         "fork4_procs": []}
    size = 0
    for i in range(n):
        for kind, procs in (("files", False), ("procs", True)):
            t0 = time.perf_counter()
            img = api.call("POST", f"/v1/sandboxes/{sid}/snapshot",
                           {"name": f"bsnap-{kind}:{i}", "processes": procs})
            t1 = time.perf_counter()
            kid = api.call("POST", "/v1/sandboxes", {"image": f"bsnap-{kind}:{i}",
                                                     "memory_mb": 512})["id"]
            t2 = time.perf_counter()
            api.call("DELETE", f"/v1/sandboxes/{kid}")
            t[f"snap_{kind}"].append((t1 - t0) * 1000)
            t[f"create_{kind}"].append((t2 - t1) * 1000)
            pd = img["config"]["labels"].get("dev.warren.snapshot.processes")
            if pd:
                size = api.call("GET", f"/v1/images/{pd}")["size"]
        t0 = time.perf_counter()
        kids = api.call("POST", f"/v1/sandboxes/{sid}/fork",
                        {"count": 4, "processes": True, "memory_mb": 512})["sandboxes"]
        t["fork4_procs"].append((time.perf_counter() - t0) * 1000)
        for k in kids:
            api.call("DELETE", f"/v1/sandboxes/{k['id']}")
    for k, v in t.items():
        res[k] = summary(v)
    res["snap_procs_image_bytes"] = size
    api.call("DELETE", f"/v1/sandboxes/{sid}")


def snap_lines(res):
    if "snapshot" in res:
        return [f"Snapshots with processes: skipped: {res['snapshot']['skipped']}", ""]
    if "snap_procs" not in res:
        return []
    out = ["### Snapshots of a container, with and without its processes", "",
           "A sandbox holding a 64 MiB process (an awk string): `POST .../snapshot` "
           "with files only and with `\"processes\": true` (frozen, CRIU dump, the "
           "dump imported as an image, the files), then `POST /v1/sandboxes` from "
           "the snapshot until it answers (with processes: the images unpacked, the "
           "tree restored under the new sandbox's ids and continued); and "
           "`POST .../fork {\"count\": 4, \"processes\": true}` until its answer. "
           f"Processes image: {res['snap_procs_image_bytes'] / 2**20:.1f} MiB "
           "(EROFS, uncompressed).", "",
           "| step | n | p50 ms | p99 ms |", "|---|---:|---:|---:|"]
    for k, label in (("snap_files", "snapshot, files"), ("snap_procs", "snapshot, processes"),
                     ("create_files", "create from it, files"),
                     ("create_procs", "create from it, processes"),
                     ("fork4_procs", "fork 4, processes")):
        v = res[k]
        out.append(f"| {label} | {v['n']} | {v['p50_ms']:.0f} | {v['p99_ms']:.0f} |")
    return out + [""]


def ckpt_lines(res):
    if "checkpoint" in res:
        return ["Checkpoint/restore (CRIU, `keep_memory: false`): skipped: "
                f"{res['checkpoint']['skipped']}", ""]
    out = ["### Pause to disk and resume of a container (CRIU)", "",
           "`POST .../pause {\"keep_memory\": false}` (dump of the process tree, its "
           "memory freed, the record committed, the tree killed) and `POST .../resume` "
           "(restore, record, continue), through the API, repeated on one sandbox. "
           "Idle: PID 1 after one command. mem64: plus a process holding 64 MiB. "
           "Memory: the sandbox's memory cgroup (`usage.memory_bytes`), median, "
           "running vs on disk (what stays: the writable layer's tmpfs).", "",
           "| sandbox | n | dump p50 ms | dump p99 ms | restore p50 ms | restore p99 ms "
           "| memory running MiB | memory on disk MiB |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for kind in ("idle", "mem64"):
        d, r, m = res[f"ckpt_dump_{kind}"], res[f"ckpt_restore_{kind}"], res[f"ckpt_memory_{kind}"]
        out.append(f"| {kind} | {d['n']} | {d['p50_ms']:.0f} | {d['p99_ms']:.0f} | "
                   f"{r['p50_ms']:.0f} | {r['p99_ms']:.0f} | "
                   f"{m['before_bytes'] / 2**20:.1f} | {m['after_bytes'] / 2**20:.1f} |")
    return out + [""]


def write(res, n):
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    meta = {"n": n, "loadavg": os.getloadavg(), "nproc": os.cpu_count(),
            "kernel": os.uname().release, "time": stamp}
    (out / f"lifecycle-{stamp}.json").write_text(json.dumps({"meta": meta, "results": res},
                                                            indent=1))
    rows = [
        ("pause, idle sandbox (API)", "api_pause_idle"),
        ("resume, idle sandbox (API)", "api_resume_idle"),
        ("pause, busy sandbox (API)", "api_pause_busy"),
        ("resume, busy sandbox (API)", "api_resume_busy"),
        ("freeze, idle (kernel only)", "kernel_freeze_idle"),
        ("thaw, idle (kernel only)", "kernel_thaw_idle"),
        ("freeze, busy (kernel only)", "kernel_freeze_busy"),
        ("thaw, busy (kernel only)", "kernel_thaw_busy"),
        ("exec `true`, running sandbox", "exec_true_running"),
        ("exec `true`, paused sandbox (auto-resume)", "exec_true_paused_auto_resume"),
    ]
    lines = [
        "## Pause and resume latency",
        "",
        f"Run {stamp}, `bench/bench_lifecycle.py` (`make bench`), kernel {meta['kernel']}, "
        f"{meta['nproc']} CPUs, load average at the end "
        f"{' '.join(f'{x:.2f}' for x in meta['loadavg'])} (a shared machine: other "
        "builds and tests ran at the same time). n per row below.",
        "",
        "API: one `POST .../pause` or `.../resume` over the Unix socket with a "
        "keep-alive connection, answered once the freezer is done and the new state "
        "is committed (SQLite). Kernel only: `cgroup.freeze` written on the "
        "sandbox's unified cgroup and `cgroup.events` read until it says so, from "
        "Python (no daemon). Idle: PID 1 only. Busy: a spinning shell (cpu and "
        "cpu_max 0.5) and "
        "20 sleeping processes.",
        "",
        "| operation | n | p50 ms | p99 ms | mean ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, key in rows:
        r = res[key]
        lines.append(f"| {label} | {r['n']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
                     f"{r['mean_ms']:.2f} |")
    lines += [
        "",
        "Reading: the API adds the HTTP round trip and one SQLite commit to the "
        "kernel's part. Waiting for a freeze: kernfs notifies a change of "
        "cgroup.events at most once per 10 ms per cgroup, so a freeze that does not "
        "complete at once (the busy sandbox) right after a thaw waited that long for "
        "its POLLPRI (p50 8 ms, lifecycle-20261202T224213Z.json); the wait now also "
        "re-reads the file on a growing timer from 50 us. The busy sandbox is capped "
        "at 0.5 CPU: a task the CFS bandwidth control has throttled enters the "
        "freezer only when it runs again, which can take up to one CFS period "
        "(100 ms): that, and the machine's load, is the p99. Auto-resume adds a "
        "resume to the command's own cost, within the noise of a command here.",
        "",
        ""]
    lines += ckpt_lines(res)
    lines += snap_lines(res)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from lifecycle_common import write_section

    write_section("pause", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
