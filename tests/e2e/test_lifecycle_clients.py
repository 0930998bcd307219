"""Pause, resume and leases through the clients: the CLI (libwarren) and the
Python SDK (sync and async), against the session warrend."""
import asyncio
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest

from conftest import own_cgroup_dirs
from lifecycle_util import state, wait_state
from test_cli_client import Cli

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk" / "python"))

import warren  # noqa: E402
from warren import AsyncLease, AsyncSandbox, Lease, Sandbox  # noqa: E402


@pytest.fixture
def cli(warrend):
    return Cli(warrend)


def test_cli_pause_resume(cli, api):
    sid = cli("create", "--image", "busybox", "--on-idle", "kill", "--on-timeout", "pause",
              check=0).out.strip()
    sb = api.get(f"/v1/sandboxes/{sid}").json()
    assert sb["on_idle"] == "kill" and sb["on_timeout"] == "pause", sb
    assert cli("pause", sid, check=0).out == f"{sid} paused\n"
    info = cli.json("inspect", sid)
    assert info["state"] == "paused" and info["pause_reason"] == "request", info
    text = cli("inspect", sid, check=0).out
    assert "paused:       request" in text and "on idle:      kill" in text, text
    assert "usage:        cpu " in text, text
    assert cli("resume", "--timeout", "10m", sid, check=0).out == f"{sid} running\n"
    exp = datetime.strptime(api.get(f"/v1/sandboxes/{sid}").json()["expires_at"],
                            "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    left = (exp - datetime.now(timezone.utc)).total_seconds()
    assert 590 < left <= 600, left
    cli("pause", sid, check=0)
    # exec resumes it
    assert cli("exec", sid, "--", "echo", "hi", check=0).out == "hi\n"
    assert state(api, sid) == "running"
    p = cli("pause", "0123456789abcdef")
    assert p.returncode != 0 and len(p.err.strip().splitlines()) == 1, p.err
    p = cli("resume", "--to-disk", sid)
    assert p.returncode != 0 and "--to-disk" in p.err, p.err
    # to disk (CRIU, where the node has it): resumed by exec with its files
    if api.get("/v1/health").json()["checkpoint"]["available"]:
        cli("exec", sid, "--", "sh", "-c", "echo kept > /tmp/f", check=0)
        assert cli("pause", "--to-disk", sid, check=0).out == f"{sid} paused\n"
        ev = [e for e in api.get(f"/v1/sandboxes/{sid}/events").json()["events"]
              if e["type"] == "paused"][-1]
        assert ev["detail"]["keep_memory"] is False, ev
        assert cli("exec", sid, "--", "cat", "/tmp/f", check=0).out == "kept\n"
    else:
        p = cli("pause", "--to-disk", sid)
        assert p.returncode != 0 and "keep_memory" in p.err, p.err
    p = cli("create", "--image", "busybox", "--on-idle", "sleep")
    assert p.returncode != 0 and "--on-idle" in p.err and len(p.err.strip().splitlines()) == 1
    cli("rm", sid, check=0)


def test_cli_lease(cli, api):
    lid = f"cli-{uuid.uuid4().hex[:8]}"
    assert cli("lease", "create", "--id", lid, "--grace", "2", "--expire", "1h",
               check=0).out == f"{lid}\n"
    sid = cli("create", "--image", "busybox", "--lease", lid, check=0).out.strip()
    lo = cli.json("lease", "inspect", lid)
    assert lo["state"] == "active" and lo["sandboxes"] == 1 and lo["grace_s"] == 2, lo
    assert lid in cli("lease", "ls", check=0).out
    assert cli("lease", "suspend", lid, check=0).out == f"{lid} suspended\n"
    assert state(api, sid) == "paused"
    assert cli("lease", "resume", lid, check=0).out == f"{lid} active\n"
    assert state(api, sid) == "running"
    # heartbeat --every keeps it alive past its grace, until interrupted
    p = subprocess.Popen([cli.exe, "lease", "heartbeat", "--every", "1", lid], env=cli.env)
    time.sleep(3.5)
    assert state(api, sid) == "running"
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=10) == 0
    wait_state(api, sid, "paused", limit=6)
    assert cli("lease", "heartbeat", lid, check=0).out == f"{lid} active\n"
    wait_state(api, sid, "running", limit=5)
    assert cli("lease", "release", "--keep", lid, check=0).out == f"{lid} released\n"
    assert state(api, sid) == "running"
    p = cli("lease", "heartbeat", lid)
    assert p.returncode != 0 and "released" in p.err, p.err
    p = cli("lease", "create", "--on-expire", "explode")
    assert p.returncode != 0 and "--on-expire" in p.err
    lid2 = f"cli-{uuid.uuid4().hex[:8]}"
    cli("lease", "create", "--id", lid2, "--to-disk", check=0)
    assert cli.json("lease", "inspect", lid2)["keep_memory"] is False
    assert cli.json("lease", "inspect", lid)["keep_memory"] is True
    p = cli("lease", "suspend", "--to-disk", lid2)
    assert p.returncode != 0 and "--to-disk" in p.err
    cli("lease", "release", lid2, check=0)
    p = cli("lease", "frobnicate")
    assert p.returncode != 0 and len(p.err.strip().splitlines()) == 1
    cli("rm", sid, check=0)


def test_sdk_pause_resume_and_lease(conn, image):
    with Sandbox.create(image=image, timeout=120, **conn) as sb:
        sb.commands.run("echo kept > /tmp/f")
        info = sb.pause()
        assert info.is_paused and info.pause_reason == "request" and sb.is_paused()
        assert 100 < info.timeout_remaining <= 120 and info.expires_at is None
        # auto-resume: the file call resumes it
        assert sb.files.read("/tmp/f") == "kept\n"
        assert sb.is_running()
        sb.pause()
        info = sb.resume(timeout=600)
        assert info.is_running and info.pause_reason is None
        # to disk (containers: CRIU, where the node has it)
        try:
            info = sb.pause(keep_memory=False)
        except warren.InvalidArgumentError as e:
            assert "keep_memory" in str(e), e
        else:
            assert info.is_paused
            assert sb.files.read("/tmp/f") == "kept\n"
        with pytest.raises(TypeError):
            sb.pause(keep_memory="no")
    with pytest.raises(TypeError):
        Lease.create(grace_s=1, keep_memory="no", **conn)
    with Lease.create(grace_s=1, keep_memory=False, **conn) as lease:
        assert lease.info.keep_memory is False
    lid = f"sdk-{uuid.uuid4().hex[:8]}"
    with Lease.create(lid, grace_s=1, expire_s=600, **conn) as lease:
        assert lease.info.state == "active" and lease.info.grace_s == 1
        assert lease.info.keep_memory is True
        sb = Sandbox.create(image=image, timeout=120, lease=lease, **conn)
        assert sb.info.lease == lid
        time.sleep(2.5)  # the background thread beats every grace/3
        assert sb.get_info().state == "running", lease.heartbeat_error
    # the context ended the heartbeats: paused after the grace
    deadline = time.time() + 6
    while sb.get_info().state != "paused" and time.time() < deadline:
        time.sleep(0.1)
    assert sb.info.state == "paused" and sb.info.pause_reason == "lease"
    assert lease.get_info().state == "suspended"
    lease.heartbeat()
    deadline = time.time() + 5
    while sb.get_info().state != "running" and time.time() < deadline:
        time.sleep(0.1)
    assert sb.info.state == "running"
    assert lease.suspend().state == "suspended" and sb.is_paused()
    assert lease.resume().state == "active" and sb.is_running()
    assert lid in [x.lease_id for x in Lease.list(**conn)]
    assert Lease.connect(lid, **conn).info.sandboxes == 1
    assert lease.release().state == "released"
    assert sb.get_info().state == "killed"
    with pytest.raises(warren.ConflictError):
        lease.heartbeat()
    with pytest.raises(warren.NotFoundError):
        Sandbox.create(image=image, lease=f"none-{lid}", **conn)


def test_sdk_async(conn, image):
    async def main():
        sb = await AsyncSandbox.create(image=image, timeout=120, **conn)
        info = await sb.pause()
        assert info.state == "paused" and await sb.is_paused()
        assert (await sb.commands.run("echo hi")).stdout == "hi\n"
        assert await sb.is_running()
        await sb.pause()
        assert (await sb.resume()).state == "running"
        lease = await AsyncLease.create(grace_s=1, expire_s=600, **conn)
        async with lease:
            s2 = await AsyncSandbox.create(image=image, timeout=120, lease=lease, **conn)
            await asyncio.sleep(2.5)
            assert (await s2.get_info()).state == "running", lease.heartbeat_error
        assert (await lease.suspend()).state == "suspended"
        assert (await s2.get_info()).state == "paused"
        assert (await lease.release()).state == "released"
        assert (await s2.get_info()).state == "killed"
        await sb.kill()
    asyncio.run(main())


def _quota(warrend, sid):
    """The sandbox's CPU quota in cores from its cgroup (v1 cfs or v2 cpu.max)."""
    for p in own_cgroup_dirs(warrend.cg_base):
        d = p / sid
        if (d / "cpu.cfs_quota_us").exists():
            q = int((d / "cpu.cfs_quota_us").read_text())
            return -1 if q < 0 else q / int((d / "cpu.cfs_period_us").read_text())
        if (d / "cpu.max").exists():
            q, per = (d / "cpu.max").read_text().split()
            return -1 if q == "max" else int(q) / int(per)
    raise AssertionError(f"no cpu cgroup of {sid}")


def test_cli_cpu_max(cli, api, warrend):
    sid = cli("create", "--image", "busybox", "--cpu", "0.5", "--cpu-max", "1.5",
              check=0).out.strip()
    sb = api.get(f"/v1/sandboxes/{sid}").json()
    assert sb["cpu"] == 0.5 and sb["cpu_max"] == 1.5, sb
    assert _quota(warrend, sid) == 1.5
    assert "max 1.5" in cli("inspect", sid, check=0).out
    # --cpu-max alone: a cap with no request
    s2 = cli("create", "--image", "busybox", "--cpu-max", "0.25", check=0).out.strip()
    assert api.get(f"/v1/sandboxes/{s2}").json()["cpu_max"] == 0.25
    assert _quota(warrend, s2) == 0.25
    before = len(api.get("/v1/sandboxes").json()["sandboxes"])
    for args in (["--cpu-max", "0"], ["--cpu-max", "-1"], ["--cpu-max", "65"],
                 ["--cpu-max", "abc"], ["--cpu-max", "nan"], ["--cpu-max", ""],
                 ["--cpu", "2", "--cpu-max", "1"], ["--cpu-max", "1", "--cpu", "2"]):
        p = cli("create", "--image", "busybox", *args)
        lines = p.err.strip().splitlines()
        assert p.returncode != 0 and len(lines) == 1 and "--cpu-max" in lines[0], (args, p.err)
    assert len(api.get("/v1/sandboxes").json()["sandboxes"]) == before
    cli("rm", sid, check=0)
    cli("rm", s2, check=0)


def test_sdk_cpu_max(conn, image, warrend):
    with Sandbox.create(image=image, timeout=120, cpu=0.5, cpu_max=1.5, **conn) as sb:
        info = sb.get_info()
        assert info.cpu == 0.5 and info.cpu_max == 1.5, info
        assert _quota(warrend, sb.sandbox_id) == 1.5
    for kw in ({"cpu": 2, "cpu_max": 1}, {"cpu_max": 65}, {"cpu_max": -1}, {"cpu_max": "1"}):
        with pytest.raises(warren.InvalidArgumentError) as ei:
            Sandbox.create(image=image, timeout=60, **kw, **conn)
        assert ei.value.field == "cpu_max", (kw, ei.value)

    async def main():
        sb = await AsyncSandbox.create(image=image, timeout=120, cpu=0.25, cpu_max=1, **conn)
        try:
            info = await sb.get_info()
            assert info.cpu == 0.25 and info.cpu_max == 1, info
            assert _quota(warrend, sb.sandbox_id) == 1
        finally:
            await sb.kill()
        with pytest.raises(warren.InvalidArgumentError) as ei:
            await AsyncSandbox.create(image=image, timeout=60, cpu=1, cpu_max=0.5, **conn)
        assert ei.value.field == "cpu_max"
    asyncio.run(main())
