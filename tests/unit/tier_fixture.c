/* See tier_fixture.h. */
#include "tier_fixture.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tiers/container.h"

static bool keep_none(const char *id, void *ctx)
{
	(void)id;
	(void)ctx;
	return false;
}

int tierfx_each_base(const char *base, int (*fn)(const char *dir))
{
	char cg[600], line[512];
	int n = 0;
	FILE *f = fopen("/proc/self/cgroup", "r");
	while (f && fgets(line, sizeof(line), f)) {
		char *ctrl = strchr(line, ':') + 1;
		char *path = strchr(ctrl, ':');
		*path++ = 0;
		path[strcspn(path, "\n")] = 0;
		if (strncmp(ctrl, "name=", 5) == 0)
			continue;
		snprintf(cg, sizeof(cg), "/sys/fs/cgroup/%s%s/%s", *ctrl ? ctrl : "unified", path,
			 base);
		n += fn(cg);
	}
	if (f)
		fclose(f);
	return n;
}

static int remove_dir(const char *dir)
{
	rmdir(dir);
	return 0;
}

int tierfx_teardown(const char *base, const char *tmp)
{
	wr_err err = NULL;
	if (wr_container_sweep(keep_none, NULL, &err) < 0) {
		fprintf(stderr, "sweep: %s\n", err->msg);
		wr_err_free(&err);
	}
	tierfx_each_base(base, remove_dir);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	return system(cmd) == 0 ? 0 : -1;
}
