/* tests/bench/bench_db_submit.c - durable submits per second through db/,
 * with group commit (many HTTP threads, one writer, one fsync per group) and
 * without (one transaction, one fsync, per submit), side by side.
 *
 *   bench_db_submit [--threads 32] [--seconds 2] [--rounds 3] [--dir DIR] [--no-key]
 *
 * Each round runs both modes on a new database file in DIR (default $TMPDIR
 * or /tmp: put it on the disk larchd's state directory would use), each for
 * --seconds with --threads threads calling db_jobs_submit in a loop with a
 * ~1 KB spec and (unless --no-key) an Idempotency-Key. Every submit counted
 * has returned, i.e. is committed (WAL, synchronous=FULL). Prints a line per
 * round and run, then the medians and the ratio grouped / ungrouped.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "db/db.h"
#include "db/jobs.h"
#include "db/tokens.h"

static const char spec[] =
	"{\"name\": \"fmnist-8k\", \"model\": {\"type\": \"mlp\", \"hidden\": [1024, 1024]},"
	" \"data\": {\"name\": \"fashion-mnist\"}, \"batch\": {\"global\": 8192, \"micro\": 256,"
	" \"reference\": 256}, \"optimizer\": {\"type\": \"lamb\", \"lr\": 0.01, \"weight_decay\": 0.01,"
	" \"exclude_from_adaptation\": [\"bias\", \"norm\"], \"state_dtype\": \"fp32\"},"
	" \"schedule\": {\"lr_scaling\": \"sqrt\", \"warmup\": {\"epochs\": 5}, \"decay\": \"cosine\"},"
	" \"precision\": {\"compute\": \"fp32\", \"master\": \"fp32\", \"loss_scale\": \"dynamic\","
	" \"init_scale\": 65536, \"growth_interval\": 2000}, \"offload\": {\"optimizer\": \"none\","
	" \"params\": \"none\", \"activations\": \"none\"}, \"parallel\": {\"ranks\": 1, \"zero_stage\": 0},"
	" \"epochs\": 30, \"eval_every\": 500, \"checkpoint_every\": 1000, \"seed\": 42,"
	" \"resources\": {\"nodes\": 1, \"gpus_per_node\": 0, \"cpus_per_task\": 2, \"mem\": \"4G\","
	" \"time_limit\": \"01:00:00\", \"partition\": \"debug\", \"qos\": null, \"account\": null},"
	" \"padding\": \"................................................................\"}";

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct run {
	struct db *db;
	double deadline;
	int use_key;
	atomic_long done, failed;
	atomic_long key_seq;
};

static void *client(void *arg)
{
	struct run *r = arg;
	char key[64];
	while (now_s() < r->deadline) {
		snprintf(key, sizeof key, "bench-%ld", atomic_fetch_add(&r->key_seq, 1));
		struct db_job_new in = { .owner = "alice", .name = "bench", .spec = spec,
		                         .idem_key = r->use_key ? key : NULL };
		struct db_submit out;
		struct db_err err = { 0 };
		if (db_jobs_submit(r->db, &in, &out, &err) == 0) {
			atomic_fetch_add(&r->done, 1);
		} else {
			if (atomic_fetch_add(&r->failed, 1) == 0)
				fprintf(stderr, "submit: %s\n", err.text);
		}
	}
	return NULL;
}

struct result {
	double per_s, group;
};

static struct result run_once(const char *dir, int round, int grouped, int threads,
                              double seconds, int use_key)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/bench-db-submit-%d-%d-%d.db", dir, (int)getpid(), round,
	         grouped);
	struct db_options o = { .no_group_commit = !grouped };
	struct db_err err = { 0 };
	struct db *db = db_open(path, &o, &err);
	if (!db || db_users_ensure(db, "alice", DB_ROLE_USER, &err) != 0) {
		fprintf(stderr, "bench_db_submit: %s\n", err.text);
		exit(1);
	}
	struct run r = { .db = db, .use_key = use_key };
	pthread_t *th = calloc((size_t)threads, sizeof *th);
	double t0 = now_s();
	r.deadline = t0 + seconds;
	for (int i = 0; i < threads; i++)
		pthread_create(&th[i], NULL, client, &r);
	for (int i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	double t = now_s() - t0;
	uint64_t groups, submits;
	db_jobs_submit_stats(db, &groups, &submits);
	db_close(db);
	free(th);
	char side[4200];
	unlink(path);
	snprintf(side, sizeof side, "%s-wal", path);
	unlink(side);
	snprintf(side, sizeof side, "%s-shm", path);
	unlink(side);
	struct result res = { (double)atomic_load(&r.done) / t,
	                      groups ? (double)submits / (double)groups : 1.0 };
	if (atomic_load(&r.failed))
		fprintf(stderr, "  (%ld submits failed)\n", atomic_load(&r.failed));
	return res;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv)
{
	int threads = 32, rounds = 3, use_key = 1;
	double seconds = 2.0;
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atof(argv[++i]);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
			dir = argv[++i];
		else if (!strcmp(argv[i], "--no-key"))
			use_key = 0;
		else {
			fprintf(stderr, "usage: bench_db_submit [--threads N] [--seconds S] [--rounds R] "
			        "[--dir DIR] [--no-key]\n");
			return 2;
		}
	}
	if (threads < 1 || rounds < 1 || seconds <= 0) {
		fprintf(stderr, "bench_db_submit: bad arguments\n");
		return 2;
	}
	printf("bench_db_submit: %d threads, %.1f s a run, %d rounds, spec %zu bytes, %s, dir %s\n",
	       threads, seconds, rounds, sizeof spec - 1, use_key ? "Idempotency-Key" : "no key", dir);
	printf("%-6s %-10s %12s %12s\n", "round", "mode", "submits/s", "per group");
	double *g = calloc((size_t)rounds, sizeof *g), *u = calloc((size_t)rounds, sizeof *u);
	double *gs = calloc((size_t)rounds, sizeof *gs), *ratio = calloc((size_t)rounds, sizeof *ratio);
	for (int k = 0; k < rounds; k++) {
		/* alternate which goes first, so neither always gets the warmer disk */
		for (int j = 0; j < 2; j++) {
			int grouped = (j + k) % 2 == 0;
			struct result res = run_once(dir, k, grouped, threads, seconds, use_key);
			printf("%-6d %-10s %12.0f %12.1f\n", k + 1, grouped ? "grouped" : "ungrouped",
			       res.per_s, grouped ? res.group : 1.0);
			fflush(stdout);
			if (grouped) {
				g[k] = res.per_s;
				gs[k] = res.group;
			} else {
				u[k] = res.per_s;
			}
		}
		ratio[k] = u[k] > 0 ? g[k] / u[k] : 0;
	}
	printf("median: grouped %.0f submits/s (%.1f a group), ungrouped %.0f submits/s, "
	       "ratio %.2f\n", median(g, rounds), median(gs, rounds), median(u, rounds),
	       median(ratio, rounds));
	free(g);
	free(u);
	free(gs);
	free(ratio);
	return 0;
}
