/* service/identity.c - Unix users: lookups (NSS) and switching to one; see
 * identity.h. */
#include "identity.h"

#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

/* getpwnam_r into a buffer that grows as NSS asks. 1 found, 0 none, -1 error. */
static int passwd_of(const char *name, struct passwd *pw, char **buf)
{
	size_t size = 1024;
	for (;;) {
		char *grown = realloc(*buf, size);
		if (!grown) {
			errno = ENOMEM;
			return -1;
		}
		*buf = grown;
		struct passwd *res = NULL;
		int rc = getpwnam_r(name, pw, *buf, size, &res);
		if (rc == ERANGE && size < (1u << 20)) {
			size *= 4;
			continue;
		}
		if (rc == 0)
			return res != NULL;
		/* "not found" comes back as these from some NSS modules */
		if (rc == ENOENT || rc == ESRCH || rc == EBADF || rc == EPERM)
			return 0;
		errno = rc;
		return -1;
	}
}

int svc_unix_user_exists(const char *name)
{
	struct passwd pw;
	char *buf = NULL;
	int rc = passwd_of(name, &pw, &buf);
	free(buf);
	return rc;
}

static int fill(struct svc_unix_id *out, const struct passwd *pw, char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	if (strlen(pw->pw_name) > SVC_UNIX_NAME_MAX) {
		snprintf(err, errlen, "Unix user name longer than %d bytes", SVC_UNIX_NAME_MAX);
		return -1;
	}
	snprintf(out->name, sizeof out->name, "%s", pw->pw_name);
	out->uid = pw->pw_uid;
	out->gid = pw->pw_gid;
	if (pw->pw_dir && strlen(pw->pw_dir) < sizeof out->home)
		snprintf(out->home, sizeof out->home, "%s", pw->pw_dir);
	int n = SVC_GROUPS_MAX;
	if (getgrouplist(pw->pw_name, pw->pw_gid, out->groups, &n) < 0) {
		snprintf(err, errlen, "Unix user %s is in more than %d groups", pw->pw_name,
		         SVC_GROUPS_MAX);
		return -1;
	}
	out->n_groups = n;
	return 0;
}

/* Lookups of the last CACHE_TTL_MS: a submit looks its user up three times
 * (the preflight, the hand-over, the launch) and NSS may be slow (a
 * directory service; here ~0.3 ms each through files and systemd). Misses
 * are not cached: a user created a moment ago is found at once. */
#define CACHE_SLOTS 64
#define CACHE_TTL_MS 5000

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	struct svc_unix_id id;
	long long until;                 /* monotonic ms; 0 = empty */
} cache[CACHE_SLOTS];


static unsigned slot_of(const char *name)
{
	unsigned h = 2166136261u;                  /* FNV-1a */
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 16777619u;
	return h % CACHE_SLOTS;
}

int svc_unix_id_lookup(const char *name, struct svc_unix_id *out, char *err, size_t errlen)
{
	unsigned slot = slot_of(name);
	long long now = svc_mono_coarse_ms();
	pthread_mutex_lock(&cache_lock);
	int hit = cache[slot].until > now && strcmp(cache[slot].id.name, name) == 0;
	if (hit)
		*out = cache[slot].id;
	pthread_mutex_unlock(&cache_lock);
	if (hit)
		return 0;
	struct passwd pw;
	char *buf = NULL;
	int rc = passwd_of(name, &pw, &buf);
	if (rc == 0)
		snprintf(err, errlen, "no Unix user %s on this host", name);
	else if (rc < 0)
		snprintf(err, errlen, "looking up Unix user %s: %s", name, strerror(errno));
	else
		rc = fill(out, &pw, err, errlen) == 0 ? 1 : -1;
	free(buf);
	if (rc == 1 && strcmp(out->name, name) == 0) {
		pthread_mutex_lock(&cache_lock);
		cache[slot].id = *out;
		cache[slot].until = now + CACHE_TTL_MS;
		pthread_mutex_unlock(&cache_lock);
	}
	return rc == 1 ? 0 : -1;
}

int svc_unix_id_self(struct svc_unix_id *out, char *err, size_t errlen)
{
	uid_t uid = geteuid();
	struct passwd pw, *res = NULL;
	char buf[4096];
	int rc = getpwuid_r(uid, &pw, buf, sizeof buf, &res);
	if (rc != 0 || !res) {
		/* a uid without a passwd entry (a container): the ids alone */
		memset(out, 0, sizeof *out);
		snprintf(out->name, sizeof out->name, "%u", (unsigned)uid);
		out->uid = uid;
		out->gid = getegid();
		out->groups[0] = out->gid;
		out->n_groups = 1;
		(void)err;
		(void)errlen;
		return 0;
	}
	return fill(out, &pw, err, errlen);
}

int svc_unix_id_become(const struct svc_unix_id *id)
{
	if (getuid() == id->uid && geteuid() == id->uid && getgid() == id->gid &&
	    getegid() == id->gid)
		return 0;
	if (setgroups((size_t)id->n_groups, id->groups) != 0 ||
	    setresgid(id->gid, id->gid, id->gid) != 0 || setresuid(id->uid, id->uid, id->uid) != 0)
		return -1;
	uid_t r, e, s;
	gid_t gr, ge, gs;
	if (getresuid(&r, &e, &s) != 0 || getresgid(&gr, &ge, &gs) != 0 || r != id->uid ||
	    e != id->uid || s != id->uid || gr != id->gid || ge != id->gid || gs != id->gid) {
		errno = EPERM;
		return -1;
	}
	/* dropping root must be for good */
	if (id->uid != 0 && (setuid(0) == 0 || seteuid(0) == 0)) {
		errno = EPERM;
		return -1;
	}
	return 0;
}
