/* The refusal audit's logic: merging and the per-sandbox rate limit
 * (audit_core.c), detection rules (audit_rules.c), and the store's
 * retention and queries (audit_store.c on a temporary database). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/audit_internal.h"
#include "daemon/db.h"

#define S 1000000000LL

static struct wr_audit_config cfg(void)
{
	struct wr_audit_config c;
	wr_audit_config_default(&c);
	return c;
}

static void feed(struct wra_core *c, const char *sb, const char *action, const char *subject,
		 int64_t t, uint64_t n)
{
	struct wr_audit_event ev = {.sandbox_id = sb,
				    .layer = WR_AUDIT_SECCOMP,
				    .denied = true,
				    .action = action,
				    .subject = subject,
				    .count = n};
	wra_core_feed(c, &ev, t);
}

/* Take everything dirty; returns rows, fills the sum of counts. */
static size_t take_all(struct wra_core *c, int64_t now, struct wra_snap *buf, size_t max)
{
	return wra_core_take(c, buf, max, now);
}

static void clear(struct wra_snap *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		wra_snap_clear(&b[i]);
}

static void test_repeats_merge_into_one_row(void **state)
{
	(void)state;
	struct wr_audit_config c = cfg();
	struct wra_core core;
	assert_int_equal(wra_core_init(&core, &c, NULL, 7), 0);
	int64_t t0 = 1000 * S;
	for (int i = 0; i < 120000; i++)
		feed(&core, "sb1", "ptrace", NULL, t0 + i * 50000LL, 1); /* 6 s in all */
	struct wra_snap buf[16];
	size_t n = take_all(&core, t0 + 6 * S, buf, 16);
	assert_int_equal(n, 1);
	assert_int_equal(buf[0].id, 7);
	assert_int_equal(buf[0].count, 120000);
	assert_int_equal(buf[0].first_ns, t0);
	assert_int_equal(buf[0].last_ns, t0 + 119999 * 50000LL);
	assert_string_equal(buf[0].action, "ptrace");
	char *sum = wra_summary("seccomp", "ptrace", NULL, true, false, buf[0].count,
				buf[0].first_ns, buf[0].last_ns);
	assert_string_equal(sum, "ptrace refused 120000 times in 6.0 s");
	free(sum);
	clear(buf, n);
	/* nothing changed: nothing to write */
	assert_int_equal(take_all(&core, t0 + 7 * S, buf, 16), 0);
	/* past the window a new row opens */
	feed(&core, "sb1", "ptrace", NULL, t0 + 11 * S, 1);
	n = take_all(&core, t0 + 11 * S, buf, 16);
	assert_int_equal(n, 1);
	assert_int_equal(buf[0].id, 8);
	assert_int_equal(buf[0].count, 1);
	clear(buf, n);
	assert_int_equal(core.stats.events[WR_AUDIT_SECCOMP], 120001);
	assert_int_equal(core.stats.rows[WR_AUDIT_SECCOMP], 2);
	wra_core_free(&core);
}

static void test_rate_limit_folds_into_a_suppressed_row(void **state)
{
	(void)state;
	struct wr_audit_config c = cfg();
	c.rows_per_s = 10;
	c.burst = 20;
	struct wra_core core;
	assert_int_equal(wra_core_init(&core, &c, NULL, 1), 0);
	int64_t t0 = 1000 * S;
	/* a port scan: 65535 distinct subjects in one second */
	char subj[32];
	for (int p = 1; p <= 65535; p++) {
		snprintf(subj, sizeof(subj), "10.0.0.1:%d/tcp", p);
		feed(&core, "scanner", "connect", subj, t0 + p * 10000LL, 1);
	}
	/* another sandbox meanwhile keeps its own budget */
	feed(&core, "quiet", "keyctl", NULL, t0 + S / 2, 1);
	struct wra_snap *buf = calloc(100, sizeof(*buf));
	size_t n = take_all(&core, t0 + S, buf, 100);
	size_t rows_scanner = 0, supp = 0;
	uint64_t total = 0;
	bool quiet = false;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(buf[i].sandbox, "quiet") == 0) {
			quiet = true;
			continue;
		}
		rows_scanner++;
		total += buf[i].count;
		if (buf[i].suppressed) {
			supp++;
			assert_string_equal(buf[i].action, "*");
		}
	}
	assert_true(quiet);
	assert_int_equal(supp, 1);
	/* the burst (20) plus what 0.65 s refilled (6), plus the summary row */
	assert_in_range(rows_scanner, 21, 28);
	assert_int_equal(total, 65535); /* every attempt counted exactly once */
	assert_int_equal(core.stats.dropped, 0);
	assert_true(core.stats.suppressed > 65000);
	clear(buf, n);
	free(buf);
	wra_core_free(&core);
}

static void test_table_full_drops_and_counts(void **state)
{
	(void)state;
	struct wr_audit_config c = cfg();
	c.max_open = 16;
	c.rows_per_s = 0; /* no rate limit: only the table bounds rows */
	struct wra_core core;
	assert_int_equal(wra_core_init(&core, &c, NULL, 1), 0);
	char subj[16];
	for (int i = 0; i < 40; i++) {
		snprintf(subj, sizeof(subj), "/p%d", i);
		feed(&core, "sb", "open", subj, 5 * S, 1);
	}
	assert_int_equal(core.n_rows, 16);
	assert_int_equal(core.stats.dropped, 24);
	struct wra_snap buf[64];
	size_t n = take_all(&core, 5 * S, buf, 64);
	assert_int_equal(n, 16);
	clear(buf, n);
	/* once written and past the window the rows are forgotten: room again */
	assert_int_equal(take_all(&core, 20 * S, buf, 64), 0);
	assert_int_equal(core.n_rows, 0);
	feed(&core, "sb", "open", "/again", 21 * S, 1);
	assert_int_equal(core.n_rows, 1);
	wra_core_free(&core);
}

static const char rules_json[] =
    "{\"rules\": ["
    " {\"name\": \"answers\", \"severity\": \"high\", \"layers\": [\"landlock\", \"file\"],"
    "  \"path_glob\": [\"*answer*\", \"*solution*\", \"*expected*\"],"
    "  \"outside\": [\"/work\", \"/tmp\"]},"
    " {\"name\": \"metadata\", \"severity\": \"critical\", \"layers\": [\"bpf-net\"],"
    "  \"dest\": [\"169.254.169.254\", \"fd00:ec2::254\", \"100.100.100.0/24\"]},"
    " {\"name\": \"proc-fd\", \"severity\": \"high\", \"path_glob\": [\"/proc/[0-9]*/fd*\"]},"
    " {\"name\": \"repeated\", \"severity\": \"medium\", \"denied\": true, \"min_count\": 100},"
    " {\"name\": \"low-any\", \"severity\": \"low\", \"actions\": [\"keyctl\"]}"
    "]}";

static void test_rules_match(void **state)
{
	(void)state;
	json_t *root = json_loads(rules_json, 0, NULL);
	struct wra_rules r;
	wr_err err = NULL;
	assert_int_equal(wra_rules_parse(root, &r, &err), 0);
	json_decref(root);
	const struct wra_rule *m;
	m = wra_rules_match(&r, WR_AUDIT_LANDLOCK, true, "fs.read_file", "/srv/grader/answers.txt",
			    NULL, 1);
	assert_non_null(m);
	assert_string_equal(m->name, "answers");
	/* inside the workspace: not flagged */
	assert_null(wra_rules_match(&r, WR_AUDIT_LANDLOCK, true, "fs.read_file",
				    "/work/expected_output.py", NULL, 1));
	/* "/workshop" is not beneath "/work" */
	m = wra_rules_match(&r, WR_AUDIT_FILE, false, "open", "/workshop/answer.md", NULL, 1);
	assert_non_null(m);
	assert_string_equal(m->name, "answers");
	/* other layers do not match a landlock rule */
	assert_null(wra_rules_match(&r, WR_AUDIT_SECCOMP, true, "open", "/srv/answers", NULL, 1));
	m = wra_rules_match(&r, WR_AUDIT_BPF_NET, true, "connect", "169.254.169.254:80/tcp",
			    "169.254.169.254", 1);
	assert_string_equal(m->name, "metadata");
	assert_int_equal(m->severity, WR_AUDIT_SEV_CRITICAL);
	m = wra_rules_match(&r, WR_AUDIT_BPF_NET, true, "connect", NULL, "100.100.100.200", 1);
	assert_string_equal(m->name, "metadata");
	m = wra_rules_match(&r, WR_AUDIT_BPF_NET, true, "connect", NULL, "fd00:ec2::254", 1);
	assert_string_equal(m->name, "metadata");
	assert_null(wra_rules_match(&r, WR_AUDIT_BPF_NET, true, "connect", NULL, "10.0.0.1", 1));
	m = wra_rules_match(&r, WR_AUDIT_LANDLOCK, true, "fs.read_file", "/proc/1/fd/3", NULL, 1);
	assert_string_equal(m->name, "proc-fd");
	assert_null(
	    wra_rules_match(&r, WR_AUDIT_LANDLOCK, true, "fs.read_file", "/proc/self/fd", NULL, 1));
	/* thresholds and the most severe of several */
	m = wra_rules_match(&r, WR_AUDIT_SECCOMP, true, "keyctl", NULL, NULL, 1);
	assert_string_equal(m->name, "low-any");
	m = wra_rules_match(&r, WR_AUDIT_SECCOMP, true, "keyctl", NULL, NULL, 100);
	assert_string_equal(m->name, "repeated");
	assert_true(wra_rules_crossed(&r, 99, 100));
	assert_false(wra_rules_crossed(&r, 100, 5000));
	wra_rules_free(&r);
}

static void test_rules_errors_name_the_key(void **state)
{
	(void)state;
	static const struct {
		const char *json, *field;
	} bad[] = {
	    {"{\"rules\": [{\"severity\": \"high\"}]}", "rules[0].name"},
	    {"{\"rules\": [{\"name\": \"a\", \"severity\": \"dire\"}]}", "rules[0].severity"},
	    {"{\"rules\": [{\"name\": \"a\"}, {\"name\": \"b\", \"layers\": [\"disk\"]}]}",
	     "rules[1].layers"},
	    {"{\"rules\": [{\"name\": \"a\", \"dest\": [\"not-an-ip\"]}]}", "rules[0].dest"},
	    {"{\"rules\": [{\"name\": \"a\", \"colour\": 1}]}", "rules[0].colour"},
	    {"{\"rulez\": []}", "rules"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_t *root = json_loads(bad[i].json, 0, NULL);
		struct wra_rules r;
		wr_err err = NULL;
		assert_true(wra_rules_parse(root, &r, &err) < 0);
		assert_non_null(err);
		assert_string_equal(err->field, bad[i].field);
		wr_err_free(&err);
		json_decref(root);
	}
}

static void test_core_flags_rows(void **state)
{
	(void)state;
	json_t *root = json_loads(rules_json, 0, NULL);
	struct wra_rules r;
	wr_err err = NULL;
	assert_int_equal(wra_rules_parse(root, &r, &err), 0);
	json_decref(root);
	struct wr_audit_config c = cfg();
	struct wra_core core;
	assert_int_equal(wra_core_init(&core, &c, &r, 1), 0);
	feed(&core, "sb", "keyctl", NULL, 10 * S, 1);
	struct wra_snap buf[4];
	size_t n = take_all(&core, 10 * S, buf, 4);
	assert_int_equal(n, 1);
	assert_string_equal(buf[0].rule, "low-any");
	assert_int_equal(buf[0].severity, WR_AUDIT_SEV_LOW);
	clear(buf, n);
	/* the same row reaches the repeated-refusals threshold: raised */
	feed(&core, "sb", "keyctl", NULL, 11 * S, 150);
	n = take_all(&core, 11 * S, buf, 4);
	assert_int_equal(n, 1);
	assert_int_equal(buf[0].count, 151);
	assert_string_equal(buf[0].rule, "repeated");
	assert_int_equal(buf[0].severity, WR_AUDIT_SEV_MEDIUM);
	assert_int_equal(core.stats.flagged[WR_AUDIT_SECCOMP], 1);
	clear(buf, n);
	wra_core_free(&core);
	wra_rules_free(&r);
}

static void test_api_rows_are_per_tenant(void **state)
{
	(void)state;
	struct wr_audit_config c = cfg();
	struct wra_core core;
	assert_int_equal(wra_core_init(&core, &c, NULL, 1), 0);
	const char *tenants[] = {"alice", "bob", "alice"};
	for (int i = 0; i < 3; i++) {
		struct wr_audit_event ev = {.sandbox_id = "",
					    .tenant = tenants[i],
					    .layer = WR_AUDIT_API,
					    .denied = true,
					    .action = "GET /v1/sandboxes/{id}",
					    .subject = "another tenant's sandbox"};
		wra_core_feed(&core, &ev, 5 * S + i);
	}
	struct wra_snap buf[8];
	size_t n = take_all(&core, 6 * S, buf, 8);
	assert_int_equal(n, 2);
	for (size_t i = 0; i < n; i++) {
		assert_null(buf[i].sandbox);
		assert_int_equal(buf[i].count, strcmp(buf[i].tenant, "alice") == 0 ? 2 : 1);
	}
	clear(buf, n);
	wra_core_free(&core);
}

static void test_net_subject(void **state)
{
	(void)state;
	char s[128];
	wra_net_subject("10.0.0.1", 443, "tcp", NULL, s, sizeof(s));
	assert_string_equal(s, "10.0.0.1:443/tcp");
	wra_net_subject("fd00:ec2::254", 80, "tcp", "x.example", s, sizeof(s));
	assert_string_equal(s, "[fd00:ec2::254]:80/tcp");
	wra_net_subject("169.254.169.254", 0, "icmp", NULL, s, sizeof(s));
	assert_string_equal(s, "169.254.169.254/icmp");
	wra_net_subject(NULL, 0, NULL, "secret.attacker.example", s, sizeof(s));
	assert_string_equal(s, "secret.attacker.example");
	wra_net_subject(NULL, 53, "udp", NULL, s, sizeof(s));
	assert_string_equal(s, "");
}

/* ---- the store ------------------------------------------------------------ */

static char dbdir[64];

static int store_setup(void **state)
{
	(void)state;
	snprintf(dbdir, sizeof(dbdir), "/tmp/wr-audit-unit-%d", (int)getpid());
	char path[128];
	snprintf(path, sizeof(path), "%s.db", dbdir);
	wr_err err = NULL;
	assert_int_equal(wrd_db_open(path, &err), 0);
	int64_t next = 0;
	assert_int_equal(wra_store_init(&next, &err), 0);
	assert_int_equal(next, 1);
	return 0;
}

static int store_teardown(void **state)
{
	(void)state;
	wrd_db_close();
	char path[160];
	static const char *const sfx[] = {".db", ".db-wal", ".db-shm"};
	for (int i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "%s%s", dbdir, sfx[i]);
		unlink(path);
	}
	return 0;
}

static void put_rows(const char *sb, const char *tenant, int64_t first_id, int n, int64_t t)
{
	struct wra_snap *rows = calloc((size_t)n, sizeof(*rows));
	for (int i = 0; i < n; i++) {
		rows[i].id = first_id + i;
		rows[i].sandbox = strdup(sb);
		rows[i].tenant = strdup(tenant);
		rows[i].action = strdup("keyctl");
		rows[i].layer = WR_AUDIT_SECCOMP;
		rows[i].denied = true;
		rows[i].count = 1;
		rows[i].first_ns = rows[i].last_ns = t + i;
	}
	uint64_t rev = 0;
	wr_err err = NULL;
	assert_int_equal(wra_store_write(rows, (size_t)n, &rev, &err), 0);
	for (int i = 0; i < n; i++)
		wra_snap_clear(&rows[i]);
	free(rows);
}

static size_t count_rows(const char *sb, const char *tenant)
{
	struct wra_query q = {.sandbox = sb, .tenant = tenant, .denied = -1, .limit = 1000};
	json_t *out = json_array();
	int64_t last = 0;
	uint64_t rev = 0;
	wr_err err = NULL;
	assert_int_equal(wra_store_query(&q, out, &last, &rev, &err), 0);
	size_t n = json_array_size(out);
	json_decref(out);
	return n;
}

static void test_store_retention(void **state)
{
	(void)state;
	int64_t now = 2000000 * S;
	put_rows("a", "t1", 1, 30, now - 10 * 86400 * S); /* 10 days old */
	put_rows("a", "t1", 31, 30, now - S);
	put_rows("b", "t2", 61, 5, now - S);
	assert_int_equal(count_rows("a", NULL), 60);
	/* age: 7 days; per sandbox: 20; in all: 1000 */
	int64_t del = wra_store_retain(7 * 86400, 20, 1000, now, NULL);
	assert_int_equal(del, 30 + 10);
	assert_int_equal(count_rows("a", NULL), 20);
	assert_int_equal(count_rows("b", NULL), 5);
	/* the newest of a are kept */
	struct wra_query q = {.sandbox = "a", .denied = -1, .limit = 1};
	json_t *out = json_array();
	int64_t last = 0;
	uint64_t rev = 0;
	wr_err err = NULL;
	assert_int_equal(wra_store_query(&q, out, &last, &rev, &err), 0);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(out, 0), "id")), 60);
	json_decref(out);
	/* in all: 10 */
	del = wra_store_retain(7 * 86400, 20, 10, now, NULL);
	assert_int_equal(del, 15);
	assert_int_equal(count_rows(NULL, NULL), 10);
	/* tenant scoping */
	assert_int_equal(count_rows(NULL, "t2"), 5);
	assert_int_equal(count_rows("b", "t1"), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_repeats_merge_into_one_row),
	    cmocka_unit_test(test_rate_limit_folds_into_a_suppressed_row),
	    cmocka_unit_test(test_table_full_drops_and_counts),
	    cmocka_unit_test(test_rules_match),
	    cmocka_unit_test(test_rules_errors_name_the_key),
	    cmocka_unit_test(test_core_flags_rows),
	    cmocka_unit_test(test_net_subject),
	    cmocka_unit_test(test_api_rows_are_per_tenant),
	    cmocka_unit_test_setup_teardown(test_store_retention, store_setup, store_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
