#include "daemon/elastic.h"
#include "daemon/harvest.h"
#include "daemon/config.h"
#include "daemon/dns.h"
#include "daemon/functions.h"
#include "daemon/audit.h"
#include "daemon/network.h"
#include "daemon/images.h"

#include <errno.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "daemon/jsonutil.h"
#include "daemon/sha256.h"

#ifndef WARREN_LIBEXECDIR
#define WARREN_LIBEXECDIR "/usr/local/libexec/warren"
#endif

static int set_str(char **dst, const char *v, wr_err *err)
{
	char *s = strdup(v);
	if (s == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	free(*dst);
	*dst = s;
	return 0;
}

static int cfg_str(json_t *v, const char *key, char **dst, wr_err *err)
{
	const char *s;
	if (wrd_j_str(v, key, PATH_MAX - 1, false, &s, err) < 0)
		return -EINVAL;
	return set_str(dst, s, err);
}

static int cfg_uint(json_t *v, const char *key, int64_t min, int64_t max, unsigned *dst,
		    wr_err *err)
{
	int64_t x;
	if (wrd_j_int(v, key, min, max, &x, err) < 0)
		return -EINVAL;
	*dst = (unsigned)x;
	return 0;
}

static int load_tokens(json_t *arr, struct wrd_config *cfg, wr_err *err)
{
	if (!json_is_array(arr))
		return wr_err_field(err, "tokens", "tokens: must be an array of {tenant, sha256}");
	size_t n = json_array_size(arr);
	cfg->tokens = calloc(n ? n : 1, sizeof(*cfg->tokens));
	if (cfg->tokens == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	size_t i;
	json_t *t;
	json_array_foreach(arr, i, t)
	{
		json_t *tenant = NULL, *sha = NULL;
		json_error_t je;
		if (json_unpack_ex(t, &je, JSON_STRICT, "{s:o, s:o}", "tenant", &tenant, "sha256",
				   &sha) < 0)
			return wr_err_field(
			    err, "tokens",
			    "tokens[%zu]: must be exactly {\"tenant\", \"sha256\"}: %s", i,
			    je.text);
		const char *ts, *hs;
		if (wrd_j_str(tenant, "tokens.tenant", 63, false, &ts, err) < 0 ||
		    wrd_j_str(sha, "tokens.sha256", 64, false, &hs, err) < 0)
			return -EINVAL;
		struct wrd_token *tok = &cfg->tokens[cfg->n_tokens];
		if (wrd_hex_digest(hs, tok->sha256) < 0)
			return wr_err_field(err, "tokens.sha256",
					    "tokens[%zu].sha256: must be 64 hex digits", i);
		if ((tok->tenant = strdup(ts)) == NULL)
			return wr_err_set(err, ENOMEM, "out of memory");
		cfg->n_tokens++;
	}
	return 0;
}

static int load_images(json_t *obj, struct wrd_config *cfg, wr_err *err)
{
	if (wrd_j_strmap(obj, "images", 4096, err) < 0)
		return -EINVAL;
	size_t n = json_object_size(obj);
	cfg->images = calloc(n ? n : 1, sizeof(*cfg->images));
	if (cfg->images == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	const char *k;
	json_t *v;
	json_object_foreach(obj, k, v)
	{
		const char *p = json_string_value(v);
		if (*k == 0 || *k == '/' || p[0] != '/')
			return wr_err_field(err, "images",
					    "images.%s: names must not start with '/' and paths "
					    "must be absolute",
					    k);
		struct wrd_image *im = &cfg->images[cfg->n_images++];
		if ((im->name = strdup(k)) == NULL || (im->path = strdup(p)) == NULL)
			return wr_err_set(err, ENOMEM, "out of memory");
	}
	return 0;
}

static int load_admins(json_t *arr, struct wrd_config *cfg, wr_err *err)
{
	if (!json_is_array(arr))
		return wr_err_field(err, "admin_tenants",
				    "admin_tenants: must be an array of tenant names");
	size_t n = json_array_size(arr);
	cfg->admin_tenants = calloc(n + 1, sizeof(char *));
	if (cfg->admin_tenants == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	size_t i;
	json_t *t;
	json_array_foreach(arr, i, t)
	{
		const char *s;
		if (wrd_j_str(t, "admin_tenants", 63, false, &s, err) < 0)
			return -EINVAL;
		if ((cfg->admin_tenants[cfg->n_admin_tenants] = strdup(s)) == NULL)
			return wr_err_set(err, ENOMEM, "out of memory");
		cfg->n_admin_tenants++;
	}
	return 0;
}

static int load_microvm(json_t *obj, struct wrd_config *cfg, wr_err *err)
{
	const char *kernel = NULL, *initrd = NULL, *qemu = NULL, *accel = NULL, *tmpl = NULL;
	json_error_t je;
	if (json_unpack_ex(obj, &je, JSON_STRICT, "{s:s, s:s, s?s, s?s, s?s}", "kernel", &kernel,
			   "initrd", &initrd, "qemu", &qemu, "accel", &accel, "templates",
			   &tmpl) < 0)
		return wr_err_field(err, "microvm",
				    "microvm: must be {\"kernel\", \"initrd\"[, \"qemu\", "
				    "\"accel\", \"templates\"]} with string values: %s",
				    je.text);
	if (tmpl && tmpl[0] && tmpl[0] != '/')
		return wr_err_field(err, "microvm.templates",
				    "microvm.templates: an absolute directory (tmpfs), or \"\" for "
				    "none");
	cfg->mvm_templates = tmpl ? strdup(tmpl) : NULL;
	if (kernel[0] != '/' || initrd[0] != '/')
		return wr_err_field(err, "microvm",
				    "microvm: kernel and initrd must be absolute paths");
	if (accel && strcmp(accel, "auto") && strcmp(accel, "kvm") && strcmp(accel, "tcg"))
		return wr_err_field(err, "microvm.accel", "microvm.accel: auto, kvm or tcg");
	cfg->mvm_kernel = strdup(kernel);
	cfg->mvm_initrd = strdup(initrd);
	cfg->mvm_qemu = qemu ? strdup(qemu) : NULL;
	cfg->mvm_accel = accel ? strdup(accel) : NULL;
	if (!cfg->mvm_kernel || !cfg->mvm_initrd || (qemu && !cfg->mvm_qemu) ||
	    (accel && !cfg->mvm_accel))
		return wr_err_set(err, ENOMEM, "out of memory");
	return 0;
}

static int load_vm(json_t *obj, struct wrd_config *cfg, wr_err *err)
{
	const char *qemu = NULL, *img = NULL, *accel = NULL;
	json_int_t boot = 300, shut = 10;
	json_error_t je;
	if (json_unpack_ex(obj, &je, JSON_STRICT, "{s?s, s?s, s?s, s?I, s?I}", "qemu", &qemu,
			   "qemu_img", &img, "accel", &accel, "boot_timeout", &boot,
			   "shutdown_timeout", &shut) < 0)
		return wr_err_field(err, "vm",
				    "vm: must be {[\"qemu\", \"qemu_img\", \"accel\", "
				    "\"boot_timeout\", \"shutdown_timeout\"]}: %s",
				    je.text);
	if (accel && strcmp(accel, "auto") && strcmp(accel, "kvm") && strcmp(accel, "tcg"))
		return wr_err_field(err, "vm.accel", "vm.accel: auto, kvm or tcg");
	if (boot < 1 || boot > 3600)
		return wr_err_field(err, "vm.boot_timeout", "vm.boot_timeout: 1 to 3600 seconds");
	if (shut < 0 || shut > 600)
		return wr_err_field(err, "vm.shutdown_timeout",
				    "vm.shutdown_timeout: 0 to 600 seconds");
	cfg->vm_on = true;
	cfg->vm_qemu = qemu ? strdup(qemu) : NULL;
	cfg->vm_qemu_img = img ? strdup(img) : NULL;
	cfg->vm_accel = accel ? strdup(accel) : NULL;
	cfg->vm_boot_timeout_ms = (uint64_t)boot * 1000;
	cfg->vm_shutdown_timeout_ms = (uint64_t)shut * 1000;
	if ((qemu && !cfg->vm_qemu) || (img && !cfg->vm_qemu_img) || (accel && !cfg->vm_accel))
		return wr_err_set(err, ENOMEM, "out of memory");
	return 0;
}

static int load_defaults(json_t *obj, struct wrd_limits *d, wr_err *err)
{
	if (!json_is_object(obj))
		return wr_err_field(err, "defaults", "defaults: must be an object");
	const char *k;
	json_t *v;
	json_object_foreach(obj, k, v)
	{
		int r;
		if (strcmp(k, "cpu") == 0)
			r = wrd_j_num(v, "defaults.cpu", 0, 64, &d->cpu, err);
		else if (strcmp(k, "memory_mb") == 0)
			r = wrd_j_int(v, "defaults.memory_mb", 8, 1048576, &d->memory_mb, err);
		else if (strcmp(k, "disk_mb") == 0)
			r = wrd_j_int(v, "defaults.disk_mb", 1, 1048576, &d->disk_mb, err);
		else if (strcmp(k, "pids") == 0)
			r = wrd_j_int(v, "defaults.pids", 4, 65536, &d->pids, err);
		else if (strcmp(k, "timeout") == 0)
			r = wrd_j_int(v, "defaults.timeout", 1, 2592000, &d->timeout, err);
		else if (strcmp(k, "idle_timeout") == 0)
			r = wrd_j_int(v, "defaults.idle_timeout", 0, 2592000, &d->idle_timeout,
				      err);
		else
			r = wr_err_field(err, "defaults", "defaults.%s: unknown key", k);
		if (r < 0)
			return -EINVAL;
	}
	return 0;
}

static int load_file(const char *path, struct wrd_config *cfg, wr_err *err)
{
	json_error_t je;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	if (root == NULL)
		return wr_err_set(err, EINVAL, "config %s: line %d: %s", path, je.line, je.text);
	int r = 0;
	if (!json_is_object(root)) {
		r = wr_err_set(err, EINVAL, "config %s: must be a JSON object", path);
		goto out;
	}
	const char *k;
	json_t *v;
	json_object_foreach(root, k, v)
	{
		if (strcmp(k, "socket") == 0)
			r = cfg_str(v, k, &cfg->socket_path, err);
		else if (strcmp(k, "socket_group") == 0)
			r = cfg_str(v, k, &cfg->socket_group, err);
		else if (strcmp(k, "state_dir") == 0)
			r = cfg_str(v, k, &cfg->state_dir, err);
		else if (strcmp(k, "run_dir") == 0)
			r = cfg_str(v, k, &cfg->run_dir, err);
		else if (strcmp(k, "listen") == 0)
			r = cfg_str(v, k, &cfg->listen, err);
		else if (strcmp(k, "unix_tenant") == 0)
			r = cfg_str(v, k, &cfg->unix_tenant, err);
		else if (strcmp(k, "init") == 0)
			r = cfg_str(v, k, &cfg->init_path, err);
		else if (strcmp(k, "criu") == 0)
			r = cfg_str(v, k, &cfg->criu_path, err);
		else if (strcmp(k, "snapshot_key") == 0)
			r = cfg_str(v, k, &cfg->snapshot_key, err);
		else if (strcmp(k, "cgroup_base") == 0)
			r = cfg_str(v, k, &cfg->cgroup_base, err);
		else if (strcmp(k, "bpf_pin_dir") == 0)
			r = cfg_str(v, k, &cfg->bpf_pin_dir, err);
		else if (strcmp(k, "tokens") == 0)
			r = load_tokens(v, cfg, err);
		else if (strcmp(k, "images") == 0)
			r = load_images(v, cfg, err);
		else if (strcmp(k, "image_store") == 0) {
			r = wrd_images_check_config(v, err);
			if (r == 0 && (cfg->image_store = json_dumps(v, 0)) == NULL)
				r = wr_err_set(err, ENOMEM, "out of memory");
		} else if (strcmp(k, "lazy") == 0) {
			r = wrd_images_check_lazy(v, err);
			if (r == 0 && (cfg->lazy = json_dumps(v, 0)) == NULL)
				r = wr_err_set(err, ENOMEM, "out of memory");
		} else if (strcmp(k, "network") == 0) {
			/* dns.c checks its keys, network.c the others */
			r = wrd_dns_check_config(v, err);
			if (r == 0)
				r = wrd_net_check_config(v, err);
			if (r == 0 && (cfg->network = json_dumps(v, 0)) == NULL)
				r = wr_err_set(err, ENOMEM, "out of memory");
		} else if (strcmp(k, "functions") == 0) {
			r = wrd_functions_check_config(v, err);
			if (r == 0 && (cfg->functions = json_dumps(v, 0)) == NULL)
				r = wr_err_set(err, ENOMEM, "out of memory");
		} else if (strcmp(k, "audit") == 0) {
			struct wr_audit_config ac;
			r = wr_audit_config_parse(v, &ac, err);
			wr_audit_config_clear(&ac);
			if (r == 0 && (cfg->audit = json_dumps(v, 0)) == NULL)
				r = wr_err_set(err, ENOMEM, "out of memory");
		} else if (strcmp(k, "admin_tenants") == 0)
			r = load_admins(v, cfg, err);
		else if (strcmp(k, "defaults") == 0)
			r = load_defaults(v, &cfg->defaults, err);
		else if (strcmp(k, "workers") == 0)
			r = cfg_uint(v, k, 1, 1024, &cfg->workers, err);
		else if (strcmp(k, "microvm") == 0)
			r = load_microvm(v, cfg, err);
		else if (strcmp(k, "vm") == 0)
			r = load_vm(v, cfg, err);
		else if (strcmp(k, "spawners") == 0)
			r = cfg_uint(v, k, 0, 8, &cfg->spawners, err);
		else if (strcmp(k, "admission") == 0) {
			struct wrd_admission a;
			r = wrd_elastic_config(v, &a, err);
		} else if (strcmp(k, "harvest") == 0)
			r = wrd_harvest_config(v, err);
		else if (strcmp(k, "max_sandboxes") == 0)
			r = cfg_uint(v, k, 1, 1000000, &cfg->max_sandboxes, err);
		else if (strcmp(k, "max_commands") == 0)
			r = cfg_uint(v, k, 4, 4096, &cfg->max_commands, err);
		else if (strcmp(k, "max_connections") == 0)
			r = cfg_uint(v, k, 4, 100000, &cfg->max_connections, err);
		else if (strcmp(k, "shutdown_timeout") == 0)
			r = cfg_uint(v, k, 0, 3600, &cfg->shutdown_timeout, err);
		else if (strcmp(k, "log_level") == 0) {
			const char *s;
			static const char *const names[] = {"error", "warning", "info", "debug"};
			r = wrd_j_str(v, k, 16, false, &s, err);
			if (r == 0) {
				r = -1;
				for (int i = 0; i < 4; i++)
					if (strcmp(s, names[i]) == 0) {
						cfg->log_level = i;
						r = 0;
					}
				if (r < 0)
					r = wr_err_field(err, k,
							 "log_level: one of error, warning, "
							 "info, debug");
			}
		} else
			r = wr_err_field(err, k, "%s: unknown key", k);
		if (r < 0)
			break;
	}
	if (r < 0)
		wr_err_wrap(err, "config %s", path);
out:
	json_decref(root);
	return r;
}

static char *init_default(void)
{
	char self[PATH_MAX], path[PATH_MAX + 16];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = 0;
		snprintf(path, sizeof(path), "%s/warren-init", dirname(self));
		if (access(path, X_OK) == 0)
			return strdup(path);
	}
	return strdup(WARREN_LIBEXECDIR "/warren-init");
}

/* The CRIU for container checkpoints: the build's warren-criu next to
 * warrend (scripts/criu-build.sh), the installed one, else Debian's. */
static char *criu_default(void)
{
	char self[PATH_MAX], path[PATH_MAX + 16];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = 0;
		snprintf(path, sizeof(path), "%s/warren-criu", dirname(self));
		if (access(path, X_OK) == 0)
			return strdup(path);
	}
	if (access(WARREN_LIBEXECDIR "/warren-criu", X_OK) == 0)
		return strdup(WARREN_LIBEXECDIR "/warren-criu");
	return strdup("/usr/sbin/criu");
}

int wrd_config_load(const char *path, struct wrd_config *cfg, wr_err *err)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->defaults = (struct wrd_limits){.cpu = 0,
					    .memory_mb = 512,
					    .disk_mb = 1024,
					    .pids = 512,
					    .timeout = 300,
					    .idle_timeout = 0};
	cfg->workers = 8;
	cfg->max_sandboxes = 4096;
	cfg->max_commands = 256;
	cfg->max_connections = 1024;
	cfg->shutdown_timeout = 30;
	cfg->log_level = WR_LOG_INFO;
	if (path && load_file(path, cfg, err) < 0)
		return -EINVAL;
	const char *e;
	int r = 0;
	if ((e = getenv("WARREN_STATE_DIR")) && *e)
		r |= set_str(&cfg->state_dir, e, err);
	if ((e = getenv("WARREN_RUN_DIR")) && *e)
		r |= set_str(&cfg->run_dir, e, err);
	if ((e = getenv("WARREN_CGROUP_BASE")) && *e)
		r |= set_str(&cfg->cgroup_base, e, err);
	if ((e = getenv("WARREN_INIT")) && *e)
		r |= set_str(&cfg->init_path, e, err);
	if (!cfg->state_dir)
		r |= set_str(&cfg->state_dir, "/var/lib/warren", err);
	if (!cfg->run_dir)
		r |= set_str(&cfg->run_dir, "/run/warren", err);
	if (!cfg->unix_tenant)
		r |= set_str(&cfg->unix_tenant, "default", err);
	if (!cfg->socket_group)
		r |= set_str(&cfg->socket_group, "warren", err);
	if (!cfg->cgroup_base)
		r |= set_str(&cfg->cgroup_base, "warren", err);
	if (!cfg->socket_path) {
		char *s = NULL;
		if (asprintf(&s, "%s/warren.sock", cfg->run_dir) < 0)
			return wr_err_set(err, ENOMEM, "out of memory");
		cfg->socket_path = s;
	}
	if (!cfg->init_path && (cfg->init_path = init_default()) == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	if ((e = getenv("WARREN_CRIU")) && *e && set_str(&cfg->criu_path, e, err) < 0)
		return -1;
	if (!cfg->criu_path && (cfg->criu_path = criu_default()) == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (r < 0)
		return r;
	if (cfg->state_dir[0] != '/' || cfg->run_dir[0] != '/' || cfg->socket_path[0] != '/')
		return wr_err_field(err, "state_dir",
				    "state_dir, run_dir and socket must be absolute paths");
	return 0;
}

void wrd_config_free(struct wrd_config *cfg)
{
	free(cfg->socket_path);
	free(cfg->socket_group);
	free(cfg->state_dir);
	free(cfg->run_dir);
	free(cfg->listen);
	free(cfg->unix_tenant);
	free(cfg->init_path);
	free(cfg->criu_path);
	free(cfg->snapshot_key);
	free(cfg->cgroup_base);
	free(cfg->bpf_pin_dir);
	for (size_t i = 0; i < cfg->n_tokens; i++)
		free(cfg->tokens[i].tenant);
	free(cfg->tokens);
	for (size_t i = 0; i < cfg->n_images; i++) {
		free(cfg->images[i].name);
		free(cfg->images[i].path);
	}
	free(cfg->images);
	free(cfg->image_store);
	free(cfg->lazy);
	free(cfg->network);
	free(cfg->functions);
	free(cfg->audit);
	free(cfg->mvm_kernel);
	free(cfg->mvm_initrd);
	free(cfg->mvm_qemu);
	free(cfg->mvm_accel);
	free(cfg->mvm_templates);
	free(cfg->vm_qemu);
	free(cfg->vm_qemu_img);
	free(cfg->vm_accel);
	for (size_t i = 0; i < cfg->n_admin_tenants; i++)
		free(cfg->admin_tenants[i]);
	free(cfg->admin_tenants);
	memset(cfg, 0, sizeof(*cfg));
}

const char *wrd_config_image(const struct wrd_config *cfg, const char *name)
{
	for (size_t i = 0; i < cfg->n_images; i++)
		if (strcmp(cfg->images[i].name, name) == 0)
			return cfg->images[i].path;
	return NULL;
}

bool wrd_config_is_admin(const struct wrd_config *cfg, const char *tenant)
{
	if (tenant == NULL)
		return false;
	for (size_t i = 0; i < cfg->n_admin_tenants; i++)
		if (strcmp(cfg->admin_tenants[i], tenant) == 0)
			return true;
	return false;
}
