"""DNS forwarder latency (src/net/dns.h), in a network namespace made here:
  direct    a query straight to the test upstream (the baseline)
  allowed   the same query through the forwarder (policy match, upstream,
            allow_ip, reply rebuilt)
  refused   a name the policy does not allow (answered NXDOMAIN inline,
            refusal counted and rate limited)
Sequential queries over UDP from one client socket; the upstream is
python3-dnslib (tests/integration/test_dns.py), so "allowed - direct" is
what the forwarder adds. Prints one JSON object; --out writes it too.

  WARREN_BUILD=build /usr/bin/python3 bench/bench_dns.py [N] [--out FILE]"""
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests/integration"))
import test_dns as t  # noqa: E402
from dnslib import DNSRecord  # noqa: E402


def run(n):
    subprocess.run(["ip", "netns", "add", t.NS], check=True)
    up = tool = None
    try:
        subprocess.run(["ip", "-n", t.NS, "link", "set", "lo", "up"], check=True)
        for a in [t.FWD, t.UP, t.SB["sb1"]]:
            subprocess.run(["ip", "-n", t.NS, "addr", "add", f"{a}/32", "dev", "lo"],
                           check=True)
        up = t.Upstream()
        tool = t.Tool("--listen", t.FWD, "--upstream", t.UP,
                      "--sandbox", f"sb1={t.SB['sb1']}=pypi.org")
        s = t.in_netns(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        s.bind((t.SB["sb1"], 0))
        s.settimeout(3)

        def series(dst, name):
            wire = DNSRecord.question(name, "A").pack()
            out = []
            for _ in range(n):
                t0 = time.perf_counter_ns()
                s.sendto(wire, (dst, 53))
                s.recvfrom(4096)
                out.append((time.perf_counter_ns() - t0) / 1000)
            return out

        res = {}
        for _ in range(3):  # interleaved rounds
            for mode, dst, name in [("direct", t.UP, "pypi.org"),
                                    ("allowed", t.FWD, "pypi.org"),
                                    ("refused", t.FWD, "evil.example")]:
                res.setdefault(mode, []).extend(series(dst, name))
        s.close()

        def q(v, p):
            v = sorted(v)
            return round(v[min(len(v) - 1, int(len(v) * p))], 1)

        out = {"bench": "dns", "n": len(res["direct"]),
               "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "build": str(t.BUILD), "loadavg": os.getloadavg()[0]}
        for mode, v in res.items():
            out[mode] = {"p50_us": q(v, 0.5), "p99_us": q(v, 0.99),
                         "mean_us": round(statistics.mean(v), 1)}
        out["added_p50_us"] = round(out["allowed"]["p50_us"] - out["direct"]["p50_us"], 1)
        return out
    finally:
        if tool is not None:
            tool.close()
        if up is not None:
            up.close()
        subprocess.run(["ip", "netns", "del", t.NS], check=False)


if __name__ == "__main__":
    args = sys.argv[1:]
    path = None
    if "--out" in args:
        i = args.index("--out")
        path = args[i + 1]
        del args[i:i + 2]
    r = run(int(args[0]) if args else 1000)
    print(json.dumps(r))
    if path:
        Path(path).write_text(json.dumps(r, indent=1) + "\n")
