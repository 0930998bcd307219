/* warren image: the node's image store (import, ls, inspect, tag, rm, pin,
 * unpin, gc). Parses and dispatches into libwarren only. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

static void image_usage(FILE *f)
{
	fprintf(f,
		"usage: warren image COMMAND [options] ...\n\n"
		"  import [--ref REF] [--format F] [--node] PATH|-\n"
		"                    import a rootfs dir, a tar (plain/gz/zstd), an OCI layout or\n"
		"                    a docker/podman save archive; a file or '-' (stdin) is sent\n"
		"                    to the daemon, a directory (or --node PATH) is read on the\n"
		"                    daemon's node (Unix socket only)\n"
		"  import --vm-disk [--ref REF] [--firmware bios|uefi|uefi-secure]\n"
		"                    [--node] FILE|-\n"
		"                    import a bootable disk (raw or qcow2) for tier \"vm\"\n"
		"                    (the same as --format vm-disk); its firmware is detected\n"
		"                    (GPT with an EFI system partition: uefi) unless given\n"
		"  build-vm [--ref REF] [--size SIZE] [--firmware bios|uefi|uefi-secure] IMAGE\n"
		"                    build a bootable disk (vm-disk image) from rootfs image\n"
		"                    IMAGE (with systemd and qemu-guest-agent) and Debian's\n"
		"                    cloud kernel; SIZE default 4G; uefi: GPT, an EFI system\n"
		"                    partition and GRUB for UEFI (boots with OVMF)\n"
		"  ls                list images\n"
		"  inspect REF...    show images (name:tag, name@sha256:..., sha256:...)\n"
		"  tag REF NEWREF    point NEWREF (name[:tag]) at REF's image\n"
		"  rm [-f] REF...    remove names (and unkept images); by digest, -f also\n"
		"                    removes named or pinned images\n"
		"  pin REF...        never reclaim; unpin REF... undoes it\n"
		"  gc [--dry-run] [--prune]\n"
		"                    reclaim least recently used images over the quota;\n"
		"                    --prune also removes images no name points at\n"
		"  pull REMOTE       fetch REGISTRY/REPO[:TAG] into the store (see pull --help)\n"
		"  push REF REMOTE   send an image to a registry (see push --help)\n\n"
		"options:\n" CLI_CONN_HELP);
}

enum { OPT_REF = 1000, OPT_FORMAT, OPT_NODE, OPT_DRY, OPT_PRUNE, OPT_VM_DISK, OPT_SIZE, OPT_FW };

static void print_image(const warren_image *img, bool json)
{
	if (json) {
		cli_print_json(img->json ? img->json : "{}");
		return;
	}
	printf("%s\n", img->digest);
}

static int do_import(warren_client *cl, int argc, char **argv, const char *ref, const char *fmt,
		     const char *firmware, bool node, bool json)
{
	if (argc != 1)
		return cli_usage_error(NULL, "import: one PATH (or '-') is needed");
	const char *path = argv[0];
	warren_image_import_opts o = WARREN_IMAGE_IMPORT_OPTS_INIT;
	o.ref = ref;
	o.format = fmt;
	o.firmware = firmware;
	struct stat st;
	int fd = -1;
	char *abs = NULL;
	if (strcmp(path, "-") == 0) {
		o.fd = 0;
	} else if (node || (stat(path, &st) == 0 && S_ISDIR(st.st_mode))) {
		abs = realpath(path, NULL);
		o.node_path = abs ? abs : path;
	} else {
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			fprintf(stderr, "warren: import %s: %s\n", path, strerror(errno));
			return WR_EXIT_WARREN;
		}
		o.fd = fd;
	}
	warren_image *img = NULL;
	warren_error *err = NULL;
	int r = warren_image_import(cl, &o, &img, &err);
	if (fd >= 0)
		close(fd);
	free(abs);
	if (r < 0)
		return cli_fail(err);
	print_image(img, json);
	warren_image_free(img);
	return 0;
}

static int do_ls(warren_client *cl, bool json)
{
	warren_image_list *l = NULL;
	warren_error *err = NULL;
	if (warren_image_list_get(cl, &l, &err) < 0)
		return cli_fail(err);
	if (json) {
		printf("[");
		for (size_t i = 0; i < l->count; i++)
			printf("%s%s", i ? "," : "", l->images[i].json ? l->images[i].json : "{}");
		printf("]\n");
	} else {
		printf("%-40s %-19s %10s %-25s %s\n", "REF", "DIGEST", "SIZE", "CREATED", "FLAGS");
		for (size_t i = 0; i < l->count; i++) {
			const warren_image *m = &l->images[i];
			char flags[64];
			snprintf(flags, sizeof(flags), "%s%s%s%s", m->pinned ? "pinned " : "",
				 m->holders ? "in-use " : "", m->complete ? "" : "remote ",
				 m->kind && strcmp(m->kind, "vm-disk") == 0 ? "vm-disk" : "");
			size_t n = m->n_refs ? m->n_refs : 1;
			for (size_t j = 0; j < n; j++)
				printf("%-40s %.19s %10lld %-25s %s\n",
				       m->n_refs ? m->refs[j] : "<none>", m->digest,
				       (long long)m->size, m->created_at ? m->created_at : "-",
				       flags);
		}
		if (l->quota_bytes)
			printf("# %lld of %lld bytes used\n",
			       (long long)(l->blob_bytes + l->cache_bytes),
			       (long long)l->quota_bytes);
	}
	warren_image_list_free(l);
	return 0;
}

static int each_ref(warren_client *cl, const char *verb, int argc, char **argv, bool force,
		    bool json)
{
	if (argc < 1)
		return cli_usage_error(NULL, "%s: at least one REF is needed", verb);
	int rc = 0;
	for (int i = 0; i < argc; i++) {
		warren_image *img = NULL;
		warren_error *err = NULL;
		bool removed = false;
		int r;
		if (strcmp(verb, "inspect") == 0)
			r = warren_image_get(cl, argv[i], &img, &err);
		else if (strcmp(verb, "rm") == 0)
			r = warren_image_remove(cl, argv[i], force, &removed, &err);
		else
			r = warren_image_pin(cl, argv[i], strcmp(verb, "pin") == 0, &img, &err);
		if (r < 0) {
			rc = cli_fail(err);
			continue;
		}
		if (img)
			print_image(img, json || strcmp(verb, "inspect") == 0);
		else if (json)
			printf("{\"ref\":\"%s\",\"removed\":%s}\n", argv[i],
			       removed ? "true" : "false");
		else
			printf("%s%s\n", argv[i], removed ? " (image removed)" : "");
		warren_image_free(img);
	}
	return rc;
}

int cmd_image(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"ref", required_argument, NULL, OPT_REF},
	    {"format", required_argument, NULL, OPT_FORMAT},
	    {"node", no_argument, NULL, OPT_NODE},
	    {"vm-disk", no_argument, NULL, OPT_VM_DISK},
	    {"size", required_argument, NULL, OPT_SIZE},
	    {"firmware", required_argument, NULL, OPT_FW},
	    {"dry-run", no_argument, NULL, OPT_DRY},
	    {"prune", no_argument, NULL, OPT_PRUNE},
	    {"force", no_argument, NULL, 'f'},
	    CLI_CONN_OPTIONS,
	    {0},
	};
	if (argc < 2) {
		image_usage(stderr);
		return WR_EXIT_WARREN;
	}
	const char *verb = argv[1];
	if (strcmp(verb, "-h") == 0 || strcmp(verb, "--help") == 0) {
		image_usage(stdout);
		return 0;
	}
	if (strcmp(verb, "push") == 0 || strcmp(verb, "pull") == 0)
		return cmd_image_remote(argc, argv); /* image_remote.c */
	static const char *const verbs[] = {"import", "ls",    "inspect", "tag",     "rm",
					    "pin",    "unpin", "gc",	  "build-vm"};
	bool known = false;
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
		known |= strcmp(verb, verbs[i]) == 0;
	if (!known)
		return cli_usage_error(
		    NULL, "unknown image command '%s' (see 'warren image --help')", verb);
	struct cli_conn cc = {0};
	const char *ref = NULL, *fmt = NULL, *size = NULL, *fw = NULL;
	bool node = false, dry = false, prune = false, force = false, vm_disk = false;
	int c;
	argc--;
	argv++;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hf", opts, NULL)) != -1) {
		if (cli_conn_opt(&cc, c, optarg))
			continue;
		switch (c) {
		case OPT_REF: ref = optarg; break;
		case OPT_FORMAT: fmt = optarg; break;
		case OPT_NODE: node = true; break;
		case OPT_VM_DISK: vm_disk = true; break;
		case OPT_SIZE: size = optarg; break;
		case OPT_FW: fw = optarg; break;
		case OPT_DRY: dry = true; break;
		case OPT_PRUNE: prune = true; break;
		case 'f': force = true; break;
		case 'h': image_usage(stdout); return 0;
		default: return cli_bad_option(c, argv);
		}
	}
	argc -= optind;
	argv += optind;
	if (vm_disk && (strcmp(verb, "import") != 0 || (fmt && strcmp(fmt, "vm-disk") != 0)))
		return cli_usage_error(
		    NULL, "--vm-disk: only with import, and not with --format %s", fmt ? fmt : "");
	if (vm_disk)
		fmt = "vm-disk";
	if (fw && strcmp(verb, "build-vm") != 0 &&
	    (strcmp(verb, "import") != 0 || fmt == NULL || strcmp(fmt, "vm-disk") != 0))
		return cli_usage_error(NULL, "--firmware: only with import --vm-disk or build-vm");
	if (fw && strcmp(fw, "bios") != 0 && strcmp(fw, "uefi") != 0 &&
	    strcmp(fw, "uefi-secure") != 0)
		return cli_usage_error(NULL, "--firmware: bios, uefi or uefi-secure, not '%s'", fw);
	if (size && strcmp(verb, "build-vm") != 0)
		return cli_usage_error(NULL, "--size: only with build-vm");
	if (strcmp(verb, "build-vm") == 0 && argc != 1)
		return cli_usage_error(NULL, "build-vm: one IMAGE (a rootfs image) is needed");
	if (strcmp(verb, "tag") == 0 && argc != 2)
		return cli_usage_error(NULL, "tag: REF and NEWREF are needed");
	if ((strcmp(verb, "ls") == 0 || strcmp(verb, "gc") == 0) && argc != 0)
		return cli_usage_error(NULL, "%s: takes no arguments", verb);
	warren_client *cl = NULL;
	int r = cli_connect(&cc, &cl);
	if (r)
		return r;
	warren_error *err = NULL;
	if (strcmp(verb, "import") == 0) {
		r = do_import(cl, argc, argv, ref, fmt, fw, node, cc.json);
	} else if (strcmp(verb, "ls") == 0) {
		r = do_ls(cl, cc.json);
	} else if (strcmp(verb, "build-vm") == 0) {
		warren_image *img = NULL;
		if (warren_image_build_vm_firmware(cl, argv[0], ref, size, fw, &img, &err) < 0) {
			r = cli_fail(err);
		} else {
			print_image(img, cc.json);
			warren_image_free(img);
		}
	} else if (strcmp(verb, "tag") == 0) {
		warren_image *img = NULL;
		if (warren_image_tag(cl, argv[0], argv[1], &img, &err) < 0) {
			r = cli_fail(err);
		} else {
			print_image(img, cc.json);
			warren_image_free(img);
		}
	} else if (strcmp(verb, "gc") == 0) {
		char *rep = NULL;
		if (warren_image_gc(cl, dry, prune, &rep, &err) < 0) {
			r = cli_fail(err);
		} else {
			cli_print_json(rep);
			warren_free(rep);
		}
	} else {
		r = each_ref(cl, verb, argc, argv, force, cc.json);
	}
	warren_client_free(cl);
	return r;
}
