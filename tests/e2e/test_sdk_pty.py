"""The Python SDK's terminals (sb.pty, sync and asyncio) against the real
warrend: an interactive shell typed into and read back, resize + stty size,
exit status, end of input, kill, errors before the switch, and TCP with a
token."""
import asyncio
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk" / "python"))

import warren  # noqa: E402
from warren import AsyncSandbox, Sandbox  # noqa: E402


@pytest.fixture
def sb(conn, image):
    with Sandbox.create(image=image, timeout=120, **conn) as s:
        yield s


class Screen:
    """on_data sink: collects terminal output, waits for a text."""

    def __init__(self):
        self.data = b""
        self.cv = threading.Condition()

    def __call__(self, chunk):
        assert isinstance(chunk, bytes)
        with self.cv:
            self.data += chunk
            self.cv.notify_all()

    def text(self):
        return self.data.decode(errors="replace").replace("\r", "")

    def wait_for(self, needle, timeout=30):
        end = time.time() + timeout
        with self.cv:
            while needle not in self.text():
                left = end - time.time()
                assert left > 0, f"{needle!r} not seen in {self.text()!r}"
                self.cv.wait(left)


def lines(text):
    return [x.strip() for x in text.split("\n")]


def test_interactive_shell_tty_resize_and_exit_status(sb):
    scr = Screen()
    h = sb.pty.create(cols=80, rows=24, on_data=scr, envs={"PS1": "$ "})
    h.send_stdin("echo hi; tty\n")
    scr.wait_for("/dev/pts/")
    out = lines(scr.text())
    assert "hi" in out, out
    assert any(x.startswith("/dev/pts/") for x in out), out
    h.send_stdin("stty size\n")
    scr.wait_for("24 80")
    h.resize(cols=132, rows=50)
    h.send_stdin("stty size; exit 3\n")
    r = h.wait(timeout=30)
    assert "50 132" in lines(scr.text()), scr.text()
    assert r.exit_code == 3 and r.reason == "exited", r
    assert r.id and r.id in [c.id for c in sb.commands.list()]
    with pytest.raises(warren.CommandExitError):
        h.wait(check=True)
    with pytest.raises(warren.ConflictError):
        h.send_stdin("too late\n")


def test_output_without_callback_cmd_cwd_envs_and_eof(sb):
    h = sb.pty.create(cmd=["sh", "-c", 'echo "$K"; pwd; cat; echo done'], cwd="/tmp",
                      envs={"K": "V"})
    h.send_stdin("line one\n")
    h.send_eof()  # cat reads it as the end of its input
    r = h.wait(timeout=30)
    assert r.ok, r
    out = lines(h.output.decode().replace("\r", ""))
    # the terminal echoes what was typed (possibly first), then cat's copy
    assert out.index("V") < out.index("/tmp") < out.index("done"), out
    assert out.count("line one") == 2, out


def test_script_then_eof_exits_the_shell(sb):
    scr = Screen()
    h = sb.pty.create(on_data=scr)
    h.send_stdin("echo first\nsleep 0.3\necho second\n(exit 4)\n")
    h.send_eof()  # typed once the shell has read everything before it
    r = h.wait(timeout=30)
    out = lines(scr.text())
    assert "first" in out and "second" in out, out
    assert r.exit_code == 4 and r.reason == "exited", (r, out)


def test_kill_ends_the_tree_and_reports_killed(sb):
    h = sb.pty.create(cmd="sleep 600 & sleep 600")
    time.sleep(0.3)
    assert h.kill() is True
    r = h.wait(timeout=30)
    assert r.reason == "killed", r
    assert h.kill() is False
    # nothing of it is left in the sandbox
    ps = sb.commands.run("ps -o comm").stdout.split()
    assert "sleep" not in ps, ps


def test_errors_before_the_switch(sb, conn, image):
    with pytest.raises(warren.InvalidArgumentError) as e:
        sb.pty.create(cwd="")
    assert e.value.field == "cwd"
    with pytest.raises(ValueError):
        sb.pty.create(cols=0)
    with pytest.raises(warren.NotFoundError):
        Sandbox("0123456789abcdef", **conn).pty.create()
    s = Sandbox.create(image=image, timeout=60, **conn)
    s.kill()
    with pytest.raises(warren.ConflictError):
        s.pty.create()


def test_tcp_with_token_and_other_tenant(tenants, image):
    alice, bob = tenants
    with Sandbox.create(image=image, timeout=60, **alice) as s:
        scr = Screen()
        h = s.pty.create(cmd=["echo", "over tcp"], on_data=scr)
        assert h.wait(timeout=30).ok
        assert "over tcp" in scr.text()
        with pytest.raises(warren.NotFoundError):
            Sandbox.connect(s.sandbox_id, **bob).pty.create()


def test_async_pty(conn, image):
    async def main():
        async with await AsyncSandbox.create(image=image, timeout=120, **conn) as s:
            got = bytearray()
            seen = asyncio.Event()

            async def on_data(chunk):
                got.extend(chunk)
                if b"24 80" in got or b"40 100" in got:
                    seen.set()

            h = await s.pty.create(cols=80, rows=24, on_data=on_data)
            await h.send_stdin("echo hi; tty; stty size\n")
            await asyncio.wait_for(seen.wait(), 30)
            seen.clear()
            await h.resize(cols=100, rows=40)
            await h.send_stdin("stty size\n")
            await asyncio.wait_for(seen.wait(), 30)
            await h.send_stdin("exit 2\n")
            r = await h.wait(timeout=30)
            text = got.decode(errors="replace").replace("\r", "")
            assert "hi" in lines(text) and "/dev/pts/" in text, text
            assert "40 100" in lines(text), text
            assert r.exit_code == 2, r
            # a second one, killed
            h2 = await s.pty.create(cmd=["sleep", "600"])
            assert await h2.kill() is True
            assert (await h2.wait(timeout=30)).reason == "killed"
            # several at once
            hs = [await s.pty.create(cmd=["sh", "-c", f"exit {i}"]) for i in range(5)]
            rs = await asyncio.gather(*(x.wait(timeout=30) for x in hs))
            assert [x.exit_code for x in rs] == list(range(5))
    asyncio.run(main())
