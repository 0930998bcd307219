"""Elastic CPU admission: creates are refused (429 resource_exhausted, the
reason named) when running sandboxes' CPU requests would exceed the
overcommit ratio; paused sandboxes cost nothing; /metrics shows the node's
overcommit; bad admission config names its key."""
import os

from test_api_config import run_with


def test_admission_by_overcommit(fresh_daemon):
    d = fresh_daemon(extra={"admission": {"cpu_overcommit": 0.5}}).start()
    c = d.client()
    ncpu = os.cpu_count()
    allowed = 0.5 * ncpu
    try:
        big = round(allowed * 0.6, 2)
        a = c.create(cpu=big)
        r = c.post("/v1/sandboxes", {"image": "busybox", "cpu": big})
        assert r.status == 429 and r.error[0] == "resource_exhausted", r
        msg = r.json()["error"]["message"]
        assert "cpu overcommit" in msg and f"{allowed:.2f} allowed" in msg, msg
        # best effort (no cpu) is admitted
        be = c.create()
        m = c.get("/metrics").body.decode()
        assert f"warren_node_cpu_requested_running_cores {big:g}" in m, m
        assert 'warren_node_cpu_overcommit{kind="max"} 0.5' in m, m
        assert 'warren_admission_refused_total{reason="cpu_overcommit"} 1' in m, m
        # a paused sandbox costs no CPU: the same create now passes
        assert c.post(f"/v1/sandboxes/{a}/pause").status == 200
        b = c.create(cpu=big)
        # resuming over the ratio is allowed (it was admitted); creates are not
        for sid in (a, b, be):
            c.kill(sid)
    finally:
        c.close()


def test_bad_admission_config(build, tmp_path):
    for cfg, key in [({"admission": {"cpu_overcommit": 0}}, "admission.cpu_overcommit"),
                     ({"admission": {"cpu_pressure_max": 2}}, "admission.cpu_pressure_max"),
                     ({"admission": {"bogus": 1}}, "admission"),
                     ({"admission": []}, "admission")]:
        p = run_with(build, tmp_path, cfg)
        assert p.returncode == 2, (cfg, p.stderr)
        assert key in p.stderr, (cfg, p.stderr)
