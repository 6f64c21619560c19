/* tests/unit/test_input.c - trainer/spec/input.c: the opener of user-named files.
 * A FIFO, a terminal, a device, a directory, an empty file and procfs are
 * refused without blocking; a regular file comes back readable and
 * blocking; confinement follows symbolic links to where they lead and
 * refuses one swapped in after the check; the probe's relative paths. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "trainer/spec/input.h"

static char dir[PATH_MAX];               /* canonical */

static const char *at(const char *name)
{
	static char paths[8][PATH_MAX + 64];
	static int next;
	char *p = paths[next++ % 8];
	snprintf(p, sizeof paths[0], "%s/%s", dir, name);
	return p;
}

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(1);
	}
}

/* opens path under policy; expects failure with needle in the message */
static void expect_refused(const char *path, const struct trn_input_policy *pol,
                           const char *needle)
{
	struct trn_err err = { 0 };
	int fd = trn_input_open(path, pol, "data.train", &err);
	CHECK_MSG(fd == -1 && strncmp(err.text, "data.train: ", 12) == 0 &&
	          strstr(err.text, needle), "%s: fd %d, \"%s\", want \"%s\"", path, fd, err.text,
	          needle);
	if (fd >= 0)
		close(fd);
}

/* opens path under policy; expects its contents to be want */
static void expect_opened(const char *path, const struct trn_input_policy *pol, const char *want)
{
	struct trn_err err = { 0 };
	int fd = trn_input_open(path, pol, "data.train", &err);
	if (!CHECK_MSG(fd >= 0, "%s: %s", path, err.text))
		return;
	char buf[64] = { 0 };
	ssize_t n = read(fd, buf, sizeof buf - 1);
	CHECK_MSG(n == (ssize_t)strlen(want) && strcmp(buf, want) == 0, "%s: read \"%s\"", path, buf);
	int fl = fcntl(fd, F_GETFL);
	CHECK(fl >= 0 && !(fl & O_NONBLOCK) && (fl & O_ACCMODE) == O_RDONLY);
	CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	close(fd);
}

static void test_kinds(void)
{
	put(at("a.txt"), "alpha");
	expect_opened(at("a.txt"), NULL, "alpha");
	expect_refused(at("missing"), NULL, "No such file or directory");
	put(at("empty"), "");
	expect_refused(at("empty"), NULL, "is empty");
	expect_refused(dir, NULL, "not a regular file");
	expect_refused("/dev/null", NULL, "not a regular file");
	/* procfs: a size of 0, whatever it would read */
	expect_refused("/proc/self/environ", NULL, "is empty");
	/* a FIFO without a writer: opening it for reading would block */
	CHECK(mkfifo(at("fifo"), 0600) == 0);
	expect_refused(at("fifo"), NULL, "not a regular file");
	/* a terminal: neither opened nor made the controlling one */
	int master = posix_openpt(O_RDWR | O_NOCTTY);
	if (CHECK(master >= 0 && grantpt(master) == 0 && unlockpt(master) == 0)) {
		expect_refused(ptsname(master), NULL, "not a regular file");
		close(master);
	}
	struct trn_err err = { 0 };
	CHECK_INT_EQ(trn_input_open("", NULL, "init.from", &err), -1);
	CHECK_STR_EQ(err.text, "init.from: no path");
}

static void test_confined(void)
{
	struct trn_input_policy pol;
	struct trn_err err = { 0 };
	CHECK(mkdir(at("root"), 0755) == 0 && mkdir(at("root/sub"), 0755) == 0 &&
	      mkdir(at("root2"), 0755) == 0);
	put(at("root/sub/in.txt"), "inside");
	put(at("root2/f"), "beside");
	put(at("out.txt"), "outside");
	CHECK(symlink(at("out.txt"), at("root/escape")) == 0);
	CHECK(symlink("sub/in.txt", at("root/alias")) == 0);
	CHECK(symlink(at("root"), at("rootlink")) == 0);

	/* unconfined: everything regular opens, links followed */
	expect_opened(at("root/escape"), NULL, "outside");

	trn_input_policy_init(&pol);
	CHECK(!trn_input_confines(&pol));
	/* a root named through a link is kept canonical */
	CHECK_INT_EQ(trn_input_policy_add_root(&pol, at("rootlink"), &err), 0);
	CHECK(trn_input_confines(&pol));
	CHECK_STR_EQ(pol.roots[0], at("root"));
	expect_opened(at("root/sub/in.txt"), &pol, "inside");
	expect_opened(at("rootlink/sub/in.txt"), &pol, "inside");
	expect_opened(at("root/alias"), &pol, "inside");
	expect_opened(at("root/sub/../sub/in.txt"), &pol, "inside");
	expect_refused(at("out.txt"), &pol, "is outside the directories this job may read");
	expect_refused(at("root/escape"), &pol, "is outside the directories this job may read");
	expect_refused(at("root/../out.txt"), &pol, "is outside the directories");
	/* a sibling whose name starts with the root's */
	expect_refused(at("root2/f"), &pol, "is outside the directories");
	expect_refused("/etc/passwd", &pol, "is outside the directories");
	expect_refused(at("root/nope"), &pol, "No such file or directory");
	expect_refused(at("root/sub/nope/deeper"), &pol, "No such file or directory");
	/* a missing path outside the roots reads as an existing one would:
	 * no message tells what exists there */
	expect_refused("/etc/no-such-file-here", &pol, "is outside the directories");
	expect_refused(at("nope"), &pol, "is outside the directories");
	expect_refused(at("nope/deeper"), &pol, "is outside the directories");
	expect_refused(at("root/../nope"), &pol, "is outside the directories");
	expect_refused(at("out.txt/nope"), &pol, "is outside the directories");
	expect_refused(at("root/escape/nope"), &pol, "is outside the directories");
	/* the message names the path as given */
	int fd = trn_input_open(at("root/escape"), &pol, "data.train", &err);
	char want[PATH_MAX + 128];
	snprintf(want, sizeof want, "data.train: %s is outside the directories this job may read",
	         at("root/escape"));
	CHECK(fd == -1);
	CHECK_STR_EQ(err.text, want);
	trn_input_policy_release(&pol);

	/* a root that is one file */
	trn_input_policy_init(&pol);
	CHECK_INT_EQ(trn_input_policy_add_root(&pol, at("root2/f"), &err), 0);
	expect_opened(at("root2/f"), &pol, "beside");
	expect_refused(at("root/sub/in.txt"), &pol, "is outside the directories");
	trn_input_policy_release(&pol);

	/* confined with no root: nothing a user names can be read */
	trn_input_policy_init(&pol);
	pol.confine = 1;
	CHECK(trn_input_confines(&pol));
	expect_refused(at("root/sub/in.txt"), &pol, "is outside the directories");
	trn_input_policy_release(&pol);

	/* roots that cannot be: missing, or not a directory or a file */
	trn_err_clear(&err);
	CHECK_INT_EQ(trn_input_policy_add_root(&pol, at("no-root"), &err), -1);
	snprintf(want, sizeof want, "--data-root: %s: No such file or directory", at("no-root"));
	CHECK_STR_EQ(err.text, want);
	trn_err_clear(&err);
	CHECK_INT_EQ(trn_input_policy_add_root(&pol, "/dev/null", &err), -1);
	CHECK_STR_EQ(err.text, "--data-root: /dev/null: not a directory or a regular file");
	trn_input_policy_release(&pol);
}

/* The check resolves the path; a link put in its way before the open
 * (here: a directory of it replaced by a link to elsewhere) fails the
 * open instead of leading there. */
static void test_swap_after_check(void)
{
	struct trn_err err = { 0 };
	CHECK(mkdir(at("swap"), 0755) == 0 && mkdir(at("swap/d"), 0755) == 0 &&
	      mkdir(at("elsewhere"), 0755) == 0);
	put(at("swap/d/f"), "checked");
	put(at("elsewhere/f"), "secret");
	char *resolved = realpath(at("swap/d/f"), NULL);
	if (!CHECK(resolved != NULL))
		return;
	int fd = trn_input_open_resolved(resolved, "d/f", "data.train", &err);
	CHECK_MSG(fd >= 0, "%s", err.text);
	if (fd >= 0)
		close(fd);
	/* the swap: d becomes a link to elsewhere */
	CHECK(rename(at("swap/d"), at("swap/d.old")) == 0);
	CHECK(symlink(at("elsewhere"), at("swap/d")) == 0);
	fd = trn_input_open_resolved(resolved, "d/f", "data.train", &err);
	CHECK(fd == -1);
	CHECK_STR_EQ(err.text, "data.train: d/f: changed while it was being opened (a symbolic "
	             "link appeared in its path)");
	/* and the fallback walk refuses it too */
	errno = 0;
	fd = trn_input_open_walk(resolved, O_PATH | O_CLOEXEC);
	CHECK_MSG(fd == -1 && errno == ENOTDIR, "fd %d errno %d", fd, errno);
	if (fd >= 0)
		close(fd);
	/* a link as the last component: the walk hands the link itself back */
	CHECK(unlink(at("swap/d")) == 0 && rename(at("swap/d.old"), at("swap/d")) == 0);
	CHECK(rename(at("swap/d/f"), at("swap/d/f.old")) == 0);
	CHECK(symlink(at("elsewhere/f"), at("swap/d/f")) == 0);
	trn_err_clear(&err);
	fd = trn_input_open_resolved(resolved, "d/f", "data.train", &err);
	CHECK(fd == -1 && strstr(err.text, "changed while it was being opened"));
	fd = trn_input_open_walk(resolved, O_PATH | O_CLOEXEC);
	struct stat st;
	CHECK(fd >= 0 && fstat(fd, &st) == 0 && S_ISLNK(st.st_mode));
	if (fd >= 0)
		close(fd);
	/* and a plain path walks */
	fd = trn_input_open_walk(at("elsewhere/f"), O_RDONLY | O_CLOEXEC);
	char buf[16] = { 0 };
	CHECK(fd >= 0 && read(fd, buf, sizeof buf - 1) == 6 && strcmp(buf, "secret") == 0);
	if (fd >= 0)
		close(fd);
	free(resolved);
}

static void expect_rebase(const char *path, const char *base, const char *want)
{
	char out[PATH_MAX];
	struct trn_err err = { 0 };
	int rc = trn_input_rebase(path, base, out, sizeof out, "data.train", &err);
	CHECK_MSG(rc == 0 && strcmp(out, want) == 0, "%s in %s: rc %d \"%s\" (%s), want \"%s\"",
	          path, base ? base : "(none)", rc, out, err.text, want);
}

static void test_rebase(void)
{
	const char *job = "/var/lib/larch/jobs/j-000007";
	expect_rebase("/data/x.bin", job, "/data/x.bin");
	expect_rebase("../x.bin", job, "/var/lib/larch/jobs/x.bin");
	expect_rebase("./../x.bin", job, "/var/lib/larch/jobs/x.bin");
	expect_rebase("..//../data/x.bin", job, "/var/lib/larch/data/x.bin");
	expect_rebase("../../../../../../x", job, "/x");
	expect_rebase("../", job, "/var/lib/larch/jobs");
	expect_rebase("../x/../y", job, "/var/lib/larch/jobs/x/../y");
	expect_rebase("../x", "/var/lib/larch/jobs/j-000007/", "/var/lib/larch/jobs/x");
	expect_rebase("x.bin", NULL, "x.bin");
	static const char *const inside[] = { "x.bin", "./x.bin", ".", "./", "sub/../../x" };
	for (size_t i = 0; i < sizeof inside / sizeof inside[0]; i++) {
		char out[PATH_MAX];
		struct trn_err err = { 0 };
		CHECK_INT_EQ(trn_input_rebase(inside[i], job, out, sizeof out, "data.train", &err), -1);
		CHECK_STR_EQ(err.text, "data.train: a relative path names a file in the job's own "
		             "directory, which is empty when the job starts");
	}
}

/* A relative path's message names the absolute path it was taken to mean:
 * from the working directory, or as the probe rebased it. */
static void test_relative_names(void)
{
	struct trn_err err = { 0 };
	char cwd[PATH_MAX], want[3 * PATH_MAX];
	CHECK(getcwd(cwd, sizeof cwd) != NULL);
	CHECK(chdir(at("root")) == 0);
	CHECK_INT_EQ(trn_input_open("sub/./../nope.bin", NULL, "data.train", &err), -1);
	snprintf(want, sizeof want, "data.train: sub/./../nope.bin (resolved: %s): No such file "
	         "or directory", at("root/nope.bin"));
	CHECK_STR_EQ(err.text, want);
	/* confined, inside and outside the root */
	struct trn_input_policy pol;
	trn_input_policy_init(&pol);
	CHECK_INT_EQ(trn_input_policy_add_root(&pol, at("root"), &err), 0);
	trn_err_clear(&err);
	CHECK_INT_EQ(trn_input_open("nope.bin", &pol, "data.train", &err), -1);
	snprintf(want, sizeof want, "data.train: nope.bin (resolved: %s): No such file or "
	         "directory", at("root/nope.bin"));
	CHECK_STR_EQ(err.text, want);
	trn_err_clear(&err);
	CHECK_INT_EQ(trn_input_open("../nope.bin", &pol, "data.train", &err), -1);
	snprintf(want, sizeof want, "data.train: ../nope.bin (resolved: %s) is outside the "
	         "directories this job may read", at("nope.bin"));
	CHECK_STR_EQ(err.text, want);
	trn_input_policy_release(&pol);
	CHECK(chdir(cwd) == 0);
	/* the probe's rebased path, named with the spec's own */
	trn_err_clear(&err);
	CHECK_INT_EQ(trn_input_open_as(at("nope.bin"), "../nope.bin", NULL, "data.train", &err), -1);
	snprintf(want, sizeof want, "data.train: ../nope.bin (resolved: %s): No such file or "
	         "directory", at("nope.bin"));
	CHECK_STR_EQ(err.text, want);
	/* an absolute path is named as it is */
	trn_err_clear(&err);
	CHECK_INT_EQ(trn_input_open(at("nope.bin"), NULL, "data.train", &err), -1);
	snprintf(want, sizeof want, "data.train: %s: No such file or directory", at("nope.bin"));
	CHECK_STR_EQ(err.text, want);
}

int main(void)
{
	char *canon = realpath(check_tmpdir("input"), NULL);
	if (!canon) {
		perror("realpath");
		return 1;
	}
	snprintf(dir, sizeof dir, "%s", canon);
	free(canon);
	CHECK_RUN(test_kinds);
	CHECK_RUN(test_confined);
	CHECK_RUN(test_swap_after_check);
	CHECK_RUN(test_rebase);
	CHECK_RUN(test_relative_names);
	return check_finish();
}
