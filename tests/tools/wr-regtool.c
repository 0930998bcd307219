/* wr-regtool: drives the registry client (src/image/registry.h) and image
 * push/pull (src/image/distribute.h) from the registry tests. Not installed.
 *
 *   wr-regtool [opts] ping HOST
 *   wr-regtool [opts] manifest-get REF            prints media type, digest, body
 *   wr-regtool [opts] manifest-put REF MEDIATYPE FILE
 *   wr-regtool [opts] blob-put HOST/REPO FILE [CHUNK [MOUNT_FROM]]   prints digest
 *   wr-regtool [opts] blob-get HOST/REPO DIGEST OUT [SIZE]
 *   wr-regtool [opts] blob-head HOST/REPO DIGEST  prints size, exit 3 when absent
 *   wr-regtool [opts] blob-range HOST/REPO DIGEST OFF LEN OUT
 *   wr-regtool [opts] range-threads HOST/REPO DIGEST FILE THREADS READS
 *                     random Range reads from THREADS threads, each compared with FILE
 * opts: --insecure --user U --password P --token T --auth-file F --ca F
 *       --range-timeout-ms N --connect-timeout-ms N --low-speed-time N --retries N
 * Stats go to stderr as "stats requests=N bytes_in=N bytes_out=N". Errors:
 * one line on stderr, exit 1 (errno name first: "ENOENT: ..."). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/evp.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "image/registry.h"
#include "regtool.h"

struct wr_registry_opts g_opts;

int regtool_fail(wr_err e)
{
	fprintf(stderr, "%s: %s\n",
		strerrorname_np(wr_err_code(e)) ? strerrorname_np(wr_err_code(e)) : "E?",
		e && e->msg ? e->msg : "error");
	return 1;
}

static void print_stats(struct wr_registry *reg)
{
	struct wr_registry_stats st;
	wr_registry_stats(reg, &st);
	fprintf(stderr, "stats requests=%" PRIu64 " bytes_in=%" PRIu64 " bytes_out=%" PRIu64 "\n",
		st.requests, st.bytes_in, st.bytes_out);
}

/* "HOST/REPO" (tag ignored) -> registry + repo */
int regtool_open(const char *s, struct wr_registry **reg, struct wr_registry_ref *ref, wr_err *err)
{
	if (wr_registry_ref_parse(s, ref, err) < 0)
		return -1;
	return wr_registry_open(ref->host, &g_opts, reg, err);
}

static void file_digest(int fd, char out[72])
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	EVP_DigestInit_ex(c, EVP_sha256(), NULL);
	char buf[65536];
	ssize_t n;
	off_t off = 0;
	while ((n = pread(fd, buf, sizeof(buf), off)) > 0) {
		EVP_DigestUpdate(c, buf, (size_t)n);
		off += n;
	}
	unsigned char md[32];
	EVP_DigestFinal_ex(c, md, NULL);
	EVP_MD_CTX_free(c);
	strcpy(out, "sha256:");
	for (int i = 0; i < 32; i++)
		sprintf(out + 7 + 2 * i, "%02x", md[i]);
}

struct rt_arg {
	struct wr_registry *reg;
	const char *repo, *digest;
	int fd;
	uint64_t size;
	unsigned reads, seed;
	int failed;
	char msg[512];
};

static void *range_thread(void *p)
{
	struct rt_arg *a = p;
	char *want = malloc(1 << 20), *got = malloc(1 << 20);
	for (unsigned i = 0; i < a->reads && !a->failed; i++) {
		uint64_t off = (uint64_t)rand_r(&a->seed) % a->size;
		size_t len = 1 + (size_t)rand_r(&a->seed) % (1 << 20);
		size_t n = 0;
		_cleanup_err_ wr_err e = NULL;
		if (wr_registry_blob_range(a->reg, a->repo, a->digest, off, len, got, &n, &e) < 0) {
			a->failed = 1;
			const char *name = strerrorname_np(wr_err_code(e));
			snprintf(a->msg, sizeof(a->msg), "%s: %s", name ? name : "E?", e->msg);
			break;
		}
		size_t expect = off + len > a->size ? (size_t)(a->size - off) : len;
		ssize_t r = pread(a->fd, want, expect, (off_t)off);
		if (n != expect || r != (ssize_t)expect || memcmp(want, got, expect) != 0) {
			a->failed = 1;
			snprintf(a->msg, sizeof(a->msg),
				 "EIO: range %" PRIu64 "+%zu: got %zu bytes, wrong", off, len, n);
		}
	}
	free(want);
	free(got);
	return NULL;
}

static int cmd_registry(int argc, char **argv)
{
	const char *cmd = argv[0];
	_cleanup_err_ wr_err err = NULL;
	struct wr_registry *reg = NULL;
	struct wr_registry_ref ref = {0};
	int rc = 0;
	if (argc < 2) {
		fprintf(stderr, "usage: see the file\n");
		return 2;
	}
	if (strcmp(cmd, "ping") == 0) {
		if (wr_registry_open(argv[1], &g_opts, &reg, &err) < 0 ||
		    wr_registry_ping(reg, &err) < 0)
			rc = regtool_fail(err);
		else
			printf("ok\n");
		goto out;
	}
	if (regtool_open(argv[1], &reg, &ref, &err) < 0) {
		rc = regtool_fail(err);
		goto out;
	}
	if (strcmp(cmd, "manifest-get") == 0) {
		_cleanup_free_ char *body = NULL, *mt = NULL, *dg = NULL;
		size_t len = 0;
		if (wr_registry_manifest_get(reg, &ref, NULL, &body, &len, &mt, &dg, &err) < 0) {
			rc = regtool_fail(err);
			goto out;
		}
		printf("%s\n%s\n%s\n", mt, dg, body);
	} else if (strcmp(cmd, "manifest-put") == 0 && argc >= 4) {
		_cleanup_free_ char *body = NULL, *dg = NULL;
		if (wr_read_file_at(AT_FDCWD, argv[3], &body, 8u << 20, &err) < 0 ||
		    wr_registry_manifest_put(reg, ref.repo, wr_registry_ref_reference(&ref), body,
					     strlen(body), argv[2], &dg, &err) < 0) {
			rc = regtool_fail(err);
			goto out;
		}
		printf("%s\n", dg);
	} else if (strcmp(cmd, "blob-put") == 0 && argc >= 3) {
		_cleanup_close_ int fd = open(argv[2], O_RDONLY | O_CLOEXEC);
		struct stat st;
		char dg[72];
		if (fd < 0 || fstat(fd, &st) < 0) {
			perror(argv[2]);
			rc = 1;
			goto out;
		}
		file_digest(fd, dg);
		size_t chunk = argc >= 4 ? strtoull(argv[3], NULL, 10) : 0;
		const char *from = argc >= 5 ? argv[4] : NULL;
		if (wr_registry_blob_put(reg, ref.repo, fd, (uint64_t)st.st_size, dg, chunk, from,
					 &err) < 0) {
			rc = regtool_fail(err);
			goto out;
		}
		printf("%s\n", dg);
	} else if (strcmp(cmd, "blob-get") == 0 && argc >= 4) {
		_cleanup_close_ int fd =
		    open(argv[3], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		int64_t size = argc >= 5 ? strtoll(argv[4], NULL, 10) : -1;
		uint64_t n = 0;
		if (fd < 0 ||
		    wr_registry_blob_get(reg, ref.repo, argv[2], size, fd, &n, &err) < 0) {
			rc = fd < 0 ? (perror(argv[3]), 1) : regtool_fail(err);
			goto out;
		}
		printf("%" PRIu64 "\n", n);
	} else if (strcmp(cmd, "blob-head") == 0 && argc >= 3) {
		uint64_t size = 0;
		int r = wr_registry_blob_exists(reg, ref.repo, argv[2], &err);
		if (r < 0)
			rc = regtool_fail(err);
		else if (r == 0)
			rc = 3;
		else if (wr_registry_blob_head(reg, ref.repo, argv[2], &size, &err) < 0)
			rc = regtool_fail(err);
		else
			printf("%" PRIu64 "\n", size);
	} else if (strcmp(cmd, "blob-range") == 0 && argc >= 6) {
		size_t len = strtoull(argv[4], NULL, 10), got = 0;
		_cleanup_free_ char *buf = malloc(len ? len : 1);
		uint64_t t0 = wr_now_ns();
		if (wr_registry_blob_range(reg, ref.repo, argv[2], strtoull(argv[3], NULL, 10), len,
					   buf, &got, &err) < 0) {
			fprintf(stderr, "elapsed_ms=%" PRIu64 "\n", (wr_now_ns() - t0) / 1000000);
			rc = regtool_fail(err);
			goto out;
		}
		_cleanup_close_ int fd =
		    open(argv[5], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0 || wr_write_all(fd, buf, got) < 0) {
			perror(argv[5]);
			rc = 1;
			goto out;
		}
		printf("%zu\n", got);
	} else if (strcmp(cmd, "range-threads") == 0 && argc >= 6) {
		_cleanup_close_ int fd = open(argv[3], O_RDONLY | O_CLOEXEC);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0 || st.st_size == 0) {
			perror(argv[3]);
			rc = 1;
			goto out;
		}
		unsigned nt = (unsigned)atoi(argv[4]);
		struct rt_arg *a = calloc(nt, sizeof(*a));
		pthread_t *t = calloc(nt, sizeof(*t));
		for (unsigned i = 0; i < nt; i++) {
			a[i] = (struct rt_arg){.reg = reg,
					       .repo = ref.repo,
					       .digest = argv[2],
					       .fd = fd,
					       .size = (uint64_t)st.st_size,
					       .reads = (unsigned)atoi(argv[5]),
					       .seed = i + 1};
			pthread_create(&t[i], NULL, range_thread, &a[i]);
		}
		for (unsigned i = 0; i < nt; i++) {
			pthread_join(t[i], NULL);
			if (a[i].failed && rc == 0) {
				fprintf(stderr, "%s (thread %u)\n", a[i].msg, i);
				rc = 1;
			}
		}
		free(a);
		free(t);
		if (rc == 0)
			printf("ok\n");
	} else {
		fprintf(stderr, "wr-regtool: unknown command or missing arguments: %s\n", cmd);
		rc = 2;
	}
out:
	if (reg) {
		print_stats(reg);
		wr_registry_close(reg);
	}
	wr_registry_ref_free(&ref);
	return rc;
}

int main(int argc, char **argv)
{
	int i = 1;
	for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
		const char *o = argv[i] + 2;
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(o, "insecure") == 0) {
			g_opts.insecure = true;
			continue;
		}
		if (v == NULL) {
			fprintf(stderr, "wr-regtool: --%s needs a value\n", o);
			return 2;
		}
		i++;
		if (strcmp(o, "user") == 0)
			g_opts.username = v;
		else if (strcmp(o, "password") == 0)
			g_opts.password = v;
		else if (strcmp(o, "token") == 0)
			g_opts.token = v;
		else if (strcmp(o, "auth-file") == 0)
			g_opts.auth_file = v;
		else if (strcmp(o, "ca") == 0)
			g_opts.ca_file = v;
		else if (strcmp(o, "range-timeout-ms") == 0)
			g_opts.range_timeout_ms = (unsigned)atoi(v);
		else if (strcmp(o, "connect-timeout-ms") == 0)
			g_opts.connect_timeout_ms = (unsigned)atoi(v);
		else if (strcmp(o, "low-speed-time") == 0)
			g_opts.low_speed_time_s = (unsigned)atoi(v);
		else if (strcmp(o, "retries") == 0)
			g_opts.retries = (unsigned)atoi(v);
		else {
			fprintf(stderr, "wr-regtool: unknown option --%s\n", o);
			return 2;
		}
	}
	if (i >= argc) {
		fprintf(stderr, "usage: wr-regtool [opts] COMMAND ARGS (see the file)\n");
		return 2;
	}
	if (strcmp(argv[i], "push") == 0 || strcmp(argv[i], "pull") == 0 ||
	    strcmp(argv[i], "import") == 0 || strcmp(argv[i], "inspect") == 0)
		return regtool_images(argc - i, argv + i);
	return cmd_registry(argc - i, argv + i);
}
