/* Pull on create: a sandbox's image (or layer) given as a registry
 * reference ("127.0.0.1:5000/team/py:3.12", "ghcr.io/a/b@sha256:...") is
 * pulled into the store when missing, lazily when the remote carries
 * warren's EROFS layer and no request credentials are needed (wr_image_pull
 * converts any other image fully), and
 * the create goes on with the store image.
 *
 * The store name of a pulled reference is the reference itself
 * ("host/repo:tag"); a digest reference is named "host/repo:sha256-<hex>",
 * so the next create of the same reference finds it without asking the
 * registry. Concurrent creates of one missing reference do one pull: the
 * first is the leader, the others wait for its result (single flight).
 *
 * The request's "registry_auth" lives in this request's registry client
 * only: never stored, logged or shared with the waiters' own pulls. */
#include "daemon/images.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "daemon/api_registry.h"
#include "image/distribute.h"
#include "image/registry.h"
#include "daemon/snapshot.h"

struct flight {
	char *name;
	bool done;
	unsigned waiters;
	int rc, errnum;
	char *msg, *field;
	struct flight *next;
};

static pthread_mutex_t g_fl = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_fc = PTHREAD_COND_INITIALIZER;
static struct flight *g_flights;

static void flight_free(struct flight *f)
{
	free(f->name);
	free(f->msg);
	free(f->field);
	free(f);
}

int wrd_images_pull_policy(const char *s)
{
	if (s == NULL || strcmp(s, "missing") == 0)
		return WRD_PULL_MISSING;
	if (strcmp(s, "always") == 0)
		return WRD_PULL_ALWAYS;
	if (strcmp(s, "never") == 0)
		return WRD_PULL_NEVER;
	return -EINVAL;
}

int wrd_images_remote_name(const char *remote, char **out, wr_err *err)
{
	struct wr_registry_ref ref;
	if (wr_registry_ref_parse(remote, &ref, err) < 0)
		return -EINVAL;
	int n;
	if (ref.digest)
		n = asprintf(out, "%s/%s:sha256-%s", ref.host, ref.repo, ref.digest + 7);
	else
		n = asprintf(out, "%s/%s:%s", ref.host, ref.repo, ref.tag);
	wr_registry_ref_free(&ref);
	if (n < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (n > 255) {
		free(*out);
		*out = NULL;
		return wr_err_set(err, EINVAL,
				  "registry reference '%s' is too long for a store name (255)",
				  remote);
	}
	return 0;
}

/* A registry's failure as the create's: an unreachable registry is 503
 * (ESHUTDOWN -> "unavailable"), a missing manifest 404, both naming the
 * image field; bad credentials name registry_auth. */
static void classify(wr_err err, const char *field)
{
	if (err == NULL)
		return;
	const char *f = field;
	switch (err->errnum) {
	case ETIMEDOUT:
	case ECONNREFUSED:
	case ECONNRESET:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case EIO:
	case 0: err->errnum = ESHUTDOWN; break;
	case EACCES:
	case EPERM: f = "registry_auth"; break;
	/* not an image this node can run (bad manifest, platform, media
	 * type): the caller's reference is at fault */
	case EBADMSG:
	case ENOTSUP: err->errnum = EINVAL; break;
	default: break;
	}
	/* parse_auth names "auth.*": the create's key is "registry_auth" */
	if (err->field && strncmp(err->field, "auth", 4) == 0)
		f = "registry_auth";
	if (err->field == NULL || strcmp(err->field, f) != 0) {
		free(err->field);
		err->field = strdup(f);
	}
}

/* A snapshot's processes (its label WRD_SNAP_PROCS names a store image of
 * their own) travel with it: pushed first, to the snapshot's repository as
 * tag "processes-<hex of their digest>", and pulled from there after it when
 * the store lacks them. The remote reference of processes `digest` in the
 * repository of `remote` (malloc'd), NULL on error. */
char *wrd_images_procs_ref(const char *remote, const char *digest, wr_err *err)
{
	if (!wrd_snapshot_digest_ok(digest)) {
		wr_err_set(err, EINVAL, "'%.80s' is no sha256 digest", digest);
		return NULL;
	}
	struct wr_registry_ref rr = {0};
	if (wr_registry_ref_parse(remote, &rr, err) < 0)
		return NULL;
	free(rr.tag);
	free(rr.digest);
	rr.digest = NULL;
	rr.tag = NULL;
	char *out = NULL;
	if (asprintf(&rr.tag, "processes-%s", digest + 7) >= 0)
		out = wr_registry_ref_format(&rr);
	wr_registry_ref_free(&rr);
	if (out == NULL)
		wr_err_set(err, ENOMEM, "out of memory");
	return out;
}

/* After a pull of img from `remote`: its processes, when it is a snapshot
 * with processes whose image the store lacks. *out: what was done (NULL
 * when nothing). */
int wrd_images_pull_procs(struct wr_registry *reg, const char *remote, const struct wr_image *img,
			  const char *as, json_t **out, wr_err *err)
{
	*out = NULL;
	const char *pd = wr_image_label(&img->config, WRD_SNAP_PROCS);
	if (pd == NULL || !wrd_snapshot_digest_ok(pd))
		return 0; /* none, or a label no create would use */
	struct wr_image *have = NULL;
	_cleanup_err_ wr_err e2 = NULL;
	char name[300];
	const char *local = wrd_snapshot_procs_name(as, name, sizeof(name)) ? name : NULL;
	if (wr_image_resolve(wrd_images(), pd, &have, &e2) == 0) {
		wr_image_free(&have);
		if (local && wr_image_tag(wrd_images(), pd, local, &e2) < 0)
			wr_err_free(&e2); /* the name is a convenience */
		*out = json_pack("{s:s, s:b}", "digest", pd, "already", true);
		return 0;
	}
	_cleanup_free_ char *from = wrd_images_procs_ref(remote, pd, err);
	if (from == NULL)
		return -1;
	struct wr_image_pull_opts o = {.mode = WR_IMAGE_PULL_FULL};
	struct wr_image_pull_result res;
	struct wr_image *p = NULL;
	if (wr_image_pull(wrd_images(), reg, from, local, &o, &p, &res, err) < 0)
		return wr_err_wrap(err, "its processes (%s)", from);
	int r = 0;
	if (strcmp(p->digest, pd) != 0)
		r = wr_err_set(err, EBADMSG, "its processes: %s holds %s, not %s", from, p->digest,
			       pd);
	else
		*out = json_pack("{s:s, s:s, s:b, s:I}", "digest", pd, "ref", from, "already",
				 false, "bytes_fetched", (json_int_t)res.bytes_fetched);
	wr_image_free(&p);
	return r;
}

static int do_pull(const char *remote, const char *name, json_t *auth, wr_err *err)
{
	struct wr_registry *reg = NULL;
	if (wrd_registry_open_for(remote, auth, false, &reg, err) < 0)
		return -EINVAL;
	/* lazyfs fetches with its own credentials (the config's auth_file),
	 * never with a request's: an image pulled with request credentials is
	 * fetched in full, or its sandbox's reads would fail later. */
	bool creds = json_is_object(auth) && json_object_size(auth) > 0;
	struct wr_image_pull_opts o = {.mode = creds ? WR_IMAGE_PULL_FULL : WR_IMAGE_PULL_LAZY};
	struct wr_image_pull_result res;
	struct wr_image *img = NULL;
	int r = wr_image_pull(wrd_images(), reg, remote, name, &o, &img, &res, err);
	json_t *procs = NULL;
	if (r == 0 && wrd_images_pull_procs(reg, remote, img, name, &procs, err) < 0) {
		wr_image_free(&img);
		r = -1;
	}
	json_decref(procs);
	wr_registry_close(reg);
	if (r < 0)
		return r;
	wr_info("image %s pulled for a create as %s (%s, %llu bytes fetched)", remote, img->digest,
		res.lazy	     ? "lazy"
		: res.no_chunk_index ? "full: no chunk index to verify lazy reads with"
				     : "full",
		(unsigned long long)res.bytes_fetched);
	wrd_images_event("image_pulled",
			 json_pack("{s:s, s:s, s:s, s:s, s:b, s:b, s:b, s:I}", "ref", remote,
				   "name", name, "digest", img->digest, "manifest_digest",
				   res.manifest_digest, "lazy", res.lazy, "already", res.already,
				   "no_chunk_index", res.no_chunk_index, "bytes_fetched",
				   (json_int_t)res.bytes_fetched));
	wrd_images_gc_auto_keep(img->digest);
	wr_image_free(&img);
	return 0;
}

/* One pull of `name` at a time; waiters get the leader's result. */
static int pull_once(const char *remote, const char *name, json_t *auth, wr_err *err)
{
	pthread_mutex_lock(&g_fl);
	struct flight *f = g_flights;
	while (f && strcmp(f->name, name) != 0)
		f = f->next;
	if (f) {
		f->waiters++;
		while (!f->done)
			pthread_cond_wait(&g_fc, &g_fl);
		int rc = f->rc;
		if (rc < 0) {
			wr_err_set(err, f->errnum, "%s", f->msg ? f->msg : "pull failed");
			if (f->field)
				(*err)->field = strdup(f->field);
		}
		if (--f->waiters == 0)
			flight_free(f);
		pthread_mutex_unlock(&g_fl);
		return rc;
	}
	f = calloc(1, sizeof(*f));
	if (f == NULL || (f->name = strdup(name)) == NULL) {
		free(f);
		pthread_mutex_unlock(&g_fl);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	f->next = g_flights;
	g_flights = f;
	pthread_mutex_unlock(&g_fl);

	int rc = do_pull(remote, name, auth, err);
	if (rc < 0)
		classify(*err, "image");

	pthread_mutex_lock(&g_fl);
	for (struct flight **p = &g_flights; *p; p = &(*p)->next)
		if (*p == f) {
			*p = f->next;
			break;
		}
	f->done = true;
	f->rc = rc;
	if (rc < 0 && *err) {
		f->errnum = (*err)->errnum;
		f->msg = (*err)->msg ? strdup((*err)->msg) : NULL;
		f->field = (*err)->field ? strdup((*err)->field) : NULL;
	}
	if (f->waiters == 0)
		flight_free(f);
	else
		pthread_cond_broadcast(&g_fc);
	pthread_mutex_unlock(&g_fl);
	return rc;
}

int wrd_images_ensure_remote(const char *remote, int policy, json_t *auth, char **name, wr_err *err)
{
	if (wrd_images() == NULL)
		return wr_err_field(err, "image",
				    "image: registry references need the image store, which is "
				    "not open");
	int r = wrd_images_remote_name(remote, name, err);
	if (r < 0) {
		classify(*err, "image");
		return r;
	}
	if (policy != WRD_PULL_ALWAYS) {
		struct wr_image *img = NULL;
		wr_err e = NULL;
		r = wr_image_resolve(wrd_images(), *name, &img, &e);
		wr_image_free(&img);
		wr_err_free(&e);
		if (r == 0)
			return 0;
		if (policy == WRD_PULL_NEVER) {
			wr_err_set(err, ENOENT,
				   "image: '%s' is not in the node's store and pull is \"never\"",
				   remote);
			(*err)->field = strdup("image");
			return -ENOENT;
		}
	}
	r = pull_once(remote, *name, auth, err);
	if (r < 0)
		wr_err_wrap(err, "image: pull %s", remote);
	return r;
}
