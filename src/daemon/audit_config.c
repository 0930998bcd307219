/* The audit's configuration: the "audit" object of warrend's config.
 *
 *   {"enabled": true, "window": 10, "rows_per_second": 20, "burst": 200,
 *    "max_open": 8192, "retention": 604800, "max_per_sandbox": 10000,
 *    "max_rows": 1000000, "retention_check": 60, "rules": "/etc/warren/audit-rules.json",
 *    "kernel_audit": "auto", "ignore_clone3_enosys": true, "cgroup_poll_ms": 1000,
 *    "init_netns": "/run/warren/init-netns"}
 *
 * Every key is optional; an unknown key or a bad value fails the start
 * with the key named ("audit.window"). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/audit_internal.h"
#include "daemon/jsonutil.h"

void wr_audit_config_default(struct wr_audit_config *c)
{
	memset(c, 0, sizeof(*c));
	c->enabled = true;
	c->window_s = 10;
	c->rows_per_s = 20;
	c->burst = 200;
	c->max_open = 8192;
	c->retention_s = 7 * 86400;
	c->max_per_sandbox = 10000;
	c->max_rows = 1000000;
	c->retention_check_s = 60;
	c->ignore_clone3_enosys = true;
	c->cgroup_poll_ms = 1000;
}

void wr_audit_config_clear(struct wr_audit_config *c)
{
	free(c->rules_path);
	free(c->kernel_audit);
	free(c->init_netns);
	c->rules_path = NULL;
	c->kernel_audit = NULL;
	c->init_netns = NULL;
}

int wr_audit_config_parse(json_t *obj, struct wr_audit_config *c, wr_err *err)
{
	wr_audit_config_default(c);
	if (obj == NULL)
		return 0;
	if (!json_is_object(obj))
		return wr_err_field(err, "audit", "audit: must be an object");
	const char *k;
	json_t *v;
	json_object_foreach(obj, k, v)
	{
		char f[64];
		snprintf(f, sizeof(f), "audit.%s", k);
		int64_t x = 0;
		double d = 0;
		const char *s;
		int r = 0;
		if (strcmp(k, "enabled") == 0)
			r = wrd_j_bool(v, f, &c->enabled, err);
		else if (strcmp(k, "window") == 0) {
			if ((r = wrd_j_num(v, f, 0, 3600, &d, err)) == 0)
				c->window_s = d;
		} else if (strcmp(k, "rows_per_second") == 0) {
			if ((r = wrd_j_num(v, f, 0, 1e6, &d, err)) == 0)
				c->rows_per_s = d;
		} else if (strcmp(k, "burst") == 0) {
			if ((r = wrd_j_int(v, f, 1, 1000000, &x, err)) == 0)
				c->burst = (unsigned)x;
		} else if (strcmp(k, "max_open") == 0) {
			if ((r = wrd_j_int(v, f, 16, 10000000, &x, err)) == 0)
				c->max_open = (unsigned)x;
		} else if (strcmp(k, "retention") == 0) {
			if ((r = wrd_j_int(v, f, 1, 10LL * 365 * 86400, &x, err)) == 0)
				c->retention_s = x;
		} else if (strcmp(k, "max_per_sandbox") == 0) {
			r = wrd_j_int(v, f, 1, 1000000000, &c->max_per_sandbox, err);
		} else if (strcmp(k, "max_rows") == 0) {
			r = wrd_j_int(v, f, 1, 1000000000, &c->max_rows, err);
		} else if (strcmp(k, "retention_check") == 0) {
			if ((r = wrd_j_int(v, f, 1, 86400, &x, err)) == 0)
				c->retention_check_s = (unsigned)x;
		} else if (strcmp(k, "rules") == 0) {
			if ((r = wrd_j_str(v, f, 4095, false, &s, err)) == 0) {
				struct wra_rules tmp;
				/* Checked now so that a bad file fails the start, naming it. */
				if ((r = wra_rules_load(s, &tmp, err)) == 0) {
					wra_rules_free(&tmp);
					free(c->rules_path);
					if ((c->rules_path = strdup(s)) == NULL)
						r = wr_err_set(err, ENOMEM, "out of memory");
				} else if (*err && (*err)->field == NULL) {
					/* a file that cannot be read: name the key */
					char msg[512];
					snprintf(msg, sizeof(msg), "%s", (*err)->msg);
					wr_err_free(err);
					wr_err_field(err, f, "%s: %s", f, msg);
				}
			}
		} else if (strcmp(k, "kernel_audit") == 0) {
			if ((r = wrd_j_str(v, f, 16, false, &s, err)) == 0) {
				if (strcmp(s, "auto") && strcmp(s, "listen") && strcmp(s, "off"))
					r = wr_err_field(err, f, "%s: one of auto, listen, off", f);
				else if ((c->kernel_audit = strdup(s)) == NULL)
					r = wr_err_set(err, ENOMEM, "out of memory");
			}
		} else if (strcmp(k, "init_netns") == 0) {
			if ((r = wrd_j_str(v, f, 4096, false, &s, err)) == 0) {
				if (*s != '/')
					r = wr_err_field(err, f, "%s: an absolute path", f);
				else if ((c->init_netns = strdup(s)) == NULL)
					r = wr_err_set(err, ENOMEM, "out of memory");
			}
		} else if (strcmp(k, "ignore_clone3_enosys") == 0) {
			r = wrd_j_bool(v, f, &c->ignore_clone3_enosys, err);
		} else if (strcmp(k, "cgroup_poll_ms") == 0) {
			if ((r = wrd_j_int(v, f, 0, 600000, &x, err)) == 0)
				c->cgroup_poll_ms = (unsigned)x;
		} else {
			r = wr_err_field(err, f, "%s: unknown key", f);
		}
		if (r < 0) {
			wr_audit_config_clear(c);
			return -EINVAL;
		}
	}
	return 0;
}
