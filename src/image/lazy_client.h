/* Internals of the lazy client shared by lazy_client.c (starting and asking
 * warren-lazyfs) and lazy_keep.c (the mount keeper). Not installed. */
#ifndef WARREN_IMAGE_LAZY_CLIENT_H
#define WARREN_IMAGE_LAZY_CLIENT_H

#include <jansson.h>
#include <pthread.h>

#include "image/lazy.h"

struct wrl_keeper;

struct wr_lazy {
	struct wr_lazy_opts o;
	char *store_dir, *run_dir, *lazyfs_path, *auth_file, *ca_file, *log_path;
	char *dir, *sock, *pidfile;
	pthread_mutex_t lock;	   /* serialises starts */
	struct wrl_keeper *keeper; /* NULL unless wr_lazy_keep_start */
};

/* One request, one answer (*res owns it). A file descriptor passed with the
 * answer goes to *fd (O_CLOEXEC) when fd is not NULL, else it is closed. */
int wrl_request(struct wr_lazy *l, json_t *req, json_t **res, int *fd, wr_err *err);

/* lazy_keep.c, for wr_lazy_ensure: a dup of the connection the keeper holds
 * (-1 when none: start lazyfs with a fresh mount); drop it (the connection
 * ends if nothing else holds it); fetch it from the lazyfs that now runs. */
int wrl_keep_dup(struct wr_lazy *l);
void wrl_keep_drop(struct wr_lazy *l, const char *why);
void wrl_keep_attach(struct wr_lazy *l);
void wrl_keep_free(struct wr_lazy *l);

#endif
