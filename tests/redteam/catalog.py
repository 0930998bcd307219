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
    # D. network (mode none today; allowlist variants with issue 6)
    "d-metadata", "d-dns-exfil", "d-egress-bypass", "d-abstract-unix", "d-lateral",
    # F. platform API abuse
    "f-idor", "f-token-steal", "f-path-traversal", "f-symlink-read", "f-log-inject",
    # beyond the catalog rows: the brief's cross-tenant pairs, canaries, host
    "x-cross-tenant", "x-audit", "x-audit-flood", "x-canaries", "x-host-invariants",
]

# tier/uid columns, then the API and host columns
TIER_COLUMNS = ["container/uid0", "container/uid1000", "function/uid0", "function/uid1000"]
COLUMNS = TIER_COLUMNS + ["api", "host"]

# Why a column does not apply (shown as n/a).
NOT_APPLICABLE = {
    "function/uid0": "the function API runs every call as uid 1000 (no user field)",
}

# (row, column or "*") -> "reason (issue N)". Keep it short and honest.
# The row "events" stands for the refusal-event check of every probe in
# that column: its outcome checks still run and must pass; only a missing
# event is reported as the gap (the cell shows KNOWN-GAP).
KNOWN_GAPS = {
    ("events", "function/uid1000"):
        "a function call's refusals are recorded with tenant '' (sandbox fn-<pool>), so "
        "its tenant cannot query them; only an admin sees them (issue 7, audit branch)",
    ("x-audit", "container/uid0"):
        "a pids.max hit less than one poll (1 s) before the sandbox ends is never "
        "recorded: the cgroup poller takes no last reading at kill (issue 7, "
        "src/daemon/audit_cgroup.c)",
    ("x-audit", "container/uid1000"):
        "as container/uid0: pids.max hit right before the kill is lost (issue 7)",
    ("x-canaries", "api"):
        "a Landlock event names the HOST path of a file outside the sandbox root that "
        "an exec was refused on (the daemon's binary, reached through /proc/self/exe): "
        "the tenant reading its events learns host paths (issue 7, audit_kernel.c)",
}

# (row, column) -> PASS | FAIL | KNOWN-GAP | n/a, filled by conftest's hook
RESULTS = {}


def gap(row, col):
    return KNOWN_GAPS.get((row, col)) or KNOWN_GAPS.get((row, "*"))
