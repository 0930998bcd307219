"""The function tier through warrend: POST /v1/functions/call and
/v1/functions/batch (docs/API.md, "Functions")."""
import base64
import threading

import pytest

from conftest import BUILD


def pyimage():
    for d in (BUILD / "tests" / "test-images" / "python", BUILD / "test-images" / "python"):
        if (d / "usr" / "bin" / "python3").exists():
            return str(d)
    pytest.skip("no python test image (ninja builds tests/test-images/python)")


def call(c, expect=200, **body):
    body.setdefault("image", "busybox")
    r = c.post("/v1/functions/call", body)
    assert r.status == expect, r
    return r.json()


def test_argv_call_result_shape(api):
    res = call(api, argv=["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert res["exit_code"] == 3 and res["reason"] == "exited" and res["signal"] == 0
    assert res["stdout"] == "out\n" and res["stderr"] == "err\n"
    assert res["stdout_truncated"] is False and res["stderr_truncated"] is False
    assert res["duration_ms"] > 0 and res["cpu_ms"] >= 0 and res["memory_peak_bytes"] > 0


def test_files_stdin_env_and_base64(api):
    res = call(api, argv=["sh", "-c", "cat a/b.txt; cat; echo $K; cat bin.dat | od -An -tx1"],
               stdin="in\n", env={"K": "v"},
               files=[{"path": "a/b.txt", "content": "file\n"},
                      {"path": "bin.dat", "content": base64.b64encode(b"\x00\xff").decode(),
                       "encoding": "base64", "mode": 0o600}],
               encoding="base64")
    out = base64.b64decode(res["stdout"]).decode()
    assert out.split() == ["file", "in", "v", "00", "ff"]


def test_reasons(api):
    assert call(api, argv=["sleep", "10"], timeout=0.3)["reason"] == "timeout"
    assert call(api, argv=["wr-probe", "membomb", "200"], memory_mb=32)["reason"] == "oom"
    # a child taken by the OOM killer, the shell then fails: still oom
    res = call(api, argv=["sh", "-c", "wr-probe membomb 200; exit 3"], memory_mb=32)
    assert res["reason"] == "oom" and res["exit_code"] == 3, res
    res = call(api, argv=["sh", "-c", "wr-probe membomb 200; exit 0"], memory_mb=32)
    assert res["reason"] == "exited" and res["exit_code"] == 0, res
    res = call(api, argv=["sh", "-c", "while :; do :; done"], cpu_time=1, timeout=20)
    assert res["reason"] == "cpu_time"
    res = call(api, argv=["wr-probe", "yes"], output_cap=1000)
    assert res["stdout_truncated"] is True and len(res["stdout"]) == 1000
    res = call(api, argv=["no-such-cmd"])
    assert res["reason"] == "start_failed" and res["exit_code"] == 127


def test_python_call(api):
    img = pyimage()
    res = call(api, image=img, language="python", code="print(sum(range(1000)))")
    assert res["stdout"] == "499500\n" and res["exit_code"] == 0
    res = call(api, image=img, language="python", argv=["m.py", "x"],
               files=[{"path": "m.py", "content": "import sys; print(sys.argv[1])"}])
    assert res["stdout"] == "x\n"


def test_batch_in_order_and_parallel(api):
    calls = [{"image": "busybox", "argv": ["sh", "-c", f"sleep 0.{5 - i}; echo {i}"]}
             for i in range(5)]
    r = api.post("/v1/functions/batch", {"calls": calls, "parallel": 5})
    assert r.status == 200, r
    assert [x["stdout"] for x in r.json()["results"]] == [f"{i}\n" for i in range(5)]


def test_calls_of_two_tenants_never_share_a_uid(warrend):
    maps = []
    for t in ("alice", "bob"):
        c = warrend.client(t)
        maps.append(call(c, argv=["cat", "/proc/self/uid_map"])["stdout"].split())
        c.close()
    (_, a, n), (_, b, _) = [tuple(map(int, m)) for m in maps]
    assert a != b and (a + n <= b or b + n <= a)


def test_concurrent_calls_do_not_see_each_other(api, warrend):
    out = {}

    def slow():
        c = warrend.client()
        out["a"] = call(c, argv=["sh", "-c", "echo s > /tmp/x; sleep 2; cat /tmp/x"])
        c.close()

    t = threading.Thread(target=slow)
    t.start()
    res = call(api, argv=["sh", "-c", "ls /tmp; echo /proc/[0-9]*; kill -9 -1; echo ok"])
    t.join()
    assert res["stdout"] == "/proc/1\nok\n"
    assert out["a"]["stdout"] == "s\n"


@pytest.mark.parametrize("body,field", [
    ({}, "image"),
    ({"image": "busybox"}, "argv"),
    ({"image": "busybox", "argv": "echo"}, "argv"),
    ({"image": "busybox", "argv": ["true"], "bogus": 1}, "bogus"),
    ({"image": "busybox", "argv": ["true"], "timeout": -1}, "timeout"),
    ({"image": "busybox", "argv": ["true"], "timeout": 99999}, "timeout"),
    ({"image": "busybox", "argv": ["true"], "memory_mb": 1}, "memory_mb"),
    ({"image": "busybox", "code": "print(1)"}, "code"),
    ({"image": "busybox", "argv": ["true"], "language": "cobol"}, "language"),
    ({"image": "busybox", "argv": ["true"], "env": {"A=B": "c"}}, "env"),
    ({"image": "busybox", "argv": ["true"], "files": [{"path": "../x", "content": ""}]},
     "files"),
    ({"image": "busybox", "argv": ["true"], "files": [{"path": "x", "content": "!",
                                                         "encoding": "base64"}]},
     "files[0].content"),
    ({"image": "no-such-image", "argv": ["true"]}, "image"),
])
def test_bad_calls_are_400_naming_the_field(api, body, field):
    r = api.post("/v1/functions/call", body)
    assert r.status == 400, r
    assert r.error == ("invalid_argument", field)


def test_bad_batches(api, warrend):
    r = api.post("/v1/functions/batch", {"calls": []})
    assert r.status == 400 and r.error == ("invalid_argument", "calls")
    r = api.post("/v1/functions/batch", {"calls": [
        {"image": "busybox", "argv": ["true"]},
        {"image": "busybox", "argv": ["true"], "timeout": "x"}]})
    assert r.status == 400 and r.error == ("invalid_argument", "calls[1].timeout")
    c = warrend.client("alice")
    r = c.post("/v1/functions/call", {"image": "/", "argv": ["true"]})
    c.close()
    assert r.status == 400 and r.error == ("invalid_argument", "image")
