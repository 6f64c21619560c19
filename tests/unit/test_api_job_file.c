/* tests/unit/test_api_job_file.c - api/job_file.c's open of a file in a job
 * directory (what the checkpoint and export routes serve, and what
 * service/export.c hashes): plain files pass; a symbolic link at any
 * component, a FIFO (refused without blocking), a hard link, a directory,
 * "." and "..", a path outside the directory are refused, and a missing
 * file is told apart ("gone"). And api/jobs_export_common.c's export ids,
 * and the rule of seeding a verdict from the import's hash.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/exports_hooks.h"
#include "api/job_file.h"
#include "check.h"

static char dir[PATH_MAX];

static void put(const char *rel, const char *text)
{
	char p[PATH_MAX + 64];
	snprintf(p, sizeof p, "%s/%s", dir, rel);
	FILE *f = fopen(p, "w");
	CHECK(f != NULL);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/* api_job_file_open of dir/rel: the descriptor (closed) >= 0, or -1 and
 * *gone, why. */
static int try_open(const char *rel, int *gone, char *why, size_t len)
{
	char p[PATH_MAX + 64];
	snprintf(p, sizeof p, "%s/%s", dir, rel);
	struct stat st;
	why[0] = '\0';
	int fd = api_job_file_open(dir, p, &st, gone, why, len);
	if (fd >= 0)
		close(fd);
	return fd >= 0 ? 0 : -1;
}

static void setup(void)
{
	const char *tmp = getenv("LARCH_TEST_TMP");
	snprintf(dir, sizeof dir, "%s/job_file.XXXXXX", tmp ? tmp : "/tmp");
	CHECK(mkdtemp(dir) != NULL);
	char p[PATH_MAX + 64];
	snprintf(p, sizeof p, "%s/exports", dir);
	CHECK(mkdir(p, 0755) == 0);
	snprintf(p, sizeof p, "%s/exports/2-hf-gpt2", dir);
	CHECK(mkdir(p, 0755) == 0);
	put("exports/2-hf-gpt2/model.safetensors", "weights");
	put("outside", "secret");
}

static void test_plain_file(void)
{
	int gone;
	char why[256];
	CHECK_INT_EQ(try_open("exports/2-hf-gpt2/model.safetensors", &gone, why, sizeof why), 0);
	/* the job directory given with a trailing slash */
	char p[PATH_MAX + 64], d2[PATH_MAX + 2];
	snprintf(p, sizeof p, "%s/exports/2-hf-gpt2/model.safetensors", dir);
	snprintf(d2, sizeof d2, "%s/", dir);
	struct stat st;
	int fd = api_job_file_open(d2, p, &st, &gone, why, sizeof why);
	CHECK(fd >= 0);
	if (fd >= 0)
		close(fd);
	CHECK_INT_EQ(st.st_size, 7);
}

static void test_missing_is_gone(void)
{
	int gone = 0;
	char why[256];
	CHECK_INT_EQ(try_open("exports/2-hf-gpt2/config.json", &gone, why, sizeof why), -1);
	CHECK_INT_EQ(gone, 1);
	CHECK_INT_EQ(try_open("exports/9-hf-gpt2/config.json", &gone, why, sizeof why), -1);
	CHECK_INT_EQ(gone, 1);
}

static void test_links_are_refused(void)
{
	char p[PATH_MAX + 64], t[PATH_MAX + 64], why[256];
	int gone;
	/* the file a link */
	snprintf(p, sizeof p, "%s/exports/2-hf-gpt2/config.json", dir);
	snprintf(t, sizeof t, "%s/outside", dir);
	CHECK(symlink(t, p) == 0);
	CHECK_INT_EQ(try_open("exports/2-hf-gpt2/config.json", &gone, why, sizeof why), -1);
	CHECK(!gone && strstr(why, "symbolic link"));
	unlink(p);
	/* a directory above it a link */
	snprintf(p, sizeof p, "%s/exports/3-hf-gpt2", dir);
	snprintf(t, sizeof t, "%s/exports/2-hf-gpt2", dir);
	CHECK(symlink(t, p) == 0);
	CHECK_INT_EQ(try_open("exports/3-hf-gpt2/model.safetensors", &gone, why, sizeof why), -1);
	CHECK(!gone && strstr(why, "symbolic link"));
	unlink(p);
	/* a hard link: two links */
	snprintf(p, sizeof p, "%s/exports/2-hf-gpt2/config.json", dir);
	snprintf(t, sizeof t, "%s/outside", dir);
	CHECK(link(t, p) == 0);
	CHECK_INT_EQ(try_open("exports/2-hf-gpt2/config.json", &gone, why, sizeof why), -1);
	CHECK(strstr(why, "one link") != NULL);
	unlink(p);
}

static void test_fifo_and_directory_are_refused_without_blocking(void)
{
	char p[PATH_MAX + 64], why[256];
	int gone;
	snprintf(p, sizeof p, "%s/exports/2-hf-gpt2/config.json", dir);
	CHECK(mkfifo(p, 0644) == 0);
	/* no writer: a blocking open would hang here */
	CHECK_INT_EQ(try_open("exports/2-hf-gpt2/config.json", &gone, why, sizeof why), -1);
	CHECK(strstr(why, "regular file") != NULL);
	unlink(p);
	CHECK_INT_EQ(try_open("exports/2-hf-gpt2", &gone, why, sizeof why), -1);
	CHECK(strstr(why, "regular file") != NULL);
}

static void test_paths_outside_are_refused(void)
{
	char why[256];
	int gone;
	struct stat st;
	CHECK_INT_EQ(try_open("exports/../outside", &gone, why, sizeof why), -1);
	CHECK(strstr(why, "\"..\"") != NULL);
	CHECK_INT_EQ(try_open("./outside", &gone, why, sizeof why), -1);
	CHECK_INT_EQ(api_job_file_open(dir, "/etc/passwd", &st, &gone, why, sizeof why), -1);
	CHECK(strstr(why, "not in the job's directory") != NULL);
	/* a sibling whose name starts with the directory's */
	char p[PATH_MAX + 64];
	snprintf(p, sizeof p, "%sx/outside", dir);
	CHECK_INT_EQ(api_job_file_open(dir, p, &st, &gone, why, sizeof why), -1);
	CHECK(strstr(why, "not in the job's directory") != NULL);
}

static void test_export_ids(void)
{
	int64_t step = -1;
	const char *format = NULL;
	CHECK_INT_EQ(api_export_id_parse("10-hf-gpt2", &step, &format), 0);
	CHECK_INT_EQ(step, 10);
	CHECK_STR_EQ(format, "hf-gpt2");
	CHECK_INT_EQ(api_export_id_parse("0-hf-mlp", &step, &format), 0);
	CHECK_INT_EQ(step, 0);
	CHECK_STR_EQ(format, "hf-mlp");
	CHECK_INT_EQ(api_export_id_parse("9007199254740992-hf-mlp", &step, &format), 0);
	static const char *const bad[] = {
		"", "10", "10-", "-hf-gpt2", "010-hf-gpt2", "00-hf-gpt2", "10-HF-GPT2", "10-hf-gpt2x",
		"10-hf-gpt", "10--hf-gpt2", "+10-hf-gpt2", " 10-hf-gpt2", "10-hf-gpt2/..",
		"9007199254740993-hf-gpt2", "99999999999999999-hf-gpt2", "10-onnx", "1e3-hf-gpt2",
		NULL,
	};
	for (int i = 0; bad[i]; i++)
		CHECK_MSG(api_export_id_parse(bad[i], &step, &format) == -1, "\"%s\" was taken",
		          bad[i]);
	CHECK_INT_EQ(api_export_id_parse(NULL, &step, &format), -1);
	CHECK_STR_EQ(api_export_state_name(API_EXPORT_DONE), "done");
	CHECK_STR_EQ(api_export_state_name(API_EXPORT_FAILED), "failed");
}

/* The import's seeding of a download verdict: only when the file's
 * identity held from before the hash to after it. */
static void test_trust_needs_the_same_file(void)
{
	static const char sha[] = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
	put("ck", "test");
	char p[PATH_MAX + 64];
	snprintf(p, sizeof p, "%s/ck", dir);
	int fd = open(p, O_RDWR | O_CLOEXEC);
	CHECK(fd >= 0);
	struct stat before, after;
	CHECK_INT_EQ(fstat(fd, &before), 0);
	CHECK_INT_EQ(fstat(fd, &after), 0);
	CHECK_INT_EQ(api_job_file_trust(&before, &after, sha), 1);
	/* not a sha256 */
	CHECK_INT_EQ(api_job_file_trust(&before, &after, "abc"), 0);
	CHECK_INT_EQ(api_job_file_trust(&before, &after, NULL), 0);
	char upper[65];
	snprintf(upper, sizeof upper, "%s", sha);
	upper[0] = 'F';
	CHECK_INT_EQ(api_job_file_trust(&before, &after, upper), 0);
	/* written while it was hashed: the size changes */
	CHECK_INT_EQ((int)pwrite(fd, "more", 4, 4), 4);
	CHECK_INT_EQ(fstat(fd, &after), 0);
	CHECK_INT_EQ(api_job_file_trust(&before, &after, sha), 0);
	/* rewritten in place, same size: mtime and ctime change */
	CHECK_INT_EQ(fstat(fd, &before), 0);
	struct timespec times[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_sec = 1000000000 } };
	CHECK_INT_EQ(futimens(fd, times), 0);
	CHECK_INT_EQ(fstat(fd, &after), 0);
	CHECK_INT_EQ(api_job_file_trust(&before, &after, sha), 0);
	/* its mtime set back as it was: ctime still tells */
	times[1] = before.st_mtim;
	CHECK_INT_EQ(futimens(fd, times), 0);
	CHECK_INT_EQ(fstat(fd, &after), 0);
	CHECK_INT_EQ(api_job_file_trust(&before, &after, sha), 0);
	close(fd);
	/* replaced by another file of the same size (another inode) */
	CHECK_INT_EQ(stat(p, &before), 0);
	char q[PATH_MAX + 64];
	snprintf(q, sizeof q, "%s/ck2", dir);
	put("ck2", "testmore");
	CHECK_INT_EQ(rename(q, p), 0);
	CHECK_INT_EQ(stat(p, &after), 0);
	CHECK_INT_EQ(api_job_file_trust(&before, &after, sha), 0);
	/* a directory is no file to serve */
	CHECK_INT_EQ(stat(dir, &before), 0);
	CHECK_INT_EQ(api_job_file_trust(&before, &before, sha), 0);
	CHECK_INT_EQ((long long)api_job_file_hashes(), 0);
}

int main(void)
{
	setup();
	CHECK_RUN(test_plain_file);
	CHECK_RUN(test_missing_is_gone);
	CHECK_RUN(test_links_are_refused);
	CHECK_RUN(test_fifo_and_directory_are_refused_without_blocking);
	CHECK_RUN(test_paths_outside_are_refused);
	CHECK_RUN(test_export_ids);
	CHECK_RUN(test_trust_needs_the_same_file);
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return check_finish();
}
