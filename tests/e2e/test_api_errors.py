"""Bad input and refusals: every one with its exact status, code and field,
in the documented error shape."""
import pytest

from conftest import Client


def check(r, status, code, field=None):
    assert r.status == status, r
    body = r.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert body["error"].get("field") == field, body


def test_malformed_json(api):
    r = api.request("POST", "/v1/sandboxes", body=b'{"image": "busybox",',
                    headers={"Content-Type": "application/json"})
    check(r, 400, "invalid_argument", "body")
    r = api.request("POST", "/v1/sandboxes", body=b'[1, 2]',
                    headers={"Content-Type": "application/json"})
    check(r, 400, "invalid_argument", "body")
    # duplicate keys and NUL inside a string are refused too
    r = api.request("POST", "/v1/sandboxes", body=b'{"image":"a","image":"b"}',
                    headers={"Content-Type": "application/json"})
    check(r, 400, "invalid_argument", "body")
    r = api.request("POST", "/v1/sandboxes", body=b'{"image":"busy\\u0000box"}',
                    headers={"Content-Type": "application/json"})
    check(r, 400, "invalid_argument", "body")


@pytest.mark.parametrize("spec,field", [
    ({"image": 5}, "image"),
    ({}, "image"),
    ({"image": "busybox", "memory_mb": "512"}, "memory_mb"),
    ({"image": "busybox", "memory_mb": 512.5}, "memory_mb"),
    ({"image": "busybox", "memory_mb": 7}, "memory_mb"),
    ({"image": "busybox", "memory_mb": 1048577}, "memory_mb"),
    ({"image": "busybox", "disk_mb": 0}, "disk_mb"),
    ({"image": "busybox", "pids": 3}, "pids"),
    ({"image": "busybox", "pids": 65537}, "pids"),
    ({"image": "busybox", "cpu": 65}, "cpu"),
    ({"image": "busybox", "cpu": -1}, "cpu"),
    ({"image": "busybox", "cpu": "1"}, "cpu"),
    ({"image": "busybox", "user": 65536}, "user"),
    ({"image": "busybox", "timeout": 0}, "timeout"),
    ({"image": "busybox", "timeout": 2592001}, "timeout"),
    ({"image": "busybox", "idle_timeout": -1}, "idle_timeout"),
    ({"image": "busybox", "on_timeout": "explode"}, "on_timeout"),
    ({"image": "busybox", "workdir": "relative"}, "workdir"),
    ({"image": "busybox", "env": {"A": 1}}, "env.A"),
    ({"image": "busybox", "env": ["A=1"]}, "env"),
    ({"image": "busybox", "env": {"A=B": "1"}}, "env"),
    ({"image": "busybox", "labels": {"bad key!": "v"}}, "labels"),
    ({"image": "busybox", "labels": {"k": "v" * 256}}, "labels"),
    ({"image": "busybox", "labels": {f"k{i}": "v" for i in range(65)}}, "labels"),
    ({"image": "busybox", "tier": "microvm"}, "tier"),
    ({"image": "busybox", "colour": "red"}, "colour"),
    ({"image": "no-such-image"}, "image"),
    ({"image": "/nonexistent/rootfs"}, "image"),
])
def test_create_validation(api, spec, field):
    r = api.post("/v1/sandboxes", spec)
    check(r, 400, "invalid_argument", field)


def test_image_paths_only_on_the_unix_socket(warrend, alice, api):
    path = str(warrend.images / "busybox")
    check(alice.post("/v1/sandboxes", {"image": path}), 400, "invalid_argument", "image")
    sid = api.create(image=path)
    assert api.kill(sid).status == 204


def test_oversized_json_body_is_413(api):
    big = {"image": "busybox", "labels": {"k": "x" * (1 << 20)}}
    check(api.post("/v1/sandboxes", big), 413, "payload_too_large", "body")
    # the connection stays usable afterwards
    assert api.get("/v1/health").status == 200


def test_wrong_content_type_is_415(api):
    r = api.request("POST", "/v1/sandboxes", body=b'{"image":"busybox"}',
                    headers={"Content-Type": "text/plain"})
    check(r, 415, "unsupported_media_type")


def test_unknown_route_and_method(api):
    check(api.get("/v1/nothing"), 404, "not_found")
    check(api.get("/v2/sandboxes"), 404, "not_found")
    check(api.request("PATCH", "/v1/sandboxes"), 405, "method_not_allowed")
    check(api.request("PUT", "/v1/sandboxes/0123456789abcdef/commands"), 405,
          "method_not_allowed")


def test_unknown_query_parameter(api, sandbox):
    check(api.get("/v1/sandboxes?colour=red"), 400, "invalid_argument", "colour")
    check(api.get("/v1/sandboxes?limit=0"), 400, "invalid_argument", "limit")
    check(api.get("/v1/sandboxes?limit=1001"), 400, "invalid_argument", "limit")
    check(api.get("/v1/sandboxes?state=zombie"), 400, "invalid_argument", "state")
    check(api.get("/v1/sandboxes?label=nokey"), 400, "invalid_argument", "label")
    check(api.get("/v1/sandboxes?page_token=garbage"), 400, "invalid_argument", "page_token")
    check(api.get(f"/v1/sandboxes/{sandbox}/events?since=-1"), 400, "invalid_argument",
          "since")


def test_unknown_sandbox_is_404_everywhere(api):
    sid = "0123456789abcdef"
    for method, path, body in [
            ("GET", f"/v1/sandboxes/{sid}", None),
            ("DELETE", f"/v1/sandboxes/{sid}", None),
            ("POST", f"/v1/sandboxes/{sid}/timeout", {"timeout": 5}),
            ("POST", f"/v1/sandboxes/{sid}/commands", {"cmd": ["true"]}),
            ("GET", f"/v1/sandboxes/{sid}/commands", None),
            ("GET", f"/v1/sandboxes/{sid}/files?path=/etc/hostname", None),
            ("GET", f"/v1/sandboxes/{sid}/files/stat?path=/", None),
            ("GET", f"/v1/sandboxes/{sid}/events", None)]:
        r = api.request(method, path, json_body=body)
        check(r, 404, "not_found")
    r = api.put(f"/v1/sandboxes/{sid}/files?path=/x", b"data")
    check(r, 404, "not_found")


def test_unknown_command_is_404(api, sandbox):
    check(api.get(f"/v1/sandboxes/{sandbox}/commands/c999"), 404, "not_found")
    check(api.get(f"/v1/sandboxes/{sandbox}/commands/c999/wait"), 404, "not_found")


def test_tcp_requires_a_valid_token(warrend):
    anon = Client(warrend, tcp=True)
    check(anon.get("/v1/sandboxes"), 401, "unauthenticated")
    check(anon.get("/v1/health"), 401, "unauthenticated")
    wrong = Client(warrend, tcp=True, token="tok-alice-wrong")
    check(wrong.get("/v1/sandboxes"), 401, "unauthenticated")
    basic = Client(warrend, tcp=True)
    check(basic.get("/v1/sandboxes", headers={"Authorization": "Basic YTpi"}), 401,
          "unauthenticated")
    # a bad token on the Unix socket is refused too (no token is fine)
    bad_unix = Client(warrend, token="nope")
    check(bad_unix.get("/v1/sandboxes"), 401, "unauthenticated")
    assert Client(warrend).get("/v1/sandboxes").status == 200


def test_other_tenant_sees_404(alice, bob, api):
    sid = alice.create()
    try:
        alice.put(f"/v1/sandboxes/{sid}/files?path=/tmp/secret", b"alice's")
        for c in (bob, api):
            check(c.get(f"/v1/sandboxes/{sid}"), 404, "not_found")
            check(c.post(f"/v1/sandboxes/{sid}/commands", {"cmd": ["true"]}), 404,
                  "not_found")
            check(c.get(f"/v1/sandboxes/{sid}/files?path=/tmp/secret"), 404, "not_found")
            check(c.put(f"/v1/sandboxes/{sid}/files?path=/tmp/x", b"x"), 404, "not_found")
            check(c.get(f"/v1/sandboxes/{sid}/events"), 404, "not_found")
            check(c.post(f"/v1/sandboxes/{sid}/timeout", {"timeout": 1}), 404, "not_found")
            check(c.kill(sid), 404, "not_found")
            assert sid not in [s["id"] for s in c.get("/v1/sandboxes").json()["sandboxes"]]
        # still alive and untouched for its owner
        assert alice.get(f"/v1/sandboxes/{sid}").json()["state"] == "running"
        assert alice.get(f"/v1/sandboxes/{sid}/files?path=/tmp/secret").body == b"alice's"
    finally:
        assert alice.kill(sid).status == 204


def test_calls_on_a_killed_sandbox_are_409(api):
    sid = api.create()
    assert api.kill(sid).status == 204
    check(api.kill(sid), 409, "conflict")
    check(api.post(f"/v1/sandboxes/{sid}/commands", {"cmd": ["true"]}), 409, "conflict")
    check(api.get(f"/v1/sandboxes/{sid}/commands"), 409, "conflict")
    check(api.get(f"/v1/sandboxes/{sid}/files?path=/etc/hostname"), 409, "conflict")
    check(api.put(f"/v1/sandboxes/{sid}/files?path=/x", b"x"), 409, "conflict")
    check(api.post(f"/v1/sandboxes/{sid}/timeout", {"timeout": 60}), 409, "conflict")
    # the record and its history stay readable
    assert api.get(f"/v1/sandboxes/{sid}").json()["state"] == "killed"
    assert api.get(f"/v1/sandboxes/{sid}/events").status == 200


@pytest.mark.parametrize("body,field", [
    ({}, "cmd"),
    ({"cmd": []}, "cmd"),
    ({"cmd": [1]}, "cmd"),
    ({"cmd": ""}, "cmd"),
    ({"cmd": ["true"], "timeout": 0}, "timeout"),
    ({"cmd": ["true"], "timeout": "5"}, "timeout"),
    ({"cmd": ["true"], "user": -1}, "user"),
    ({"cmd": ["true"], "env": {"X": None}}, "env.X"),
    ({"cmd": ["true"], "background": "yes"}, "background"),
    ({"cmd": ["true"], "background": True, "stream": True}, "stream"),
    ({"cmd": ["true"], "encoding": "latin1"}, "encoding"),
    ({"cmd": ["true"], "output_cap": 0}, "output_cap"),
    ({"cmd": ["true"], "shell": True}, "shell"),
])
def test_command_validation(api, sandbox, body, field):
    check(api.post(f"/v1/sandboxes/{sandbox}/commands", body), 400, "invalid_argument", field)


def test_timeout_validation(api, sandbox):
    p = f"/v1/sandboxes/{sandbox}/timeout"
    check(api.post(p, {}), 400, "invalid_argument", "timeout")
    check(api.post(p, {"timeout": 0}), 400, "invalid_argument", "timeout")
    check(api.post(p, {"timeout": 1.5}), 400, "invalid_argument", "timeout")
    check(api.post(p, {"timeout": 60, "x": 1}), 400, "invalid_argument", "x")


def test_file_path_validation(api, sandbox):
    base = f"/v1/sandboxes/{sandbox}/files"
    check(api.get(f"{base}"), 400, "invalid_argument", "path")
    check(api.get(f"{base}?path="), 400, "invalid_argument", "path")
    check(api.get(f"{base}?path=/etc/%00passwd"), 400, "invalid_argument", "path")
    check(api.get(f"{base}?path=/" + "a" * 5000), 400, "invalid_argument", "path")
    check(api.get(f"{base}?path=/etc"), 400, "invalid_argument", "path")
    check(api.get(f"{base}?path=/no/such/file"), 404, "not_found")
    check(api.put(f"{base}?path=/tmp/x&mode=999", b""), 400, "invalid_argument", "mode")
    check(api.put(f"{base}?path=/tmp/x&parents=maybe", b""), 400, "invalid_argument",
          "parents")
    check(api.get(f"{base}/list?path=/&depth=17"), 400, "invalid_argument", "depth")
    check(api.post(f"{base}/mkdir", {"path": "/tmp/d", "mode": 755}), 400,
          "invalid_argument", "mode")
    check(api.post(f"{base}/mkdir", {"path": "/tmp/d", "owner": 1}), 400,
          "invalid_argument", "owner")
    check(api.post(f"{base}/rename", {"from": "/tmp/nothing"}), 400, "invalid_argument", "to")
    check(api.delete(f"{base}?path=/"), 400, "invalid_argument", "path")
    api.post(f"{base}/mkdir", {"path": "/tmp/exists"})
    check(api.post(f"{base}/mkdir", {"path": "/tmp/exists"}), 409, "conflict")


def test_file_upload_over_the_disk_quota_is_413(api):
    sid = api.create(disk_mb=1)
    try:
        r = api.put(f"/v1/sandboxes/{sid}/files?path=/tmp/big", b"x" * (2 << 20))
        check(r, 413, "payload_too_large", "body")
        assert api.get(f"/v1/sandboxes/{sid}/files/exists?path=/tmp/big").json() == {
            "exists": False}
    finally:
        api.kill(sid)


def test_errors_are_counted_in_metrics(api):
    api.get("/v1/definitely-not-a-route")
    text = api.get("/metrics").body.decode()
    line = [l for l in text.splitlines() if l.startswith('warren_api_errors_total{code="not_found"}')]
    assert line and int(line[0].split()[-1]) >= 1
