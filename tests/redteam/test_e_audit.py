"""The refusal audit under attack: a limit hit right before the sandbox
ends is still recorded, and a flood of refusals is one row with a count."""
import time

import warren
from warren._http import ConnectionConfig, SyncHTTP
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


def _keyring_rows(ctx):
    """{id: count} of this column's seccomp keyctl rows: a container's
    sandbox, or alice's function pools (every call of a pool is one
    sandbox fn-..., so an earlier probe's keyctl may share the row)."""
    http = SyncHTTP(ConnectionConfig.resolve(**ctx.rt.alice))
    params = {"layer": "seccomp", "limit": 1000, "since": "10m"}
    if ctx.container:
        params["sandbox"] = ctx.sandbox().sandbox_id
    evs = (http.json("GET", "/events", params=params) or {}).get("events", [])
    return {e["id"]: int(e["count"]) for e in evs if e.get("action") == "keyctl" and
            (ctx.container or str(e.get("sandbox", "")).startswith("fn-"))}


@probe("x-audit-flood", ["container/uid0", "container/uid1000", "function/uid1000"])
def test_x_audit_flood_summarized(ctx):
    """120 refusals of one syscall: one row with the exact count, not a row
    per attempt; the daemon keeps answering."""
    before = _keyring_rows(ctx)
    r = ctx.run(["sh", "-c", "i=0; while [ $i -lt 120 ]; do wr-probe sys keyctl; "
                 "i=$((i+1)); done | grep -c EPERM"])
    assert r.stdout.strip() == "120", r
    e = ctx.expect_event("seccomp", "keyctl")
    deadline = time.time() + 10
    grown = {}
    while e is not None:
        after = _keyring_rows(ctx)
        # what the flood added: a new row's count, or an open row's growth
        grown = {i: c - before.get(i, 0) for i, c in after.items() if c > before.get(i, 0)}
        if sum(grown.values()) >= 120 or time.time() > deadline:
            break
        time.sleep(0.5)
    if e is not None:
        assert len(grown) == 1 and list(grown.values()) == [120], (before, grown)
    assert warren.Sandbox.health(**ctx.rt.alice) is not None
