"""Audit events through the clients: the CLI (`warren events`, built on
libwarren's warren_audit_events / warren_audit_follow) and the Python SDK
(`sb.events(...)`, `warren.events.query/follow`), against the session warrend
of conftest.py (audit on, defaults)."""
import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import BUILD

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk" / "python"))

import warren  # noqa: E402
import warren.events  # noqa: E402
from warren import AsyncSandbox, Sandbox  # noqa: E402
from test_cli_client import Cli, one_error_line  # noqa: E402


def wait(fn, timeout=10):
    deadline = time.time() + timeout
    while True:
        v = fn()
        if v or time.time() > deadline:
            return v
        time.sleep(0.1)


@pytest.fixture
def cli(warrend):
    return Cli(warrend)


def test_cli_events_denied_last(cli, api):
    sid = api.create()
    for name in ("keyctl", "mount", "bpf"):
        api.run(sid, ["wr-probe", "sys", name])
    ev = wait(lambda: len(cli.json("events", "--sandbox", sid, "--denied")) >= 3 and
              cli.json("events", "--sandbox", sid, "--denied"))
    assert [e["action"] for e in ev] == ["keyctl", "mount", "bpf"], ev
    last2 = cli.json("events", "--denied", "--last", "2", "--sandbox", sid)
    assert [e["action"] for e in last2] == ["mount", "bpf"]
    # positional sandbox with an audit option: the same
    assert cli.json("events", "--layer", "seccomp", sid) == ev
    table = cli("events", "--sandbox", sid, "--last", "5", check=0).out.splitlines()
    assert table[0].split()[:4] == ["TIME", "SANDBOX", "LAYER", "SEVERITY"]
    assert any("keyctl refused" in line and sid in line for line in table[1:]), table
    # a sandbox alone is still its lifecycle
    life = cli.json("events", sid)
    assert life[0]["type"] == "created"
    api.kill(sid)


def test_cli_events_errors(cli):
    for args, needle in ((["events", "--last", "0"], "--last"),
                         (["events", "--limit", "5"], "--limit"),
                         (["events", "--layer", "nope"], "layer"),
                         (["events", "--since", "yesterday"], "since")):
        p = cli(*args)
        assert p.returncode != 0 and needle in p.err, (args, p.err)
        assert len(p.err.strip().splitlines()) == 1, p.err


def test_cli_events_follow(cli, api):
    sid = api.create()
    p = subprocess.Popen([cli.exe, "events", "--follow", "--json", "--sandbox", sid],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli.env)
    try:
        time.sleep(0.5)
        api.run(sid, ["wr-probe", "sys", "ptrace"])
        line = []
        t = threading.Thread(target=lambda: line.append(p.stdout.readline()), daemon=True)
        t.start()
        t.join(10)
        assert line and json.loads(line[0])["action"] == "ptrace", line
    finally:
        p.terminate()
        p.wait(5)
    api.kill(sid)


def test_sdk_sandbox_events(conn, image):
    with Sandbox.create(image=image, timeout=120, **conn) as sb:
        sb.commands.run("wr-probe sys keyctl")
        ev = wait(lambda: sb.events(denied=True))
        assert len(ev) == 1 and isinstance(ev[0], warren.AuditEvent)
        e = ev[0]
        assert e.sandbox == sb.sandbox_id and e.layer == "seccomp" and e.action == "keyctl"
        assert e.count == 1 and e.denied and e.summary == "keyctl refused"
        assert e.what["errno"] == "EPERM" and e.comm == "wr-probe"
        assert sb.events(layer=["landlock", "api"]) == []
        # lifecycle events are unchanged
        assert sb.events()[0].type == "created"
        got = warren.events.query(sandbox=sb.sandbox_id, last=5, **conn)
        assert [x.id for x in got] == [e.id]


def test_sdk_tenants_and_follow(tenants, image):
    alice, bob = tenants
    with Sandbox.create(image=image, timeout=120, **alice) as sb:
        sb.commands.run("wr-probe sys mount")
        wait(lambda: sb.events(audit=True))
        assert not [e for e in warren.events.query(last=1000, **bob)
                    if e.sandbox == sb.sandbox_id]
        with pytest.raises(warren.NotFoundError):
            warren.events.query(sandbox=sb.sandbox_id, **bob)
        with pytest.raises(warren.PermissionDeniedError):
            warren.events.query(tenant="alice", **bob)
        # follow: the backlog first, then live
        it = warren.events.follow(sandbox=sb.sandbox_id, **alice)
        first = next(it)
        assert first.action == "mount"
        sb.commands.run("wr-probe sys bpf")
        assert next(it).action == "bpf"
        it.close()


def test_sdk_async(conn, image):
    async def main():
        async with await AsyncSandbox.create(image=image, timeout=120, **conn) as sb:
            await sb.commands.run("wr-probe sys unshare")
            for _ in range(100):
                ev = await sb.events(denied=True)
                if ev:
                    break
                await asyncio.sleep(0.1)
            assert [e.action for e in ev] == ["unshare"]
            got = await warren.AsyncEvents(**conn).query(sandbox=sb.sandbox_id)
            assert [e.id for e in got] == [ev[0].id]
    asyncio.run(main())
