"""Network plumbing end to end (issue 6): pool namespaces, NAT, the host's
protection, published ports, and no leftovers after a burst.

The node (fixtures netns, netd, napi) is tests/e2e/netnode.py's: a daemon
with networking on in a test-made "host" namespace whose uplink leads to a
test-made "internet" (198.18.0.2, and the metadata address
169.254.169.254)."""
import json
import os
import subprocess
import time

from netnode import (HOST_NS, INET_NS, create_patiently, in_ns, slot_names, tcp_read,
                     unix_read)

_names = slot_names(0)  # netd's
BRIDGE = _names["bridge"]
TABLE = _names["table"]
GW = _names["gateway"]


def probe(api, sid, addr, port):
    out = api.run(sid, ["wr-probe", "connect-tcp", addr, str(port)])["stdout"]
    return out.split()[1]  # "ok" or "errno=..."


def host_ports():
    out = in_ns(HOST_NS, "ip", "-o", "link", "show", "master", BRIDGE).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]


def daemon_netns_fds(d):
    n = 0
    for fd in os.listdir(f"/proc/{d.proc.pid}/fd"):
        try:
            if os.readlink(f"/proc/{d.proc.pid}/fd/{fd}").startswith("net:"):
                n += 1
        except OSError:
            pass
    return n


def test_networked_sandbox_reaches_the_internet(napi):
    sid = napi.create(network={"mode": "open"})
    try:
        info = napi.get(f"/v1/sandboxes/{sid}").json()
        addr = info["network"]["address"]
        assert info["network"]["mode"] == "open" and addr.startswith("10.201.0.")
        # through the bridge and the NAT: the internet sees the uplink
        out = napi.run(sid, ["wget", "-q", "-O", "-", "http://198.18.0.2:8080/"])
        assert out["exit_code"] == 0, out
        assert out["stdout"] == "198.18.0.1"
        # its own view: eth0 with the address, resolv.conf to the bridge
        assert napi.run(sid, ["cat", "/etc/resolv.conf"])["stdout"] == f"nameserver {GW}\n"
        hosts = napi.run(sid, ["cat", "/etc/hosts"])["stdout"]
        assert "localhost" in hosts and addr in hosts
        assert napi.run(sid, ["cat", "/sys/class/net/eth0/operstate"])["stdout"] == "up\n"
        # DNS to the bridge address reaches warrend's forwarder, which knows
        # this sandbox: mode open forwards every name, and this test's
        # internet has no resolver, so the answer is SERVFAIL (an answer,
        # not a timeout)
        out = napi.run(sid, ["nslookup", "example.com"], timeout=20)
        assert f"Address:\t{GW}:53" in out["stdout"], out
        assert "SERVFAIL" in out["stdout"], out
        # root inside may bind a low port in the pool namespace
        out = napi.run(sid, ["sh", "-c", "nc -l -p 80 & sleep 0.3; netstat -ltn; kill $!"],
                       user=0)["stdout"]
        assert ":80 " in out, out
    finally:
        napi.kill(sid)


def test_offline_sandbox_stays_offline(napi):
    sid = napi.create()
    try:
        info = napi.get(f"/v1/sandboxes/{sid}").json()
        assert info["network"] == {"mode": "none", "allow": [], "domains": [], "services": [], "established": "keep"}
        assert probe(napi, sid, "198.18.0.2", 8080).startswith("errno=")
        assert napi.run(sid, ["ls", "/sys/class/net"])["stdout"].split() == ["lo"]
    finally:
        napi.kill(sid)


def test_sandboxes_cannot_reach_each_other_the_host_or_metadata(napi, netd):
    a = napi.create(network={"mode": "open"})
    b = napi.create(network={"mode": "open"})
    try:
        baddr = napi.get(f"/v1/sandboxes/{b}").json()["network"]["address"]
        napi.run(b, ["sh", "-c", "while true; do echo hi | nc -l -p 7000; done "
                                 ">/dev/null 2>&1 &"])
        time.sleep(0.2)
        assert probe(napi, b, baddr, 7000) == "ok"          # it listens
        assert probe(napi, a, baddr, 7000) != "ok"          # but not for a
        assert probe(napi, a, "169.254.169.254", 8080) != "ok"
        assert probe(napi, a, "198.18.0.1", 9099) != "ok"   # host, uplink address
        assert probe(napi, a, GW, 9099) != "ok"             # host, bridge address
        assert probe(napi, a, GW, netd.port) != "ok"        # the daemon's TCP port
        assert probe(napi, a, "198.18.0.1", netd.port) != "ok"
        assert probe(napi, a, "198.18.0.2", 8080) == "ok"   # the internet is fine
    finally:
        napi.kill(a)
        napi.kill(b)


def test_validation(napi, build, tmp_path):
    r = napi.post("/v1/sandboxes", {"image": "busybox", "network": {"mode": "wide"}})
    assert r.status == 400 and r.json()["error"]["field"] == "network.mode"
    r = napi.post("/v1/sandboxes", {"image": "busybox", "network": "open"})
    assert r.status == 400 and r.json()["error"]["field"] == "network"
    sid = napi.create()
    try:
        r = napi.post(f"/v1/sandboxes/{sid}/ports", {"port": 80})
        assert r.status == 409, r  # offline: nothing to publish
    finally:
        napi.kill(sid)


def test_bad_network_configs_name_the_key(build, tmp_path):
    for net, key in [({"enable": "yes"}, "network.enable"),
                     ({"range": "10.0.0.1/16"}, "network.range"),
                     ({"range": "10.0.0.0/30"}, "network.range"),
                     ({"bridge": "a-name-far-too-long-for-linux"}, "network.bridge"),
                     ({"pool_size": -1}, "network.pool_size"),
                     ({"pool_size": 4, "pool_low_water": 9}, "network.pool_low_water"),
                     ({"bridges": "x"}, "network")]:
        path = tmp_path / "cfg.json"
        path.write_text(json.dumps({"network": net}))
        env = {"WARREN_STATE_DIR": str(tmp_path / "s"), "WARREN_RUN_DIR": str(tmp_path / "r"),
               "ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"}
        r = subprocess.run([str(build / "warrend"), "--config", str(path)], env=env,
                           capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and key in r.stderr, (net, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_networking_disabled_refuses_networked_creates(fresh_daemon):
    d = fresh_daemon().start()
    c = d.client()
    r = c.post("/v1/sandboxes", {"image": "busybox", "network": {"mode": "open"}})
    assert r.status == 400 and r.json()["error"]["field"] == "network.mode"
    c.close()


def test_publish_ports(napi, netd):
    sid = napi.create(network={"mode": "open"})
    try:
        napi.run(sid, ["sh", "-c", "while true; do echo hello | nc -l -p 8000; done "
                                   ">/dev/null 2>&1 &"])
        time.sleep(0.2)
        # on the host's uplink address: DNAT, from the internet
        r = napi.post(f"/v1/sandboxes/{sid}/ports",
                      {"port": 8000, "host": "198.18.0.1", "host_port": 18000})
        assert r.status == 201, r
        assert r.json() == {"port": 8000, "host": "198.18.0.1", "host_port": 18000,
                            "via": "nat"}
        assert tcp_read(INET_NS, "198.18.0.1", 18000) == "hello"
        # on loopback (the default): a relay, any free port
        r = napi.post(f"/v1/sandboxes/{sid}/ports", {"port": 8000})
        assert r.status == 201, r
        lp = r.json()["host_port"]
        assert r.json()["host"] == "127.0.0.1" and lp > 0
        assert tcp_read(HOST_NS, "127.0.0.1", lp) == "hello"
        # on a Unix socket
        r = napi.post(f"/v1/sandboxes/{sid}/ports", {"port": 8000, "unix": True})
        assert r.status == 201, r
        path = r.json()["unix"]
        assert unix_read(path) == "hello"
        # busy host port, bad host
        r = napi.post(f"/v1/sandboxes/{sid}/ports",
                      {"port": 8000, "host": "198.18.0.1", "host_port": 18000})
        assert r.status == 409, r
        r = napi.post(f"/v1/sandboxes/{sid}/ports", {"port": 8000, "host": "192.0.2.9"})
        assert r.status == 400 and r.json()["error"]["field"] == "host"
        r = napi.post(f"/v1/sandboxes/{sid}/ports", {"port": 0})
        assert r.status == 400 and r.json()["error"]["field"] == "port"
        lst = napi.get(f"/v1/sandboxes/{sid}/ports").json()["ports"]
        assert len(lst) == 3
        # removed on request ...
        assert napi.delete(f"/v1/sandboxes/{sid}/ports/8000").status == 204
        assert napi.get(f"/v1/sandboxes/{sid}/ports").json()["ports"] == []
        assert not os.path.exists(path)
        assert "18000" not in in_ns(HOST_NS, "nft", "list", "table", "inet", TABLE).stdout
        # ... and when the sandbox dies
        r = napi.post(f"/v1/sandboxes/{sid}/ports",
                      {"port": 8000, "host": "198.18.0.1", "host_port": 18001})
        assert r.status == 201
    finally:
        napi.kill(sid)
    # released right after the kill's answer (API.md, Kill), not before it
    deadline = time.time() + 10
    while time.time() < deadline and \
            "18001" in in_ns(HOST_NS, "nft", "list", "table", "inet", TABLE).stdout:
        time.sleep(0.1)
    assert "18001" not in in_ns(HOST_NS, "nft", "list", "table", "inet", TABLE).stdout


def test_restart_adopts_networked_sandboxes(netd):
    c = netd.client()
    a = c.create(network={"mode": "open"})
    net = c.get(f"/v1/sandboxes/{a}").json()["network"]
    addr, veth = net["address"], net["host_veth"]
    assert veth in host_ports()
    c.close()
    try:
        # a crash: the pool's namespaces die with the daemon's fds; the
        # sandbox's own keeps running
        netd.kill9()
        netd.start()
        c = netd.client()
        assert c.get(f"/v1/sandboxes/{a}").json()["network"]["address"] == addr
        assert c.run(a, ["wget", "-q", "-O", "-", "http://198.18.0.2:8080/"])[
            "stdout"] == "198.18.0.1"
        b = c.create(network={"mode": "open"})
        assert c.get(f"/v1/sandboxes/{b}").json()["network"]["address"] != addr
        c.kill(b)
        # a clean stop with a networked sandbox alive keeps bridge and table
        assert netd.stop() == 0
        assert BRIDGE in in_ns(HOST_NS, "ip", "-o", "link", "show").stdout
        assert TABLE in in_ns(HOST_NS, "nft", "list", "tables").stdout
        netd.start()
        c = netd.client()
        assert c.run(a, ["wget", "-q", "-O", "-", "http://198.18.0.2:8080/"])[
            "stdout"] == "198.18.0.1"
    finally:
        c.kill(a)
        c.close()
    # the adopted sandbox's veth goes with it
    deadline = time.time() + 10
    while time.time() < deadline and veth in host_ports():
        time.sleep(0.1)
    assert veth not in host_ports()


def test_burst_leaves_nothing_behind(napi, netd):
    # settled: every veth on the bridge is a ready pool entry, which the
    # daemon holds by fd (plus two fds: its own namespace and the loopback-only
    # one whose sysfs the offline sandboxes share, src/tiers/container_mounts.c),
    # and the pool is between its low-water mark (4) and its size (8)
    def settled():
        deadline = time.time() + 60
        while time.time() < deadline:
            ports = len(host_ports())
            if 4 <= ports <= 8 and daemon_netns_fds(netd) == ports + 2:
                return True
            time.sleep(0.2)
        return False
    assert settled(), (host_ports(), daemon_netns_fds(netd))
    rules_before = in_ns(HOST_NS, "nft", "list", "table", "inet", TABLE).stdout
    n = int(os.environ.get("WARREN_NET_BURST", "500"))
    ids = []
    try:
        for _ in range(n):
            ids.append(create_patiently(napi, network={"mode": "open"}))
        assert len(host_ports()) >= n
    finally:
        for sid in ids:
            napi.kill(sid)
    assert settled(), (len(host_ports()), daemon_netns_fds(netd))
    assert in_ns(HOST_NS, "nft", "list", "table", "inet", TABLE).stdout == rules_before
