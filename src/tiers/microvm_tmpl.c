/* MicroVM templates: the first create of an image (with its memory, vCPUs
 * and disk size) boots a VM to a ready agent and snapshots it; later
 * creates restore from the snapshot (the E2B approach).
 *
 *   <template_dir>/<hash>/   published by rename of a complete directory
 *     mem        guest RAM: the template VM ran with it as a shared
 *                memory-backend-file; a restore maps it share=off, a
 *                private copy-on-write of it (many restores at once)
 *     state      device state: QMP migrate to "fd:state" (getfd,
 *                SCM_RIGHTS) with x-ignore-shared, so no RAM in it
 *     rw.ext4    the writable disk as the stopped template left it; each
 *                restore gets a sparse copy, consistent with the RAM
 *     meta.json  the key the template was made for, QEMU's version
 *
 * The key names everything a snapshot depends on: QEMU's binary (path,
 * inode, size, mtime), the accelerator, the machine's arguments, the
 * kernel's and initramfs's identity, the image's path and identity, the
 * memory, vCPUs and disk size. A template whose meta.json holds another
 * key is rebuilt; a restore that fails for any reason falls back to a cold
 * boot (wr_vm_create).
 *
 * Order that makes a template crash-safe: everything is written into
 * .tmp-<hash>-<random>, meta.json last, then the directory is renamed to
 * <hash>; a directory without a matching meta.json is never used, and
 * .tmp-* are removed at start (wr_vm_tmpl_sweep). Two creates that both
 * find no template serialise on <hash>.lock (flock): one builds, the other
 * restores from it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/frame.h"
#include "common/util.h"
#include "tiers/microvm_internal.h"
#include "tiers/qemu_net.h"
#include "tiers/qmp.h"

#define TMPL_HOSTNAME "warren-template"
#define TMPL_FORMAT "warren-microvm-template 1"

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void file_id(const char *path, char *out, size_t n)
{
	struct stat st;
	if (path == NULL)
		snprintf(out, n, "none");
	else if (stat(path, &st) < 0)
		snprintf(out, n, "%s:missing", path);
	else
		snprintf(out, n, "%s:%llu:%llu:%lld:%lld.%09ld", path,
			 (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
			 (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
}

/* A networked VM has a NIC (device state in the snapshot, eth0 set up by
 * its agent at boot): its own templates, made with the NIC in an empty
 * namespace; a restore puts QEMU into the sandbox's (qemu_net.h). */
static const char *tmpl_net_key(const struct wr_vm_spec *spec)
{
	return spec->net ? "nic=virtio-net-device,user,10.0.2.15/24\n" : "";
}

/* The key (malloc'd) and its hash (the directory's name). */
static char *template_key(const struct wr_vm_spec *spec, char hash[17])
{
	char q[700], k[700], i[700], img[700];
	file_id(wr_mvm.qemu, q, sizeof(q));
	file_id(wr_mvm.kernel, k, sizeof(k));
	file_id(wr_mvm.initrd, i, sizeof(i));
	file_id(spec->image, img, sizeof(img));
	char *key = NULL;
	if (asprintf(&key,
		     TMPL_FORMAT
		     "\nqemu=%s\naccel=%s\ntsc_khz=%lu\nmachine=microvm,acpi=on,rtc=on\n"
		     "kernel=%s\ninitrd=%s\nimage=%s\nmemory=%llu\ncpus=%u\ndisk=%llu\n%s",
		     q, wr_mvm.kvm ? "kvm" : "tcg", wr_mvm.kvm ? 0 : wr_mvm.tsc_khz, k, i, img,
		     (unsigned long long)spec->memory_bytes, spec->cpus,
		     (unsigned long long)spec->disk_bytes, tmpl_net_key(spec)) < 0)
		return NULL;
	uint64_t h = 1469598103934665603ull; /* FNV-1a: a name, not a check */
	for (const char *c = key; *c; c++)
		h = (h ^ (uint8_t)*c) * 1099511628211ull;
	snprintf(hash, 17, "%016llx", (unsigned long long)h);
	return key;
}

/* An open template directory whose meta.json holds key, or -1. */
static int open_valid(const char *hash, const char *key)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/%s", wr_mvm.template_dir, hash);
	int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -1;
	int mfd = openat(dfd, "meta.json", O_RDONLY | O_CLOEXEC);
	json_error_t je;
	json_t *meta = mfd >= 0 ? json_loadfd(mfd, 0, &je) : NULL;
	if (mfd >= 0)
		close(mfd);
	const char *k = json_string_value(json_object_get(meta, "key"));
	bool ok = k && strcmp(k, key) == 0;
	json_decref(meta);
	if (!ok) {
		close(dfd);
		return -1;
	}
	return dfd;
}

void wr_vm_tmpl_sweep(void)
{
	DIR *d = opendir(wr_mvm.template_dir);
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL) {
		if (strncmp(de->d_name, ".tmp-", 5) && strncmp(de->d_name, ".old-", 5))
			continue;
		char p[1024];
		snprintf(p, sizeof(p), "%s/%s", wr_mvm.template_dir, de->d_name);
		wr_rm_flat_dir(p);
	}
	if (d)
		closedir(d);
}

static int qmp_locked(struct wr_vm *vm, const char *cmd, json_t *args, json_t **ret, wr_err *err)
{
	pthread_mutex_lock(&vm->qmp_lock);
	int r = wr_qmp_cmd(vm->qmp, cmd, args, 30000, ret, err);
	pthread_mutex_unlock(&vm->qmp_lock);
	json_decref(args);
	return r;
}

static int ignore_shared(struct wr_vm *vm, wr_err *err)
{
	return qmp_locked(vm, "migrate-set-capabilities",
			  json_pack("{s:[{s:s, s:b}]}", "capabilities", "capability",
				    "x-ignore-shared", "state", 1),
			  NULL, err);
}

static int getfd(struct wr_vm *vm, const char *name, int fd, wr_err *err)
{
	pthread_mutex_lock(&vm->qmp_lock);
	int r = wr_qmp_getfd(vm->qmp, name, fd, err);
	pthread_mutex_unlock(&vm->qmp_lock);
	return r;
}

/* Stops the template VM and saves its device state into sfd; fills
 * version with QEMU's. */
static int snapshot(struct wr_vm *vm, int sfd, char *version, size_t vlen, wr_err *err)
{
	json_t *v = NULL;
	if (qmp_locked(vm, "query-version", NULL, &v, err) < 0)
		return -1;
	json_t *q = json_object_get(v, "qemu");
	snprintf(version, vlen, "%lld.%lld.%lld%s",
		 (long long)json_integer_value(json_object_get(q, "major")),
		 (long long)json_integer_value(json_object_get(q, "minor")),
		 (long long)json_integer_value(json_object_get(q, "micro")),
		 json_string_value(json_object_get(v, "package")) ?: "");
	json_decref(v);
	if (qmp_locked(vm, "stop", NULL, NULL, err) < 0 || ignore_shared(vm, err) < 0 ||
	    getfd(vm, "state", sfd, err) < 0 ||
	    qmp_locked(vm, "migrate", json_pack("{s:s}", "uri", "fd:state"), NULL, err) < 0)
		return -1;
	uint64_t deadline = now_ns() + 60ull * 1000000000ull;
	for (;;) {
		json_t *st = NULL;
		if (qmp_locked(vm, "query-migrate", NULL, &st, err) < 0)
			return -1;
		const char *s = json_string_value(json_object_get(st, "status"));
		char what[64];
		snprintf(what, sizeof(what), "%s", s ? s : "none");
		const char *why = json_string_value(json_object_get(st, "error-desc"));
		if (strcmp(what, "failed") == 0) {
			int r = wr_err_set(err, EIO, "snapshot failed: %s", why ? why : "?");
			json_decref(st);
			return r;
		}
		json_decref(st);
		if (strcmp(what, "completed") == 0)
			return 0;
		if (now_ns() > deadline)
			return wr_err_set(err, ETIMEDOUT, "snapshot: migration still %s", what);
		struct timespec ts = {0, 2 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

static int write_meta(const char *dir, const char *key, const char *version, uint64_t build_ms,
		      wr_err *err)
{
	char path[1100];
	snprintf(path, sizeof(path), "%s/meta.json", dir);
	json_t *m = json_pack("{s:s, s:s, s:s, s:I, s:I}", "format", TMPL_FORMAT, "key", key,
			      "qemu_version", version, "created", (json_int_t)time(NULL),
			      "build_ms", (json_int_t)build_ms);
	int r = m && json_dump_file(m, path, JSON_INDENT(1)) == 0
		    ? 0
		    : wr_err_set(err, EIO, "write %s", path);
	json_decref(m);
	return r;
}

/* Boots, snapshots and publishes the template at <template_dir>/<hash>. */
static int build(const struct wr_vm_spec *spec, const char *key, const char *hash, wr_err *err)
{
	char rnd[17], tmp[1024], final[1024], path[1100];
	if (wr_random_id(rnd) < 0)
		return wr_err_set(err, EIO, "no randomness");
	rnd[8] = '\0';
	snprintf(tmp, sizeof(tmp), "%s/.tmp-%s-%s", wr_mvm.template_dir, hash, rnd);
	snprintf(final, sizeof(final), "%s/%s", wr_mvm.template_dir, hash);
	if (mkdir(tmp, 0700) < 0)
		return wr_err_sys(err, "mkdir %s", tmp);
	uint64_t start = now_ns();
	struct wr_vm *vm = NULL;
	int r;
	_cleanup_close_ int sfd = -1;
	snprintf(path, sizeof(path), "%s/mem", tmp);
	_cleanup_close_ int mfd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (mfd < 0 || ftruncate(mfd, (off_t)spec->memory_bytes) < 0) {
		r = wr_err_sys(err, "template memory %s", path);
		goto out;
	}
	snprintf(path, sizeof(path), "%s/state", tmp);
	sfd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (sfd < 0) {
		r = wr_err_sys(err, "template state %s", path);
		goto out;
	}
	struct wr_vm_spec ts = *spec;
	char id[64];
	snprintf(id, sizeof(id), "tmpl-%s-%s", hash, rnd);
	ts.id = id;
	struct wr_qemu_net tnet = {.netns_fd = -1};
	if (spec->net)
		ts.net = &tnet; /* the NIC, nothing reachable */
	struct vm_boot boot = {.hostname = TMPL_HOSTNAME, .mem = true, .share = true};
	if ((r = wr_vm_boot_cold(&ts, &boot, mfd, &vm, err)) < 0)
		goto out;
	char version[128] = "";
	if ((r = snapshot(vm, sfd, version, sizeof(version), err)) < 0)
		goto out;
	/* the VM is stopped and QEMU flushed its disks when the migration
	 * completed: the disk now matches the RAM and device state */
	snprintf(path, sizeof(path), "%s/rw.ext4", tmp);
	if ((r = wr_vm_disk_copy(vm->rw_path, path, spec->disk_bytes, err)) < 0)
		goto out;
	wr_vm_destroy(&vm, NULL);
	if ((r = write_meta(tmp, key, version, (now_ns() - start) / 1000000, err)) < 0)
		goto out;
	/* an invalid template of the same hash (its key differs) goes first,
	 * out of the way under a name the sweep removes */
	char old[1100];
	snprintf(old, sizeof(old), "%s/.old-%s-%s", wr_mvm.template_dir, hash, rnd);
	if (rename(final, old) == 0)
		wr_rm_flat_dir(old);
	if (rename(tmp, final) < 0) {
		r = wr_err_sys(err, "publish template %s", final);
		goto out;
	}
	return 0;
out:
	if (vm)
		wr_vm_destroy(&vm, NULL);
	wr_rm_flat_dir(tmp);
	return wr_err_wrap(err, "make template");
}

int wr_vm_send_identity(struct wr_vm *vm, const char *hostname, wr_err *err)
{
	uint8_t seed[32];
	if (getrandom(seed, sizeof(seed), 0) != (ssize_t)sizeof(seed))
		return wr_err_sys(err, "getrandom");
	char hex[65];
	for (size_t i = 0; i < sizeof(seed); i++)
		snprintf(hex + 2 * i, 3, "%02x", seed[i]);
	struct timespec rt;
	clock_gettime(CLOCK_REALTIME, &rt);
	json_t *j =
	    json_pack("{s:s, s:s, s:s, s:I}", "hostname", hostname, "sandbox_id", vm->id, "seed",
		      hex, "realtime_ns", (json_int_t)rt.tv_sec * 1000000000 + rt.tv_nsec);
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (s == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	pthread_mutex_lock(&vm->write_lock);
	int r = wr_frame_write(vm->agent, WR_FRAME_IDENTITY, 0, s, (uint32_t)strlen(s));
	pthread_mutex_unlock(&vm->write_lock);
	free(s);
	if (r < 0) {
		errno = -r;
		return wr_err_sys(err, "send identity");
	}
	return 0;
}

static int restore(const struct wr_vm_spec *spec, int dfd, struct wr_vm **out, wr_err *err)
{
	struct wr_vm *vm = NULL;
	int r = wr_vm_alloc(spec->id, &vm, err);
	if (r < 0)
		return r;
	uint64_t start = now_ns();
	uint64_t deadline = start + spec->boot_timeout_ms * 1000000ull;
	char path[64];
	_cleanup_close_ int mfd = openat(dfd, "mem", O_RDONLY | O_CLOEXEC);
	_cleanup_close_ int sfd = openat(dfd, "state", O_RDONLY | O_CLOEXEC);
	if (mfd < 0 || sfd < 0) {
		r = wr_err_sys(err, "open template");
		goto fail;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d/rw.ext4", dfd);
	if ((r = wr_vm_disk_copy(path, vm->rw_path, spec->disk_bytes, err)) < 0)
		goto fail;
	struct vm_boot boot = {.hostname = TMPL_HOSTNAME, .mem = true, .incoming = true};
	if ((r = wr_vm_launch(vm, spec, &boot, mfd, err)) < 0 || (r = ignore_shared(vm, err)) < 0 ||
	    (r = getfd(vm, "state", sfd, err)) < 0 ||
	    (r = qmp_locked(vm, "migrate-incoming", json_pack("{s:s}", "uri", "fd:state"), NULL,
			    err)) < 0)
		goto fail;
	/* the device state loads (inmigrate), then the VM is paused as the
	 * template was when saved, and runs on cont */
	for (;;) {
		char st[64];
		pthread_mutex_lock(&vm->qmp_lock);
		r = wr_qmp_status(vm->qmp, st, sizeof(st), err);
		pthread_mutex_unlock(&vm->qmp_lock);
		if (r < 0)
			goto fail;
		if (strcmp(st, "running") == 0)
			break;
		if (strcmp(st, "paused") == 0) {
			/* loaded; the template was stopped when saved */
			if ((r = qmp_locked(vm, "cont", NULL, NULL, err)) < 0)
				goto fail;
			continue;
		}
		if (strcmp(st, "inmigrate") != 0 && strcmp(st, "prelaunch") != 0) {
			r = wr_err_set(err, EIO, "restore: the VM is %s", st);
			goto fail;
		}
		if (now_ns() > deadline) {
			r = wr_err_set(err, ETIMEDOUT, "restore: still %s", st);
			goto fail;
		}
		struct timespec ts = {0, 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	if ((r = wr_vm_send_identity(vm, vm->id, err)) < 0 ||
	    (r = wr_vm_wait_hello(vm, deadline, err)) < 0)
		goto fail;
	vm->restored = true;
	vm->ready_ns = now_ns() - start;
	*out = vm;
	return 0;
fail:
	wr_vm_fail(vm, err);
	return r;
}

int wr_vm_tmpl_restore(const struct wr_vm_spec *spec, struct wr_vm **out, wr_err *err)
{
	char hash[17];
	_cleanup_free_ char *key = template_key(spec, hash);
	if (key == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	int dfd = open_valid(hash, key);
	if (dfd < 0) {
		char lock[1024];
		snprintf(lock, sizeof(lock), "%s/%s.lock", wr_mvm.template_dir, hash);
		_cleanup_close_ int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (lfd < 0 || flock(lfd, LOCK_EX) < 0)
			return wr_err_sys(err, "template lock %s", lock);
		/* another create may have made it while this one waited */
		dfd = open_valid(hash, key);
		if (dfd < 0) {
			if (build(spec, key, hash, err) < 0)
				return -1;
			dfd = open_valid(hash, key);
		}
		if (dfd < 0)
			return wr_err_set(err, EIO, "template %s vanished", hash);
	}
	int r = restore(spec, dfd, out, err);
	close(dfd);
	return r < 0 ? wr_err_wrap(err, "restore from template") : 0;
}
