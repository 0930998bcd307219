/* The function tier's wire format between the host (function.c), a zygote
 * (src/agent/warren-zygote.c, or the Python server warren-pyzygote.py) and
 * the call slots a zygote forks. Every message is one SOCK_SEQPACKET
 * datagram; fds travel with it as SCM_RIGHTS. Native byte order, fixed-size
 * little structs (the Python side packs the same layouts with struct).
 *
 *   control socket (host <-> zygote, fd 3 of the zygote)
 *     host -> zygote  MAKE  {slot, tmp_bytes, nprocs}  fds: the slot's leaf
 *                           cgroup.procs files (one per hierarchy)
 *     zygote -> host  SLOT  {slot}  fds: pidfd of the slot process S, the
 *                           host's end of S's socket
 *                     ERROR {slot, errnum, msg}  S could not be made
 *   slot socket (host <-> S; the zygote keeps a copy of S's end)
 *     host -> S       CALL  header + payload  fds: stdin, stdout, stderr
 *                           [, payload memfd when WR_FNP_PAYLOAD_FD]
 *     S -> host       PREPARED {flags}  S is confined and waits for its
 *                           call (sent once, before it blocks on CALL: the
 *                           host hands a call to a prepared slot first).
 *                           WR_FNP_PREPARED_HOLDER: S became a holder, its
 *                           only child runs the call (same memory, same
 *                           confinement) and S exits after it; the host
 *                           watches that child (found from the kernel:
 *                           S's children), not S.
 *                     ERROR {errnum, msg}  set-up or exec failed (S then
 *                           exits 126/127)
 *     zygote -> host  REAPED {status}  the zygote reaped S (wait status);
 *                           then the zygote closes its copy. The host takes
 *                           the status from the kernel (PIDFD_INFO_EXIT),
 *                           not from this message.
 */
#ifndef WARREN_TIERS_FUNCTION_PROTO_H
#define WARREN_TIERS_FUNCTION_PROTO_H

#include <stdint.h>

#define WR_FNP_MAGIC 0x314e4657u /* "WFN1" */

enum wr_fnp_type {
	WR_FNP_MAKE = 1,
	WR_FNP_SLOT = 2,
	WR_FNP_ERROR = 3,
	WR_FNP_CALL = 4,
	WR_FNP_REAPED = 5,
	WR_FNP_READY = 6,    /* zygote -> host once, when it serves (or ERROR) */
	WR_FNP_PREPARED = 7, /* slot -> host once, when it waits for its call */
};

/* Fixed fds of a zygote process (set up before it execs). */
#define WR_FNP_FD_CTL 3	     /* control socket */
#define WR_FNP_FD_LANDLOCK 4 /* Landlock ruleset of every call */
#define WR_FNP_FD_SECCOMP 5  /* memfd: the seccomp program (struct sock_filter[]) */

/* Every call runs as this uid/gid inside the pool's user namespace. */
#define WR_FNP_CALL_UID 1000
#define WR_FNP_WORKDIR "/work"

#define WR_FNP_MAX_PROCS 8
#define WR_FNP_INLINE_MAX 49152 /* payloads above go in a memfd */

struct wr_fnp_hdr {
	uint32_t magic;
	uint32_t type;
};

struct wr_fnp_make {
	struct wr_fnp_hdr h;
	uint64_t slot;
	uint64_t tmp_bytes; /* size of each fresh tmpfs: /tmp, /work, /dev/shm */
	uint32_t nprocs;
	uint32_t pad;
};

#define WR_FNP_PREPARED_HOLDER 1u
struct wr_fnp_prepared {
	struct wr_fnp_hdr h;
	uint32_t flags;
	uint32_t pad;
};

struct wr_fnp_slot {
	struct wr_fnp_hdr h;
	uint64_t slot;
};

struct wr_fnp_error {
	struct wr_fnp_hdr h;
	uint64_t slot;
	int32_t errnum;
	char msg[480];
};

#define WR_FNP_PAYLOAD_FD 1u /* the payload is in a memfd, not inline */

/* Payload: argc NUL-terminated strings, envc strings ("K=V"), then nfiles
 * records {u32 mode, u32 name_len, u64 data_len, name, data}, then code_len
 * bytes of source code (interpreter zygotes; argv is then sys.argv). */
struct wr_fnp_call {
	struct wr_fnp_hdr h;
	uint64_t cpu_secs; /* RLIMIT_CPU, 0 = none */
	uint64_t fsize;	   /* RLIMIT_FSIZE, 0 = none */
	uint64_t nofile;   /* RLIMIT_NOFILE */
	uint64_t payload_len;
	uint64_t code_len;
	uint32_t argc, envc, nfiles, flags;
};

struct wr_fnp_reaped {
	struct wr_fnp_hdr h;
	int32_t status;
	int32_t pad;
};

struct wr_fnp_file_rec {
	uint32_t mode;
	uint32_t name_len;
	uint64_t data_len;
};

#endif
