/* VNC for the vm tier, on request only (vm_vnc.c).
 *
 * QEMU runs `-vnc none,password=on`: a VNC server with no socket of its own
 * (QEMU stays jailed: nothing to bind, nothing to listen on) that refuses
 * every client until a password is set. warrend owns the endpoint, a
 * listening Unix socket <dir>/vnc.sock in the VM's directory (0700,
 * root's); each client it accepts is handed to QEMU over QMP (getfd, then
 * add_client with skipauth false), so a client still has to pass VNC
 * authentication with the VM's password (8 random characters set through
 * QMP set_password, kept in <dir>/vnc.pass 0600 for a restarted daemon).
 * Off unless the sandbox asked for it: no -vnc argument, no socket. */
#ifndef WARREN_TIERS_VM_VNC_H
#define WARREN_TIERS_VM_VNC_H

#include <pthread.h>
#include <stdbool.h>

#include "common/error.h"

struct wr_qmp;
struct wr_vm_vnc;

/* QEMU's argument for a VM with VNC. */
#define WR_VM_VNC_ARG "none,password=on"

/* Starts the endpoint of a VM whose QEMU runs with WR_VM_VNC_ARG: fresh, a
 * password set through qmp (under qmp_lock, which the accept thread takes
 * too) and saved in dir: pass (8 characters, a restored VM's, which its
 * user already has) or a new random one when NULL; else (adoption) the
 * saved one, -ENOENT when the VM has none (it was made without VNC). A
 * restore's QEMU (-incoming) takes the password before its state loads. */
int wr_vm_vnc_start(const char *dir, struct wr_qmp *qmp, pthread_mutex_t *qmp_lock, bool fresh,
		    const char *pass, struct wr_vm_vnc **out, wr_err *err);
/* Stops accepting, removes the socket; before the QMP connection closes. */
void wr_vm_vnc_stop(struct wr_vm_vnc **v);
const char *wr_vm_vnc_socket(const struct wr_vm_vnc *v);
const char *wr_vm_vnc_password(const struct wr_vm_vnc *v);

#endif
