/* tests/unit/test_db_db.c - db/db.c's files: db_open makes the database and
 * its -wal and -shm mode 0600 whatever the umask (SQLite alone would make
 * them 0644 under the usual 022), takes group and other bits off old files
 * of 0644, and leaves them alone when it opens read-only. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "db/db.h"
#include "db/tokens.h"

static const char *tmp;

static int mode_of(const char *path, const char *suffix)
{
	char p[4300];
	snprintf(p, sizeof p, "%s%s", path, suffix);
	struct stat st;
	return stat(p, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
}

static void set_mode(const char *path, const char *suffix, mode_t mode)
{
	char p[4300];
	snprintf(p, sizeof p, "%s%s", path, suffix);
	CHECK(chmod(p, mode) == 0);
}

static struct db *open_rw(const char *path, int readonly)
{
	struct db_options o = { .readonly = readonly };
	struct db_err err = { 0 };
	struct db *db = db_open(path, &o, &err);
	CHECK_MSG(db != NULL, "db_open %s: %s", path, err.text);
	return db;
}

static void test_new_files_are_private(void)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/new.db", tmp);
	unlink(path);
	mode_t old = umask(022);
	struct db *db = open_rw(path, 0);
	if (db) {
		CHECK_INT_EQ(db_users_ensure(db, "alice", DB_ROLE_USER, NULL), 0);  /* a write */
		CHECK_INT_EQ(mode_of(path, ""), 0600);
		CHECK_INT_EQ(mode_of(path, "-wal"), 0600);
		CHECK_INT_EQ(mode_of(path, "-shm"), 0600);
		db_close(db);
	}
	umask(old);
}

static void test_old_files_are_tightened(void)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/old.db", tmp);
	unlink(path);
	struct db *db = open_rw(path, 0);
	if (!db)
		return;
	CHECK_INT_EQ(db_users_ensure(db, "alice", DB_ROLE_USER, NULL), 0);
	/* a second process keeps the WAL and shm files while this one reopens */
	struct db *keep = open_rw(path, 0);
	db_close(db);
	set_mode(path, "", 0644);
	set_mode(path, "-wal", 0664);
	set_mode(path, "-shm", 0644);

	db = open_rw(path, 1);             /* read-only: not ours to change */
	if (db) {
		CHECK_INT_EQ(mode_of(path, ""), 0644);
		db_close(db);
	}
	db = open_rw(path, 0);
	if (db) {
		CHECK_INT_EQ(mode_of(path, ""), 0600);
		CHECK_INT_EQ(mode_of(path, "-wal"), 0600);
		CHECK_INT_EQ(mode_of(path, "-shm"), 0600);
		db_close(db);
	}
	db_close(keep);
}

int main(void)
{
	tmp = check_tmpdir("db_db");
	CHECK_RUN(test_new_files_are_private);
	CHECK_RUN(test_old_files_are_tightened);
	return check_finish();
}
