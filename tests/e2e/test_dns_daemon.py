"""warrend's DNS forwarder wiring (src/daemon/dns.c): the network.dns and
network.services_file keys are checked at start with the key named, and a
daemon started in a network namespace made by the test serves DNS on the
configured address (a source no sandbox registered gets REFUSED)."""
import json
import os
import signal
import socket
import subprocess
import time

import pytest

from conftest import ROOT, Daemon
from test_api_config import run_with

NS = f"wrdnsd{os.getpid()}"


def test_bad_network_configs_name_the_key(build, tmp_path):
    bad_svc = tmp_path / "services.json"
    bad_svc.write_text(json.dumps({"version": 1, "services": {
        "pypi": {"domains": ["pypi.org"], "ports": ["https"]}}}))
    for cfg, key in [({"network": []}, "network"),
                     ({"network": {"dns": {"ttl_min": "x"}}}, "network.dns.ttl_min"),
                     ({"network": {"dns": {"ttl_min": 60, "ttl_max": 10}}},
                      "network.dns.ttl_min"),
                     ({"network": {"dns": {"listen": ["nope"]}}}, "network.dns.listen[0]"),
                     ({"network": {"dns": {"upstreams": []}}}, "network.dns.upstreams"),
                     ({"network": {"dns": {"bogus": 1}}}, "network.dns.bogus"),
                     ({"network": {"services_file": str(bad_svc)}}, "services.pypi.ports[0]"),
                     ({"network": {"services_file": "/nonexistent/s.json"}},
                      "network.services_file")]:
        p = run_with(build, tmp_path, cfg)
        assert p.returncode == 2, (cfg, p.stderr)
        assert key in p.stderr, (cfg, p.stderr)


def test_deploy_services_file_loads(fresh_daemon):
    """The shipped services file is valid; dns disabled starts no forwarder."""
    d = fresh_daemon(extra={"network": {
        "services_file": str(ROOT / "deploy/services.json"), "dns": {"enabled": False}}})
    d.start()
    c = d.client()
    assert c.get("/v1/health").json()["status"] == "ok"
    c.close()
    assert "dns: forwarding" not in d.log_text()


@pytest.fixture
def netns():
    if os.geteuid() != 0:
        pytest.skip("needs root")
    subprocess.run(["ip", "netns", "add", NS], check=True)
    try:
        subprocess.run(["ip", "-n", NS, "link", "set", "lo", "up"], check=True)
        for a in ("10.54.0.1", "10.54.1.1"):
            subprocess.run(["ip", "-n", NS, "addr", "add", f"{a}/32", "dev", "lo"], check=True)
        yield NS
    finally:
        subprocess.run(["ip", "netns", "del", NS], check=False)


class NetnsDaemon(Daemon):
    """warrend in the test's netns only (nsenter: "ip netns exec" would remount /sys
    and hide the cgroup hierarchies)."""

    def start(self):
        logf = open(self.log, "ab")
        self.proc = subprocess.Popen(["nsenter", f"--net=/run/netns/{NS}", str(self.build / "warrend"),
                                      "--config", str(self.config)],
                                     env=self.env, stdout=logf, stderr=logf)
        logf.close()
        deadline = time.time() + 30
        while time.time() < deadline:
            assert self.proc.poll() is None, f"warrend exited: {self.log_text()}"
            if "dns: forwarding" in self.log_text():
                return self
            time.sleep(0.05)
        raise AssertionError(f"no forwarder: {self.log_text()}")


def test_daemon_serves_dns_in_its_netns(build, tmp_path, netns):
    d = NetnsDaemon(build, tmp_path / "d", "dns", extra={"network": {
        "services_file": str(ROOT / "deploy/services.json"),
        "dns": {"listen": ["10.54.0.1"], "upstreams": ["10.54.0.2"], "timeout_ms": 300}}})
    try:
        d.start()
        # the network filter hooks itself in (netenforce.c): answers of
        # allowed names open the sandbox's filter instead of SERVFAIL
        assert "dns: forwarding for sandboxes" in d.log_text()
        assert "no address filter hooked" not in d.log_text()
        reply = query("10.54.1.1")  # no sandbox has this address
        assert reply[:2] == b"\x42\x42" and reply[2] & 0x80 and reply[3] & 0x0F == 5
    finally:
        rc = d.stop()  # no sandbox was made: nothing to delete
        d.clean()
    assert rc == 0, d.log_text()
    assert not d.sanitizer_reports(), d.log_text()


def query(src):
    import ctypes
    import threading
    libc = ctypes.CDLL(None, use_errno=True)
    out = {}

    def run():
        fd = os.open(f"/run/netns/{NS}", os.O_RDONLY)
        libc.setns(fd, 0x40000000)
        os.close(fd)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((src, 0))
        out["s"] = s

    t = threading.Thread(target=run)
    t.start()
    t.join()
    s = out["s"]
    s.settimeout(3)
    # id 0x4242, RD, one question: pypi.org A IN
    q = bytes.fromhex("424201000001000000000000") + b"\x04pypi\x03org\x00\x00\x01\x00\x01"
    with s:
        s.sendto(q, ("10.54.0.1", 53))
        return s.recvfrom(4096)[0]
