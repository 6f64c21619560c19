/* service/job_import.c - a finished job's metrics, checkpoints and progress
 * from its directory into the database; see job_import.h. */
#include "job_import.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/job_file.h"
#include "db/checkpoints.h"
#include "db/jobs.h"
#include "db/metrics.h"
#include "jobfs.h"
#include "trainer/sha256.h"

#define BATCH 1000          /* points per insert transaction */
#define NAME_MAX_LEN 128    /* db/metrics.h */

static void stats_init(struct svc_import_stats *st)
{
	memset(st, 0, sizeof *st);
	st->last_step = -1;
	st->last_loss = NAN;
}

/* ---- metrics.jsonl ---------------------------------------------------------- */

struct batch {
	struct db_metric pt[BATCH];
	json_t *line[BATCH];        /* keeps each point's name alive until the insert */
	size_t n;
};

static int flush(struct db *db, int64_t job, struct batch *b, struct svc_import_stats *st,
                 char *err, size_t errlen)
{
	struct db_err dberr = { 0 };
	size_t inserted = 0;
	int rc = b->n ? db_metrics_insert(db, job, b->pt, b->n, &inserted, &dberr) : 0;
	for (size_t i = 0; i < b->n; i++)
		json_decref(b->line[i]);
	b->n = 0;
	if (rc) {
		snprintf(err, errlen, "%s", dberr.text);
		return -1;
	}
	st->inserted += inserted;
	return 0;
}

/* One line as a point; 0, or -1 when it is not one (root is then released). */
static int parse_point(json_t *root, struct db_metric *pt)
{
	json_t *step = json_object_get(root, "step"), *name = json_object_get(root, "name");
	json_t *value = json_object_get(root, "value"), *t = json_object_get(root, "time");
	if (!json_is_integer(step) || json_integer_value(step) < 0 || !json_is_string(name))
		return -1;
	size_t len = json_string_length(name);
	if (len == 0 || len > NAME_MAX_LEN || strlen(json_string_value(name)) != len)
		return -1;
	if (value && !json_is_number(value) && !json_is_null(value))
		return -1;
	pt->name = json_string_value(name);
	pt->step = json_integer_value(step);
	pt->value = json_is_number(value) ? json_number_value(value) : NAN;
	double secs = json_is_number(t) ? json_number_value(t) : 0;
	pt->time_ms = isfinite(secs) && secs > 0 && secs < 1e11 ? (int64_t)(secs * 1000.0) : 0;
	return 0;
}

int svc_import_metrics(struct db *db, int64_t job, const char *dir, struct svc_import_stats *st,
                       char *err, size_t errlen)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
	FILE *f = svc_jobfs_fopen(dir, "metrics.jsonl");
	if (!f) {
		if (errno == ENOENT)
			return 0;
		snprintf(err, errlen, "%s: %s", path, errno == EINVAL || errno == ELOOP ?
		         "not a regular file of the job's (skipped)" : strerror(errno));
		return -1;
	}
	struct batch *b = calloc(1, sizeof *b);
	if (!b) {
		fclose(f);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int rc = 0;
	while (rc == 0 && (len = getline(&line, &cap, f)) > 0) {
		if (line[len - 1] != '\n') {
			st->torn_tail = 1;         /* the trainer was stopped mid-write */
			break;
		}
		st->lines++;
		json_t *root = json_loadb(line, (size_t)len, JSON_REJECT_DUPLICATES, NULL);
		struct db_metric *pt = &b->pt[b->n];
		if (!json_is_object(root) || parse_point(root, pt) != 0) {
			json_decref(root);
			st->bad_lines++;
			continue;
		}
		if (strcmp(pt->name, "train/loss") == 0 && pt->step >= st->last_step) {
			st->last_step = pt->step;
			st->last_loss = pt->value;
		}
		b->line[b->n++] = root;
		if (b->n == BATCH)
			rc = flush(db, job, b, st, err, errlen);
	}
	if (rc == 0 && ferror(f)) {
		snprintf(err, errlen, "%s: read error", path);
		rc = -1;
	}
	if (rc == 0)
		rc = flush(db, job, b, st, err, errlen);
	else
		for (size_t i = 0; i < b->n; i++)
			json_decref(b->line[i]);
	free(line);
	free(b);
	fclose(f);
	return rc;
}

/* ---- checkpoints ------------------------------------------------------------ */

int svc_fd_sha256(int fd, const char *path, char hex[65], int64_t *bytes, char *err,
                  size_t errlen)
{
	struct stat before, after;
	int rc = -1;
	if (fstat(fd, &before) != 0 || trn_sha256_fd(fd, hex) != 0 || fstat(fd, &after) != 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
	} else {
		*bytes = (int64_t)after.st_size;
		/* what was read is the file as it is (its identity held): a
		 * download of it needs no second hash (api/job_file.h) */
		api_job_file_trust(&before, &after, hex);
		rc = 0;
	}
	close(fd);
	return rc;
}

/* "step-00001000.safetensors" -> 1000; -1 for any other name. */
static int64_t checkpoint_step(const char *name)
{
	static const char prefix[] = "step-", suffix[] = ".safetensors";
	if (strncmp(name, prefix, sizeof prefix - 1) != 0)
		return -1;
	const char *p = name + sizeof prefix - 1;
	int64_t step = 0;
	int digits = 0;
	for (; *p >= '0' && *p <= '9'; p++, digits++) {
		if (digits >= 18)
			return -1;
		step = step * 10 + (*p - '0');
	}
	return digits > 0 && strcmp(p, suffix) == 0 ? step : -1;
}

int svc_import_checkpoints(struct db *db, int64_t job, const char *dir,
                           struct svc_import_stats *st, char *err, size_t errlen)
{
	char cdir[4200];
	snprintf(cdir, sizeof cdir, "%s/checkpoints", dir);
	int dfd = svc_jobfs_opendir(dir, "checkpoints");
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		int e = errno;
		if (dfd >= 0)
			close(dfd);
		if (e == ENOENT)
			return 0;
		snprintf(err, errlen, "%s: %s", cdir, strerror(e));
		return -1;
	}
	int rc = 0;
	struct dirent *e;
	while (rc == 0 && (e = readdir(d)) != NULL) {
		int64_t step = checkpoint_step(e->d_name);
		if (step < 0)
			continue;
		char path[4500];
		snprintf(path, sizeof path, "%s/%s", cdir, e->d_name);
		/* a regular file of one link, never a link followed (service/jobfs.h) */
		int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		struct stat sb;
		if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_nlink != 1) {
			if (fd >= 0)
				close(fd);
			continue;                  /* pruned meanwhile, or not a checkpoint file */
		}
		struct db_checkpoint ck = {
			.step = step, .path = path,
			.time_ms = (int64_t)sb.st_mtim.tv_sec * 1000 + sb.st_mtim.tv_nsec / 1000000,
		};
		if (svc_fd_sha256(fd, path, ck.sha256, &ck.bytes, err, errlen) != 0) {
			rc = -1;
			break;
		}
		struct db_err dberr = { 0 };
		if (db_checkpoints_add(db, job, &ck, &dberr) != 0) {
			snprintf(err, errlen, "%s", dberr.text);
			rc = -1;
			break;
		}
		st->checkpoints++;
	}
	closedir(d);
	return rc;
}

/* ---- the whole job ---------------------------------------------------------- */

int svc_import_job(struct db *db, int64_t job, const char *dir, struct svc_import_stats *st,
                   char *err, size_t errlen)
{
	stats_init(st);
	int rc = svc_import_metrics(db, job, dir, st, err, errlen);
	char err2[512] = "";
	if (svc_import_checkpoints(db, job, dir, st, rc ? err2 : err, rc ? sizeof err2 : errlen))
		rc = -1;
	if (st->last_step < 0)
		return rc;
	struct db_job j = { 0 };
	struct db_err dberr = { 0 };
	if (db_jobs_get(db, job, NULL, &j, &dberr) != 0) {
		if (!rc)
			snprintf(err, errlen, "%s", dberr.text);
		return -1;
	}
	int64_t total = j.progress_total;
	json_t *spec = j.spec ? json_loads(j.spec, 0, NULL) : NULL;
	json_t *steps = json_object_get(spec, "steps");
	if (json_is_integer(steps) && json_integer_value(steps) > 0)
		total = json_integer_value(steps);
	json_decref(spec);
	db_job_release(&j);
	int64_t step = st->last_step;
	if (db_jobs_progress(db, job, step, total, st->last_loss, &dberr) != 0) {
		if (!rc)
			snprintf(err, errlen, "%s", dberr.text);
		rc = -1;
	}
	return rc;
}
