/* service/jobfs.h - larchd's reads and writes in a job's directory.
 *
 * Where jobs run as their owner (run_as owner), a job directory
 * <state>/jobs/j-000123 belongs to the job's Unix user, who may put anything
 * in it: a symbolic link named stderr.log pointing at /etc/shadow, a FIFO
 * named result.json, a hard link to another user's file. larchd runs as
 * root there, so it touches the files below a job directory only through
 * these calls, which
 *   - follow no symbolic link below the directory (every component is
 *     opened with O_NOFOLLOW, relative to the one before);
 *   - open only regular files with a single link: a FIFO or device is
 *     refused without blocking (opened O_NONBLOCK, then checked), and so is
 *     a hard link to a file elsewhere;
 *   - replace a file by writing a new one (O_EXCL) and renaming it over the
 *     old name, so a link planted under the name is replaced, never written
 *     through.
 * The directory itself is larchd's path (its parent, <state>/jobs, is
 * larchd's and not writable by users), so it is opened as given.
 *
 * rel is a relative path of plain components ("result.json",
 * "checkpoints/ckpt-000100.safetensors"); "." and ".." components, empty
 * ones and a leading '/' are refused (EINVAL). Every call sets errno on
 * failure: ELOOP for a symbolic link, EINVAL for something that is not a
 * regular file with one link.
 */
#ifndef LARCH_SERVICE_JOBFS_H
#define LARCH_SERVICE_JOBFS_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

/* Opens dir/rel with flags (O_RDONLY, O_RDWR, O_WRONLY; O_CREAT, O_EXCL
 * and O_APPEND as open(2) takes them; O_CLOEXEC is always added; O_TRUNC
 * is refused, as it would cut a planted link before the check: replace a
 * file with svc_jobfs_write). Returns the descriptor, or -1. */
int svc_jobfs_open(const char *dir, const char *rel, int flags, mode_t mode);

/* dir/rel for reading, as a stdio stream; NULL on failure. */
FILE *svc_jobfs_fopen(const char *dir, const char *rel);

/* A descriptor of directory dir/rel (rel "" or "." for dir itself), for
 * fdopendir or openat; -1 on failure. */
int svc_jobfs_opendir(const char *dir, const char *rel);

/* Replaces dir/rel with len bytes of data, durably: written to a new
 * temporary beside it (mode; owned by uid:gid unless they are -1),
 * fsync'ed, renamed. 0, or -1. */
int svc_jobfs_write(const char *dir, const char *rel, const void *data, size_t len, mode_t mode,
                    uid_t uid, gid_t gid);

/* Removes dir/rel (a file or a link, never followed). 0, or -1 (ENOENT
 * when it was not there). */
int svc_jobfs_unlink(const char *dir, const char *rel);

/* Whether dir/rel exists (as anything): 1, 0, or -1 on another error. */
int svc_jobfs_exists(const char *dir, const char *rel);

#endif
