"""What the catalog's probes get inside a VM guest, per tier and uid.

A guest runs its own kernel (Debian's cloud kernel 6.1 in both tiers: the
microVM boots it with warren's agent as PID 1 over the store's EROFS image;
the vm tier boots a whole Debian disk with systemd and qemu-guest-agent).
Root in the guest holds every capability of the guest, no seccomp filter or
Landlock domain of warren's applies there, and so the guest's root can
mount, trace, load keys and make raw sockets *inside its own kernel*. What
the platform must keep is outside: the host's files and processes, warrend,
the other sandboxes, the canaries, the network policy, and the resources
QEMU may take from the host (its cgroup). Each probe asserts both: the exact
outcome the guest kernel gives (this table, so a change in the guest image
or kernel is seen, and a probe that "passes" because a tool is missing
cannot: every outcome names an errno or ok from a wr-probe that ran) and
the host-side invariants (conftest.Guest.host_check and the probe's own).

Why each uid-1000 outcome is what it is: the guest kernel's own checks
(capabilities, dmesg_restrict=1, kptr/perf_event_paranoid=3 in Debian,
vm.unprivileged_userfaultfd=0, unprivileged user namespaces on), none of
them warren's. Why each uid-0 outcome is what it is: the benign arguments
wr-probe passes (a nonexistent path for mount, bad magic for reboot, an
invalid kexec arch, fd -1), which the kernel rejects after the privilege
check (ENOENT, EINVAL, EBADF) or accepts harmlessly (ok).
"""

# wr-probe sys NAME -> (uid 0, uid 1000), both tiers unless GUEST_SYS_TIER
GUEST_SYS = {
    "syslog": ("ok", "EPERM"),
    "open_by_handle_at": ("ESTALE", "EPERM"),
    "name_to_handle_at": ("EOPNOTSUPP", "EOPNOTSUPP"),
    "mount": ("ENOENT", "ENOENT"),  # the target is resolved before the check
    "umount2": ("ENOENT", "ENOENT"),
    "fsopen": ("ok", "EPERM"),
    "fsmount": ("EBADF", "EPERM"),
    "fspick": ("ok", "EPERM"),
    "open_tree": ("ok", "EPERM"),
    "move_mount": ("EBADF", "EPERM"),
    "mount_setattr": ("ok", "EPERM"),
    "pivot_root": ("ENOENT", "EPERM"),
    "chroot": ("ok", "EPERM"),
    "unshare": ("ok", "ok"),  # CLONE_NEWUSER: unprivileged user namespaces
    "setns": ("EBADF", "EBADF"),
    "clone-newuser": ("ok", "ok"),
    "clone-newns": ("ok", "EPERM"),
    "clone-newpid": ("ok", "EPERM"),
    "clone-newnet": ("ok", "EPERM"),
    "clone-newcgroup": ("ok", "EPERM"),
    "clone3": ("ok", "ok"),
    "fork": ("ok", "ok"),
    "keyctl": ("ok", "ok"),  # the guest kernel's keyrings, its own
    "add_key": ("ok", "ok"),
    "request_key": ("ENOKEY", "ENOKEY"),
    "ptrace": ("ok", "EPERM"),  # PTRACE_SEIZE of the guest's PID 1
    "userfaultfd": ("ok", "EPERM"),
    "io_uring_setup": ("ok", "ok"),
    "io_uring_enter": ("EBADF", "EBADF"),
    "io_uring_register": ("EBADF", "EBADF"),
    "bpf": ("EINVAL", "EPERM"),
    "perf_event_open": ("ENOENT", "EACCES"),
    "settimeofday": ("ok", "EPERM"),  # NULL, NULL: sets nothing
    "clock_settime": ("EFAULT", "EFAULT"),
    "adjtimex": ("ok", "ok"),  # modes 0: a read
    "clock_adjtime": ("ok", "ok"),
    "init_module": ("ENOEXEC", "EPERM"),
    "finit_module": ("EBADF", "EPERM"),
    "delete_module": ("ENOENT", "EPERM"),
    "kexec_load": ("EINVAL", "EPERM"),
    "kexec_file_load": ("EBADF", "EPERM"),
    "reboot": ("EINVAL", "EPERM"),
    "process_vm_readv": ("ok", "EPERM"),
    "pidfd_getfd": ("ok", "EPERM"),
}
GUEST_SYS_TIER = {
    # the vm tier's root is ext4 (handles), the microVM's an overlay on EROFS
    ("vm", "name_to_handle_at"): ("ok", "ok"),
    # PID 1 is systemd (PIE: nothing mapped at 0x400000) vs the static agent
    ("vm", "process_vm_readv"): ("EFAULT", "EPERM"),
}

# wr-probe extent-swap /etc/passwd and ioctl NAME
GUEST_EXTENT = {
    "FICLONE-into-protected": ("EBADF", "EBADF"),  # the protected fd is read-only
    "FICLONERANGE-into-protected": ("EBADF", "EBADF"),
    "FIDEDUPERANGE-into-protected": ("ok", "ok"),  # nothing identical: shares nothing
    "XFS_IOC_SWAPEXT": ("ENOTTY", "ENOTTY"),
    "XFS_IOC_EXCHANGE_RANGE": ("ENOTTY", "ENOTTY"),
    "FICLONE-from-protected": ("EOPNOTSUPP", "EOPNOTSUPP"),
    "FIBMAP": ("EINVAL", "EPERM"),
    "XFS_IOC_SWAPEXT-IO": ("ENOTTY", "ENOTTY"),
    "XFS_IOC_EXCHANGE_RANGE-IOWR": ("ENOTTY", "ENOTTY"),
    "FICLONE-hibits": ("EOPNOTSUPP", "EOPNOTSUPP"),
}
GUEST_EXTENT_TIER = {
    ("vm", "FIDEDUPERANGE-into-protected"): ("EOPNOTSUPP", "EOPNOTSUPP"),
    ("vm", "FIBMAP"): ("ok", "EPERM"),  # ext4 maps blocks; the overlay does not
}

# wr-probe read PATH (outcome), write PATH 0
GUEST_READ = {
    "/dev/kmsg": ("ok", "EPERM"),  # the guest's own kernel log (dmesg_restrict)
    "/proc/kmsg": ("ok", "EACCES"),
    "/proc/kpagecgroup": ("ok", "EACCES"),
    "/proc/kpageflags": ("ok", "EACCES"),
    "/proc/kpagecount": ("ok", "EACCES"),
    "/proc/kcore": ("ok", "EACCES"),
    "/proc/keys": ("ok", "ok"),
    "/proc/timer_list": ("ok", "EACCES"),
    "/dev/userfaultfd": ("EINVAL", "EACCES"),
}

# wr-probe release-agent, core-pattern
GUEST_RELEASE = {
    "unshare-user-mnt-cgroup": ("ok", "ok"),
    "mount-cgroup-v1": ("EPERM", "EPERM"),  # v1 is never mountable in a user ns
    "fsopen-cgroup": ("ok", "ok"),
    "write /sys/fs/cgroup/cgroup.procs": ("ok", "EACCES"),  # the guest's own root
}
GUEST_RELEASE_OTHER = "ENOENT"  # every other cgroup file: v1 is not mounted
GUEST_CORE = {
    "write-proc": ("ok", "EACCES"),  # the guest kernel's core_pattern
    "mount-proc": ("ok", "EPERM"),
    "fsopen-proc": ("ok", "EPERM"),
    "open_tree-proc": ("ok", "EPERM"),
}

# wr-probe devices
GUEST_DEVICES = {
    "mknod-blk-sda": ("ok", "EPERM"),
    "mknod-chr-mem": ("ok", "EPERM"),
    "mknod-chr-kmsg": ("ok", "EPERM"),
    "mknod-blk-loop0": ("ok", "EPERM"),
    "mknod-chr-null": ("ok", "EPERM"),
    "open /dev/sda": ("ENOENT", "ENOENT"),
    "open /dev/vda": ("ok", "EACCES"),  # its own virtual disk: the overlay
    "open /dev/nvme0n1": ("ENOENT", "ENOENT"),
    "open /dev/xvda": ("ENOENT", "ENOENT"),
    "open /dev/loop0": ("ENOENT", "ENOENT"),
    "open /dev/mem": ("ok", "EACCES"),  # the guest's RAM, nothing of the host's
    "open /dev/kmem": ("ENOENT", "ENOENT"),
    "open /dev/port": ("ENOENT", "ENOENT"),
    "open /dev/kmsg": ("ok", "EPERM"),
    "open /dev/userfaultfd": ("ok", "EACCES"),
    "open /dev/fuse": ("ENOENT", "ENOENT"),
    "open /dev/net/tun": ("ENOENT", "ENOENT"),
    "open /dev/dm-0": ("ENOENT", "ENOENT"),
    "open /dev/mapper/control": ("ENOENT", "ENOENT"),
}
GUEST_DEVICES_TIER = {  # Debian's udev makes these; the agent's /dev has fewer
    ("vm", "open /dev/loop0"): ("ok", "EACCES"),
    ("vm", "open /dev/fuse"): ("ok", "ok"),
    ("vm", "open /dev/net/tun"): ("ok", "ok"),
    ("vm", "open /dev/mapper/control"): ("ok", "EACCES"),
}

# wr-probe egress ADDR4 ADDR6 PORT, with no network device in the guest
GUEST_EGRESS_NO_NIC = {
    "tcp4": ("ENETUNREACH", "ENETUNREACH"),
    "tcp6": ("ENETUNREACH", "ENETUNREACH"),  # lo is up (::1): a source, no route
    "udp4-sendto": ("ENETUNREACH", "ENETUNREACH"),
    "udp6-sendto": ("ENETUNREACH", "ENETUNREACH"),
    "icmp-dgram": ("EACCES", "EACCES"),  # ping_group_range
    "raw-icmp": ("ok", "EPERM"),  # the guest root's CAP_NET_RAW, in the guest
    "raw-ip": ("ok", "EPERM"),
    "packet": ("ok", "EPERM"),
    "netlink-route": ("ok", "ok"),
}
# Both guests bring lo up (Debian; warren-agent since the microVM network,
# src/agent/guest/net.c), so no tier differs here any more.
GUEST_EGRESS_NO_NIC_TIER = {}

# misc
GUEST_MISC = {
    "sched-fifo": ("ok", "EPERM"),
    "oom_score_adj": ("ok", "EACCES"),  # the guest's OOM killer, its own
    "kill-1": ("ok", "EPERM"),  # init ignores SIGKILL from its namespace
    "raise_hard": ("ok", "errno=EPERM"),
    "write /bin/sh": ("ok", "EACCES"),
}


def want(table, key, tier, uid, tier_table=None):
    v = (tier_table or {}).get((tier, key)) or table[key]
    return v[0 if uid == 0 else 1]
