"""Fixtures for the end-to-end suite: a real warrend started from the build
directory ($WARREN_BUILD, default build-test) with its own state dir, run
dir, socket, cgroup base and TCP port, two tenants with bearer tokens, and
the test image registered as "busybox".

Raw HTTP goes through `Client` (http.client, over the Unix socket or TCP).
At the end of the session every sandbox still running is deleted through
the API, the daemon is stopped with SIGTERM (it must exit 0), and nothing
may be left: no cgroup under the base, no uid range, no process in a
sandbox cgroup. Whatever is found is cleaned up, then reported as a failure.
"""
import pytest

from harness import (BUILD, ROOT, Client, Daemon, Resp, UnixHTTPConnection,  # noqa: F401
                     find_images, free_port, own_cgroup_dirs)


@pytest.fixture(scope="session")
def build():
    for f in ("warrend", "warren-init", "tests/wr-probe"):
        assert (BUILD / f).exists(), f"{BUILD / f} missing: run ninja -C {BUILD} first"
    return BUILD


@pytest.fixture(scope="session")
def warrend(build, tmp_path_factory):
    d = Daemon(build, tmp_path_factory.mktemp("warrend"), "main").start()
    yield d
    problems = d.finish()
    assert not problems, "\n".join(problems) + "\n" + d.log_text()


@pytest.fixture
def fresh_daemon(build, tmp_path):
    """A daemon of the test's own (for kill -9 and restarts)."""
    made = []

    def make(**kw):
        d = Daemon(build, tmp_path / f"d{len(made)}", f"t{len(made)}", **kw)
        made.append(d)
        return d

    yield make
    problems = []
    for d in made:
        problems += d.finish()
    assert not problems, "\n".join(problems)


@pytest.fixture
def api(warrend):
    """A client on the Unix socket (tenant "default")."""
    c = warrend.client()
    yield c
    c.close()


@pytest.fixture
def alice(warrend):
    c = warrend.client("alice")
    yield c
    c.close()


@pytest.fixture
def bob(warrend):
    c = warrend.client("bob")
    yield c
    c.close()


@pytest.fixture
def sandbox(api):
    """A running sandbox of the default tenant, killed afterwards."""
    sid = api.create()
    yield sid
    api.kill(sid)


# ---- for the SDK suite (test_sdk_*.py) --------------------------------------

@pytest.fixture
def image():
    return "busybox"


@pytest.fixture
def conn(warrend):
    """Keyword arguments of the Python SDK for the Unix socket."""
    return {"socket": str(warrend.sock)}


@pytest.fixture
def tenants(warrend):
    """SDK keyword arguments for two TCP tenants (alice, bob)."""
    url = f"http://127.0.0.1:{warrend.port}"
    return ({"base_url": url, "api_key": warrend.tokens["alice"]},
            {"base_url": url, "api_key": warrend.tokens["bob"]})


# ---- a node with networking on (tests/e2e/netnode.py) ----------------------

from netnode import fresh_netd, napi, netd, netns, svc_daemon  # noqa: E402,F401
