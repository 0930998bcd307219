"""warrend's configuration: the example in deploy/ is valid, and mistakes
are refused at start with the key named."""
import json
import subprocess

from conftest import ROOT


def run_with(build, tmp_path, cfg):
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg) if not isinstance(cfg, str) else cfg)
    env = {"WARREN_STATE_DIR": str(tmp_path / "s"), "WARREN_RUN_DIR": str(tmp_path / "r"),
           "ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"}
    return subprocess.run([str(build / "warrend"), "--config", str(path)], env=env,
                          capture_output=True, text=True, timeout=30)


def test_example_config_starts(fresh_daemon, tmp_path):
    example = json.loads((ROOT / "deploy/warrend.json").read_text())
    keep = {k: v for k, v in example.items()
            if k not in ("socket", "listen", "state_dir", "run_dir", "tokens", "images")}
    # the registry credentials file of the example, made for the test
    auth = tmp_path / "registry-auth.json"
    auth.write_text('{"auths": {}}')
    auth.chmod(0o600)
    keep["lazy"] = dict(keep["lazy"], auth_file=str(auth))
    keep["audit"] = dict(keep["audit"], rules=str(ROOT / "deploy/audit-rules.json"))
    d = fresh_daemon(extra=keep).start()
    c = d.client()
    assert c.get("/v1/health").json()["status"] == "ok"
    c.close()


def test_spawners_count(fresh_daemon):
    d = fresh_daemon(extra={"spawners": 3}).start()
    kids = subprocess.run(["ps", "--ppid", str(d.proc.pid), "-o", "comm="],
                          capture_output=True, text=True).stdout.split()
    assert kids.count("warren-spawner") == 3, kids
    c = d.client()
    sid = c.create()
    assert c.run(sid, ["echo", "ok"])["stdout"] == "ok\n"
    c.kill(sid)
    c.close()


def test_bad_configs_name_the_key(build, tmp_path):
    for cfg, key in [({"workers": "many"}, "workers"),
                     ({"wokers": 4}, "wokers"),
                     ({"spawners": 9}, "spawners"),
                     ({"spawners": -1}, "spawners"),
                     ({"tokens": [{"tenant": "a", "sha256": "xyz"}]}, "tokens"),
                     ({"tokens": [{"tenant": "a"}]}, "tokens"),
                     ({"defaults": {"memory_mb": 1}}, "defaults.memory_mb"),
                     ({"images": {"x": "relative/path"}}, "images"),
                     ({"lazy": {"chunk_size": "3K"}}, "lazy.chunk_size"),
                     ({"lazy": {"chunk_size": 100000}}, "lazy.chunk_size"),
                     ({"lazy": {"fetch_all": "yes"}}, "lazy.fetch_all"),
                     ({"lazy": {"auth_file": "/nonexistent/auth.json"}}, "lazy.auth_file"),
                     ({"lazy": {"auth_file": "relative.json"}}, "lazy.auth_file"),
                     ({"lazy": {"range_timeout_ms": 1}}, "lazy.range_timeout_ms"),
                     ({"lazy": {"cache": 1}}, "lazy.cache"),
                     ({"lazy": []}, "lazy"),
                     ({"admin_tenants": "alice"}, "admin_tenants"),
                     ({"admin_tenants": [""]}, "admin_tenants"),
                     ("{not json", "line")]:
        p = run_with(build, tmp_path, cfg)
        assert p.returncode == 2, (cfg, p.stderr)
        assert key in p.stderr, (cfg, p.stderr)


def test_version_and_usage(build):
    p = subprocess.run([str(build / "warrend"), "--version"], capture_output=True, text=True,
                       env={"ASAN_OPTIONS": "detect_leaks=0"})
    assert p.returncode == 0 and p.stdout.strip() == "warrend 0.1.0"
    p = subprocess.run([str(build / "warrend"), "--bogus"], capture_output=True, text=True,
                       env={"ASAN_OPTIONS": "detect_leaks=0"})
    assert p.returncode == 2 and "usage" in p.stderr
