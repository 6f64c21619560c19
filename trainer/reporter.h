/* trainer/reporter.h - posts the run's metrics and its result to larchd while
 * it trains (docs/api.md, "What larch-train sends").
 *
 * With LARCH_SERVER_URL, LARCH_JOB_ID and LARCH_JOB_TOKEN in the environment
 * every metric point written to metrics.jsonl is also put on a bounded queue
 * (trn_reporter_metric: O(1), never waits for the network, allocates
 * nothing). One background thread drains the queue: batches of at most
 * TRN_REPORT_BATCH points, POSTed to {url}/v1/jobs/{id}/metrics over one
 * reused libcurl handle; failed posts are retried with backoff. At the end
 * trn_reporter_finish posts what is still queued (for at most
 * LARCH_REPORT_FLUSH_S seconds), then result.json to {url}/v1/jobs/{id}/result,
 * and stops the thread. larchd never decides the trainer's exit code.
 *
 * An https:// larchd's certificate is verified against the system's CA
 * store, or against the PEM file LARCH_CA names (larchd's job_ca: a private
 * CA, or larchd's own self-signed certificate) instead. A certificate that
 * does not verify, or a CA file that cannot be used, ends the posting with
 * one line on stderr naming the URL and the reason; the run goes on.
 *
 * Nothing is lost when larchd is slow, down, or refuses us: metrics.jsonl
 * holds every point, and larchd imports the points it lacks from it when the
 * job ends (posts are idempotent on (name, step)). The queue only trades
 * liveness: when it is full the oldest unsent points are dropped from it.
 *
 * Without libcurl (LARCH_HAVE_CURL undefined) trn_reporter_start says so once
 * and returns NULL; trn_reporter_metric and trn_reporter_finish accept NULL.
 */
#ifndef LARCH_TRAINER_REPORTER_H
#define LARCH_TRAINER_REPORTER_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define TRN_REPORT_BATCH 1000          /* points per POST, at most (docs/api.md) */
#define TRN_REPORT_QUEUE 65536         /* points the queue holds before dropping the oldest */
#define TRN_REPORT_FLUSH_S 10.0        /* default LARCH_REPORT_FLUSH_S */
#define TRN_REPORT_URL_MAX 2048
#define TRN_REPORT_TOKEN_MAX 512
#define TRN_REPORT_ID_MAX 128
#define TRN_REPORT_CA_MAX 4096

/* ---- configuration ------------------------------------------------------- */

struct trn_reporter_config {
	char metrics_url[TRN_REPORT_URL_MAX + TRN_REPORT_ID_MAX + 32];
	char result_url[TRN_REPORT_URL_MAX + TRN_REPORT_ID_MAX + 32];
	char auth_header[TRN_REPORT_TOKEN_MAX + 32];   /* "Authorization: Bearer ..." */
	char ca_file[TRN_REPORT_CA_MAX];   /* LARCH_CA; "" = the system's CA store */
	double flush_s;                /* the final flush's deadline, seconds */
};

/* Reads LARCH_SERVER_URL, LARCH_JOB_ID, LARCH_JOB_TOKEN (an empty value counts
 * as unset), LARCH_REPORT_FLUSH_S and LARCH_CA (not opened here: a file that
 * cannot be used fails the first post, with the reason). Returns 1 and fills cfg when all three
 * are set, 0 when none is (no reporting), -1 with err when only some are or a
 * value is unusable: a startup error (exit 2). */
int trn_reporter_config_env(struct trn_reporter_config *cfg, struct trn_err *err);

/* ---- the queue (one producer, one consumer; the caller locks) ------------ */

#define TRN_MQ_NAMES 64                /* distinct metric names a run may use */
#define TRN_MQ_NAME_MAX 63

struct trn_mpoint {
	long step;
	double time;                   /* Unix seconds, as in metrics.jsonl */
	double value;                  /* non-finite is posted as null */
	int name;                      /* index into the queue's names */
};

struct trn_mqueue {
	struct trn_mpoint *ring;       /* cap slots; cap is a power of two */
	size_t cap;
	uint64_t head, tail;           /* points pushed and taken so far; head - tail <= cap */
	uint64_t dropped;              /* points pushed out unsent by newer ones */
	int n_names, next_name;        /* next_name: the guess for the next push's name */
	char names[TRN_MQ_NAMES][TRN_MQ_NAME_MAX + 1];  /* appended, never changed */
};

/* cap is rounded up to a power of two. 0, or -1 when out of memory. */
int trn_mqueue_init(struct trn_mqueue *q, size_t cap);
void trn_mqueue_release(struct trn_mqueue *q);

/* Queues a point; name is copied once per distinct name. Returns 0, 1 when
 * the queue was full and its oldest point was dropped to make room, or -1
 * when the point is refused (name longer than TRN_MQ_NAME_MAX, or a name past
 * the first TRN_MQ_NAMES). Never allocates. */
int trn_mqueue_push(struct trn_mqueue *q, long step, double time, const char *name,
                    double value);

/* Moves up to max of the oldest points to out; returns how many. */
size_t trn_mqueue_take(struct trn_mqueue *q, struct trn_mpoint *out, size_t max);

size_t trn_mqueue_count(const struct trn_mqueue *q);

/* Points queued since the last clear are dropped; returns how many. */
size_t trn_mqueue_clear(struct trn_mqueue *q);

/* Writes {"metrics":[...]} for pts, each point exactly as its metrics.jsonl
 * line, into *buf (grown with realloc; *buf may start NULL with *cap 0; the
 * caller frees it). Returns the length, or -1 when out of memory. */
/* A finite metric value in the fewest digits (9 to 17) that read back as
 * the same double: 0.25, 4294967296, 0.123456789. size >= 32. */
void trn_format_value(char *buf, size_t size, double v);

long trn_mqueue_format(const struct trn_mqueue *q, const struct trn_mpoint *pts, size_t n,
                       char **buf, size_t *cap);

/* ---- retry policy -------------------------------------------------------- */

enum trn_post_outcome {
	TRN_POST_OK,                   /* 2xx */
	TRN_POST_RETRY,                /* 408, 429, 5xx, or no answer: retry with backoff */
	TRN_POST_GIVE_UP,              /* any other status: stop posting for this run */
};

enum trn_post_outcome trn_reporter_http_outcome(long status);

/* Seconds to wait before retry number attempt (0 for the first): 1 s
 * doubling up to 30 s, scaled by a jitter factor 0.5 + u / 2 (u in [0, 1)),
 * so from 0.5 s to 30 s. */
double trn_reporter_backoff(int attempt, double u);

/* ---- the reporter -------------------------------------------------------- */

struct trn_reporter;

/* Starts the queue and the posting thread for cfg (borrowed). Returns a new
 * reporter that trn_reporter_finish ends, or NULL with a line on stderr when
 * it cannot run (built without libcurl, out of memory): the run goes on
 * with metrics.jsonl alone. */
struct trn_reporter *trn_reporter_start(const struct trn_reporter_config *cfg);

/* Queues one point (name copied). Never blocks on the network. rp may be NULL. */
void trn_reporter_metric(struct trn_reporter *rp, long step, double time, const char *name,
                         double value);

/* Posts what is queued until cfg->flush_s has passed, then result_json
 * (borrowed; NULL posts none), stops the thread and frees rp (NULL is fine).
 * Returns within about flush_s + 5 s whatever larchd does, signals included;
 * the outcome is only reported on stderr. */
void trn_reporter_finish(struct trn_reporter *rp, const char *result_json);

#endif
