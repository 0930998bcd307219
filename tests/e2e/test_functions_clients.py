"""The function tier through its clients: `warren call` (CLI, libwarren) and
warren.functions (Python SDK, sync and async)."""
import asyncio
import json
import sys
from pathlib import Path

import pytest

from test_cli_client import Cli
from test_functions import pyimage

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk" / "python"))
import warren  # noqa: E402


@pytest.fixture
def cli(warrend):
    return Cli(warrend)


def test_cli_call_argv_status_and_output(cli, tmp_path):
    p = cli("call", "busybox", "--", "sh", "-c", "echo out; echo err >&2; exit 5")
    assert (p.returncode, p.out, p.err) == (5, "out\n", "err\n")
    src = tmp_path / "data.txt"
    src.write_text("from a file\n")
    p = cli("call", "-f", f"{src}:in/d.txt", "-e", "K=v", "-i", "busybox", "--",
            "sh", "-c", "cat in/d.txt; cat; echo $K", input=b"stdin\n", check=0)
    assert p.out == "from a file\nstdin\nv\n"
    p = cli("call", "--timeout", "300ms", "busybox", "sleep", "5")
    assert p.returncode == 124 and "timed out" in p.err
    p = cli("call", "--json", "busybox", "echo", "hi", check=0)
    assert json.loads(p.out)["stdout"] == "hi\n"


def test_cli_call_python(cli):
    p = cli("call", "--python", "-c", "print(6 * 7)", pyimage(), check=0)
    assert p.out == "42\n"


def test_cli_call_bad_usage_is_one_line(cli):
    for args in (["call"], ["call", "busybox"], ["call", "-c", "x", "busybox"],
                 ["call", "--memory", "lots", "busybox", "true"],
                 ["call", "--timeout", "-1", "busybox", "true"]):
        p = cli(*args)
        assert p.returncode == 125 and p.err.count("\n") == 1, (args, p.err)
    p = cli("call", "no-such-image", "true")
    assert p.returncode == 125 and "image" in p.err and p.err.count("\n") == 1


def test_sdk_call_batch_and_async(conn):
    r = warren.functions.call("busybox", ["sh", "-c", "cat f; echo $A"], env={"A": "1"},
                              files={"f": b"\x00bin\n"}, **conn)
    assert r.ok and r.stdout == "\x00bin\n1\n"
    r = warren.functions.call("busybox", ["sleep", "5"], timeout=0.3, **conn)
    assert r.reason == "timeout" and not r.ok
    with pytest.raises(warren.CommandExitError):
        warren.functions.call("busybox", ["false"], check=True, **conn)
    with pytest.raises(warren.InvalidArgumentError) as e:
        warren.functions.call("busybox", ["true"], memory_mb=1, **conn)
    assert e.value.field == "memory_mb"
    rs = warren.functions.batch([{"image": "busybox", "argv": ["echo", str(i)]}
                                 for i in range(4)], parallel=4, **conn)
    assert [x.stdout for x in rs] == ["0\n", "1\n", "2\n", "3\n"]
    py = pyimage()

    async def main():
        one = await warren.functions.acall(py, code="print('async')", language="python",
                                           **conn)
        many = await warren.functions.abatch(
            [{"image": py, "language": "python", "code": f"print({i})"} for i in range(3)],
            **conn)
        return one, many

    one, many = asyncio.run(main())
    assert one.stdout == "async\n"
    assert [x.stdout for x in many] == ["0\n", "1\n", "2\n"]
