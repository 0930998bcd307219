/* Scope-bound cleanup helpers (as crun's utils.h and bubblewrap do).
 *
 *   _cleanup_close_ int fd = open(...);   closed when fd leaves scope
 *   _cleanup_free_ char *s = strdup(...); freed when s leaves scope
 *   return steal_fd(&fd);                 hand ownership to the caller
 */
#ifndef WARREN_COMMON_CLEANUP_H
#define WARREN_COMMON_CLEANUP_H

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"

static inline void wr_freep(void *p)
{
	free(*(void **)p);
}
static inline void wr_closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
	*fd = -1;
}
static inline void wr_fclosep(FILE **f)
{
	if (*f)
		fclose(*f);
}
static inline void wr_closedirp(DIR **d)
{
	if (*d)
		closedir(*d);
}
static inline void wr_errp(wr_err *e)
{
	wr_err_free(e);
}
/* For a child pid we own: SIGKILL it and reap it unless ownership moved. */
static inline void wr_killreapp(pid_t *pid)
{
	if (*pid > 0) {
		int saved = errno;
		kill(*pid, SIGKILL);
		while (waitpid(*pid, NULL, __WALL) < 0 && errno == EINTR)
			;
		errno = saved;
	}
	*pid = -1;
}

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _cleanup_free_ _cleanup_(wr_freep)
#define _cleanup_close_ _cleanup_(wr_closep)
#define _cleanup_fclose_ _cleanup_(wr_fclosep)
#define _cleanup_closedir_ _cleanup_(wr_closedirp)
#define _cleanup_err_ _cleanup_(wr_errp)
#define _cleanup_killreap_ _cleanup_(wr_killreapp)

static inline int steal_fd(int *fd)
{
	int r = *fd;
	*fd = -1;
	return r;
}
static inline void *steal_ptr(void *pp)
{
	void **p = (void **)pp;
	void *r = *p;
	*p = NULL;
	return r;
}
static inline pid_t steal_pid(pid_t *pid)
{
	pid_t r = *pid;
	*pid = -1;
	return r;
}

#define WR_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
