/* service/log.h - larchd's log: one line per event, to stderr or a file.
 *
 *   2026-11-22T23:01:02.123Z info  GET /v1/jobs/j-000123 200 153us
 *
 * One process-wide log (larchd has one); threads never interleave within a
 * line. Lines are written at once, but for request lines (svc_log_request),
 * the busiest: those wait in a buffer that is written out when full, every
 * 100 ms, before any other line and at svc_log_close (a kill -9 loses at
 * most the last 100 ms of them). Until svc_log_open is called the log goes
 * to stderr at level info, unbuffered.
 */
#ifndef LARCH_SERVICE_LOG_H
#define LARCH_SERVICE_LOG_H

#include <stddef.h>

enum svc_log_level {
	SVC_LOG_ERROR,
	SVC_LOG_WARN,
	SVC_LOG_INFO,
	SVC_LOG_DEBUG,
};

/* "error", "warn", "info", "debug" (static string). */
const char *svc_log_level_name(enum svc_log_level level);
/* Parses a level name; returns 0, or -1 for anything else. */
int svc_log_level_parse(const char *name, enum svc_log_level *level);

/* Logs lines of level and more severe to path (appended, created 0640;
 * NULL, "" or "-" for stderr). Returns 0, or -1 with a message in err. */
int svc_log_open(const char *path, enum svc_log_level level, char *err, size_t err_size);
/* Writes out the buffered lines, closes a log file (back to stderr). */
void svc_log_close(void);

/* Would a line of this level be written? (To skip building costly lines.) */
int svc_log_enabled(enum svc_log_level level);
void svc_log(enum svc_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A request line (level info), buffered: see above. */
void svc_log_request(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A warning that may repeat fast (every launch failing while the disk is
 * full): at most one line per interval; the next line written says how many
 * were dropped ("... (12 more like this in the last 30 s)"). Zero-initialise
 * one per kind of message (a static); safe on many threads. */
struct svc_log_limit {
	long long next_ms;               /* monotonic ms before which lines are dropped */
	long long since_ms;              /* when the last line was written */
	unsigned dropped;
};
void svc_log_limited(struct svc_log_limit *limit, unsigned interval_ms, enum svc_log_level level,
                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* snprintf for messages that may be cut at len bytes (through vsnprintf, so
 * that GCC's format-truncation warning does not apply). */
void svc_msgf(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Copies s into out (out_size bytes with the NUL) for a log line: bytes
 * outside printable ASCII become %XX, and a long s is cut with "...".
 * Returns out. */
char *svc_log_sanitize(const char *s, char *out, size_t out_size);
/* The same for one field of a line that is split on spaces (a request's
 * method and path): space and '%' become %20 and %25 too, so a path cannot
 * forge the fields after it. */
char *svc_log_sanitize_token(const char *s, char *out, size_t out_size);

#endif
