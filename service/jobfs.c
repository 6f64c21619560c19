/* service/jobfs.c - no-follow access below a job directory; see jobfs.h. */
#include "jobfs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Opens the directory that holds rel's last component and points *last at
 * that component (in buf, a copy of rel). Returns its descriptor or -1. */
static int open_parent(const char *dir, const char *rel, char *buf, size_t size,
                       const char **last)
{
	if (!rel || rel[0] == '/' || strlen(rel) >= size) {
		errno = EINVAL;
		return -1;
	}
	memcpy(buf, rel, strlen(rel) + 1);
	/* every component plain: not empty, "." or ".." */
	for (const char *c = buf;;) {
		size_t n = strcspn(c, "/");
		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.')) {
			errno = EINVAL;
			return -1;
		}
		if (!c[n])
			break;
		c += n + 1;
	}
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	char *p = buf;
	for (;;) {
		char *slash = strchr(p, '/');
		if (!slash) {
			*last = p;
			return fd;
		}
		*slash = '\0';
		int next = openat(fd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int saved = errno;
		close(fd);
		if (next < 0) {
			errno = saved;
			return -1;
		}
		fd = next;
		p = slash + 1;
	}
}

/* A regular file of one link, else closes fd (EINVAL). */
static int regular_or_close(int fd)
{
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int saved = errno;
		close(fd);
		errno = saved;
		return -1;
	}
	if (!S_ISREG(st.st_mode) || st.st_nlink != 1) {
		close(fd);
		errno = EINVAL;
		return -1;
	}
	return fd;
}

int svc_jobfs_open(const char *dir, const char *rel, int flags, mode_t mode)
{
	if (flags & O_TRUNC) {           /* would cut a linked file before the check */
		errno = EINVAL;
		return -1;
	}
	char buf[PATH_MAX];
	const char *last;
	int dfd = open_parent(dir, rel, buf, sizeof buf, &last);
	if (dfd < 0)
		return -1;
	int fd = openat(dfd, last, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, mode);
	int saved = errno;
	close(dfd);
	if (fd < 0) {
		errno = saved;
		return -1;
	}
	if (regular_or_close(fd) < 0)
		return -1;
	if (!(flags & O_NONBLOCK))
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	return fd;
}

FILE *svc_jobfs_fopen(const char *dir, const char *rel)
{
	int fd = svc_jobfs_open(dir, rel, O_RDONLY, 0);
	if (fd < 0)
		return NULL;
	FILE *f = fdopen(fd, "r");
	if (!f) {
		int saved = errno;
		close(fd);
		errno = saved;
	}
	return f;
}

int svc_jobfs_opendir(const char *dir, const char *rel)
{
	if (!rel || !*rel || strcmp(rel, ".") == 0)
		return open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	char buf[PATH_MAX];
	const char *last;
	int dfd = open_parent(dir, rel, buf, sizeof buf, &last);
	if (dfd < 0)
		return -1;
	int fd = openat(dfd, last, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int saved = errno;
	close(dfd);
	errno = saved;
	return fd;
}

int svc_jobfs_write(const char *dir, const char *rel, const void *data, size_t len, mode_t mode,
                    uid_t uid, gid_t gid)
{
	char buf[PATH_MAX], tmp[NAME_MAX + 1];
	const char *last;
	int dfd = open_parent(dir, rel, buf, sizeof buf, &last);
	if (dfd < 0)
		return -1;
	if (snprintf(tmp, sizeof tmp, ".%s.larchd-tmp", last) >= (int)sizeof tmp) {
		close(dfd);
		errno = ENAMETOOLONG;
		return -1;
	}
	unlinkat(dfd, tmp, 0);                 /* left by a crash, or planted */
	int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	int rc = -1, saved;
	if (fd >= 0) {
		const char *p = data;
		size_t left = len;
		while (left > 0) {
			ssize_t k = write(fd, p, left);
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0)
				break;
			p += k;
			left -= (size_t)k;
		}
		if (left == 0 && fchmod(fd, mode) == 0 &&
		    (uid == (uid_t)-1 || fchown(fd, uid, gid) == 0) && fsync(fd) == 0 &&
		    close(fd) == 0) {
			fd = -1;
			rc = renameat(dfd, tmp, dfd, last);
		}
	}
	saved = errno;
	if (fd >= 0)
		close(fd);
	if (rc != 0)
		unlinkat(dfd, tmp, 0);
	else
		fsync(dfd);
	close(dfd);
	errno = saved;
	return rc;
}

int svc_jobfs_exists(const char *dir, const char *rel)
{
	char buf[PATH_MAX];
	const char *last;
	int dfd = open_parent(dir, rel, buf, sizeof buf, &last);
	if (dfd < 0)
		return errno == ENOENT ? 0 : -1;
	struct stat st;
	int rc = fstatat(dfd, last, &st, AT_SYMLINK_NOFOLLOW);
	int saved = errno;
	close(dfd);
	if (rc == 0)
		return 1;
	errno = saved;
	return saved == ENOENT ? 0 : -1;
}

int svc_jobfs_unlink(const char *dir, const char *rel)
{
	char buf[PATH_MAX];
	const char *last;
	int dfd = open_parent(dir, rel, buf, sizeof buf, &last);
	if (dfd < 0)
		return -1;
	int rc = unlinkat(dfd, last, 0);
	int saved = errno;
	close(dfd);
	errno = saved;
	return rc;
}
