/* Shared between function.c (pools, zygotes, slots), function_call.c (a
 * call) and function_pools.c (the keyed set). */
#ifndef WARREN_TIERS_FUNCTION_INTERNAL_H
#define WARREN_TIERS_FUNCTION_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "isolate/cgroup.h"
#include "isolate/idmap.h"
#include "tiers/function.h"
#include "tiers/function_proto.h"

struct wr_function_globals {
	char *zygote_path;
	char *python_path;
	unsigned spare, max_spare;
	bool ready;
};
extern struct wr_function_globals wr_fn_globals;

/* A call slot: a process the zygote forked ahead of a call, in its leaf. */
struct fn_slot {
	uint64_t id;
	unsigned gen;		/* zygote generation that made it */
	int pidfd;		/* S, from the zygote (host kernel object) */
	int sock;		/* our end of S's socket */
	struct wr_cgroup *leaf; /* S's leaf cgroup */
	uint64_t mem, pids;	/* the leaf's current limits */
	bool low;		/* the leaf still has the preparation's CPU weight */
	bool prepared;		/* S said PREPARED: it waits for its call */
	bool spare_left;	/* when a call took it, another slot was ready or coming */
	/* pidfd: the process that runs the call: S, or S's child when S
	 * said PREPARED with a holder (function_proto.h). */
	int procs[WR_FNP_MAX_PROCS]; /* the leaf's cgroup.procs until MAKE is sent */
	int nprocs;
	uint64_t retired_ns; /* when its call ended (wr_fn_slot_retire) */
	struct fn_slot *next;
};

struct wr_function_pool {
	char id[40];
	char *image, *language, *tenant, *preload_csv;
	uint64_t memory_bytes, pids, tmp_bytes;
	struct wr_idmap idmap;
	bool have_idmap;
	struct wr_cgroup *cg;  /* the pool: its limits */
	struct wr_cgroup *zcg; /* pure v2: the zygote's leaf */
	int lower_fd;	       /* image base mount (detached) */
	int bpf_fd;	       /* memfd: the seccomp program */

	pthread_mutex_t lock; /* everything below */
	int ctl;	      /* control socket; -1: no zygote */
	int zpidfd;
	pid_t zpid;
	unsigned gen, restarts;
	/* Both in the order the zygote answered: a call takes the oldest
	 * prepared slot (function_slots.c). */
	struct fn_slot *ready, **ready_tail, *pending, **pending_tail;
	struct fn_slot *retired; /* used slots whose leaf is to recycle or remove */
	unsigned nready, npending, inflight, spare;
	uint64_t next_slot, last_used_ns;
	bool destroyed;
	/* The refill thread: forks spares ahead, collects their SLOT answers
	 * and recycles (or removes) used leaves, off the path of every call. */
	pthread_t refill;
	bool refill_running, refill_stop;
	unsigned broken_gen; /* the zygote of this generation stopped answering */
	int wake;	     /* eventfd: work for the refill thread */
	int devnull;	     /* stdin of calls without one */

	/* Leaves of finished calls kept for the next slots of this pool (one
	 * tenant's): the refill thread readies them (wr_cgroup_leaf_recycle)
	 * instead of an rmdir and a mkdir per call. Their own lock:
	 * leaf_prepare runs with and without the pool lock. */
	pthread_mutex_t leaves_lock;
	struct fn_slot *leaves; /* pidfd, sock -1; leaf, mem, pids kept */
	unsigned nleaves;
	uint64_t leaves_made, leaves_reused;
};

/* At most this many recycled leaves wait per pool; a leaf is reused only
 * when at most WR_FN_LEAF_MAX_LEFT bytes are still charged to it. */
#define WR_FN_KEEP_LEAVES 8
#define WR_FN_LEAF_MAX_LEFT (1ull << 20)

/* function.c: zygotes (pool lock held) */
int wr_fn_zygote_start(struct wr_function_pool *p, wr_err *err);
void wr_fn_zygote_stop(struct wr_function_pool *p);
bool wr_fn_zygote_alive(struct wr_function_pool *p);
void wr_fn_slots_drop(struct fn_slot **list);
/* Used slots of finished calls: their leaves kept for later slots of p when
 * ready for another call, else removed (the refill thread, no pool lock).
 * A leaf a process of the call is still leaving (a Python holder's exit)
 * goes back to p->retired for up to WR_FN_LEAF_WAIT_NS after the call's
 * end; returns how many went back (the caller looks again soon). */
unsigned wr_fn_slots_recycle(struct wr_function_pool *p, struct fn_slot **list);
#define WR_FN_LEAF_WAIT_NS 1000000000ull

/* function_slots.c */
/* Take (a recycled one) or make a slot's leaf and send its MAKE (pool lock
 * held). */
int wr_fn_make_send(struct wr_function_pool *p, wr_err *err);
/* The refill thread of a pool (arg: the pool). */
void *wr_fn_refill_main(void *arg);
int wr_fn_take_slot(struct wr_function_pool *p, struct fn_slot **out, wr_err *err);
/* After a call took its slot (or returned it used): the refill thread keeps
 * spares forked ahead and recycles used leaves. One eventfd write. */
void wr_fn_top_up(struct wr_function_pool *p);
void wr_fn_slot_free(struct fn_slot *s, bool kill);
/* Wait (until deadline, ns) for a taken slot's PREPARED, so that the call
 * goes to the process that runs it (a holder's child). Without PREPARED
 * (the slot failed: its ERROR or exit is the call's to report) it returns
 * 0; -1 when the slot said PREPARED but cannot be used (its holder's child
 * is not to be found). */
int wr_fn_slot_await_prepared(struct fn_slot *s, uint64_t deadline);
/* CPU weights of a slot's leaf: while it is prepared (it yields to calls
 * that run) and once its call starts. */
#define WR_FN_WEIGHT_PREP 1
#define WR_FN_WEIGHT_CALL 100
#define WR_FN_ZYGOTE_NICE 19
/* A used slot: its leaf is recycled or removed by the refill thread (off
 * the path of the call that returns now). */
void wr_fn_slot_retire(struct wr_function_pool *p, struct fn_slot *s);
/* True (and the zygote marked for replacement) when the zygote of
 * generation gen is dead or dies within a short grace period. */
bool wr_fn_zygote_died(struct wr_function_pool *p, unsigned gen);
void wr_fn_call_done(struct wr_function_pool *p);

/* Phase accounting (wr_function_phases): wr_fn_phases_on() is false unless
 * WARREN_FN_PHASES was set at the first call. */
bool wr_fn_phases_on(void);
void wr_fn_phase_add(enum wr_fn_phase ph, uint64_t ns);
void wr_fn_phase_count(bool unprepared);

/* Messages with fds (SOCK_SEQPACKET). */
int wr_fn_send(int sock, const void *buf, size_t len, const int *fds, int nfds);
ssize_t wr_fn_recv(int sock, void *buf, size_t len, int *fds, int *nfds, int max, int flags);

#endif
