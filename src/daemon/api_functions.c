/* Routes of the function tier: POST /v1/functions/call and
 * POST /v1/functions/batch (docs/API.md, "Functions").
 *
 * Parse and dispatch only: a request becomes a pool key (image, language,
 * tenant) and a wr_call_spec; the pools (src/tiers/function*.c) do the
 * rest. Pools are made on a tenant's first call for an image and have
 * their zygote parked after functions.idle_timeout seconds without calls
 * (config; default 300, WARREN_FN_IDLE overrides it); the next call starts
 * a new one. Python pools preload functions.python_preload, or the list of
 * functions.images.<image> for calls naming that image. A batch runs its calls on long-job
 * threads (up to `parallel` at once) and answers with the results in
 * request order. */
#include "daemon/functions.h"

#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "daemon/audit.h"
#include "daemon/jsonutil.h"
#include "daemon/manager.h"
#include "tiers/function.h"

#define MAX_BATCH 256
#define MAX_FILES 256

static struct wr_function_pools *g_pools;
static uint64_t g_idle_ms = 300000;
static pthread_mutex_t g_reap_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_last_reap_ns;

/* Modules a Python pool imports before it forks its first slot: the
 * config's functions.python_preload, or functions.images.<image>.
 * python_preload for the calls naming that image. */
struct preload {
	char *image; /* NULL: the default */
	const char **mods;
	size_t n;
	json_t *owner; /* the strings live here */
};
static struct preload *g_preloads;
static size_t g_n_preloads;

#define MAX_PRELOAD 64

static int check_preload_list(json_t *v, const char *field, wr_err *err)
{
	if (!json_is_array(v) || json_array_size(v) > MAX_PRELOAD)
		return wr_err_field(err, field, "%s: an array of at most %d module names", field,
				    MAX_PRELOAD);
	size_t i;
	json_t *m;
	json_array_foreach(v, i, m)
	{
		if (!json_is_string(m) || !wr_function_module_name_ok(json_string_value(m)))
			return wr_err_field(
			    err, field, "%s[%zu]: not a module name (1 to 200 of A-Z a-z 0-9 _ .)",
			    field, i);
	}
	return 0;
}

int wrd_functions_check_config(json_t *v, wr_err *err)
{
	if (!json_is_object(v))
		return wr_err_field(err, "functions", "functions: must be an object");
	const char *k;
	json_t *x;
	int64_t spare = 2, max_spare = 8, n;
	json_object_foreach(v, k, x)
	{
		char f[300];
		snprintf(f, sizeof(f), "functions.%s", k);
		if (strcmp(k, "spare_slots") == 0) {
			if (wrd_j_int(x, f, 1, 64, &spare, err) < 0)
				return -EINVAL;
		} else if (strcmp(k, "max_spare_slots") == 0) {
			if (wrd_j_int(x, f, 1, 256, &max_spare, err) < 0)
				return -EINVAL;
		} else if (strcmp(k, "idle_timeout") == 0) {
			if (wrd_j_int(x, f, 0, 86400, &n, err) < 0)
				return -EINVAL;
		} else if (strcmp(k, "python_preload") == 0) {
			if (check_preload_list(x, f, err) < 0)
				return -EINVAL;
		} else if (strcmp(k, "images") == 0) {
			if (!json_is_object(x))
				return wr_err_field(
				    err, f, "%s: an object of {image: {python_preload}}", f);
			const char *im;
			json_t *o;
			json_object_foreach(x, im, o)
			{
				char fi[300];
				snprintf(fi, sizeof(fi), "functions.images.%.200s", im);
				if (*im == 0 || !json_is_object(o))
					return wr_err_field(
					    err, fi, "%s: an image name or path with an object",
					    fi);
				const char *ik;
				json_t *iv;
				json_object_foreach(o, ik, iv)
				{
					char fk[400];
					snprintf(fk, sizeof(fk), "%s.%s", fi, ik);
					if (strcmp(ik, "python_preload"))
						return wr_err_field(err, fk, "%s: unknown key", fk);
					if (check_preload_list(iv, fk, err) < 0)
						return -EINVAL;
				}
			}
		} else {
			return wr_err_field(err, f, "%s: unknown key", f);
		}
	}
	if (max_spare < spare)
		return wr_err_field(
		    err, "functions.max_spare_slots",
		    "functions.max_spare_slots: must be at least spare_slots (%lld)",
		    (long long)spare);
	return 0;
}

static int add_preload(const char *image, json_t *list, json_t *owner)
{
	struct preload *np = realloc(g_preloads, (g_n_preloads + 1) * sizeof(*np));
	if (np == NULL)
		return -ENOMEM;
	g_preloads = np;
	struct preload *p = &g_preloads[g_n_preloads];
	memset(p, 0, sizeof(*p));
	size_t n = json_array_size(list);
	p->mods = calloc(n + 1, sizeof(char *));
	p->image = image ? strdup(image) : NULL;
	if (p->mods == NULL || (image && p->image == NULL)) {
		free(p->mods);
		free(p->image);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		p->mods[i] = json_string_value(json_array_get(list, i));
	p->n = n;
	p->owner = json_incref(owner);
	g_n_preloads++;
	return 0;
}

/* The preload list of a call naming `image` (as given, or its path). */
static const struct preload *preload_for(const char *image, const char *path)
{
	const struct preload *def = NULL;
	for (size_t i = 0; i < g_n_preloads; i++) {
		const struct preload *p = &g_preloads[i];
		if (p->image == NULL)
			def = p;
		else if (strcmp(p->image, image) == 0 || (path && strcmp(p->image, path) == 0))
			return p;
	}
	return def;
}

int wrd_functions_init(const struct wrd_config *cfg, wr_err *err)
{
	/* warren-zygote lives beside warren-init (build dir or libexec). */
	_cleanup_free_ char *zyg = NULL;
	const char *env = getenv("WARREN_ZYGOTE");
	if (env && *env) {
		zyg = strdup(env);
	} else {
		const char *slash = strrchr(cfg->init_path, '/');
		int n = slash ? (int)(slash - cfg->init_path) : 1;
		if (asprintf(&zyg, "%.*s/warren-zygote", n, slash ? cfg->init_path : ".") < 0)
			zyg = NULL;
	}
	if (zyg == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	struct wr_function_config fc = {.zygote_path = zyg};
	json_t *fcfg = NULL;
	if (cfg->functions) {
		json_error_t je;
		fcfg = json_loads(cfg->functions, 0, &je);
		if (fcfg == NULL || wrd_functions_check_config(fcfg, err) < 0) {
			json_decref(fcfg);
			return fcfg ? -EINVAL : wr_err_set(err, EINVAL, "functions: %s", je.text);
		}
		json_t *x;
		if ((x = json_object_get(fcfg, "spare_slots")))
			fc.spare_slots = (unsigned)json_integer_value(x);
		if ((x = json_object_get(fcfg, "max_spare_slots")))
			fc.max_spare_slots = (unsigned)json_integer_value(x);
		if ((x = json_object_get(fcfg, "idle_timeout")))
			g_idle_ms = (uint64_t)json_integer_value(x) * 1000;
		int r = 0;
		if ((x = json_object_get(fcfg, "python_preload")))
			r = add_preload(NULL, x, fcfg);
		const char *im;
		json_t *o;
		json_t *imgs = json_object_get(fcfg, "images");
		json_object_foreach(imgs, im, o)
		{
			json_t *l = json_object_get(o, "python_preload");
			if (r == 0 && l)
				r = add_preload(im, l, fcfg);
		}
		json_decref(fcfg);
		if (r < 0)
			return wr_err_set(err, ENOMEM, "out of memory");
	}
	/* Tests and packaging: WARREN_FN_IDLE overrides functions.idle_timeout. */
	const char *idle = getenv("WARREN_FN_IDLE");
	if (idle && *idle) {
		uint64_t sec;
		if (wr_parse_u64(idle, 86400, &sec) < 0)
			return wr_err_field(err, "WARREN_FN_IDLE", "seconds, 0..86400");
		g_idle_ms = sec * 1000;
	}
	if (wr_function_init(&fc, err) < 0 || wr_function_pools_new(&g_pools, err) < 0)
		return wr_err_wrap(err, "function tier");
	return 0;
}

void wrd_functions_stop(void)
{
	wr_function_pools_free(&g_pools);
	for (size_t i = 0; i < g_n_preloads; i++) {
		free(g_preloads[i].image);
		free(g_preloads[i].mods);
		json_decref(g_preloads[i].owner);
	}
	free(g_preloads);
	g_preloads = NULL;
	g_n_preloads = 0;
}

/* ---- request parsing ------------------------------------------------------ */

struct call {
	struct wr_function_pool_spec pool;
	struct wr_call_spec spec;
	const char **argv;
	struct wr_env_kv *env;
	struct wr_call_file *files;
	char **blobs; /* decoded base64 file contents */
	size_t n_blobs;
	bool b64;
	/* results */
	struct wr_call_result res;
	wr_err err;
	bool done;
};

static void call_clear(struct call *c)
{
	free(c->argv);
	free(c->env);
	free(c->files);
	for (size_t i = 0; i < c->n_blobs; i++)
		free(c->blobs[i]);
	free(c->blobs);
	wr_call_result_free(&c->res);
	wr_err_free(&c->err);
}

static int fail(wr_err *err, const char *pre, const char *field, const char *fmt, const char *a)
{
	char f[128];
	snprintf(f, sizeof(f), "%s%s", pre, field);
	return wr_err_field(err, f, "%s: %s%s", f, fmt, a ? a : "");
}

static int seconds_ms(json_t *v, const char *pre, const char *name, uint64_t *out, wr_err *err)
{
	char f[128];
	snprintf(f, sizeof(f), "%s%s", pre, name);
	double d;
	if (wrd_j_num(v, f, 0, 3600, &d, err) < 0)
		return -1;
	*out = (uint64_t)(d * 1000.0 + 0.5);
	if (*out == 0)
		*out = 1;
	return 0;
}

static int b64_decode(const char *s, size_t len, char **out, size_t *outlen)
{
	if (len % 4)
		return -1;
	unsigned char *buf = malloc(len / 4 * 3 + 1);
	if (buf == NULL)
		return -1;
	int n = len ? EVP_DecodeBlock(buf, (const unsigned char *)s, (int)len) : 0;
	if (n < 0) {
		free(buf);
		return -1;
	}
	/* EVP_DecodeBlock counts the padding as zero bytes. */
	if (len && s[len - 1] == '=')
		n--;
	if (len > 1 && s[len - 2] == '=')
		n--;
	*out = (char *)buf;
	*outlen = (size_t)n;
	return 0;
}

static int parse_files(json_t *v, const char *pre, struct call *c, wr_err *err)
{
	char f[160];
	snprintf(f, sizeof(f), "%sfiles", pre);
	if (!json_is_array(v) || json_array_size(v) > MAX_FILES)
		return wr_err_field(err, f, "%s: an array of at most %d {path, content} objects", f,
				    MAX_FILES);
	size_t n = json_array_size(v);
	c->files = calloc(n + 1, sizeof(*c->files));
	c->blobs = calloc(n + 1, sizeof(char *));
	if (!c->files || !c->blobs)
		return wr_err_set(err, ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		json_t *o = json_array_get(v, i), *x;
		char fi[192];
		snprintf(fi, sizeof(fi), "%s[%zu]", f, i);
		if (!json_is_object(o))
			return wr_err_field(err, fi, "%s: must be an object", fi);
		const char *k;
		json_object_foreach(o, k, x)
		{
			if (strcmp(k, "path") && strcmp(k, "content") && strcmp(k, "encoding") &&
			    strcmp(k, "mode")) {
				char fk[256];
				snprintf(fk, sizeof(fk), "%s.%s", fi, k);
				return wr_err_field(err, fk, "%s: unknown field", fk);
			}
		}
		char fp[256];
		snprintf(fp, sizeof(fp), "%s.path", fi);
		if (wrd_j_str(json_object_get(o, "path"), fp, 1023, false, &c->files[i].path, err) <
		    0)
			return -1;
		snprintf(fp, sizeof(fp), "%s.content", fi);
		json_t *ct = json_object_get(o, "content");
		const char *data = "";
		if (ct && wrd_j_str(ct, fp, WRD_JSON_MAX, true, &data, err) < 0)
			return -1;
		size_t len = ct ? json_string_length(ct) : 0;
		if ((x = json_object_get(o, "encoding"))) {
			const char *enc;
			snprintf(fp, sizeof(fp), "%s.encoding", fi);
			if (wrd_j_str(x, fp, 16, false, &enc, err) < 0 ||
			    (strcmp(enc, "utf-8") && strcmp(enc, "base64")))
				return wr_err_field(err, fp, "%s: must be \"utf-8\" or \"base64\"",
						    fp);
			if (strcmp(enc, "base64") == 0) {
				char *raw;
				size_t rl;
				if (b64_decode(data, len, &raw, &rl) < 0) {
					snprintf(fp, sizeof(fp), "%s.content", fi);
					return wr_err_field(err, fp, "%s: not valid base64", fp);
				}
				c->blobs[c->n_blobs++] = raw;
				data = raw;
				len = rl;
			}
		}
		if ((x = json_object_get(o, "mode"))) {
			int64_t m;
			snprintf(fp, sizeof(fp), "%s.mode", fi);
			if (wrd_j_int(x, fp, 0, 07777, &m, err) < 0)
				return -1;
			c->files[i].mode = (uint32_t)m;
		}
		c->files[i].data = data;
		c->files[i].len = len;
	}
	c->spec.files = c->files;
	c->spec.n_files = n;
	return 0;
}

/* One call object; pre names its place ("" or "calls[3]."). */
static int parse_call(struct wrd_req *r, json_t *b, const char *pre, struct call *c, wr_err *err)
{
	static const char *const keys[] = {
	    "image",   "argv",	    "language", "code",	    "stdin",	  "env",      "files",
	    "timeout", "memory_mb", "pids",	"cpu_time", "output_cap", "encoding", NULL};
	if (!json_is_object(b))
		return fail(err, pre, "", "must be an object", NULL);
	const char *k;
	json_t *v;
	json_object_foreach(b, k, v)
	{
		size_t i = 0;
		while (keys[i] && strcmp(keys[i], k))
			i++;
		if (keys[i] == NULL)
			return fail(err, pre, k, "unknown field", NULL);
	}
	char f[160];
	const char *image;
	snprintf(f, sizeof(f), "%simage", pre);
	if ((v = json_object_get(b, "image")) == NULL)
		return wr_err_field(err, f, "%s: is required", f);
	if (wrd_j_str(v, f, 4095, false, &image, err) < 0)
		return -1;
	const char *path = wrd_config_image(wrd_mgr_cfg, image);
	if (path == NULL && image[0] == '/') {
		if (r->tcp)
			return wr_err_field(err, f,
					    "%s: paths are accepted on the Unix socket only; use a "
					    "configured image name",
					    f);
		path = image;
	}
	struct stat st;
	if (path == NULL || stat(path, &st) < 0 || !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)))
		return wr_err_field(err, f,
				    "%s: '%s' is not a configured image or an existing rootfs "
				    "directory or EROFS file",
				    f, image);
	c->pool.image = path;
	c->pool.tenant = r->tenant;
	if ((v = json_object_get(b, "language"))) {
		const char *lang;
		snprintf(f, sizeof(f), "%slanguage", pre);
		if (wrd_j_str(v, f, 32, false, &lang, err) < 0)
			return -1;
		if (strcmp(lang, "python"))
			return wr_err_field(err, f, "%s: must be \"python\"", f);
		c->pool.language = lang;
		const struct preload *pl = preload_for(image, path);
		if (pl) {
			c->pool.preload = pl->mods;
			c->pool.n_preload = pl->n;
		}
	}
	if ((v = json_object_get(b, "code"))) {
		snprintf(f, sizeof(f), "%scode", pre);
		if (c->pool.language == NULL)
			return wr_err_field(err, f, "%s: needs \"language\"", f);
		if (wrd_j_str(v, f, WRD_JSON_MAX, false, &c->spec.code, err) < 0)
			return -1;
		c->spec.code_len = json_string_length(v);
	}
	if ((v = json_object_get(b, "argv"))) {
		snprintf(f, sizeof(f), "%sargv", pre);
		size_t n = json_is_array(v) ? json_array_size(v) : 0;
		if (n == 0 || n > 4096)
			return wr_err_field(err, f, "%s: a non-empty array of strings", f);
		c->argv = calloc(n + 1, sizeof(char *));
		if (c->argv == NULL)
			return wr_err_set(err, ENOMEM, "out of memory");
		for (size_t i = 0; i < n; i++) {
			char fi[192];
			snprintf(fi, sizeof(fi), "%s[%zu]", f, i);
			if (wrd_j_str(json_array_get(v, i), fi, 65536, i > 0, &c->argv[i], err) < 0)
				return -1;
		}
		c->spec.argv = c->argv;
	} else if (c->pool.language == NULL) {
		snprintf(f, sizeof(f), "%sargv", pre);
		return wr_err_field(err, f, "%s: is required (or code with a language)", f);
	} else if (c->spec.code == NULL) {
		snprintf(f, sizeof(f), "%scode", pre);
		return wr_err_field(err, f, "%s: is required (or argv naming a file)", f);
	}
	if ((v = json_object_get(b, "stdin"))) {
		snprintf(f, sizeof(f), "%sstdin", pre);
		const char *s;
		if (wrd_j_str(v, f, WRD_JSON_MAX, true, &s, err) < 0)
			return -1;
		c->spec.stdin_data = s;
		c->spec.stdin_len = json_string_length(v);
	}
	if ((v = json_object_get(b, "env"))) {
		snprintf(f, sizeof(f), "%senv", pre);
		if (wrd_j_strmap(v, f, 1024, err) < 0)
			return -1;
		c->env = calloc(json_object_size(v) + 1, sizeof(*c->env));
		if (c->env == NULL)
			return wr_err_set(err, ENOMEM, "out of memory");
		size_t i = 0;
		json_object_foreach(v, k, v)
		{
			c->env[i].key = k;
			c->env[i++].value = json_string_value(v);
		}
		c->spec.env = c->env;
		c->spec.n_env = i;
	}
	if ((v = json_object_get(b, "files")) && parse_files(v, pre, c, err) < 0)
		return -1;
	if ((v = json_object_get(b, "timeout")) &&
	    seconds_ms(v, pre, "timeout", &c->spec.timeout_ms, err) < 0)
		return -1;
	if ((v = json_object_get(b, "cpu_time")) &&
	    seconds_ms(v, pre, "cpu_time", &c->spec.cpu_time_ms, err) < 0)
		return -1;
	int64_t x;
	if ((v = json_object_get(b, "memory_mb"))) {
		snprintf(f, sizeof(f), "%smemory_mb", pre);
		if (wrd_j_int(v, f, 4, 2048, &x, err) < 0)
			return -1;
		c->spec.memory_bytes = (uint64_t)x << 20;
	}
	if ((v = json_object_get(b, "pids"))) {
		snprintf(f, sizeof(f), "%spids", pre);
		if (wrd_j_int(v, f, 2, 4096, &x, err) < 0)
			return -1;
		c->spec.pids = (uint64_t)x;
	}
	if ((v = json_object_get(b, "output_cap"))) {
		snprintf(f, sizeof(f), "%soutput_cap", pre);
		if (wrd_j_int(v, f, 1, 64 << 20, &x, err) < 0)
			return -1;
		c->spec.output_cap = (uint64_t)x;
	}
	if ((v = json_object_get(b, "encoding"))) {
		const char *s;
		snprintf(f, sizeof(f), "%sencoding", pre);
		if (wrd_j_str(v, f, 16, false, &s, err) < 0 ||
		    (strcmp(s, "utf-8") && strcmp(s, "base64")))
			return wr_err_field(err, f, "%s: must be \"utf-8\" or \"base64\"", f);
		c->b64 = strcmp(s, "base64") == 0;
	}
	return 0;
}

/* ---- running ----------------------------------------------------------------- */

static void maybe_reap(void)
{
	uint64_t now = wr_now_ns();
	pthread_mutex_lock(&g_reap_lock);
	bool due = now - g_last_reap_ns > 10000000000ull;
	if (due)
		g_last_reap_ns = now;
	pthread_mutex_unlock(&g_reap_lock);
	if (due)
		wr_function_pools_reap(g_pools, g_idle_ms);
}

static void run_call(struct call *c)
{
	struct wr_function_pool *p;
	if (wr_function_pools_get(g_pools, &c->pool, &p, &c->err) == 0) {
		/* the tenant of the pool's refusal events (audit.h) */
		wr_audit_owner(wr_function_pool_id(p), c->pool.tenant);
		wr_function_call(p, &c->spec, &c->res, &c->err);
	}
	c->done = true;
}

static json_t *result_json(const struct call *c)
{
	const struct wr_call_result *res = &c->res;
	return json_pack(
	    "{s:i, s:i, s:s, s:o, s:o, s:b, s:b, s:f, s:f, s:I}", "exit_code", res->exit_code,
	    "signal", res->signal, "reason", wr_exit_reason_name(res->reason), "stdout",
	    wrd_j_output(res->out, res->out_len, c->b64), "stderr",
	    wrd_j_output(res->err, res->err_len, c->b64), "stdout_truncated", res->out_truncated,
	    "stderr_truncated", res->err_truncated, "duration_ms", (double)res->duration_ns / 1e6,
	    "cpu_ms", (double)res->cpu_ns / 1e6, "memory_peak_bytes", (json_int_t)res->memory_peak);
}

/* A call that could not run: its zygote died (retry), or a pool failed. */
static json_t *error_json(const wr_err e, const char **code, unsigned *status)
{
	int en = e ? e->errnum : EIO;
	*code = en == ECHILD ? "unavailable" : en == EINVAL ? "invalid_argument" : "internal";
	*status = en == ECHILD ? 503 : en == EINVAL ? 400 : 500;
	json_t *o = json_pack("{s:s, s:s}", "code", *code, "message",
			      e && e->msg ? e->msg : "unknown error");
	if (o && e && e->field)
		json_object_set_new(o, "field", json_string(e->field));
	return json_pack("{s:o}", "error", o);
}

void wrd_api_fn_call(struct wrd_req *r)
{
	if (wrd_query_check(r, NULL) < 0)
		return;
	maybe_reap();
	struct call c = {0};
	if (r->json == NULL) {
		wrd_reply_error(r, "invalid_argument", "body", "body: a call object is required");
		return;
	}
	if (parse_call(r, r->json, "", &c, &c.err) < 0) {
		wrd_reply_err(r, c.err);
		call_clear(&c);
		return;
	}
	run_call(&c);
	if (c.err) {
		if (wr_err_code(c.err) == ECHILD)
			wrd_reply_error(r, "unavailable", NULL, "%s", c.err->msg);
		else
			wrd_reply_err(r, c.err);
	} else {
		json_t *j = result_json(&c);
		if (j)
			wrd_reply_json(r, 200, j);
		else
			wrd_reply_error(r, "internal", NULL, "out of memory");
	}
	call_clear(&c);
}

struct batch {
	struct call *calls;
	size_t n, next;
	unsigned running;
	pthread_mutex_t lock;
	pthread_cond_t idle;
};

static void batch_worker(void *arg)
{
	struct batch *b = arg;
	for (;;) {
		pthread_mutex_lock(&b->lock);
		size_t i = b->next < b->n ? b->next++ : b->n;
		pthread_mutex_unlock(&b->lock);
		if (i >= b->n)
			break;
		run_call(&b->calls[i]);
	}
	pthread_mutex_lock(&b->lock);
	b->running--;
	pthread_cond_broadcast(&b->idle);
	pthread_mutex_unlock(&b->lock);
}

void wrd_api_fn_batch(struct wrd_req *r)
{
	if (wrd_query_check(r, NULL) < 0)
		return;
	maybe_reap();
	static const char *const keys[] = {"calls", "parallel", NULL};
	if (r->json == NULL) {
		wrd_reply_error(r, "invalid_argument", "body",
				"body: {\"calls\": [...]} is required");
		return;
	}
	if (wrd_api_known_keys(r, r->json, keys) < 0)
		return;
	json_t *calls = json_object_get(r->json, "calls");
	size_t n = json_is_array(calls) ? json_array_size(calls) : 0;
	if (n == 0 || n > MAX_BATCH) {
		wrd_reply_error(r, "invalid_argument", "calls",
				"calls: an array of 1 to %d call objects", MAX_BATCH);
		return;
	}
	int64_t parallel = n < 8 ? (int64_t)n : 8;
	json_t *v;
	_cleanup_err_ wr_err err = NULL;
	if ((v = json_object_get(r->json, "parallel")) &&
	    wrd_j_int(v, "parallel", 1, 64, &parallel, &err) < 0) {
		wrd_reply_err(r, err);
		return;
	}
	struct batch b = {.calls = calloc(n, sizeof(struct call)), .n = n};
	if (b.calls == NULL) {
		wrd_reply_error(r, "internal", NULL, "out of memory");
		return;
	}
	/* Every call is validated before any runs: a bad one is a 400 naming
	 * it ("calls[3].timeout") and nothing ran. */
	for (size_t i = 0; i < n; i++) {
		char pre[32];
		snprintf(pre, sizeof(pre), "calls[%zu].", i);
		if (parse_call(r, json_array_get(calls, i), pre, &b.calls[i], &err) < 0) {
			wrd_reply_err(r, err);
			goto out;
		}
	}
	pthread_mutex_init(&b.lock, NULL);
	pthread_cond_init(&b.idle, NULL);
	b.running = 1; /* this thread */
	for (int64_t i = 1; i < parallel && (size_t)i < n; i++) {
		pthread_mutex_lock(&b.lock);
		b.running++;
		pthread_mutex_unlock(&b.lock);
		if (wrd_spawn_long(batch_worker, &b) < 0) {
			/* At the thread cap: fewer at once, not an error. */
			pthread_mutex_lock(&b.lock);
			b.running--;
			pthread_mutex_unlock(&b.lock);
			break;
		}
	}
	batch_worker(&b);
	pthread_mutex_lock(&b.lock);
	while (b.running > 0)
		pthread_cond_wait(&b.idle, &b.lock);
	pthread_mutex_unlock(&b.lock);
	pthread_cond_destroy(&b.idle);
	pthread_mutex_destroy(&b.lock);
	json_t *results = json_array();
	for (size_t i = 0; results && i < n; i++) {
		const char *code;
		unsigned status;
		json_array_append_new(results, b.calls[i].err
						   ? error_json(b.calls[i].err, &code, &status)
						   : result_json(&b.calls[i]));
	}
	if (results)
		wrd_reply_json(r, 200, json_pack("{s:o}", "results", results));
	else
		wrd_reply_error(r, "internal", NULL, "out of memory");
out:
	for (size_t i = 0; i < n; i++)
		call_clear(&b.calls[i]);
	free(b.calls);
}
