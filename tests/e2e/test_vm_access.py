"""The vm tier as a non-root sandbox user: the files API works as that user
in the guest (every tool and every byte through the guest's own
permission checks), so no path, link or privilege trick reads or changes
what the user could not. And VNC on request: the endpoint is a Unix socket
of warrend's that hands each client to QEMU, which asks for the VM's
password. One VM (user 1000, display.vnc) for the module: TCG boots are
slow; test_vm_io.py checks that a VM made without asking has no VNC."""
import hashlib
import os
import socket
import struct

import pytest

from vmtiers import tier_fixtures

api, sandbox, tier = tier_fixtures(["vm"])


def fs(sid, route=""):
    return f"/v1/sandboxes/{sid}/files{route}"


@pytest.fixture(scope="module")
def user_vm(tier):
    from conftest import Client
    c = Client(tier.d, timeout=900)
    sid = tier.create(c, user=1000, display={"vnc": True})
    yield sid
    c.kill(sid)
    c.close()


def denied(r):
    assert r.status == 400, r
    assert "Permission denied" in r.json()["error"]["message"], r


def test_what_the_api_writes_is_the_users(api, user_vm):
    sid = user_vm
    r = api.put(fs(sid) + "?path=/tmp/u/mine.txt&parents=true&mode=0600", b"mine\n")
    assert r.status == 200, r
    e = r.json()
    assert (e["uid"], e["gid"], e["mode"]) == (1000, 1000, "0600"), e
    assert api.get(fs(sid, "/stat") + "?path=/tmp/u").json()["uid"] == 1000
    out = api.run(sid, "id -u; cat /tmp/u/mine.txt; stat -c '%u:%g %a' /tmp/u/mine.txt")
    assert out["stdout"] == "1000\nmine\n1000:1000 600\n", out
    # past one 4 MiB slice both ways, and an empty file
    data = os.urandom((9 << 20) + 123)
    assert api.put(fs(sid) + "?path=/tmp/u/big.bin", data).status == 200
    g = api.get(fs(sid) + "?path=/tmp/u/big.bin")
    assert g.status == 200 and hashlib.sha256(g.body).digest() == hashlib.sha256(data).digest()
    assert api.run(sid, ["sha256sum", "/tmp/u/big.bin"])["stdout"].split()[0] == \
        hashlib.sha256(data).hexdigest()
    assert api.put(fs(sid) + "?path=/tmp/u/empty", b"").json()["size"] == 0
    assert api.get(fs(sid) + "?path=/tmp/u/empty").body == b""
    r = api.post(fs(sid, "/mkdir"), {"path": "/tmp/u/d/e", "parents": True, "mode": "0700"})
    assert r.status == 200 and r.json()["uid"] == 1000, r
    assert api.post(fs(sid, "/rename"), {"from": "/tmp/u/d", "to": "/tmp/u/d2"}).status == 200
    assert api.delete(fs(sid) + "?path=/tmp/u/d2&recursive=true").status == 204


def test_root_only_files_stay_root_only(api, user_vm):
    sid = user_vm
    # the image's own root-only files: the guest says no to user 1000
    denied(api.get(fs(sid) + "?path=/etc/shadow"))
    denied(api.get(fs(sid, "/list") + "?path=/root"))
    denied(api.get(fs(sid) + "?path=/root/.bashrc"))
    # a link the user makes to them is followed as the user
    api.run(sid, "mkdir -p /tmp/t && ln -sfn /etc/shadow /tmp/t/s && ln -sfn /root /tmp/t/r")
    denied(api.get(fs(sid) + "?path=/tmp/t/s"))
    denied(api.get(fs(sid) + "?path=/tmp/t/r/.bashrc"))
    denied(api.get(fs(sid) + "?path=/tmp/t/../../etc/shadow"))
    # a link made through the files API itself, read through it
    assert api.post(fs(sid, "/mkdir"), {"path": "/tmp/t2", "parents": True}).status == 200
    api.run(sid, ["ln", "-sfn", "/etc/shadow", "/tmp/t2/s"])
    denied(api.get(fs(sid) + "?path=/tmp/t2/s"))
    # and the guest agrees: the user cannot read it by itself either
    assert api.run(sid, "test -r /etc/shadow || echo no")["stdout"] == "no\n"


def test_root_owned_places_cannot_be_changed(api, user_vm):
    sid = user_vm
    denied(api.put(fs(sid) + "?path=/etc/passwd", b"root::0:0::/:/bin/sh\n"))
    denied(api.put(fs(sid) + "?path=/etc/warren-new", b"x"))
    denied(api.put(fs(sid) + "?path=/tmp/t/r/.profile", b"x"))
    denied(api.post(fs(sid, "/mkdir"), {"path": "/root/x", "parents": True}))
    denied(api.delete(fs(sid) + "?path=/etc/hostname"))
    denied(api.post(fs(sid, "/rename"), {"from": "/etc/hostname", "to": "/tmp/h"}))
    # nothing changed, nothing left behind (the temp files were the user's
    # and went with the failed writes)
    out = api.run(sid, "head -c 5 /etc/passwd; ls -a /etc | grep -c wr-tmp; "
                  "test -e /etc/warren-new || echo absent; test -e /etc/hostname && echo kept")
    assert out["stdout"] == "root:0\nabsent\nkept\n", out


def vnc_response(password, challenge):
    """VNC authentication: DES-ECB of the challenge, keyed with the password
    (8 bytes, each byte's bits reversed)."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    k = bytes(int(f"{b:08b}"[::-1], 2) for b in password.encode().ljust(8, b"\0")[:8])
    e = Cipher(algorithms.TripleDES(k * 3), modes.ECB()).encryptor()
    return e.update(challenge) + e.finalize()


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        assert c, f"closed after {b!r}"
        b += c
    return b


def vnc_session(path, password):
    """RFB 3.8 up to ServerInit: (security types, result, width, height)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(60)
    s.connect(path)
    try:
        assert recv_exact(s, 12) == b"RFB 003.008\n"
        s.sendall(b"RFB 003.008\n")
        n = recv_exact(s, 1)[0]
        types = list(recv_exact(s, n))
        s.sendall(b"\x02")
        resp = vnc_response(password, recv_exact(s, 16))
        s.sendall(resp)
        result = struct.unpack(">I", recv_exact(s, 4))[0]
        if result != 0:
            return types, result, 0, 0
        s.sendall(b"\x01")  # ClientInit: shared
        w, h = struct.unpack(">HH", recv_exact(s, 4))
        return types, result, w, h
    finally:
        s.close()


def test_vnc_when_asked(api, user_vm, tier):
    info = api.get(f"/v1/sandboxes/{user_vm}").json()
    vnc = info["display"]["vnc"]
    path, password = vnc["socket"], vnc["password"]
    assert len(password) == 8
    st = os.stat(path)
    # warrend's (root), in the VM's private directory
    assert st.st_uid == 0 and (os.stat(os.path.dirname(path)).st_mode & 0o077) == 0
    # only VNC authentication is offered; a wrong password is refused
    types, result, _, _ = vnc_session(path, "wrongpw1")
    assert types == [2] and result != 0
    types, result, w, h = vnc_session(path, password)
    assert result == 0 and w >= 640 and h >= 400, (w, h)
    # twice: each client is handed to QEMU in turn
    assert vnc_session(path, password)[1] == 0
    # the create asked for it through the record, and others cannot
    assert api.post("/v1/sandboxes", {"image": "busybox", "display": {"vnc": True}}).status \
        == 400
    assert api.post("/v1/sandboxes", {"image": tier.image, "tier": "vm",
                                      "display": {"vnc": 1}}).status == 400


def test_vnc_on_a_restored_vm(api, user_vm, tier):
    """A VM asked with VNC has it after a restore too: paused to disk and
    resumed (QEMU started again), its endpoint is back with the password
    its user already has; a new VM restored from its snapshot gets an
    endpoint of its own (a new password) when its create asks, none when it
    does not. The restores load saved states: no boot."""
    sid = user_vm
    before = api.get(f"/v1/sandboxes/{sid}").json()["display"]["vnc"]
    r = api.post(f"/v1/sandboxes/{sid}/pause", {"keep_memory": False})
    assert r.status == 200 and r.json()["state"] == "paused", r
    # no QEMU while the state is on disk: no endpoint either
    assert "display" not in api.get(f"/v1/sandboxes/{sid}").json()
    assert not os.path.exists(before["socket"])
    r = api.post(f"/v1/sandboxes/{sid}/resume", None)
    assert r.status == 200 and r.json()["state"] == "running", r
    after = api.get(f"/v1/sandboxes/{sid}").json()["display"]["vnc"]
    assert after["password"] == before["password"], (before, after)
    assert vnc_session(after["socket"], "wrongpw1")[1] != 0
    types, result, w, h = vnc_session(after["socket"], after["password"])
    assert types == [2] and result == 0 and w >= 640, (types, result, w, h)
    assert api.run(sid, "id -u; echo restored > /tmp/vnc-mark")["stdout"] == "1000\n"

    name = f"vncsnap{os.getpid()}:1"
    r = api.post(f"/v1/sandboxes/{sid}/snapshot", {"name": name})
    assert r.status == 201, r
    made = []
    try:
        r = api.post("/v1/sandboxes", {"image": name, "timeout": 600,
                                       "display": {"vnc": True}})
        assert r.status == 201 and r.json()["tier"] == "vm", r
        made.append(r.json()["id"])
        vnc = api.get(f"/v1/sandboxes/{made[0]}").json()["display"]["vnc"]
        assert vnc["socket"] != after["socket"] and vnc["password"] != after["password"]
        assert len(vnc["password"]) == 8
        assert vnc_session(vnc["socket"], after["password"])[1] != 0
        assert vnc_session(vnc["socket"], vnc["password"])[1] == 0
        assert api.run(made[0], "cat /tmp/vnc-mark")["stdout"] == "restored\n"
        api.kill(made.pop())
        r = api.post("/v1/sandboxes", {"image": name, "timeout": 600})
        assert r.status == 201, r
        made.append(r.json()["id"])
        assert "display" not in api.get(f"/v1/sandboxes/{made[0]}").json()
        d = api.get(f"/v1/sandboxes/{made[0]}").json()
        assert d["state"] == "running", d
    finally:
        for s in made:
            api.kill(s)
        api.delete(f"/v1/images/{name}")
