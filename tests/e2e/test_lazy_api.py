"""On-demand loading through warrend (issue 4): an image pulled with
"lazy": true runs before its blob is local. The store's acquire returns the
warren-lazyfs file (wr_lazy_attach in the daemon's store options), the
container tier mounts it like any EROFS file, and lazyfs outlives a restart
of warrend."""
import os
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from lazy_util import CountingProxy, lazytool  # noqa: E402
from registry_util import Registry  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/docker-registry"),
                                reason="docker-registry not installed (scripts/deps.sh)")


def q(s):
    return urllib.parse.quote(s, safe="")


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    r = Registry(tmp_path_factory.mktemp("registry"))
    yield r
    r.stop()


def test_lazy_pull_runs_before_the_blob_is_local(api, warrend, registry, fresh_daemon, build,
                                                 tmp_path):
    # A bigger image than busybox: busybox plus 40 MiB the command never reads.
    root = tmp_path / "rootfs"
    subprocess.run(["cp", "-a", str(warrend.images / "busybox"), str(root)], check=True)
    (root / "ballast").mkdir()
    for i in range(40):
        (root / "ballast" / f"b{i}").write_bytes(os.urandom(1 << 20))
    r = api.post("/v1/images/import", {"path": str(root), "ref": "lz:1"})
    assert r.status == 201, r
    img = r.json()
    remote = f"{registry.host}/team/lz:1"
    assert api.post(f"/v1/images/{q('lz:1')}/push", {"to": remote}).status == 200

    proxy = CountingProxy(registry.port)
    node = fresh_daemon().start()
    c = node.client()
    store, run = node.state / "images", node.run
    try:
        g = c.post("/v1/images/pull", {"ref": f"{proxy.host}/team/lz:1", "as": "lz:1",
                                       "lazy": True})
        assert g.status == 200, g
        assert g.json()["complete"] is False
        proxy.reset()
        sid = c.create(image="lz:1")
        out = c.run(sid, ["cat", "/etc/passwd"])
        assert out["exit_code"] == 0 and "root" in out["stdout"], out
        time.sleep(0.5)  # read-ahead fetches in flight land
        _, st, _, _ = lazytool(build, store, run, "stats")
        fetched = proxy.down_bytes
        assert fetched < 0.25 * img["size"], (fetched, img["size"])
        assert int(st["blobs"]) == 1 and int(st["bytes_fetched"]) <= fetched
        # warrend restarts; lazyfs and the running sandbox's image stay.
        pid = lazytool(build, store, run, "pid")[1]["pid"]
        node.stop()
        node.start()
        c.close()
        c = node.client()
        out = c.run(sid, ["sh", "-c", "cat /ballast/b7 | wc -c"])
        assert out["stdout"].strip() == str(1 << 20), out
        assert lazytool(build, store, run, "pid")[1]["pid"] == pid
        c.kill(sid)
    finally:
        c.close()
        node.finish()
        lazytool(build, store, run, "stop", check=False)
        proxy.close()
    assert str(run) not in Path("/proc/self/mounts").read_text()
