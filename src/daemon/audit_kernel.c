/* The kernel's audit records: seccomp refusals (AUDIT_SECCOMP, 1326) and
 * Landlock denials (AUDIT_LANDLOCK_ACCESS 1423, AUDIT_LANDLOCK_DOMAIN 1424)
 * read from NETLINK_AUDIT's read-only multicast group
 * (AUDIT_NLGRP_READLOG), so warrend never takes auditd's place: records
 * reach auditd (when one runs) exactly as before.
 *
 * Why records and not SECCOMP_RET_USER_NOTIF (docs/ARCHITECTURE.md
 * "Refusal audit" has the numbers): a notification stops the refused
 * thread until warrend answers, so a refusal costs two context switches
 * and a daemon wake-up (measured 10.8 us vs 1.5 us in-kernel) and a
 * stalled daemon stalls the sandbox; a record costs the refusing thread a
 * formatted skb (6 us), is answered in the kernel as before, and needs
 * only SECCOMP_FILTER_FLAG_LOG at load time, so the cached BPF program is
 * unchanged. What a record lacks: the syscall's arguments.
 *
 * Mapping to a sandbox: every record carries the task's host uid, and each
 * sandbox (or function pool) owns one uid range whose slot file names it
 * (<state_dir>/idmap/<slot>, isolate/idmap.c). That survives the process's
 * exit, unlike /proc/<pid>/cgroup. Landlock's access record has no uid; the
 * domain record before it (one per domain, on its first denial) has the
 * uid of the process that created the domain.
 *
 * Landlock logs only while audit is enabled (audit_enabled), so in "auto"
 * mode an audit subsystem that is off is switched on, with a task filter
 * rule "never" (auditctl -a task,never): new tasks then get no syscall
 * audit context, exactly as with audit off. A running auditd is left
 * alone ("listen" never changes anything). */
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/netlink.h>
#include <poll.h>
#include <pthread.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "daemon/audit_internal.h"
#include "daemon/manager.h"
#include "isolate/idmap.h"
#include "isolate/seccomp.h"

#ifndef AUDIT_SECCOMP
#define AUDIT_SECCOMP 1326
#endif

static int g_sock = -1;
static int g_stopfd[2] = {-1, -1};
static pthread_t g_thread;
static bool g_running;
static char *g_state_dir;
static bool g_ignore_clone3;

/* ---- netlink control -------------------------------------------------- */

static int nl_request(int fd, uint16_t type, const void *data, size_t len)
{
	char buf[NLMSG_SPACE(sizeof(struct audit_rule_data)) + 64];
	if (NLMSG_SPACE(len) > sizeof(buf))
		return -EINVAL;
	memset(buf, 0, sizeof(buf));
	struct nlmsghdr *h = (struct nlmsghdr *)buf;
	h->nlmsg_len = NLMSG_LENGTH(len);
	h->nlmsg_type = type;
	h->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
	h->nlmsg_seq = 1;
	memcpy(NLMSG_DATA(h), data, len);
	struct sockaddr_nl k = {.nl_family = AF_NETLINK};
	if (sendto(fd, buf, h->nlmsg_len, 0, (struct sockaddr *)&k, sizeof(k)) < 0)
		return -errno;
	/* The ack (an NLMSG_ERROR with error 0) or the error. */
	for (int i = 0; i < 4; i++) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 1000) <= 0)
			return -ETIMEDOUT;
		char rb[8192];
		ssize_t n = recv(fd, rb, sizeof(rb), 0);
		if (n < 0)
			return -errno;
		struct nlmsghdr *r = (struct nlmsghdr *)rb;
		if (r->nlmsg_type == NLMSG_ERROR)
			return ((struct nlmsgerr *)NLMSG_DATA(r))->error;
	}
	return 0;
}

static int audit_status(int fd, struct audit_status *st)
{
	char buf[NLMSG_SPACE(0)];
	memset(buf, 0, sizeof(buf));
	struct nlmsghdr *h = (struct nlmsghdr *)buf;
	h->nlmsg_len = NLMSG_LENGTH(0);
	h->nlmsg_type = AUDIT_GET;
	h->nlmsg_flags = NLM_F_REQUEST;
	struct sockaddr_nl k = {.nl_family = AF_NETLINK};
	if (sendto(fd, buf, h->nlmsg_len, 0, (struct sockaddr *)&k, sizeof(k)) < 0)
		return -errno;
	for (int i = 0; i < 4; i++) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 1000) <= 0)
			return -ETIMEDOUT;
		char rb[8192];
		ssize_t n = recv(fd, rb, sizeof(rb), 0);
		if (n < 0)
			return -errno;
		struct nlmsghdr *r = (struct nlmsghdr *)rb;
		if (r->nlmsg_type == AUDIT_GET) {
			memset(st, 0, sizeof(*st));
			size_t l = r->nlmsg_len - NLMSG_LENGTH(0);
			memcpy(st, NLMSG_DATA(r), l < sizeof(*st) ? l : sizeof(*st));
			return 0;
		}
		if (r->nlmsg_type == NLMSG_ERROR && ((struct nlmsgerr *)NLMSG_DATA(r))->error)
			return ((struct nlmsgerr *)NLMSG_DATA(r))->error;
	}
	return -EIO;
}

/* "auto": audit off and no auditd -> on, with the task,never rule. */
static int enable_audit(const char *init_netns, wr_err *err)
{
	_cleanup_close_ int fd = wra_audit_socket(init_netns, err);
	if (fd < 0)
		return fd;
	struct audit_status st;
	int r = audit_status(fd, &st);
	if (r < 0)
		return wr_err_set(err, -r, "audit status");
	if (st.enabled != 0)
		return 0; /* on (auditd's or ours from before) or locked */
	struct audit_rule_data rule;
	memset(&rule, 0, sizeof(rule));
	rule.flags = AUDIT_FILTER_TASK;
	rule.action = AUDIT_NEVER;
	r = nl_request(fd, AUDIT_ADD_RULE, &rule, sizeof(rule));
	if (r < 0 && r != -EEXIST)
		return wr_err_set(err, -r, "audit: add the task,never rule");
	struct audit_status set = {.mask = AUDIT_STATUS_ENABLED, .enabled = 1};
	r = nl_request(fd, AUDIT_SET, &set, sizeof(set));
	if (r < 0)
		return wr_err_set(err, -r, "audit: enable");
	return 0;
}

/* ---- record parsing ------------------------------------------------------ */

/* Value of key=... in a record: quoted, hex-encoded (comm and exe with odd
 * bytes) or bare. Copies into out; false when absent. */
static bool field(const char *rec, const char *key, char *out, size_t n)
{
	size_t kl = strlen(key);
	for (const char *p = rec; (p = strstr(p, key)) != NULL; p += kl) {
		if ((p != rec && p[-1] != ' ') || p[kl] != '=')
			continue;
		const char *v = p + kl + 1;
		size_t o = 0;
		if (*v == '"') {
			v++;
			while (*v && *v != '"' && o + 1 < n)
				out[o++] = *v++;
		} else {
			const char *e = v;
			while (*e && *e != ' ')
				e++;
			bool hex = (e - v) % 2 == 0 && e > v;
			for (const char *q = v; q < e && hex; q++)
				hex = (*q >= '0' && *q <= '9') || (*q >= 'A' && *q <= 'F');
			if (hex &&
			    (!strcmp(key, "comm") || !strcmp(key, "exe") || !strcmp(key, "path"))) {
				for (const char *q = v; q + 1 < e && o + 1 < n; q += 2) {
					unsigned x;
					sscanf(q, "%2x", &x);
					out[o++] = (char)x;
				}
			} else {
				while (v < e && o + 1 < n)
					out[o++] = *v++;
			}
		}
		out[o] = 0;
		return true;
	}
	return false;
}

static long num(const char *rec, const char *key, int base, long def)
{
	char v[64];
	if (!field(rec, key, v, sizeof(v)))
		return def;
	char *end;
	long x = strtol(v, &end, base);
	return end == v ? def : x;
}

/* "audit(1796249370.800:70)" -> ns */
static int64_t rec_time(const char *rec)
{
	long s = 0, ms = 0;
	if (sscanf(rec, "audit(%ld.%ld:", &s, &ms) != 2)
		return 0;
	return (int64_t)s * 1000000000LL + (int64_t)ms * 1000000LL;
}

/* ---- who: host uid -> owner of the range (cached per slot) ------------- */

static struct {
	uint32_t slot;
	ino_t ino; /* of the slot file read: a freed and reused slot has another */
	char owner[40];
} g_slots[64];

/* Called when a run of records starts (not per record): one stat, and a
 * read only when the slot file changed since. */
/* Slots that are not ours (another daemon's sandboxes flooding), for
 * 100 ms: a stat per foreign record would slow the reader down. */
static struct {
	uint32_t slot;
	int64_t until;
} g_foreign[64];

static bool owner_of_uid(long uid, char *out, size_t n, int64_t now)
{
	if (uid < (long)WR_IDMAP_BASE || uid >= (long)WR_IDMAP_BASE + (long)WR_IDMAP_SLOTS * 65536L)
		return false;
	uint32_t slot = (uint32_t)((uid - WR_IDMAP_BASE) / WR_IDMAP_SIZE);
	unsigned i = slot % 64;
	if (g_foreign[i].slot == slot && now < g_foreign[i].until)
		return false;
	char path[4200];
	snprintf(path, sizeof(path), "%s/idmap/%u", g_state_dir, slot);
	struct stat st;
	if (stat(path, &st) < 0) {
		/* not a range of ours (another daemon's, or freed) */
		g_foreign[i].slot = slot;
		g_foreign[i].until = now + 100000000LL;
		return false;
	}
	if (g_slots[i].slot == slot && g_slots[i].ino == st.st_ino && g_slots[i].owner[0]) {
		snprintf(out, n, "%s", g_slots[i].owner);
		return true;
	}
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 || fstat(fd, &st) < 0)
		return false;
	char buf[40];
	ssize_t r = read(fd, buf, sizeof(buf) - 1);
	if (r <= 0)
		return false;
	buf[r] = 0;
	buf[strcspn(buf, "\n ")] = 0;
	g_slots[i].slot = slot;
	g_slots[i].ino = st.st_ino;
	snprintf(g_slots[i].owner, sizeof(g_slots[i].owner), "%s", buf);
	snprintf(out, n, "%s", buf);
	return true;
}

/* The pid inside the sandbox's pid namespace (last NSpid entry), cached
 * for the last few host pids: a flood comes from one process. */
static struct {
	pid_t host, ns;
} g_pids[16];
static unsigned g_pidnext;

static pid_t ns_pid(pid_t host)
{
	for (unsigned i = 0; i < 16; i++)
		if (g_pids[i].host == host)
			return g_pids[i].ns;
	char path[64], buf[2048];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)host);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	pid_t ns = 0;
	if (fd >= 0) {
		ssize_t r = read(fd, buf, sizeof(buf) - 1);
		if (r > 0) {
			buf[r] = 0;
			char *l = strstr(buf, "\nNSpid:");
			if (l) {
				l += 7;
				char *end = strchr(l, '\n');
				if (end)
					*end = 0;
				char *last = strrchr(l, '\t');
				ns = (pid_t)atoi(last ? last + 1 : l);
			}
		}
	}
	/* A process that already exited keeps ns 0 ("unknown"). */
	g_pids[g_pidnext % 16].host = host;
	g_pids[g_pidnext % 16].ns = ns;
	g_pidnext++;
	return ns;
}

/* ---- seccomp --------------------------------------------------------------- */

static char *g_names[512];

static const char *syscall_name(long nr)
{
	if (nr < 0 || nr >= 512)
		return NULL;
	if (g_names[nr] == NULL)
		g_names[nr] = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, (int)nr);
	return g_names[nr];
}

static const char *action_name(unsigned long code)
{
	switch (code & 0xffff0000UL) {
	case 0x80000000UL: return "kill_process";
	case 0x00000000UL: return "kill_thread";
	case 0x00030000UL: return "trap";
	case 0x00050000UL: return "errno";
	case 0x7fc00000UL: return "user_notif";
	case 0x7ff00000UL: return "trace";
	case 0x7ffc0000UL: return "log";
	default: return "unknown";
	}
}

/* Runs of identical records (same process, syscall and action) are
 * emitted once with their count: a flood costs the reader a few compares
 * per record instead of a JSON object and a lock each. Several runs are
 * open at once, so that floods of several sandboxes (or another daemon's
 * records in between) do not break each other's runs. */
#define NRUN 16
struct run {
	long uid, nr;
	pid_t pid, ns_pid; /* ns_pid read when the run starts: it may be gone later */
	unsigned long code;
	uint64_t n;
	int64_t first_ns, last_ns, started;
	char sb[40];
	char rec[1024]; /* the first record of the run */
};
static struct run g_runs[NRUN];
static int g_last_run = -1; /* the run the previous record joined, or -1 */

static void emit_run(struct run *r)
{
	char comm[64] = "", exe[512] = "", nrbuf[24];
	/* Non-native callers (i386, x32) are killed by the profile's arch
	 * check; their numbers are another table's. libseccomp's arch tokens
	 * are the audit arch values. */
	unsigned long arch = (unsigned long)num(r->rec, "arch", 16, 0);
	bool x32 = arch == 0xc000003eUL && (r->nr & 0x40000000L);
	bool native = arch == 0xc000003eUL && !x32;
	const char *arch_name = native		       ? "x86_64"
				: x32		       ? "x32"
				: arch == 0x40000003UL ? "i386"
						       : "other";
	char *other = NULL;
	const char *name = native ? syscall_name(r->nr) : NULL;
	if (!native && arch != 0 && !x32)
		name = other = seccomp_syscall_resolve_num_arch((uint32_t)arch, (int)r->nr);
	int eno = native && name ? wr_seccomp_refusal_errno((int)r->nr) : native ? ENOSYS : 0;
	if ((r->code & 0xffff0000UL) != 0x00050000UL)
		eno = 0; /* killed, not answered */
	if (name == NULL) {
		snprintf(nrbuf, sizeof(nrbuf), "syscall_%ld", r->nr & ~0x40000000L);
		name = nrbuf;
	}
	field(r->rec, "comm", comm, sizeof(comm));
	field(r->rec, "exe", exe, sizeof(exe));
	json_t *what = json_pack("{s:s, s:i, s:s, s:s, s:s}", "syscall", name, "nr", (int)r->nr,
				 "arch", arch_name, "action", action_name(r->code), "errno",
				 eno == EPERM	 ? "EPERM"
				 : eno == ENOSYS ? "ENOSYS"
						 : "none (killed)");
	char ip[32];
	if (what && field(r->rec, "ip", ip, sizeof(ip)))
		json_object_set_new(what, "ip_addr", json_string(ip));
	struct wr_audit_event ev = {
	    .sandbox_id = r->sb,
	    .time_ns = r->last_ns,
	    .first_ns = r->first_ns,
	    .layer = WR_AUDIT_SECCOMP,
	    .denied = true,
	    .action = name,
	    .what = what,
	    .pid = r->ns_pid,
	    .host_pid = r->pid,
	    .comm = comm,
	    .exe = exe,
	    .count = r->n,
	};
	wr_audit_emit(wr_audit_global, &ev);
	json_decref(what);
	free(other);
	r->n = 0;
}

static void runs_flush(int64_t now, int64_t older_than)
{
	for (int i = 0; i < NRUN; i++)
		if (g_runs[i].n && now - g_runs[i].started >= older_than) {
			emit_run(&g_runs[i]);
			if (g_last_run == i)
				g_last_run = -1;
		}
}

/* Serial numbers of audit records are consecutive: a gap is records the
 * kernel could not deliver to us (our receive buffer was full), counted in
 * warren_audit_kernel_overruns_total. They cannot be attributed: the
 * missing records may be any process's (another daemon's sandboxes, or
 * another of ours flooding at the same time). */
static uint64_t g_last_serial;

static uint64_t rec_serial(const char *rec)
{
	const char *c = strchr(rec, ':');
	return c ? strtoull(c + 1, NULL, 10) : 0;
}

static void on_seccomp(const char *rec, uint64_t gap, int64_t now)
{
	long uid = num(rec, "uid", 10, -1);
	long nr = num(rec, "syscall", 10, -1);
	pid_t pid = (pid_t)num(rec, "pid", 10, 0);
	unsigned long code = (unsigned long)num(rec, "code", 16, 0);
	int64_t t = rec_time(rec);
	int idx = -1;
	for (int i = 0; i < NRUN && idx < 0; i++)
		if (g_runs[i].n && g_runs[i].uid == uid && g_runs[i].nr == nr &&
		    g_runs[i].pid == pid && g_runs[i].code == code)
			idx = i;
	if (idx >= 0) {
		struct run *r = &g_runs[idx];
		if (gap)
			wr_audit_kernel_lost(gap);
		r->n++;
		r->last_ns = t;
		g_last_run = idx;
		return;
	}
	if (gap)
		wr_audit_kernel_lost(gap);
	g_last_run = -1;
	char sb[40];
	if (!owner_of_uid(uid, sb, sizeof(sb), now))
		return; /* not a process of one of our sandboxes */
	if (g_ignore_clone3 && nr == __NR_clone3)
		return; /* libc's probe: ENOSYS makes it use clone(2) */
	/* a free slot, else the oldest run makes room */
	idx = 0;
	for (int i = 0; i < NRUN; i++) {
		if (g_runs[i].n == 0) {
			idx = i;
			break;
		}
		if (g_runs[i].started < g_runs[idx].started)
			idx = i;
	}
	struct run *r = &g_runs[idx];
	if (r->n)
		emit_run(r);
	r->uid = uid;
	r->nr = nr;
	r->pid = pid;
	r->ns_pid = ns_pid(pid);
	r->code = code;
	r->n = 1;
	r->first_ns = r->last_ns = t;
	r->started = now;
	snprintf(r->sb, sizeof(r->sb), "%s", sb);
	snprintf(r->rec, sizeof(r->rec), "%s", rec);
	g_last_run = idx;
}

/* ---- Landlock --------------------------------------------------------------- */

#define NDOM 256
static struct {
	char id[24];
	char sb[40];
	pid_t pid, ns_pid; /* the command that restricted itself, then exec'd */
} g_doms[NDOM];
static unsigned g_domnext;

static void ll_replay(const char *dom, unsigned d, int64_t now);

static void on_ll_domain(const char *rec, int64_t now)
{
	char dom[24], status[24];
	if (!field(rec, "domain", dom, sizeof(dom)) ||
	    !field(rec, "status", status, sizeof(status)))
		return;
	if (strcmp(status, "allocated") != 0) {
		for (unsigned i = 0; i < NDOM; i++)
			if (strcmp(g_doms[i].id, dom) == 0)
				g_doms[i].id[0] = 0;
		return;
	}
	char sb[40];
	if (!owner_of_uid(num(rec, "uid", 10, -1), sb, sizeof(sb), now))
		return;
	unsigned i = g_domnext++ % NDOM;
	snprintf(g_doms[i].id, sizeof(g_doms[i].id), "%s", dom);
	snprintf(g_doms[i].sb, sizeof(g_doms[i].sb), "%s", sb);
	/* The record's comm and exe are the creator's before its exec
	 * (warrend's own exec child): not worth reporting. */
	pid_t hp = (pid_t)num(rec, "pid", 10, 0);
	g_doms[i].pid = hp;
	g_doms[i].ns_pid = ns_pid(hp);
	ll_replay(dom, i, now);
}

static void ll_access_of(const char *rec, unsigned i);

/* Access records whose domain record has not come yet: the kernel writes
 * a domain's record after its first access record. Kept until the domain
 * record (or 2 s, or 32 more). */
#define NPEND 32
static struct {
	char *rec;
	char dom[24];
	int64_t at;
} g_llpend[NPEND];
static unsigned g_llnext;

static void ll_pend(const char *rec, const char *dom, int64_t now)
{
	unsigned i = g_llnext++ % NPEND;
	free(g_llpend[i].rec);
	g_llpend[i].rec = strdup(rec);
	snprintf(g_llpend[i].dom, sizeof(g_llpend[i].dom), "%s", dom);
	g_llpend[i].at = now;
}

static void ll_replay(const char *dom, unsigned d, int64_t now)
{
	for (unsigned i = 0; i < NPEND; i++) {
		if (g_llpend[i].rec == NULL)
			continue;
		if (strcmp(g_llpend[i].dom, dom) == 0)
			ll_access_of(g_llpend[i].rec, d);
		if (strcmp(g_llpend[i].dom, dom) == 0 || now - g_llpend[i].at > 2000000000LL) {
			free(g_llpend[i].rec);
			g_llpend[i].rec = NULL;
		}
	}
}

static void on_ll_access(const char *rec, int64_t now)
{
	char dom[24];
	if (!field(rec, "domain", dom, sizeof(dom)))
		return;
	unsigned i = 0;
	for (; i < NDOM; i++)
		if (g_doms[i].id[0] && strcmp(g_doms[i].id, dom) == 0)
			break;
	if (i == NDOM) {
		ll_pend(rec, dom, now); /* its domain record comes next */
		return;
	}
	ll_access_of(rec, i);
}

static int64_t mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* ---- Landlock paths as the sandbox sees them ----------------------------
 *
 * The kernel writes a denied file's path as d_path() from the refused
 * task's root. A file beneath the sandbox's root reads as the sandbox sees
 * it; one outside it (reached through a magic link: /proc/self/exe, a
 * /proc/1/fd entry of PID 1's upper-layer directory) reads as the HOST's
 * path (warrend's binary, the store, the overlay's upper dir), which its
 * tenant must never learn. So a path is shown only after it was checked:
 * resolved beneath the sandbox's root (openat2 RESOLVE_IN_ROOT, no magic
 * links, from /proc/<pid>/root of a process of the sandbox), it must name
 * the record's inode. Anything else, including a sandbox gone before the
 * check, is shown without path, dev and inode (what.path_hidden says why). */

/* /proc/<pid>/root of a process that belongs to sandbox sb (its host uid
 * lies in sb's range): the directory fd pins the process, so a pid reused
 * after the open cannot lend us another root. -1 if none. */
static int root_of(pid_t pid, const char *sb, int64_t now)
{
	if (pid <= 0)
		return -1;
	char path[64], owner[40];
	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	_cleanup_close_ int dir = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	struct stat st;
	if (dir < 0 || fstat(dir, &st) < 0)
		return -1;
	if (!owner_of_uid((long)st.st_uid, owner, sizeof(owner), now) || strcmp(owner, sb) != 0)
		return -1;
	return openat(dir, "root", O_PATH | O_DIRECTORY | O_CLOEXEC);
}

/* PID 1 of a container sandbox from the daemon's table (0 if none). */
static pid_t init_of(const char *sb)
{
	size_t n = 0;
	struct wrd_sbx **all = wrd_table_snapshot(&n);
	pid_t pid = 0;
	for (size_t i = 0; all && i < n; i++) {
		if (pid == 0 && strcmp(all[i]->rec.id, sb) == 0)
			pid = all[i]->rec.init_pid;
		wrd_mgr_put(all[i]);
	}
	free(all);
	return pid;
}

/* Verdicts of recent checks: a flood of one denial costs one check. */
#define NPATHV 32
static struct {
	char sb[40];
	unsigned long ino;
	uint64_t hash;
	int64_t at;
	const char *hidden;
} g_pathv[NPATHV];
static unsigned g_pathvnext;

static uint64_t fnv(const char *s)
{
	uint64_t h = 1469598103934665603ULL;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

/* NULL: the path is the sandbox's view; else why it is hidden. */
static const char *ll_path_hidden(const char *sb, pid_t creator, const char *path,
				  unsigned long ino, int64_t now)
{
	uint64_t h = fnv(path);
	for (unsigned i = 0; i < NPATHV; i++)
		if (g_pathv[i].hash == h && g_pathv[i].ino == ino &&
		    strcmp(g_pathv[i].sb, sb) == 0 && now - g_pathv[i].at < 1000000000LL)
			return g_pathv[i].hidden;
	const char *hidden = NULL;
	_cleanup_close_ int root = root_of(creator, sb, now);
	if (root < 0 && strncmp(sb, "fn-", 3) != 0)
		root = root_of(init_of(sb), sb, now);
	if (root < 0) {
		hidden = "the sandbox was gone before the path could be checked";
	} else if (path[0] != '/') {
		hidden = "not beneath the sandbox's root";
	} else {
		struct open_how how = {.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
				       .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
		_cleanup_close_ int fd = wr_openat2(root, path, &how);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0 || (unsigned long)st.st_ino != ino)
			hidden = "not beneath the sandbox's root";
	}
	unsigned i = g_pathvnext++ % NPATHV;
	snprintf(g_pathv[i].sb, sizeof(g_pathv[i].sb), "%s", sb);
	g_pathv[i].ino = ino;
	g_pathv[i].hash = h;
	g_pathv[i].at = now;
	g_pathv[i].hidden = hidden;
	return hidden;
}

static void ll_access_of(const char *rec, unsigned i)
{
	char dom[24], blockers[128] = "", path[1024] = "", opid[16] = "", ocomm[64] = "";
	field(rec, "domain", dom, sizeof(dom));
	field(rec, "blockers", blockers, sizeof(blockers));
	bool has_path = field(rec, "path", path, sizeof(path));
	json_t *what = json_pack("{s:s, s:s}", "access", blockers, "domain", dom);
	const char *hidden = NULL;
	if (has_path) {
		hidden = ll_path_hidden(g_doms[i].sb, g_doms[i].pid, path,
					(unsigned long)num(rec, "ino", 10, 0), mono_ns());
		has_path = hidden == NULL;
	}
	if (what && has_path)
		json_object_set_new(what, "path", json_string(path));
	if (what && hidden)
		json_object_set_new(what, "path_hidden", json_string(hidden));
	if (what && field(rec, "opid", opid, sizeof(opid))) {
		json_object_set_new(what, "target_pid", json_integer(atoi(opid)));
		if (field(rec, "ocomm", ocomm, sizeof(ocomm)))
			json_object_set_new(what, "target_comm", json_string(ocomm));
	}
	char dev[64], ino[32];
	if (what && !hidden && field(rec, "dev", dev, sizeof(dev)))
		json_object_set_new(what, "dev", json_string(dev));
	if (what && !hidden && field(rec, "ino", ino, sizeof(ino)))
		json_object_set_new(what, "ino", json_string(ino));
	struct wr_audit_event ev = {
	    .sandbox_id = g_doms[i].sb,
	    .time_ns = rec_time(rec),
	    .layer = WR_AUDIT_LANDLOCK,
	    .denied = true,
	    .action = blockers,
	    .subject = has_path ? path : NULL,
	    .what = what,
	    .pid = g_doms[i].ns_pid,
	    .host_pid = g_doms[i].pid,
	};
	wr_audit_emit(wr_audit_global, &ev);
	json_decref(what);
}

/* ---- the reader thread --------------------------------------------------------- */

static void *reader_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "wrd-auditnl");
	char *buf = malloc(65536 + 1);
	if (buf == NULL)
		return NULL;
	for (;;) {
		struct pollfd p[2] = {{.fd = g_sock, .events = POLLIN},
				      {.fd = g_stopfd[0], .events = POLLIN}};
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (!(p[0].revents & POLLIN))
			continue;
		for (;;) {
			ssize_t n = recv(g_sock, buf, 65536, MSG_DONTWAIT);
			if (n < 0) {
				if (errno == ENOBUFS) {
					/* Our receive buffer overflowed: the kernel
					 * dropped records for us. */
					wr_audit_kernel_lost(1);
					continue;
				}
				break;
			}
			int64_t now = mono_ns();
			/* One record per datagram (kauditd sends each skb on its
			 * own); its length is bounded by what recv returned, not by
			 * nlmsg_len alone. */
			if ((size_t)n < NLMSG_HDRLEN)
				continue;
			struct nlmsghdr *h = (struct nlmsghdr *)buf;
			size_t len = (size_t)n - NLMSG_HDRLEN;
			if (h->nlmsg_len >= NLMSG_HDRLEN && h->nlmsg_len - NLMSG_HDRLEN < len)
				len = h->nlmsg_len - NLMSG_HDRLEN;
			char *rec = buf + NLMSG_HDRLEN;
			rec[len] = 0; /* buf has a spare byte past any datagram */
			uint64_t serial = rec_serial(rec), gap = 0;
			if (g_last_serial && serial > g_last_serial + 1)
				gap = serial - g_last_serial - 1;
			if (serial > g_last_serial)
				g_last_serial = serial;
			if (h->nlmsg_type == AUDIT_SECCOMP) {
				on_seccomp(rec, gap, now);
				continue;
			}
			if (gap)
				wr_audit_kernel_lost(gap);
			if (h->nlmsg_type == AUDIT_LANDLOCK_DOMAIN)
				on_ll_domain(rec, now);
			else if (h->nlmsg_type == AUDIT_LANDLOCK_ACCESS)
				on_ll_access(rec, now);
			/* Long runs are reported as they go (followers see them). */
			runs_flush(now, 200000000LL);
		}
		runs_flush(mono_ns(), 0); /* nothing more queued: the runs are over */
	}
	for (unsigned i = 0; i < NPEND; i++) {
		free(g_llpend[i].rec);
		g_llpend[i].rec = NULL;
	}
	free(buf);
	return NULL;
}

int wra_kernel_start(const char *state_dir, const char *mode, bool ignore_clone3,
		     const char *init_netns, wr_err *err)
{
	g_ignore_clone3 = ignore_clone3;
	if ((g_state_dir = strdup(state_dir)) == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (strcmp(mode, "auto") == 0 && enable_audit(init_netns, err) < 0)
		return wr_err_wrap(err, "kernel audit (set audit.kernel_audit to listen or off)");
	/* Made in the initial network namespace whatever ours is: the
	 * kernel multicasts records only there (audit_netns.c). */
	g_sock = wra_audit_socket(init_netns, err);
	if (g_sock < 0)
		return wr_err_wrap(err, "kernel audit");
	int sz = 32 << 20;
	if (setsockopt(g_sock, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)) < 0)
		setsockopt(g_sock, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	struct sockaddr_nl a = {.nl_family = AF_NETLINK,
				.nl_groups = 1u << (AUDIT_NLGRP_READLOG - 1)};
	if (bind(g_sock, (struct sockaddr *)&a, sizeof(a)) < 0)
		return wr_err_sys(err,
				  "kernel audit: join the read-log group (needs CAP_AUDIT_READ)");
	if (pipe2(g_stopfd, O_CLOEXEC) < 0)
		return wr_err_sys(err, "kernel audit: pipe");
	if (pthread_create(&g_thread, NULL, reader_main, NULL) != 0)
		return wr_err_set(err, EAGAIN, "kernel audit: start reader thread");
	g_running = true;
	return 0;
}

void wra_kernel_stop(void)
{
	if (g_running) {
		char c = 1;
		if (write(g_stopfd[1], &c, 1) < 0) {
			/* the reader also ends when the socket closes below */
		}
		pthread_join(g_thread, NULL);
		g_running = false;
	}
	for (int i = 0; i < 2; i++)
		if (g_stopfd[i] >= 0) {
			close(g_stopfd[i]);
			g_stopfd[i] = -1;
		}
	if (g_sock >= 0)
		close(g_sock);
	g_sock = -1;
	free(g_state_dir);
	g_state_dir = NULL;
	for (int i = 0; i < 512; i++) {
		free(g_names[i]);
		g_names[i] = NULL;
	}
}
