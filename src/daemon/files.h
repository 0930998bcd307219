/* Helpers shared by the file routes (api_files.c) and tar (tar.c). */
#ifndef WARREN_DAEMON_FILES_H
#define WARREN_DAEMON_FILES_H

#include <jansson.h>

#include "daemon/http.h"
#include "tiers/fsops.h"

/* An fsops error: 400s name `field` when the library did not. */
void wrd_fs_reply_err(struct wrd_req *r, wr_err err, const char *field);
json_t *wrd_fs_entry(const char *path, const struct wr_fs_stat *st);
/* "0644", "644", "755" -> mode (<= 07777); -1 with a 400 naming key. */
int wrd_parse_mode(struct wrd_req *r, const char *text, const char *key, mode_t *out);

#endif
