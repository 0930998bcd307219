"""CPU harvesting (harvest.c): a sandbox's CPU weight follows its request
and its quota is its cpu_max; the sampler marks a sandbox that uses no CPU
idle (lowest weight, cpu.idle, memory reclaimed first) and gives its
weight back on activity; GET and /metrics show requested vs used. Checked
on the kernel's files of this (v1 + unified) machine; the v2 file writes
are unit-tested (test_cgroup_harvest)."""
import time
from conftest import own_cgroup_dirs
from test_api_config import run_with
from test_cli_client import Cli

FAST = {"harvest": {"interval_s": 0.2, "idle_after_s": 1}}


def cg_dir(d, ctrl, sid):
    for p in own_cgroup_dirs(d.cg_base):
        if ctrl in p.parts[4].split(","):
            return p / sid
    raise AssertionError(f"no {ctrl} hierarchy")


def read(d, ctrl, sid, f):
    return (cg_dir(d, ctrl, sid) / f).read_text().strip()


def harvest(c, sid):
    return c.get(f"/v1/sandboxes/{sid}").json()["usage"]["harvest"]


def wait_harvest(c, sid, state, limit=10):
    deadline = time.time() + limit
    while time.time() < deadline:
        if harvest(c, sid)["state"] == state:
            return
        time.sleep(0.1)
    raise AssertionError(f"{sid} not {state}: {harvest(c, sid)}")


def test_weights_follow_requests(fresh_daemon):
    d = fresh_daemon(extra=FAST).start()
    c = d.client()
    try:
        a = c.create(cpu=0.5, cpu_max=1.5)
        b = c.create(cpu=2)
        be = c.create()
        sb = c.get(f"/v1/sandboxes/{a}").json()
        assert sb["cpu"] == 0.5 and sb["cpu_max"] == 1.5, sb
        assert "cpu_max" not in c.get(f"/v1/sandboxes/{b}").json()
        # weight = request (v1 shares: x 1024), quota = max, not request
        assert read(d, "cpu", a, "cpu.shares") == "512"
        assert read(d, "cpu", a, "cpu.cfs_quota_us") == "150000"
        assert read(d, "cpu", b, "cpu.shares") == "2048"
        # no max: the request is also the cap
        assert read(d, "cpu", b, "cpu.cfs_quota_us") == "200000"
        assert read(d, "cpu", be, "cpu.shares") == "1024"  # no request: the default
        assert read(d, "cpu", be, "cpu.cfs_quota_us") == "-1"
        # (how far it bursts is the benchmark's: bench/results/lifecycle.md)
        for sid in (a, b, be):
            assert c.kill(sid).status == 204
    finally:
        c.close()


def test_idle_gets_lowest_weight_and_back(fresh_daemon):
    d = fresh_daemon(extra=FAST).start()
    c = d.client()
    try:
        sid = c.create(cpu=0.5, memory_mb=64)
        cpu = cg_dir(d, "cpu", sid)
        mem = cg_dir(d, "memory", sid)
        has_idle = (cpu / "cpu.idle").exists()
        wait_harvest(c, sid, "idle")
        h = harvest(c, sid)
        assert h["cpu_weight"] == 0 and h["idle_since"], h
        assert h["cpu_idle"] == has_idle, h
        if has_idle:
            assert (cpu / "cpu.idle").read_text().strip() == "1"
        else:
            assert (cpu / "cpu.shares").read_text().strip() == "2"
        # memory: reclaimed first (v1: soft limit 0) before any pause
        assert (mem / "memory.soft_limit_in_bytes").read_text().strip() == "0"
        m = c.get("/metrics").body.decode()
        assert f'warren_sandbox_idle{{id="{sid}",tenant="default"}} 1' in m, m
        assert f'warren_sandbox_cpu_weight{{id="{sid}",tenant="default"}} 0' in m, m
        assert 'warren_harvest_transitions_total{to="idle"}' in m
        # an exec gets the request's weight back before it runs: inside
        # the command, the sandbox's cgroup already has it
        assert c.run(sid, ["true"])["exit_code"] == 0
        assert (cpu / "cpu.shares").read_text().strip() == "512"
        if has_idle:
            assert (cpu / "cpu.idle").read_text().strip() == "0"
        assert int((mem / "memory.soft_limit_in_bytes").read_text()) > 1 << 60
        assert harvest(c, sid)["state"] == "active"
        # CPU use without any API call wakes it (the sampler sees it): a
        # background command that starts spinning once the sandbox is idle
        r = c.post(f"/v1/sandboxes/{sid}/commands",
                   {"cmd": "sleep 4; while :; do :; done", "background": True})
        assert r.status in (200, 201, 202), r
        wait_harvest(c, sid, "idle", limit=3.8)
        wait_harvest(c, sid, "active", limit=10)
        assert (cpu / "cpu.shares").read_text().strip() == "512"
        u = c.get(f"/v1/sandboxes/{sid}").json()["usage"]
        assert u["cpu_cores"] > 0.01, u  # above the idle threshold
        # it stays active while it works
        time.sleep(1.5)
        assert harvest(c, sid)["state"] == "active"
        assert c.kill(sid).status == 204
    finally:
        c.close()


def test_metrics_requested_vs_used(fresh_daemon):
    d = fresh_daemon(extra=FAST).start()
    c = d.client()
    try:
        sid = c.create(cpu=0.25, cpu_max=1, memory_mb=96)
        c.post(f"/v1/sandboxes/{sid}/commands", {"cmd": "while :; do :; done", "background": True})
        time.sleep(1)
        m = c.get("/metrics").body.decode()
        lab = f'{{id="{sid}",tenant="default"}}'
        assert f"warren_sandbox_cpu_requested_cores{lab} 0.25" in m
        assert f"warren_sandbox_cpu_max_cores{lab} 1" in m
        assert f"warren_sandbox_memory_requested_bytes{lab} {96 << 20}" in m
        used = [float(l.split()[-1]) for l in m.splitlines()
                if l.startswith(f"warren_sandbox_cpu_used_cores{lab}")]
        assert used and used[0] > 0.05, used
        for name in ("warren_sandbox_memory_bytes", "warren_node_cpu_used_cores",
                     "warren_node_cpu_overcommit", "warren_node_memory_overcommit",
                     "warren_node_pressure", 'warren_node_sandboxes_harvest{state="active"} 1'):
            assert name in m, name
        u = c.get(f"/v1/sandboxes/{sid}").json()["usage"]
        assert u["cpu_cores"] > 0.05 and u["memory_bytes"] > 0, u
        # the CLI shows requested vs used
        text = Cli(d)("inspect", sid, check=0).out
        assert "cpu:          0.25 requested, max 1\n" in text, text
        assert "CPUs used, active (weight 25)" in text, text
        assert "usage:        cpu " in text, text
        assert c.kill(sid).status == 204
    finally:
        c.close()


def test_cpu_max_and_config_errors(fresh_daemon, build, tmp_path):
    d = fresh_daemon(extra=FAST).start()
    c = d.client()
    try:
        for body in ({"image": "busybox", "cpu": 2, "cpu_max": 1},
                     {"image": "busybox", "cpu_max": 65},
                     {"image": "busybox", "cpu_max": "1"}):
            r = c.post("/v1/sandboxes", body)
            assert r.status == 400 and r.json()["error"]["field"] == "cpu_max", (body, r)
    finally:
        c.close()
    for cfg, key in [({"harvest": {"interval_s": 0}}, "harvest.interval_s"),
                     ({"harvest": {"idle_after_s": 0.1, "interval_s": 1}},
                      "harvest.idle_after_s"),
                     ({"harvest": {"idle_cpu": 2}}, "harvest.idle_cpu"),
                     ({"harvest": {"bogus": 1}}, "harvest"),
                     ({"harvest": 3}, "harvest")]:
        p = run_with(build, tmp_path, cfg)
        assert p.returncode == 2, (cfg, p.stderr)
        assert key in p.stderr, (cfg, p.stderr)


def test_restart_undoes_idle_share(fresh_daemon):
    # a daemon killed while a sandbox is marked idle: the next one starts it
    # active, so it must not leave the idle share behind
    d = fresh_daemon(extra=FAST).start()
    c = d.client()
    sid = c.create(cpu=0.5)
    cpu = cg_dir(d, "cpu", sid)
    wait_harvest(c, sid, "idle")
    c.close()
    d.kill9()
    d.start()
    c = d.client()
    try:
        has_idle = (cpu / "cpu.idle").exists()

        def active_share():
            return (cpu / "cpu.shares").read_text().strip() == "512" and \
                (not has_idle or (cpu / "cpu.idle").read_text().strip() == "0")

        deadline = time.time() + 5
        seen = False
        while time.time() < deadline and not seen:
            seen = active_share()
            time.sleep(0.05)
        assert seen, ((cpu / "cpu.shares").read_text(), harvest(c, sid))
        wait_harvest(c, sid, "idle")  # and marked idle again later
        assert c.kill(sid).status == 204
    finally:
        c.close()
