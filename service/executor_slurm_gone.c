/* service/executor_slurm_gone.c - what became of a job that squeue no
 * longer lists: Slurm's records of it, kept only where they are the job's,
 * what it left in its directory, and the verdict; see slurm_gone.h. */
#include "slurm_gone.h"

#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "jobfs.h"
#include "slurm_cmd.h"

/* ---- Slurm's records ------------------------------------------------------------ */

int slurm_gone_ours(const char *name, const char *user, const struct slurm_gone_job *j)
{
	return name && user && j->name && j->user && j->name[0] && strcmp(name, j->name) == 0 &&
	       strcmp(user, j->user) == 0;
}

/* "Key=value" of scontrol -o into out, "" when absent. */
static void field(const char *line, const char *key, char *out, size_t len)
{
	out[0] = '\0';
	size_t klen = strlen(key);
	for (const char *p = line; (p = strstr(p, key)) != NULL; p += klen) {
		if ((p == line || p[-1] == ' ') && p[klen] == '=') {
			const char *v = p + klen + 1;
			size_t n = strcspn(v, " \n");
			snprintf(out, len, "%.*s", (int)n, v);
			return;
		}
	}
}

static void record_clear(struct slurm_gone_record *rec)
{
	memset(rec, 0, sizeof *rec);
	rec->exit_code = -1;
}

int slurm_gone_scontrol(const char *out, const struct slurm_gone_job *j,
                        struct slurm_gone_record *rec)
{
	record_clear(rec);
	char name[128], user[96], ec[32];
	field(out, "JobName", name, sizeof name);
	field(out, "UserId", user, sizeof user);
	user[strcspn(user, "(")] = '\0';          /* "alice(1001)" */
	if (!slurm_gone_ours(name, user, j))
		return 0;
	field(out, "JobState", rec->state, sizeof rec->state);
	field(out, "Reason", rec->reason, sizeof rec->reason);
	field(out, "ExitCode", ec, sizeof ec);
	field(out, "Partition", rec->partition, sizeof rec->partition);
	if (sscanf(ec, "%d:%d", &rec->exit_code, &rec->signo) != 2) {
		rec->exit_code = -1;
		rec->signo = 0;
	}
	rec->found = 1;
	return 1;
}

int slurm_gone_sacct(char *out, const struct slurm_gone_job *j, struct slurm_gone_record *rec)
{
	record_clear(rec);
	for (char *line = out, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		char *f[6];
		int k = 0;
		for (char *p = line; p && k < 6; k++) {
			f[k] = p;
			p = strchr(p, '|');
			if (p)
				*p++ = '\0';
		}
		if (k < 6)
			continue;
		f[2][strcspn(f[2], "(")] = '\0';         /* the completion log's "alice(1001)" */
		if (strcmp(f[0], j->sid) != 0 || !slurm_gone_ours(f[1], f[2], j))
			continue;
		int code = -1, sig = 0;
		if (sscanf(f[4], "%d:%d", &code, &sig) != 2) {
			code = -1;
			sig = 0;
		}
		snprintf(rec->state, sizeof rec->state, "%s", f[3]);
		rec->state[strcspn(rec->state, " ")] = '\0';   /* "CANCELLED by 0" */
		snprintf(rec->partition, sizeof rec->partition, "%s", f[5]);
		rec->reason[0] = '\0';
		rec->exit_code = code;
		rec->signo = sig;
		rec->found = 1;                       /* the last record wins */
	}
	return rec->found;
}

void slurm_gone_ask(const struct slurm_gone_job *j, int timeout_ms,
                    struct slurm_gone_record *rec)
{
	record_clear(rec);
	if (!j->sid[0] || strcmp(j->sid, "?") == 0)
		return;                               /* no id to ask about */
	struct slurm_cmd_result res;
	const char *sc[] = { "scontrol", "-o", "show", "job", j->sid, NULL };
	int found = slurm_cmd_run(sc, timeout_ms, &res) == 0 && slurm_gone_scontrol(res.out, j, rec);
	slurm_cmd_release(&res);
	if (found)
		return;
	const char *sa[] = { "sacct", "-c", "--allusers", "-n", "-P", "-j", j->sid, "-o",
	                     "JobID,JobName,User,State,ExitCode,Partition", NULL };
	if (slurm_cmd_run(sa, timeout_ms, &res) == 0)
		slurm_gone_sacct(res.out, j, rec);
	slurm_cmd_release(&res);
}

/* ---- the job directory ----------------------------------------------------------- */

/* The newest step of checkpoints/step-<step>.safetensors in dir; -1 none. */
static long newest_checkpoint(const char *dir)
{
	int fd = svc_jobfs_opendir(dir, "checkpoints");
	if (fd < 0)
		return -1;
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -1;
	}
	long best = -1;
	for (struct dirent *e; (e = readdir(d)) != NULL;) {
		char *end;
		if (strncmp(e->d_name, "step-", 5) != 0)
			continue;
		long step = strtol(e->d_name + 5, &end, 10);
		if (end != e->d_name + 5 && strcmp(end, ".safetensors") == 0 && step > best)
			best = step;
	}
	closedir(d);
	return best;
}

/* The modification time of dir/name (not followed) into *ts; 0, or -1. */
static int mtime_at(int dfd, const char *name, struct timespec *ts)
{
	struct stat st;
	if (dfd < 0 || fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return -1;
	*ts = st.st_mtim;
	return 0;
}

void slurm_gone_look(const char *dir, struct slurm_gone_traces *t)
{
	memset(t, 0, sizeof *t);
	t->launched = svc_jobfs_exists(dir, "slurm-attempt") == 1;
	t->output = svc_jobfs_exists(dir, "stdout.log") == 1 ||
	            svc_jobfs_exists(dir, "stderr.log") == 1;
	t->metrics = svc_jobfs_exists(dir, "metrics.jsonl") == 1;
	FILE *f = svc_jobfs_fopen(dir, "result.json");
	json_t *result = f ? json_loadf(f, 0, NULL) : NULL;
	if (f)
		fclose(f);
	const char *st = json_string_value(json_object_get(result, "status"));
	snprintf(t->result, sizeof t->result, "%s", st ? st : "");
	json_decref(result);
	t->checkpoint = newest_checkpoint(dir);
	struct timespec launch, ended;
	int dfd = svc_jobfs_opendir(dir, "");
	t->result_fresh = t->result[0] && mtime_at(dfd, "result.json", &ended) == 0 &&
	                  (mtime_at(dfd, "slurm-attempt", &launch) != 0 ||
	                   ended.tv_sec > launch.tv_sec ||
	                   (ended.tv_sec == launch.tv_sec && ended.tv_nsec >= launch.tv_nsec));
	if (dfd >= 0)
		close(dfd);
}

/* ---- the verdict ------------------------------------------------------------------- */

int slurm_gone_may_have_run(const struct slurm_gone_traces *t)
{
	return t->launched || t->output || t->metrics || t->reported || t->result[0] ||
	       t->checkpoint >= 0;
}

enum slurm_gone_verdict slurm_gone_decide(const struct slurm_gone_traces *t, const char *sid,
                                          int lost, int settled, char *why, size_t len)
{
	char job[48] = "the job";
	if (sid && sid[0] && strcmp(sid, "?") != 0)
		snprintf(job, sizeof job, "job %.32s", sid);
	if (strcmp(t->result, "completed") == 0) {
		snprintf(why, len, "Slurm forgot %s; result.json says completed", job);
		return SLURM_GONE_COMPLETED;
	}
	if (t->result[0] && strcmp(t->result, "interrupted") != 0) {
		snprintf(why, len, "Slurm forgot %s; result.json says %s", job, t->result);
		return SLURM_GONE_FAILED;
	}
	if (lost >= SLURM_GONE_MAX_LOST) {
		snprintf(why, len, "Slurm forgot %s, and had lost it %d times before (slurmctld "
		         "losing its state?)", job, lost);
		return SLURM_GONE_FAILED;
	}
	if (!slurm_gone_may_have_run(t)) {
		snprintf(why, len, "Slurm forgot %s before it started (no launch record, output or "
		         "result): handed over again", job);
		return SLURM_GONE_RESUBMIT;
	}
	if (!t->result_fresh && !settled) {
		snprintf(why, len, "Slurm forgot %s, which may still run: waiting for its end", job);
		return SLURM_GONE_WAIT;
	}
	const char *seen = t->launched ? "its launch record" : t->output ? "its output"
	                   : t->result[0] ? "its result" : t->checkpoint >= 0 ? "its checkpoint"
	                   : "its metrics";
	if (t->checkpoint >= 0)
		snprintf(why, len, "Slurm forgot %s after it may have run (%s): a new attempt, "
		         "from its checkpoint of step %ld", job, seen, t->checkpoint);
	else
		snprintf(why, len, "Slurm forgot %s after it may have run (%s): a new attempt, "
		         "from the start (no checkpoint)", job, seen);
	return SLURM_GONE_REQUEUE;
}
