"""Shared by the lifecycle benchmarks (bench_lifecycle_density.py,
bench_lifecycle_harvest.py): a warrend of the benchmark's own, node memory
readings, and the sections of bench/results/lifecycle.md."""
import json
import os
import re
import resource
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from bench_lifecycle import Api, cgroup_dirs, remove_cgroups

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def meminfo():
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        k, v = line.split(":", 1)
        out[k] = int(v.split()[0]) * 1024
    return out


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def rss(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class Daemon:
    """warrend with temp state/run dirs and a cgroup base of its own;
    close() kills what is left and removes everything it made."""

    def __init__(self, build, name, extra=None, nofile=None):
        # nofile: raised up to the hard limit this process may give (no
        # CAP_SYS_RESOURCE in a container: the hard limit stays)
        if nofile:
            nofile = min(nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        imgs = subprocess.run([str(ROOT / "scripts/mkimage.sh"), str(build / "bench-images")],
                              check=True, capture_output=True, text=True).stdout.split()
        self.work = Path(tempfile.mkdtemp(prefix=f"warren-{name}."))
        self.work.chmod(0o755)
        self.base = f"warren-{name}-{os.getpid()}"
        self.sock = str(self.work / "run" / "warren.sock")
        cfg = {"socket": self.sock, "images": {"busybox": imgs[1]}, "log_level": "warning"}
        cfg.update(extra or {})
        (self.work / "warrend.json").write_text(json.dumps(cfg))
        env = dict(os.environ, WARREN_STATE_DIR=str(self.work / "state"),
                   WARREN_RUN_DIR=str(self.work / "run"), WARREN_CGROUP_BASE=self.base,
                   WARREN_INIT=str(build / "warren-init"))

        def limits():
            # this daemon's own fd limit only (each sandbox holds a few)
            if nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.log = open(self.work / "warrend.log", "wb")
        self.proc = subprocess.Popen([str(build / "warrend"), "--config",
                                      str(self.work / "warrend.json")], env=env,
                                     stdout=self.log, stderr=self.log, preexec_fn=limits)
        for _ in range(600):
            if self.proc.poll() is not None:
                raise RuntimeError("warrend exited: " + self.log_text())
            try:
                Api(self.sock).call("GET", "/v1/health")
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("warrend did not come up")

    def log_text(self):
        return (self.work / "warrend.log").read_text(errors="replace")[-3000:]

    def api(self):
        return Api(self.sock)

    def cg(self, ctrl):
        """The base directory in the hierarchy of ctrl ("" = unified)."""
        for d in cgroup_dirs(self.base):
            parts = d.parts
            name = parts[4] if len(parts) > 4 else ""
            if (ctrl == "" and name == "unified") or ctrl in name.split(","):
                return d
        return None

    def close(self):
        try:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=120)
        except Exception:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        remove_cgroups(self.base)
        subprocess.run(["rm", "-rf", "--one-file-system", str(self.work)], check=False)


def write_section(name, text):
    """Replace section `name` of bench/results/lifecycle.md (between
    <!-- name --> and <!-- /name -->), appending it when new."""
    p = RESULTS / "lifecycle.md"
    doc = p.read_text() if p.exists() else "# Lifecycle benchmarks\n"
    block = f"<!-- {name} -->\n{text.rstrip()}\n<!-- /{name} -->\n"
    pat = re.compile(rf"<!-- {name} -->\n.*?<!-- /{name} -->\n", re.S)
    doc = pat.sub(lambda _: block, doc) if pat.search(doc) else doc.rstrip() + "\n\n" + block
    p.write_text(doc)
