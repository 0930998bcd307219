"""Commands: foreground buffered and streamed, background handles (list,
get, stdin, wait, stream, kill), encodings, limits."""
import base64
import json
import threading
import time


def test_foreground_result(api, sandbox):
    out = api.run(sandbox, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert out["exit_code"] == 3 and out["reason"] == "exited" and out["signal"] == 0
    assert out["stdout"] == "out\n" and out["stderr"] == "err\n"
    assert not out["stdout_truncated"] and not out["stderr_truncated"]
    assert out["duration_ms"] > 0 and out["cpu_ms"] >= 0 and out["memory_peak_bytes"] > 0
    out = api.run(sandbox, "echo $0 via sh; echo \"$FOO\"", env={"FOO": "bar"}, cwd="/tmp")
    assert out["stdout"] == "sh via sh\nbar\n"
    assert api.run(sandbox, ["pwd"], cwd="/etc")["stdout"] == "/etc\n"
    assert api.run(sandbox, ["id", "-u"], user=1234)["stdout"] == "1234\n"


def test_start_failures_and_signals(api, sandbox):
    out = api.run(sandbox, ["/no/such/binary"])
    assert out["reason"] == "start_failed" and out["exit_code"] == 127
    out = api.run(sandbox, ["sh", "-c", "kill -KILL $$"])
    assert out["reason"] == "signaled" and out["signal"] == 9 and out["exit_code"] == 137


def test_stdin_text(api, sandbox):
    out = api.run(sandbox, ["sh", "-c", "wc -c; cat"], stdin="hello\n")
    assert out["stdout"] == "6\n"
    big = "x" * 300000
    assert api.run(sandbox, ["wc", "-c"], stdin=big)["stdout"].strip() == "300000"


def test_command_timeout_kills_the_tree(api, sandbox):
    t0 = time.time()
    out = api.run(sandbox, "sleep 60 & sleep 60; echo never", timeout=0.5)
    assert out["reason"] == "timeout" and time.time() - t0 < 5
    assert "never" not in out["stdout"]
    ps = api.run(sandbox, "ps -o comm | grep -c sleep || true")["stdout"].strip()
    assert ps == "0"


def test_output_encodings(api, sandbox):
    raw = api.run(sandbox, ["printf", "ok\\377\\376end\\n"])
    assert raw["stdout"] == "ok\ufffd\ufffdend\n"
    b64 = api.run(sandbox, ["printf", "ok\\377\\376end\\n"], encoding="base64")
    assert base64.b64decode(b64["stdout"]) == b"ok\xff\xfeend\n"
    utf8 = api.run(sandbox, ["printf", "h\\303\\251llo \\342\\202\\254\\n"])
    assert utf8["stdout"] == "h\u00e9llo \u20ac\n"


def test_output_cap(api, sandbox):
    out = api.run(sandbox, "head -c 100000 /dev/zero | tr '\\0' a; echo done >&2",
                  output_cap=1000)
    assert len(out["stdout"]) == 1000 and out["stdout_truncated"]
    # past the cap the pipe is closed: the writers see EPIPE, as with | head -c
    assert out["stderr"].endswith("done\n") and not out["stderr_truncated"]


def test_stream_order(api, sandbox):
    t0 = time.time()
    arrivals = []
    r = api.request("POST", f"/v1/sandboxes/{sandbox}/commands", stream=True, json_body={
        "cmd": "for i in 1 2 3 4 5; do echo out$i; echo err$i >&2; sleep 0.2; done; exit 4",
        "stream": True})
    assert r.status == 200
    assert r.getheader("Content-Type") == "application/x-ndjson"
    lines = []
    for raw in r:
        lines.append(json.loads(raw))
        arrivals.append(time.time() - t0)
    data = [(x["type"], x["data"]) for x in lines[:-1]]
    outs = "".join(d for t, d in data if t == "stdout")
    errs = "".join(d for t, d in data if t == "stderr")
    assert outs == "".join(f"out{i}\n" for i in range(1, 6))
    assert errs == "".join(f"err{i}\n" for i in range(1, 6))
    # stdout i arrives before stdout i+1, and each out_i before err_{i+1}
    order = [d.strip() for t, d in data]
    for i in range(1, 5):
        assert order.index(f"out{i}") < order.index(f"err{i + 1}")
    # streamed as it happens, not at the end
    assert arrivals[0] < arrivals[-1] - 0.5
    last = lines[-1]
    assert last["type"] == "exit" and last["exit_code"] == 4 and last["reason"] == "exited"


def test_stream_keeps_split_utf8_characters_whole(api, sandbox):
    status, lines = api.ndjson("POST", f"/v1/sandboxes/{sandbox}/commands", {
        "cmd": "printf '\\342'; sleep 0.3; printf '\\202\\254\\n'", "stream": True})
    assert status == 200
    text = "".join(x["data"] for x in lines if x["type"] == "stdout")
    assert text == "\u20ac\n"


def test_background_with_stdin_and_wait(api, sandbox):
    base = f"/v1/sandboxes/{sandbox}/commands"
    r = api.post(base, {"cmd": "while read l; do echo got:$l; done; echo bye; exit 7",
                        "background": True, "stdin": "one\n"})
    assert r.status == 201, r
    c = r.json()
    # answered once it runs: with its pid in the sandbox
    assert c["state"] == "running" and c["pid"] > 1
    cid = c["id"]
    # not done: wait returns the running command after its timeout
    t0 = time.time()
    w = api.get(f"{base}/{cid}/wait?timeout=0.5").json()
    assert w["state"] == "running" and 0.4 < time.time() - t0 < 3
    info = api.get(f"{base}/{cid}").json()
    assert info["state"] == "running" and info["pid"] > 1
    assert api.post(f"{base}/{cid}/stdin", {"data": "two\n"}).status == 204
    assert api.post(f"{base}/{cid}/stdin", {"data": "dGhyZWUK", "encoding": "base64",
                                            "eof": True}).status == 204
    done = api.get(f"{base}/{cid}/wait?timeout=10").json()
    assert done["state"] == "finished" and done["exit_code"] == 7
    assert done["stdout"] == "got:one\ngot:two\ngot:three\nbye\n"
    r = api.post(f"{base}/{cid}/stdin", {"data": "late"})
    assert r.status == 409 and r.error == ("conflict", None)
    listed = api.get(base).json()["commands"]
    mine = [x for x in listed if x["id"] == cid][0]
    assert mine == {"id": cid, "cmd": c and mine["cmd"], "state": "finished",
                    "background": True, "exit_code": 7, "reason": "exited"}


def test_background_stream_replays_then_follows(api, sandbox):
    base = f"/v1/sandboxes/{sandbox}/commands"
    cid = api.post(base, {"cmd": "echo early; sleep 0.8; echo late; echo e >&2",
                          "background": True}).json()["id"]
    time.sleep(0.3)
    results = {}

    def reader(name):
        c = api.__class__(api.daemon)
        results[name] = c.ndjson("GET", f"{base}/{cid}/stream")
        c.close()

    ts = [threading.Thread(target=reader, args=(n,)) for n in ("a", "b")]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    for name in ("a", "b"):
        status, lines = results[name]
        assert status == 200
        assert [(x["type"], x.get("data")) for x in lines[:-1]] == [
            ("stdout", "early\n"), ("stdout", "late\n"), ("stderr", "e\n")] or \
            "".join(x["data"] for x in lines[:-1] if x["type"] == "stdout") == "early\nlate\n"
        assert lines[-1]["type"] == "exit" and lines[-1]["exit_code"] == 0
    # after the end the stream is a full replay
    status, lines = api.ndjson("GET", f"{base}/{cid}/stream")
    assert "".join(x["data"] for x in lines if x["type"] == "stdout") == "early\nlate\n"


def test_kill_background_command_tree(api, sandbox):
    base = f"/v1/sandboxes/{sandbox}/commands"
    cid = api.post(base, {"cmd": "setsid sleep 300 & sleep 300", "background": True}).json()["id"]
    time.sleep(0.3)
    assert api.run(sandbox, "ps -o comm | grep -c sleep")["stdout"].strip() == "2"
    t0 = time.time()
    assert api.delete(f"{base}/{cid}").status == 204
    done = api.get(f"{base}/{cid}/wait?timeout=10").json()
    assert done["state"] == "finished" and done["reason"] == "killed"
    assert time.time() - t0 < 5
    assert api.run(sandbox, "ps -o comm | grep -c sleep || true")["stdout"].strip() == "0"
    # killing a finished command is a no-op
    assert api.delete(f"{base}/{cid}").status == 204


def test_sandbox_kill_ends_background_commands(api):
    sid = api.create()
    base = f"/v1/sandboxes/{sid}/commands"
    cid = api.post(base, {"cmd": ["cat"], "background": True}).json()["id"]
    t0 = time.time()
    assert api.kill(sid).status == 204
    assert time.time() - t0 < 5
    assert api.get(f"{base}/{cid}").status == 409


def test_concurrent_commands_in_one_sandbox(warrend, sandbox):
    outs = {}

    def one(i):
        c = warrend.client()
        outs[i] = c.run(sandbox, f"sleep 0.5; echo {i}")["stdout"]
        c.close()

    t0 = time.time()
    ts = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert outs == {i: f"{i}\n" for i in range(8)}
    assert time.time() - t0 < 4  # ran in parallel, not one after another


def test_kill_right_after_start_then_kill_sandbox(api):
    """A command killed while the tier is still starting it: killed once it
    exists, never left unreaped (which would hang the sandbox's kill)."""
    sid = api.create()
    base = f"/v1/sandboxes/{sid}/commands"
    for _ in range(10):
        cid = api.post(base, {"cmd": ["sleep", "300"], "background": True}).json()["id"]
        assert api.delete(f"{base}/{cid}").status == 204
        done = api.get(f"{base}/{cid}/wait?timeout=10").json()
        assert done["state"] == "finished" and done["reason"] == "killed", done
    t0 = time.time()
    assert api.kill(sid).status == 204
    assert time.time() - t0 < 5
