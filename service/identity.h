/* service/identity.h - the Unix users jobs run as.
 *
 * A larch user (a token's user) runs jobs as a Unix user of the cluster:
 * the one `larchd token create --unix-user` mapped it to, else the Unix
 * user of the same name (db_users_unix). larchd's run_as setting decides
 * whether that mapping is used:
 *   owner    (the default when larchd runs as root) every job runs as its
 *            owner's Unix user: the local executor sets the child's groups,
 *            gid and uid before exec (svc_unix_id_become), the Slurm
 *            executor submits with the owner's uid and gid; the kernel's
 *            permissions and Slurm's associations apply to each user. A job
 *            of a user-role token never runs as uid 0.
 *   service  (larchd not root) every job runs as larchd's own user, and
 *            user-role jobs may name input files only under data_roots.
 *
 * A struct svc_unix_id is looked up (NSS: getpwnam_r, getgrouplist) off
 * the HTTP threads, before a fork, so the child only makes system calls.
 */
#ifndef LARCH_SERVICE_IDENTITY_H
#define LARCH_SERVICE_IDENTITY_H

#include <stddef.h>
#include <sys/types.h>

#define SVC_UNIX_NAME_MAX 32
#define SVC_GROUPS_MAX 256

struct svc_unix_id {
	char name[SVC_UNIX_NAME_MAX + 1];
	uid_t uid;
	gid_t gid;                       /* the primary group */
	int n_groups;                    /* supplementary groups, the primary one included */
	gid_t groups[SVC_GROUPS_MAX];
	char home[256];                  /* "" when unknown or too long */
};

/* 1: the Unix user exists; 0: it does not; -1: the lookup failed (NSS
 * error: errno). */
int svc_unix_user_exists(const char *name);

/* The uid, gid and groups of Unix user name (as NSS said within the last
 * few seconds). 0, or -1 with err saying why ("no Unix user alice on this
 * host", or the NSS error). Safe on many threads. */
int svc_unix_id_lookup(const char *name, struct svc_unix_id *out, char *err, size_t errlen);

/* The process's own Unix identity (larchd's user). 0, or -1 with err. */
int svc_unix_id_self(struct svc_unix_id *out, char *err, size_t errlen);

/* In a child between fork and exec (async-signal-safe system calls only):
 * sets the groups, gid and uid of id, and checks that all three took and
 * that uid 0 cannot be regained. Returns 0, or -1 (errno set). A process
 * that is already id changes nothing. */
int svc_unix_id_become(const struct svc_unix_id *id);

#endif
