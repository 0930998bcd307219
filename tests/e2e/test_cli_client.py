"""The warren CLI's daemon verbs (create, exec, cp, ls, inspect, set-timeout,
events, rm) driven as a user would, against the real warrend of conftest.py.
Through them this also covers libwarren, which the CLI is built on."""
import json
import os
import subprocess
import time
from datetime import datetime

import pytest

from conftest import BUILD


def ts(s):
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ")


class Cli:
    def __init__(self, daemon):
        self.daemon = daemon
        self.exe = str(BUILD / "warren")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("WARREN_")}
        self.env["WARREN_SOCKET"] = str(daemon.sock)
        self.env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=1"

    def __call__(self, *args, input=None, check=None, timeout=120, env=None):
        p = subprocess.run([self.exe, *args], input=input, capture_output=True,
                           timeout=timeout, env=env or self.env)
        p.out = p.stdout.decode(errors="replace")
        p.err = p.stderr.decode(errors="replace")
        if check is not None:
            assert p.returncode == check, (p.returncode, p.out, p.err)
        return p

    def json(self, *args, **kw):
        p = self(*args, "--json", check=0, **kw)
        return json.loads(p.out)


@pytest.fixture
def cli(warrend):
    return Cli(warrend)


@pytest.fixture
def sb(cli):
    sid = cli("create", "--image", "busybox", "--timeout", "5m", check=0).out.strip()
    yield sid
    cli("rm", "-f", sid)


def one_error_line(p, *needles):
    """warren failed: 125, exactly one line on stderr containing needles."""
    assert p.returncode == 125, (p.returncode, p.out, p.err)
    lines = p.err.strip().split("\n")
    assert len(lines) == 1, p.err
    for n in needles:
        assert n in lines[0], (n, p.err)
    return lines[0]


# ---------------------------------------------------------------- lifecycle

def test_create_inspect_ls_rm(cli, api):
    sb = cli.json("create", "--image", "busybox", "--memory", "256M", "--cpu", "0.5",
                  "--pids", "64", "--label", "job=cli-e2e", "--label", "task=1",
                  "--env", "GREETING=hi", "--workdir", "/tmp", "--timeout", "10m")
    sid = sb["id"]
    assert sb["state"] == "running"
    assert (sb["memory_mb"], sb["cpu"], sb["pids"]) == (256, 0.5, 64)
    assert sb["labels"] == {"job": "cli-e2e", "task": "1"}
    # inspect --json is the API's object; the human form names the fields
    assert cli.json("inspect", sid) == api.get(f"/v1/sandboxes/{sid}").json()
    human = cli("inspect", sid, check=0).out
    assert f"id:           {sid}" in human and "job=cli-e2e" in human
    # the sandbox's spec is in force for commands run through the CLI
    p = cli("exec", sid, "--", "sh", "-c", "pwd; echo $GREETING", check=0)
    assert p.out == "/tmp\nhi\n"
    # ls: running sandboxes, filtered by label; table and JSON
    listed = cli.json("ls", "--label", "job=cli-e2e")
    assert [s["id"] for s in listed] == [sid]
    assert cli.json("ls", "--label", "job=nope") == []
    table = cli("ls", check=0).out.splitlines()
    assert table[0].split()[:3] == ["ID", "STATE", "IMAGE"]
    assert any(line.startswith(sid) and " running " in line for line in table[1:])
    # rm kills; the record stays (ls -a, state killed); a second rm is a conflict
    assert cli("rm", sid, check=0).out.strip() == sid
    assert cli.json("inspect", sid)["state"] == "killed"
    assert sid not in [s["id"] for s in cli.json("ls")]
    assert sid in [s["id"] for s in cli.json("ls", "-a")]
    one_error_line(cli("rm", sid), f"kill sandbox {sid}")
    cli("rm", "-f", sid, check=0)


def test_set_timeout_and_events(cli, sb):
    before = cli.json("inspect", sb)
    after = cli.json("set-timeout", sb, "2h")
    assert after["id"] == sb
    life = (ts(after["expires_at"]) - ts(before["created_at"])).total_seconds()
    assert 7200 <= life < 7200 + 60, life
    assert "expires at" in cli("set-timeout", sb, "600", check=0).out
    cli("exec", sb, "--", "true", check=0)
    events = cli.json("events", sb)
    types = [e["type"] for e in events]
    assert types[0] == "created", types
    assert "command_started" in types and "command_finished" in types
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs)
    later = cli.json("events", sb, "--since", str(seqs[0]))
    assert [e["seq"] for e in later] == seqs[1:]
    table = cli("events", sb, check=0).out.splitlines()
    assert table[0].split() == ["SEQ", "TIME", "TYPE", "DETAIL"]
    assert len(table) == len(events) + 1


# ---------------------------------------------------------------- exec

def test_exec_status_and_output(cli, sb):
    p = cli("exec", sb, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert (p.returncode, p.out, p.err) == (7, "out\n", "err\n")
    # killed by a signal: 128+N, as a shell reports it
    assert cli("exec", sb, "--", "sh", "-c", "kill -KILL $$").returncode == 137
    assert cli("exec", sb, "--", "nonexistent-binary").returncode == 127
    # bytes pass through exactly (base64 on the wire), NUL and invalid UTF-8 too
    p = cli("exec", sb, "--", "printf", "a\\000b\\377c")
    assert p.returncode == 0 and p.stdout == b"a\x00b\xffc"
    # stdin, environment, working directory, user
    p = cli("exec", "-i", "-e", "K=V", "-w", "/etc", "-u", "1000", sb, "--",
            "sh", "-c", "cat; echo $K; pwd; id -u", input=b"from stdin\n", check=0)
    assert p.out == "from stdin\nV\n/etc\n1000\n"
    # --json: the result object, and still the command's status
    p = cli("exec", "--json", sb, "--", "sh", "-c", "echo j; exit 3")
    assert p.returncode == 3
    res = json.loads(p.out)
    assert (res["exit_code"], res["reason"], res["stdout"]) == (3, "exited", "j\n")


def test_exec_timeout(cli, sb):
    t0 = time.time()
    p = cli("exec", "--timeout", "1s", sb, "--", "sleep", "30")
    assert p.returncode == 124, (p.returncode, p.err)
    assert "timed out" in p.err
    assert time.time() - t0 < 20


def test_exec_streams(cli, sb):
    """Output reaches the terminal while the command still runs."""
    proc = subprocess.Popen([cli.exe, "exec", sb, "--", "sh", "-c",
                             "echo first; sleep 3; echo second"],
                            stdout=subprocess.PIPE, env=cli.env)
    t0 = time.time()
    first = proc.stdout.readline()
    t_first = time.time() - t0
    rest = proc.stdout.read()
    t_end = time.time() - t0
    assert proc.wait(timeout=30) == 0
    assert (first, rest) == (b"first\n", b"second\n")
    assert t_first < t_end - 2, (t_first, t_end)


# ---------------------------------------------------------------- cp

def test_cp_files_both_ways(cli, sb, tmp_path):
    data = bytes(range(256)) * 4096 + b"\x00end"
    src = tmp_path / "blob.bin"
    src.write_bytes(data)
    os.chmod(src, 0o640)
    cli("cp", str(src), f"{sb}:/tmp/blob.bin", check=0)
    p = cli("exec", sb, "--", "sh", "-c", "wc -c < /tmp/blob.bin; stat -c %a /tmp/blob.bin",
            check=0)
    assert p.out.split() == [str(len(data)), "640"]
    back = tmp_path / "back.bin"
    cli("cp", f"{sb}:/tmp/blob.bin", str(back), check=0)
    assert back.read_bytes() == data
    # into an existing directory: keeps the name, both ways
    cli("cp", str(src), f"{sb}:/root", check=0)
    assert cli("exec", sb, "--", "cmp", "/tmp/blob.bin", "/root/blob.bin").returncode == 0
    d = tmp_path / "down"
    d.mkdir()
    cli("cp", f"{sb}:/root/blob.bin", str(d), check=0)
    assert (d / "blob.bin").read_bytes() == data
    # standard input and output
    cli("cp", "-", f"{sb}:/tmp/from-stdin", input=b"piped\n", check=0)
    assert cli("cp", f"{sb}:/tmp/from-stdin", "-", check=0).stdout == b"piped\n"


def test_cp_directories_both_ways(cli, sb, tmp_path):
    tree = tmp_path / "proj"
    (tree / "src" / "deep").mkdir(parents=True)
    (tree / "src" / "main.py").write_text("print('hi')\n")
    (tree / "src" / "deep" / "x.bin").write_bytes(b"\x01\x02" * 50000)
    (tree / "empty").mkdir()
    os.symlink("src/main.py", tree / "link")
    cli("cp", str(tree), f"{sb}:/work", check=0)
    p = cli("exec", sb, "--", "sh", "-c",
            "cd /work && find . | sort && readlink link && cat src/main.py", check=0)
    assert p.out.split("\n")[:-1] == [
        ".", "./empty", "./link", "./src", "./src/deep", "./src/deep/x.bin",
        "./src/main.py", "src/main.py", "print('hi')"]
    # into an existing directory: the tree keeps its name
    cli("cp", str(tree), f"{sb}:/tmp", check=0)
    assert cli("exec", sb, "--", "test", "-f", "/tmp/proj/src/main.py").returncode == 0
    # ls of a sandbox directory
    names = [e["name"] for e in cli.json("ls", f"{sb}:/work")]
    assert sorted(names) == ["empty", "link", "src"]
    long = cli("ls", f"{sb}:/work", check=0).out
    assert "link -> src/main.py" in long
    deep = [e["path"] for e in cli.json("ls", "-d", "3", f"{sb}:/work")]
    assert "/work/src/deep/x.bin" in deep
    # download a directory made inside
    cli("exec", sb, "--", "sh", "-c",
        "mkdir -p /out/a && echo one > /out/a/1 && echo two > /out/2", check=0)
    dest = tmp_path / "got"
    cli("cp", f"{sb}:/out", str(dest), check=0)
    assert (dest / "a" / "1").read_text() == "one\n"
    assert (dest / "2").read_text() == "two\n"
    cli("cp", f"{sb}:/out", str(dest), check=0)  # dest exists: lands in dest/out
    assert (dest / "out" / "2").read_text() == "two\n"
    # rm SB:PATH removes files
    one_error_line(cli("rm", f"{sb}:/out"), "/out")
    cli("rm", "-r", f"{sb}:/out", check=0)
    assert cli("exec", sb, "--", "test", "-e", "/out").returncode == 1


def test_cp_errors(cli, sb, tmp_path):
    one_error_line(cli("cp", f"{sb}:/no/such/file", str(tmp_path / "x")),
                   "/no/such/file", "No such file")
    assert not (tmp_path / "x").exists()
    one_error_line(cli("cp", str(tmp_path / "missing"), f"{sb}:/tmp/x"),
                   str(tmp_path / "missing"), "No such file")
    one_error_line(cli("cp", "a", "b"), "SANDBOX:PATH")


# ---------------------------------------------------------------- errors

@pytest.mark.parametrize("args,needle", [
    (["create", "--image", "busybox", "--bogus"], "--bogus"),
    (["create", "--image", "busybox", "--memory"], "--memory"),
    (["create", "--image", "busybox", "--memory", "lots"], "--memory"),
    (["create", "--image", "busybox", "--label", "novalue"], "--label"),
    (["create", "--image", "busybox", "--timeout", "soon"], "--timeout"),
    (["create"], "--image"),
    (["exec", "--timeout", "x", "sb", "--", "true"], "--timeout"),
    (["exec", "-u", "root", "sb", "--", "true"], "--user"),
    (["exec", "sb"], "no command"),
    (["ls", "--depth", "99", "sb:/"], "--depth"),
    (["events", "--limit", "0", "sb"], "--limit"),
    (["set-timeout", "sb", "never"], "DUR"),
    (["rm"], "nothing to remove"),
    (["inspect", "--url", "http://127.0.0.1:1", "sb"], "--token"),
    (["inspect", "--url", "http://127.0.0.1:1", "--socket", "/x", "sb"], "--url"),
    (["frobnicate"], "unknown command"),
])
def test_bad_flags(cli, args, needle):
    line = one_error_line(cli(*args), needle)
    assert line.startswith("warren: ")


def test_api_errors(cli, warrend, sb):
    # unknown sandbox: the API's message, status 125
    unknown = "0123456789abcdef"
    for args in (["inspect", unknown], ["rm", unknown], ["events", unknown],
                 ["set-timeout", unknown, "60"], ["exec", unknown, "--", "true"],
                 ["cp", f"{unknown}:/etc/hostname", "-"], ["ls", f"{unknown}:/"]):
        one_error_line(cli(*args), f"sandbox {unknown} not found")
    # an API validation error names the field
    line = one_error_line(cli("create", "--image", "busybox", "--memory", "4M"), "memory_mb")
    assert "create sandbox" in line
    one_error_line(cli("create", "--image", "no-such-image"), "image")
    # a daemon that is not there
    env = dict(cli.env, WARREN_SOCKET=str(warrend.sock) + ".nope")
    one_error_line(cli("ls", env=env), ".nope", "No such file or directory")


def test_tcp_and_tenancy(cli, warrend, sb):
    url = f"http://127.0.0.1:{warrend.port}"
    alice = warrend.tokens["alice"]
    # over TCP with a token, alice does not see the default tenant's sandbox
    one_error_line(cli("inspect", "--url", url, "--token", alice, sb), "not found")
    mine = cli("create", "--url", url, "--token", alice, "--image", "busybox",
               check=0).out.strip()
    env = dict(cli.env, WARREN_URL=url, WARREN_TOKEN=alice)
    assert cli("exec", mine, "--", "echo", "tcp", env=env, check=0).out == "tcp\n"
    assert [s["id"] for s in json.loads(cli("ls", "--json", env=env, check=0).out)] == [mine]
    one_error_line(cli("ls", "--url", url, "--token", "wrong"), "a valid bearer token is required")
    cli("rm", mine, env=env, check=0)
