/* warren inspect: show one sandbox. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static void inspect_usage(FILE *f)
{
	fprintf(f, "usage: warren inspect [options] SANDBOX\n\n" CLI_CONN_HELP);
}

static void print_info(const warren_sandbox_info *in)
{
	printf("id:           %s\n", in->id);
	printf("state:        %s\n", in->state);
	printf("tier:         %s\n", in->tier ? in->tier : "-");
	printf("image:        %s\n", in->image ? in->image : "-");
	printf("created:      %s\n", in->created_at ? in->created_at : "-");
	printf("expires:      %s\n", in->expires_at ? in->expires_at : "-");
	if (in->cpu > 0)
		printf("cpu:          %g requested", in->cpu);
	else
		printf("cpu:          no request (best effort)");
	if (in->cpu_max > 0)
		printf(", max %g\n", in->cpu_max);
	else
		printf(", no max\n");
	printf("memory:       %lld MiB\n", (long long)in->memory_mb);
	printf("disk:         %lld MiB\n", (long long)in->disk_mb);
	printf("pids:         %lld\n", (long long)in->pids);
	printf("user:         %lld\n", (long long)in->user);
	printf("workdir:      %s\n", in->workdir ? in->workdir : "-");
	if (in->idle_timeout)
		printf("idle timeout: %llds\n", (long long)in->idle_timeout);
	else
		printf("idle timeout: off\n");
	printf("on timeout:   %s\n", in->on_timeout ? in->on_timeout : "-");
	printf("on idle:      %s\n", in->on_idle ? in->on_idle : "-");
	printf("lease:        %s\n", in->lease ? in->lease : "-");
	if (in->pause_reason)
		printf("paused:       %s, %.1fs of lifetime left\n", in->pause_reason,
		       in->timeout_remaining);
	if (in->has_usage)
		printf("usage:        cpu %.3fs, memory %.1f MiB (peak %.1f MiB), %lld pids\n",
		       in->usage_cpu_s, (double)in->usage_memory_bytes / 1048576.0,
		       (double)in->usage_memory_peak_bytes / 1048576.0, (long long)in->usage_pids);
	if (in->has_usage && in->harvest_state)
		printf("cpu now:      %.3f CPUs used, %s (weight %lld)\n", in->usage_cpu_cores,
		       in->harvest_state, (long long)in->harvest_cpu_weight);
	printf("labels:      ");
	for (size_t i = 0; i < in->n_labels; i++)
		printf(" %s=%s", in->labels[i].key, in->labels[i].value);
	printf("%s\n", in->n_labels ? "" : " -");
}

int cmd_inspect(int argc, char **argv)
{
	struct cli_conn cc = {0};
	int r = cli_conn_only_opts(argc, argv, &cc, inspect_usage);
	if (r >= 0)
		return r;
	if (optind >= argc)
		return cli_usage_error(NULL, "no sandbox given (warren inspect SANDBOX)");
	if (optind + 1 < argc)
		return cli_usage_error(argv[optind + 1], "unexpected argument");

	warren_client *cl;
	warren_sandbox *sb;
	r = cli_open_sandbox(&cc, argv[optind], &cl, &sb);
	if (r)
		return r;
	if (cc.json) {
		cli_print_json(warren_sandbox_last_info(sb)->json);
	} else {
		print_info(warren_sandbox_last_info(sb));
	}
	warren_sandbox_free(sb);
	warren_client_free(cl);
	return r;
}
