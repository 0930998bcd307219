/* warren-agent: PID 1 of a microVM or VM guest (see agent.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/reboot.h>
#include <time.h>
#include <unistd.h>

#include "agent/guest/agent.h"
#include "common/frame.h"

#define PORT_NAME "warren.agent"

/* The virtio-serial port the host named PORT_NAME: /dev/vportNpM. */
static int open_port(void)
{
	for (int tries = 0; tries < 1000; tries++) {
		DIR *d = opendir("/sys/class/virtio-ports");
		struct dirent *de;
		while (d && (de = readdir(d)) != NULL) {
			char path[300], name[64] = "";
			snprintf(path, sizeof(path), "/sys/class/virtio-ports/%s/name", de->d_name);
			FILE *f = fopen(path, "re");
			if (f == NULL)
				continue;
			if (fgets(name, sizeof(name), f) == NULL)
				name[0] = '\0';
			fclose(f);
			name[strcspn(name, "\n")] = '\0';
			if (strcmp(name, PORT_NAME) == 0) {
				snprintf(path, sizeof(path), "/dev/%s", de->d_name);
				closedir(d);
				return open(path, O_RDWR | O_CLOEXEC);
			}
		}
		if (d)
			closedir(d);
		struct timespec ts = {0, 5 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	errno = ENOENT;
	return -1;
}

static void power_off(void)
{
	sync();
	reboot(RB_POWER_OFF);
	for (;;)
		pause();
}

int main(void)
{
	char err[512] = "";
	int r = ga_boot(err, sizeof(err));
	int chan = open_port();
	if (chan < 0) {
		fprintf(stderr, "warren-agent: no channel %s: %s%s%s\n", PORT_NAME, strerror(errno),
			err[0] ? "; boot: " : "", err);
		power_off();
	}
	struct timespec up;
	clock_gettime(CLOCK_BOOTTIME, &up);
	json_t *hello =
	    json_pack("{s:i, s:I, s:b}", "version", 1, "uptime_ms",
		      (json_int_t)(up.tv_sec * 1000 + up.tv_nsec / 1000000), "ok", r == 0);
	if (hello && r < 0)
		json_object_set_new(hello, "error", json_string(err));
	char *s = hello ? json_dumps(hello, JSON_COMPACT) : NULL;
	json_decref(hello);
	if (s == NULL || wr_frame_write(chan, WR_FRAME_HELLO, 0, s, (uint32_t)strlen(s)) < 0)
		power_off();
	if (r == 0)
		ga_serve(chan);
	/* a failed boot or a closed channel: nothing more this VM can do */
	power_off();
}
