#!/usr/bin/python3
"""What the file-access trail (fanotify, "file_trail" at create) costs a
sandbox: the same file-op and exec loops in two sandboxes of one warrend,
one with the trail and one without, interleaved round by round so that the
machine's load falls on both alike (the ratio is the number; absolute times
on a shared machine are not).

    bench/bench_trail.py BUILD_DIR [IMAGES_DIR]

BUILD_DIR holds warrend and warren-init; IMAGES_DIR the test images
(busybox), default BUILD_DIR/tests/test-images or build-test's. Environment:
BENCH_TRAIL_ROUNDS (default 5), BENCH_TRAIL_OPS (file-op iterations per
round, 3000), BENCH_TRAIL_EXECS (execs per round, 300).

Starts its own warrend (the e2e harness: temp state, socket, cgroup base
named after this run) and removes everything on exit. Writes
bench/results/trail.md and trail-<UTC time>.json.
"""
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "sdk" / "python"))


def main():
    build = Path(sys.argv[1]).resolve()
    os.environ.setdefault("WARREN_BUILD", str(build))
    spec = importlib.util.spec_from_file_location("wr_e2e", ROOT / "tests/e2e/conftest.py")
    h = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(h)
    import warren
    from warren._http import ConnectionConfig, SyncHTTP
    rounds = int(os.environ.get("BENCH_TRAIL_ROUNDS", "5"))
    ops = int(os.environ.get("BENCH_TRAIL_OPS", "3000"))
    execs = int(os.environ.get("BENCH_TRAIL_EXECS", "300"))
    with tempfile.TemporaryDirectory(prefix="wr-bench-trail-") as tmp:
        d = h.Daemon(build, tmp, "trail")
        if len(sys.argv) > 2:
            imgs = Path(sys.argv[2]).resolve()
            cfg = json.loads(d.config.read_text())
            cfg["images"] = {"busybox": str(imgs / "busybox")}
            d.config.write_text(json.dumps(cfg))
        d.start()
        try:
            conn = {"base_url": f"http://127.0.0.1:{d.port}", "api_key": d.tokens["alice"]}
            http = SyncHTTP(ConnectionConfig.resolve(**conn))
            sbs = {}
            for mode, body in (("off", {}), ("on", {"file_trail": True})):
                r = http.json("POST", "/sandboxes",
                              json={"image": "busybox", "timeout": 3600, **body})
                sbs[mode] = warren.Sandbox.connect(r["id"], **conn)
            # open + read + write in the shell itself (no exec per op), and
            # exec of a binary (fork + exec + exit per op)
            loops = {
                "file-ops": ["sh", "-c", f"i=0; while [ $i -lt {ops} ]; do "
                             "read x < /etc/passwd; echo $i > /tmp/bench-f; "
                             "i=$((i+1)); done"],
                "exec": ["sh", "-c", f"i=0; while [ $i -lt {execs} ]; do /bin/busybox true; "
                         "i=$((i+1)); done"],
            }
            per = {"file-ops": ops, "exec": execs}
            times = {(k, m): [] for k in loops for m in sbs}
            loads = []
            for _ in range(rounds):
                loads.append(os.getloadavg()[0])
                for k, argv in loops.items():
                    for m in (("off", "on") if _ % 2 == 0 else ("on", "off")):
                        t0 = time.perf_counter()
                        res = sbs[m].commands.run(argv, timeout=600, request_timeout=660)
                        dt = time.perf_counter() - t0
                        assert res.exit_code == 0, res
                        times[(k, m)].append(dt / per[k] * 1e6)
            time.sleep(1.5)
            ev = http.json("GET", "/events", params={"layer": "file", "limit": 1000,
                                                      "sandbox": sbs["on"].sandbox_id})
            rows = len(ev["events"])
            counted = sum(int(e["count"]) for e in ev["events"])
            for s in sbs.values():
                s.kill()
        finally:
            problems = d.finish()
            if problems:
                print("\n".join(problems), file=sys.stderr)
    kern = os.uname().release
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    res = {"rounds": rounds, "ops": ops, "execs": execs, "kernel": kern, "commit": commit,
           "load": loads, "event_rows": rows, "events_counted": counted,
           "us_per_op": {f"{k}/{m}": v for (k, m), v in times.items()}}
    out = ROOT / "bench" / "results"
    (out / f"trail-{stamp}.json").write_text(json.dumps(res, indent=1))
    md = ["# File-access trail: what it costs a sandbox", "",
          f"Median of {rounds} interleaved rounds; kernel {kern}, 2 CPUs, load average "
          f"{statistics.median(loads):.1f} when run (commit {commit}, {stamp}).", "",
          "| loop | trail off | trail on | ratio |", "|---|---|---|---|"]
    for k in loops:
        off = statistics.median(times[(k, "off")])
        on = statistics.median(times[(k, "on")])
        md.append(f"| {k} | {off:.1f} us | {on:.1f} us | {on / off:.2f}x |")
    md += ["", f"`file-ops`: one iteration opens and reads /etc/passwd and opens and writes "
           f"/tmp/bench-f from the shell ({ops} per round). `exec`: one fork+exec of "
           f"/bin/busybox ({execs} per round). The trailed sandbox's events: {rows} rows "
           f"standing for {counted} accesses (merged by the reader and the audit's window, "
           f"rate limited per sandbox)."]
    (out / "trail.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
