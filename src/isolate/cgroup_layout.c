/* cgroups, the root: the v1 controller names, where this process's own
 * cgroups are (mode detection from /proc/self/cgroup and
 * /proc/self/mountinfo), and the "warren" base directory in each hierarchy
 * warren uses (open, accessors, close, remove). The cgroups made below a
 * root are handled in cgroup.c. */
#include "isolate/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "isolate/cgroup_internal.h"

static const char *const ctrl_names[WR_CG_NCTRL] = {
    [WR_CG_CPU] = "cpu",   [WR_CG_CPUACCT] = "cpuacct", [WR_CG_MEMORY] = "memory",
    [WR_CG_PIDS] = "pids", [WR_CG_FREEZER] = "freezer", [WR_CG_BLKIO] = "blkio",
};

const char *wr_cg_ctrl_name(enum wr_cg_ctrl c)
{
	return (unsigned)c < WR_CG_NCTRL ? ctrl_names[c] : "v2";
}

/* ---- layout detection -------------------------------------------------- */

static int ctrl_from_name(const char *s, size_t n)
{
	for (int c = 0; c < WR_CG_NCTRL; c++)
		if (strlen(ctrl_names[c]) == n && memcmp(ctrl_names[c], s, n) == 0)
			return c;
	return -1;
}

void wr_cgroup_layout_free(struct wr_cgroup_layout *lay)
{
	for (int c = 0; c < WR_CG_NCTRL; c++) {
		free(lay->v1_dir[c]);
		lay->v1_dir[c] = NULL;
	}
	free(lay->v2_dir);
	lay->v2_dir = NULL;
}

/* Climb `up` levels: "/a/b" -> "/a" -> "/"; EINVAL above "/". */
static int climb(char *path, unsigned up)
{
	for (; up > 0; up--) {
		if (strcmp(path, "/") == 0)
			return -EINVAL;
		char *slash = strrchr(path, '/');
		if (slash == path)
			slash[1] = 0;
		else
			*slash = 0;
	}
	return 0;
}

struct own_cgroups {
	char *v1[WR_CG_NCTRL];
	char *v2;
};

static void own_free(struct own_cgroups *o)
{
	for (int c = 0; c < WR_CG_NCTRL; c++)
		free(o->v1[c]);
	free(o->v2);
}

static int read_own_cgroups(struct own_cgroups *own, unsigned up, wr_err *err)
{
	_cleanup_free_ char *buf = NULL;
	if (wr_read_file_at(AT_FDCWD, "/proc/self/cgroup", &buf, 65536, err) < 0)
		return wr_err_wrap(err, "cgroup: own cgroup");
	char *save = NULL;
	for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *c1 = strchr(line, ':');
		char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (c2 == NULL)
			continue;
		const char *ctrls = c1 + 1;
		size_t ctrls_len = (size_t)(c2 - ctrls);
		const char *path = c2 + 1;
		if (path[0] != '/')
			continue;
		size_t plen = strlen(path);
		const char *del = " (deleted)";
		if (plen > strlen(del) && strcmp(path + plen - strlen(del), del) == 0)
			return wr_err_set(
			    err, ENOENT,
			    "cgroup: own cgroup %s was removed; restart from a live one", path);
		if (ctrls_len == 0) {
			if (strncmp(line, "0:", 2) == 0 && own->v2 == NULL &&
			    (own->v2 = strdup(path)) == NULL)
				return wr_err_set(err, ENOMEM, "cgroup: out of memory");
			continue;
		}
		for (const char *t = ctrls; t < ctrls + ctrls_len;) {
			const char *comma = memchr(t, ',', (size_t)(ctrls + ctrls_len - t));
			size_t tl = comma ? (size_t)(comma - t) : (size_t)(ctrls + ctrls_len - t);
			int c = ctrl_from_name(t, tl);
			if (c >= 0 && own->v1[c] == NULL && (own->v1[c] = strdup(path)) == NULL)
				return wr_err_set(err, ENOMEM, "cgroup: out of memory");
			t += tl + 1;
		}
	}
	for (int c = 0; c < WR_CG_NCTRL; c++)
		if (own->v1[c] && climb(own->v1[c], up) < 0)
			return wr_err_set(err, EINVAL,
					  "cgroup: base \"../\" climbs above the root of the %s "
					  "hierarchy",
					  ctrl_names[c]);
	if (own->v2 && climb(own->v2, up) < 0)
		return wr_err_set(err, EINVAL,
				  "cgroup: base \"../\" climbs above the root of the v2 hierarchy");
	return 0;
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape(char *s)
{
	char *w = s;
	for (char *r = s; *r;) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
		    r[3] >= '0' && r[3] <= '7') {
			*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
			r += 4;
		} else {
			*w++ = *r++;
		}
	}
	*w = 0;
}

/* The directory of cgroup `own` through a mount of its hierarchy whose root
 * is `root` at `mnt`; NULL (errno 0) when the mount does not reach it. */
static char *dir_through(const char *mnt, const char *root, const char *own)
{
	const char *rel;
	size_t rl = strlen(root);
	if (strcmp(root, "/") == 0)
		rel = own;
	else if (strncmp(own, root, rl) == 0 && (own[rl] == '/' || own[rl] == 0))
		rel = own + rl;
	else
		return NULL;
	if (strcmp(rel, "/") == 0)
		rel = "";
	char *out = NULL;
	if (asprintf(&out, "%s%s", mnt, rel) < 0)
		return NULL;
	return out;
}

int wr_cgroup_layout_detect(struct wr_cgroup_layout *lay, unsigned up, wr_err *err)
{
	memset(lay, 0, sizeof(*lay));
	struct own_cgroups own = {0};
	int r = read_own_cgroups(&own, up, err);
	if (r < 0) {
		own_free(&own);
		return r;
	}
	_cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
	if (f == NULL) {
		own_free(&own);
		return wr_err_sys(err, "cgroup: open /proc/self/mountinfo");
	}
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	while (getline(&line, &cap, f) > 0) {
		line[strcspn(line, "\n")] = 0;
		/* id parent maj:min root mountpoint opts [optional...] - fstype src superopts */
		char *fields[6] = {0};
		char *save = NULL, *tok = strtok_r(line, " ", &save);
		int nf = 0;
		while (tok && nf < 6) {
			fields[nf++] = tok;
			tok = strtok_r(NULL, " ", &save);
		}
		while (tok && strcmp(tok, "-") != 0)
			tok = strtok_r(NULL, " ", &save);
		char *fstype = tok ? strtok_r(NULL, " ", &save) : NULL;
		char *src = fstype ? strtok_r(NULL, " ", &save) : NULL;
		char *sopts = src ? strtok_r(NULL, " ", &save) : NULL;
		if (nf < 5 || sopts == NULL)
			continue;
		char *root = fields[3], *mnt = fields[4];
		unescape(root);
		unescape(mnt);
		if (strcmp(fstype, "cgroup2") == 0) {
			if (own.v2 && lay->v2_dir == NULL)
				lay->v2_dir = dir_through(mnt, root, own.v2);
			continue;
		}
		if (strcmp(fstype, "cgroup") != 0)
			continue;
		char *osave = NULL;
		for (char *o = strtok_r(sopts, ",", &osave); o; o = strtok_r(NULL, ",", &osave)) {
			int c = ctrl_from_name(o, strlen(o));
			if (c >= 0 && own.v1[c] && lay->v1_dir[c] == NULL)
				lay->v1_dir[c] = dir_through(mnt, root, own.v1[c]);
		}
	}
	own_free(&own);
	if (lay->v1_dir[WR_CG_MEMORY]) {
		lay->mode = WR_CG_V1;
	} else if (lay->v2_dir) {
		lay->mode = WR_CG_V2;
		for (int c = 0; c < WR_CG_NCTRL; c++) {
			free(lay->v1_dir[c]);
			lay->v1_dir[c] = NULL;
		}
	} else {
		wr_cgroup_layout_free(lay);
		return wr_err_set(err, ENOENT,
				  "cgroup: neither a v1 memory hierarchy nor a v2 hierarchy is "
				  "mounted where this process's cgroup is visible");
	}
	lay->require_v2_controllers = true;
	return 0;
}

/* ---- root ---------------------------------------------------------------- */

bool wr_cg_valid_name(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	return n > 0 && n <= 128 && strchr(s, '/') == NULL && strcmp(s, ".") != 0 &&
	       strcmp(s, "..") != 0 && strchr(s, '\n') == NULL;
}

void wr_cgroup_limits_default(struct wr_cgroup_limits *l)
{
	l->memory_bytes = WR_CG_UNSET;
	l->pids = WR_CG_UNSET;
	l->cpu_weight = WR_CG_UNSET;
	l->cpu_quota_us = WR_CG_UNSET;
	l->cpu_period_us = WR_CG_UNSET;
	l->io_weight = WR_CG_UNSET;
}

void wr_cgroup_root_close(struct wr_cgroup_root *root)
{
	if (root == NULL)
		return;
	for (int h = 0; h < root->nhier; h++) {
		wr_closep(&root->hier[h].base_fd);
		free(root->hier[h].path);
	}
	wr_closep(&root->v2_base_fd);
	free(root->v2_path);
	free(root->base);
	free(root);
}

static void root_closep(struct wr_cgroup_root **r)
{
	wr_cgroup_root_close(*r);
}

/* mkdir <dir>/<base> (existing is fine) and open it O_PATH. */
static int open_base(const char *dir, const char *base, const char *label, int *fd, char **path,
		     wr_err *err)
{
	if (asprintf(path, "%s/%s", dir, base) < 0) {
		*path = NULL;
		return wr_err_set(err, ENOMEM, "cgroup %s: out of memory", label);
	}
	if (mkdir(*path, 0755) < 0 && errno != EEXIST)
		return wr_err_sys(err, "cgroup %s: mkdir %s", label, *path);
	*fd = open(*path, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (*fd < 0)
		return wr_err_sys(err, "cgroup %s: open %s", label, *path);
	return 0;
}

static int open_v1(struct wr_cgroup_root *root, const struct wr_cgroup_layout *lay, wr_err *err)
{
	bool unified = lay->v2_dir != NULL;
	/* cpuacct (usage) and freezer (freeze, kill) are only needed when there
	 * is no unified hierarchy to give cpu.stat, cgroup.freeze and
	 * cgroup.kill: every hierarchy costs a mkdir and rmdir per cgroup. */
	unsigned want = 1u << WR_CG_CPU | 1u << WR_CG_MEMORY | 1u << WR_CG_PIDS;
	if (!unified)
		want |= 1u << WR_CG_CPUACCT | 1u << WR_CG_FREEZER;
	unsigned optional = 1u << WR_CG_BLKIO; /* only for sandboxes with io_weight */

	for (int c = 0; c < WR_CG_NCTRL; c++) {
		if (lay->v1_dir[c] == NULL)
			continue;
		int h;
		for (h = 0; h < root->nhier; h++)
			if (strcmp(root->hier[h].path, lay->v1_dir[c]) == 0)
				break;
		if (h == root->nhier) {
			root->hier[h].path = strdup(lay->v1_dir[c]); /* own dir for now */
			if (root->hier[h].path == NULL)
				return wr_err_set(err, ENOMEM, "cgroup: out of memory");
			root->hier[h].base_fd = -1;
			root->nhier++;
		}
		root->hier[h].ctrls |= 1u << c;
		root->ctrl_hier[c] = h;
	}
	/* Keep the hierarchies we use; open their base. */
	int kept = 0;
	for (int h = 0; h < root->nhier; h++) {
		struct wr_cg_hier *hi = &root->hier[h];
		_cleanup_free_ char *own = hi->path;
		hi->path = NULL;
		if ((hi->ctrls & (want | optional)) == 0) {
			for (int c = 0; c < WR_CG_NCTRL; c++)
				if (root->ctrl_hier[c] == h)
					root->ctrl_hier[c] = -1;
			continue;
		}
		struct wr_cg_hier nh = {.ctrls = hi->ctrls, .base_fd = -1};
		size_t len = 0;
		for (int c = 0; c < WR_CG_NCTRL; c++)
			if (nh.ctrls & (1u << c))
				len += (size_t)snprintf(nh.label + len, sizeof(nh.label) - len,
							"%s%s", len ? "," : "", ctrl_names[c]);
		for (int c = 0; c < WR_CG_NCTRL; c++)
			if (root->ctrl_hier[c] == h)
				root->ctrl_hier[c] = kept;
		root->hier[kept] = nh;
		if (h != kept)
			root->hier[h] = (struct wr_cg_hier){.base_fd = -1};
		struct wr_cg_hier *k = &root->hier[kept];
		int r = open_base(own, root->base, k->label, &k->base_fd, &k->path, err);
		kept++;
		if (r < 0) {
			root->nhier = kept;
			return r;
		}
		if (k->ctrls & want)
			root->default_hiers |= 1u << (kept - 1);
	}
	for (int h = kept; h < root->nhier; h++)
		root->hier[h] = (struct wr_cg_hier){.base_fd = -1};
	root->nhier = kept;
	if (root->ctrl_hier[WR_CG_MEMORY] < 0)
		return wr_err_set(err, EINVAL, "cgroup: v1 layout without a memory hierarchy");
	if (unified)
		return open_base(lay->v2_dir, root->base, "v2", &root->v2_base_fd, &root->v2_path,
				 err);
	return 0;
}

static int open_v2(struct wr_cgroup_root *root, const struct wr_cgroup_layout *lay, wr_err *err)
{
	if (lay->v2_dir == NULL)
		return wr_err_set(err, EINVAL, "cgroup: v2 layout without a v2 hierarchy");
	_cleanup_close_ int own = open(lay->v2_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (own < 0)
		return wr_err_sys(err, "cgroup v2: open %s", lay->v2_dir);
	const unsigned want = WR_CG2_MEMORY | WR_CG2_PIDS | WR_CG2_CPU | WR_CG2_IO;
	const unsigned need = WR_CG2_MEMORY | WR_CG2_PIDS;
	unsigned en = 0;
	int r = wr_cg_v2_delegate(own, lay->v2_dir, want, &en, err);
	if (r < 0)
		return r;
	if (lay->require_v2_controllers && (en & need) != need)
		return wr_err_set(err, EOPNOTSUPP,
				  "cgroup v2: the memory and pids controllers are not available "
				  "in %s (cgroup.controllers): its parent must delegate them "
				  "(systemd: Delegate=yes)",
				  lay->v2_dir);
	r = open_base(lay->v2_dir, root->base, "v2", &root->v2_base_fd, &root->v2_path, err);
	if (r < 0)
		return r;
	return wr_cg_v2_delegate(root->v2_base_fd, root->v2_path, en, &root->v2_ctrls, err);
}

int wr_cgroup_root_open_at(const struct wr_cgroup_layout *lay, const char *base,
			   struct wr_cgroup_root **out, wr_err *err)
{
	if (!wr_cg_valid_name(base))
		return wr_err_set(err, EINVAL, "cgroup: invalid base name \"%s\"",
				  base ? base : "");
	_cleanup_(root_closep) struct wr_cgroup_root *root = calloc(1, sizeof(*root));
	if (root == NULL)
		return wr_err_set(err, ENOMEM, "cgroup: out of memory");
	root->v2_base_fd = -1;
	for (int i = 0; i < WR_CG_NCTRL; i++) {
		root->ctrl_hier[i] = -1;
		root->hier[i].base_fd = -1;
	}
	root->mode = lay->mode;
	root->v2_emulated = lay->mode == WR_CG_V2 && lay->v2_skip_absent_limits;
	if ((root->base = strdup(base)) == NULL)
		return wr_err_set(err, ENOMEM, "cgroup: out of memory");
	int r;
	if (lay->mode == WR_CG_V1)
		r = open_v1(root, lay, err);
	else if (lay->mode == WR_CG_V2)
		r = open_v2(root, lay, err);
	else
		r = wr_err_set(err, EINVAL, "cgroup: unknown mode %d", (int)lay->mode);
	if (r < 0)
		return r;
	*out = steal_ptr(&root);
	return 0;
}

int wr_cgroup_root_open(const char *base, struct wr_cgroup_root **out, wr_err *err)
{
	if (base == NULL)
		base = "warren";
	unsigned up = 0;
	if (strncmp(base, "../", 3) == 0) {
		up = 1;
		base += 3;
	}
	struct wr_cgroup_layout lay;
	int r = wr_cgroup_layout_detect(&lay, up, err);
	if (r < 0)
		return r;
	r = wr_cgroup_root_open_at(&lay, base, out, err);
	wr_cgroup_layout_free(&lay);
	return r;
}

enum wr_cgroup_mode wr_cgroup_root_mode(const struct wr_cgroup_root *root)
{
	return root->mode;
}

bool wr_cgroup_root_has_unified(const struct wr_cgroup_root *root)
{
	return root->v2_base_fd >= 0;
}

const char *wr_cgroup_root_path(const struct wr_cgroup_root *root, enum wr_cg_ctrl c)
{
	if (c == WR_CG_NCTRL)
		return root->v2_path;
	if ((unsigned)c >= WR_CG_NCTRL || root->ctrl_hier[c] < 0)
		return NULL;
	return root->hier[root->ctrl_hier[c]].path;
}

int wr_cgroup_root_remove(struct wr_cgroup_root **proot, wr_err *err)
{
	_cleanup_(root_closep) struct wr_cgroup_root *root = steal_ptr(proot);
	if (root == NULL)
		return 0;
	int r = wr_cgroup_sweep(root, NULL, NULL, err);
	if (r < 0)
		return r;
	for (int h = 0; h <= root->nhier; h++) {
		const char *p = h < root->nhier ? root->hier[h].path : root->v2_path;
		if (p && rmdir(p) < 0 && errno != ENOENT)
			return wr_err_sys(err, "remove cgroup base %s", p);
	}
	return 0;
}
