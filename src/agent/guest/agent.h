/* warren-agent: PID 1 and command server inside microVM and VM guests.
 *
 * Not warren-init: the container tier's PID 1 is freestanding and never runs
 * anything for anyone, while a guest has no host kernel to enter it from, so
 * its agent must start commands, stream their output over the agent channel
 * (a virtio-serial port named "warren.agent", framed as in
 * src/common/frame.h) and kill their process trees. It is static (libc and
 * jansson), runs from the initramfs and keeps running after the switch to
 * the sandbox's root.
 *
 * Everything it says is guest-reported: the host treats exit codes and
 * output from here as claims of code inside the VM, and observes what it
 * can (QEMU's own exit, wall time, the VM's cgroup) itself. */
#ifndef WARREN_AGENT_GUEST_AGENT_H
#define WARREN_AGENT_GUEST_AGENT_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

/* boot.c: mounts, modules, root switch; message in err on failure. */
int ga_boot(char *err, size_t errlen);
/* net.c: loopback up; eth0 addressed when the command line says how
 * (warren.ip, warren.gw, warren.dns), /etc/resolv.conf and /etc/hosts. */
int ga_net_up(char *msg, size_t msglen);
/* The value of key=value on the kernel command line, or NULL. */
const char *ga_cmdline_get(const char *key, char *out, size_t len);

/* serve.c: the command server on the channel fd; returns when the channel
 * closes. */
void ga_serve(int chan);

/* serve.c: one whole frame to the host; any thread (serialised). */
int ga_send(uint8_t type, uint32_t id, const void *p, uint32_t len);

/* files.c: the files API (FS frames), each request on a thread of its own.
 * The main loop polls the fds ga_fs_poll_add appends (at most
 * ga_fs_max_fds), hands that same slice of results to ga_fs_poll_handle
 * before it reads new frames, and passes FS and FS_DATA frames on. */
void ga_fs_request(uint32_t id, const uint8_t *p, uint32_t len);
void ga_fs_data(uint32_t id, const uint8_t *p, uint32_t len);
/* KILL for a request id: a write's input is abandoned (nothing committed). */
void ga_fs_abort(uint32_t id);
int ga_fs_poll_add(struct pollfd *pf, int n);
void ga_fs_poll_handle(const struct pollfd *pf, int n);
int ga_fs_max_fds(void);

#endif
