"""bench_pyfork: the floor of any fork-per-call Python design on this host.

    bench_pyfork.py N PARALLEL

A warm interpreter (the modules the Python zygote imports, then
gc.freeze(), as warren-pyzygote.py does) forks a child per call; the child
runs print(sum(range(1000))) from compiled source with stdout on a pipe and
exits; the parent reads the output (must be "499500\\n") and reaps it. No
namespace, cgroup, mount, confinement or message of any kind: what is left
is the fork itself, the copy-on-write faults of the parent and the child,
the code and the exit. A function-tier Python call cannot be cheaper than
this on the same machine, so python-c / py-fork is the best ratio target (b)
could reach here (bench/results/function.md).

PARALLEL workers are processes, each its own warm interpreter doing its
share of N after BENCH_WARMUP (default 5) untimed calls. BENCH_RAW=FILE
appends every timed sample (ns) to FILE, one per line. Prints one JSON
object on stdout like bench_spawn and bench_function: mode, n, parallel,
warmup, p50_us, p99_us, mean_us, min_us, max_us, per_sec, elapsed_s.
Exit status: 0 ok, 1 a call failed or printed the wrong thing, 2 usage.
"""
import ctypes  # noqa: F401 (the zygote's imports, so the heap is alike)
import gc
import json
import os
import resource  # noqa: F401
import select  # noqa: F401
import signal  # noqa: F401
import socket  # noqa: F401
import struct
import sys
import time

CODE = "print(sum(range(1000)))"
WANT = b"499500\n"


def one(code):
    r, w = os.pipe()
    t0 = time.monotonic_ns()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(w, 1)
        status = 0
        try:
            exec(compile(code, "<call>", "exec"), {"__name__": "__main__",
                                                   "__builtins__": __builtins__})
            sys.stdout.flush()
        except BaseException:
            status = 1
        os._exit(status)
    os.close(w)
    out = b""
    while True:
        chunk = os.read(r, 4096)
        if not chunk:
            break
        out += chunk
    os.close(r)
    _, st = os.waitpid(pid, 0)
    dt = time.monotonic_ns() - t0
    return dt, st == 0 and out == WANT


def worker(n, warmup, go_r, res_w):
    ok = True
    for _ in range(warmup):
        ok &= one(CODE)[1]
    os.read(go_r, 1)
    samples = []
    for _ in range(n):
        dt, good = one(CODE)
        ok &= good
        samples.append(dt)
    blob = struct.pack("=B%dQ" % len(samples), ok, *samples)
    while blob:
        blob = blob[os.write(res_w, blob):]
    os._exit(0)


def main():
    if len(sys.argv) != 3:
        print("usage: bench_pyfork.py N PARALLEL", file=sys.stderr)
        return 2
    n, par = int(sys.argv[1]), int(sys.argv[2])
    if n < 1 or par < 1:
        print("bench_pyfork: N and PARALLEL must be positive", file=sys.stderr)
        return 2
    warmup = int(os.environ.get("BENCH_WARMUP", "5"))
    gc.collect()
    gc.freeze()
    go_r, go_w = os.pipe()
    kids = []
    for i in range(par):
        share = n // par + (1 if i < n % par else 0)
        rr, rw = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(rr)
            worker(share, warmup, go_r, rw)
        os.close(rw)
        kids.append((pid, rr, share))
    time.sleep(0.05 * par)  # workers finish their warm-up before the clock starts
    t0 = time.monotonic()
    os.write(go_w, b"g" * par)
    samples, ok = [], True
    for pid, rr, share in kids:
        blob = b""
        while True:
            chunk = os.read(rr, 65536)
            if not chunk:
                break
            blob += chunk
        os.close(rr)
        _, st = os.waitpid(pid, 0)
        if st != 0 or len(blob) != 1 + 8 * share:
            ok = False
            continue
        ok &= bool(blob[0])
        samples.extend(struct.unpack_from("=%dQ" % share, blob, 1))
    elapsed = time.monotonic() - t0
    if not ok or not samples:
        print("bench_pyfork: a call failed or printed the wrong thing", file=sys.stderr)
        return 1
    raw = os.environ.get("BENCH_RAW")
    if raw:
        with open(raw, "a") as f:
            f.write("".join("%d\n" % s for s in samples))
    v = sorted(samples)

    def pct(p):
        return v[min(max(-(-p * len(v) // 100), 1), len(v)) - 1] / 1e3

    print(json.dumps({"mode": "py-fork", "n": len(v), "parallel": par, "warmup": warmup,
                      "p50_us": pct(50), "p99_us": pct(99), "mean_us": sum(v) / len(v) / 1e3,
                      "min_us": v[0] / 1e3, "max_us": v[-1] / 1e3,
                      "per_sec": len(v) / elapsed, "elapsed_s": elapsed}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
