#!/usr/bin/python3
"""The VM tiers' network cost (src/tiers/qemu_net.c), side by side with the
container tier in one run, on tests/e2e/netnode.py's node (namespaces of
this run only; the "internet" is a namespace too):

* microVM create time (API, template restore) offline (no NIC) vs
  networked (allowlist: pool namespace + NIC template + filter attach);
* TCP connect latency from inside: 50 sequential `wr-probe connect-tcp` to
  an allowed address minus 50 `wr-probe exit 0` (the process start), per
  connect, in a container and in a microVM (slirp + TCG);
* a burst: `wr-probe portscan` of 200 refused ports (parallel connects),
  elapsed ms, container vs microVM.

    bench/run_vm_net.sh BUILD_DIR

Writes bench/results/vm_net.md (with `uptime` load next to the numbers)."""
import os
import re
import statistics
import time
from pathlib import Path


from conftest import Client, build  # noqa: F401 (a fixture)
from netnode import INET_ADDR, NetDaemon, create_patiently, netd, netns  # noqa: F401
from vmtiers import guest

ROOT = Path(__file__).resolve().parents[1]
N = int(os.environ.get("BENCH_VMNET_N", "5"))
MVM = {"tier": "microvm", "image": "busybox-erofs", "memory_mb": 256, "disk_mb": 128}
ALLOW = {"mode": "allowlist",
         "allow": [{"cidr": f"{INET_ADDR}/32", "ports": "8000-8300", "protocol": "tcp"}]}


def load():
    return open("/proc/loadavg").read().split()[0]


def create_ms(api, **spec):
    t = time.monotonic()
    sid = create_patiently(api, **spec)
    return sid, (time.monotonic() - t) * 1000


def loop_ms(api, sid, cmd, n=50):
    """busybox's date has no %N: /proc/uptime (10 ms) around n runs."""
    out = api.run(sid, ["sh", "-c", f"read s x </proc/uptime; i=0; while [ $i -lt {n} ]; do "
                        f"{cmd} >/dev/null; i=$((i+1)); done; read e x </proc/uptime; "
                        "echo $s $e"], timeout=600)
    s, e = (float(x) for x in out["stdout"].split())
    return (e - s) * 1000.0 / n


def connect_ms(api, sid):
    c = loop_ms(api, sid, f"wr-probe connect-tcp {INET_ADDR} 8080")
    base = loop_ms(api, sid, "wr-probe exit 0")
    return c - base, c, base


def scan_ms(api, sid):
    t = time.monotonic()
    out = api.run(sid, ["wr-probe", "portscan", INET_ADDR, "8100", "8299", "3000"], timeout=300)
    return (time.monotonic() - t) * 1000, out["stdout"].strip()


def test_bench_vm_net(build, netd, tmp_path_factory):
    d = NetDaemon(build, tmp_path_factory.mktemp("bvmnet"), "bvmnet", slot=22,
                  extra={"microvm": guest(build)})
    d.start()
    api = Client(d, timeout=600)
    rows, made = [], []
    try:
        # templates of both variants first (their boots are not creates)
        for net in (None, ALLOW):
            sid, _ = create_ms(api, **MVM, **({"network": net} if net else {}))
            api.kill(sid)
        off, on = [], []
        for _ in range(N):
            sid, ms = create_ms(api, **MVM)
            off.append(ms)
            api.kill(sid)
            sid, ms = create_ms(api, **MVM, network=ALLOW)
            on.append(ms)
            api.kill(sid)
        rows.append(("microVM create, offline (no NIC), p50 ms",
                     f"{statistics.median(off):.0f}", load()))
        rows.append(("microVM create, allowlist (NIC), p50 ms",
                     f"{statistics.median(on):.0f}", load()))
        cid = create_patiently(api, network=ALLOW)
        made.append(cid)
        mid = create_patiently(api, **MVM, network=ALLOW)
        made.append(mid)
        for name, sid in (("container", cid), ("microVM", mid)):
            per, c, base = connect_ms(api, sid)
            rows.append((f"{name}: TCP connect (allowed, accepted), ms each",
                         f"{per:.2f} (loop {c:.2f} - start {base:.2f})", load()))
        for name, sid in (("container", cid), ("microVM", mid)):
            ms, line = scan_ms(api, sid)
            rows.append((f"{name}: 200 parallel connects (refused by the host), ms",
                         f"{ms:.0f} ({line})", load()))
    finally:
        for sid in made:
            api.kill(sid)
        api.close()
        problems = d.finish() + d.gone_problems()
    assert not problems, problems
    out = ["# VM tiers' network (bench/bench_vm_net.py)", "",
           f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, TCG, N={N}; "
           "load = 1-minute load average when the row was measured.", "",
           "| measure | value | load |", "|---|---|---|"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    res = ROOT / "bench" / "results" / "vm_net.md"
    res.write_text("\n".join(out) + "\n")
    print("\n".join(out))
    assert all(re.match(r"^-?\d", b) for _, b, _ in rows)
