/* trainer/spec/input.h - the one way the trainer opens a file that a user named:
 * the data files of every format, init.from, and the spec file itself.
 *
 * trn_input_open never blocks on what the path names and never reads a
 * byte of it: the path is opened with O_PATH (a FIFO, a terminal or a
 * device is not opened at all), fstat'd, and only a regular file of size
 * > 0 is opened for reading (O_RDONLY | O_NOCTTY | O_CLOEXEC, through
 * /proc/self/fd, so it is the inode that was checked). Size 0 also refuses
 * procfs files such as /proc/self/environ, whose size reads as 0.
 *
 * A confining policy (larchd's "service" mode: --data-root, --confine-data)
 * also requires the path, resolved with realpath, to be one of the roots
 * or under one (root + "/"); the resolved path is then opened with no
 * symbolic link followed anywhere in it (openat2's RESOLVE_NO_SYMLINKS, or
 * one component at a time with O_NOFOLLOW where the kernel lacks openat2),
 * so a link swapped in after the check fails instead of leading outside.
 * A path that does not resolve is judged by its longest leading part that
 * does: one that leads outside the roots is "outside" whether or not it
 * names a file, so that no message tells whether a file outside exists.
 *
 * Messages name the spec field and the path as given, and for a relative
 * path also the absolute path it names (taken lexically from the working
 * directory, or the rebased path the probe opens: trn_input_open_as):
 *   "data.train: /srv/x.bin: No such file or directory"
 *   "data.train: x.bin (resolved: /srv/job/x.bin): No such file or directory"
 *   "data.train: /srv/x.bin: not a regular file"
 *   "data.train: /srv/x.bin: is empty"
 *   "data.train: /etc/shadow is outside the directories this job may read"
 *   "data.train: /srv/x.bin: changed while it was being opened (a symbolic
 *    link appeared in its path)"
 */
#ifndef LARCH_TRAINER_INPUT_H
#define LARCH_TRAINER_INPUT_H

#include <stddef.h>

#include "trainer/err.h"

struct trn_input_policy {
	int confine;                   /* 1: every path must resolve under a root */
	char **roots;                  /* canonical paths (owned), n_roots of them */
	int n_roots;
};

/* An empty policy: confines nothing until a root is added or confine is set. */
void trn_input_policy_init(struct trn_input_policy *p);
/* Adds root (a directory or one regular file), canonicalised with realpath,
 * and sets confine. 0, or -1 with err "--data-root: <root>: <why>". */
int trn_input_policy_add_root(struct trn_input_policy *p, const char *root, struct trn_err *err);
void trn_input_policy_release(struct trn_input_policy *p);

/* 1 when policy (may be NULL) confines what may be opened. */
int trn_input_confines(const struct trn_input_policy *policy);

/* Opens path for reading as above (policy NULL: no confinement). Returns a
 * blocking read-only descriptor the caller owns, or -1 with err set,
 * naming field ("data.train", "init.from") and path. */
int trn_input_open(const char *path, const struct trn_input_policy *policy, const char *field,
                   struct trn_err *err);

/* trn_input_open of path, a rebased copy of given (the path as the spec
 * wrote it; trn_input_rebase), naming both in messages. given NULL: as
 * trn_input_open. */
int trn_input_open_as(const char *path, const char *given, const struct trn_input_policy *policy,
                      const char *field, struct trn_err *err);

/* The confined open of a path already canonicalised and checked against the
 * roots: no symbolic link is followed in resolved. path is the name for
 * messages. Exposed for the tests (a link swapped in after the check). */
int trn_input_open_resolved(const char *resolved, const char *path, const char *field,
                            struct trn_err *err);

/* What the confined open falls back to where the kernel has no openat2:
 * resolved (absolute) walked from "/" one component at a time, each opened
 * with O_NOFOLLOW; flags for the last. A descriptor or -1 with errno.
 * Exposed for the tests. */
int trn_input_open_walk(const char *resolved, int flags);

/* The probe's view of a relative path under larchd (larch-train --probe
 * --base-dir): the job runs in base_dir, which does not exist yet. Leading
 * "./" and "../" components of path are taken lexically, each "../" one
 * component up from base_dir; the rest is appended to that directory. An
 * absolute path is copied as it is. A relative path that stays in base_dir
 * itself fails ("<field>: a relative path names a file in the job's own
 * directory, which is empty when the job starts"). out holds size bytes.
 * 0, or -1 with err. */
int trn_input_rebase(const char *path, const char *base_dir, char *out, size_t size,
                     const char *field, struct trn_err *err);

#endif
