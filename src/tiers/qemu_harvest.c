/* CPU and memory harvesting of one QEMU (qemu_harvest.h).
 *
 * Inflating a balloon: the guest is asked for fresh statistics (polling
 * on for the time it takes: an idle guest is not woken every few seconds
 * for them afterwards), the balloon's target is its actual size less what
 * the guest has available (free memory and caches it can drop) plus a
 * headroom, and the call waits (bounded) for the guest to get there so
 * that the bytes it returns are measured, not promised. A guest that
 * answers no statistics keeps its balloon where it is: inflating blind
 * would push it into reclaim of memory it uses. */
#include "tiers/qemu_harvest.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "isolate/cgroup.h"
#include "tiers/qmp.h"

#define QMP_MS 5000
#define BALLOON "/machine/peripheral/balloon0"
#define MIB (1024ull * 1024ull)

int wr_qemu_hv_cpu_time(struct wr_qemu *q, uint64_t *ns, wr_err *err)
{
	if (q->cg == NULL)
		return wr_err_set(err, ENOENT, "QEMU has no cgroup");
	return wr_cgroup_cpu_ns(q->cg, ns, err);
}

int wr_qemu_hv_cpu_share(struct wr_qemu *q, uint64_t weight, bool idle, wr_err *err)
{
	if (q->cg == NULL)
		return wr_err_set(err, ENOENT, "QEMU has no cgroup");
	return wr_cgroup_cpu_share(q->cg, weight, idle, err);
}

static int cmd(const struct wr_qsnap_qmp *m, const char *name, json_t *args, json_t **ret,
	       wr_err *err)
{
	pthread_mutex_lock(m->lock);
	int r = wr_qmp_cmd(m->qmp, name, args, QMP_MS, ret, err);
	pthread_mutex_unlock(m->lock);
	json_decref(args);
	return r < 0 ? wr_err_wrap(err, "QMP %s", name) : 0;
}

static int64_t jnum(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

/* The balloon's actual size (bytes of RAM the guest keeps) and the RAM. */
static int balloon_sizes(const struct wr_qsnap_qmp *m, int64_t *actual, int64_t *ram, wr_err *err)
{
	json_t *r = NULL;
	if (cmd(m, "query-balloon", NULL, &r, err) < 0)
		return -1;
	*actual = jnum(r, "actual");
	json_decref(r);
	r = NULL;
	if (ram) {
		if (cmd(m, "query-memory-size-summary", NULL, &r, err) < 0)
			return -1;
		*ram = jnum(r, "base-memory");
		json_decref(r);
	}
	if (*actual <= 0 || (ram && *ram <= 0))
		return wr_err_set(err, EPROTO, "QEMU reported no balloon size");
	return 0;
}

/* What the guest has available now (bytes), or -1 when it answers no
 * statistics within ~3 s (a guest without the driver, or a busy host).
 * QEMU reports a statistic the guest never sent as 2^64-1 (qmp.c reads
 * it as -1); a report is fresh when its last-update (QEMU's wall clock,
 * seconds) is not before the request. */
static int64_t guest_available(const struct wr_qsnap_qmp *m, wr_err *err)
{
	time_t asked = time(NULL);
	if (cmd(m, "qom-set",
		json_pack("{s:s,s:s,s:i}", "path", BALLOON, "property",
			  "guest-stats-polling-interval", "value", 1),
		NULL, err) < 0)
		return -1;
	int64_t avail = -1;
	for (int i = 0; i < 30 && avail < 0; i++) {
		usleep(100000);
		json_t *r = NULL;
		_cleanup_err_ wr_err e = NULL;
		if (cmd(m, "qom-get",
			json_pack("{s:s,s:s}", "path", BALLOON, "property", "guest-stats"), &r,
			&e) < 0)
			continue;
		if (jnum(r, "last-update") >= (int64_t)asked) {
			json_t *s = json_object_get(r, "stats");
			avail = jnum(s, "stat-available-memory");
			if (avail < 0) {
				int64_t fr = jnum(s, "stat-free-memory"),
					ca = jnum(s, "stat-disk-caches");
				avail = fr < 0 ? 0 : fr + (ca < 0 ? 0 : ca);
			}
		}
		json_decref(r);
	}
	/* polling off again: an idle guest is not woken for statistics */
	_cleanup_err_ wr_err e2 = NULL;
	cmd(m, "qom-set",
	    json_pack("{s:s,s:s,s:i}", "path", BALLOON, "property", "guest-stats-polling-interval",
		      "value", 0),
	    NULL, &e2);
	if (avail < 0)
		wr_err_set(err, ETIMEDOUT, "the guest sent no balloon statistics");
	return avail;
}

static int64_t cg_usage(struct wr_qemu *q)
{
	struct wr_cgroup_stats st;
	_cleanup_err_ wr_err e = NULL;
	if (q->cg == NULL || wr_cgroup_stats(q->cg, &st, &e) < 0)
		return -1;
	return (int64_t)st.memory_current;
}

static int inflate(const struct wr_qsnap_qmp *m, wr_err *err)
{
	int64_t actual, ram;
	if (balloon_sizes(m, &actual, &ram, err) < 0)
		return -1;
	int64_t avail = guest_available(m, err);
	if (avail < 0)
		return -1;
	/* what stays the guest's: a headroom of an eighth of its RAM, at
	 * least 32 MiB (deflate-on-oom gives back more if it needs it) */
	int64_t headroom = ram / 8 > (int64_t)(32 * MIB) ? ram / 8 : (int64_t)(32 * MIB);
	int64_t give = avail - headroom;
	if (give < (int64_t)(4 * MIB))
		return 0;
	int64_t target = actual - give;
	if (target < headroom)
		target = headroom;
	if (cmd(m, "balloon", json_pack("{s:I}", "value", (json_int_t)target), NULL, err) < 0)
		return -1;
	/* the guest inflates at its pace: wait (bounded) so that what the
	 * cgroup gave back is measured after */
	for (int i = 0; i < 30; i++) {
		usleep(100000);
		if (balloon_sizes(m, &actual, NULL, err) < 0)
			return -1;
		if (actual <= target + (int64_t)(4 * MIB))
			break;
	}
	return 0;
}

static int deflate(const struct wr_qsnap_qmp *m, wr_err *err)
{
	int64_t actual, ram;
	if (balloon_sizes(m, &actual, &ram, err) < 0)
		return -1;
	if (actual >= ram)
		return 0;
	return cmd(m, "balloon", json_pack("{s:I}", "value", (json_int_t)ram), NULL, err);
}

int64_t wr_qemu_hv_idle_memory(struct wr_qemu *q, const struct wr_qsnap_qmp *balloon, bool idle,
			       wr_err *err)
{
	if (q->cg == NULL)
		return wr_err_set(err, ENOENT, "QEMU has no cgroup");
	if (!idle) {
		/* the guest's memory back first: the call that woke it runs next */
		int r = balloon && balloon->qmp ? deflate(balloon, err) : 0;
		_cleanup_err_ wr_err e2 = NULL;
		wr_cgroup_idle_memory(q->cg, false, r < 0 ? &e2 : err);
		return r < 0 ? wr_err_wrap(err, "deflate the balloon") : 0;
	}
	int64_t before = cg_usage(q);
	if (balloon && balloon->qmp && inflate(balloon, err) < 0)
		return wr_err_wrap(err, "inflate the balloon");
	int64_t host = wr_cgroup_idle_memory(q->cg, true, err);
	if (host < 0)
		return host;
	int64_t after = cg_usage(q);
	if (before < 0 || after < 0 || after > before)
		return host;
	return before - after > host ? before - after : host;
}
