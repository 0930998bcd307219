"""The function tier's part of warrend's config (docs/API.md, "Functions"):
the modules a Python pool preloads (for every Python image, or per image),
spare slots and the idle timeout; mistakes are refused at start with the
key named."""
import json
import subprocess

from test_functions import pyimage

PROBE = "import sys; print('decimal' in sys.modules, 'json' in sys.modules)"


def run_with(build, tmp_path, cfg):
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    env = {"WARREN_STATE_DIR": str(tmp_path / "s"), "WARREN_RUN_DIR": str(tmp_path / "r"),
           "ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"}
    return subprocess.run([str(build / "warrend"), "--config", str(path)], env=env,
                          capture_output=True, text=True, timeout=30)


def test_bad_function_configs_name_the_key(build, tmp_path):
    for cfg, key in [({"functions": []}, "functions"),
                     ({"functions": {"spare": 2}}, "functions.spare"),
                     ({"functions": {"spare_slots": 0}}, "functions.spare_slots"),
                     ({"functions": {"spare_slots": 9, "max_spare_slots": 4}},
                      "functions.max_spare_slots"),
                     ({"functions": {"idle_timeout": -1}}, "functions.idle_timeout"),
                     ({"functions": {"python_preload": "json"}}, "functions.python_preload"),
                     ({"functions": {"python_preload": ["os; import x"]}},
                      "functions.python_preload[0]"),
                     ({"functions": {"python_preload": ["json", ""]}},
                      "functions.python_preload[1]"),
                     ({"functions": {"images": {"py": ["json"]}}}, "functions.images.py"),
                     ({"functions": {"images": {"py": {"preload": ["json"]}}}},
                      "functions.images.py.preload"),
                     ({"functions": {"images": {"py": {"python_preload": ["a-b"]}}}},
                      "functions.images.py.python_preload[0]")]:
        p = run_with(build, tmp_path, cfg)
        assert p.returncode == 2, (cfg, p.stderr)
        assert key in p.stderr, (cfg, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_python_preload_comes_from_the_config(fresh_daemon):
    img = pyimage()
    d = fresh_daemon(extra={
        "images": {"py": img},
        "functions": {"spare_slots": 1, "max_spare_slots": 2, "idle_timeout": 60,
                      "python_preload": ["json"],
                      "images": {"py": {"python_preload": ["decimal"]}}},
    }).start()
    c = d.client()
    # The image by its configured name: that image's list.
    r = c.post("/v1/functions/call", {"image": "py", "language": "python", "code": PROBE})
    assert r.status == 200, r
    assert r.json()["stdout"] == "True False\n"
    # The same rootfs by path: another pool, with the default list.
    r = c.post("/v1/functions/call", {"image": img, "language": "python", "code": PROBE})
    assert r.status == 200, r
    assert r.json()["stdout"] == "False True\n"
    c.close()


def test_no_preload_configured(fresh_daemon):
    img = pyimage()
    d = fresh_daemon().start()
    c = d.client()
    r = c.post("/v1/functions/call", {"image": img, "language": "python", "code": PROBE})
    assert r.status == 200, r
    assert r.json()["stdout"] == "False False\n"
    c.close()
