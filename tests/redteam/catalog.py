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
# the microVM tier (test_h_microvm.py): the probes that run through exec,
# with the guest as the boundary (its own kernel: host invariants, not errnos)
MICROVM_COLUMNS = ["microvm/uid0", "microvm/uid1000"]
COLUMNS = TIER_COLUMNS + ["api", "host"] + NET_COLUMNS + MICROVM_COLUMNS

# Why a column does not apply (shown as n/a).
NOT_APPLICABLE = {
    "function/uid0": "the function API runs every call as uid 1000 (no user field)",
}

# (row, column or "*") -> "reason (issue N)". Keep it short and honest.
# The row "events" stands for the refusal-event check of every probe in
# that column: its outcome checks still run and must pass; only a missing
# event is reported as the gap (the cell shows KNOWN-GAP).
_OPEN_DNS = (
    "mode open allows every destination outside the deny set, port 53 included: DNS to "
    "another resolver is not refused and has no event (issue 6, netfilter.bpf.c would "
    "need a rule for port 53 beside the gateway's)")
_RAW_EVENT = (
    "raw and packet sockets are refused by the kernel (no CAP_NET_RAW) before the "
    "filter's sock_create hook runs: EPERM, but no platform layer records it (a seccomp "
    "argument rule for SOCK_RAW/AF_PACKET with its log would; src/isolate/seccomp.c, "
    "issue 7)")
KNOWN_GAPS = {
    ("d-dns-exfil", "open/uid0"): _OPEN_DNS,
    ("d-dns-exfil", "open/uid1000"): _OPEN_DNS,
    **{("d-egress-bypass", c): _RAW_EVENT for c in
       ("allowlist/uid0", "allowlist/uid1000", "open/uid0", "open/uid1000")},
}

# (row, column) -> PASS | FAIL | KNOWN-GAP | n/a, filled by conftest's hook
RESULTS = {}


def gap(row, col):
    return KNOWN_GAPS.get((row, col)) or KNOWN_GAPS.get((row, "*"))
