/* tests/unit/test_svc_state_dir.c - service/state_dir.c: the state dir
 * made 0700 (mkdir -p); svc_state_dir_secure, which gives an existing one
 * the wanted mode (0700, or 0711 for owner mode), says what it was, and
 * refuses a file, a missing path and (as root) another user's directory,
 * as svc_state_dir_check does without changing anything;
 * and the lock: one holder at a time (flock's locks belong to an open file,
 * so a second open in this process stands for a second larchd), the
 * refusal naming the holder's pid and URL, a stale file (a holder killed)
 * taken over, and a descriptor no exec'd child inherits. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "service/state_dir.h"

static const char *tmp;

static int mode_of(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
}

static void test_make(void)
{
	char dir[4200], err[512];
	snprintf(dir, sizeof dir, "%s/a/b/state", tmp);
	mode_t old = umask(022);
	CHECK_MSG(svc_state_dir_make(dir, err, sizeof err) == 0, "%s", err);
	umask(old);
	CHECK_INT_EQ(mode_of(dir), 0700);
}

static void test_secure(void)
{
	char dir[4200], file[4300], err[512];
	mode_t was = 0;
	snprintf(dir, sizeof dir, "%s/open", tmp);
	rmdir(dir);
	CHECK(mkdir(dir, 0700) == 0 && chmod(dir, 0755) == 0);
	CHECK_INT_EQ(svc_state_dir_check(dir, 0700, err, sizeof err), 0);
	CHECK_INT_EQ(mode_of(dir), 0755);      /* checked, not changed */
	CHECK_INT_EQ(svc_state_dir_secure(dir, 0700, &was, err, sizeof err), 1);
	CHECK_INT_EQ(was, 0755);
	CHECK_INT_EQ(mode_of(dir), 0700);
	CHECK_INT_EQ(svc_state_dir_secure(dir, 0700, &was, err, sizeof err), 0);
	/* owner mode: others may pass through, never list it */
	CHECK_INT_EQ(svc_state_dir_secure(dir, 0711, &was, err, sizeof err), 1);
	CHECK_INT_EQ(was, 0700);
	CHECK_INT_EQ(mode_of(dir), 0711);
	CHECK(chmod(dir, 0777) == 0);
	CHECK_INT_EQ(svc_state_dir_secure(dir, 0711, &was, err, sizeof err), 1);
	CHECK_INT_EQ(mode_of(dir), 0711);

	snprintf(file, sizeof file, "%s/file", tmp);
	FILE *f = fopen(file, "w");
	CHECK(f != NULL);
	if (f)
		fclose(f);
	CHECK_INT_EQ(svc_state_dir_secure(file, 0700, &was, err, sizeof err), -1);
	CHECK_MSG(strstr(err, "not a directory") != NULL, "%s", err);
	snprintf(file, sizeof file, "%s/missing", tmp);
	CHECK_INT_EQ(svc_state_dir_secure(file, 0700, &was, err, sizeof err), -1);
	CHECK_MSG(strstr(err, "No such file") != NULL, "%s", err);

	if (geteuid() != 0)
		return;                 /* chown to another user needs root */
	CHECK(chmod(dir, 0755) == 0 && chown(dir, 65534, 65534) == 0);
	CHECK_INT_EQ(svc_state_dir_check(dir, 0700, err, sizeof err), -1);
	CHECK_MSG(strstr(err, "belongs to uid 65534") != NULL, "%s", err);
	CHECK_INT_EQ(svc_state_dir_secure(dir, 0700, &was, err, sizeof err), -1);
	CHECK_MSG(strstr(err, "belongs to uid 65534") != NULL, "%s", err);
	CHECK_INT_EQ(mode_of(dir), 0755);      /* left as it was */
	CHECK(chmod(dir, 0700) == 0);
	CHECK_INT_EQ(svc_state_dir_secure(dir, 0700, &was, err, sizeof err), 0);
}

static void read_file(const char *path, char *buf, size_t len)
{
	buf[0] = '\0';
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	size_t n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
}

/* The lock file's text through the holder's own descriptor. */
static void read_fd(int fd, char *buf, size_t len)
{
	ssize_t n = pread(fd, buf, len - 1, 0);
	buf[n > 0 ? n : 0] = '\0';
}

/* svc_state_dir_lock(dir) in a child process (a record lock is the
 * process's: this one's own would be granted again); its result, and its
 * message into err. */
static int lock_elsewhere(const char *dir, char *err, size_t errlen)
{
	int p[2];
	if (pipe(p) != 0)
		return -2;
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		char msg[8400] = "";
		int rc = svc_state_dir_lock(dir, msg, sizeof msg);
		ssize_t ignored = write(p[1], rc >= 0 ? "+" : "-", 1);
		ignored = write(p[1], msg, strlen(msg));
		(void)ignored;
		_exit(0);
	}
	close(p[1]);
	size_t n = 0;
	ssize_t k;
	char buf[8400];
	while (n < sizeof buf - 1 && (k = read(p[0], buf + n, sizeof buf - 1 - n)) > 0)
		n += (size_t)k;
	buf[n] = '\0';
	close(p[0]);
	waitpid(pid, NULL, 0);
	snprintf(err, errlen, "%s", n ? buf + 1 : "");
	return n && buf[0] == '+' ? 0 : -1;
}

static void test_lock(void)
{
	char dir[4200], path[4300], err[8400], text[512], want[4400];
	snprintf(dir, sizeof dir, "%s/locked", tmp);
	CHECK_MSG(svc_state_dir_make(dir, err, sizeof err) == 0, "%s", err);
	snprintf(path, sizeof path, "%s/larchd.lock", dir);

	int fd = svc_state_dir_lock(dir, err, sizeof err);
	CHECK_MSG(fd >= 0, "%s", err);
	CHECK_INT_EQ(mode_of(path), 0600);
	read_fd(fd, text, sizeof text);   /* a close of the file would drop the lock */
	snprintf(want, sizeof want, "%ld\n", (long)getpid());
	CHECK_STR_EQ(text, want);
	CHECK_INT_EQ(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);

	/* a second taker is refused, told the holder's pid */
	err[0] = '\0';
	CHECK_INT_EQ(lock_elsewhere(dir, err, sizeof err), -1);
	snprintf(want, sizeof want, "state dir %s is in use by larchd pid %ld: ", dir,
	         (long)getpid());
	CHECK_MSG(strncmp(err, want, strlen(want)) == 0, "%s", err);
	CHECK_MSG(strstr(err, "--state-dir DIR") != NULL, "%s", err);
	/* and its URL once it listens */
	CHECK_INT_EQ(svc_state_dir_lock_note(fd, "http://127.0.0.1:8080", err, sizeof err), 0);
	read_fd(fd, text, sizeof text);
	snprintf(want, sizeof want, "%ld\nhttp://127.0.0.1:8080\n", (long)getpid());
	CHECK_STR_EQ(text, want);
	CHECK_INT_EQ(lock_elsewhere(dir, err, sizeof err), -1);
	snprintf(want, sizeof want, "larchd pid %ld (listening on http://127.0.0.1:8080): ",
	         (long)getpid());
	CHECK_MSG(strstr(err, want) != NULL, "%s", err);
	/* holding it while starting: no pid written yet */
	svc_state_dir_unlock(fd);
	read_file(path, text, sizeof text);
	CHECK_STR_EQ(text, "");
	int other = open(path, O_RDWR);
	struct flock whole = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	CHECK(other >= 0 && fcntl(other, F_SETLK, &whole) == 0);
	CHECK_INT_EQ(lock_elsewhere(dir, err, sizeof err), -1);
	CHECK_MSG(strstr(err, "in use by another larchd (starting") != NULL, "%s", err);
	close(other);

	/* a file left by a holder that was killed: its pid stays, the lock went */
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (f) {
		fputs("999999999\nhttp://127.0.0.1:1\n", f);
		fclose(f);
	}
	fd = svc_state_dir_lock(dir, err, sizeof err);
	CHECK_MSG(fd >= 0, "%s", err);
	read_fd(fd, text, sizeof text);
	snprintf(want, sizeof want, "%ld\n", (long)getpid());
	CHECK_STR_EQ(text, want);

	/* an exec'd child does not hold it: the lock is free once we let go,
	 * while the child still runs (a close-on-exec pipe's end tells when
	 * the exec happened: its read end sees EOF then) */
	int execd[2];
	CHECK(pipe2(execd, O_CLOEXEC) == 0);
	pid_t child = fork();
	if (child == 0) {
		execl("/bin/sleep", "sleep", "30", (char *)NULL);
		_exit(127);
	}
	CHECK(child > 0);
	close(execd[1]);
	char byte;
	CHECK_INT_EQ(read(execd[0], &byte, 1), 0);
	close(execd[0]);
	svc_state_dir_unlock(fd);
	CHECK_MSG(lock_elsewhere(dir, err, sizeof err) == 0,
	          "the lock outlived its holder in an exec'd child: %s", err);
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}

	/* nor does a child that has not exec'd yet (a job being set up when
	 * larchd was killed): the lock is the holder's alone */
	fd = svc_state_dir_lock(dir, err, sizeof err);
	CHECK_MSG(fd >= 0, "%s", err);
	int hold[2];
	CHECK(pipe(hold) == 0);
	child = fork();
	if (child == 0) {
		close(hold[1]);
		ssize_t ignored = read(hold[0], &byte, 1);    /* until the parent lets it go */
		(void)ignored;
		_exit(0);
	}
	close(hold[0]);
	svc_state_dir_unlock(fd);
	CHECK_MSG(lock_elsewhere(dir, err, sizeof err) == 0,
	          "the lock outlived its holder in a forked child: %s", err);
	close(hold[1]);
	if (child > 0)
		waitpid(child, NULL, 0);

	/* not a directory, or no way in */
	snprintf(path, sizeof path, "%s/missing", tmp);
	CHECK_INT_EQ(svc_state_dir_lock(path, err, sizeof err), -1);
	CHECK_MSG(strstr(err, "larchd.lock: No such file") != NULL, "%s", err);
}

int main(void)
{
	tmp = check_tmpdir("svc_state_dir");
	CHECK_RUN(test_make);
	CHECK_RUN(test_secure);
	CHECK_RUN(test_lock);
	return check_finish();
}
