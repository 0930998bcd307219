"""The red-team suite's harness: one real warrend (Daemon of
tests/e2e/harness.py, started with canaries planted), the attacker tenant "alice" and the
victim tenant "bob" over TCP with bearer tokens, and the result table.

Every probe runs through the public API (the Python SDK in sdk/python):
container sandboxes (commands as uid 0 and as uid 1000) and function calls
(always uid 1000: the function API has no user field, so its uid-0 column
is n/a). The probes are the static wr-probe binary baked into the test
image, so no probe depends on a tool inside the image.

Canaries: secret tokens planted in a host log file (/var/log), in warrend's
state dir, config and environment, in the victim sandbox (a file, an env
var, a process's argv) and in a grader directory on the host. Every output
of every probe is checked for them as it arrives, and the hunting probes
read every file a sandbox can see looking for them.
"""
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "sdk" / "python"))
sys.path.insert(0, str(HERE))

import warren  # noqa: E402

# the e2e suite's harness (Daemon) and networked node (netnode.py)
sys.path.append(str(ROOT / "tests" / "e2e"))
import harness  # noqa: E402

BUILD = harness.BUILD

from catalog import COLUMNS, KNOWN_GAPS, RESULTS, ROWS, gap  # noqa: E402
from redlib import EVENT_GAPS_SEEN, EVENTS_UNCHECKED, ctx  # noqa: E402,F401

PID = os.getpid()


def enc(token):
    """A token as wr-probe takes it: XORed with 0x5a, hex."""
    return bytes(b ^ 0x5a for b in token.encode()).hex()


def sha256_file(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_digest(d):
    """Digest of a directory tree: names, modes, link targets and contents."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(d):
        dirnames.sort()
        for name in sorted(filenames + dirnames):
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            h.update(f"{os.path.relpath(p, d)}:{st.st_mode:o}".encode())
            if os.path.islink(p):
                h.update(os.readlink(p).encode())
            elif os.path.isfile(p):
                h.update(sha256_file(p).encode())
    return h.hexdigest()


def kernel_log(after_seq=-1):
    """(last sequence number, lines that say the kernel is in trouble) of
    the host kernel log records after `after_seq` (/dev/kmsg: the sequence
    numbers survive the ring buffer wrapping, unlike line counts)."""
    # (not "Call Trace": every OOM kill of a probe prints one)
    pat = re.compile(r"(Oops|BUG:|[Kk]ernel panic|general protection fault|WARNING: CPU|"
                     r"soft lockup|hard LOCKUP|self-detected stall|Bad page)")
    last, bad = after_seq, []
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                rec = os.read(fd, 8192).decode(errors="replace")
            except BlockingIOError:
                break
            except BrokenPipeError:  # overwritten while we read: go on
                continue
            head, _, msg = rec.partition(";")
            seq = int(head.split(",")[1])
            last = max(last, seq)
            # "traps: prog[pid] general protection fault ..." is a user
            # process's fault the kernel handled (other suites' tests too)
            if seq > after_seq and pat.search(msg) and not msg.startswith("traps:"):
                bad.append(msg.strip())
    finally:
        os.close(fd)
    return last, bad


def host_addresses():
    """The host's own IPv4/IPv6 addresses (not loopback)."""
    p = subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True)
    v4, v6 = [], []
    try:
        for link in json.loads(p.stdout or "[]"):
            for a in link.get("addr_info", []):
                ip = a.get("local", "")
                if a.get("family") == "inet" and not ip.startswith("127."):
                    v4.append(ip)
                elif a.get("family") == "inet6" and ip != "::1" and a.get("scope") == "global":
                    v6.append(ip)
    except ValueError:
        pass
    return v4[:8], v6[:4]


def host_abstract_names(limit=64):
    names = []
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        f = line.split()
        if len(f) >= 8 and f[7].startswith("@"):
            n = f[7][1:]
            if n not in names and len(n) < 100:
                names.append(n)
    return names[:limit]


class Session:
    """Everything the probes share: the daemon, tenants, canaries, host facts."""

    def __init__(self, daemon, canaries, grader, logfile):
        self.d = daemon
        self.canaries = canaries  # name -> token
        self.grader = grader
        self.logfile = logfile
        self.url = f"http://127.0.0.1:{daemon.port}"
        self.alice = {"base_url": self.url, "api_key": daemon.tokens["alice"]}
        self.bob = {"base_url": self.url, "api_key": daemon.tokens["bob"]}
        self.v4, self.v6 = host_addresses()
        self.abstract = host_abstract_names()
        self.victim = None
        self.victim_pid_token = None
        self.outputs_checked = 0
        self.image_dir = Path(daemon.images) / "busybox"
        self.image_erofs = Path(daemon.images) / "busybox.erofs"

    # secrets the sandbox must never see: canaries, API tokens, daemon paths
    def secrets(self):
        s = dict(self.canaries)
        s["alice-token"] = self.d.tokens["alice"]
        s["bob-token"] = self.d.tokens["bob"]
        s["socket-path"] = str(self.d.sock)
        s["state-dir"] = str(self.d.state)
        # host paths: the daemon's root, the image's and the build's
        s["daemon-root"] = str(self.d.root)
        s["image-path"] = str(self.image_dir)
        s["build-dir"] = str(BUILD)
        return s

    def check_output(self, what, *texts):
        """No secret in any output: fail at once, naming the canary."""
        self.outputs_checked += 1
        for t in texts:
            if not t:
                continue
            if isinstance(t, bytes):
                t = t.decode(errors="replace")
            for name, tok in self.secrets().items():
                assert tok not in t, f"{what}: output holds the {name} canary"

    def daemon_rss_kib(self):
        for line in Path(f"/proc/{self.d.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def disk_bytes(self, path):
        total = 0
        for dirpath, _, files in os.walk(path):
            for f in files:
                try:
                    total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
                except OSError:
                    pass
        return total


@pytest.fixture(scope="session")
def rt(tmp_path_factory):
    for f in ("warrend", "warren-init", "tests/wr-probe", "tests/guest/vmlinux",
              "tests/guest/initramfs.cpio", "tests/vm/debian-vm.raw"):
        assert (BUILD / f).exists(), f"{BUILD / f} missing: run ninja -C {BUILD} first"
    tag = f"wr-rt-{PID}-{uuid.uuid4().hex[:6]}"
    canaries = {k: f"CANARY-{k}-{uuid.uuid4().hex}" for k in
                ("host-log", "state-dir", "config", "daemon-env", "victim-file",
                 "victim-env", "victim-argv", "grader")}
    # host log and grader directory, removed at the end
    logfile = Path(f"/var/log/{tag}.log")
    logfile.write_text(f"job 7 finished, token={canaries['host-log']}\n")
    grader = Path(f"/tmp/{tag}-grader")
    grader.mkdir(mode=0o700)
    (grader / "expected_answer.txt").write_text(canaries["grader"] + "\n")
    # The image the daemon will use (the e2e harness takes build/test-images
    # when another suite made it) must hold this build's wr-probe: refresh
    # it (mkimage.sh is a no-op when its stamp is newer than the probe).
    for imgs in (BUILD / "test-images", BUILD / "tests" / "test-images"):
        if (imgs / "busybox").is_dir():
            subprocess.run([str(ROOT / "scripts/mkimage.sh"), str(imgs), "--add",
                            f"{BUILD / 'tests/wr-probe'}:/usr/bin/wr-probe"],
                           check=True, stdout=subprocess.DEVNULL)
    root = tmp_path_factory.mktemp("redteam")
    d = harness.Daemon(BUILD, root, "rt", extra={"images": {}})
    cfg = json.loads(d.config.read_text())
    # Admission by node pressure refuses creates on a machine other suites
    # load (429): the suite tests isolation, not admission (tests/e2e does)
    cfg["admission"] = {"cpu_pressure_max": 1, "memory_pressure_max": 1}
    # the microVM tier (TCG here): the guest ninja builds with the tests
    guest = BUILD / "tests" / "guest"
    cfg["microvm"] = {"kernel": str(guest / "vmlinux"), "initrd": str(guest / "initramfs.cpio")}
    # the VM tier (TCG here): the Debian test disk ninja builds with the tests
    cfg["vm"] = {"accel": "tcg", "boot_timeout": 900, "shutdown_timeout": 30}
    cfg["images"] = {"busybox": str(d.images / "busybox"),
                     "busybox-erofs": str(d.images / "busybox.erofs"),
                     "debian-vm": str(BUILD / "tests" / "vm" / "debian-vm.raw"),
                     f"cfg-{canaries['config'].lower()}": str(d.images / "busybox")}
    d.config.write_text(json.dumps(cfg, indent=1))
    d.env["WARREN_RT_CANARY"] = canaries["daemon-env"]
    s = None
    try:
        d.start()
        d.state.mkdir(parents=True, exist_ok=True)
        (d.state / f"{tag}-notes.txt").write_text(canaries["state-dir"] + "\n")
        s = Session(d, canaries, grader, logfile)
        s.digests = {
            "image-tree": tree_digest(s.image_dir),
            "image-erofs": sha256_file(s.image_erofs),
            **{b: sha256_file(BUILD / b) for b in ("warrend", "warren-init", "warren-zygote")},
        }
        s.kmsg_seq0, _ = kernel_log()
        s.rss0 = s.daemon_rss_kib()
        # the victim: bob's sandbox with a secret file, env and process argv
        v = warren.Sandbox.create(image="busybox", timeout=7200,
                                  envs={"VICTIM_SECRET": canaries["victim-env"]}, **s.bob)
        v.files.write("/root/secret.txt", canaries["victim-file"] + "\n")
        v.commands.run(["sh", "-c", f"exec sleep 7200 # {canaries['victim-argv']}"],
                       background=True)
        s.victim = v
        yield s
    finally:
        try:
            if s is not None and s.victim is not None:
                s.victim.kill()
        except Exception:
            pass
        problems = d.finish()
        logfile.unlink(missing_ok=True)
        subprocess.run(["rm", "-rf", str(grader)], check=False)
        assert not problems, "\n".join(problems) + "\n" + d.log_text()


# ---------------------------------------------------------------- the table

def _key(item):
    cs = getattr(item, "callspec", None)
    return cs.params.get("rt_key") if cs is not None else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    key = _key(item)
    if key is None:
        return
    reason = gap(*key)
    if rep.when == "call" and reason is not None:
        if rep.failed:
            # a listed gap that still fails: reported, not counted
            rep.outcome = "skipped"
            msg = str(call.excinfo.value).splitlines()[0][:200] if call.excinfo else ""
            rep.longrepr = (str(item.fspath), 0, f"KNOWN-GAP: {reason}: {msg}")
            RESULTS[key] = "KNOWN-GAP"
            return
        if rep.passed:
            rep.outcome = "failed"
            rep.longrepr = f"{key} is listed in KNOWN_GAPS but passes: remove it"
            RESULTS[key] = "FAIL"
            return
    if rep.when == "setup" and rep.skipped:
        RESULTS.setdefault(key, "n/a")
    elif rep.failed:
        RESULTS[key] = "FAIL"
    elif rep.when == "call" and rep.passed:
        RESULTS.setdefault(key, "PASS")


def pytest_terminal_summary(terminalreporter):
    if not RESULTS:
        return
    tr = terminalreporter
    cols = list(COLUMNS)
    w = max(len(r) for r in ROWS) + 2
    tr.write_line("")
    tr.write_line("red-team results (probe x tier/uid)")
    tr.write_line("".ljust(w) + "".join(c.ljust(18) for c in cols))
    counts = {}
    for row in ROWS:
        cells = []
        for c in cols:
            v = RESULTS.get((row, c), "-")
            if v == "PASS" and (row, c) in EVENTS_UNCHECKED:
                v = "PASS*"
            elif v == "PASS" and (row, c) in EVENT_GAPS_SEEN:
                v = "KNOWN-GAP"
            counts[v] = counts.get(v, 0) + 1
            cells.append(v.ljust(18))
        if any(x.strip() != "-" for x in cells):
            tr.write_line(row.ljust(w) + "".join(cells))
    tr.write_line("  ".join(f"{k}: {v}" for k, v in sorted(counts.items()) if k != "-"))
    if EVENTS_UNCHECKED:
        tr.write_line("PASS*: outcome checked, refusal event NOT checked: this warrend has no "
                      "GET /v1/events (refusal audit, issue 7, branch audit, not merged)")
    for (row, col), reason in sorted(KNOWN_GAPS.items()):
        tr.write_line(f"KNOWN-GAP {row} {col}: {reason}")


# ---------------------------------------------------------------- VM guests

def qemu_pid(sid):
    """The QEMU process whose command line names sandbox `sid`."""
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            cmd = open(f"/proc/{p}/cmdline", "rb").read()
        except OSError:
            continue
        if sid.encode() in cmd and b"qemu-system" in cmd:
            return int(p)
    return None


def cgroup_limits(pid):
    """QEMU's cgroup bounds, read from the host: memory, pids, CPU quota of
    the VM's cgroup vm-<id> (QEMU lives in its leaf "q"), and usage."""
    out = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        vm = Path(path).parent  # the leaf "q" -> vm-<id>
        if ctrls == "memory":
            d = Path("/sys/fs/cgroup/memory") / str(vm).lstrip("/")
            out["memory.limit"] = int((d / "memory.limit_in_bytes").read_text())
            out["memory.max_usage"] = int((d / "memory.max_usage_in_bytes").read_text())
        elif ctrls == "pids":
            d = Path("/sys/fs/cgroup/pids") / str(vm).lstrip("/")
            out["pids.max"] = (d / "pids.max").read_text().strip()
            out["pids.peak"] = len((Path("/sys/fs/cgroup/pids") / path.lstrip("/") /
                                    "tasks").read_text().split())
        elif "cpu" in ctrls.split(","):
            d = Path("/sys/fs/cgroup") / ctrls / str(vm).lstrip("/")
            out["cpu.quota"] = int((d / "cpu.cfs_quota_us").read_text())
            out["cpu.period"] = int((d / "cpu.cfs_period_us").read_text())
    return out


class Guest:
    """One booted VM sandbox of a tier, shared by the probes of a session:
    boots are few (TCG is slow). What the host must keep is recorded when
    it boots and checked after every probe (host_check)."""

    def __init__(self, rt, tier):
        self.rt = rt
        self.tier = tier
        t0 = time.time()
        if tier == "microvm":
            # the guest mounts the store's EROFS image (wr-probe baked in)
            self.sb = warren.Sandbox.create(image="busybox-erofs", tier="microvm",
                                            memory_mb=256, disk_mb=64, timeout=7200,
                                            request_timeout=600, **rt.alice)
            self.base = rt.image_erofs
        else:
            # a stock Debian disk: wr-probe goes in through the files API
            # (qemu-guest-agent), as a user would bring a tool
            self.sb = warren.Sandbox.create(image="debian-vm", tier="vm", memory_mb=512,
                                            timeout=7200, request_timeout=1200, **rt.alice)
            self.sb.files.write("/usr/local/bin/wr-probe",
                                (BUILD / "tests" / "wr-probe").read_bytes(), mode=0o755)
            self.base = BUILD / "tests" / "vm" / "debian-vm.raw"
        self.boot_s = time.time() - t0
        self.dead = False
        self.nic = None  # has_nic(), once asked
        self.pid = qemu_pid(self.sb.sandbox_id)
        assert self.pid, f"no QEMU for {self.sb.sandbox_id}"
        self.limits = cgroup_limits(self.pid)
        assert self.limits.get("memory.limit") and self.limits.get("pids.max"), self.limits
        self.base_digest = sha256_file(self.base)
        r = self.sb.commands.run(["wr-probe", "exit", "0"], timeout=120, request_timeout=300)
        assert r.exit_code == 0, f"wr-probe does not run in the {tier} guest: {r}"

    def has_nic(self):
        """A network device besides loopback in the guest (the vm tier's
        network is being added by another branch: until it lands, none)."""
        r = self.sb.commands.run(["wr-probe", "ls", "/sys/class/net"], timeout=60)
        names = r.stdout.split("names=")[-1].split()[0].split(",") if "names=" in r.stdout \
            else []
        return [n for n in names if n and n != "lo"]

    def host_check(self, what=""):
        """The host-side invariants: the same QEMU still runs in its cgroup
        with the bounds it was given (memory, pids, CPU), under them; the
        daemon answers; the image in the store is unchanged (digest checked
        by the probes that write, and at the end)."""
        if self.dead:
            return
        assert self.pid and os.path.exists(f"/proc/{self.pid}"), f"{what}: QEMU gone"
        assert qemu_pid(self.sb.sandbox_id) == self.pid, f"{what}: another QEMU"
        now = cgroup_limits(self.pid)
        for k in ("memory.limit", "pids.max", "cpu.quota", "cpu.period"):
            assert now.get(k) == self.limits.get(k), (what, k, now, self.limits)
        assert now["memory.max_usage"] <= now["memory.limit"], (what, now)
        assert now["pids.max"] == "max" or now["pids.peak"] <= int(now["pids.max"]), now
        assert self.rt.d.proc.poll() is None, f"{what}: warrend died"
        assert warren.Sandbox.health(**self.rt.alice) is not None

    def kill(self):
        if not self.dead:
            self.dead = True
            try:
                self.sb.kill()
            except warren.exceptions.WarrenError:
                pass


class Guests:
    def __init__(self, rt):
        self.rt = rt
        self.made = {}

    def get(self, tier):
        if tier not in self.made:
            self.made[tier] = Guest(self.rt, tier)
        return self.made[tier]

    def close(self):
        for g in self.made.values():
            g.kill()


@pytest.fixture(scope="session")
def guests(rt):
    g = Guests(rt)
    try:
        yield g
    finally:
        g.close()
