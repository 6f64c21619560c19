/* tests/unit/test_exec_slurm_gone.c - service/executor_slurm_gone.c: which
 * of Slurm's records are a job's (an id slurmctld handed out again to
 * another job is never taken for it), what a job left in its directory,
 * and the verdict on a job Slurm forgot (never started, may have run,
 * ended by itself, lost too often). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "service/slurm_gone.h"

static const char *tmp;

static const struct slurm_gone_job job17 = {
	.sid = "17", .name = "larch-0123456789abcdef-j-000042", .user = "alice", .dir = "/nonexistent",
};

static void test_ours(void)
{
	CHECK(slurm_gone_ours("larch-0123456789abcdef-j-000042", "alice", &job17));
	/* the id handed out again: another larch job, another larchd, another user */
	CHECK(!slurm_gone_ours("larch-0123456789abcdef-j-000043", "alice", &job17));
	CHECK(!slurm_gone_ours("larch-fedcba9876543210-j-000042", "alice", &job17));
	CHECK(!slurm_gone_ours("larch-0123456789abcdef-j-000042", "bob", &job17));
	CHECK(!slurm_gone_ours("", "alice", &job17));
	CHECK(!slurm_gone_ours(NULL, "alice", &job17));
	struct slurm_gone_job nameless = job17;
	nameless.name = "";
	CHECK(!slurm_gone_ours("", "alice", &nameless));
}

static void test_scontrol(void)
{
	struct slurm_gone_record rec;
	const char *mine = "JobId=17 JobName=larch-0123456789abcdef-j-000042 "
	                   "UserId=alice(1001) GroupId=alice(1001) JobState=COMPLETED "
	                   "Reason=None ExitCode=0:0 Partition=debug NodeList=n1\n";
	CHECK(slurm_gone_scontrol(mine, &job17, &rec));
	CHECK_STR_EQ(rec.state, "COMPLETED");
	CHECK_STR_EQ(rec.partition, "debug");
	CHECK_STR_EQ(rec.reason, "None");
	CHECK_INT_EQ(rec.exit_code, 0);
	CHECK_INT_EQ(rec.signo, 0);
	/* slurmctld restarted on an older state gave id 17 to another job */
	const char *reused = "JobId=17 JobName=larch-0123456789abcdef-j-000050 "
	                     "UserId=alice(1001) JobState=RUNNING Reason=None ExitCode=0:0 "
	                     "Partition=debug\n";
	CHECK(!slurm_gone_scontrol(reused, &job17, &rec));
	CHECK(!rec.found);
	CHECK_INT_EQ(rec.exit_code, -1);
	/* named after it by another user */
	const char *other = "JobId=17 JobName=larch-0123456789abcdef-j-000042 "
	                    "UserId=bob(1002) JobState=FAILED ExitCode=1:0\n";
	CHECK(!slurm_gone_scontrol(other, &job17, &rec));
	CHECK(!slurm_gone_scontrol("", &job17, &rec));
	/* a signal */
	const char *killed = "JobId=17 JobName=larch-0123456789abcdef-j-000042 "
	                     "UserId=alice(1001) JobState=FAILED ExitCode=0:9 Partition=batch\n";
	CHECK(slurm_gone_scontrol(killed, &job17, &rec));
	CHECK_INT_EQ(rec.signo, 9);
	CHECK_STR_EQ(rec.partition, "batch");
}

static void test_sacct(void)
{
	struct slurm_gone_record rec;
	/* the completion log from before the crash and after it: id 17 twice,
	 * and a requeued job's two records */
	char log[] = "17|larch-0123456789abcdef-j-000042|alice(1001)|REQUEUED|0:0|debug\n"
	             "17|larch-0123456789abcdef-j-000042|alice(1001)|COMPLETED|0:0|batch\n"
	             "17|larch-0123456789abcdef-j-000050|alice(1001)|FAILED|1:0|debug\n"
	             "170|larch-0123456789abcdef-j-000042|alice(1001)|FAILED|2:0|debug\n";
	CHECK(slurm_gone_sacct(log, &job17, &rec));
	CHECK_STR_EQ(rec.state, "COMPLETED");   /* the job's last record, not the reused id's */
	CHECK_STR_EQ(rec.partition, "batch");
	CHECK_INT_EQ(rec.exit_code, 0);

	char only_reused[] = "17|larch-0123456789abcdef-j-000050|alice(1001)|COMPLETED|0:0|debug\n"
	                     "17|larch-0123456789abcdef-j-000042|bob(1002)|COMPLETED|0:0|debug\n"
	                     "17|larch-0123456789abcdef-j-000042|alicex|COMPLETED|0:0|debug\n";
	CHECK(!slurm_gone_sacct(only_reused, &job17, &rec));

	char cancelled[] = "17|larch-0123456789abcdef-j-000042|alice|CANCELLED by 0|0:15|debug\n";
	/* as sacct -c prints it from the completion log, or a bare name */
	CHECK(slurm_gone_sacct(cancelled, &job17, &rec));
	CHECK_STR_EQ(rec.state, "CANCELLED");
	CHECK_INT_EQ(rec.signo, 15);

	char torn[] = "17|larch-0123456789abcdef-j-000042|alice\n\n";
	CHECK(!slurm_gone_sacct(torn, &job17, &rec));
	char empty[] = "";
	CHECK(!slurm_gone_sacct(empty, &job17, &rec));
}

static void put(const char *dir, const char *name, const char *text)
{
	char path[1024];
	CHECK(snprintf(path, sizeof path, "%s/%s", dir, name) < (int)sizeof path);
	FILE *f = fopen(path, "w");
	CHECK_MSG(f != NULL, "%s: %s", path, strerror(errno));
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static void test_look(void)
{
	char dir[512], ckpt[600];
	snprintf(dir, sizeof dir, "%s/j-000042", tmp);
	CHECK(mkdir(dir, 0700) == 0 || errno == EEXIST);
	/* what larchd writes before sbatch: no trace of a start */
	put(dir, "spec.json", "{}\n");
	put(dir, "slurm.sh", "#!/bin/bash\n");
	put(dir, "job-token", "t\n");
	put(dir, "slurm-job-id", "17\n");
	struct slurm_gone_traces t;
	slurm_gone_look(dir, &t);
	CHECK(!t.launched && !t.output && !t.metrics && !t.result[0]);
	CHECK_INT_EQ(t.checkpoint, -1);
	CHECK(!slurm_gone_may_have_run(&t));

	put(dir, "stdout.log", "");                /* slurmstepd opened it */
	slurm_gone_look(dir, &t);
	CHECK(t.output && slurm_gone_may_have_run(&t));

	put(dir, "slurm-attempt", "0\n");
	put(dir, "result.json", "{\"status\": \"interrupted\", \"steps\": 300}\n");
	snprintf(ckpt, sizeof ckpt, "%s/checkpoints", dir);
	CHECK(mkdir(ckpt, 0700) == 0 || errno == EEXIST);
	put(ckpt, "step-00000200.safetensors", "x");
	put(ckpt, "step-00000300.safetensors", "x");
	put(ckpt, "step-00000400.safetensors.tmp", "x");   /* a torn write: not one */
	put(ckpt, "notes.txt", "x");
	slurm_gone_look(dir, &t);
	CHECK(t.launched);
	CHECK_STR_EQ(t.result, "interrupted");
	CHECK_INT_EQ(t.checkpoint, 300);

	/* result.json of this attempt (no older than its launch record), or of
	 * one before */
	char path[1024];
	struct timespec times[2] = { { 1000, 0 }, { 1000, 0 } };
	snprintf(path, sizeof path, "%s/slurm-attempt", dir);
	CHECK(utimensat(AT_FDCWD, path, times, 0) == 0);
	times[0].tv_sec = times[1].tv_sec = 2000;
	snprintf(path, sizeof path, "%s/result.json", dir);
	CHECK(utimensat(AT_FDCWD, path, times, 0) == 0);
	slurm_gone_look(dir, &t);
	CHECK(t.result_fresh);
	snprintf(path, sizeof path, "%s/slurm-attempt", dir);
	times[0].tv_sec = times[1].tv_sec = 3000;
	CHECK(utimensat(AT_FDCWD, path, times, 0) == 0);
	slurm_gone_look(dir, &t);
	CHECK(!t.result_fresh);

	slurm_gone_look("/nonexistent/j-1", &t);
	CHECK(!slurm_gone_may_have_run(&t));
}

static void test_decide(void)
{
	char why[256];
	struct slurm_gone_traces none = { .checkpoint = -1 };
	CHECK_INT_EQ(slurm_gone_decide(&none, "17", 0, 1, why, sizeof why), SLURM_GONE_RESUBMIT);
	CHECK_MSG(strstr(why, "job 17") && strstr(why, "before it started"), "%s", why);

	/* any trace: may have run, a new attempt */
	struct slurm_gone_traces launched = none;
	launched.launched = 1;
	CHECK_INT_EQ(slurm_gone_decide(&launched, "17", 0, 1, why, sizeof why), SLURM_GONE_REQUEUE);
	CHECK_MSG(strstr(why, "launch record") && strstr(why, "from the start"), "%s", why);
	struct slurm_gone_traces reported = none;
	reported.reported = 1;
	CHECK_INT_EQ(slurm_gone_decide(&reported, "17", 0, 1, why, sizeof why), SLURM_GONE_REQUEUE);
	struct slurm_gone_traces output = none;
	output.output = 1;
	CHECK_INT_EQ(slurm_gone_decide(&output, "17", 0, 1, why, sizeof why), SLURM_GONE_REQUEUE);
	struct slurm_gone_traces ckpt = launched;
	ckpt.checkpoint = 300;
	snprintf(ckpt.result, sizeof ckpt.result, "interrupted");
	CHECK_INT_EQ(slurm_gone_decide(&ckpt, "17", 1, 1, why, sizeof why), SLURM_GONE_REQUEUE);
	CHECK_MSG(strstr(why, "checkpoint of step 300"), "%s", why);

	/* ended by itself */
	struct slurm_gone_traces done = launched;
	snprintf(done.result, sizeof done.result, "completed");
	CHECK_INT_EQ(slurm_gone_decide(&done, "17", 0, 1, why, sizeof why), SLURM_GONE_COMPLETED);
	CHECK_INT_EQ(slurm_gone_decide(&done, "17", SLURM_GONE_MAX_LOST, 1, why, sizeof why),
	             SLURM_GONE_COMPLETED);
	struct slurm_gone_traces failed = launched;
	snprintf(failed.result, sizeof failed.result, "failed");
	CHECK_INT_EQ(slurm_gone_decide(&failed, "17", 0, 1, why, sizeof why), SLURM_GONE_FAILED);
	CHECK_MSG(strstr(why, "result.json says failed"), "%s", why);

	/* lost too often: FAILED with the reason, whatever it left */
	CHECK_INT_EQ(slurm_gone_decide(&none, "17", SLURM_GONE_MAX_LOST, 1, why, sizeof why),
	             SLURM_GONE_FAILED);
	CHECK_MSG(strstr(why, "3 times"), "%s", why);
	CHECK_INT_EQ(slurm_gone_decide(&ckpt, "17", SLURM_GONE_MAX_LOST, 1, why, sizeof why),
	             SLURM_GONE_FAILED);

	/* the attempt may still run on its node: waited for, until it left its
	 * result, or long enough */
	CHECK_INT_EQ(slurm_gone_decide(&launched, "17", 0, 0, why, sizeof why), SLURM_GONE_WAIT);
	CHECK_MSG(strstr(why, "may still run"), "%s", why);
	struct slurm_gone_traces ended = ckpt;
	ended.result_fresh = 1;                /* interrupted: checkpointed and exited */
	CHECK_INT_EQ(slurm_gone_decide(&ended, "17", 0, 0, why, sizeof why), SLURM_GONE_REQUEUE);
	CHECK_INT_EQ(slurm_gone_decide(&ckpt, "17", 0, 0, why, sizeof why), SLURM_GONE_WAIT);
	CHECK_INT_EQ(slurm_gone_decide(&none, "17", 0, 0, why, sizeof why), SLURM_GONE_RESUBMIT);
	CHECK_INT_EQ(slurm_gone_decide(&done, "17", 0, 0, why, sizeof why), SLURM_GONE_COMPLETED);

	/* no Slurm id known */
	CHECK_INT_EQ(slurm_gone_decide(&launched, "?", 0, 1, why, sizeof why), SLURM_GONE_REQUEUE);
	CHECK_MSG(strstr(why, "the job") && !strstr(why, "job ?"), "%s", why);
	/* the reason fits a small buffer, cut */
	char small[16];
	slurm_gone_decide(&none, "17", 0, 1, small, sizeof small);
	CHECK_INT_EQ(strlen(small), sizeof small - 1);
}

int main(void)
{
	tmp = check_tmpdir("exec_slurm_gone");
	CHECK_RUN(test_ours);
	CHECK_RUN(test_scontrol);
	CHECK_RUN(test_sacct);
	CHECK_RUN(test_look);
	CHECK_RUN(test_decide);
	return check_finish();
}
