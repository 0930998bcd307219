/* The container tier's image cache (see container.h,
 * wr_container_images_sweep): one detached EROFS base mount per image
 * path, counted, swept when the store reclaims the image. Split from
 * container.c, which creates from it. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "isolate/rootfs.h"
#include "tiers/container.h"
#include "tiers/container_internal.h"

/* A detached EROFS mount keeps its image file open, so an image the store
 * has reclaimed (unlinked) keeps its disk space for as long as we cache its
 * mount. Entries are therefore counted: a create holds its layers' entries
 * until it has made its own idmapped clones (which the overlay then holds
 * on its own), and an entry whose file is gone or replaced leaves the list
 * at once and is closed when its last user puts it. Sweeps run when asked
 * (wr_container_images_sweep, after a gc), at most once a second from
 * creates, and from idle spawners. */
static struct image_entry *g_images;
static pthread_mutex_t g_images_lock = PTHREAD_MUTEX_INITIALIZER;
static struct timespec g_images_swept;

static void image_entry_free(struct image_entry *e)
{
	close(e->fd);
	free(e->path);
	free(e);
}

static bool image_entry_current(const struct image_entry *e, const struct stat *st)
{
	return e->dev == st->st_dev && e->ino == st->st_ino &&
	       e->mtime.tv_sec == st->st_mtim.tv_sec && e->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* Unlinks *pp's entry from the list; frees it unless in use (the last put
 * frees it then). Called with g_images_lock held. */
static void image_entry_retire(struct image_entry **pp)
{
	struct image_entry *e = *pp;
	*pp = e->next;
	e->next = NULL;
	if (e->users == 0)
		image_entry_free(e);
}

/* Called with g_images_lock held. */
static size_t images_sweep_locked(void)
{
	size_t n = 0;
	struct image_entry **pp = &g_images;
	while (*pp) {
		struct stat st;
		if (stat((*pp)->path, &st) < 0 || !image_entry_current(*pp, &st)) {
			image_entry_retire(pp);
			n++;
		} else {
			pp = &(*pp)->next;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &g_images_swept);
	return n;
}

size_t wr_container_images_sweep(void)
{
	pthread_mutex_lock(&g_images_lock);
	size_t n = images_sweep_locked();
	pthread_mutex_unlock(&g_images_lock);
	return n;
}

size_t wr_container_images_cached(void)
{
	size_t n = 0;
	pthread_mutex_lock(&g_images_lock);
	for (struct image_entry *e = g_images; e; e = e->next)
		n++;
	pthread_mutex_unlock(&g_images_lock);
	return n;
}

/* The image's base mount, counted: give it back with image_put. An image
 * file replaced on disk (new inode or mtime) gets a new base mount and the
 * old one is retired. */
struct image_entry *wr_cimage_get(const char *image, wr_err *err)
{
	struct stat st;
	if (stat(image, &st) < 0) {
		wr_err_sys(err, "image %s", image);
		return NULL;
	}
	pthread_mutex_lock(&g_images_lock);
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (now.tv_sec > g_images_swept.tv_sec + 1)
		images_sweep_locked();
	for (struct image_entry **pp = &g_images; *pp;) {
		struct image_entry *e = *pp;
		if (strcmp(e->path, image) != 0) {
			pp = &e->next;
		} else if (image_entry_current(e, &st)) {
			e->users++;
			pthread_mutex_unlock(&g_images_lock);
			return e;
		} else {
			image_entry_retire(pp);
		}
	}
	int fd = wr_rootfs_lower_open(image, err);
	if (fd < 0) {
		pthread_mutex_unlock(&g_images_lock);
		return NULL;
	}
	struct image_entry *e = calloc(1, sizeof(*e));
	if (e == NULL || (e->path = strdup(image)) == NULL) {
		free(e);
		close(fd);
		pthread_mutex_unlock(&g_images_lock);
		wr_err_set(err, ENOMEM, "image %s: out of memory", image);
		return NULL;
	}
	e->dev = st.st_dev;
	e->ino = st.st_ino;
	e->mtime = st.st_mtim;
	e->fd = fd;
	e->users = 1;
	e->next = g_images;
	g_images = e;
	pthread_mutex_unlock(&g_images_lock);
	return e;
}

void wr_cimage_put(struct image_entry *e)
{
	if (e == NULL)
		return;
	pthread_mutex_lock(&g_images_lock);
	bool listed = false;
	for (struct image_entry *x = g_images; x && !listed; x = x->next)
		listed = x == e;
	if (--e->users == 0 && !listed)
		image_entry_free(e);
	pthread_mutex_unlock(&g_images_lock);
}
