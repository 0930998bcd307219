# warren-pyzygote: the Python zygote of a function pool.
#
# The host starts the image's python3 with this file as `-c` source, as PID 1
# of the pool's namespaces, after the same set-up as the native zygote
# (src/agent/warren-zygote.c): fd 3 the control socket, fd 4 the Landlock
# ruleset made by the host's C code in the pool's root, fd 5 a memfd with the
# seccomp program compiled by the host. It imports the configured modules
# once and then serves MAKE requests exactly like the native zygote (wire
# format: src/tiers/function_proto.h): each slot is an os.fork() of this warm
# interpreter in a new pid, mount and IPC namespace, joined to its leaf
# cgroup, with fresh tmpfs on /tmp, /work and /dev/shm and a /proc of its
# own and a network namespace of its own (loopback only); it then drops to
# the call user (no capabilities), sets no_new_privs,
# restricts itself with the host's Landlock ruleset and loads the host's
# seccomp program, all before its call arrives. On CALL it writes the input
# files, takes its stdio, lowers its rlimits, closes every other fd and runs
# the submitted code in-process.
# Copy-on-write faults are what a slot costs: a fault traps (about 50 us on
# a paravirtualised host) while madvise(MADV_POPULATE_WRITE) copies a page
# in the kernel for a tenth of that. So the first slot of a zygote, once
# prepared, reports the pages it wrote (exclusively mapped in
# /proc/self/pagemap) and every later slot copies those pages in bulk right
# after its fork, before it touches them. (The zygote does not do the same
# for its own writes between forks: in the parent every copied page also
# flushes the TLB of the other CPUs, which cost more CPU than the traps.)
# Only the standard library is used (ctypes for the system calls Python has
# no wrapper for). Nothing here is trusted by the host: exit status and usage
# come from the kernel (pidfd) and the leaf cgroup.
import ctypes
import fcntl
import os
import resource
import select
import signal
import socket
import struct
import sys

MAGIC = 0x314E4657
T_MAKE, T_SLOT, T_ERROR, T_CALL, T_REAPED, T_READY, T_PREPARED = 1, 2, 3, 4, 5, 6, 7
FD_CTL, FD_LANDLOCK, FD_SECCOMP = 3, 4, 5
CALL_UID = 1000
WORKDIR = "/work"
INLINE_MAX = 49152
PAYLOAD_FD = 1

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS = 0x8913, 0x8914
IFF_UP, IFF_RUNNING = 0x1, 0x40
IFREQ = struct.Struct("=16sH22x")
CLONE_NEWPID = 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
PR_SET_NO_NEW_PRIVS = 38
SYS_SECCOMP = 317
SYS_LANDLOCK_RESTRICT_SELF = 446
SECCOMP_SET_MODE_FILTER = 1
MADV_POPULATE_READ = 22
MADV_POPULATE_WRITE = 23
PM_PRESENT = 1 << 63
PM_EXCLUSIVE = 1 << 56
HOT_GAP = 8 << 12  # runs of written pages closer than this are copied as one

HDR = struct.Struct("=II")
PREPARED = struct.Struct("=IIII")
PREPARED_HOLDER = 1
MAKE = struct.Struct("=IIQQII")
SLOT = struct.Struct("=IIQ")
ERROR = struct.Struct("=IIQi480s")
CALL = struct.Struct("=IIQQQQQIIII")
REAPED = struct.Struct("=IIii")
FILEREC = struct.Struct("=IIQ")

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

# The slot's exit tears its address space down (every page table entry the
# fork copied): milliseconds on a paravirtualised host, and before the exit
# is visible the call would wait for it. So a prepared slot P hands the call
# to a child S sharing its memory (clone(CLONE_VM | CLONE_VFORK)): S runs the
# call; P, suspended until S's exit releases the memory, then waits until
# the host is done with the call (it closes its end of the slot's socket,
# fd in the argument: POLLHUP) or 100 ms passed, and exits without touching
# the memory: the teardown, paid by the last of the two to let go of the
# memory (P), comes after the host read the call's status and usage, not
# while the host (on a machine of few CPUs) waits for a CPU to read them.
# This is machine code because P must not return through a stack S has
# since used (the pollfd goes below the stack pointer, in the red zone):
#   mov r9d, edi (fd: clone keeps r9); mov edi, CLONE_VM|CLONE_VFORK|SIGCHLD;
#   xor esi, esi (same stack); xor edx, edx; xor r10d, r10d; xor r8d, r8d;
#   mov eax, SYS_clone; syscall
#   test rax, rax; jg parent; ret (S: 0, or -errno: no S, P runs the call)
#   parent: mov [rsp-16], r9d; mov dword [rsp-12], POLLIN; lea rdi, [rsp-16];
#   mov esi, 1; mov edx, 100; mov eax, SYS_poll; syscall
#   exit: mov eax, SYS_exit; xor edi, edi; syscall; jmp exit
# P and S have the same confinement (S inherits all of it), so S gains
# nothing over P by writing P's memory. x86-64 only; elsewhere P runs the
# call itself.
VCLONE_X86_64 = bytes.fromhex("4189f9" "bf11410000" "31f6" "31d2" "4531d2" "4531c0" "b838000000"
                              "0f05" "4885c0" "7f01" "c3"
                              "44894c24f0" "c74424f401000000" "488d7c24f0" "be01000000"
                              "ba64000000" "b807000000" "0f05"
                              "b83c000000" "31ff" "0f05" "ebf5")
PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4


def make_vclone():
    if os.uname().machine != "x86_64":
        return None
    import mmap
    m = mmap.mmap(-1, mmap.PAGESIZE)
    m.write(VCLONE_X86_64)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    if libc.mprotect(addr, mmap.PAGESIZE, PROT_READ | PROT_EXEC) < 0:
        return None
    fn = ctypes.PYFUNCTYPE(ctypes.c_long, ctypes.c_int)(addr)  # the GIL stays held: S takes over
    fn.mapping = m  # kept (and never written again) while fn lives
    return fn


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def oserr(what):
    e = ctypes.get_errno()
    return OSError(e, "%s: %s" % (what, os.strerror(e)))


def check(rc, what):
    if rc < 0:
        raise oserr(what)


def send(sock, data, fds=()):
    anc = []
    if fds:
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("=%di" % len(fds), *fds))]
    sock.sendmsg([data], anc)


def recv(sock, size, maxfds):
    data, anc, _, _ = sock.recvmsg(size, socket.CMSG_SPACE(4 * maxfds))
    fds = []
    for level, kind, blob in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            n = len(blob) // 4
            fds.extend(struct.unpack("=%di" % n, blob[: 4 * n]))
    for fd in fds:
        os.set_inheritable(fd, False)
    return data, fds


def send_error(sock, slot, err):
    msg = str(err).encode("utf-8", "replace")[:479]
    code = err.errno if isinstance(err, OSError) and err.errno else 5
    try:
        send(sock, ERROR.pack(MAGIC, T_ERROR, slot, code, msg))
    except OSError:
        pass


def tmpfs(path, size, mode):
    opts = ("size=%d,mode=%s,uid=%d,gid=%d" % (size, mode, CALL_UID, CALL_UID)).encode()
    check(libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts),
          "mount tmpfs on " + path)


def slot_setup(procs, tmp_bytes):
    for fd in procs:
        os.write(fd, b"0")
        os.close(fd)
    # A network namespace of its own, loopback only: no call reaches a
    # socket (TCP, UDP, abstract Unix) of another call of the pool.
    check(libc.unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWNET), "unshare")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        _, flags = IFREQ.unpack(fcntl.ioctl(s, SIOCGIFFLAGS, IFREQ.pack(b"lo", 0)))
        fcntl.ioctl(s, SIOCSIFFLAGS, IFREQ.pack(b"lo", flags | IFF_UP | IFF_RUNNING))
    tmpfs("/tmp", tmp_bytes, "1777")
    tmpfs(WORKDIR, tmp_bytes, "0755")
    tmpfs("/dev/shm", tmp_bytes, "1777")
    check(libc.mount(b"devpts", b"/dev/pts", b"devpts", MS_NOSUID | MS_NOEXEC,
                     b"newinstance,ptmxmode=0666,mode=0620"), "mount devpts")
    check(libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                     b"subset=pid"), "mount proc")


def write_files(blob, off, n):
    work = os.open(WORKDIR, os.O_PATH | os.O_DIRECTORY)
    for _ in range(n):
        mode, nlen, dlen = FILEREC.unpack_from(blob, off)
        off += FILEREC.size
        name = bytes(blob[off:off + nlen]).decode("utf-8", "surrogateescape")
        off += nlen
        data = blob[off:off + dlen]
        off += dlen
        parts = name.split("/")
        if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise OSError(22, "files: bad path %r" % name)
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            try:
                os.mkdir(d, 0o755, dir_fd=work)
            except FileExistsError:
                pass
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                     mode & 0o7777, dir_fd=work)
        try:
            mv = memoryview(data)
            while mv:
                mv = mv[os.write(fd, mv):]
            os.fchmod(fd, mode & 0o7777)
        finally:
            os.close(fd)
    os.close(work)
    return off


def confine(bpf):
    # Ahead of the call, as the native zygote does: the call user without
    # capabilities, no_new_privs, Landlock, seccomp last. What follows once
    # the call arrives needs no privilege and no refused system call.
    os.setgroups([CALL_UID])
    os.setresgid(CALL_UID, CALL_UID, CALL_UID)
    os.setresuid(CALL_UID, CALL_UID, CALL_UID)
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    check(libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, FD_LANDLOCK, LL_FLAGS), "landlock")
    os.close(FD_LANDLOCK)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    prog = SockFprog(len(bpf) // 8, ctypes.addressof(bpf))
    check(libc.syscall(SYS_SECCOMP, SECCOMP_SET_MODE_FILTER, 0, ctypes.byref(prog)), "seccomp")


def limits(cpu, fsize, nofile):
    lim = [(resource.RLIMIT_NOFILE, nofile or 256), (resource.RLIMIT_CORE, 0),
           (resource.RLIMIT_RTPRIO, 0)]
    if cpu:
        lim.append((resource.RLIMIT_CPU, cpu))
    if fsize:
        lim.append((resource.RLIMIT_FSIZE, fsize))
    for res, v in lim:
        resource.setrlimit(res, (v, v))


def take_call(sock):
    # The call message, its files written: (argv, env, code, fds, limits).
    data, fds = recv(sock, CALL.size + INLINE_MAX, 4)
    if not data:
        os._exit(0)
    call = CALL.unpack_from(data, 0)
    magic, kind, cpu, fsize, nofile, plen, clen, argc, envc, nfiles, flags = call
    if magic != MAGIC or kind != T_CALL or len(fds) < 3:
        raise OSError(71, "bad call message")
    if flags & PAYLOAD_FD:
        if len(fds) < 4:
            raise OSError(71, "call payload missing")
        blob = os.pread(fds[3], plen, 0)
    else:
        blob = data[CALL.size:]
    if len(blob) != plen:
        raise OSError(71, "call payload truncated")
    off = 0
    strs = []
    for _ in range(argc + envc):
        z = blob.index(b"\0", off)
        strs.append(blob[off:z].decode("utf-8", "surrogateescape"))
        off = z + 1
    argv, env = strs[:argc], strs[argc:]
    off = write_files(blob, off, nfiles)
    code = blob[off:off + clen].decode("utf-8", "surrogateescape")
    return argv, env, code, fds, (cpu, fsize, nofile)


def apply_call(argv, env, fds, lim):
    for i in range(3):
        os.dup2(fds[i], i)
    limits(*lim)
    os.environ.clear()
    for kv in env:
        k, _, v = kv.partition("=")
        os.environ[k] = v
    sys.argv = argv or [""]


def run_call(sock):
    argv, env, code, fds, lim = take_call(sock)
    apply_call(argv, env, fds, lim)
    keep = sock.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, 1 << 20)
    sock.close()
    return argv, code


def run_code(argv, code):
    status = 0
    try:
        if code:
            g = {"__name__": "__main__", "__builtins__": __builtins__}
            exec(compile(code, "<call>", "exec"), g)
        else:
            import runpy
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as e:
        c = e.code
        if c is None:
            status = 0
        elif isinstance(c, int):
            status = c & 0xFF
        else:
            print(c, file=sys.stderr)
            status = 1
    except BaseException:
        import traceback
        traceback.print_exc()
        status = 1
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            pass
    return status


def execute(argv, code):
    os._exit(run_code(argv, code))


def hand_over_namespaces(keep):
    # The zygote holds our mount and IPC namespaces (the fds sit unread in
    # its end of `keep` until it reaped us), so that unmounting our tmpfs
    # (an RCU grace period each) happens after the call, not in our exit.
    fds = [os.open("/proc/self/ns/mnt", os.O_RDONLY), os.open("/proc/self/ns/ipc", os.O_RDONLY)]
    send(keep, b"n", fds)
    for fd in fds:
        os.close(fd)
    keep.close()


REHEARSAL_FILE = "warren-rehearsal"
REHEARSAL_CODE = b"print(sum(range(10)))\n"


def rehearse():
    # A dry run of the call's path, with a call of our own: every page the
    # interpreter writes there (reference counts of the code, modules and
    # objects it uses, the allocator's and libc's state) and every page of
    # code it runs becomes this slot's own now, while the slot waits, and
    # not after the call arrived (a fault traps: about 50 us each on a
    # paravirtualised host); the first slot's pages are learned for every
    # later one (report_hot). The call's own functions run: its message over
    # a socket with fds, a file, stdio, limits (at their hard values:
    # nothing is lowered), environment, compile, exec, print. The call
    # replaces what is left: environment and argv; stdio, the files of
    # /work and the fds are as they were.
    name = REHEARSAL_FILE.encode()
    blob = (b"-c\0PATH=/bin\0HOME=" + WORKDIR.encode() + b"\0" +
            FILEREC.pack(0o644, len(name), 1) + name + b"x" + REHEARSAL_CODE)
    msg = CALL.pack(MAGIC, T_CALL, 0, 0, 0, len(blob), len(REHEARSAL_CODE), 1, 2, 1, 0)
    hard = [max(resource.getrlimit(r)[1], 0) for r in
            (resource.RLIMIT_CPU, resource.RLIMIT_FSIZE, resource.RLIMIT_NOFILE)]
    saved = [os.dup(i) for i in range(3)]
    r, w = os.pipe2(os.O_CLOEXEC)
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    fds = []
    try:
        send(a, msg + blob, [saved[0], w, w])
        argv, env, code, fds, _ = take_call(b)
        apply_call(argv, env, fds, hard)
        for fd in fds:
            os.close(fd)
        fds = []
        run_code(argv, code)
    finally:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
        for i in range(3):
            os.dup2(saved[i], i)
            os.close(saved[i])
        os.close(w)
        # Not blocking: a step that failed may have left a copy of w
        # open (inside take_call), and then no EOF would come.
        os.set_blocking(r, False)
        try:
            os.read(r, 4096)
        except BlockingIOError:
            pass
        os.close(r)
        a.close()
        b.close()
        try:
            os.unlink(REHEARSAL_FILE)
        except OSError:
            pass


def private_maps():
    # Private mappings: a fork shares the writable ones copy-on-write and
    # does not copy the page tables of file-backed read-only ones (code).
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 1 and parts[1][3] == "p" and parts[1][0] == "r":
                a, b = (int(x, 16) for x in parts[0].split("-"))
                out.append((a, b, parts[1][1] == "w"))
    return out


def touched_pages(fd, maps):
    # The pages of maps this process used since its fork: writable ones it
    # wrote (exclusively mapped: copied, or new), read-only ones it mapped.
    # Packed (address, length, advice) runs.
    import array
    runs = []
    try:
        for a, b, w in maps:
            ent = array.array("Q")
            ent.frombytes(os.pread(fd, ((b - a) >> 12) * 8, (a >> 12) * 8))
            want = PM_PRESENT | PM_EXCLUSIVE if w else PM_PRESENT
            adv = MADV_POPULATE_WRITE if w else MADV_POPULATE_READ
            start = len(runs)
            for i, e in enumerate(ent):
                if e & want == want:
                    p = a + (i << 12)
                    if len(runs) > start and p - runs[-1][1] <= HOT_GAP:
                        runs[-1][1] = p + 4096
                    else:
                        runs.append([p, p + 4096, adv])
    finally:
        os.close(fd)
    return b"".join(struct.pack("=QQQ", a, b - a, adv) for a, b, adv in runs)


def unpack_hot(blob):
    n = len(blob) // 24
    return [(ctypes.c_void_p(a), ctypes.c_size_t(ln), adv)
            for a, ln, adv in struct.iter_unpack("=QQQ", blob[:n * 24])]


def report_hot(learn, pagemap, maps):
    try:
        blob = touched_pages(pagemap, maps)
        mv = memoryview(blob)
        while mv:
            mv = mv[os.write(learn, mv):]
    except OSError:
        pass
    os.close(learn)


def slot_main(sock, keep, procs, tmp_bytes, bpf, learn, maps, vclone):
    try:
        slot_setup(procs, tmp_bytes)
        hand_over_namespaces(keep)
        # Opened while we are root: a process that changed its uid is not
        # dumpable and its /proc files are no longer its own.
        pagemap = os.open("/proc/self/pagemap", os.O_RDONLY) if learn >= 0 else -1
        confine(bpf)
        os.chdir(WORKDIR)
        try:
            rehearse()
        except Exception:
            pass  # only speed is lost (test_call_path_prefaulted); the call redoes it all
        if learn >= 0:
            report_hot(learn, pagemap, maps)
        # From here on we are S (or P when there is no S: clone failed).
        flags = PREPARED_HOLDER if vclone is not None and vclone(sock.fileno()) == 0 else 0
        # The host hands calls to prepared slots first; with a holder it
        # watches S (P's only child) instead of P.
        send(sock, PREPARED.pack(MAGIC, T_PREPARED, flags, 0))
        argv, code = run_call(sock)
    except BaseException as e:
        send_error(sock, 0, e)
        os._exit(126)
    execute(argv, code)


def main():
    global LL_FLAGS
    LL_FLAGS = int(sys.argv[1])
    preload = [m for m in sys.argv[2].split(",") if m] if len(sys.argv) > 2 else []
    ctl = socket.socket(fileno=FD_CTL)
    bpf_bytes = os.pread(FD_SECCOMP, os.fstat(FD_SECCOMP).st_size, 0)
    os.close(FD_SECCOMP)
    bpf = ctypes.create_string_buffer(bpf_bytes, len(bpf_bytes))
    try:
        import importlib
        for m in preload:
            importlib.import_module(m)
    except BaseException as e:
        send_error(ctl, 0, OSError(2, "preload %s: %s" % (m, e)))
        return 1
    # Everything imported so far is shared copy-on-write with every slot:
    # keep the collector off those pages (it would copy them in each call).
    import gc
    gc.collect()
    gc.freeze()
    # Functions the slots call through ctypes, looked up once here and not
    # in every slot (a lookup allocates and writes the library's cache).
    for name in ("mount", "unshare", "prctl", "syscall", "setns", "madvise"):
        getattr(libc, name)
    vclone = make_vclone()
    maps = []
    hot = []  # (address, length) runs every slot copies right after its fork
    learn_r = -1
    learn_buf = []
    madvise = libc.madvise
    own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY)
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(w)
    signal.signal(signal.SIGCHLD, lambda *a: None)
    slots = {}
    send(ctl, HDR.pack(MAGIC, T_READY))
    while True:
        try:
            ready, _, _ = select.select([ctl, r] + ([learn_r] if learn_r >= 0 else []), [], [])
        except InterruptedError:
            continue
        if r in ready:
            try:
                while os.read(r, 512):
                    pass
            except BlockingIOError:
                pass
        if learn_r >= 0 and learn_r in ready:
            try:
                chunk = os.read(learn_r, 65536)
            except BlockingIOError:
                chunk = None
            if chunk:
                learn_buf.append(chunk)
            elif chunk is not None and not learn_buf:
                os.close(learn_r)
                learn_r = -1  # that slot died before it reported: the next one
            elif chunk is not None:
                hot = unpack_hot(b"".join(learn_buf))
                os.close(learn_r)
                learn_r = -2  # learned: once per zygote
        while slots:
            try:
                pid, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            entry = slots.pop(pid, None)
            if entry is not None:
                s, keep = entry
                try:
                    send(s, REAPED.pack(MAGIC, T_REAPED, st, 0))
                except OSError:
                    pass
                s.close()
                keep.close()
        if ctl not in ready:
            continue
        data, procs = recv(ctl, MAKE.size, 8)
        if not data:
            return 0
        if len(data) != MAKE.size:
            for fd in procs:
                os.close(fd)
            continue
        magic, kind, slot, tmp_bytes, _, _ = MAKE.unpack(data)
        if magic != MAGIC or kind != T_MAKE:
            continue
        try:
            host_end, slot_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            keep_ours, keep_slot = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            learn_w = -1
            if learn_r == -1:
                maps = private_maps()
                learn_r, learn_w = os.pipe2(os.O_CLOEXEC)
                os.set_blocking(learn_r, False)
            # The next child is PID 1 of a new pid namespace; ours is set
            # back right after, so every slot gets one of its own.
            check(libc.unshare(CLONE_NEWPID), "unshare pid")
            try:
                pid = os.fork()
            except BaseException:
                libc.setns(own_pidns, CLONE_NEWPID)
                raise
            if pid != 0:
                check(libc.setns(own_pidns, CLONE_NEWPID), "setns pid")
            if pid == 0:
                for a, ln, adv in hot:
                    madvise(a, ln, adv)
                ctl.close()
                host_end.close()
                keep_ours.close()
                for s, k in slots.values():
                    s.close()
                    k.close()
                os.close(r)
                os.close(w)
                os.close(own_pidns)
                if learn_r >= 0:
                    os.close(learn_r)
                slot_main(slot_end, keep_slot, procs, tmp_bytes, bpf, learn_w, maps, vclone)
            for fd in procs:
                os.close(fd)
            if learn_w >= 0:
                os.close(learn_w)
            keep_slot.close()
            slots[pid] = (slot_end, keep_ours)
            pidfd = os.pidfd_open(pid)
            send(ctl, SLOT.pack(MAGIC, T_SLOT, slot), [pidfd, host_end.fileno()])
            os.close(pidfd)
            host_end.close()
        except OSError as e:
            for fd in procs:
                try:
                    os.close(fd)
                except OSError:
                    pass
            send_error(ctl, slot, e)


LL_FLAGS = 0
if __name__ == "__main__":
    sys.exit(main())
