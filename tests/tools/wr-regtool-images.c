/* wr-regtool: the store-level commands (see wr-regtool.c).
 *   import STORE PATH REF                       prints digest=
 *   push STORE LOCALREF REMOTE [CHUNK [MOUNT_FROM]]
 *        prints manifest=, blob=, sent=, skipped=, bytes=
 *   pull STORE REMOTE [LOCALREF|-] [lazy] [PLATFORM]
 *        prints digest=, manifest=, erofs=, lazy=, already=, layers=, bytes=
 *   inspect STORE REF                           prints digest=, size=, complete=,
 *        source=, refs=, env=, workdir=, user=, entrypoint=, cmd=, remote= */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "image/distribute.h"
#include "regtool.h"

static void print_strv(const char *key, char **v, size_t n)
{
	printf("%s=", key);
	for (size_t i = 0; i < n; i++)
		printf("%s%s", i ? "\x1f" : "", v[i]);
	printf("\n");
}

static void print_image(const struct wr_image *img)
{
	printf("digest=%s\nsize=%" PRIu64 "\ncomplete=%d\nsource=%s\n", img->digest, img->size,
	       img->complete, img->source ? img->source : "");
	print_strv("refs", img->refs, img->n_refs);
	print_strv("env", img->config.env, img->config.n_env);
	printf("workdir=%s\nuser=%s\n", img->config.workdir ? img->config.workdir : "",
	       img->config.user ? img->config.user : "");
	print_strv("entrypoint", img->config.entrypoint, img->config.n_entrypoint);
	print_strv("cmd", img->config.cmd, img->config.n_cmd);
	printf("remote=%s\n", img->remote.reference ? img->remote.reference : "");
}

int regtool_images(int argc, char **argv)
{
	const char *cmd = argv[0];
	if (argc < 3) {
		fprintf(stderr, "wr-regtool: %s: missing arguments\n", cmd);
		return 2;
	}
	_cleanup_err_ wr_err err = NULL;
	struct wr_image_store *s = NULL;
	struct wr_image_store_opts so = {.dir = argv[1]};
	struct wr_registry *reg = NULL;
	struct wr_registry_ref ref = {0};
	struct wr_image *img = NULL;
	int rc = 0;
	if (wr_image_store_open(&so, &s, &err) < 0) {
		rc = regtool_fail(err);
		goto out;
	}
	if (strcmp(cmd, "import") == 0 && argc >= 4) {
		struct wr_image_import_opts io = {.ref = argv[3]};
		if (wr_image_import(s, argv[2], &io, &img, &err) < 0)
			rc = regtool_fail(err);
		else
			printf("digest=%s\n", img->digest);
	} else if (strcmp(cmd, "inspect") == 0) {
		if (wr_image_resolve(s, argv[2], &img, &err) < 0)
			rc = regtool_fail(err);
		else
			print_image(img);
	} else if (strcmp(cmd, "push") == 0 && argc >= 4) {
		struct wr_image_push_opts po = {0};
		struct wr_image_push_result res;
		/* WR_PUSH_WITHOUT_CHUNK_INDEX: push as warren did before chunk
		 * indexes (tests of the full-pull fallback). */
		po.without_chunk_index = getenv("WR_PUSH_WITHOUT_CHUNK_INDEX") != NULL;
		/* WR_PUSH_INDEX_GRAIN: pieces of another size than warren's 64 KiB
		 * (an index made by another tool). */
		if (getenv("WR_PUSH_INDEX_GRAIN"))
			po.index_grain = (uint32_t)strtoul(getenv("WR_PUSH_INDEX_GRAIN"), NULL, 10);
		if (argc >= 5)
			po.chunk_size = strtoull(argv[4], NULL, 10);
		if (argc >= 6)
			po.mount_from = argv[5];
		if (regtool_open(argv[3], &reg, &ref, &err) < 0 ||
		    wr_image_push(s, reg, argv[2], argv[3], &po, &res, &err) < 0) {
			rc = regtool_fail(err);
			goto out;
		}
		printf("manifest=%s\nblob=%s\nindex=%s\nsent=%u\nskipped=%u\nbytes=%" PRIu64 "\n",
		       res.manifest_digest, res.blob_digest, res.index_digest, res.blobs_sent,
		       res.blobs_skipped, res.bytes_sent);
	} else if (strcmp(cmd, "pull") == 0) {
		struct wr_image_pull_opts po = {0};
		struct wr_image_pull_result res;
		const char *local = argc >= 4 && strcmp(argv[3], "-") != 0 ? argv[3] : NULL;
		if (argc >= 5 && strcmp(argv[4], "lazy") == 0)
			po.mode = WR_IMAGE_PULL_LAZY;
		if (argc >= 6)
			po.platform = argv[5];
		if (regtool_open(argv[2], &reg, &ref, &err) < 0 ||
		    wr_image_pull(s, reg, argv[2], local, &po, &img, &res, &err) < 0) {
			rc = regtool_fail(err);
			goto out;
		}
		printf("digest=%s\nmanifest=%s\nerofs=%d\nlazy=%d\nalready=%d\nno_chunk_index=%d\n"
		       "layers=%u\nbytes=%" PRIu64 "\ncomplete=%d\n",
		       img->digest, res.manifest_digest, res.erofs, res.lazy, res.already,
		       res.no_chunk_index, res.layers, res.bytes_fetched, img->complete);
	} else {
		fprintf(stderr, "wr-regtool: %s: bad arguments\n", cmd);
		rc = 2;
	}
out:
	if (reg) {
		struct wr_registry_stats st;
		wr_registry_stats(reg, &st);
		fprintf(stderr,
			"stats requests=%" PRIu64 " bytes_in=%" PRIu64 " bytes_out=%" PRIu64 "\n",
			st.requests, st.bytes_in, st.bytes_out);
		wr_registry_close(reg);
	}
	wr_image_free(&img);
	wr_registry_ref_free(&ref);
	wr_image_store_close(&s);
	return rc;
}
