/* See function_fixture.h. */
#include "function_fixture.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <linux/magic.h>

#include "common/util.h"
#include "tier_fixture.h"

static char g_tmp[256];
static char g_base[64];
static const char *g_image;

const char *fx_image(void)
{
	return g_image;
}

const char *fx_base(void)
{
	return g_base;
}

int fx_setup(const char *prefix)
{
	g_image = getenv("WARREN_TEST_IMAGE");
	const char *init = getenv("WARREN_INIT");
	const char *zyg = getenv("WARREN_ZYGOTE");
	if (g_image == NULL || init == NULL || zyg == NULL) {
		fprintf(stderr, "WARREN_TEST_IMAGE, WARREN_INIT and WARREN_ZYGOTE must be set\n");
		return -1;
	}
	/* mkdtemp's template: six 'X' written at runtime (house rule on the
	 * marker words) */
	int n = snprintf(g_tmp, sizeof(g_tmp) - 7, "/tmp/%s-", prefix);
	memset(g_tmp + n, 'X', 6);
	g_tmp[n + 6] = '\0';
	if (mkdtemp(g_tmp) == NULL)
		return -1;
	chmod(g_tmp, 0755);
	snprintf(g_base, sizeof(g_base), "%s-%d", prefix, (int)getpid());
	char state_dir[300], run_dir[300];
	snprintf(state_dir, sizeof(state_dir), "%s/state", g_tmp);
	snprintf(run_dir, sizeof(run_dir), "%s/run", g_tmp);
	struct wr_container_config cfg = {
	    .state_dir = state_dir, .run_dir = run_dir, .init_path = init, .cgroup_base = g_base};
	wr_err err = NULL;
	if (wr_container_init(&cfg, &err) < 0) {
		fprintf(stderr, "container init: %s\n", err->msg);
		wr_err_free(&err);
		return -1;
	}
	struct wr_function_config fc = {.zygote_path = zyg};
	if (wr_function_init(&fc, &err) < 0) {
		fprintf(stderr, "function init: %s\n", err->msg);
		wr_err_free(&err);
		return -1;
	}
	return 0;
}

struct wr_function_pool *fx_pool(const char *image, const char *language,
				 const char *const *preload, size_t n_preload, const char *tenant)
{
	struct wr_function_pool_spec spec = {.image = image,
					     .language = language,
					     .preload = preload,
					     .n_preload = n_preload,
					     .tenant = tenant};
	struct wr_function_pool *p = NULL;
	wr_err err = NULL;
	if (wr_function_pool_create(&spec, &p, &err) < 0) {
		fprintf(stderr, "pool: %s\n", err->msg);
		wr_err_free(&err);
		return NULL;
	}
	return p;
}

struct wr_call_result fx_call(struct wr_function_pool *p, const struct wr_call_spec *spec)
{
	struct wr_call_result r;
	wr_err err = NULL;
	if (wr_function_call(p, spec, &r, &err) < 0) {
		fprintf(stderr, "call: %s\n", err->msg);
		wr_err_free(&err);
		memset(&r, 0, sizeof(r));
		r.exit_code = -1000;
		r.out = strdup("");
		r.err = strdup("call failed");
	}
	return r;
}

/* Each directory beneath our base in every hierarchy: fn(path). */
static int walk(const char *dir, int depth, int (*fn)(const char *path))
{
	int n = fn(dir);
	DIR *d = opendir(dir);
	if (d == NULL)
		return n;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (de->d_type != DT_DIR || de->d_name[0] == '.')
			continue;
		char sub[1024];
		snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name);
		n += walk(sub, depth + 1, fn);
	}
	closedir(d);
	return n;
}

static int each_base(int (*fn)(const char *path), bool unified_only)
{
	char cg[600], line[512];
	int n = 0;
	FILE *f = fopen("/proc/self/cgroup", "r");
	while (f && fgets(line, sizeof(line), f)) {
		char *ctrl = strchr(line, ':') + 1;
		char *path = strchr(ctrl, ':');
		*path++ = 0;
		path[strcspn(path, "\n")] = 0;
		if (strncmp(ctrl, "name=", 5) == 0 || (unified_only && *ctrl))
			continue;
		snprintf(cg, sizeof(cg), "/sys/fs/cgroup/%s%s/%s", *ctrl ? ctrl : "unified", path,
			 g_base);
		if (!*ctrl && access(cg, F_OK) < 0)
			snprintf(cg, sizeof(cg), "/sys/fs/cgroup%s/%s", path, g_base);
		n += walk(cg, 0, fn);
	}
	if (f)
		fclose(f);
	return n;
}

static int procs_in(const char *dir)
{
	char p[1100];
	snprintf(p, sizeof(p), "%s/cgroup.procs", dir);
	char *buf = NULL;
	if (wr_read_file_at(AT_FDCWD, p, &buf, 1 << 20, NULL) < 0)
		return 0;
	int n = 0;
	for (char *c = buf; *c; c++)
		n += *c == '\n';
	free(buf);
	return n;
}

static int one(const char *dir)
{
	(void)dir;
	return 1;
}

int fx_count_procs(void)
{
	return each_base(procs_in, true);
}

int fx_count_cgroups(void)
{
	return each_base(one, false);
}

int fx_teardown(void)
{
	return tierfx_teardown(g_base, g_tmp);
}

int fx_settled_cgroups(void)
{
	int n = fx_count_cgroups();
	for (int i = 0; i < 60; i++) {
		usleep(500000);
		int m = fx_count_cgroups();
		if (m == n)
			break;
		n = m;
	}
	return n;
}

bool fx_peak_resettable(void)
{
	struct utsname u;
	unsigned major = 0, minor = 0;
	if (uname(&u) == 0 && sscanf(u.release, "%u.%u", &major, &minor) == 2 &&
	    (major > 6 || (major == 6 && minor >= 12)))
		return true;
	struct statfs sf;
	/* memory on v1 (hybrid or v1): the peak resets by a write anywhere */
	return statfs("/sys/fs/cgroup", &sf) == 0 && sf.f_type != CGROUP2_SUPER_MAGIC;
}
