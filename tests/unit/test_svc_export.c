/* tests/unit/test_svc_export.c - service/export.c with the real larch-train
 * (LARCH_TEST_TRAINER, set by ctest): a tiny GPT is trained into a scratch
 * job directory, then
 *   - an export runs to done: its files are what larch-train wrote, their
 *     sizes and sha256s are in the list and in the manifest, a second start
 *     of it answers the done one, and a new svc_export (a restarted larchd)
 *     lists it from the manifest;
 *   - exports that cannot run fail with why (a checkpoint outside the job
 *     directory, a job without a Unix user in owner mode, larch-train's own
 *     refusal of a step with no file);
 *   - the bounds hold while the workers are held: 4 queued or running of one
 *     owner (then -2), 64 queued of everyone's (then -1); closing fails the
 *     queued ones and refuses new ones.
 * The workers are held inside the job_dir hook, which they call first. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "service/export.h"
#include "trainer/sha256.h"

static const char *trainer;
static char root[2048], job_dir[2200], ckpt[2400];
static char ckpt_sha[65];

/* ---- the job_dir hook, and holding the workers in it --------------------- */

static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cond = PTHREAD_COND_INITIALIZER;
static int holding, held;
static pthread_t main_thread;

static int hook_job_dir(void *arg, long long id, char *buf, size_t len)
{
	(void)arg;
	(void)id;
	if (!pthread_equal(pthread_self(), main_thread)) {
		pthread_mutex_lock(&hold_lock);
		held++;
		pthread_cond_broadcast(&hold_cond);
		while (holding)
			pthread_cond_wait(&hold_cond, &hold_lock);
		held--;
		pthread_mutex_unlock(&hold_lock);
	}
	snprintf(buf, len, "%s", job_dir);
	return 0;
}

static void hold(int on)
{
	pthread_mutex_lock(&hold_lock);
	holding = on;
	pthread_cond_broadcast(&hold_cond);
	pthread_mutex_unlock(&hold_lock);
}

/* Waits until n workers are held (a hang guard, not a timing check). */
static void wait_held(int n)
{
	pthread_mutex_lock(&hold_lock);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 60;
	while (held < n && pthread_cond_timedwait(&hold_cond, &hold_lock, &until) == 0)
		;
	CHECK_INT_EQ(held, n);
	pthread_mutex_unlock(&hold_lock);
}

/* ---- fixtures ------------------------------------------------------------- */

static int run(char *const argv[])
{
	pid_t pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		execv(argv[0], argv);
		_exit(127);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int sha_of(const char *path, char hex[65])
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int rc = fd >= 0 ? trn_sha256_fd(fd, hex) : -1;
	if (fd >= 0)
		close(fd);
	return rc;
}

/* A tiny GPT trained 2 steps into root/jobs/j-000001 (checkpoint step 2). */
static int train(void)
{
	char path[2400];
	snprintf(path, sizeof path, "%s/tokens.bin", root);
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	int32_t head[256] = { 20240520, 1, 2048 };
	fwrite(head, sizeof head, 1, f);
	for (int i = 0; i < 2048; i++) {
		uint16_t t = (uint16_t)(i % 50);
		fwrite(&t, sizeof t, 1, f);
	}
	fclose(f);
	char spec[2400];
	snprintf(spec, sizeof spec, "%s/spec-in.json", root);
	f = fopen(spec, "w");
	if (!f)
		return -1;
	fprintf(f, "{\"name\": \"tiny\", \"model\": {\"type\": \"gpt\", \"layers\": 1, \"heads\": 2, "
	        "\"dim\": 16, \"seq\": 8, \"vocab\": 50}, \"data\": {\"format\": \"tokens_u16\", "
	        "\"train\": \"%s\"}, \"batch\": {\"global\": 2}, \"optimizer\": {\"type\": \"sgd\", "
	        "\"lr\": 0.1}, \"steps\": 2}", path);
	fclose(f);
	snprintf(job_dir, sizeof job_dir, "%s/jobs/j-000001", root);
	char jobs[2300];
	snprintf(jobs, sizeof jobs, "%s/jobs", root);
	mkdir(jobs, 0755);
	char *argv[] = { (char *)trainer, "--spec", spec, "--job-dir", job_dir, "--quiet",
	                 "--threads", "1", NULL };
	if (run(argv) != 0)
		return -1;
	snprintf(ckpt, sizeof ckpt, "%s/checkpoints/step-00000002.safetensors", job_dir);
	return sha_of(ckpt, ckpt_sha);
}

static struct svc_export *new_export(int run_as_owner)
{
	struct svc_export_config cfg = { .trainer_path = trainer, .run_as_owner = run_as_owner,
	                                 .job_dir = hook_job_dir };
	char err[256] = "";
	struct svc_export *x = svc_export_new(&cfg, err, sizeof err);
	CHECK_MSG(x != NULL, "svc_export_new: %s", err);
	return x;
}

static struct api_export_request request(const char *owner, int64_t step, const char *path)
{
	return (struct api_export_request){ .job = 1, .owner = owner, .unix_user = NULL,
	                                    .step = step, .format = "hf-gpt2", .checkpoint = path,
	                                    .checkpoint_sha256 = ckpt_sha };
}

/* The export id of job 1 as the list says, polled until it is neither
 * queued nor running (a 60 s hang guard). 0 found, -1 not. */
static int wait_export(const struct api_exports_hooks *h, const char *id, struct api_export *out)
{
	for (int i = 0; i < 6000; i++) {
		struct api_export *all = NULL;
		int n = h->list(h->arg, 1, &all), found = 0;
		for (int k = 0; k < n; k++)
			if (strcmp(all[k].id, id) == 0) {
				*out = all[k];
				found = 1;
			}
		free(all);
		if (!found)
			return -1;
		if (out->state != API_EXPORT_QUEUED && out->state != API_EXPORT_RUNNING)
			return 0;
		struct timespec d = { 0, 10 * 1000 * 1000 };
		nanosleep(&d, NULL);
	}
	return -1;
}

/* ---- cases ------------------------------------------------------------------ */

static void test_export_to_done(void)
{
	struct svc_export *ex = new_export(0);
	const struct api_exports_hooks *h = svc_export_hooks(ex);
	struct api_export_request in = request("alice", 2, ckpt);
	struct api_export x;
	CHECK_INT_EQ(h->start(h->arg, &in, &x), 0);
	CHECK_STR_EQ(x.id, "2-hf-gpt2");
	CHECK_INT_EQ(x.state, API_EXPORT_QUEUED);
	CHECK_INT_EQ(wait_export(h, "2-hf-gpt2", &x), 0);
	CHECK_MSG(x.state == API_EXPORT_DONE, "state %s: %s", api_export_state_name(x.state),
	          x.error);
	CHECK_INT_EQ(x.n_files, 2);
	CHECK_STR_EQ(x.checkpoint_sha256, ckpt_sha);
	for (int i = 0; i < x.n_files; i++) {
		char path[2600], hex[65];
		struct stat st;
		snprintf(path, sizeof path, "%s/exports/2-hf-gpt2/%s", job_dir, x.files[i].name);
		CHECK_INT_EQ(sha_of(path, hex), 0);
		CHECK_STR_EQ(x.files[i].sha256, hex);
		CHECK(stat(path, &st) == 0 && st.st_size == x.files[i].bytes);
	}
	CHECK_STR_EQ(x.files[0].name, "config.json");
	CHECK_STR_EQ(x.files[1].name, "model.safetensors");
	/* the same export again: the done one */
	struct api_export again;
	CHECK_INT_EQ(h->start(h->arg, &in, &again), 1);
	CHECK_INT_EQ(again.state, API_EXPORT_DONE);
	CHECK_STR_EQ(again.files[1].sha256, x.files[1].sha256);
	svc_export_free(ex);

	/* a new one (larchd restarted) lists it from its manifest */
	ex = new_export(0);
	h = svc_export_hooks(ex);
	struct api_export *all = NULL;
	CHECK_INT_EQ(h->list(h->arg, 1, &all), 1);
	if (all) {
		CHECK_STR_EQ(all[0].id, "2-hf-gpt2");
		CHECK_INT_EQ(all[0].state, API_EXPORT_DONE);
		CHECK_STR_EQ(all[0].files[1].sha256, x.files[1].sha256);
		CHECK_INT_EQ(all[0].created_ms, x.created_ms);
	}
	free(all);
	svc_export_free(ex);
}

static void test_exports_that_cannot_run_fail_with_why(void)
{
	struct svc_export *ex = new_export(0);
	const struct api_exports_hooks *h = svc_export_hooks(ex);
	struct api_export x;
	/* a checkpoint path outside the job's directory */
	char outside[2400];
	snprintf(outside, sizeof outside, "%s/tokens.bin", root);
	struct api_export_request in = request("alice", 7, outside);
	CHECK_INT_EQ(h->start(h->arg, &in, &x), 0);
	CHECK_INT_EQ(wait_export(h, "7-hf-gpt2", &x), 0);
	CHECK_INT_EQ(x.state, API_EXPORT_FAILED);
	CHECK_MSG(strstr(x.error, "not in the job's directory") != NULL, "%s", x.error);
	/* a step whose file is not there: larch-train's own message */
	char missing[2400];
	snprintf(missing, sizeof missing, "%s/checkpoints/step-00000009.safetensors", job_dir);
	in = request("alice", 9, missing);
	CHECK_INT_EQ(h->start(h->arg, &in, &x), 0);
	CHECK_INT_EQ(wait_export(h, "9-hf-gpt2", &x), 0);
	CHECK_INT_EQ(x.state, API_EXPORT_FAILED);
	CHECK_MSG(strstr(x.error, "larch-train --export exited") &&
	          strstr(x.error, "step-00000009"), "%s", x.error);
	CHECK_INT_EQ(x.n_files, 0);
	svc_export_free(ex);

	/* owner mode and a job without a Unix user: never run as larchd's */
	ex = new_export(1);
	h = svc_export_hooks(ex);
	in = request("alice", 2, ckpt);
	in.format = "hf-gpt2";
	char *id = "2-hf-gpt2";
	/* the done export of the first case would answer: another step */
	in.step = 1;
	id = "1-hf-gpt2";
	CHECK_INT_EQ(h->start(h->arg, &in, &x), 0);
	CHECK_INT_EQ(wait_export(h, id, &x), 0);
	CHECK_INT_EQ(x.state, API_EXPORT_FAILED);
	CHECK_MSG(strstr(x.error, "no Unix user") != NULL, "%s", x.error);
	svc_export_free(ex);
}

static void *close_export(void *arg)
{
	svc_export_close(arg);
	return NULL;
}

static void test_bounds_and_close(void)
{
	struct svc_export *ex = new_export(0);
	const struct api_exports_hooks *h = svc_export_hooks(ex);
	struct api_export x;
	char missing[2400];
	snprintf(missing, sizeof missing, "%s/checkpoints/none.safetensors", job_dir);
	hold(1);
	int accepted = 0;
	for (int step = 100; step < 104; step++) {
		struct api_export_request in = request("alice", step, missing);
		CHECK_INT_EQ(h->start(h->arg, &in, &x), 0);
	}
	wait_held(2);                       /* both workers hold one of alice's */
	struct api_export_request in = request("alice", 104, missing);
	CHECK_INT_EQ(h->start(h->arg, &in, &x), -2);
	/* the same export again is no new one: answered as it is */
	in = request("alice", 103, missing);
	CHECK_INT_EQ(h->start(h->arg, &in, &x), 1);
	CHECK_INT_EQ(x.state, API_EXPORT_QUEUED);
	/* everyone's: 64 wait (alice's 2 of them), then -1 */
	int refused = 0;
	for (int u = 0; u < 20; u++)
		for (int k = 0; k < 4; k++) {
			char owner[16];
			snprintf(owner, sizeof owner, "user%d", u);
			in = request(owner, 1000 + u * 10 + k, missing);
			int rc = h->start(h->arg, &in, &x);
			CHECK(rc == 0 || rc == -1);
			accepted += rc == 0;
			refused += rc == -1;
			if (rc == -1)
				CHECK_INT_EQ(accepted, 62);
		}
	CHECK_INT_EQ(accepted, 62);
	CHECK_INT_EQ(refused, 80 - 62);
	/* close (on a thread: it joins the workers, held here): the queued fail
	 * at once, the held ones once let go; new ones are refused */
	pthread_t closer;
	CHECK(pthread_create(&closer, NULL, close_export, ex) == 0);
	int n = 0, failed = 0, never = 0;
	for (int tries = 0; tries < 6000 && never < 64; tries++) {
		struct api_export *all = NULL;
		n = h->list(h->arg, 1, &all);
		failed = never = 0;
		for (int i = 0; i < n; i++) {
			failed += all[i].state == API_EXPORT_FAILED;
			never += strstr(all[i].error, "before the export ran") != NULL;
		}
		free(all);
		if (never < 64) {
			struct timespec d = { 0, 10 * 1000 * 1000 };
			nanosleep(&d, NULL);
		}
	}
	CHECK_INT_EQ(never, 64);
	hold(0);
	pthread_join(closer, NULL);
	struct api_export *all = NULL;
	n = h->list(h->arg, 1, &all);
	failed = 0;
	for (int i = 0; i < n; i++)
		failed += all[i].state == API_EXPORT_FAILED;
	free(all);
	CHECK_INT_EQ(n, 67);                /* and the done one of the first case */
	CHECK_INT_EQ(failed, 66);
	in = request("carol", 5000, missing);
	CHECK_INT_EQ(h->start(h->arg, &in, &x), -1);
	svc_export_free(ex);
}

int main(void)
{
	trainer = getenv("LARCH_TEST_TRAINER");
	if (!trainer || access(trainer, X_OK) != 0) {
		fprintf(stderr, "LARCH_TEST_TRAINER is not an executable larch-train: skipping\n");
		return 77;
	}
	main_thread = pthread_self();
	const char *tmp = getenv("LARCH_TEST_TMP");
	snprintf(root, sizeof root, "%s/svc_export.XXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(root) || train() != 0) {
		fprintf(stderr, "could not train the tiny GPT in %s\n", root);
		return 1;
	}
	CHECK_RUN(test_export_to_done);
	CHECK_RUN(test_exports_that_cannot_run_fail_with_why);
	CHECK_RUN(test_bounds_and_close);
	char cmd[2100];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", root);
	return check_finish();
}
