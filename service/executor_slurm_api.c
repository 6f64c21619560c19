/* service/executor_slurm_api.c - submitting a batch job through libslurm
 * (slurm_submit.h), and the --output/--error path both ways share.
 *
 * The job descriptor carries what sbatch would put in it for the Slurm
 * executor's options (executor_slurm.c builds both from one struct
 * slurm_submit): the script's text, larchd's environment (sbatch's default
 * --export=ALL) with SLURM_SUBMIT_DIR and SLURM_UMASK as sbatch adds them,
 * and the submitting user and group.
 */
#include "slurm_submit.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int slurm_submit_log_path(const char *dir, const char *name, char *out, size_t len)
{
	size_t o = 0;
	for (const char *p = dir; *p; p++) {
		if (o + 3 > len)
			return -1;
		if (*p == '%')
			out[o++] = '%';
		out[o++] = *p;
	}
	int n = snprintf(out + o, len - o, "/%s", name);
	return n < 0 || (size_t)n >= len - o ? -1 : 0;
}

#ifdef LARCH_HAVE_LIBSLURM

#include <fcntl.h>
#include <signal.h>
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trainer/env.h"

extern char **environ;

static char umask_var[32] = "SLURM_UMASK=0022";

int slurm_api_built(void)
{
	return 1;
}

int slurm_api_init(char *err, size_t errlen)
{
	const char *conf = trn_env_str("SLURM_CONF");
	if (!conf)
		conf = "/etc/slurm/slurm.conf";
	if (access(conf, R_OK) != 0) {
		snprintf(err, errlen, "libslurm: cannot read %s: %s", conf, strerror(errno));
		return -1;
	}
	/* the process's umask without umask(2), which would change it for a
	 * moment under the other threads */
	FILE *f = fopen("/proc/self/status", "re");
	char line[128];
	unsigned mask;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "Umask: %o", &mask) == 1)
			snprintf(umask_var, sizeof umask_var, "SLURM_UMASK=0%03o", mask & 0777);
	if (f)
		fclose(f);
	slurm_init(NULL);
	return 0;
}

/* The whole file, NUL-terminated, into *out (to be freed). */
static int read_all(const char *path, char **out, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0 || st.st_size > (1 << 20)) {
		snprintf(err, errlen, "%s: %s", path, fd < 0 ? strerror(errno) : "not a script");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	char *buf = malloc((size_t)st.st_size + 1);
	size_t got = 0;
	while (buf && got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	if (!buf || got != (size_t)st.st_size) {
		snprintf(err, errlen, "%s: %s", path, buf ? "short read" : "out of memory");
		free(buf);
		return -1;
	}
	buf[got] = '\0';
	*out = buf;
	return 0;
}

/* Errors after which slurmctld may not have the job: the connection, the
 * socket, authentication (munge), a controller that is busy or standing by,
 * and the system's own errno values. */
static int is_transient(int e)
{
	return e < 1000 || (e >= SLURM_COMMUNICATIONS_CONNECTION_ERROR && e < 2000) ||
	       (e >= SLURM_PROTOCOL_SOCKET_IMPL_ZERO_RECV_LENGTH && e < 7000) ||
	       e == ESLURM_ERROR_ON_DESC_TO_RECORD_COPY || e == ESLURM_IN_STANDBY_MODE ||
	       e == ESLURM_IN_STANDBY_USE_BACKUP;
}

int slurm_api_submit(const struct slurm_submit *r, char *sid, size_t sid_len, char *msg,
                     size_t msg_len, int *transient)
{
	*transient = 0;
	sid[0] = '\0';
	char script_path[4200], out_path[4200], err_path[4200];
	if ((r->script ? snprintf(script_path, sizeof script_path, "%s", r->script)
	               : snprintf(script_path, sizeof script_path, "%s/slurm.sh", r->dir)) >=
	        (int)sizeof script_path ||
	    (r->output ? snprintf(out_path, sizeof out_path, "%s", r->output) >=
	                     (int)sizeof out_path
	               : slurm_submit_log_path(r->dir, "stdout.log", out_path, sizeof out_path) != 0 ||
	                     slurm_submit_log_path(r->dir, "stderr.log", err_path,
	                                           sizeof err_path) != 0)) {
		snprintf(msg, msg_len, "the job directory's path is too long");
		return -1;
	}
	char *script = NULL;
	if (read_all(script_path, &script, msg, msg_len) != 0)
		return -1;

	/* larchd's environment, and what sbatch adds to it */
	size_t n_env = 0;
	while (environ[n_env])
		n_env++;
	char **env = calloc(n_env + 3, sizeof *env);
	char submit_dir[4200];
	if (!env) {
		free(script);
		snprintf(msg, msg_len, "out of memory");
		return -1;
	}
	size_t k = 0;
	for (size_t i = 0; i < n_env; i++)
		if (strncmp(environ[i], "SLURM_SUBMIT_DIR=", 17) != 0 &&
		    strncmp(environ[i], "SLURM_UMASK=", 12) != 0)
			env[k++] = environ[i];
	snprintf(submit_dir, sizeof submit_dir, "SLURM_SUBMIT_DIR=%s", r->dir);
	env[k++] = submit_dir;
	env[k++] = umask_var;

	job_desc_msg_t d;
	slurm_init_job_desc_msg(&d);
	char *argv0[] = { script_path, NULL };
	d.name = (char *)r->name;
	d.comment = (char *)r->comment;
	d.work_dir = (char *)r->dir;
	d.std_out = out_path;
	d.std_err = r->output ? NULL : err_path;
	if (r->array)
		d.array_inx = (char *)r->array;
	d.open_mode = OPEN_MODE_APPEND;
	d.requeue = 1;
	if (r->partition && *r->partition)
		d.partition = (char *)r->partition;
	if (r->qos && *r->qos)
		d.qos = (char *)r->qos;
	if (r->account && *r->account)
		d.account = (char *)r->account;
	d.min_nodes = d.max_nodes = (uint32_t)(r->nodes > 0 ? r->nodes : 1);
	d.num_tasks = (uint32_t)(r->ntasks > 0 ? r->ntasks : 1);
	d.cpus_per_task = (uint16_t)(r->cpus_per_task > 0 ? r->cpus_per_task : 1);
	/* what sbatch derives from -n and -c: without min_cpus slurmctld
	 * allocates one CPU whatever num_tasks says, and an srun of N tasks
	 * inside the allocation is refused ("More processors requested than
	 * permitted"); without the marks the batch environment lacks
	 * SLURM_CPUS_PER_TASK */
	d.min_cpus = d.num_tasks * d.cpus_per_task;
	d.bitflags |= JOB_NTASKS_SET | JOB_CPUS_SET;
	if (r->min_nodes > 0 && r->min_nodes < r->nodes) {
		/* elastic: what sbatch --nodes=a-b -c k*c sends (slurm_submit.h);
		 * a task count would cap the nodes at it */
		d.min_nodes = (uint32_t)r->min_nodes;
		d.num_tasks = NO_VAL;
		d.cpus_per_task = (uint16_t)(r->ntasks / r->nodes * d.cpus_per_task);
		d.min_cpus = d.min_nodes * d.cpus_per_task;
		d.bitflags &= ~JOB_NTASKS_SET;
	}
	if (r->mem_mb > 0)
		d.pn_min_memory = (uint64_t)r->mem_mb;
	char gres[32];
	if (r->gpus_per_node > 0) {
		snprintf(gres, sizeof gres, "gres:gpu:%d", r->gpus_per_node);
		d.tres_per_node = gres;
	}
	if (r->time_s > 0) {
		d.time_limit = (uint32_t)((r->time_s + 59) / 60);   /* minutes, as sbatch rounds */
		if (r->grace_s > 0) {
			d.warn_signal = SIGUSR1;
			d.warn_time = (uint16_t)r->grace_s;
			d.warn_flags = KILL_JOB_BATCH;
		}
	}
	if (r->hold)
		d.priority = 0;
	d.script = script;
	d.argc = 1;
	d.argv = argv0;
	d.environment = env;
	d.env_size = (uint32_t)k;
	d.user_id = r->as_user ? r->uid : getuid();
	d.group_id = r->as_user ? r->gid : getgid();

	submit_response_msg_t *resp = NULL;
	int rc = slurm_submit_batch_job(&d, &resp);
	int e = rc == 0 ? 0 : slurm_get_errno();
	free(env);
	free(script);
	if (rc != 0 || !resp) {
		*transient = is_transient(e);
		snprintf(msg, msg_len, "slurm_submit_batch_job: %s", slurm_strerror(e));
		return -1;
	}
	snprintf(sid, sid_len, "%u", resp->job_id);
	slurm_free_submit_response_response_msg(resp);
	return 0;
}

#else

int slurm_api_built(void)
{
	return 0;
}

int slurm_api_init(char *err, size_t errlen)
{
	snprintf(err, errlen, "larchd was built without libslurm (Debian: libslurm-dev)");
	return -1;
}

int slurm_api_submit(const struct slurm_submit *r, char *sid, size_t sid_len, char *msg,
                     size_t msg_len, int *transient)
{
	(void)r;
	(void)sid_len;
	sid[0] = '\0';
	*transient = 0;
	snprintf(msg, msg_len, "larchd was built without libslurm");
	return -1;
}

#endif
