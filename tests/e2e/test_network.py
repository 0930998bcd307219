"""Network policy through the API (issue 6, branch netbpf): the `network`
object at create (validated, normalised, stored), GET and PATCH of
/v1/sandboxes/{id}/network with merge semantics, the eBPF filter attached
to every sandbox (a sandbox in mode none gets EPERM from the connect hook
for any non-loopback address even though its namespace has no route
either), refusals counted and listed, and the policy re-attached after a
daemon restart. Traffic beyond loopback is tried only toward addresses
that are refused before any packet leaves the sandbox, or, for networked
sandboxes, toward the test-made "internet" of tests/e2e/netnode.py (a
node with networking on: fixtures netd, napi, fresh_netd)."""
import json
import os
import subprocess
import time

import pytest

from netnode import INET_ADDR, create_patiently, refusals


def net(c, sid):
    r = c.get(f"/v1/sandboxes/{sid}/network")
    assert r.status == 200, r
    return r.json()


def patch(c, sid, body, expect=200):
    r = c.request("PATCH", f"/v1/sandboxes/{sid}/network", json_body=body)
    assert r.status == expect, r
    return r


def connect(c, sid, addr, port):
    out = c.run(sid, ["wr-probe", "connect-tcp", addr, str(port)])
    return out["stdout"].strip()


def test_default_none_connect_refused_by_hook(api):
    sid = api.create()
    try:
        n = net(api, sid)
        assert n["mode"] == "none" and n["allow"] == [] and n["enforced"] is True, n
        # no route either, but the hook answers first: EPERM, not ENETUNREACH
        assert "errno=EPERM" in connect(api, sid, "192.0.2.10", 80)
        assert "errno=EPERM" in connect(api, sid, "2001:db8::1", 443)
        # loopback is the sandbox's own: nothing listens there
        assert "errno=ECONNREFUSED" in connect(api, sid, "127.0.0.1", 9)
        for _ in range(50):
            n = net(api, sid)
            if n["refusals"]["recent"]:
                break
            time.sleep(0.1)
        rf = n["refusals"]
        assert rf["total"] == 2, rf
        assert rf["reported"] + rf["pending"] == 2, rf
        hooks = {(e["hook"], e["address"], e["port"]) for e in rf["recent"]}
        assert ("connect4", "192.0.2.10", 80) in hooks, rf
        assert ("connect6", "2001:db8::1", 443) in hooks, rf
        assert all(e["layer"] == "bpf-net" and e["protocol"] == "tcp"
                   for e in rf["recent"]), rf
        ev = api.get(f"/v1/sandboxes/{sid}/events").json()["events"]
        assert any(e["type"] == "network_refused" for e in ev), ev
        # and in the audit sink (issue 7), one model with the other layers
        for _ in range(100):
            au = api.get(f"/v1/sandboxes/{sid}/events?layer=bpf-net").json()["events"]
            if len(au) >= 2:
                break
            time.sleep(0.1)
        subjects = {e.get("subject") for e in au}
        assert "192.0.2.10:80/tcp" in subjects, au
    finally:
        api.kill(sid)


def probe(c, sid, *args):
    return c.run(sid, ["wr-probe", *args])["stdout"].strip()


def test_raw_packet_and_udp_in_open_mode(napi):
    api = napi
    sid = api.create(network={"mode": "open"})
    try:
        # AF_PACKET: no CAP_NET_RAW (cgroup hooks never see packet sockets)
        assert "errno=EPERM" in probe(api, sid, "socket", "packet")
        # inet raw sockets: seccomp refuses them before the sock_create
        # hook (the second layer, tested in test_netfilter.c)
        assert "errno=EPERM" in probe(api, sid, "socket", "raw4")
        assert "errno=EPERM" in probe(api, sid, "socket", "raw6")
        # unconnected UDP: the sendmsg hook answers before routing does
        assert "errno=EPERM" in probe(api, sid, "send-udp", "169.254.169.254", "53")
        assert "errno=EPERM" in probe(api, sid, "send-udp", "fd00:ec2::254", "53")
        # the internet is open (the datagram leaves; nothing answers), but
        # for DNS to another resolver than the sandbox's (test_d_network.py)
        assert probe(api, sid, "send-udp", INET_ADDR, "5353").startswith("send-udp ok")
        rf = refusals(api, sid, 2)
        hooks = sorted(e["hook"] for e in rf["recent"])
        assert hooks == ["sendmsg4", "sendmsg6"] and rf["total"] == 2, rf
        assert {e["reason"] for e in rf["recent"]} == {"deny_set"}, rf
    finally:
        api.kill(sid)


def test_create_validation_names_the_field(api):
    cases = [
        ({"mode": "closed"}, "network.mode"),
        ({"allow": [{"cidr": "10.1.2.1/24"}]}, "network.allow[0].cidr"),
        ({"allow": [{"cidr": "10.0.0.0/8"}, {"cidr": "nope"}]}, "network.allow[1].cidr"),
        ({"allow": [{"cidr": "10.0.0.0/8", "ports": "90-80"}]}, "network.allow[0].ports"),
        ({"allow": [{"cidr": "10.0.0.0/8", "ports": 70000}]}, "network.allow[0].ports"),
        ({"allow": [{"cidr": "10.0.0.0/8", "protocol": "sctp"}]},
         "network.allow[0].protocol"),
        ({"allow": [{"cidr": "10.0.0.0/8", "port": "80"}]}, "network.allow[0].port"),
        ({"allow": [{"ports": "80"}]}, "network.allow[0].cidr"),
        ({"domains": ["pypi..org"]}, "network.domains[0]"),
        ({"domains": ["ok.org", "*pypi.org"]}, "network.domains[1]"),
        ({"services": ["PyPI!"]}, "network.services[0]"),
        ({"dns": True}, "network.dns"),
        ({"established": True}, "network.established"),
        ("open", "network"),
    ]
    for body, field in cases:
        r = api.create(expect=400, network=body)
        assert r.error == ("invalid_argument", field), (body, r)


def test_services_are_the_nodes(napi, svc_daemon):
    # without a services file no service is known
    r = napi.create(expect=400, network={"services": ["pypi"]})
    assert r.error == ("invalid_argument", "network.services[0]"), r
    c = svc_daemon.client()
    r = c.create(expect=400, network={"services": ["pypi", "cobol-archive"]})
    assert r.error == ("invalid_argument", "network.services[1]"), r
    assert "unknown service" in r.json()["error"]["message"]
    sid = c.create(network={"services": ["pypi"]})
    r = patch(c, sid, {"services_add": ["nope"]}, expect=400)
    assert r.error == ("invalid_argument", "services_add[0]") or \
        r.error == ("invalid_argument", "services[1]"), r
    assert net(c, sid)["services"] == ["pypi"]
    c.kill(sid)
    c.close()


def test_create_allowlist_normalised_and_patched(svc_daemon):
    api = svc_daemon.client()
    sid = api.create(network={
        "mode": "allowlist",
        "allow": [{"cidr": "10.1.2.0/24", "ports": "80", "protocol": "tcp"},
                  {"cidr": "2001:db8::/32", "ports": "8000-8100"},
                  {"cidr": "10.1.2.0/24", "ports": 80, "protocol": "tcp"}],
        "domains": ["PyPI.org", "*.pythonhosted.org"],
        "services": ["pypi"]})
    try:
        n = net(api, sid)
        assert n["mode"] == "allowlist" and n["established"] == "keep"
        assert n["allow"] == [
            {"cidr": "10.1.2.0/24", "ports": "80", "protocol": "tcp"},
            {"cidr": "2001:db8::/32", "ports": "8000-8100", "protocol": "any"}], n
        assert n["domains"] == ["pypi.org", "*.pythonhosted.org"]
        assert n["services"] == ["pypi"]
        assert "errno=EPERM" in connect(api, sid, "10.1.3.1", 80)
        # merge: only what is named changes
        patch(api, sid, {"allow_add": [{"cidr": "192.0.2.0/24", "ports": "443",
                                        "protocol": "tcp"}],
                         "allow_remove": [{"cidr": "2001:db8::/32",
                                           "ports": "8000-8100"}],
                         "services_add": ["npm"], "domains_remove": ["pypi.org"]})
        n = net(api, sid)
        assert n["mode"] == "allowlist"
        assert [a["cidr"] for a in n["allow"]] == ["10.1.2.0/24", "192.0.2.0/24"], n
        assert n["services"] == ["pypi", "npm"] and n["domains"] == ["*.pythonhosted.org"]
        # the typical flow: dependencies installed, then cut off
        patch(api, sid, {"mode": "none"})
        n = net(api, sid)
        assert n["mode"] == "none" and len(n["allow"]) == 2  # rules kept for later
        patch(api, sid, {"mode": "open", "established": "cut"})
        n = net(api, sid)
        assert n["mode"] == "open" and n["established"] == "cut", n
        # metadata and link-local stay refused in open mode
        assert "errno=EPERM" in connect(api, sid, "169.254.169.254", 80)
        # errors name the field and change nothing
        before = net(api, sid)
        for body, field in [
                ({"mode": "half"}, "mode"),
                ({"established": "drop"}, "established"),
                ({"allow_remove": [{"cidr": "10.9.9.0/24"}]}, "allow_remove[0]"),
                ({"allow_add": [{"cidr": "10.9.9.9/8"}]}, "allow_add[0].cidr"),
                ({"domains_remove": ["absent.org"]}, "domains_remove[0]"),
                ({"allow": [], "allow_add": []}, "allow"),
                ({"ports": "80"}, "ports")]:
            r = patch(api, sid, body, expect=400)
            assert r.error == ("invalid_argument", field), (body, r)
        after = net(api, sid)
        assert {k: after[k] for k in ("mode", "allow", "domains", "services")} == \
            {k: before[k] for k in ("mode", "allow", "domains", "services")}
    finally:
        api.kill(sid)
    r = api.request("PATCH", f"/v1/sandboxes/{sid}/network", json_body={"mode": "none"})
    assert r.status in (404, 409), r


def test_other_tenant_sees_nothing(alice, bob):
    sid = alice.create()
    try:
        assert bob.get(f"/v1/sandboxes/{sid}/network").status == 404
        r = bob.request("PATCH", f"/v1/sandboxes/{sid}/network", json_body={"mode": "open"})
        assert r.status == 404
        assert net(alice, sid)["mode"] == "none"
    finally:
        alice.kill(sid)


def bpftool(*args):
    """bpftool -j ARGS; again when it fails: it walks every program and link
    of the machine, and other daemons' may go away while it does."""
    for _ in range(5):
        p = subprocess.run(["bpftool", "-j", *args], capture_output=True, text=True)
        if p.returncode == 0:
            return p
        time.sleep(0.2)
    raise AssertionError(f"bpftool {args}: {p.stderr}")


def attached(d, sid):
    """Names of the BPF programs on the sandbox's v2 cgroup."""
    p = bpftool("cgroup", "show", str(d.v2_cgroup(sid)))
    return sorted(x["name"] for x in json.loads(p.stdout or "[]"))


HOOKS = sorted(["wr_connect4", "wr_connect6", "wr_sendmsg4", "wr_sendmsg6",
                "wr_sock_create", "wr_egress"])


@pytest.fixture
def bpffs(tmp_path):
    """A bpf filesystem of the test's own, unmounted afterwards."""
    d = tmp_path / "bpffs"
    d.mkdir()
    subprocess.run(["mount", "-t", "bpf", "bpf", str(d)], check=True)
    yield d
    subprocess.run(["umount", "-l", str(d)], check=False)


def test_filter_held_while_daemon_is_down(fresh_netd, bpffs):
    d = fresh_netd(extra={"bpf_pin_dir": str(bpffs / "pins")}).start()
    c = d.client()
    sid = c.create(network={"mode": "allowlist",
                            "allow": [{"cidr": "10.7.0.0/16", "ports": "443"}]})
    gone = c.create()
    c.kill(gone)
    assert attached(d, sid) == HOOKS
    c.close()
    d.kill9()
    # no daemon: the pinned links still hold the filter on the cgroup
    assert attached(d, sid) == HOOKS
    assert len(os.listdir(bpffs / "pins")) == 6
    d.start()
    c = d.client()
    # taken over: the new links replaced the old, nothing doubled
    assert attached(d, sid) == HOOKS
    assert sorted(os.listdir(bpffs / "pins")) == sorted(f"{sid}:{h[3:]}" for h in HOOKS)
    assert "errno=EPERM" in connect(c, sid, "10.9.0.1", 443)
    c.kill(sid)
    # released right after the answer, with the cgroup (API.md, Kill)
    for _ in range(100):
        if not os.listdir(bpffs / "pins"):
            break
        time.sleep(0.05)
    assert os.listdir(bpffs / "pins") == []
    c.close()


def test_policy_survives_restart(fresh_netd):
    d = fresh_netd().start()
    c = d.client()
    sid = c.create(network={"mode": "allowlist",
                            "allow": [{"cidr": "10.7.0.0/16", "ports": "443"}]})
    patch(c, sid, {"allow_add": [{"cidr": "10.8.0.0/16"}]})
    c.close()
    d.kill9()
    d.start()
    c = d.client()
    n = net(c, sid)
    assert n["enforced"] is True and n["mode"] == "allowlist", n
    assert [a["cidr"] for a in n["allow"]] == ["10.7.0.0/16", "10.8.0.0/16"], n
    assert "errno=EPERM" in connect(c, sid, "10.9.0.1", 443)
    c.kill(sid)
    c.close()


def cgroup_links():
    """cgroup id -> number of BPF links attached to it (as bpftool lists them)."""
    p = bpftool("link", "show")
    out = {}
    for x in json.loads(p.stdout or "[]"):
        if x.get("type") == "cgroup":
            out[x["cgroup_id"]] = out.get(x["cgroup_id"], 0) + 1
    return out


def test_burst_leaves_no_link(netd, napi):
    api = napi
    ids = {}
    for i in range(40):
        sid = create_patiently(api, network={"mode": "open"} if i % 2 else {"mode": "none"})
        ids[sid] = os.stat(netd.v2_cgroup(sid)).st_ino
    links = cgroup_links()
    assert all(links.get(cg) == 6 for cg in ids.values()), links
    for sid in ids:
        assert api.kill(sid).status == 204
    for _ in range(100):
        links = cgroup_links()
        if not any(cg in links for cg in ids.values()):
            break
        time.sleep(0.05)
    assert not any(cg in links for cg in ids.values()), links


def test_allowlists_small_and_large_decide_alike(napi):
    """Up to 16 rules a family the hooks read the policy from the cgroup's
    local storage; beyond, from the sandbox's trie. Same answers, also
    across PATCHes that move a policy from one to the other."""
    many = [{"cidr": f"10.{i}.0.0/16", "ports": "443", "protocol": "tcp"} for i in range(20)]
    target = {"cidr": f"{INET_ADDR}/32", "ports": "8080", "protocol": "tcp"}
    sid = napi.create(network={"mode": "allowlist", "allow": many + [target]})
    try:
        def check(total):
            assert probe(napi, sid, "connect-tcp", INET_ADDR, "8080").startswith(
                "connect-tcp ok")
            assert "errno=EPERM" in probe(napi, sid, "connect-tcp", INET_ADDR, "8081")
            assert "errno=EPERM" in probe(napi, sid, "send-udp", INET_ADDR, "8080")
            assert "errno=EPERM" in probe(napi, sid, "connect-tcp", "10.21.0.1", "443")
            assert net(napi, sid)["refusals"]["total"] == total
        check(3)  # 21 rules: the trie
        patch(napi, sid, {"allow_remove": many[:10]})
        check(6)  # 11 rules: the storage
        patch(napi, sid, {"allow_add": many[:10]})
        check(9)  # the trie again
        patch(napi, sid, {"allow": [target]})
        check(12)
        patch(napi, sid, {"mode": "none"})
        assert "errno=EPERM" in probe(napi, sid, "connect-tcp", INET_ADDR, "8080")
    finally:
        napi.kill(sid)


def test_pause_to_disk_keeps_the_network(napi, netd):
    """A networked container paused to disk (CRIU, keep_memory=false) and
    resumed: the same namespace, address and veth; a listener of its own
    still answers on its address; its egress policy is enforced again (the
    allowed port reachable, another refused)."""
    from test_lifecycle_checkpoint import built_criu
    from test_lifecycle_suspend_container import REPL, repl
    built_criu()
    c = napi
    sid = c.create(network={"mode": "allowlist",
                            "allow": [{"cidr": f"{INET_ADDR}/32", "ports": "8080"}]})
    try:
        before = c.get(f"/v1/sandboxes/{sid}").json()["network"]
        assert c.run(sid, ["sh", "-c", REPL])["stdout"] == "ready\n"
        # a server in the sandbox (the REPL's own child): answers with its count
        assert repl(c, sid, "x=0; (while :; do x=$((x+1)); "
                    "echo $x | nc -l -p 7000 >/dev/null 2>&1; done) & echo started") == \
            "started\n"
        addr = before["address"]
        assert ask(addr, 7000) == "1\n"
        r = c.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": False})
        assert r.status == 200, r
        r = c.post(f"/v1/sandboxes/{sid}/resume")
        assert r.status == 200, r
        after = c.get(f"/v1/sandboxes/{sid}").json()["network"]
        assert after == before, (before, after)
        assert ask(addr, 7000) == "2\n"
        assert probe(c, sid, "connect-tcp", INET_ADDR, "8080").startswith("connect-tcp ok")
        assert "errno=EPERM" in probe(c, sid, "connect-tcp", INET_ADDR, "8081")
    finally:
        c.kill(sid)


def ask(addr, port):
    """What a TCP server at addr:port says, from the node's host namespace
    (a few tries: it may be between two connections)."""
    from netnode import HOST_NS
    code = ("import socket, sys, time\n"
            "for i in range(25):\n"
            "    try:\n"
            "        s = socket.create_connection((sys.argv[1], int(sys.argv[2])), 2)\n"
            "        sys.stdout.write(s.recv(100).decode()); break\n"
            "    except OSError:\n"
            "        time.sleep(0.2)\n")
    return subprocess.run(["ip", "netns", "exec", HOST_NS, "/usr/bin/python3", "-c", code,
                           addr, str(port)], capture_output=True, text=True, timeout=30).stdout
