/* CRIU's availability on this node: checked once at start with the
 * configured binary (config "criu", default the build's warren-criu, see
 * scripts/criu-build.sh). Debian 12's own criu 3.17.1 fails this check on
 * kernels from 6.13 on ("Unexpected rt vDSO area bounds"), so the check,
 * not the binary's presence, decides. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/checkpoint.h"
#include "tiers/container.h"

static char criu_path[4096];
static char reason[4700] = "not checked";
static bool available;

/* The options warren's CRIU patches add (scripts/criu-patches), which
 * every restore is run with (tiers/container_ckpt.c): a criu without them
 * (Debian's own, where it starts) passes `criu check` and then fails each
 * restore. Their names are in the binary's option table. NULL: all there. */
static const char *missing_option(const char *path)
{
	static const char *const need[] = {"landlock-ruleset-fd", "userns-lower-base"};
	_cleanup_free_ char *bin = NULL;
	int n = wr_read_file_at(AT_FDCWD, path, &bin, 256u << 20, NULL);
	for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++)
		if (n <= 0 || memmem(bin, (size_t)n, need[i], strlen(need[i])) == NULL)
			return need[i];
	return NULL;
}

void wrd_ckpt_init(const char *path)
{
	snprintf(criu_path, sizeof(criu_path), "%s", path ? path : "");
	available = false;
	if (criu_path[0] != '/') {
		snprintf(reason, sizeof(reason), "no criu binary configured (config \"criu\")");
	} else if (access(criu_path, X_OK) < 0) {
		snprintf(reason, sizeof(reason), "%.4096s: %s", criu_path, strerror(errno));
	} else {
		char *argv[] = {criu_path, "check", NULL};
		_cleanup_err_ wr_err err = NULL;
		const char *opt = NULL;
		if (wr_run_tool(argv, &err) < 0)
			snprintf(reason, sizeof(reason), "`criu check` fails: %.600s", err->msg);
		else if ((opt = missing_option(criu_path)) != NULL)
			snprintf(reason, sizeof(reason),
				 "%.4000s has no --%s: a CRIU without warren's patches "
				 "(scripts/criu-build.sh builds one)",
				 criu_path, opt);
		else {
			available = true;
			reason[0] = 0;
		}
	}
	/* the container tier checkpoints only with a CRIU that passed */
	wr_container_set_criu(available ? criu_path : NULL);
	if (available)
		wr_info("checkpoints: %s passes `criu check`", criu_path);
	else
		wr_warn("checkpoints off (keep_memory=false refused for containers): %s", reason);
}

bool wrd_ckpt_available(const char **why)
{
	if (why)
		*why = available ? NULL : reason;
	return available;
}

const char *wrd_ckpt_criu(void)
{
	return criu_path;
}

json_t *wrd_ckpt_json(void)
{
	json_t *o = json_object();
	json_object_set_new(o, "available", json_boolean(available));
	json_object_set_new(o, "criu", json_string(criu_path));
	if (!available)
		json_object_set_new(o, "reason", json_string(reason));
	return o;
}
