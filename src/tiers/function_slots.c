/* The function tier's call slots (host side): making them ahead of the
 * calls (a leaf cgroup, new or recycled, then MAKE to the zygote, SLOT
 * back), handing one to a call, and the refill thread that keeps spares
 * forked and recycles (or removes) the leaves of finished calls. Pools and
 * zygotes: function.c. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/util.h"
#include "tiers/function_internal.h"
#include "tiers/function_proto.h"

/* ---- slots (pool lock held) ------------------------------------------------ */

void wr_fn_slot_free(struct fn_slot *s, bool kill)
{
	if (s == NULL)
		return;
	for (int i = 0; i < s->nprocs; i++)
		close(s->procs[i]);
	if (s->pidfd >= 0) {
		if (kill)
			wr_pidfd_send_signal(s->pidfd, SIGKILL, NULL, 0);
		close(s->pidfd);
	}
	if (s->sock >= 0)
		close(s->sock);
	if (s->leaf) {
		if (kill)
			wr_cgroup_kill(s->leaf, NULL);
		wr_cgroup_destroy(&s->leaf, NULL);
	}
	free(s);
}

/* The leaf's limits before a call asks for its own (function_call.c). */
#define SLOT_MEM_DEFAULT (256ull << 20)
#define SLOT_PIDS_DEFAULT 64

/* A new slot with a leaf of its own: made now. */
static struct fn_slot *leaf_new(struct wr_function_pool *p, wr_err *err)
{
	struct fn_slot *s = calloc(1, sizeof(*s));
	if (s == NULL) {
		wr_err_set(err, ENOMEM, "out of memory");
		return NULL;
	}
	s->pidfd = s->sock = -1;
	s->id = __atomic_add_fetch(&p->next_slot, 1, __ATOMIC_RELAXED);
	char name[32];
	snprintf(name, sizeof(name), "c-%llu", (unsigned long long)s->id);
	if (wr_cgroup_create_leaf(p->cg, name, &s->leaf, err) < 0) {
		free(s);
		return NULL;
	}
	struct wr_cgroup_limits lim;
	wr_cgroup_limits_default(&lim);
	lim.memory_bytes = s->mem = SLOT_MEM_DEFAULT;
	lim.pids = s->pids = SLOT_PIDS_DEFAULT;
	if (wr_cgroup_set_limits(s->leaf, &lim, err) < 0) {
		wr_fn_slot_free(s, false);
		return NULL;
	}
	pthread_mutex_lock(&p->leaves_lock);
	p->leaves_made++;
	pthread_mutex_unlock(&p->leaves_lock);
	return s;
}

/* A new slot in the leaf of a finished call (wr_fn_slots_recycle), its
 * limits back to the defaults; NULL when none is kept. The leaf keeps its
 * name (c-<first slot's id>); the slot gets an id of its own. */
static struct fn_slot *leaf_reuse(struct wr_function_pool *p)
{
	pthread_mutex_lock(&p->leaves_lock);
	struct fn_slot *s = p->leaves;
	if (s) {
		p->leaves = s->next;
		p->nleaves--;
	}
	pthread_mutex_unlock(&p->leaves_lock);
	if (s == NULL)
		return NULL;
	s->next = NULL;
	s->id = __atomic_add_fetch(&p->next_slot, 1, __ATOMIC_RELAXED);
	if (s->mem != SLOT_MEM_DEFAULT || s->pids != SLOT_PIDS_DEFAULT) {
		struct wr_cgroup_limits lim;
		wr_cgroup_limits_default(&lim);
		lim.memory_bytes = SLOT_MEM_DEFAULT;
		lim.pids = SLOT_PIDS_DEFAULT;
		if (wr_cgroup_set_limits(s->leaf, &lim, NULL) < 0) {
			wr_fn_slot_free(s, true);
			return NULL;
		}
		s->mem = SLOT_MEM_DEFAULT;
		s->pids = SLOT_PIDS_DEFAULT;
	}
	pthread_mutex_lock(&p->leaves_lock);
	p->leaves_reused++;
	pthread_mutex_unlock(&p->leaves_lock);
	return s;
}

/* A slot's leaf with its limits and its cgroup.procs fds, without the
 * pool lock (the refill thread makes leaves while calls take slots). */
static struct fn_slot *leaf_prepare(struct wr_function_pool *p, wr_err *err)
{
	struct fn_slot *s = leaf_reuse(p);
	if (s == NULL && (s = leaf_new(p, err)) == NULL)
		return NULL;
	int np = wr_cgroup_procs_fds(s->leaf, false, s->procs, WR_FNP_MAX_PROCS, err);
	if (np < 0) {
		wr_fn_slot_free(s, false);
		return NULL;
	}
	s->nprocs = np;
	/* Preparing a slot is work ahead of time: it yields the CPU to calls
	 * that run; the call's start raises the weight (function_call.c).
	 * Best effort: a host without the cpu controller has no weights. */
	struct wr_cgroup_limits lim;
	wr_cgroup_limits_default(&lim);
	lim.cpu_weight = WR_FN_WEIGHT_PREP;
	s->low = wr_cgroup_set_limits(s->leaf, &lim, NULL) == 0;
	return s;
}

/* Put s on the kept leaves (leaf) or back on the retired slots, only while
 * the pool has a zygote: a pool parked or destroyed meanwhile keeps no
 * leaf. false: not put (the caller frees s). Lock order: the pool's, then
 * the leaves'. */
static bool keep_while_live(struct wr_function_pool *p, struct fn_slot *s, bool leaf)
{
	pthread_mutex_lock(&p->lock);
	bool live = p->ctl >= 0 && !p->destroyed;
	if (live && leaf) {
		pthread_mutex_lock(&p->leaves_lock);
		s->next = p->leaves;
		p->leaves = s;
		p->nleaves++;
		pthread_mutex_unlock(&p->leaves_lock);
	} else if (live) {
		s->next = p->retired;
		p->retired = s;
	}
	pthread_mutex_unlock(&p->lock);
	return live;
}

unsigned wr_fn_slots_recycle(struct wr_function_pool *p, struct fn_slot **list)
{
	unsigned waiting = 0;
	uint64_t now = wr_now_ns();
	while (*list) {
		struct fn_slot *s = *list;
		*list = s->next;
		s->next = NULL;
		/* A slot whose MAKE was never sent: nothing joined its leaf. */
		for (int i = 0; i < s->nprocs; i++)
			close(s->procs[i]);
		s->nprocs = 0;
		pthread_mutex_lock(&p->leaves_lock);
		bool room = p->nleaves < WR_FN_KEEP_LEAVES;
		pthread_mutex_unlock(&p->leaves_lock);
		/* Invariant: the slot's process is gone (its pidfd said so, or
		 * it never existed) and the recycle checks that no process at
		 * all is in the leaf (a Python holder, PID 1 of the call's pid
		 * namespace, can outlive the call by a moment: such a leaf
		 * goes). */
		if (room && s->pidfd < 0 && s->sock < 0 && s->retired_ns &&
		    now - s->retired_ns < WR_FN_LEAF_WAIT_NS &&
		    wr_cgroup_nprocs(s->leaf, NULL) > 0) {
			if (keep_while_live(p, s, false))
				waiting++;
			else
				wr_fn_slot_free(s, true);
			continue;
		}
		if (!room || s->pidfd >= 0 || s->sock >= 0 ||
		    wr_cgroup_leaf_recycle(s->leaf, WR_FN_LEAF_MAX_LEFT, NULL) != 1) {
			wr_fn_slot_free(s, true);
			continue;
		}
		s->prepared = s->spare_left = s->low = false;
		s->gen = 0;
		s->retired_ns = 0;
		if (!keep_while_live(p, s, true))
			wr_fn_slot_free(s, true);
	}
	return waiting;
}

/* Send the MAKE of a prepared slot (pool lock held); on failure the
 * caller frees s. */
static int make_commit(struct wr_function_pool *p, struct fn_slot *s, wr_err *err)
{
	s->gen = p->gen;
	struct wr_fnp_make mk = {.h = {WR_FNP_MAGIC, WR_FNP_MAKE},
				 .slot = s->id,
				 .tmp_bytes = p->tmp_bytes,
				 .nprocs = (uint32_t)s->nprocs};
	int r = wr_fn_send(p->ctl, &mk, sizeof(mk), s->procs, s->nprocs);
	if (r < 0)
		/* EPIPE: the zygote is exiting (its pidfd turns readable only once
		 * its pid namespace is empty). */
		return wr_err_set(err, ECHILD, "function zygote died: %s", strerror(-r));
	for (int i = 0; i < s->nprocs; i++)
		close(s->procs[i]);
	s->nprocs = 0;
	*p->pending_tail = s;
	p->pending_tail = &s->next;
	p->npending++;
	return 0;
}

/* Send a MAKE: the leaf is made now, the slot arrives later (SLOT). */
int wr_fn_make_send(struct wr_function_pool *p, wr_err *err)
{
	struct fn_slot *s = leaf_prepare(p, err);
	if (s == NULL)
		return -1;
	int r = make_commit(p, s, err);
	if (r < 0)
		wr_fn_slot_free(s, false);
	return r;
}

/* Receive one SLOT (or ERROR) for the oldest pending MAKE. wait: block. */
static int make_recv(struct wr_function_pool *p, bool wait, wr_err *err)
{
	struct wr_fnp_error msg;
	int fds[2], nfds;
	ssize_t n = wr_fn_recv(p->ctl, &msg, sizeof(msg), fds, &nfds, 2, wait ? 0 : MSG_DONTWAIT);
	if (n == -EAGAIN)
		return 0;
	struct fn_slot *s = p->pending;
	if (n <= 0 || s == NULL) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		return wr_err_set(err, ECHILD, "function zygote died");
	}
	p->pending = s->next;
	if (p->pending == NULL)
		p->pending_tail = &p->pending;
	p->npending--;
	s->next = NULL;
	if (msg.h.type == WR_FNP_SLOT && nfds == 2 && msg.slot == s->id) {
		s->pidfd = fds[0];
		s->sock = fds[1];
		*p->ready_tail = s;
		p->ready_tail = &s->next;
		p->nready++;
		return 1;
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	wr_fn_slot_free(s, true);
	if (msg.h.type == WR_FNP_ERROR) {
		msg.msg[sizeof(msg.msg) - 1] = 0;
		return wr_err_set(err, msg.errnum > 0 ? msg.errnum : EIO, "call slot: %s", msg.msg);
	}
	return wr_err_set(err, EPROTO, "call slot: unexpected answer from the zygote");
}

static void boost(struct wr_function_pool *p, bool on)
{
	if (p->zpid > 0)
		setpriority(PRIO_PROCESS, (id_t)p->zpid, on ? 0 : WR_FN_ZYGOTE_NICE);
	if (!on)
		return;
	struct wr_cgroup_limits lim;
	wr_cgroup_limits_default(&lim);
	lim.cpu_weight = WR_FN_WEIGHT_CALL;
	for (struct fn_slot *s = p->pending; s; s = s->next)
		if (s->low && wr_cgroup_set_limits(s->leaf, &lim, NULL) == 0)
			s->low = false;
}

/* A holder slot: from now on s->pidfd is its only child, the process that
 * runs the call. Found through the kernel (the holder's children, while the
 * holder lives: a pid that is its child is not recycled), not taken from
 * the slot's word. */
static int holder_child(struct fn_slot *s)
{
	struct wr_pidfd_info info = {.mask = WR_PIDFD_INFO_PID};
	if (ioctl(s->pidfd, WR_PIDFD_GET_INFO, &info) < 0 || !(info.mask & WR_PIDFD_INFO_PID) ||
	    info.pid == 0)
		return -1;
	char path[80];
	snprintf(path, sizeof(path), "/proc/%u/task/%u/children", info.pid, info.pid);
	_cleanup_free_ char *kids = NULL;
	if (wr_read_file_at(AT_FDCWD, path, &kids, 4096, NULL) < 0)
		return -1;
	char *end;
	long child = strtol(kids, &end, 10);
	if (end == kids || child <= 0 || strtol(end, NULL, 10) != 0)
		return -1; /* none, or more than one */
	int cfd = wr_pidfd_open((pid_t)child, 0);
	if (cfd < 0)
		return -1;
	struct wr_pidfd_info ci = {.mask = WR_PIDFD_INFO_PID};
	struct pollfd pf = {.fd = s->pidfd, .events = POLLIN};
	if (ioctl(cfd, WR_PIDFD_GET_INFO, &ci) < 0 || ci.ppid != info.pid || poll(&pf, 1, 0) != 0) {
		close(cfd);
		return -1;
	}
	close(s->pidfd);
	s->pidfd = cfd;
	return 0;
}

/* Is the slot's process alive and without a call? 1: and prepared (it
 * said PREPARED: confined, waiting for its call), 0: still preparing, -1:
 * unusable (dead, or it sent an error: its set-up failed). */
static int slot_state(struct fn_slot *s)
{
	struct pollfd pf = {.fd = s->pidfd, .events = POLLIN};
	if (poll(&pf, 1, 0) != 0)
		return -1;
	while (!s->prepared) {
		struct wr_fnp_prepared m;
		ssize_t n = wr_fn_recv(s->sock, &m, sizeof(m), NULL, NULL, 0, MSG_DONTWAIT);
		if (n == -EAGAIN)
			return 0;
		if (n < (ssize_t)sizeof(m.h) || m.h.magic != WR_FNP_MAGIC ||
		    m.h.type != WR_FNP_PREPARED)
			return -1;
		if (n >= (ssize_t)sizeof(m) && (m.flags & WR_FNP_PREPARED_HOLDER) &&
		    holder_child(s) < 0)
			return -1;
		s->prepared = true;
	}
	return 1;
}

int wr_fn_slot_await_prepared(struct fn_slot *s, uint64_t deadline)
{
	while (!s->prepared) {
		uint64_t now = wr_now_ns();
		if (now >= deadline)
			return 0;
		struct pollfd pf[2] = {{.fd = s->sock, .events = POLLIN},
				       {.fd = s->pidfd, .events = POLLIN}};
		int ms = (int)((deadline - now + 999999) / 1000000);
		if (poll(pf, 2, ms) <= 0 || pf[1].revents)
			return 0;
		struct wr_fnp_hdr h;
		ssize_t n = wr_fn_recv(s->sock, &h, sizeof(h), NULL, NULL, 0, MSG_PEEK);
		if (n < (ssize_t)sizeof(h) || h.type != WR_FNP_PREPARED)
			return 0; /* an ERROR (or EOF): the call reports it */
		if (slot_state(s) < 0)
			return -1;
	}
	return 0;
}

/* Unlink the ready slot *at (pool lock held). */
static struct fn_slot *ready_unlink(struct wr_function_pool *p, struct fn_slot **at)
{
	struct fn_slot *s = *at;
	*at = s->next;
	if (p->ready_tail == &s->next)
		p->ready_tail = at;
	p->nready--;
	s->next = NULL;
	return s;
}

/* The oldest prepared slot, else the oldest one still preparing (it was
 * made first, so it is done first); unusable ones are dropped. Handing a
 * call to a slot that still mounts, unshares and confines itself (with the
 * preparation's low CPU weight) would put all of that on the call's path. */
static struct fn_slot *ready_pick(struct wr_function_pool *p)
{
	struct fn_slot **first = NULL;
	for (struct fn_slot **at = &p->ready; *at;) {
		int st = (*at)->gen == p->gen ? slot_state(*at) : -1;
		if (st < 0) {
			wr_fn_slot_free(ready_unlink(p, at), true);
			continue;
		}
		if (st > 0)
			return ready_unlink(p, at);
		if (first == NULL)
			first = at;
		at = &(*at)->next;
	}
	return first ? ready_unlink(p, first) : NULL;
}

int wr_fn_take_slot(struct wr_function_pool *p, struct fn_slot **out, wr_err *err)
{
	pthread_mutex_lock(&p->lock);
	int r = 0;
	if (p->destroyed) {
		r = wr_err_set(err, ESRCH, "function pool was destroyed");
		goto out;
	}
	for (int attempt = 0;; attempt++) {
		if (p->ctl >= 0 && !wr_fn_zygote_alive(p)) {
			wr_fn_zygote_stop(p);
			p->restarts++;
		}
		if (p->ctl < 0 && (r = wr_fn_zygote_start(p, err)) < 0)
			goto out;
		struct fn_slot *s = ready_pick(p);
		if (s) {
			s->spare_left = p->nready + p->npending > 0;
			p->inflight++;
			p->last_used_ns = wr_now_ns();
			/* Demand: keep as many spares as calls run at once. */
			if (p->inflight > p->spare && p->spare < wr_fn_globals.max_spare)
				p->spare++;
			*out = s;
			goto out;
		}
		wr_err e2 = NULL;
		r = p->npending == 0 ? wr_fn_make_send(p, &e2) : 0;
		if (r == 0) {
			/* A call waits for this slot: no longer work ahead of time.
			 * The zygote (our child: its pid is ours until we reap it) and
			 * the leaves being prepared get a call's share meanwhile. */
			boost(p, true);
			r = make_recv(p, true, &e2);
			boost(p, false);
		}
		if (r < 0) {
			/* The zygote died under us: once more with a new one. */
			if (wr_err_code(e2) == ECHILD && attempt < 2) {
				wr_err_free(&e2);
				wr_fn_zygote_stop(p);
				p->restarts++;
				continue;
			}
			r = wr_err_set(err, wr_err_code(e2), "%s", e2->msg);
			wr_err_free(&e2);
			goto out;
		}
	}
out:
	pthread_mutex_unlock(&p->lock);
	return r < 0 ? wr_err_wrap(err, "function pool %s", p->id) : 0;
}

void wr_fn_slot_retire(struct wr_function_pool *p, struct fn_slot *s)
{
	if (s->pidfd >= 0)
		close(s->pidfd);
	if (s->sock >= 0)
		close(s->sock);
	s->pidfd = s->sock = -1;
	s->retired_ns = wr_now_ns();
	pthread_mutex_lock(&p->lock);
	s->next = p->retired;
	p->retired = s;
	pthread_mutex_unlock(&p->lock);
	wr_fn_top_up(p);
}

void wr_fn_top_up(struct wr_function_pool *p)
{
	uint64_t one = 1;
	ssize_t n;
	do
		n = write(p->wake, &one, sizeof(one));
	while (n < 0 && errno == EINTR);
}

/* The refill thread. Invariant: the control socket is read under the pool
 * lock only (here without waiting, in wr_fn_take_slot waiting), so SLOT
 * answers are matched to pending MAKEs in order; this thread only polls it
 * outside the lock. A poll on a socket closed meanwhile (zygote replaced)
 * at worst wakes us for nothing: every read goes to the current p->ctl. */
void *wr_fn_refill_main(void *arg)
{
	struct wr_function_pool *p = arg;
	for (;;) {
		pthread_mutex_lock(&p->lock);
		if (p->refill_stop) {
			pthread_mutex_unlock(&p->lock);
			return NULL;
		}
		unsigned need = 0;
		if (p->ctl >= 0 && p->broken_gen != p->gen) {
			int r = 1;
			wr_err e = NULL;
			while (p->npending && (r = make_recv(p, false, &e)) > 0)
				;
			/* A dead zygote: the next call replaces it (wr_fn_take_slot). */
			if (r < 0 && wr_err_code(e) == ECHILD)
				p->broken_gen = p->gen;
			wr_err_free(&e);
			if (p->broken_gen != p->gen && p->nready + p->npending < p->spare)
				need = p->spare - p->nready - p->npending;
		}
		struct fn_slot *dead = steal_ptr(&p->retired);
		pthread_mutex_unlock(&p->lock);
		struct timespec c0;
		bool phases = wr_fn_phases_on() && clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0) == 0;
		/* Leaves of finished calls and of the next slots, while calls run
		 * and without the lock (a call that takes a slot never waits for
		 * a mkdir or rmdir). */
		unsigned waiting = wr_fn_slots_recycle(p, &dead);
		struct fn_slot *made = NULL;
		for (unsigned i = 0; i < need; i++) {
			struct fn_slot *s = leaf_prepare(p, NULL);
			if (s == NULL)
				break;
			s->next = made;
			made = s;
		}
		pthread_mutex_lock(&p->lock);
		while (made && p->ctl >= 0 && p->broken_gen != p->gen && !p->refill_stop &&
		       p->nready + p->npending < p->spare) {
			struct fn_slot *s = made;
			made = s->next;
			s->next = NULL;
			wr_err e = NULL;
			if (make_commit(p, s, &e) < 0) {
				if (wr_err_code(e) == ECHILD)
					p->broken_gen = p->gen;
				wr_err_free(&e);
				s->next = made;
				made = s;
				break;
			}
		}
		int ctl = p->ctl;
		bool wait_ctl = ctl >= 0 && p->broken_gen != p->gen && p->npending > 0;
		pthread_mutex_unlock(&p->lock);
		wr_fn_slots_recycle(p, &made); /* not needed after all */
		struct timespec c1;
		if (phases && clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1) == 0)
			wr_fn_phase_add(WR_FN_PH_REFILL_CPU,
					(uint64_t)((c1.tv_sec - c0.tv_sec) * 1000000000ll +
						   (c1.tv_nsec - c0.tv_nsec)));
		struct pollfd pf[2] = {{.fd = p->wake, .events = POLLIN},
				       {.fd = wait_ctl ? ctl : -1, .events = POLLIN}};
		/* A leaf still being left: looked at again in 10 ms. */
		int wait_ms = waiting ? 10 : wait_ctl ? 1000 : -1;
		if (poll(pf, 2, wait_ms) > 0 && (pf[0].revents & POLLIN)) {
			uint64_t v;
			if (read(p->wake, &v, sizeof(v)) < 0) {
				/* EAGAIN: another read took it; nothing lost. */
			}
		}
	}
}

void wr_fn_call_done(struct wr_function_pool *p)
{
	pthread_mutex_lock(&p->lock);
	p->inflight--;
	p->last_used_ns = wr_now_ns();
	pthread_mutex_unlock(&p->lock);
}

bool wr_fn_zygote_died(struct wr_function_pool *p, unsigned gen)
{
	pthread_mutex_lock(&p->lock);
	bool dead = p->gen != gen || p->ctl < 0;
	if (!dead) {
		/* Its pidfd turns readable once its pid namespace is empty, which
		 * is just after the calls it took along died. */
		struct pollfd pf = {.fd = p->zpidfd, .events = POLLIN};
		dead = poll(&pf, 1, 500) > 0;
		if (dead) {
			wr_fn_zygote_stop(p);
			p->restarts++;
		}
	}
	pthread_mutex_unlock(&p->lock);
	return dead;
}
