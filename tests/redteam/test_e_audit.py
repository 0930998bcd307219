"""The refusal audit under attack: a limit hit right before the sandbox
ends is still recorded, and a flood of refusals is one row with a count."""
import time

import warren
from redlib import expect_event, parse, probe


@probe("x-audit", ["container/uid0", "container/uid1000"])
def test_x_audit_limit_hit_then_kill(ctx):
    """An agent that hits pids.max and is killed at once (or whose sandbox
    ends) still leaves the event."""
    sb = ctx.sandbox(pids=32)
    _, outcome, _ = parse(ctx.probe("forkbomb", limits={"pids": 32})[0])
    assert outcome == "EAGAIN"
    assert sb.kill()
    ctx.made.remove(sb)
    expect_event(ctx.rt, ctx.rt.alice, "cgroup-limit", "pids.max", sandbox=sb.sandbox_id,
                 since=ctx.t0)


@probe("x-audit", ["function/uid1000"])
def test_x_audit_flood_summarized(ctx):
    """120 refusals of one syscall in one call: the audit keeps a count,
    not a row per attempt (function calls: events of the tenant)."""
    t0 = time.time()
    r = ctx.run(["sh", "-c", "i=0; while [ $i -lt 120 ]; do wr-probe sys keyctl; "
                 "i=$((i+1)); done | grep -c EPERM"])
    assert r.stdout.strip() == "120", r
    e = expect_event(ctx.rt, ctx.rt.alice, "seccomp", "keyctl", since=t0)
    assert e is None or int(e.get("count", 0)) >= 1
    assert warren.Sandbox.health(**ctx.rt.alice) is not None
