"""The VM tiers under the same network policy as containers (issues 9 and 10,
src/tiers/qemu_net.c): QEMU sits in the sandbox's pooled network namespace
and its cgroup, the guest has a virtio-net NIC behind QEMU's user-mode
network, so every guest connection is a socket of QEMU that the sandbox's
eBPF filter decides, with the same refusal events; guest DNS goes to
warrend's forwarder. Runs on netnode.py's node (namespaces of this test
only) plus a test-made authoritative DNS server in its "internet"; few
boots (TCG): one microVM daemon whose templates hold a NIC, one vm-tier
boot."""
import subprocess
import time

import pytest

from conftest import Client
from netnode import HOST_NS, INET_ADDR, INET_NS, create_patiently, refusals, tcp_read
from vmtiers import guest, vm_image

dnslib = pytest.importorskip("dnslib")

# names the test's resolver answers; everything else is NXDOMAIN there too
OK_NAME = "ok.vmnet.test"
OTHER_NAME = "other.vmnet.test"

_DNS = ("import socketserver, threading\n"
        "from dnslib import A, QTYPE, RR, DNSRecord, RCODE\n"
        "NAMES = {'ok.vmnet.test.': 'ADDR', 'other.vmnet.test.': 'ADDR'}\n"
        "def answer(data):\n"
        "    q = DNSRecord.parse(data); r = q.reply(); n = str(q.q.qname).lower()\n"
        "    if n in NAMES and q.q.qtype == QTYPE.A:\n"
        "        r.add_answer(RR(q.q.qname, QTYPE.A, rdata=A(NAMES[n]), ttl=60))\n"
        "    elif n not in NAMES:\n"
        "        r.header.rcode = RCODE.NXDOMAIN\n"
        "    return r.pack()\n"
        "class U(socketserver.BaseRequestHandler):\n"
        "    def handle(self):\n"
        "        self.request[1].sendto(answer(self.request[0]), self.client_address)\n"
        "class T(socketserver.StreamRequestHandler):\n"
        "    def handle(self):\n"
        "        n = int.from_bytes(self.rfile.read(2), 'big'); a = answer(self.rfile.read(n))\n"
        "        self.wfile.write(len(a).to_bytes(2, 'big') + a)\n"
        "socketserver.ThreadingUDPServer.allow_reuse_address = True\n"
        "socketserver.ThreadingTCPServer.allow_reuse_address = True\n"
        "u = socketserver.ThreadingUDPServer(('ADDR', 53), U)\n"
        "t = socketserver.ThreadingTCPServer(('ADDR', 53), T)\n"
        "threading.Thread(target=t.serve_forever, daemon=True).start()\n"
        "u.serve_forever()\n")

_HTTP80 = ("import http.server\n"
           "class H(http.server.BaseHTTPRequestHandler):\n"
           "    def do_GET(self):\n"
           "        b = b'port80'\n"
           "        self.send_response(200); self.send_header('Content-Length', str(len(b)))\n"
           "        self.end_headers(); self.wfile.write(b)\n"
           "    def log_message(self, *a): pass\n"
           "http.server.ThreadingHTTPServer(('ADDR', 80), H).serve_forever()\n")


@pytest.fixture(scope="module")
def inet_services(netns):
    """An authoritative resolver (the daemons' upstream) and a web server
    on port 80 in the test's internet."""
    procs = [subprocess.Popen(["ip", "netns", "exec", INET_NS, "/usr/bin/python3", "-c",
                               src.replace("ADDR", INET_ADDR)])
             for src in (_DNS, _HTTP80)]
    time.sleep(0.5)
    try:
        for p in procs:
            assert p.poll() is None, "a test server of the internet did not start"
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def bpf_events(api, sid, want, timeout=15.0):
    deadline = time.time() + timeout
    while True:
        ev = api.get(f"/v1/sandboxes/{sid}/events?layer=bpf-net").json()["events"]
        if len(ev) >= want or time.time() > deadline:
            return ev
        time.sleep(0.2)


def dns_events(api, sid, timeout=15.0):
    deadline = time.time() + timeout
    while True:
        ev = api.get(f"/v1/sandboxes/{sid}/events?layer=dns").json()["events"]
        if ev or time.time() > deadline:
            return ev
        time.sleep(0.2)


def sh(api, sid, script, timeout=60):
    return api.run(sid, ["sh", "-c", script], timeout=timeout)


@pytest.fixture(scope="module")
def mvd(build, netd, inet_services, tmp_path_factory):
    """A networked node with the microVM tier (templates on)."""
    from netnode import NetDaemon
    d = NetDaemon(build, tmp_path_factory.mktemp("mvnet"), "mvnet", slot=20,
                  extra={"microvm": guest(build)})
    d.start()
    yield d
    problems = d.finish() + d.gone_problems()
    assert not problems, "\n".join(problems) + "\n" + d.log_text()


@pytest.fixture
def mapi(mvd):
    c = Client(mvd, timeout=300)
    yield c
    c.close()


MVM = {"tier": "microvm", "image": "busybox-erofs", "memory_mb": 256, "disk_mb": 128}


def test_microvm_offline_has_no_nic(mapi):
    sid = create_patiently(mapi, **MVM)
    try:
        # no NIC at all: loopback only, nothing reachable
        assert sh(mapi, sid, "ls /sys/class/net")["stdout"].split() == ["lo"]
        out = mapi.run(sid, ["wr-probe", "connect-tcp", INET_ADDR, "8080"])["stdout"]
        assert "ok" not in out.split()[1:2], out
        n = mapi.get(f"/v1/sandboxes/{sid}/network").json()
        assert n["mode"] == "none" and n["enforced"] is True, n
    finally:
        mapi.kill(sid)


def http_get(api, sid, addr, port):
    """busybox nc: the guest's busybox wget crashes on this kernel (static
    glibc), nc does not."""
    return api.run(sid, ["sh", "-c", f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 10 {addr} {port}"],
                   timeout=60)


def body(out):
    return out["stdout"].split("\r\n\r\n", 1)[-1] if "200 OK" in out["stdout"] else ""


def resolve(api, sid, name):
    """A records only: busybox's parallel AAAA query waits out a timeout
    behind slirp."""
    return api.run(sid, ["nslookup", "-type=a", name], timeout=60)


def test_microvm_allowlist_dns_and_patch(mapi, mvd):
    sid = create_patiently(mapi, network={
        "mode": "allowlist", "domains": [OK_NAME],
        "allow": [{"cidr": f"{INET_ADDR}/32", "ports": "8080", "protocol": "tcp"}]}, **MVM)
    try:
        info = mapi.get(f"/v1/sandboxes/{sid}").json()
        assert info["network"]["address"].startswith("10.201."), info
        # eth0 of the guest, user-mode network behind it
        out = sh(mapi, sid, "cat /sys/class/net/eth0/operstate; cat /etc/resolv.conf")
        assert out["stdout"] == "up\nnameserver 10.0.2.3\n", out
        # allowed: through slirp, the pool namespace, the bridge and the NAT
        # (the internet sees the uplink's address)
        assert body(http_get(mapi, sid, INET_ADDR, 8080)) == "198.18.0.1"
        # refused by the filter on QEMU's cgroup, with its events
        out = mapi.run(sid, ["wr-probe", "connect-tcp", INET_ADDR, "8081"])["stdout"]
        assert not out.startswith("connect-tcp ok"), out
        rf = refusals(mapi, sid, 1, timeout=15)
        assert any((r["layer"], r["hook"], r["address"], r["port"]) ==
                   ("bpf-net", "connect4", INET_ADDR, 8081) for r in rf["recent"]), rf
        ev = bpf_events(mapi, sid, 1)
        assert any(e["sandbox"] == sid and e["subject"] == f"{INET_ADDR}:8081/tcp"
                   for e in ev), ev
        # port 80 of the same address: not before its name was resolved
        out = mapi.run(sid, ["wr-probe", "connect-tcp", INET_ADDR, "80"])["stdout"]
        assert not out.startswith("connect-tcp ok"), out
        # DNS: the allowed name through the forwarder, which lets its
        # address in on the web ports; another name is NXDOMAIN + dns event
        out = resolve(mapi, sid, OK_NAME)
        assert f"Address: {INET_ADDR}" in out["stdout"], out
        assert body(http_get(mapi, sid, INET_ADDR, 80)) == "port80"
        out = resolve(mapi, sid, OTHER_NAME)
        assert INET_ADDR not in out["stdout"] and "NXDOMAIN" in out["stdout"], out
        ev = dns_events(mapi, sid)
        assert any(e["sandbox"] == sid and OTHER_NAME in (e.get("subject") or "")
                   for e in ev), ev
        # live PATCH to none: new connections are refused
        r = mapi.request("PATCH", f"/v1/sandboxes/{sid}/network", json_body={"mode": "none"})
        assert r.status == 200, r
        out = mapi.run(sid, ["wr-probe", "connect-tcp", INET_ADDR, "8080"])["stdout"]
        assert not out.startswith("connect-tcp ok"), out
        assert body(http_get(mapi, sid, INET_ADDR, 8080)) == ""
    finally:
        mapi.kill(sid)


def test_microvm_second_networked_create_restores(mapi):
    """The first networked create made the NIC template; this one restores
    from it (copy-on-write RAM, QEMU born in its own pool namespace)."""
    sid = create_patiently(mapi, network={
        "mode": "allowlist",
        "allow": [{"cidr": f"{INET_ADDR}/32", "ports": "8080", "protocol": "tcp"}]}, **MVM)
    try:
        assert body(http_get(mapi, sid, INET_ADDR, 8080)) == "198.18.0.1"
        out = mapi.run(sid, ["wr-probe", "connect-tcp", INET_ADDR, "9099"])["stdout"]
        assert not out.startswith("connect-tcp ok"), out
        # the hostname is the sandbox's (IDENTITY after the restore)
        assert sh(mapi, sid, "hostname")["stdout"].strip() == sid
        # a published port: slirp listens on the sandbox's address and
        # forwards into the guest; a relay on loopback, DNAT from outside
        mapi.run(sid, ["sh", "-c", "while true; do echo hello-vm | nc -l -p 8000; done "
                                   ">/dev/null 2>&1 &"])
        r = mapi.post(f"/v1/sandboxes/{sid}/ports", {"port": 8000})
        assert r.status == 201, r
        assert tcp_read(HOST_NS, "127.0.0.1", r.json()["host_port"]) == "hello-vm"
        r = mapi.post(f"/v1/sandboxes/{sid}/ports",
                      {"port": 8000, "host": "198.18.0.1", "host_port": 18010})
        assert r.status == 201, r
        assert tcp_read(INET_NS, "198.18.0.1", 18010) == "hello-vm"
        r = mapi.delete(f"/v1/sandboxes/{sid}/ports/8000")
        assert r.status == 204, r
        assert tcp_read(INET_NS, "198.18.0.1", 18010) == ""
        # published again after the unpublish: the guest port is free
        r = mapi.post(f"/v1/sandboxes/{sid}/ports", {"port": 8000})
        assert r.status == 201, r
        assert tcp_read(HOST_NS, "127.0.0.1", r.json()["host_port"]) == "hello-vm"
    finally:
        mapi.kill(sid)


def test_microvm_filter_again_after_kill9(mvd):
    """A networked microVM outlives its daemon; the next start adopts it
    with its pool lease, its DNS registration and its filter again before
    it is served."""
    api = Client(mvd, timeout=300)
    sid = create_patiently(api, network={
        "mode": "allowlist", "domains": [OK_NAME],
        "allow": [{"cidr": f"{INET_ADDR}/32", "ports": "8080", "protocol": "tcp"}]}, **MVM)
    api.close()
    mvd.kill9()
    mvd.start()
    api = Client(mvd, timeout=300)
    try:
        assert api.get(f"/v1/sandboxes/{sid}").json()["state"] == "running"
        assert body(http_get(api, sid, INET_ADDR, 8080)) == "198.18.0.1"
        out = api.run(sid, ["wr-probe", "connect-tcp", INET_ADDR, "9099"])["stdout"]
        assert not out.startswith("connect-tcp ok"), out
        rf = refusals(api, sid, 1, timeout=15)
        assert any(r["port"] == 9099 for r in rf["recent"]), rf
        out = resolve(api, sid, OK_NAME)
        assert f"Address: {INET_ADDR}" in out["stdout"], out
    finally:
        api.kill(sid)
        api.close()


NET8080 = {"mode": "allowlist",
           "allow": [{"cidr": f"{INET_ADDR}/32", "ports": "8080", "protocol": "tcp"}]}


def allowed_and_refused(api, sid, port):
    """The allowed host through the NIC, and a refused port with its
    refusal event (bpf-net, connect4) of this sandbox."""
    assert body(http_get(api, sid, INET_ADDR, 8080)) == "198.18.0.1"
    out = api.run(sid, ["wr-probe", "connect-tcp", INET_ADDR, str(port)])["stdout"]
    assert not out.startswith("connect-tcp ok"), out
    deadline = time.time() + 15
    while True:
        ev = api.get(f"/v1/sandboxes/{sid}/events?layer=bpf-net").json()["events"]
        if any(e["subject"] == f"{INET_ADDR}:{port}/tcp" for e in ev) or time.time() > deadline:
            break
        time.sleep(0.2)
    assert any(e["sandbox"] == sid and e["subject"] == f"{INET_ADDR}:{port}/tcp"
               for e in ev), ev


def test_microvm_nic_after_pause_to_disk_and_restart(mvd):
    """keep_memory=false ends QEMU; the resume's QEMU gets the NIC again in
    the sandbox's namespace (held by warrend while the state is on disk),
    with the filter on its new cgroup before the guest runs. Suspended
    across a daemon restart (the namespace died with the daemon): adopted
    with its policy pending, and the resume takes a new pooled namespace
    and attaches the policy to the new QEMU."""
    api = Client(mvd, timeout=300)
    sid = create_patiently(api, network=NET8080, **MVM)
    try:
        addr = api.get(f"/v1/sandboxes/{sid}").json()["network"]["address"]
        allowed_and_refused(api, sid, 9101)
        r = api.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": False})
        assert r.status == 200, r
        n = api.get(f"/v1/sandboxes/{sid}/network").json()
        assert n["mode"] == "allowlist" and n["enforced"] is True, n
        r = api.post(f"/v1/sandboxes/{sid}/resume", None)
        assert r.status == 200 and r.json()["state"] == "running", r
        assert sh(api, sid, "cat /sys/class/net/eth0/operstate")["stdout"] == "up\n"
        allowed_and_refused(api, sid, 9102)
        assert api.get(f"/v1/sandboxes/{sid}").json()["network"]["address"] == addr

        # suspended while warrend restarts
        r = api.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": False})
        assert r.status == 200, r
        api.close()
        mvd.kill9()
        mvd.start()
        api = Client(mvd, timeout=300)
        info = api.get(f"/v1/sandboxes/{sid}").json()
        assert info["state"] == "paused", info
        # a PATCH while suspended is recorded and applies at the resume
        r = api.request("PATCH", f"/v1/sandboxes/{sid}/network",
                        json_body={"allow": [{"cidr": f"{INET_ADDR}/32", "ports": "8080",
                                              "protocol": "tcp"},
                                             {"cidr": f"{INET_ADDR}/32", "ports": "80",
                                              "protocol": "tcp"}]})
        assert r.status == 200 and r.json()["enforced"] is True, r
        r = api.post(f"/v1/sandboxes/{sid}/resume", None)
        assert r.status == 200 and r.json()["state"] == "running", r
        allowed_and_refused(api, sid, 9103)
        assert body(http_get(api, sid, INET_ADDR, 80)) == "port80"
        assert api.get(f"/v1/sandboxes/{sid}").json()["network"]["address"].startswith("10.201.")
    finally:
        api.kill(sid)
        api.close()


def test_microvm_snapshot_restores_nic_under_new_policy(mapi):
    """A networked microVM's snapshot restored into a new sandbox: the NIC
    is there, in the new sandbox's namespace, under the new sandbox's
    policy. A PATCH of a microVM created offline to a networked mode is a
    409 naming the field (it has no NIC and no namespace to give one)."""
    import os
    sid = create_patiently(mapi, network=NET8080, **MVM)
    name = f"mvnetsnap{os.getpid()}:1"
    sid2 = None
    try:
        r = mapi.request("PATCH", f"/v1/sandboxes/{sid}/network", json_body={"mode": "none"})
        assert r.status == 200, r
        r = mapi.post(f"/v1/sandboxes/{sid}/snapshot", {"name": name})
        assert r.status == 201, r
        mapi.kill(sid)
        sid = None
        sid2 = create_patiently(mapi, image=name, tier="microvm", network={
            "mode": "allowlist",
            "allow": [{"cidr": f"{INET_ADDR}/32", "ports": "8080", "protocol": "tcp"}]})
        allowed_and_refused(mapi, sid2, 9104)
        mapi.kill(sid2)
        sid2 = None
        # offline: a 409 for a networked PATCH, nothing changed
        sid2 = create_patiently(mapi, **MVM)
        r = mapi.request("PATCH", f"/v1/sandboxes/{sid2}/network",
                         json_body={"mode": "allowlist"})
        assert r.status == 409 and r.error == ("conflict", "mode"), r
        assert "created offline" in r.json()["error"]["message"], r
        assert mapi.get(f"/v1/sandboxes/{sid2}/network").json()["mode"] == "none"
    finally:
        for s in (sid, sid2):
            if s:
                mapi.kill(s)
        import urllib.parse
        mapi.request("DELETE", f"/v1/images/{urllib.parse.quote(name, safe='')}")


# ---- the vm tier: a whole Debian, DHCP by systemd-networkd ---------------------

BASH_GET = ("exec 3<>/dev/tcp/{a}/{p} || exit 7; printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3; "
            "timeout 10 cat <&3")


@pytest.fixture(scope="module")
def vmd(build, netd, inet_services, tmp_path_factory):
    from netnode import NetDaemon
    d = NetDaemon(build, tmp_path_factory.mktemp("vmnet"), "vmnet", slot=21,
                  extra={"vm": {"accel": "tcg", "boot_timeout": 600, "shutdown_timeout": 60},
                         "images": {"debian-vm": str(vm_image(build))}})
    d.start()
    yield d
    problems = d.finish() + d.gone_problems()
    assert not problems, "\n".join(problems) + "\n" + d.log_text()


def test_vm_tier_allowlist_and_refusal(build, vmd):
    api = Client(vmd, timeout=900)
    sid = create_patiently(api, tier="vm", image="debian-vm", memory_mb=512, timeout=1800,
                           network={"mode": "allowlist", "domains": [OK_NAME],
                                    "allow": [{"cidr": f"{INET_ADDR}/32", "ports": "8080",
                                               "protocol": "tcp"}]})
    try:
        # the agent answers before networkd's DHCP is done: wait for the lease
        deadline, out = time.time() + 180, {}
        while time.time() < deadline:
            out = api.run(sid, ["bash", "-c", BASH_GET.format(a=INET_ADDR, p=8080)],
                          timeout=60)
            if out["exit_code"] == 0:
                break
            time.sleep(2)
        assert out["stdout"].endswith("198.18.0.1"), out
        out = api.run(sid, ["bash", "-c", f"timeout 10 bash -c 'echo > /dev/tcp/{INET_ADDR}/8081'"],
                      timeout=60)
        assert out["exit_code"] != 0, out
        ev = bpf_events(api, sid, 1, timeout=30)
        assert any(e["sandbox"] == sid and e["subject"] == f"{INET_ADDR}:8081/tcp"
                   for e in ev), ev
        # DNS through slirp's alias to the forwarder
        out = api.run(sid, ["getent", "ahostsv4", OK_NAME], timeout=60)
        assert out["exit_code"] == 0 and INET_ADDR in out["stdout"], out
        out = api.run(sid, ["getent", "ahostsv4", OTHER_NAME], timeout=60)
        assert out["exit_code"] != 0, out
        ev = dns_events(api, sid, timeout=30)
        assert any(OTHER_NAME in (e.get("subject") or "") for e in ev), ev
    finally:
        api.kill(sid)
        api.close()

