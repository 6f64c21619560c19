/* service/auth_db.c - bearer tokens from the database, and the first admin
 * token; see auth_db.h. */
#include "auth_db.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/auth.h"
#include "clock.h"
#include "db/jobs.h"
#include "db/tokens.h"
#include "log.h"

/* ---- lookups, with a cache ---------------------------------------------------
 *
 * A token lookup is a SQLite read transaction, which costs more than most
 * requests' own work; pollers send the same token again and again. So the
 * principals of admin and user tokens are kept for CACHE_TTL_MS, in a
 * direct-mapped table keyed by the token. An entry is used only while the
 * change stamp is the one it was made under, so a revoke from the command
 * line is seen by the very next request. The stamp is 8 bytes in
 * STATE_DIR/tokens.changed that `larchd token revoke` overwrites after its
 * commit (svc_auth_tokens_changed) with a value of its own; larchd keeps
 * the file open and reads the stamp with one pread (no path lookup; a file
 * cut short reads as another stamp, never a fault). (Were the file removed
 * and made again, the open one would not see it: the TTL bounds that.) Job tokens are never cached: larchd revokes them itself,
 * in the transaction that ends their job. */

#define CACHE_SLOTS 256
#define CACHE_TTL_MS 5000
#define TOKEN_TEXT_MAX 80       /* longer tokens are never valid: not cached */

struct slot {
	char token[TOKEN_TEXT_MAX];
	struct api_principal who;
	struct db_token t;          /* for recording its use */
	uint64_t stamp;             /* the change stamp it was looked up under */
	int64_t until;              /* monotonic ms; 0 = empty */
};

struct svc_auth {
	struct db *db;
	int stamp_fd;               /* STATE_DIR/tokens.changed; -1: no cache */
	pthread_mutex_t lock;
	struct slot slots[CACHE_SLOTS];
};


/* STATE_DIR/tokens.changed, opened (made if missing); -1 on failure. */
static int open_stamp(const char *state_dir)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", state_dir, SVC_TOKENS_STAMP);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		svc_log(SVC_LOG_WARN, "%s: %s: token lookups are not cached", path, strerror(errno));
	return fd;
}

static uint64_t read_stamp(int fd)
{
	uint64_t v = 0;
	ssize_t n = pread(fd, &v, sizeof v, 0);
	return n == (ssize_t)sizeof v ? v : (uint64_t)n;   /* short: a stamp of its own */
}

static unsigned slot_of(const char *token)
{
	uint32_t h = 2166136261u;              /* FNV-1a */
	for (const unsigned char *p = (const unsigned char *)token; *p; p++)
		h = (h ^ *p) * 16777619u;
	return h % CACHE_SLOTS;
}

struct svc_auth *svc_auth_new(struct db *db, const char *state_dir)
{
	struct svc_auth *a = calloc(1, sizeof *a);
	if (!a)
		return NULL;
	a->db = db;
	a->stamp_fd = open_stamp(state_dir);
	pthread_mutex_init(&a->lock, NULL);
	return a;
}

void svc_auth_free(struct svc_auth *a)
{
	if (!a)
		return;
	pthread_mutex_destroy(&a->lock);
	if (a->stamp_fd >= 0)
		close(a->stamp_fd);
	explicit_bzero(a->slots, sizeof a->slots);
	free(a);
}

/* The database's answer, as the API's principal. */
static int lookup_db(struct db *db, const char *token, struct api_principal *who,
                     struct db_token *t)
{
	struct db_err err = { 0 };
	int rc = db_tokens_lookup(db, token, t, &err);
	if (rc == DB_NOT_FOUND || rc == DB_INVALID)
		return API_AUTH_UNKNOWN;
	if (rc != 0) {
		svc_log(SVC_LOG_WARN, "token lookup: %s", err.text);
		return API_AUTH_FAILED;
	}
	switch (t->role) {
	case DB_ROLE_ADMIN:
		who->role = API_ROLE_ADMIN;
		break;
	case DB_ROLE_USER:
		who->role = API_ROLE_USER;
		break;
	case DB_ROLE_JOB: {
		char id[DB_JOB_ID_MAX];
		db_job_id_format(t->job, id);
		who->role = API_ROLE_JOB;
		snprintf(who->job, sizeof who->job, "%s", id);
		break;
	}
	default:
		return API_AUTH_UNKNOWN;
	}
	snprintf(who->user, sizeof who->user, "%s", t->user);
	return API_AUTH_OK;
}

static void touch(struct db *db, const struct db_token *t)
{
	struct db_err err = { 0 };
	if (db_tokens_touch(db, t, 0, &err) != 0)   /* bookkeeping: never fails a request */
		svc_log(SVC_LOG_DEBUG, "token %lld: recording its use: %s", (long long)t->id, err.text);
}

int svc_auth_lookup(void *cls, const char *token, struct api_principal *who)
{
	struct svc_auth *a = cls;
	memset(who, 0, sizeof *who);
	size_t len = strlen(token);
	int cacheable = a->stamp_fd >= 0 && len < TOKEN_TEXT_MAX;
	struct slot *s = &a->slots[slot_of(token)];
	uint64_t now_stamp = cacheable ? read_stamp(a->stamp_fd) : 0;   /* before the database */
	int64_t now = svc_mono_coarse_ms();

	if (cacheable) {
		struct db_token t;
		int hit = 0;
		pthread_mutex_lock(&a->lock);
		if (s->until > now && s->stamp == now_stamp &&
		    strlen(s->token) == len && CRYPTO_memcmp(s->token, token, len) == 0) {
			hit = 1;
			*who = s->who;
			t = s->t;
			if (db_now_ms() - s->t.last_used_ms >= DB_TOKEN_TOUCH_MS)
				s->t.last_used_ms = db_now_ms();   /* this thread records it */
		}
		pthread_mutex_unlock(&a->lock);
		if (hit) {
			touch(a->db, &t);      /* a no-op unless a minute has passed */
			return API_AUTH_OK;
		}
	}

	struct db_token t;
	int rc = lookup_db(a->db, token, who, &t);
	if (rc != API_AUTH_OK)
		return rc;
	touch(a->db, &t);
	if (cacheable && t.role != DB_ROLE_JOB) {
		pthread_mutex_lock(&a->lock);
		memcpy(s->token, token, len + 1);
		s->who = *who;
		s->t = t;
		if (!s->t.last_used_ms || db_now_ms() - s->t.last_used_ms >= DB_TOKEN_TOUCH_MS)
			s->t.last_used_ms = db_now_ms();
		s->stamp = now_stamp;
		s->until = now + CACHE_TTL_MS;
		pthread_mutex_unlock(&a->lock);
	}
	return API_AUTH_OK;
}

int svc_auth_tokens_changed(const char *state_dir, char *err, size_t errlen)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", state_dir, SVC_TOKENS_STAMP);
	/* a value no other call writes (time and pid), in place: larchd's
	 * next read of the file sees it */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t v = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
	             ((uint64_t)getpid() << 44);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0 || pwrite(fd, &v, sizeof v, 0) != (ssize_t)sizeof v) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* Writes secret and a newline to path, mode 0600, all or nothing. */
static int write_secret(const char *path, const char *secret, char *err, size_t errlen)
{
	char tmp[4200], dir[4200];
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	snprintf(dir, sizeof dir, "%s", path);
	unlink(tmp);                              /* left by a crash */
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	size_t len = strlen(secret);
	if (fd < 0 || fchmod(fd, 0600) != 0 || write(fd, secret, len) != (ssize_t)len ||
	    write(fd, "\n", 1) != 1 || fsync(fd) != 0) {
		snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
		if (fd >= 0)
			close(fd);
		unlink(tmp);
		return -1;
	}
	if (close(fd) != 0 || rename(tmp, path) != 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		unlink(tmp);
		return -1;
	}
	int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	return 0;
}

static int has_live_admin_token(struct db *db, int *has, struct db_err *err)
{
	struct db_token_list list = { 0 };
	*has = 0;
	int rc = db_tokens_list(db, NULL, &list, err);
	for (size_t i = 0; rc == 0 && i < list.n; i++)
		if (list.items[i].role == DB_ROLE_ADMIN && !list.items[i].revoked_ms)
			*has = 1;
	db_token_list_release(&list);
	return rc;
}

int svc_admin_token_ensure(struct db *db, const char *state_dir, char *path, size_t pathlen,
                           int *created, char *err, size_t errlen)
{
	*created = 0;
	if (snprintf(path, pathlen, "%s/admin.token", state_dir) >= (int)pathlen) {
		snprintf(err, errlen, "%s/admin.token: path too long", state_dir);
		return -1;
	}
	struct stat sb;
	if (lstat(path, &sb) == 0)
		return 0;
	struct db_err dberr = { 0 };
	int has = 0;
	if (has_live_admin_token(db, &has, &dberr) != 0) {
		snprintf(err, errlen, "admin token: %s", dberr.text);
		return -1;
	}
	if (has) {
		svc_log(SVC_LOG_INFO, "%s is absent and the database has admin tokens: none is made "
		        "(larchd token create --user NAME --role admin makes one)", path);
		return 0;
	}
	char secret[DB_TOKEN_LEN + 1];
	struct db_token info;
	if (db_tokens_create(db, SVC_ADMIN_USER, DB_ROLE_ADMIN, 0, secret, &info, &dberr) != 0) {
		snprintf(err, errlen, "admin token: %s", dberr.text);
		return -1;
	}
	int rc = write_secret(path, secret, err, errlen);
	explicit_bzero(secret, sizeof secret);
	if (rc != 0) {
		db_err_clear(&dberr);
		db_tokens_revoke(db, info.id, 0, &dberr);
		return -1;
	}
	*created = 1;
	svc_log(SVC_LOG_INFO, "first start: admin token %lld for user %s written to %s",
	        (long long)info.id, SVC_ADMIN_USER, path);
	return 0;
}
