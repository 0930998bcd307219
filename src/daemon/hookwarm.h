#ifndef WARREN_DAEMON_HOOKWARM_H
#define WARREN_DAEMON_HOOKWARM_H

/* hookwarm.c: hold the network filter on an empty cgroup <base>/bpf-anchor
 * so the kernel's cgroup-BPF hooks are not switched on and off with every
 * sandbox. Start after recovery's sweep (which removes a crashed run's
 * anchor) and before serving; a failure is logged, never fatal. */
void wrd_hookwarm_start(const char *cgroup_base);
/* At shutdown: detach and remove the cgroup. */
void wrd_hookwarm_stop(void);

#endif
