/* wr-lazytool: drives the lazy client (src/image/lazy.h) and the store's
 * acquire through its hooks, for tests/integration/test_lazy.py and the
 * image benchmark. Not installed.
 *
 *   wr-lazytool [opts] STORE RUN acquire REF HOLDER   prints path=, complete=
 *   wr-lazytool [opts] STORE RUN release DIGEST HOLDER
 *   wr-lazytool [opts] STORE RUN register DIGEST SIZE REFERENCE   prints path=
 *   wr-lazytool [opts] STORE RUN stats [DIGEST]        prints key=value lines
 *   wr-lazytool [opts] STORE RUN events SINCE          one line per event
 *   wr-lazytool [opts] STORE RUN cache-bytes | trim WANT | forget DIGEST
 *   wr-lazytool [opts] STORE RUN ensure | pid | stop
 *   wr-lazytool [opts] STORE RUN gc TARGET_BYTES       the store's gc, prints the report
 * opts: --lazyfs PATH --chunk-size N --fetch-all --insecure
 *       --range-timeout-ms N --connect-timeout-ms N --retries N
 * Errors: one line on stderr, exit 1 ("ENAME: message"). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "image/image.h"
#include "image/lazy.h"

static int fail(wr_err e)
{
	const char *n = strerrorname_np(wr_err_code(e));
	fprintf(stderr, "%s: %s\n", n ? n : "E?", e && e->msg ? e->msg : "error");
	return 1;
}

static void on_event(void *ctx, uint64_t seq, int64_t t, const char *type, const char *digest,
		     const char *msg)
{
	(void)ctx;
	printf("%" PRIu64 " %" PRId64 " %s %s %s\n", seq, t, type, digest, msg);
}

static uint64_t num(const char *s)
{
	uint64_t v = 0;
	if (wr_parse_size(s, &v) < 0) {
		fprintf(stderr, "EINVAL: not a size: %s\n", s);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	struct wr_lazy_opts o = {0};
	static const struct option lo[] = {
	    {"lazyfs", 1, 0, 'l'},	     {"chunk-size", 1, 0, 'c'},
	    {"fetch-all", 0, 0, 'a'},	     {"insecure", 0, 0, 'k'},
	    {"range-timeout-ms", 1, 0, 'R'}, {"connect-timeout-ms", 1, 0, 'T'},
	    {"retries", 1, 0, 'y'},	     {0, 0, 0, 0},
	};
	int c;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'l': o.lazyfs_path = optarg; break;
		case 'c': o.chunk_size = (uint32_t)num(optarg); break;
		case 'a': o.fetch_all = true; break;
		case 'k': o.insecure = true; break;
		case 'R': o.range_timeout_ms = (unsigned)num(optarg); break;
		case 'T': o.connect_timeout_ms = (unsigned)num(optarg); break;
		case 'y': o.retries = (unsigned)num(optarg); break;
		default: return 2;
		}
	}
	if (argc - optind < 3) {
		fprintf(stderr, "usage: wr-lazytool [opts] STORE RUN CMD [ARGS]\n");
		return 2;
	}
	o.store_dir = argv[optind];
	o.run_dir = argv[optind + 1];
	const char *cmd = argv[optind + 2];
	char **a = argv + optind + 3;
	int na = argc - optind - 3;
	wr_err err = NULL;
	struct wr_lazy *l = NULL;
	if (wr_lazy_open(&o, &l, &err) < 0)
		return fail(err);
	int rc = 0;
	if (strcmp(cmd, "register") == 0 && na == 3) {
		_cleanup_free_ char *path = NULL;
		if (wr_lazy_register(l, a[0], num(a[1]), a[2], &path, &err) < 0)
			rc = fail(err);
		else
			printf("path=%s\n", path);
	} else if (strcmp(cmd, "stats") == 0 && na <= 1) {
		struct wr_lazy_stats s;
		if (wr_lazy_stats(l, na ? a[0] : NULL, &s, &err) < 0)
			rc = fail(err);
		else
			printf("bytes_fetched=%" PRIu64 "\nfetches=%" PRIu64
			       "\nfetch_errors=%" PRIu64 "\nverify_errors=%" PRIu64
			       "\ndedup_waits=%" PRIu64 "\nprefetched=%" PRIu64 "\nreads=%" PRIu64
			       "\nread_bytes=%" PRIu64 "\ncache_bytes=%" PRIu64
			       "\nworker_starts=%" PRIu64 "\nblobs=%u\n",
			       s.bytes_fetched, s.fetches, s.fetch_errors, s.verify_errors,
			       s.dedup_waits, s.prefetched, s.reads, s.read_bytes, s.cache_bytes,
			       s.worker_starts, s.blobs);
	} else if (strcmp(cmd, "events") == 0 && na == 1) {
		if (wr_lazy_events(l, num(a[0]), on_event, NULL, &err) < 0)
			rc = fail(err);
	} else if (strcmp(cmd, "cache-bytes") == 0 && na == 0) {
		printf("bytes=%" PRIu64 "\n", wr_lazy_cache_bytes(l));
	} else if (strcmp(cmd, "trim") == 0 && na == 1) {
		uint64_t freed = 0;
		if (wr_lazy_cache_trim(l, num(a[0]), &freed, &err) < 0)
			rc = fail(err);
		else
			printf("freed=%" PRIu64 "\n", freed);
	} else if (strcmp(cmd, "forget") == 0 && na == 1) {
		if (wr_lazy_forget(l, a[0], &err) < 0)
			rc = fail(err);
	} else if (strcmp(cmd, "ensure") == 0 && na == 0) {
		if (wr_lazy_ensure(l, &err) < 0)
			rc = fail(err);
		else
			printf("pid=%d\n", wr_lazy_pid(l));
	} else if (strcmp(cmd, "pid") == 0 && na == 0) {
		printf("pid=%d\n", wr_lazy_pid(l));
	} else if (strcmp(cmd, "stop") == 0 && na == 0) {
		if (wr_lazy_stop(l, 10000, &err) < 0)
			rc = fail(err);
	} else if ((strcmp(cmd, "acquire") == 0 && na == 2) ||
		   (strcmp(cmd, "release") == 0 && na == 2) ||
		   (strcmp(cmd, "gc") == 0 && na == 1)) {
		struct wr_image_store_opts so = {
		    .dir = o.store_dir, .lazy = &wr_lazy_image_ops, .lazy_ctx = l};
		struct wr_image_store *s = NULL;
		if (wr_image_store_open(&so, &s, &err) < 0) {
			rc = fail(err);
		} else if (cmd[0] == 'a') {
			_cleanup_free_ char *path = NULL;
			struct wr_image *img = NULL;
			if (wr_image_acquire(s, a[0], a[1], &path, &img, &err) < 0) {
				rc = fail(err);
			} else {
				printf("path=%s\ndigest=%s\ncomplete=%d\n", path, img->digest,
				       img->complete);
				wr_image_free(&img);
			}
		} else if (cmd[0] == 'r') {
			if (wr_image_release(s, a[0], a[1], &err) < 0)
				rc = fail(err);
		} else {
			struct wr_image_gc_opts go = {.target_bytes = num(a[0])};
			struct wr_image_gc_report rep = {0};
			if (wr_image_gc(s, &go, &rep, &err) < 0)
				rc = fail(err);
			else
				printf("used_before=%" PRIu64 "\nused_after=%" PRIu64
				       "\ncache_freed=%" PRIu64 "\nremoved=%zu\n",
				       rep.used_before, rep.used_after, rep.cache_freed_bytes,
				       rep.removed);
		}
		wr_image_store_close(&s);
	} else {
		fprintf(stderr, "EINVAL: unknown command or arguments: %s\n", cmd);
		rc = 2;
	}
	wr_lazy_close(&l);
	return rc;
}
