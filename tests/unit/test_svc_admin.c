/* tests/unit/test_svc_admin.c - service/admin.c's state dir: made 0700
 * (mkdir -p), and svc_state_dir_secure, which gives an existing one the
 * wanted mode (0700, or 0711 for owner mode), says what it was, and refuses
 * a file, a missing path and (as root) another user's directory. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "service/admin.h"

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
	CHECK_INT_EQ(svc_state_dir_secure(dir, 0700, &was, err, sizeof err), -1);
	CHECK_MSG(strstr(err, "belongs to uid 65534") != NULL, "%s", err);
	CHECK_INT_EQ(mode_of(dir), 0755);      /* left as it was */
	CHECK(chmod(dir, 0700) == 0);
	CHECK_INT_EQ(svc_state_dir_secure(dir, 0700, &was, err, sizeof err), 0);
}

int main(void)
{
	tmp = check_tmpdir("svc_admin");
	CHECK_RUN(test_make);
	CHECK_RUN(test_secure);
	return check_finish();
}
