/* The function tier: a set of pools keyed by (image, language, preloaded
 * modules, tenant). A pool is created on first use; an idle one has its
 * zygote parked (stopped) and restarted by its next call. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "tiers/function_internal.h"

struct pool_entry {
	char *key;
	struct wr_function_pool *pool;
	struct pool_entry *next;
};

struct wr_function_pools {
	pthread_mutex_t lock;
	struct pool_entry *list;
};

int wr_function_pools_new(struct wr_function_pools **out, wr_err *err)
{
	struct wr_function_pools *s = calloc(1, sizeof(*s));
	if (s == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	pthread_mutex_init(&s->lock, NULL);
	*out = s;
	return 0;
}

static char *make_key(const struct wr_function_pool_spec *spec)
{
	struct {
		char *p;
		size_t len;
	} k = {0};
	FILE *f = open_memstream(&k.p, &k.len);
	if (f == NULL)
		return NULL;
	/* NUL separators: no field can contain one. */
	fprintf(f, "%s%c%s%c%s%c%llu%c%llu%c%llu", spec->image ? spec->image : "", 0,
		spec->language ? spec->language : "", 0, spec->tenant ? spec->tenant : "", 0,
		(unsigned long long)spec->memory_bytes, 0, (unsigned long long)spec->pids, 0,
		(unsigned long long)spec->tmp_bytes);
	for (size_t i = 0; i < spec->n_preload; i++)
		fprintf(f, "%c%s", 0, spec->preload[i] ? spec->preload[i] : "");
	fputc(0, f);
	if (fclose(f) != 0) {
		free(k.p);
		return NULL;
	}
	/* Keys are compared with memcmp over len: store the length in front. */
	char *key = malloc(k.len + sizeof(size_t));
	if (key) {
		memcpy(key, &k.len, sizeof(size_t));
		memcpy(key + sizeof(size_t), k.p, k.len);
	}
	free(k.p);
	return key;
}

static bool key_eq(const char *a, const char *b)
{
	size_t la, lb;
	memcpy(&la, a, sizeof(size_t));
	memcpy(&lb, b, sizeof(size_t));
	return la == lb && memcmp(a + sizeof(size_t), b + sizeof(size_t), la) == 0;
}

int wr_function_pools_get(struct wr_function_pools *set, const struct wr_function_pool_spec *spec,
			  struct wr_function_pool **out, wr_err *err)
{
	char *key = make_key(spec);
	if (key == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	pthread_mutex_lock(&set->lock);
	for (struct pool_entry *e = set->list; e; e = e->next) {
		if (key_eq(e->key, key)) {
			*out = e->pool;
			pthread_mutex_unlock(&set->lock);
			free(key);
			return 0;
		}
	}
	/* Created under the set's lock: two first calls for one key must not
	 * start two pools. Other keys wait for this one start only. */
	struct wr_function_pool *p;
	int r = wr_function_pool_create(spec, &p, err);
	struct pool_entry *e = r == 0 ? calloc(1, sizeof(*e)) : NULL;
	if (r == 0 && e == NULL) {
		wr_function_pool_destroy(&p, NULL);
		r = wr_err_set(err, ENOMEM, "out of memory");
	}
	if (r < 0) {
		pthread_mutex_unlock(&set->lock);
		free(key);
		return r;
	}
	e->key = key;
	e->pool = p;
	e->next = set->list;
	set->list = e;
	*out = p;
	pthread_mutex_unlock(&set->lock);
	return 0;
}

int wr_function_pools_reap(struct wr_function_pools *set, uint64_t idle_ms)
{
	int n = 0;
	pthread_mutex_lock(&set->lock);
	for (struct pool_entry *e = set->list; e; e = e->next) {
		if (wr_function_pool_zygote_pid(e->pool) == 0)
			continue;
		if (wr_function_pool_idle_ns(e->pool) >= idle_ms * 1000000ull) {
			wr_function_pool_park(e->pool, NULL);
			n++;
		}
	}
	pthread_mutex_unlock(&set->lock);
	return n;
}

void wr_function_pools_free(struct wr_function_pools **ps)
{
	struct wr_function_pools *s = *ps;
	if (s == NULL)
		return;
	*ps = NULL;
	for (struct pool_entry *e = s->list; e;) {
		struct pool_entry *next = e->next;
		wr_function_pool_destroy(&e->pool, NULL);
		free(e->key);
		free(e);
		e = next;
	}
	pthread_mutex_destroy(&s->lock);
	free(s);
}
