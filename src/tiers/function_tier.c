/* The function tier behind wr_tier_ops: a sandbox is one call.
 *
 *   create  validate what a call can honour (errors name the field) -> the
 *           pool for (image, memory, pids, disk) from the tier's own set,
 *           its zygote started (the slot is forked ahead as for any call)
 *   exec    the one call: argv, env (the sandbox's, then the command's),
 *           stdin (read from the fd, up to 64 MiB), timeout, output cap;
 *           a wr_exec_ctl kills it (reason KILLED); buffered output is
 *           handed to on_output after the call when streaming was asked
 *   kill    kills the call (now, or as soon as it would start)
 *   destroy kill, then free (the pool stays warm for the next sandbox)
 *   fs      refused: nothing of a call outlives it
 *
 * The sandbox type is opaque to callers: this file's struct fn_sandbox is
 * what the tier's struct wr_sandbox pointers point to (never handed to
 * another tier's operations: the ops come with the pointer). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "tiers/function_internal.h"

struct fn_sandbox {
	struct wr_function_pool *pool; /* borrowed from g_set */
	char **env;		       /* "K=V" of the spec */
	size_t n_env;
	uint64_t memory, pids, nofile;
	pthread_mutex_t lock;
	bool used, killed;
	struct wr_exec_ctl *running; /* the call's ctl while it runs */
};

static pthread_mutex_t g_set_lock = PTHREAD_MUTEX_INITIALIZER;
static struct wr_function_pools *g_set;

#define MAX_STDIN (64ull << 20)

static int fn_create(const struct wr_sandbox_spec *spec, struct wr_sandbox **out, wr_err *err)
{
	if (spec->n_layers || spec->layers)
		return wr_err_field(err, "layers", "the function tier takes one image");
	if (spec->capset != WR_CAPSET_NONE)
		return wr_err_field(err, "capset", "function calls run without capabilities");
	if (spec->cpus > 0 || spec->cpu_weight)
		return wr_err_field(err, "cpus", "function calls are bounded by cpu time instead");
	if (spec->user && spec->user != WR_FNP_CALL_UID)
		return wr_err_field(err, "user", "function calls run as uid %d", WR_FNP_CALL_UID);
	if (spec->workdir && strcmp(spec->workdir, "/") && strcmp(spec->workdir, WR_FNP_WORKDIR))
		return wr_err_field(err, "workdir", "function calls run in %s", WR_FNP_WORKDIR);
	if (spec->hostname)
		return wr_err_field(err, "hostname", "function calls share their pool's hostname");
	struct fn_sandbox *sb = calloc(1, sizeof(*sb));
	if (sb == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	pthread_mutex_init(&sb->lock, NULL);
	sb->memory = spec->memory_bytes ? spec->memory_bytes : 256ull << 20;
	sb->pids = spec->pids ? spec->pids : 64;
	sb->nofile = spec->nofile ? spec->nofile : 256;
	int r = 0;
	sb->env = wr_env_merge(NULL, 0, spec->env, spec->n_env, &sb->n_env, err);
	if (sb->env == NULL) {
		r = -1;
		goto fail;
	}
	/* A pool holds many calls: its limits are a multiple of one call's. */
	struct wr_function_pool_spec ps = {.image = spec->image,
					   .tenant = "",
					   .memory_bytes = sb->memory * 4,
					   .pids = sb->pids * 4,
					   .tmp_bytes = spec->disk_bytes};
	pthread_mutex_lock(&g_set_lock);
	if (g_set == NULL)
		r = wr_function_pools_new(&g_set, err);
	if (r == 0)
		r = wr_function_pools_get(g_set, &ps, &sb->pool, err);
	pthread_mutex_unlock(&g_set_lock);
	if (r < 0)
		goto fail;
	*out = (struct wr_sandbox *)sb;
	return 0;
fail:
	wr_env_free(sb->env);
	pthread_mutex_destroy(&sb->lock);
	free(sb);
	return wr_err_wrap(err, "function tier: create");
}

static int read_stdin(int fd, struct wr_buf *b, wr_err *err)
{
	char tmp[65536];
	for (;;) {
		ssize_t n = read(fd, tmp, sizeof(tmp));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return wr_err_sys(err, "read stdin");
		if (n == 0)
			return 0;
		if (b->len + (size_t)n > MAX_STDIN)
			return wr_err_field(err, "stdin", "at most 64 MiB for a function call");
		if (wr_buf_append(b, tmp, (size_t)n) < 0)
			return wr_err_set(err, ENOMEM, "out of memory");
	}
}

static int fn_exec(struct wr_sandbox *s, const struct wr_exec_spec *es, struct wr_exec_result *res,
		   wr_err *err)
{
	struct fn_sandbox *sb = (struct fn_sandbox *)s;
	memset(res, 0, sizeof(*res));
	if (es->pty)
		return wr_err_field(err, "pty", "function calls have no terminal");
	if (es->cwd && strcmp(es->cwd, WR_FNP_WORKDIR))
		return wr_err_field(err, "cwd", "function calls run in %s", WR_FNP_WORKDIR);
	if ((es->user >= 0 && es->user != WR_FNP_CALL_UID) ||
	    (es->group >= 0 && es->group != WR_FNP_CALL_UID))
		return wr_err_field(err, "user", "function calls run as uid %d", WR_FNP_CALL_UID);
	struct wr_exec_ctl own;
	struct wr_exec_ctl *ctl = es->ctl ? es->ctl : &own;
	if (ctl == &own)
		wr_exec_ctl_init(&own);
	pthread_mutex_lock(&sb->lock);
	bool used = sb->used, killed = sb->killed;
	sb->used = true;
	if (!used)
		sb->running = ctl;
	pthread_mutex_unlock(&sb->lock);
	int r = 0;
	struct wr_buf in = {0};
	size_t n_env = 0;
	char **env = NULL;
	struct wr_env_kv *kv = NULL;
	if (used) {
		r = wr_err_set(err, EBUSY, "a function sandbox runs one command");
		goto out;
	}
	if (killed)
		wr_exec_ctl_kill(ctl);
	if (es->stdin_fd >= 0 && (r = read_stdin(es->stdin_fd, &in, err)) < 0)
		goto out;
	env =
	    wr_env_merge((const char *const *)sb->env, sb->n_env, es->env, es->n_env, &n_env, err);
	kv = calloc(n_env + 1, sizeof(*kv));
	if (env == NULL || kv == NULL) {
		r = env ? wr_err_set(err, ENOMEM, "out of memory") : -1;
		goto out;
	}
	for (size_t i = 0; i < n_env; i++) {
		char *eq = strchr(env[i], '=');
		*eq = 0; /* wr_env_merge made every entry "K=V" */
		kv[i] = (struct wr_env_kv){.key = env[i], .value = eq + 1};
	}
	struct wr_call_spec cs = {.argv = es->argv,
				  .env = kv,
				  .n_env = n_env,
				  .stdin_data = in.p,
				  .stdin_len = in.len,
				  .timeout_ms = es->timeout_ms,
				  .memory_bytes = sb->memory,
				  .pids = sb->pids,
				  .nofile = sb->nofile,
				  .output_cap =
				      es->output_cap ? es->output_cap : WR_DEFAULT_OUTPUT_CAP,
				  .ctl = ctl};
	struct wr_call_result cr;
	if ((r = wr_function_call(sb->pool, &cs, &cr, err)) < 0)
		goto out;
	*res = (struct wr_exec_result){.reason = cr.reason,
				       .exit_code = cr.exit_code,
				       .signal = cr.signal,
				       .out = cr.out,
				       .err = cr.err,
				       .out_len = cr.out_len,
				       .err_len = cr.err_len,
				       .out_truncated = cr.out_truncated,
				       .err_truncated = cr.err_truncated,
				       .duration_ns = cr.duration_ns,
				       .cpu_ns = cr.cpu_ns,
				       .memory_peak = cr.memory_peak};
	if (es->on_output) {
		/* Streaming was asked: the output as it came, after the call. */
		if (res->out_len)
			es->on_output(es->ctx, 1, res->out, res->out_len);
		if (res->err_len)
			es->on_output(es->ctx, 2, res->err, res->err_len);
	}
out:
	pthread_mutex_lock(&sb->lock);
	if (sb->running == ctl)
		sb->running = NULL;
	pthread_mutex_unlock(&sb->lock);
	if (ctl == &own)
		wr_exec_ctl_destroy(&own);
	free(kv);
	wr_env_free(env);
	free(in.p);
	return r < 0 ? wr_err_wrap(err, "function tier: exec") : 0;
}

static int fn_fs(struct wr_sandbox *s, struct wr_fs *out, wr_err *err)
{
	(void)s;
	(void)out;
	return wr_err_set(err, ENOTSUP,
			  "function tier: a call's files live only as long as the call (pass "
			  "input files with the call)");
}

static int fn_kill(struct wr_sandbox *s, wr_err *err)
{
	(void)err;
	struct fn_sandbox *sb = (struct fn_sandbox *)s;
	pthread_mutex_lock(&sb->lock);
	sb->killed = true;
	if (sb->running)
		wr_exec_ctl_kill(sb->running);
	pthread_mutex_unlock(&sb->lock);
	return 0;
}

static int fn_destroy(struct wr_sandbox **ps, wr_err *err)
{
	struct fn_sandbox *sb = (struct fn_sandbox *)*ps;
	if (sb == NULL)
		return 0;
	*ps = NULL;
	fn_kill((struct wr_sandbox *)sb, err);
	/* Invariant (wr_tier_ops): no exec is in flight when destroy is called. */
	wr_env_free(sb->env);
	pthread_mutex_destroy(&sb->lock);
	free(sb);
	return 0;
}

const struct wr_tier_ops wr_function_tier = {
    .name = "function",
    .create = fn_create,
    .exec = fn_exec,
    .fs = fn_fs,
    .kill = fn_kill,
    .destroy = fn_destroy,
};

void wr_function_tier_cleanup(void)
{
	pthread_mutex_lock(&g_set_lock);
	wr_function_pools_free(&g_set);
	pthread_mutex_unlock(&g_set_lock);
}
