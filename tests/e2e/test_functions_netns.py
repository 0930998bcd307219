"""The function tier recycles a finished call's network namespace for a
later call of the same pool (src/agent/warren-zygote.c, g_netns_free) only
when it is as clean as a fresh one. These tests fail on a zygote that
recycles without that check, or across tenants."""
import pytest

from test_functions import call, pyimage

PORT = 23456

# Leaves a TCP socket of port PORT in TIME_WAIT (the side that closes first
# keeps it for 60 s, past the end of the call) and prints the namespace's
# sockets as the call saw them.
LEAVE_TIME_WAIT = f"""
import socket, time
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", {PORT})); l.listen()
c = socket.create_connection(("127.0.0.1", {PORT})); a, _ = l.accept()
a.close(); time.sleep(0.05); c.close(); l.close(); time.sleep(0.05)
print(open("/proc/self/net/tcp").read())
"""

# What a later call sees: every socket of /proc/self/net/tcp{,6}, and
# whether PORT on 127.0.0.1 answers.
LOOK = f"""
import socket
rows = [l for f in ("tcp", "tcp6") for l in open("/proc/self/net/" + f).read().splitlines()[1:]]
try:
    socket.create_connection(("127.0.0.1", {PORT}), timeout=2).close()
    state = "connected"
except ConnectionRefusedError:
    state = "refused"
print(state); print(len(rows)); print("\\n".join(rows))
"""


def test_a_calls_time_wait_socket_is_not_seen_by_later_calls(api):
    img = pyimage()
    first = call(api, image=img, argv=["python3", "-c", LEAVE_TIME_WAIT])
    assert first["exit_code"] == 0, first
    # The call itself saw its socket in TIME_WAIT (state 06) on PORT: the
    # later calls' empty tables below are not a blind /proc.
    assert any(f":{PORT:04X} " in l and l.split()[3] == "06"
               for l in first["stdout"].splitlines()), first["stdout"]
    # Enough later calls that some run in slots made after the first one was
    # reaped (a zygote without the check hands them its namespace).
    for _ in range(10):
        res = call(api, image=img, argv=["python3", "-c", LOOK])
        assert res["exit_code"] == 0, res
        state, n, *rows = res["stdout"].splitlines()
        assert state == "refused" and n == "0", res["stdout"]


def netns_of(c, n):
    out = []
    for _ in range(n):
        res = call(c, argv=["readlink", "/proc/self/ns/net"])
        assert res["exit_code"] == 0 and res["stdout"].startswith("net:["), res
        out.append(res["stdout"].strip())
    return out


def test_calls_of_two_tenants_never_share_a_netns(warrend):
    # Alternating calls: each tenant's namespaces stay alive in its own
    # zygote (recycled or in use) meanwhile, so an equal inode number is
    # the same namespace.
    seen = {"alice": set(), "bob": set()}
    clients = {t: warrend.client(t) for t in seen}
    try:
        for _ in range(4):
            for t, c in clients.items():
                seen[t].update(netns_of(c, 2))
    finally:
        for c in clients.values():
            c.close()
    assert not seen["alice"] & seen["bob"], seen


def test_a_calls_own_sockets_are_still_its_own(api):
    # Recycling keeps lo as a fresh namespace has it: up, 127.0.0.1 and ::1.
    img = pyimage()
    code = ("import socket\n"
            "for fam, host in ((socket.AF_INET, '127.0.0.1'), (socket.AF_INET6, '::1')):\n"
            "    l = socket.socket(fam); l.bind((host, 0)); l.listen()\n"
            "    c = socket.create_connection(l.getsockname()[:2]); a, _ = l.accept()\n"
            "    c.sendall(b'x'); assert a.recv(1) == b'x'\n"
            "print('ok')\n")
    for _ in range(6):
        res = call(api, image=img, argv=["python3", "-c", code])
        assert res["stdout"] == "ok\n", res
