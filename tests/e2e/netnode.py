"""A node with networking on, for the network e2e tests (issue 6).

The daemon runs in a network namespace made here ("host"), whose uplink is
a veth into another one ("internet", 198.18.0.2, and the metadata address
169.254.169.254). Bridge, nftables table, forwarding sysctls and veths all
live in those namespaces: nothing on the machine's own network changes,
and nothing is sent to a real network. Everything is removed at the end,
also when a test fails.

Fixtures (registered in conftest.py; tests/redteam/test_d_network.py
imports netns and NetDaemon too):
  netns       the "host" and "internet" namespaces and their servers (session)
  netd        a NetDaemon in "host" (per test module)
  napi        a Unix-socket client of netd
  svc_daemon  a fresh_netd with the shipped services file, started
  fresh_netd  factory of more NetDaemons (restarts, other configs) in the
              same "host" namespace, each with its own bridge, range, table
              and veth prefix; they are stopped and checked at the test's end

Names carry the test process's pid: helpers running the suite at the same
time never share a namespace, bridge or table."""
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from harness import Daemon

ROOT = Path(__file__).resolve().parents[2]
PID = os.getpid()
HOST_NS = f"wrh{PID}"
INET_NS = f"wri{PID}"
UPLINK = f"wru{PID}"
INET_ADDR = "198.18.0.2"
HOST_ADDR = "198.18.0.1"
OTHER_RESOLVER = "198.18.0.53"  # an address in "internet" that is not the forwarder
SERVICES_FILE = str(ROOT / "deploy" / "services.json")


def sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


def in_ns(ns, *args, check=True):
    return sh("ip", "netns", "exec", ns, *args, check=check)


def slot_names(slot):
    """Bridge, table, range, gateway and veth prefix of daemon number slot."""
    return {"bridge": f"wrb{PID}{'' if slot == 0 else slot}",
            "table": f"warren-e2e-{PID}" + ("" if slot == 0 else f"-{slot}"),
            "range": f"10.201.{4 * slot}.0/22",
            "gateway": f"10.201.{4 * slot}.1",
            "veth_prefix": "wrv" if slot == 0 else f"wv{slot}"}


_HTTP = ("import http.server, socketserver\n"
         "class H(http.server.BaseHTTPRequestHandler):\n"
         "    def do_GET(self):\n"
         "        b = self.client_address[0].encode()\n"
         "        self.send_response(200); self.send_header('Content-Length', str(len(b)))\n"
         "        self.end_headers(); self.wfile.write(b)\n"
         "    def log_message(self, *a): pass\n"
         "socketserver.TCPServer.allow_reuse_address = True\n"
         "http.server.ThreadingHTTPServer(('0.0.0.0', PORT), H).serve_forever()\n")


@pytest.fixture(scope="session")
def netns():
    made = []
    servers = []
    try:
        for ns in (HOST_NS, INET_NS):
            sh("ip", "netns", "add", ns)
            made.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", UPLINK, "netns", HOST_NS, "type", "veth",
           "peer", "name", "inet0", "netns", INET_NS)
        sh("ip", "-n", HOST_NS, "addr", "add", f"{HOST_ADDR}/24", "dev", UPLINK)
        sh("ip", "-n", HOST_NS, "link", "set", UPLINK, "up")
        sh("ip", "-n", HOST_NS, "route", "add", "default", "via", INET_ADDR)
        sh("ip", "-n", INET_NS, "addr", "add", f"{INET_ADDR}/24", "dev", "inet0")
        for a in ("169.254.169.254", OTHER_RESOLVER):
            sh("ip", "-n", INET_NS, "addr", "add", f"{a}/32", "dev", "lo")
        sh("ip", "-n", INET_NS, "link", "set", "inet0", "up")
        # the internet's web server, which answers with the client's address
        servers.append(subprocess.Popen(["ip", "netns", "exec", INET_NS, "/usr/bin/python3",
                                         "-c", _HTTP.replace("PORT", "8080")]))
        # a server on the "host" itself, on every address
        servers.append(subprocess.Popen(["ip", "netns", "exec", HOST_NS, "/usr/bin/python3",
                                         "-c", _HTTP.replace("PORT", "9099")]))
        time.sleep(0.5)
        yield
    finally:
        for s in servers:
            s.kill()
            s.wait()
        for ns in made:
            sh("ip", "netns", "del", ns, check=False)


class NetDaemon(Daemon):
    """A warrend inside the test's "host" namespace, networking on."""

    def __init__(self, build, root, name, slot=0, services=False, network=None, **kw):
        self.names = slot_names(slot)
        net = {"enable": True, "bridge": self.names["bridge"], "range": self.names["range"],
               "table": self.names["table"], "uplink": UPLINK, "pool_size": 8,
               "veth_prefix": self.names["veth_prefix"], "teardown_per_sec": 1000,
               # the forwarder on the bridge address (dns.c)
               "dns": {"upstreams": [INET_ADDR]}}
        if services:
            net["services_file"] = SERVICES_FILE
        net.update(network or {})
        extra = dict(kw.pop("extra", None) or {})
        extra["network"] = net
        super().__init__(build, root, name, extra=extra, **kw)

    @property
    def gateway(self):
        return self.names["gateway"]

    def v2_cgroup(self, sid):
        """The sandbox's cgroup in the v2 hierarchy (beneath this test's own:
        the daemon starts in it)."""
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            hid, ctrls, path = line.split(":", 2)
            if hid == "0" and ctrls == "":
                mount = Path("/sys/fs/cgroup/unified")
                if not (mount / "cgroup.procs").exists():
                    mount = Path("/sys/fs/cgroup")
                return mount / path.lstrip("/") / self.cg_base / sid
        raise AssertionError("no v2 cgroup hierarchy")

    def delete_all(self):
        # the TCP listener is inside the namespace: the Unix socket only
        c = self.client()
        r = c.get("/v1/sandboxes?state=running&limit=1000")
        for sb in r.json()["sandboxes"]:
            c.kill(sb["id"])
        c.close()

    def start(self):
        # warrend is started through nsenter: only its network namespace
        # differs (ip netns exec would also remount /sys)
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

    def gone_problems(self):
        """After a clean stop with no sandbox left: bridge and table gone."""
        links = in_ns(HOST_NS, "ip", "-o", "link", "show").stdout
        tables = in_ns(HOST_NS, "nft", "list", "tables").stdout
        bridge, table = self.names["bridge"], self.names["table"]
        if f" {bridge}:" in links or f"table inet {table}\n" in tables + "\n":
            return [f"left behind: bridge {bridge} or table {table}:\n{links}\n{tables}"]
        return []


@pytest.fixture(scope="module")
def netd(build, netns, tmp_path_factory):
    d = NetDaemon(build, tmp_path_factory.mktemp("netd"), "net")
    d.start()
    yield d
    problems = d.finish()
    # a clean shutdown with no sandbox left removes the bridge and table
    problems += d.gone_problems()
    assert not problems, "\n".join(problems) + "\n" + d.log_text()


@pytest.fixture
def napi(netd):
    c = netd.client()
    yield c
    c.close()


_slots = [0]


@pytest.fixture
def fresh_netd(build, netd, tmp_path):
    """More networked daemons. They depend on netd so that netd is the
    first to change the forwarding sysctls and the last to restore them."""
    made = []

    def make(**kw):
        _slots[0] += 1
        d = NetDaemon(build, tmp_path / f"n{len(made)}", f"n{len(made)}",
                      slot=_slots[0], **kw)
        made.append(d)
        return d

    yield make
    problems = []
    for d in made:
        problems += d.finish()
        problems += d.gone_problems()
    assert not problems, "\n".join(problems)


@pytest.fixture
def svc_daemon(fresh_netd):
    """A networked node with the shipped services file (pypi, npm, ...)."""
    return fresh_netd(services=True).start()


def probe(api, sid, *args):
    """wr-probe's one line, e.g. "connect-tcp ok" or "... errno=EPERM"."""
    return api.run(sid, ["wr-probe", *args])["stdout"].strip()


def refusals(api, sid, want, timeout=5.0):
    """The sandbox's refusals once at least `want` are in `recent`."""
    deadline = time.time() + timeout
    while True:
        rf = api.get(f"/v1/sandboxes/{sid}/network").json()["refusals"]
        if len(rf["recent"]) >= want or time.time() > deadline:
            return rf
        time.sleep(0.1)


# A sandbox's server in these tests is a shell loop restarting `nc -l` after
# each connection: a connection in the gap between two finds no listener.
# Up to five tries, so a test checks what it means to, not that gap.
def tcp_read(ns, host, port):
    """What the server at host:port says, from namespace ns."""
    got = ""
    for _ in range(5):
        got = in_ns(ns, "/usr/bin/python3", "-c",
                    f"import socket; s = socket.create_connection(('{host}', {port}), 3);"
                    "print(s.recv(100).decode().strip())", check=False).stdout.strip()
        if got:
            break
        time.sleep(0.3)
    return got


def unix_read(path):
    got = ""
    for _ in range(5):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(3)
            s.connect(path)
            got = s.recv(100).decode().strip()
        if got:
            break
        time.sleep(0.3)
    return got


def create_patiently(api, **spec):
    """Create; on 429 (the node's admission control: memory pressure from
    whatever else runs on the machine) wait and try again, up to a minute,
    as a client is told to. Returns the id."""
    spec.setdefault("image", "busybox")
    deadline = time.time() + 60
    while True:
        r = api.post("/v1/sandboxes", spec)
        if r.status != 429 or time.time() > deadline:
            assert r.status == 201, r
            return r.json()["id"]
        time.sleep(0.5)
