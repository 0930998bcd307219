"""The catalog (../shared/redteam/CATALOG.md) as the table's rows, the
columns every probe runs in, and the one list of known gaps.

A known gap is a probe that fails because warren really lets something
through and the fix is not small and local. It is reported as KNOWN-GAP in
the table (and as a skip in pytest, so `make test` stays green), with the
reason and the issue it belongs to. A gap that starts passing fails the
suite until it is removed from this list: the list stays honest.
"""

ROWS = [
    # A. seen in production
    "a-log-hunt", "a-rpc-forge", "a-bin-overwrite", "a-extent-swap", "a-kpage",
    "a-output-flood", "a-portscan", "a-proxy-fetch", "a-fd-steal", "a-fd-inherit",
    # B. classic container escapes
    "b-proc-self-exe", "b-open-by-handle", "b-release-agent", "b-core-pattern", "b-sysrq",
    "b-mount-family", "b-userns", "b-keyring", "b-ptrace", "b-uffd", "b-io-uring",
    "b-bpf-perf", "b-cgroupfs", "b-clock", "b-mknod", "b-modules",
    # C. resource exhaustion
    "c-forkbomb", "c-membomb", "c-disk", "c-fds", "c-cpu", "c-linger",
    # D. network (mode none; allowlist and open on a networked node)
    "d-metadata", "d-dns-exfil", "d-egress-bypass", "d-abstract-unix", "d-lateral",
    # F. platform API abuse
    "f-idor", "f-token-steal", "f-path-traversal", "f-symlink-read", "f-log-inject",
    # beyond the catalog rows: the brief's cross-tenant pairs, canaries, host
    "x-cross-tenant", "x-audit", "x-audit-flood", "x-canaries", "x-host-invariants", "x-file-trail",
]

# tier/uid columns, then the API and host columns
TIER_COLUMNS = ["container/uid0", "container/uid1000", "function/uid0", "function/uid1000"]
# container sandboxes on a networked node (test_d_network.py), per mode
NET_COLUMNS = ["allowlist/uid0", "allowlist/uid1000", "open/uid0", "open/uid1000"]
# the VM tiers (test_h_guest_*.py): every probe inside a guest with its own
# kernel, as uid 0 and 1000 there. The boundary is the hypervisor: each
# probe asserts the guest kernel's exact outcome (guestexpect.py) and the
# host-side invariants (QEMU's cgroup bounds, the store's image, the
# daemon, canaries, no route to the host)
MICROVM_COLUMNS = ["microvm/uid0", "microvm/uid1000"]
VM_COLUMNS = ["vm/uid0", "vm/uid1000"]
GUEST_COLUMNS = MICROVM_COLUMNS + VM_COLUMNS
COLUMNS = TIER_COLUMNS + ["api", "host"] + NET_COLUMNS + GUEST_COLUMNS

# Why a column does not apply (shown as n/a).
NOT_APPLICABLE = {
    "function/uid0": "the function API runs every call as uid 1000 (no user field)",
}

# (row, column or "*") -> "reason (issue N)". Keep it short and honest.
# The row "events" stands for the refusal-event check of every probe in
# that column: its outcome checks still run and must pass; only a missing
# event is reported as the gap (the cell shows KNOWN-GAP).
# Closed: open-mode DNS to other resolvers (the filter's DNS rule,
# netfilter.bpf.c, reason dns_resolver) and raw/packet sockets without an
# event (seccomp's socket rules: the event is asserted in the mode-none
# columns, container and function), the networked node's seccomp and
# Landlock events (its warrend runs in a network namespace; it makes its
# audit socket in the initial one, src/daemon/audit_netns.c) and the vm
# tier's root memory bomb (qemu-ga is kept by OOMScoreAdjust and restarted;
# vm_exec.c reports a lost agent's command as its end, oom from the guest's
# kernel log).
KNOWN_GAPS = {}

# (row, column) -> PASS | FAIL | KNOWN-GAP | n/a, filled by conftest's hook
RESULTS = {}


def gap(row, col):
    return KNOWN_GAPS.get((row, col)) or KNOWN_GAPS.get((row, "*"))
