/* trainer/spec/input.c - see input.h. */
#include "input.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#define HAVE_OPENAT2_H 1
#endif
#endif

#define READ_FLAGS (O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)

void trn_input_policy_init(struct trn_input_policy *p)
{
	p->confine = 0;
	p->roots = NULL;
	p->n_roots = 0;
}

int trn_input_policy_add_root(struct trn_input_policy *p, const char *root, struct trn_err *err)
{
	char *canon = realpath(root, NULL);
	if (!canon)
		return trn_err_set(err, "--data-root: %s: %s", root, strerror(errno));
	struct stat st;
	if (stat(canon, &st) != 0 || !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode))) {
		free(canon);
		return trn_err_set(err, "--data-root: %s: not a directory or a regular file", root);
	}
	char **grown = realloc(p->roots, sizeof *grown * (size_t)(p->n_roots + 1));
	if (!grown) {
		free(canon);
		return trn_err_set(err, "--data-root: out of memory");
	}
	p->roots = grown;
	p->roots[p->n_roots++] = canon;
	p->confine = 1;
	return 0;
}

void trn_input_policy_release(struct trn_input_policy *p)
{
	for (int i = 0; i < p->n_roots; i++)
		free(p->roots[i]);
	free(p->roots);
	trn_input_policy_init(p);
}

int trn_input_confines(const struct trn_input_policy *policy)
{
	return policy && (policy->confine || policy->n_roots > 0);
}

/* resolved (canonical) is a root or lies under one */
static int under_a_root(const struct trn_input_policy *p, const char *resolved)
{
	for (int i = 0; i < p->n_roots; i++) {
		const char *r = p->roots[i];
		size_t n = strlen(r);
		if (strcmp(r, "/") == 0 || strcmp(r, resolved) == 0 ||
		    (strncmp(r, resolved, n) == 0 && resolved[n] == '/'))
			return 1;
	}
	return 0;
}

/* ---- how a path is named in messages ------------------------------------------ */

/* base + "/" + rel with "." and ".." taken lexically, as a reader would (the
 * name shown for a relative path; nothing is opened or resolved). */
static void lexical_join(const char *base, const char *rel, char *out, size_t size)
{
	size_t n = (size_t)snprintf(out, size, "%s", base);
	if (n >= size)
		n = size - 1;
	while (n > 1 && out[n - 1] == '/')
		out[--n] = '\0';
	for (const char *p = rel; *p;) {
		size_t len = strcspn(p, "/");
		if (len == 2 && p[0] == '.' && p[1] == '.') {
			char *slash = strrchr(out, '/');
			n = slash && slash != out ? (size_t)(slash - out) : 1;
			out[n] = '\0';
		} else if (len > 0 && !(len == 1 && p[0] == '.')) {
			int k = snprintf(out + n, size - n, "%s%.*s", n > 1 ? "/" : "", (int)len, p);
			n = k < 0 || (size_t)k >= size - n ? size - 1 : n + (size_t)k;
		}
		p += len;
		while (*p == '/')
			p++;
	}
}

/* The name messages give path: itself when absolute; a relative one with
 * the absolute path it names from the working directory, "data.bin
 * (resolved: /srv/job/data.bin)"; given (the spec's own relative path, when
 * path is a rebased copy of it) with path. */
static void name_path(const char *path, const char *given, char *out, size_t size)
{
	char cwd[PATH_MAX], abs[PATH_MAX];
	if (given && strcmp(given, path) != 0) {
		snprintf(out, size, "%s (resolved: %s)", given, path);
	} else if (path[0] != '/' && getcwd(cwd, sizeof cwd)) {
		lexical_join(cwd, path, abs, sizeof abs);
		snprintf(out, size, "%s (resolved: %s)", path, abs);
	} else {
		snprintf(out, size, "%s", path);
	}
}

/* For a path realpath could not resolve: whether it would lie under a root,
 * judged from its longest leading part that resolves, with the rest as it
 * is. A path that leads outside the roots is answered "outside" whether or
 * not it names anything, so that an error never tells whether a file
 * outside them exists. */
static int unresolved_under_a_root(const struct trn_input_policy *p, const char *path)
{
	char abs[PATH_MAX], cwd[PATH_MAX], candidate[PATH_MAX];
	int k;
	if (path[0] == '/')
		k = snprintf(abs, sizeof abs, "%s", path);
	else if (getcwd(cwd, sizeof cwd))
		k = snprintf(abs, sizeof abs, "%s/%s", cwd, path);
	else
		return 0;
	if (k < 0 || (size_t)k >= sizeof abs)
		return 0;
	size_t n = strlen(abs);
	while (n > 1) {
		while (n > 1 && abs[n - 1] != '/')
			n--;                   /* drop the last component */
		size_t cut = n > 1 ? n - 1 : 1;
		char keep = abs[cut];
		abs[cut] = '\0';
		char *head = realpath(abs, NULL);
		abs[cut] = keep;
		if (head) {
			k = snprintf(candidate, sizeof candidate, "%s%s%s", head,
			                 strcmp(head, "/") == 0 ? "" : "/", abs + n);
			free(head);
			return k > 0 && (size_t)k < sizeof candidate && under_a_root(p, candidate);
		}
		n = cut;
	}
	return 0;
}

int trn_input_open_walk(const char *resolved, int flags)
{
	if (resolved[0] != '/') {
		errno = EINVAL;
		return -1;
	}
	int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	const char *p = resolved;
	char name[NAME_MAX + 1];
	while (dir >= 0) {
		while (*p == '/')
			p++;
		size_t len = strcspn(p, "/");
		if (len == 0) {                /* resolved is "/" */
			int fd = openat(dir, ".", flags);
			int saved = errno;
			close(dir);
			errno = saved;
			return fd;
		}
		if (len > NAME_MAX) {
			close(dir);
			errno = ENAMETOOLONG;
			return -1;
		}
		memcpy(name, p, len);
		name[len] = '\0';
		p += len;
		while (*p == '/')
			p++;
		int last = *p == '\0';
		int next = openat(dir, name, last ? flags | O_NOFOLLOW
		                                  : O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int saved = errno;
		close(dir);
		errno = saved;
		if (last || next < 0)
			return next;
		dir = next;
	}
	return -1;
}

/* resolved opened with flags, no symbolic link followed anywhere in it */
static int open_no_symlinks(const char *resolved, int flags)
{
#if defined(HAVE_OPENAT2_H) && defined(SYS_openat2)
	struct open_how how;
	memset(&how, 0, sizeof how);
	how.flags = (unsigned long long)flags;
	how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
	long fd = syscall(SYS_openat2, AT_FDCWD, resolved, &how, sizeof how);
	if (fd >= 0 || errno != ENOSYS)
		return (int)fd;
#endif
	return trn_input_open_walk(resolved, flags);
}

static int changed(const char *path, const char *field, struct trn_err *err)
{
	return trn_err_set(err, "%s: %s: changed while it was being opened (a symbolic link "
	                   "appeared in its path)", field, path);
}

/* From the O_PATH descriptor pfd (which this closes) to a read descriptor
 * of the same regular file, or -1 with err. Where /proc/self/fd is missing
 * resolved is opened again (confined: with no link followed) and must be
 * the same file. */
static int from_path_fd(int pfd, const char *resolved, int confined, const char *path,
                        const char *field, struct trn_err *err)
{
	struct stat st, again;
	int fd = -1;
	if (fstat(pfd, &st) != 0) {
		trn_err_set(err, "%s: %s: %s", field, path, strerror(errno));
		goto fail;
	}
	if (S_ISLNK(st.st_mode)) {     /* the last component, under O_NOFOLLOW */
		changed(path, field, err);
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		trn_err_set(err, "%s: %s: not a regular file", field, path);
		goto fail;
	}
	if (st.st_size <= 0) {
		trn_err_set(err, "%s: %s: is empty", field, path);
		goto fail;
	}
	char proc[64];
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", pfd);
	fd = open(proc, READ_FLAGS);
	if (fd < 0 && errno == ENOENT)          /* no /proc: the path again, checked below */
		fd = confined ? open_no_symlinks(resolved, READ_FLAGS) : open(resolved, READ_FLAGS);
	if (fd < 0) {
		if (errno == ELOOP && confined)
			changed(path, field, err);
		else
			trn_err_set(err, "%s: %s: %s", field, path, strerror(errno));
		goto fail;
	}
	if (fstat(fd, &again) != 0 || again.st_dev != st.st_dev || again.st_ino != st.st_ino ||
	    !S_ISREG(again.st_mode)) {
		changed(path, field, err);
		goto fail;
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
		trn_err_set(err, "%s: %s: %s", field, path, strerror(errno));
		goto fail;
	}
	close(pfd);
	return fd;
fail:
	if (fd >= 0)
		close(fd);
	close(pfd);
	return -1;
}

int trn_input_open_resolved(const char *resolved, const char *path, const char *field,
                            struct trn_err *err)
{
	int pfd = open_no_symlinks(resolved, O_PATH | O_CLOEXEC);
	if (pfd < 0) {
		if (errno == ELOOP)
			return changed(path, field, err);
		return trn_err_set(err, "%s: %s: %s", field, path, strerror(errno));
	}
	return from_path_fd(pfd, resolved, 1, path, field, err);
}

int trn_input_open(const char *path, const struct trn_input_policy *policy, const char *field,
                   struct trn_err *err)
{
	return trn_input_open_as(path, NULL, policy, field, err);
}

int trn_input_open_as(const char *path, const char *given, const struct trn_input_policy *policy,
                      const char *field, struct trn_err *err)
{
	if (!path || !path[0])
		return trn_err_set(err, "%s: no path", field);
	char name[2 * PATH_MAX + 16];
	name_path(path, given, name, sizeof name);
	if (!trn_input_confines(policy)) {
		int pfd = open(path, O_PATH | O_CLOEXEC);
		if (pfd < 0)
			return trn_err_set(err, "%s: %s: %s", field, name, strerror(errno));
		return from_path_fd(pfd, path, 0, name, field, err);
	}
	char *resolved = realpath(path, NULL);
	if (!resolved) {
		int saved = errno;
		if (!unresolved_under_a_root(policy, path))
			return trn_err_set(err, "%s: %s is outside the directories this job may read",
			                   field, name);
		return trn_err_set(err, "%s: %s: %s", field, name, strerror(saved));
	}
	int fd;
	if (!under_a_root(policy, resolved))
		fd = trn_err_set(err, "%s: %s is outside the directories this job may read", field,
		                 name);
	else
		fd = trn_input_open_resolved(resolved, name, field, err);
	free(resolved);
	return fd;
}

/* ---- the probe's relative paths ----------------------------------------------------- */

int trn_input_rebase(const char *path, const char *base_dir, char *out, size_t size,
                     const char *field, struct trn_err *err)
{
	if (path[0] == '/' || !base_dir) {
		if ((size_t)snprintf(out, size, "%s", path) >= size)
			return trn_err_set(err, "%s: the path is too long", field);
		return 0;
	}
	char base[PATH_MAX];
	if ((size_t)snprintf(base, sizeof base, "%s", base_dir) >= sizeof base)
		return trn_err_set(err, "%s: the job directory's path is too long", field);
	size_t n = strlen(base);
	while (n > 1 && base[n - 1] == '/')
		base[--n] = '\0';
	int ups = 0;
	const char *p = path;
	for (;;) {
		size_t len = strcspn(p, "/");
		if (len == 1 && p[0] == '.') {
		} else if (len == 2 && p[0] == '.' && p[1] == '.') {
			char *slash = strrchr(base, '/');
			if (slash && slash != base)
				*slash = '\0';
			else if (slash)
				base[1] = '\0';        /* "/" stays "/" */
			ups++;
		} else {
			break;
		}
		p += len;
		while (*p == '/')
			p++;
	}
	if (ups == 0)
		return trn_err_set(err, "%s: a relative path names a file in the job's own directory, "
		                   "which is empty when the job starts", field);
	int k = snprintf(out, size, "%s%s%s", base, strcmp(base, "/") == 0 || !*p ? "" : "/", p);
	if (k < 0 || (size_t)k >= size)
		return trn_err_set(err, "%s: the path is too long", field);
	return 0;
}
