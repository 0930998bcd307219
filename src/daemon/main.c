/* warrend: the warren daemon. Start-up order matters for crash safety:
 * database -> tier -> adopt what the last run left running -> sweep every
 * leftover no live record owns -> monitor lifetimes -> serve. SIGTERM stops
 * accepting, lets in-flight requests finish and exits; sandboxes keep
 * running and the next start adopts them. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/api.h"
#include "daemon/audit_internal.h"
#include "daemon/functions.h"
#include "daemon/checkpoint.h"
#include "daemon/snapshot.h"
#include "daemon/config.h"
#include "daemon/network.h"
#include "daemon/images.h"
#include "daemon/db.h"
#include "daemon/dns.h"
#include "daemon/hookwarm.h"
#include "daemon/manager.h"
#include "daemon/netpolicy.h"
#include "daemon/metrics.h"

#ifndef WARREN_VERSION
#define WARREN_VERSION "0.0.0"
#endif

static void usage(FILE *f)
{
	fprintf(f, "usage: warrend [--config FILE]\n\n"
		   "  --config FILE  JSON configuration (see deploy/warrend.json)\n"
		   "  --version      print the version and exit\n\n"
		   "Environment: WARREN_STATE_DIR, WARREN_RUN_DIR, WARREN_CGROUP_BASE and\n"
		   "WARREN_INIT override the configuration.\n");
}

/* systemd Type=notify without libsystemd: one datagram to NOTIFY_SOCKET. */
static void sd_notify_ready(void)
{
	const char *path = getenv("NOTIFY_SOCKET");
	if (path == NULL || (path[0] != '/' && path[0] != '@'))
		return;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t n = strlen(path);
	if (n >= sizeof(sa.sun_path))
		return;
	memcpy(sa.sun_path, path, n);
	if (sa.sun_path[0] == '@')
		sa.sun_path[0] = 0;
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	const char msg[] = "READY=1";
	if (sendto(fd, msg, sizeof(msg) - 1, 0, (struct sockaddr *)&sa,
		   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)) < 0)
		wr_debug("sd_notify: %s", strerror(errno));
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
					     {"version", no_argument, NULL, 'V'},
					     {"help", no_argument, NULL, 'h'},
					     {0}};
	const char *config = NULL;
	int c;
	wr_log_init("warrend", WR_LOG_INFO);
	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': config = optarg; break;
		case 'V': printf("warrend %s\n", WARREN_VERSION); return 0;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	/* Signals: SIGTERM/SIGINT are taken synchronously by this thread
	 * (every other thread inherits the block); SIGPIPE is an EPIPE. */
	signal(SIGPIPE, SIG_IGN);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	struct wrd_config cfg;
	_cleanup_err_ wr_err err = NULL;
	if (wrd_config_load(config, &cfg, &err) < 0) {
		wr_log_err(err);
		return 2;
	}
	wr_log_init("warrend", (enum wr_log_level)cfg.log_level);
	int status = 1;
	char *db = NULL;
	if (wr_mkdir_p(cfg.state_dir, 0700, &err) < 0 || wr_mkdir_p(cfg.run_dir, 0755, &err) < 0) {
		wr_log_err(err);
		goto out;
	}
	if (asprintf(&db, "%s/warren.db", cfg.state_dir) < 0) {
		wr_error("out of memory");
		goto out;
	}
	/* The network filter before recovery (adopted sandboxes get their
	 * policy back). Without it only mode none is possible: said once. */
	if (wrd_nf_init(&cfg, &err) < 0) {
		wr_warn("%s; sandboxes can only be created with network mode none", err->msg);
		wr_err_free(&err);
	}
	/* The audit before the manager: wr_seccomp_set_log must be decided
	 * before the spawners fork, and adopted sandboxes' refusals are
	 * recorded from the start. */
	wrd_ckpt_init(cfg.criu_path);
	/* a configured key that cannot be used is a configuration error; the
	 * default one, when it cannot be made, only turns processes off */
	if (wrd_snapshot_key_init(cfg.snapshot_key, cfg.state_dir, &err) < 0) {
		if (cfg.snapshot_key) {
			wr_log_err(err);
			goto out;
		}
		wr_warn("%s: snapshots with processes are off", err->msg);
		wr_err_free(&err);
	}
	if (wrd_db_open(db, &err) < 0 || wr_audit_start(&cfg, &err) < 0 ||
	    wrd_mgr_init(&cfg, &err) < 0 || wrd_mgr_recover(&err) < 0 ||
	    wrd_net_start(&cfg, &err) < 0 || wrd_mgr_start_monitor(&err) < 0 ||
	    wrd_harvest_start(&err) < 0 || wrd_functions_init(&cfg, &err) < 0) {
		wr_log_err(err);
		goto out;
	}
	if (wr_audit_kernel_unavailable())
		wr_warn("audit: %s", wr_audit_kernel_unavailable());
	wrd_nf_sweep(); /* pinned links of sandboxes recovery did not keep */
	/* after recovery's sweep, which removes a crashed run's anchor */
	wrd_hookwarm_start(cfg.cgroup_base);
	if (wrd_images_open_config(&cfg, &err) < 0) {
		wr_log_err(err);
		goto out;
	}
	if (wrd_dns_start(&cfg, &err) < 0) {
		wr_log_err(err);
		goto out;
	}
	wrd_nf_dns_sync(); /* the names of the sandboxes recovery attached */
	wrd_metrics_init(wrd_route_labels, wrd_n_route_labels);
	struct wrd_http_hooks hooks = {.upload_limit = wrd_images_or_mgr_upload_limit};
	if (wrd_http_start(&cfg, wrd_routes, wrd_n_routes, &hooks, &err) < 0) {
		wr_log_err(err);
		goto out;
	}
	wr_info("warrend %s: serving on %s%s%s (%zu sandboxes live)", WARREN_VERSION,
		cfg.socket_path, cfg.listen ? " and " : "", cfg.listen ? cfg.listen : "",
		wrd_mgr_live());
	sd_notify_ready();
	for (;;) {
		siginfo_t si;
		int sig = sigwaitinfo(&set, &si);
		if (sig == SIGTERM || sig == SIGINT)
			break;
		if (sig == SIGHUP)
			wr_info("SIGHUP: nothing to reload; restart to apply a new configuration");
	}
	wr_info("shutting down: finishing %u requests in flight", wrd_http_inflight());
	wr_audit_end_followers();
	wrd_http_shutdown(cfg.shutdown_timeout);
	wrd_mgr_stop_monitor();
	wrd_harvest_stop();
	wrd_functions_stop();
	wrd_net_stop();
	status = 0;
out:
	wrd_hookwarm_stop();
	wrd_dns_stop();
	wrd_images_close();
	wr_audit_stop();
	wrd_db_close();
	free(db);
	wrd_config_free(&cfg);
	return status;
}
