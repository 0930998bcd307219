/* VNC on request for the vm tier (see vm_vnc.h). */
#include "tiers/vm_vnc.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "tiers/qemu_proc.h"
#include "tiers/qmp.h"

#define PASS_LEN 8 /* VNC authentication uses at most 8 characters */
#define QMP_MS 10000

struct wr_vm_vnc {
	int lfd; /* the listening socket, warrend's */
	struct wr_qmp *qmp;
	pthread_mutex_t *qmp_lock;
	pthread_t thread;
	bool started;
	char *socket;
	char pass[PASS_LEN + 1];
};

/* Each client: handed to QEMU (getfd + add_client), which then speaks RFB
 * to it and asks for the password; our copy of the fd is closed. */
static void *accept_main(void *arg)
{
	struct wr_vm_vnc *v = arg;
	for (;;) {
		int c = accept4(v->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0 && (errno == EINTR || errno == ECONNABORTED))
			continue;
		if (c < 0)
			return NULL; /* shut down by wr_vm_vnc_stop */
		wr_err e = NULL;
		json_t *a = json_pack("{s:s, s:s, s:b}", "protocol", "vnc", "fdname", "warren-vnc",
				      "skipauth", 0);
		pthread_mutex_lock(v->qmp_lock);
		if (wr_qmp_getfd(v->qmp, "warren-vnc", c, &e) == 0)
			wr_qmp_cmd(v->qmp, "add_client", a, QMP_MS, NULL, &e);
		pthread_mutex_unlock(v->qmp_lock);
		json_decref(a);
		wr_err_free(&e); /* a client QEMU did not take sees its socket close */
		close(c);
	}
}

static int new_password(char out[PASS_LEN + 1], wr_err *err)
{
	static const char set[] = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
	unsigned char r[PASS_LEN];
	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		return wr_err_sys(err, "getrandom");
	for (int i = 0; i < PASS_LEN; i++)
		out[i] = set[r[i] % (sizeof(set) - 1)];
	out[PASS_LEN] = 0;
	return 0;
}

static int load_password(int dfd, char out[PASS_LEN + 1], wr_err *err)
{
	_cleanup_close_ int fd = openat(dfd, "vnc.pass", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return errno == ENOENT ? -ENOENT : wr_err_sys(err, "vnc.pass");
	ssize_t n = read(fd, out, PASS_LEN + 1);
	if (n != PASS_LEN)
		return wr_err_set(err, EIO, "vnc.pass: not a password");
	out[PASS_LEN] = 0;
	return 0;
}

static int save_password(int dfd, const char *pass, wr_err *err)
{
	unlinkat(dfd, "vnc.pass", 0);
	_cleanup_close_ int fd =
	    openat(dfd, "vnc.pass", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0 || write(fd, pass, PASS_LEN) != PASS_LEN)
		return wr_err_sys(err, "vnc.pass");
	return 0;
}

int wr_vm_vnc_start(const char *dir, struct wr_qmp *qmp, pthread_mutex_t *qmp_lock, bool fresh,
		    const char *pass, struct wr_vm_vnc **out, wr_err *err)
{
	_cleanup_close_ int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return wr_err_sys(err, "vnc: %s", dir);
	struct wr_vm_vnc *v = calloc(1, sizeof(*v));
	if (v == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	v->lfd = -1;
	v->qmp = qmp;
	v->qmp_lock = qmp_lock;
	int r;
	if (fresh) {
		/* the password is set before anyone can connect */
		json_t *a = NULL;
		if (pass && strlen(pass) != PASS_LEN) {
			r = wr_err_set(err, EINVAL, "vnc: a password has %d characters", PASS_LEN);
			goto fail;
		}
		if (pass)
			memcpy(v->pass, pass, PASS_LEN + 1);
		else if ((r = new_password(v->pass, err)) < 0)
			goto fail;
		if ((r = save_password(dfd, v->pass, err)) < 0)
			goto fail;
		a = json_pack("{s:s, s:s}", "protocol", "vnc", "password", v->pass);
		pthread_mutex_lock(qmp_lock);
		r = wr_qmp_cmd(qmp, "set_password", a, QMP_MS, NULL, err);
		pthread_mutex_unlock(qmp_lock);
		json_decref(a);
		if (r < 0) {
			wr_err_wrap(err, "vnc: set_password");
			goto fail;
		}
	} else if ((r = load_password(dfd, v->pass, err)) < 0) {
		goto fail;
	}
	if (asprintf(&v->socket, "%s/vnc.sock", dir) < 0) {
		r = wr_err_set(err, ENOMEM, "out of memory");
		goto fail;
	}
	if ((v->lfd = r = wr_qemu_listen(dfd, "vnc.sock", err)) < 0)
		goto fail;
	if ((r = -pthread_create(&v->thread, NULL, accept_main, v)) < 0) {
		errno = -r;
		r = wr_err_sys(err, "vnc: thread");
		goto fail;
	}
	v->started = true;
	*out = v;
	return 0;
fail:
	wr_vm_vnc_stop(&v);
	return r;
}

void wr_vm_vnc_stop(struct wr_vm_vnc **pv)
{
	struct wr_vm_vnc *v = *pv;
	if (v == NULL)
		return;
	*pv = NULL;
	if (v->lfd >= 0)
		shutdown(v->lfd, SHUT_RDWR); /* accept() returns EINVAL */
	if (v->started)
		pthread_join(v->thread, NULL);
	if (v->lfd >= 0) {
		close(v->lfd);
		unlink(v->socket);
	}
	free(v->socket);
	explicit_bzero(v->pass, sizeof(v->pass));
	free(v);
}

const char *wr_vm_vnc_socket(const struct wr_vm_vnc *v)
{
	return v ? v->socket : NULL;
}

const char *wr_vm_vnc_password(const struct wr_vm_vnc *v)
{
	return v ? v->pass : NULL;
}
