/* tests/unit/test_exec_jobfs.c - service/jobfs.c: larchd's access below a job
 * directory its owner controls never follows a link, never blocks on a FIFO,
 * never reads a hard link to a file elsewhere, and replaces files instead of
 * writing through what is planted under their name; and service/identity.c's
 * lookups. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "service/identity.h"
#include "service/jobfs.h"

static char dir[4096], outside[4200];

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static void setup(const char *name)
{
	snprintf(dir, sizeof dir, "%s", check_tmpdir(name));
	snprintf(outside, sizeof outside, "%s/../%s-secret", dir, name);
	write_text(outside, "secret bytes\n");
	char sub[4200];
	snprintf(sub, sizeof sub, "%s/checkpoints", dir);
	mkdir(sub, 0750);
}

static void test_reads_regular_files(void)
{
	setup("jobfs-read");
	char path[4200];
	snprintf(path, sizeof path, "%s/result.json", dir);
	write_text(path, "{\"exit_code\": 0}\n");
	FILE *f = svc_jobfs_fopen(dir, "result.json");
	CHECK(f != NULL);
	char line[64] = "";
	if (f) {
		CHECK(fgets(line, sizeof line, f) != NULL);
		fclose(f);
	}
	CHECK_STR_EQ(line, "{\"exit_code\": 0}\n");
	snprintf(path, sizeof path, "%s/checkpoints/step-1.safetensors", dir);
	write_text(path, "x");
	int fd = svc_jobfs_open(dir, "checkpoints/step-1.safetensors", O_RDONLY, 0);
	CHECK(fd >= 0);
	if (fd >= 0) {
		/* a plain blocking descriptor again once opened */
		CHECK(!(fcntl(fd, F_GETFL) & O_NONBLOCK));
		close(fd);
	}
	errno = 0;
	CHECK(svc_jobfs_fopen(dir, "missing.json") == NULL && errno == ENOENT);
	CHECK_INT_EQ(svc_jobfs_exists(dir, "result.json"), 1);
	CHECK_INT_EQ(svc_jobfs_exists(dir, "missing.json"), 0);
}

static void test_refuses_links_fifos_and_escapes(void)
{
	setup("jobfs-hostile");
	char path[4200], target[4200];
	/* a symbolic link to a file outside, as the last component */
	snprintf(path, sizeof path, "%s/stderr.log", dir);
	CHECK(symlink(outside, path) == 0);
	errno = 0;
	CHECK(svc_jobfs_open(dir, "stderr.log", O_RDONLY, 0) < 0 && errno == ELOOP);
	/* ... and as a directory on the way */
	snprintf(path, sizeof path, "%s/ckdir", dir);
	snprintf(target, sizeof target, "%s/..", dir);
	CHECK(symlink(target, path) == 0);
	CHECK(svc_jobfs_open(dir, "ckdir/jobfs-hostile-secret", O_RDONLY, 0) < 0);
	CHECK(svc_jobfs_opendir(dir, "ckdir") < 0);
	/* a FIFO: refused at once, not waited on */
	snprintf(path, sizeof path, "%s/result.json", dir);
	CHECK(mkfifo(path, 0600) == 0);
	errno = 0;
	CHECK(svc_jobfs_open(dir, "result.json", O_RDONLY, 0) < 0 && errno == EINVAL);
	/* a hard link to a file elsewhere */
	snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
	CHECK(link(outside, path) == 0);
	errno = 0;
	CHECK(svc_jobfs_fopen(dir, "metrics.jsonl") == NULL && errno == EINVAL);
	/* names that climb out or are not plain */
	static const char *const bad[] = { "../x", "/etc/passwd", "a/../b", "", ".", "a//b",
	                                   "./a" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		errno = 0;
		CHECK_MSG(svc_jobfs_open(dir, bad[i], O_RDONLY, 0) < 0 && errno == EINVAL,
		          "\"%s\" was not refused", bad[i]);
	}
	/* O_TRUNC would cut before the check */
	errno = 0;
	CHECK(svc_jobfs_open(dir, "metrics.jsonl", O_WRONLY | O_TRUNC, 0) < 0 && errno == EINVAL);
}

static void test_write_replaces_what_was_planted(void)
{
	setup("jobfs-write");
	char path[4200];
	/* a link planted under the name is replaced, never written through */
	snprintf(path, sizeof path, "%s/cancel", dir);
	CHECK(symlink(outside, path) == 0);
	CHECK_INT_EQ(svc_jobfs_write(dir, "cancel", "admin\n", 6, 0640, (uid_t)-1, (gid_t)-1), 0);
	FILE *f = fopen(outside, "r");
	char line[64] = "";
	if (f) {
		CHECK(fgets(line, sizeof line, f) != NULL);
		fclose(f);
	}
	CHECK_STR_EQ(line, "secret bytes\n");
	struct stat st;
	CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0640);
	/* and so is a temporary planted where the write makes its own */
	char tmp[4200];
	snprintf(tmp, sizeof tmp, "%s/.spec.json.larchd-tmp", dir);
	CHECK(symlink(outside, tmp) == 0);
	CHECK_INT_EQ(svc_jobfs_write(dir, "spec.json", "{}\n", 3, 0640, (uid_t)-1, (gid_t)-1), 0);
	f = fopen(outside, "r");
	if (f) {
		CHECK(fgets(line, sizeof line, f) != NULL);
		fclose(f);
	}
	CHECK_STR_EQ(line, "secret bytes\n");
	CHECK(lstat(tmp, &st) != 0 && errno == ENOENT);
	/* owned as asked: our own ids here, whoever runs the test */
	CHECK_INT_EQ(svc_jobfs_write(dir, "job-token", "t\n", 2, 0600, getuid(), getgid()), 0);
	snprintf(path, sizeof path, "%s/job-token", dir);
	CHECK(stat(path, &st) == 0 && st.st_uid == getuid() && (st.st_mode & 07777) == 0600);
	CHECK_INT_EQ(svc_jobfs_unlink(dir, "job-token"), 0);
	CHECK_INT_EQ(svc_jobfs_exists(dir, "job-token"), 0);
}

static void test_identity(void)
{
	CHECK_INT_EQ(svc_unix_user_exists("root"), 1);
	CHECK_INT_EQ(svc_unix_user_exists("larch-no-such-user-zz"), 0);
	struct svc_unix_id id;
	char err[256];
	CHECK_INT_EQ(svc_unix_id_lookup("root", &id, err, sizeof err), 0);
	CHECK_INT_EQ(id.uid, 0);
	CHECK(id.n_groups >= 1);
	CHECK_INT_EQ(svc_unix_id_lookup("larch-no-such-user-zz", &id, err, sizeof err), -1);
	CHECK_STR_EQ(err, "no Unix user larch-no-such-user-zz on this host");
	CHECK_INT_EQ(svc_unix_id_self(&id, err, sizeof err), 0);
	CHECK_INT_EQ(id.uid, geteuid());
	/* becoming who we are already changes nothing */
	CHECK_INT_EQ(svc_unix_id_become(&id), 0);
}

int main(void)
{
	CHECK_RUN(test_reads_regular_files);
	CHECK_RUN(test_refuses_links_fifos_and_escapes);
	CHECK_RUN(test_write_replaces_what_was_planted);
	CHECK_RUN(test_identity);
	return check_finish();
}
