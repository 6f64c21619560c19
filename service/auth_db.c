/* service/auth_db.c - bearer tokens from the database, and the first admin
 * token; see auth_db.h. */
#include "auth_db.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/auth.h"
#include "db/jobs.h"
#include "db/tokens.h"
#include "log.h"

int svc_auth_lookup(void *cls, const char *token, struct api_principal *who)
{
	struct db *db = cls;
	struct db_token t;
	struct db_err err = { 0 };
	memset(who, 0, sizeof *who);
	int rc = db_tokens_lookup(db, token, &t, &err);
	if (rc == DB_NOT_FOUND || rc == DB_INVALID)
		return API_AUTH_UNKNOWN;
	if (rc != 0) {
		svc_log(SVC_LOG_WARN, "token lookup: %s", err.text);
		return API_AUTH_FAILED;
	}
	switch (t.role) {
	case DB_ROLE_ADMIN:
		who->role = API_ROLE_ADMIN;
		break;
	case DB_ROLE_USER:
		who->role = API_ROLE_USER;
		break;
	case DB_ROLE_JOB: {
		char id[DB_JOB_ID_MAX];
		db_job_id_format(t.job, id);
		who->role = API_ROLE_JOB;
		snprintf(who->job, sizeof who->job, "%s", id);
		break;
	}
	default:
		return API_AUTH_UNKNOWN;
	}
	snprintf(who->user, sizeof who->user, "%s", t.user);
	db_err_clear(&err);
	if (db_tokens_touch(db, &t, 0, &err) != 0)   /* bookkeeping: never fails a request */
		svc_log(SVC_LOG_DEBUG, "token %lld: recording its use: %s", (long long)t.id, err.text);
	return API_AUTH_OK;
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
