#include "tiers/tier.h"

#include <errno.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tiers/container.h"

const char *wr_exit_reason_name(enum wr_exit_reason r)
{
	switch (r) {
	case WR_EXIT_EXITED: return "exited";
	case WR_EXIT_SIGNALED: return "signaled";
	case WR_EXIT_TIMEOUT: return "timeout";
	case WR_EXIT_OOM: return "oom";
	case WR_EXIT_KILLED: return "killed";
	case WR_EXIT_START_FAILED: return "start_failed";
	case WR_EXIT_CPU_TIME: return "cpu_time";
	}
	return "unknown";
}

void wr_exec_result_free(struct wr_exec_result *r)
{
	free(r->out);
	free(r->err);
	r->out = r->err = NULL;
}

/* Tiers in libraries of their own register when they are initialised
 * (the function tier: wr_function_init), so that the core does not link
 * them. Never removed. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct wr_tier_ops *registered[4];

void wr_tier_register(const struct wr_tier_ops *ops)
{
	pthread_mutex_lock(&reg_lock);
	for (size_t i = 0; i < sizeof(registered) / sizeof(registered[0]); i++) {
		if (registered[i] == ops)
			break;
		if (registered[i] == NULL) {
			registered[i] = ops;
			break;
		}
	}
	pthread_mutex_unlock(&reg_lock);
}

const struct wr_tier_ops *wr_tier_lookup(const char *name)
{
	if (name == NULL || strcmp(name, "container") == 0)
		return &wr_container_tier;
	const struct wr_tier_ops *t = NULL;
	pthread_mutex_lock(&reg_lock);
	for (size_t i = 0; i < sizeof(registered) / sizeof(registered[0]) && !t; i++)
		if (registered[i] && strcmp(registered[i]->name, name) == 0)
			t = registered[i];
	pthread_mutex_unlock(&reg_lock);
	return t;
}

char **wr_env_merge(const char *const *base, size_t nbase, const struct wr_env_kv *kv, size_t nkv,
		    size_t *n, wr_err *err)
{
	char **env = calloc(nbase + nkv + 1, sizeof(char *));
	size_t k = 0;
	if (env == NULL)
		goto oom;
	for (size_t i = 0; i < nbase; i++)
		if ((env[k++] = strdup(base[i])) == NULL)
			goto oom;
	for (size_t i = 0; i < nkv; i++) {
		if (kv[i].key == NULL || *kv[i].key == 0 || strchr(kv[i].key, '=')) {
			wr_err_field(err, "env", "invalid environment variable name '%s'",
				     kv[i].key ? kv[i].key : "");
			goto fail;
		}
		char *s = NULL;
		if (asprintf(&s, "%s=%s", kv[i].key, kv[i].value ? kv[i].value : "") < 0)
			goto oom;
		size_t klen = strlen(kv[i].key), j;
		for (j = 0; j < k; j++)
			if (strncmp(env[j], s, klen + 1) == 0)
				break;
		if (j < k)
			free(env[j]);
		else
			k++;
		env[j] = s;
	}
	*n = k;
	return env;
oom:
	wr_err_set(err, ENOMEM, "out of memory");
fail:
	wr_env_free(env);
	return NULL;
}

void wr_env_free(char **env)
{
	if (env == NULL)
		return;
	for (size_t i = 0; env[i]; i++)
		free(env[i]);
	free(env);
}

int wr_exec_spec_defaults(const struct wr_exec_spec *in, const struct wr_env_kv *env, size_t n_env,
			  const char *workdir, int user, int group, struct wr_exec_spec *out,
			  struct wr_env_kv **env_owned, wr_err *err)
{
	*out = *in;
	struct wr_env_kv *e = calloc(n_env + in->n_env + 1, sizeof(*e));
	if (e == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (n_env)
		memcpy(e, env, n_env * sizeof(*e));
	if (in->n_env)
		memcpy(e + n_env, in->env, in->n_env * sizeof(*e));
	out->env = e;
	out->n_env = n_env + in->n_env;
	if (out->cwd == NULL)
		out->cwd = workdir;
	if (out->user < 0)
		out->user = user;
	if (out->group < 0)
		out->group = in->user >= 0 ? in->user : group;
	*env_owned = e;
	return 0;
}
