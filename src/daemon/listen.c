#include "daemon/listen.h"

#include <errno.h>
#include <grp.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"

int wrd_unix_listener(const struct wrd_config *cfg, wr_err *err)
{
	const char *path = cfg->socket_path;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path))
		return wr_err_field(err, "socket", "socket path too long: %s", path);
	strcpy(sa.sun_path, path);
	char dir[sizeof(sa.sun_path)];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = 0;
		if (wr_mkdir_p(dir, 0755, err) < 0)
			return wr_err_wrap(err, "socket directory");
	}
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return wr_err_sys(err, "socket");
	struct stat st;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return wr_err_set(err, EEXIST, "%s exists and is not a socket", path);
		/* a live daemon answers on it: refuse to steal its socket */
		_cleanup_close_ int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return wr_err_set(err, EADDRINUSE, "another warrend listens on %s", path);
		unlink(path);
	}
	mode_t old = umask(0117);
	int r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0)
		return wr_err_sys(err, "bind %s", path);
	if (chmod(path, 0660) < 0)
		return wr_err_sys(err, "chmod %s", path);
	struct group gr, *res = NULL;
	char buf[4096];
	if (cfg->socket_group && getgrnam_r(cfg->socket_group, &gr, buf, sizeof(buf), &res) == 0 &&
	    res && chown(path, (uid_t)-1, gr.gr_gid) < 0)
		return wr_err_sys(err, "chown %s to group %s", path, cfg->socket_group);
	if (listen(fd, 1024) < 0)
		return wr_err_sys(err, "listen %s", path);
	return steal_fd(&fd);
}

int wrd_tcp_listener(const char *addr, wr_err *err)
{
	char host[256];
	const char *port;
	if (addr[0] == '[') {
		const char *e = strchr(addr, ']');
		if (e == NULL || e[1] != ':' || (size_t)(e - addr - 1) >= sizeof(host))
			return wr_err_field(err, "listen", "listen: '%s' is not [host]:port", addr);
		memcpy(host, addr + 1, (size_t)(e - addr - 1));
		host[e - addr - 1] = 0;
		port = e + 2;
	} else {
		const char *c = strrchr(addr, ':');
		if (c == NULL || (size_t)(c - addr) >= sizeof(host))
			return wr_err_field(err, "listen", "listen: '%s' is not host:port", addr);
		memcpy(host, addr, (size_t)(c - addr));
		host[c - addr] = 0;
		port = c + 1;
	}
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	int gr = getaddrinfo(*host ? host : NULL, port, &hints, &ai);
	if (gr != 0)
		return wr_err_field(err, "listen", "listen %s: %s", addr, gai_strerror(gr));
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 1024) < 0) {
		int r = wr_err_sys(err, "listen %s", addr);
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return r;
	}
	freeaddrinfo(ai);
	return fd;
}
