/* A client of the QEMU guest agent (qemu-ga) protocol: JSON commands over
 * the guest's virtio-serial port "org.qemu.guest_agent.0", which QEMU
 * connects to a socket warrend made (-chardev socket,fd=N). Any stock
 * cloud image with qemu-guest-agent installed speaks it: the vm tier needs
 * no agent of its own.
 *
 * qemu-ga answers one command at a time and keeps no ids, so the stream is
 * resynchronised with guest-sync-delimited (the answer follows a 0xFF byte)
 * before the first command and after any timeout. One caller at a time. */
#ifndef WARREN_TIERS_QGA_H
#define WARREN_TIERS_QGA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct wr_qga;

/* Takes ownership of fd. No I/O yet: the guest may still be booting. */
int wr_qga_new(int fd, struct wr_qga **out, wr_err *err);
void wr_qga_free(struct wr_qga **q);
/* guest-sync-delimited until answered or timeout: readiness. */
int wr_qga_sync(struct wr_qga *q, int timeout_ms, wr_err *err);
/* One command (args borrowed); *ret (if asked) gets "return" (new ref). A guest error is
 * -EIO with its class and desc; no answer in time is -ETIMEDOUT (the next
 * call resyncs first). */
int wr_qga_cmd(struct wr_qga *q, const char *cmd, json_t *args, int timeout_ms, json_t **ret,
	       wr_err *err);

/* A command through guest-exec + guest-exec-status, polled until it exits
 * or timeout_ms (0: none) passes, then killed by a guest-exec of kill -KILL
 * (the guest-agent protocol has no kill). qemu-ga returns output only at
 * the end, at most 16 MiB per stream (out_truncated then). */
struct wr_qga_exec {
	const char *const *argv;
	const char *const *env; /* "K=V", NULL-terminated, or NULL */
	const char *input;	/* stdin bytes, or NULL */
	size_t input_len;
	uint64_t timeout_ms;
	uint64_t output_cap; /* per stream, 0 = 16 MiB */
};
struct wr_qga_result {
	bool exited, timed_out;
	int exit_code, signal;
	char *out, *err; /* NUL-terminated */
	size_t out_len, err_len;
	bool out_truncated, err_truncated;
};
int wr_qga_run(struct wr_qga *q, const struct wr_qga_exec *x, struct wr_qga_result *res,
	       wr_err *err);
void wr_qga_result_free(struct wr_qga_result *r);

/* Whole-file helpers over guest-file-open/read/write/close, bounded. */
int wr_qga_read_file(struct wr_qga *q, const char *path, size_t max, char **data, size_t *len,
		     wr_err *err);
int wr_qga_write_file(struct wr_qga *q, const char *path, const char *data, size_t len,
		      wr_err *err);

/* base64 as guest-file-* and guest-exec-status speak it: encode (malloc'd,
 * NUL-terminated), and decode appending at most cap bytes in all to b
 * (*trunc set when more came); -EBADMSG for text that is not base64. */
struct wr_buf;
char *wr_qga_b64(const void *data, size_t len);
int wr_qga_unb64(const char *s, struct wr_buf *b, size_t cap, bool *trunc);

#endif
