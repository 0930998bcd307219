"""The DNS forwarder (src/net/dns.h) in a network namespace made by the test:
a test-made authoritative upstream (python3-dnslib) on 10.53.0.2, the
forwarder (tests/wr-dnstool, hooks that print) on 10.53.0.1, "sandboxes"
that are source addresses 10.53.1.x. Nothing leaves the namespace, which
is deleted even when a test fails."""
import ctypes
import json
import os
import queue
import random
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest

dnslib = pytest.importorskip("dnslib")
from dnslib import AAAA, CNAME, QTYPE, RCODE, RR, TXT, A, DNSRecord  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("WARREN_BUILD", ROOT / "build-test"))
NS = f"wrdns{os.getpid()}"
FWD = "10.53.0.1"
UP = "10.53.0.2"
SB = {"sb1": "10.53.1.1", "sb2": "10.53.1.2", "sb3": "10.53.1.3", "flood": "10.53.1.4",
      "failer": "10.53.1.5", "busy": "10.53.1.6"}
FWD6 = "fd53::1"
SB6 = "fd53::101"
STRANGER = "10.53.1.9"
CLONE_NEWNET = 0x40000000
LIBC = ctypes.CDLL(None, use_errno=True)

# The upstream's zone: name -> {qtype: [(rdata, ttl)]}
BIG = [f"192.0.2.{i}" for i in range(100, 160)]
ZONE = {
    "pypi.org": {"A": [("192.0.2.10", 300)], "AAAA": [("2001:db8::10", 300)],
                 "TXT": [("v=spf1 -all", 300)]},
    "files.pypi.org": {"A": [("192.0.2.11", 5)]},
    "a.b.pypi.org": {"A": [("192.0.2.12", 100000)]},
    "alias.pypi.org": {"CNAME": [("cdn.other.example", 120)]},
    "cdn.other.example": {"A": [("192.0.2.13", 60)]},
    "big.pypi.org": {"A": [(ip, 300) for ip in BIG]},
    "evil.example": {"A": [("203.0.113.66", 300)]},
}
SILENT = {"slow.pypi.org"}


def in_netns(fn):
    """Run fn in a thread that joined the test namespace: sockets it makes
    live there (setns changes only the calling thread)."""
    out = {}

    def run():
        fd = os.open(f"/run/netns/{NS}", os.O_RDONLY)
        try:
            if LIBC.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns")
        finally:
            os.close(fd)
        try:
            out["v"] = fn()
        except BaseException as e:  # handed to the caller
            out["e"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "e" in out:
        raise out["e"]
    return out["v"]


def answer(data, tcp):
    req = DNSRecord.parse(data)
    name = str(req.q.qname).rstrip(".").lower()
    if name in SILENT:
        return None
    qt = QTYPE[req.q.qtype]
    rep = req.reply()
    recs = ZONE.get(name)
    if recs is None:
        rep.header.rcode = RCODE.NXDOMAIN
        return rep.pack()
    cls = {"A": A, "AAAA": AAAA, "CNAME": CNAME, "TXT": TXT}
    cur = name
    for _ in range(8):
        r = ZONE.get(cur, {})
        if "CNAME" in r and qt != "CNAME":
            tgt, ttl = r["CNAME"][0]
            rep.add_answer(RR(cur, QTYPE.CNAME, rdata=CNAME(tgt), ttl=ttl))
            cur = tgt
            continue
        for val, ttl in r.get(qt, []):
            rep.add_answer(RR(cur, getattr(QTYPE, qt), rdata=cls[qt](val), ttl=ttl))
        break
    wire = rep.pack()
    if not tcp and len(wire) > 512:
        rep.rr = []
        rep.header.tc = 1
        wire = rep.pack()
    return wire


class Upstream:
    def __init__(self):
        self.udp, self.tcp = in_netns(self._socks)
        self.stop = False
        self.threads = [threading.Thread(target=self._udp, daemon=True),
                        threading.Thread(target=self._tcp, daemon=True)]
        for t in self.threads:
            t.start()

    @staticmethod
    def _socks():
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind((UP, 53))
        t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        t.bind((UP, 53))
        t.listen(16)
        u.settimeout(0.2)
        t.settimeout(0.2)
        return u, t

    def _udp(self):
        while not self.stop:
            try:
                data, src = self.udp.recvfrom(4096)
            except (socket.timeout, OSError):
                continue
            w = answer(data, False)
            if w:
                self.udp.sendto(w, src)

    def _tcp(self):
        while not self.stop:
            try:
                c, _ = self.tcp.accept()
            except (socket.timeout, OSError):
                continue
            with c:
                c.settimeout(2)
                try:
                    n = struct.unpack("!H", recv_exact(c, 2))[0]
                    w = answer(recv_exact(c, n), True)
                    if w:
                        c.sendall(struct.pack("!H", len(w)) + w)
                except OSError:
                    pass

    def close(self):
        self.stop = True
        for t in self.threads:
            t.join()
        self.udp.close()
        self.tcp.close()


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise OSError("eof")
        b += c
    return b


class Tool:
    def __init__(self, *args):
        argv = ["ip", "netns", "exec", NS, str(BUILD / "tests/wr-dnstool"), *args]
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.q = queue.Queue()
        self.events = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        ev = self.next_line(10)
        assert ev and ev["ev"] == "ready", self.p.stderr.read()

    def _read(self):
        for line in self.p.stdout:
            ev = json.loads(line)
            with self.lock:
                self.events.append(ev)
            self.q.put(ev)

    def next_line(self, timeout=5):
        try:
            return self.q.get(timeout=timeout)
        except queue.Empty:
            return None

    def cmd(self, line):
        while not self.q.empty():
            self.q.get_nowait()
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        deadline = time.time() + 5
        while time.time() < deadline:
            ev = self.next_line(5)
            if ev and ev["ev"] in ("ok", "stats"):
                return ev
        raise AssertionError(f"no answer to {line}")

    def now(self, ev, **match):
        """Matching lines read so far."""
        with self.lock:
            return [e for e in self.events if e["ev"] == ev and
                    all(e.get(k) == v for k, v in match.items())]

    def seen(self, ev, **match):
        """Matching lines, waiting up to 3 s for one: the tool prints before
        the forwarder replies, but this process reads its output on another
        thread, which may not have got there yet."""
        deadline = time.time() + 3
        while True:
            got = self.now(ev, **match)
            if got or time.time() > deadline:
                return got
            time.sleep(0.01)

    def close(self):
        self.p.stdin.close()
        rc = self.p.wait(timeout=30)
        err = self.p.stderr.read()
        return rc, err


@pytest.fixture(scope="module")
def net():
    if os.geteuid() != 0:
        pytest.skip("needs root for network namespaces")
    subprocess.run(["ip", "netns", "add", NS], check=True)
    up = tool = None
    try:
        subprocess.run(["ip", "-n", NS, "link", "set", "lo", "up"], check=True)
        for a in [FWD, UP, STRANGER, *SB.values()]:
            subprocess.run(["ip", "-n", NS, "addr", "add", f"{a}/32", "dev", "lo"], check=True)
        for a in [FWD6, SB6]:
            subprocess.run(["ip", "-n", NS, "addr", "add", f"{a}/128", "dev", "lo", "nodad"],
                           check=True)
        up = Upstream()
        tool = Tool("--listen", FWD, "--listen", f"[{FWD6}]:53", "--upstream", UP, "--timeout-ms", "400",
                    "--ttl-min", "30", "--ttl-max", "3600", "--burst", "5", "--per-min", "60",
                    "--allow-delay-ms", "50",
                    "--sandbox", f"sb1={SB['sb1']}=pypi.org,*.pypi.org@1",
                    "--sandbox", f"sb2={SB['sb2']}=files.pypi.org",
                    "--sandbox", f"sb3={SB['sb3']}=*.PyPI.org.",
                    "--sandbox", f"flood={SB['flood']}=pypi.org",
                    "--sandbox", f"failer={SB['failer']}=pypi.org",
                    "--sandbox", f"busy={SB['busy']}=*.pypi.org",
                    "--sandbox", f"v6={SB6}=pypi.org")
        yield tool
        rc, err = tool.close()
        tool = None
        assert rc == 0, err
        assert "AddressSanitizer" not in err and "runtime error" not in err, err
    finally:
        if tool is not None:
            tool.p.kill()
            tool.p.wait()
        if up is not None:
            up.close()
        subprocess.run(["ip", "netns", "del", NS], check=False)


def ask(src, name, qtype="A", tcp=False, raw=None, edns=False, timeout=3, dst=FWD):
    """A query from a sandbox's address; returns (DNSRecord, receive time)."""
    q = DNSRecord.question(name, qtype)
    if edns:
        q.add_ar(dnslib.EDNS0(udp_len=1232))
    wire = raw if raw is not None else q.pack()

    fam = socket.AF_INET6 if ":" in dst else socket.AF_INET

    def mk():
        s = socket.socket(fam, socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM)
        s.bind((src, 0))
        return s

    s = in_netns(mk)
    s.settimeout(timeout)
    with s:
        if tcp:
            s.connect((dst, 53))
            s.sendall(struct.pack("!H", len(wire)) + wire)
            n = struct.unpack("!H", recv_exact(s, 2))[0]
            data = recv_exact(s, n)
        else:
            s.sendto(wire, (dst, 53))
            data, _ = s.recvfrom(65535)
        return DNSRecord.parse(data), time.monotonic_ns()


def addrs(rep):
    return sorted(str(r.rdata) for r in rep.rr if r.rtype in (QTYPE.A, QTYPE.AAAA))


def test_allowed_name_resolves_and_is_allowed_before_the_reply(net):
    rep, t_reply = ask(SB["sb1"], "pypi.org")
    assert rep.header.rcode == RCODE.NOERROR and addrs(rep) == ["192.0.2.10"]
    assert rep.rr[0].ttl == 300
    ev = net.seen("allow_ip", sandbox="sb1", addr="192.0.2.10")
    assert ev and ev[-1]["ttl"] == 300 and ev[-1]["family"] == 4 and ev[-1]["tag"] == 0
    assert ev[-1]["mono_ns"] < t_reply  # allow_ip returned before the reply arrived
    rep, _ = ask(SB["sb1"], "pypi.org", "AAAA")
    assert addrs(rep) == ["2001:db8::10"]
    assert net.seen("allow_ip", sandbox="sb1", addr="2001:db8::10", family=6)


def test_ttls_are_clamped_in_the_map_and_in_the_reply(net):
    rep, _ = ask(SB["sb1"], "files.pypi.org")
    assert addrs(rep) == ["192.0.2.11"] and rep.rr[0].ttl == 30
    assert net.seen("allow_ip", addr="192.0.2.11")[-1]["ttl"] == 30
    rep, _ = ask(SB["sb1"], "a.b.pypi.org")
    assert addrs(rep) == ["192.0.2.12"] and rep.rr[0].ttl == 3600
    ev = net.seen("allow_ip", addr="192.0.2.12")[-1]
    assert ev["ttl"] == 3600 and ev["tag"] == 1  # matched only "*.pypi.org@1"


def test_wildcard_semantics(net):
    # sb3 has only "*.PyPI.org.": names below, any case, not the apex
    assert ask(SB["sb3"], "pypi.org")[0].header.rcode == RCODE.NXDOMAIN
    assert addrs(ask(SB["sb3"], "Files.PYPI.org.")[0]) == ["192.0.2.11"]
    assert addrs(ask(SB["sb3"], "a.b.pypi.org")[0]) == ["192.0.2.12"]
    assert ask(SB["sb3"], "xpypi.org")[0].header.rcode == RCODE.NXDOMAIN
    # sb2 has the exact name only
    assert addrs(ask(SB["sb2"], "files.pypi.org")[0]) == ["192.0.2.11"]
    assert ask(SB["sb2"], "x.files.pypi.org")[0].header.rcode == RCODE.NXDOMAIN
    assert ask(SB["sb2"], "pypi.org")[0].header.rcode == RCODE.NXDOMAIN


def test_cname_chain_from_an_allowed_name(net):
    rep, _ = ask(SB["sb1"], "alias.pypi.org")
    assert rep.header.rcode == RCODE.NOERROR
    assert [QTYPE[r.rtype] for r in rep.rr] == ["CNAME", "A"]
    assert addrs(rep) == ["192.0.2.13"]
    assert net.seen("allow_ip", sandbox="sb1", addr="192.0.2.13")
    # the chain's target is not allowed on its own
    assert ask(SB["sb1"], "cdn.other.example")[0].header.rcode == RCODE.NXDOMAIN


def test_not_allowlisted_gets_nxdomain_and_an_event(net):
    rep, _ = ask(SB["sb2"], "evil.example")
    assert rep.header.rcode == RCODE.NXDOMAIN and not rep.rr
    ev = net.seen("refused", sandbox="sb2", name="evil.example")
    assert ev and ev[-1]["qtype"] == 1 and ev[-1]["layer"] == "dns"
    assert ev[-1]["reason"] == "name"
    assert not net.now("allow_ip", addr="203.0.113.66")


def test_other_types_of_allowed_names(net):
    rep, _ = ask(SB["sb1"], "pypi.org", "TXT")
    assert rep.header.rcode == RCODE.NOERROR and not rep.rr
    assert net.seen("refused", sandbox="sb1", name="pypi.org", reason="qtype", qtype=16)
    n = len(net.now("refused", sandbox="sb1"))
    rep, _ = ask(SB["sb1"], "pypi.org", "HTTPS")
    assert rep.header.rcode == RCODE.NOERROR and not rep.rr
    time.sleep(0.2)
    assert len(net.now("refused", sandbox="sb1")) == n  # no event for HTTPS


def test_unknown_source_is_refused(net):
    rep, _ = ask(STRANGER, "pypi.org")
    assert rep.header.rcode == RCODE.REFUSED


def test_exfiltration_flood_gives_bounded_events_and_exact_counts(net):
    n = 400
    for i in range(n):
        secret = "%032x" % random.getrandbits(128)
        rep, _ = ask(SB["flood"], f"{secret}.c{i}.attacker.example")
        assert rep.header.rcode == RCODE.NXDOMAIN
    st = net.cmd("stats flood")
    assert st["refused"] == n and st["queries"] == n
    assert st["events"] + st["suppressed"] == n
    named = net.seen("refused", sandbox="flood")
    assert len(named) <= 5 + 10  # burst 5, then 1/s for the seconds the flood took
    net.cmd("forget flood")  # reports what is still suppressed
    evs = net.seen("refused", sandbox="flood")
    assert sum(1 for e in evs if e["name"]) + sum(e["suppressed"] for e in evs) == n
    assert evs[-1]["total"] == n


def test_tcp_fallback_for_large_answers(net):
    # allow_ip takes 50 ms here (--allow-delay-ms): 60 addresses take 3 s
    rep, _ = ask(SB["sb1"], "big.pypi.org", timeout=15)  # UDP, no EDNS: 512 bytes
    assert rep.header.tc == 1 and not rep.rr
    rep, _ = ask(SB["sb1"], "big.pypi.org", tcp=True, timeout=15)
    assert rep.header.tc == 0 and addrs(rep) == sorted(BIG)
    deadline = time.time() + 3
    while not set(BIG) <= {e["addr"] for e in net.now("allow_ip", sandbox="sb1")}:
        assert time.time() < deadline, "allow_ip not called for every address"
        time.sleep(0.01)
    rep, _ = ask(SB["sb1"], "big.pypi.org", edns=True, timeout=15)  # 1232 bytes are enough
    assert rep.header.tc == 0 and addrs(rep) == sorted(BIG)


def test_upstream_timeout_is_servfail(net):
    t0 = time.monotonic()
    rep, _ = ask(SB["sb1"], "slow.pypi.org")
    assert rep.header.rcode == RCODE.SERVFAIL
    assert 0.35 < time.monotonic() - t0 < 2.5


def test_allow_ip_failure_is_servfail(net):
    net.cmd("fail failer")
    rep, _ = ask(SB["failer"], "pypi.org")
    assert rep.header.rcode == RCODE.SERVFAIL and not rep.rr


def test_policy_change_applies_to_the_next_query(net):
    assert ask(SB["sb2"], "a.b.pypi.org")[0].header.rcode == RCODE.NXDOMAIN
    net.cmd("names sb2 *.b.pypi.org")
    assert addrs(ask(SB["sb2"], "a.b.pypi.org")[0]) == ["192.0.2.12"]
    assert ask(SB["sb2"], "files.pypi.org")[0].header.rcode == RCODE.NXDOMAIN
    net.cmd("names sb2 files.pypi.org")


def malformed():
    q = DNSRecord.question("pypi.org", "A").pack()
    hdr = q[:12]
    yield b""
    yield b"\x00"
    yield q[:11]
    yield q[:15]  # truncated question
    yield q[:-1]
    yield hdr + b"\xc0\x0c\x00\x01\x00\x01"  # pointer to itself: a loop
    yield hdr + b"\x04abcd\xc0\x0c\x00\x01\x00\x01"
    yield hdr + b"\x40" + b"a" * 64 + b"\x00\x00\x01\x00\x01"  # 64-byte label
    yield hdr + (b"\x3f" + b"a" * 63) * 5 + b"\x00\x00\x01\x00\x01"  # name > 255
    yield q[:4] + b"\x00\x05" + q[6:]  # QDCOUNT 5
    yield q[:4] + b"\x00\x00" + q[6:]  # QDCOUNT 0
    yield q[:2] + b"\x81\x00" + q[4:]  # a response
    yield q[:2] + b"\x28\x00" + q[4:]  # opcode UPDATE
    yield q + b"\x00" * 3000
    rnd = random.Random(6)
    for _ in range(300):
        b = bytearray(q)
        for _ in range(rnd.randint(1, 6)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        yield bytes(b[: rnd.randint(0, len(b))]) if rnd.random() < 0.3 else bytes(b)
    for _ in range(100):
        yield bytes(rnd.randrange(256) for _ in range(rnd.randint(12, 300)))


def test_malformed_packets_do_not_crash(net):
    s = in_netns(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    with s:
        s.bind((SB["sb1"], 0))
        for pkt in malformed():
            s.sendto(pkt, (FWD, 53))
    for pkt in list(malformed())[:40]:  # and over TCP
        def mk():
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.bind((SB["sb1"], 0))
            return c
        c = in_netns(mk)
        with c:
            c.settimeout(2)
            c.connect((FWD, 53))
            c.sendall(struct.pack("!H", len(pkt)) + pkt)
            try:
                c.recv(65535)
            except OSError:
                pass
    assert net.p.poll() is None
    assert addrs(ask(SB["sb1"], "pypi.org")[0]) == ["192.0.2.10"]


def test_ipv6_listener_and_source(net):
    rep, _ = ask(SB6, "pypi.org", "AAAA", dst=FWD6)
    assert addrs(rep) == ["2001:db8::10"]
    assert net.seen("allow_ip", sandbox="v6", addr="2001:db8::10")
    assert ask(SB6, "files.pypi.org", dst=FWD6)[0].header.rcode == RCODE.NXDOMAIN
    assert ask(SB6, "pypi.org", tcp=True, dst=FWD6)[0].header.rcode == RCODE.NOERROR


def tcp_conn(src):
    def mk():
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        c.bind((src, 0))
        return c
    c = in_netns(mk)
    c.settimeout(3)
    c.connect((FWD, 53))
    return c


def test_pipelined_tcp_queries_on_one_connection(net):
    with tcp_conn(SB["sb1"]) as c:
        names = ["pypi.org", "files.pypi.org", "evil.example"]
        for i, n in enumerate(names):
            q = DNSRecord.question(n, "A")
            q.header.id = 100 + i
            w = q.pack()
            c.sendall(struct.pack("!H", len(w)) + w)
        got = []
        for _ in names:
            n = struct.unpack("!H", recv_exact(c, 2))[0]
            got.append(DNSRecord.parse(recv_exact(c, n)))
    assert [r.header.id for r in got] == [100, 101, 102]
    assert [r.header.rcode for r in got] == [RCODE.NOERROR, RCODE.NOERROR, RCODE.NXDOMAIN]


def test_in_flight_bound_per_sandbox(net):
    """8 queries of a sandbox wait on a silent upstream (max_inflight 8 of
    16 workers); the rest are answered SERVFAIL at once, and counted."""
    s = in_netns(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    with s:
        s.bind((SB["busy"], 0))
        s.settimeout(5)
        for i in range(20):
            q = DNSRecord.question("slow.pypi.org", "A")
            q.header.id = i
            s.sendto(q.pack(), (FWD, 53))
        t0 = time.monotonic()
        # meanwhile another sandbox is served
        assert addrs(ask(SB["sb1"], "pypi.org")[0]) == ["192.0.2.10"]
        assert time.monotonic() - t0 < 0.35
        replies = [DNSRecord.parse(s.recvfrom(4096)[0]) for _ in range(20)]
    assert all(r.header.rcode == RCODE.SERVFAIL for r in replies)
    st = net.cmd("stats busy")
    assert st["overload"] == 12 and st["forwarded"] == 8 and st["servfail"] == 8


def test_tcp_connections_bounded_per_sandbox(net):
    held = [tcp_conn(SB["busy"]) for _ in range(4)]
    try:
        time.sleep(0.2)
        extra = tcp_conn(SB["busy"])  # accepted by the kernel, closed by the forwarder
        with extra:
            try:
                assert extra.recv(10) == b""
            except ConnectionResetError:
                pass
        # other sandboxes are still served over TCP
        assert addrs(ask(SB["sb1"], "pypi.org", tcp=True)[0]) == ["192.0.2.10"]
    finally:
        for c in held:
            c.close()
    time.sleep(0.2)
    assert addrs(ask(SB["busy"], "files.pypi.org", tcp=True)[0]) == ["192.0.2.11"]
