"""What every probe test uses: `probe(row)` parametrizes a test over the
tier/uid columns; the `ctx` fixture gives it a runner for its column.

ctx.run(argv) runs one command through the public API (a container sandbox
of tenant alice, as ctx.uid; or a function call), checks its output against
every canary at once, and returns the SDK's CommandResult. ctx.probe(...)
runs wr-probe and fails unless the probe itself ran (exit 0 and output):
a missing binary can never look like a refusal.

ctx.expect_event(layer, action) asserts the refusal audit recorded the
refusal the probe just met (GET /v1/events, the audit branch).
"""
import json
import time

import pytest

import warren
from warren._http import ConnectionConfig, SyncHTTP
from catalog import COLUMNS, NOT_APPLICABLE, TIER_COLUMNS, gap

EVENT_WAIT_S = 6.0


def probe(row, columns=None):
    """Mark a test as the probe of catalog row `row`, once per column."""
    cols = columns or TIER_COLUMNS
    assert all(c in COLUMNS for c in cols)
    return pytest.mark.parametrize("rt_key", [(row, c) for c in cols],
                                   ids=[c.replace("/", "-") for c in cols])


def parse(line):
    """'subject ok k=v ...' -> ('subject', 'ok'|'ERRNO', {k: v})."""
    parts = line.split()
    if not parts:
        return None, None, {}
    subj = parts[0]
    outcome = None
    kv = {}
    for p in parts[1:]:
        if p == "ok" and outcome is None:
            outcome = "ok"
        elif p.startswith("errno=") and outcome is None:
            outcome = p[6:]
        elif "=" in p:
            k, v = p.split("=", 1)
            kv[k] = v
    return subj, outcome, kv


def unesc(s):
    out = bytearray()
    i = 0
    b = s.encode()
    while i < len(b):
        if b[i] == ord("%") and i + 2 < len(b) + 1:
            out.append(int(b[i + 1:i + 3], 16))
            i += 3
        else:
            out.append(b[i])
            i += 1
    return out.decode(errors="replace")


class Ctx:
    def __init__(self, rt, row, col):
        self.rt = rt
        self.row = row
        self.col = col
        self.tier, uid = col.split("/")
        self.uid = int(uid[3:])
        self.other_uid = 1000 if self.uid == 0 else 0
        self.sb = None
        self.sb_opts = {}
        self.t0 = time.time()
        self.made = []

    @property
    def container(self):
        return self.tier == "container"

    @property
    def microvm(self):
        return self.tier == "microvm"

    @property
    def guest(self):
        """A VM tier: the session's booted guest of this tier."""
        return self.tier in ("microvm", "vm")

    def g(self):
        return self.guests.get(self.tier)

    def _create(self, **opts):
        if self.tier == "vm":
            return warren.Sandbox.create(image="debian-vm", tier="vm", timeout=1800,
                                         memory_mb=512, request_timeout=1200, **opts,
                                         **self.rt.alice)
        if self.microvm:
            # the guest mounts the store's EROFS image (wr-probe baked in)
            opts = {"memory_mb": 256, "disk_mb": 64, **opts}
            return warren.Sandbox.create(image="busybox-erofs", tier="microvm", timeout=600,
                                         **opts, **self.rt.alice)
        return warren.Sandbox.create(image="busybox", timeout=600, **opts, **self.rt.alice)

    # ---- sandboxes and runs
    def sandbox(self, **opts):
        """The column's sandbox (container tier), made on first use."""
        assert self.container or self.guest
        if self.guest and not opts:
            self.sb = self.g().sb  # the session's guest: not ours to kill
            return self.sb
        if self.sb is None or (opts and opts != self.sb_opts):
            self.sb = self._create(**opts)
            self.sb_opts = opts
            self.made.append(self.sb)
        return self.sb

    def fresh_sandbox(self, **opts):
        sb = self._create(**opts)
        self.made.append(sb)
        return sb

    def run(self, argv, timeout=120, limits=None, user=None, output_cap=None, sb=None,
            **kw):
        limits = dict(limits or {})
        if self.container or self.guest:
            s = sb or self.sandbox(**limits)
            r = s.commands.run(argv, user=self.uid if user is None else user, timeout=timeout,
                               output_cap=output_cap, request_timeout=timeout + 60, **kw)
        else:
            fl = {}
            for k in ("memory_mb", "pids"):
                if k in limits:
                    fl[k] = limits[k]
            if "cpu_time" in limits:
                fl["cpu_time"] = limits["cpu_time"]
            r = warren.functions.call("busybox", argv, timeout=timeout, output_cap=output_cap,
                                      request_timeout=timeout + 60, **fl, **kw,
                                      **self.rt.alice)
        self.rt.check_output(f"{self.row}/{self.col} {argv[:3]}", r.stdout, r.stderr)
        return r

    def probe(self, *args, timeout=120, limits=None, allow_exit=False, **kw):
        """Run wr-probe; the probe must have run. Returns its parsed lines."""
        r = self.run(["wr-probe", *[str(a) for a in args]], timeout=timeout, limits=limits,
                     **kw)
        ran = r.reason == "exited" and (r.exit_code == 0 or allow_exit) and r.stdout.strip()
        assert ran, f"wr-probe {args[:2]} did not run: {r.reason} {r.exit_code} " \
                    f"{r.stdout[-300:]!r} {r.stderr[-300:]!r}"
        self.last = r
        return [ln for ln in r.stdout.splitlines() if ln.strip()]

    def sys(self, name, *extra):
        """One `wr-probe sys NAME`: its errno name (or 'ok')."""
        lines = self.probe("sys", name, *extra)
        subj, outcome, _ = parse(lines[-1])
        assert subj == name, lines
        return outcome

    def outcomes(self, lines, prefix):
        """Lines 'PREFIX NAME OUTCOME' -> {NAME: OUTCOME}."""
        out = {}
        for ln in lines:
            p = ln.split()
            if len(p) >= 3 and p[0] == prefix:
                out[" ".join(p[1:-1])] = p[-1]
        return out

    # ---- the refusal audit
    def expect_event(self, layer, action, subject=None):
        """The audit recorded a refusal of `action` by `layer` for this
        column's sandbox (function calls: the tenant) since the test began."""
        sid = self.sb.sandbox_id if self.container and self.sb is not None else None
        return expect_event(self.rt, self.rt.alice, layer, action, subject=subject,
                            sandbox=sid, since=self.t0)

    def close(self):
        for s in self.made:
            try:
                s.kill()
            except warren.exceptions.WarrenError:
                pass


EVENTS_UNCHECKED = set()
EVENT_GAPS_SEEN = set()  # (row, col) whose event check met a listed gap
current_key = [None]
_audit = {}


def audit_present(http):
    if "present" not in _audit:
        try:
            http.request("GET", "/events", params={"limit": 1})
            _audit["present"] = True
        except warren.exceptions.WarrenError as e:
            if e.status != 404:
                raise
            _audit["present"] = False
    return _audit["present"]


def expect_event(rt, conn, layer, action, subject=None, sandbox=None, since=0.0):
    """GET /v1/events until an event of `layer` with `action` (and `subject`
    in its subject) shows up; the audit writes in batches, so wait a little."""
    http = SyncHTTP(ConnectionConfig.resolve(**conn))
    if not audit_present(http):
        # No refusal audit in this daemon (the audit branch is not merged):
        # the outcome was checked, the event could not be. The table marks
        # the cell "PASS*" and names the gap; once GET /v1/events exists
        # every call here is a strict assertion.
        EVENTS_UNCHECKED.add(current_key[0])
        return None
    params = {"layer": layer, "limit": 1000,
              "since": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(since - 2)) + "Z"}
    if sandbox:
        params["sandbox"] = sandbox
    key = current_key[0] or ("", "")
    function_call = key[1].startswith("function/") and sandbox is None
    event_gap = gap("events", key[1])
    wait = EVENT_WAIT_S
    if event_gap is not None and any(k[1] == key[1] for k in EVENT_GAPS_SEEN):
        wait = 1.0  # the gap was confirmed in this session: no long waits
    deadline = time.time() + wait
    seen = []
    found = None
    while found is None:
        seen = (http.json("GET", "/events", params=params) or {}).get("events", [])
        for e in seen:
            # Landlock names every access that blocked: "fs.execute,fs.read_file"
            if action not in str(e.get("action", "")).split(","):
                continue
            if subject is not None and subject not in str(e.get("subject", "")):
                continue
            # a function call's refusal, not a sandbox's of the same tenant
            if function_call and not str(e.get("sandbox", "")).startswith("fn-"):
                continue
            found = e
            break
        if found is None and time.time() > deadline:
            break
        if found is None:
            time.sleep(0.3)
    if found is not None:
        # the attacking tenant's own event: its tenant, never '' (function
        # pools were recorded without one) or another's
        tenants = [n for n, t in rt.d.tokens.items() if t == conn.get("api_key")]
        assert tenants and found.get("tenant") == tenants[0], found
        # and nothing of the host in it (Landlock's paths outside the root)
        rt.check_output(f"{layer} event", json.dumps(found))
        assert event_gap is None, \
            f"refusal events of {key[1]} are recorded now: remove the 'events' gap"
        return found
    if event_gap is not None:
        EVENT_GAPS_SEEN.add(key)
        return None
    raise AssertionError(f"no {layer} event for {action!r} (subject {subject!r}); saw "
                         f"{[(e.get('action'), e.get('subject')) for e in seen][:20]}")


@pytest.fixture
def ctx(rt, rt_key, request):
    row, col = rt_key
    if col in NOT_APPLICABLE:
        pytest.skip(f"n/a: {NOT_APPLICABLE[col]}")
    c = Ctx(rt, row, col)
    if c.guest:
        c.guests = request.getfixturevalue("guests")
    current_key[0] = rt_key
    try:
        yield c
    finally:
        c.close()


# The network mode the D probes run in, and what each kind of attempt must
# get in it. Issue 6 adds "allowlist" (and "open"): add its column of
# expectations here (EPERM/ECONNREFUSED from the BPF hooks, NXDOMAIN from
# the DNS forwarder, each with its bpf-net or dns event via
# ctx.expect_event) and create the sandboxes with its policy.
NET_MODE = "none"
# Mode none, per tier. Container sandboxes carry the eBPF filter (issue 6):
# its connect/sendmsg hooks refuse any non-loopback destination with EPERM
# (before routing, which has nothing but loopback either) and report a
# bpf-net event. Function calls run in a netns of their own without the
# filter: the kernel's ENETUNREACH, no event.
NET_EXPECT = {
    "none": {
        "container": {
            "connect": "EPERM",
            "sendto": "EPERM",
            # the filter's sock_create hook (the sandbox's own namespace
            # lets every group have a ping socket, so the hook decides)
            "icmp-dgram": "EPERM",
            "raw": "EPERM",  # no CAP_NET_RAW
            "event": "bpf-net",
        },
        "function": {
            "connect": "ENETUNREACH",  # no route: only loopback exists
            "sendto": "ENETUNREACH",
            "icmp-dgram": "EACCES",  # ping_group_range excludes every group
            "raw": "EPERM",  # no CAP_NET_RAW
            "event": None,  # the kernel refuses; no platform layer involved
        },
    },
}


def net(kind):
    col = current_key[0][1] if current_key[0] else ""
    tier = "function" if col.startswith("function/") else "container"
    return NET_EXPECT[NET_MODE][tier][kind]


def net_event(ctx, action):
    layer = net("event")
    if layer is not None:
        ctx.expect_event(layer, action)
