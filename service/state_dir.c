/* service/state_dir.c - see state_dir.h. */
#include "state_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

#define LOCK_FILE "larchd.lock"

int svc_state_dir_make(const char *dir, char *err, size_t errlen)
{
	char path[4096];
	if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
		snprintf(err, errlen, "state dir %s: path too long", dir);
		return -1;
	}
	for (char *p = path + 1; ; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;
		*p = '\0';
		if (mkdir(path, 0700) != 0 && errno != EEXIST) {
			snprintf(err, errlen, "state dir %s: %s", path, strerror(errno));
			return -1;
		}
		*p = c;
		if (c == '\0')
			break;
	}
	struct stat st;
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "state dir %s: not a directory", dir);
		return -1;
	}
	return 0;
}

/* svc_state_dir_check, and the bits dir has */
static int check(const char *dir, mode_t mode_wanted, mode_t *bits, char *err, size_t errlen)
{
	struct stat st;
	if (stat(dir, &st) != 0) {
		snprintf(err, errlen, "state dir %s: %s", dir, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "state dir %s: not a directory", dir);
		return -1;
	}
	*bits = st.st_mode & 07777;
	if (*bits != mode_wanted && st.st_uid != geteuid()) {
		snprintf(err, errlen, "state dir %s: mode %04o where larchd wants %04o, and it belongs "
		         "to uid %u, not to larchd's uid %u: chmod %04o it as its owner, or pick a "
		         "state_dir of larchd's own", dir, (unsigned)*bits, (unsigned)mode_wanted,
		         (unsigned)st.st_uid, (unsigned)geteuid(), (unsigned)mode_wanted);
		return -1;
	}
	return 0;
}

int svc_state_dir_check(const char *dir, mode_t mode_wanted, char *err, size_t errlen)
{
	mode_t bits;
	return check(dir, mode_wanted, &bits, err, errlen);
}

int svc_state_dir_secure(const char *dir, mode_t mode_wanted, mode_t *was, char *err,
                         size_t errlen)
{
	mode_t bits;
	if (check(dir, mode_wanted, &bits, err, errlen) != 0)
		return -1;
	if (bits == mode_wanted)
		return 0;
	if (chmod(dir, mode_wanted) != 0) {
		snprintf(err, errlen, "state dir %s: chmod %04o: %s", dir, (unsigned)mode_wanted,
		         strerror(errno));
		return -1;
	}
	*was = bits;
	return 1;
}

/* The holder's pid and URL, as its lock file has them (empty if not yet). */
static void read_holder(int fd, char *pid, size_t pidlen, char *url, size_t urllen)
{
	char buf[512];
	ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
	buf[n > 0 ? n : 0] = '\0';
	*pid = *url = '\0';
	size_t len = strspn(buf, "0123456789");
	if (len == 0 || len >= pidlen || buf[len] != '\n')
		return;
	snprintf(pid, pidlen, "%.*s", (int)len, buf);
	char *line = buf + len + 1, *end = strchr(line, '\n');
	if (end && strncmp(line, "http", 4) == 0 && (size_t)(end - line) < urllen)
		snprintf(url, urllen, "%.*s", (int)(end - line), line);
}

int svc_state_dir_lock(const char *dir, char *err, size_t errlen)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/" LOCK_FILE, dir);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		snprintf(err, errlen, "state dir %s: %s: %s", dir, LOCK_FILE, strerror(errno));
		return -1;
	}
	struct flock whole = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	if (fcntl(fd, F_SETLK, &whole) != 0) {
		int e = errno;
		if (e == EAGAIN || e == EACCES) {
			char pid[32], url[256];
			read_holder(fd, pid, sizeof pid, url, sizeof url);
			if (*pid)
				snprintf(err, errlen, "state dir %s is in use by larchd pid %s%s%s%s: stop "
				         "it, or give this larchd a state dir of its own (--state-dir DIR)",
				         dir, pid, *url ? " (listening on " : "", url, *url ? ")" : "");
			else
				snprintf(err, errlen, "state dir %s is in use by another larchd (starting: "
				         "no pid in %s yet): stop it, or give this larchd a state dir of its "
				         "own (--state-dir DIR)", dir, path);
		} else {
			snprintf(err, errlen, "state dir %s: locking %s: %s", dir, LOCK_FILE, strerror(e));
		}
		close(fd);
		return -1;
	}
	char line[32];
	int n = snprintf(line, sizeof line, "%ld\n", (long)getpid());
	if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n) {
		snprintf(err, errlen, "state dir %s: writing %s: %s", dir, LOCK_FILE, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

int svc_state_dir_lock_note(int fd, const char *url, char *err, size_t errlen)
{
	char text[320];
	int n = snprintf(text, sizeof text, "%ld\n%s\n", (long)getpid(), url);
	if (n >= (int)sizeof text || pwrite(fd, text, (size_t)n, 0) != n) {
		snprintf(err, errlen, "writing the lock file " LOCK_FILE ": %s",
		         n >= (int)sizeof text ? "URL too long" : strerror(errno));
		return -1;
	}
	return 0;
}

void svc_state_dir_unlock(int fd)
{
	if (fd < 0)
		return;
	/* no stale pid for a reader to chase; the lock goes with the close */
	if (ftruncate(fd, 0) != 0)
		svc_log(SVC_LOG_WARN, "emptying the lock file " LOCK_FILE ": %s", strerror(errno));
	close(fd);
}
