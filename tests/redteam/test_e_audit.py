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


@probe("x-audit-flood", ["container/uid0", "container/uid1000", "function/uid1000"])
def test_x_audit_flood_summarized(ctx):
    """120 refusals of one syscall: one row with the exact count, not a row
    per attempt; the daemon keeps answering."""
    r = ctx.run(["sh", "-c", "i=0; while [ $i -lt 120 ]; do wr-probe sys keyctl; "
                 "i=$((i+1)); done | grep -c EPERM"])
    assert r.stdout.strip() == "120", r
    deadline = time.time() + 10
    while True:
        e = ctx.expect_event("seccomp", "keyctl")
        if e is None or int(e["count"]) >= 120 or time.time() > deadline:
            break
        time.sleep(0.5)
    if e is not None:
        assert int(e["count"]) == 120, e
    assert warren.Sandbox.health(**ctx.rt.alice) is not None
