/* api/usage_get.c - GET /v1/usage: CPU and GPU hours and jobs, by user,
 * account, partition, executor and day.
 *
 * Query: from, to (RFC 3339 times, "2026-11-01T00:00:00Z", or dates,
 * "2026-11-01"; to defaults to now, from to 30 days before to), group_by (a
 * comma-separated subset of user, account, partition, executor, day;
 * "user,account" by default). The range is whole UTC hours: every hour that
 * overlaps [from, to); it is answered as used.
 *
 * {"from", "to", "group_by": [...], "usage": [{"user", "account", ...,
 * "cpu_hours", "gpu_hours", "jobs"}], "slurm": {"accounting", "read_to",
 * "error"}}: a row per group, ordered by its keys; an account or partition
 * that is none is null; "day" is "YYYY-MM-DD". Usage is that of the jobs
 * that ended (their time in the range; "jobs" counts those that ended in
 * it): Slurm's jobs as slurmdbd recorded them (sacct, read by larchd every
 * accounting_refresh_s: "slurm.read_to" says up to when), the local
 * executor's from larch's own records. Users are Unix users (Slurm's
 * names): a local job's owner is shown as their Unix user. A user sees
 * their own rows; an admin everyone's.
 *
 * One read of db/usage.h's hour totals: no Slurm command runs on the way.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acct_hooks.h"
#include "buf.h"
#include "db/usage.h"
#include "handlers.h"
#include "jobs_common.h"
#include "reply.h"

#define RANGE_MAX_DAYS 3660
#define DEFAULT_DAYS 30

enum key { K_USER, K_ACCOUNT, K_PARTITION, K_EXECUTOR, K_DAY, K_COUNT };
static const char *const key_names[K_COUNT] = { "user", "account", "partition", "executor",
	                                        "day" };

/* RFC 3339 ("2026-11-01T10:00:00Z", "...T10:00:00.5+02:00") or a date
 * ("2026-11-01", midnight UTC) in ms since the epoch; -1 when it is
 * neither. */
static int64_t parse_time(const char *s)
{
	struct tm tm;
	memset(&tm, 0, sizeof tm);
	const char *p = strptime(s, "%Y-%m-%d", &tm);
	if (!p || (s[0] < '0' || s[0] > '9') || p - s != 10)
		return -1;
	int64_t offset_s = 0, frac_ms = 0;
	if (*p == 'T' || *p == 't') {
		const char *q = strptime(p + 1, "%H:%M:%S", &tm);
		if (!q || q - p != 9)
			return -1;
		p = q;
		if (*p == '.') {
			int digits = 0;
			for (p++; *p >= '0' && *p <= '9'; p++, digits++)
				if (digits < 3)
					frac_ms = frac_ms * 10 + (*p - '0');
			if (!digits)
				return -1;
			for (; digits < 3; digits++)
				frac_ms *= 10;
		}
		if (*p == 'Z' || *p == 'z') {
			p++;
		} else if ((*p == '+' || *p == '-') && p[1] >= '0' && p[1] <= '2' && p[3] == ':') {
			int h, m, n = 0;
			if (sscanf(p + 1, "%2d:%2d%n", &h, &m, &n) != 2 || n != 5 || h > 23 || m > 59)
				return -1;
			offset_s = (h * 60 + m) * 60 * (*p == '-' ? -1 : 1);
			p += 6;
		} else {
			return -1;
		}
	}
	if (*p || tm.tm_year < 70 || tm.tm_year > 1100)
		return -1;
	time_t t = timegm(&tm);
	if (t == (time_t)-1)
		return -1;
	return ((int64_t)t - offset_s) * 1000 + frac_ms;
}

/* group_by into keys[] (in the order given), *n of them; NULL, or what is wrong. */
static const char *parse_group_by(const char *s, enum key *keys, int *n)
{
	*n = 0;
	const char *p = s;
	while (1) {
		size_t len = strcspn(p, ",");
		int k = 0;
		while (k < K_COUNT && !(strlen(key_names[k]) == len &&
		                        strncmp(key_names[k], p, len) == 0))
			k++;
		if (k == K_COUNT)
			return "must be a comma-separated list of user, account, partition, executor, day";
		for (int i = 0; i < *n; i++)
			if (keys[i] == (enum key)k)
				return "names a key twice";
		keys[(*n)++] = (enum key)k;
		if (!p[len])
			return NULL;
		p += len + 1;
	}
}

/* ---- grouping ---------------------------------------------------------------- */

struct grouping {
	const enum key *keys;
	int n;
};

static const char *row_key(const struct db_usage_row *r, enum key k, char day[16])
{
	switch (k) {
	case K_USER: return r->user;
	case K_ACCOUNT: return r->account;
	case K_PARTITION: return r->partition;
	case K_EXECUTOR: return db_usage_source_name(r->source);
	case K_DAY: {
		time_t t = (time_t)(r->day * 86400);
		struct tm tm;
		gmtime_r(&t, &tm);
		strftime(day, 16, "%Y-%m-%d", &tm);
		return day;
	}
	default: return "";
	}
}

static int cmp_rows(const void *a, const void *b, void *arg)
{
	const struct grouping *g = arg;
	const struct db_usage_row *x = a, *y = b;
	for (int i = 0; i < g->n; i++) {
		if (g->keys[i] == K_DAY) {
			if (x->day != y->day)
				return x->day < y->day ? -1 : 1;
			continue;
		}
		char d1[16], d2[16];
		int c = strcmp(row_key(x, g->keys[i], d1), row_key(y, g->keys[i], d2));
		if (c)
			return c;
	}
	return 0;
}

static double hours(int64_t ms)
{
	return round((double)ms / 3.6e6 * 1e4) / 1e4;   /* to 0.36 s */
}

static void write_row(struct api_buf *b, const struct grouping *g, const struct db_usage_row *r,
                      int64_t cpu_ms, int64_t gpu_ms, int64_t jobs)
{
	api_buf_addc(b, '{');
	for (int i = 0; i < g->n; i++) {
		char day[16];
		const char *v = row_key(r, g->keys[i], day);
		api_buf_json_key(b, key_names[g->keys[i]]);
		api_buf_json_str(b, v && *v ? v : NULL);
		api_buf_addc(b, ',');
	}
	api_buf_json_key(b, "cpu_hours");
	api_buf_json_num(b, hours(cpu_ms));
	api_buf_adds(b, ",");
	api_buf_json_key(b, "gpu_hours");
	api_buf_json_num(b, hours(gpu_ms));
	api_buf_adds(b, ",");
	api_buf_json_key(b, "jobs");
	api_buf_json_int(b, jobs);
	api_buf_addc(b, '}');
}

/* Local rows' owners as their Unix users; 0, or -1 out of memory. */
static int map_owners(const struct api_acct_hooks *acct, struct db_usage_list *list)
{
	if (!acct || !acct->unix_user)
		return 0;
	for (size_t i = 0; i < list->n; i++) {
		struct db_usage_row *r = &list->rows[i];
		char unix_user[API_USER_MAX];
		if (r->source != DB_USAGE_LOCAL ||
		    acct->unix_user(acct->arg, r->user, unix_user, sizeof unix_user) != 0 ||
		    strcmp(unix_user, r->user) == 0)
			continue;
		char *copy = strdup(unix_user);
		if (!copy)
			return -1;
		free(r->user);
		r->user = copy;
	}
	return 0;
}

static void time_value(struct api_buf *b, int64_t ms)
{
	if (ms > 0)
		api_buf_json_time(b, ms);
	else
		api_buf_adds(b, "null");
}

enum MHD_Result api_usage_get(struct api_request *req)
{
	static const char *const params[] = { "from", "to", "group_by", NULL };
	enum MHD_Result ret;
	struct db *db;
	if (api_db_or_reply(req, &db, &ret) || api_query_known_or_reply(req, params, &ret))
		return ret;
	const char *from_s = api_query(req, "from"), *to_s = api_query(req, "to");
	const char *group_s = api_query(req, "group_by");
	int64_t to = to_s ? parse_time(to_s) : db_now_ms();
	if (to < 0)
		return api_reply_bad_param(req, "to", "to: must be an RFC 3339 time "
		                           "(2026-11-01T10:00:00Z) or a date (2026-11-01)");
	int64_t from = from_s ? parse_time(from_s) : to - DEFAULT_DAYS * 86400000LL;
	if (from < 0)
		return api_reply_bad_param(req, "from", "from: must be an RFC 3339 time "
		                           "(2026-11-01T10:00:00Z) or a date (2026-11-01)");
	if (from >= to)
		return api_reply_bad_param(req, "from", "from: must be before to");
	if (to - from > RANGE_MAX_DAYS * 86400000LL)
		return api_reply_bad_param(req, "from", "from: the range is at most %d days",
		                           RANGE_MAX_DAYS);
	enum key keys[K_COUNT] = { K_USER, K_ACCOUNT };
	int n_keys = 2;
	const char *why = group_s ? parse_group_by(group_s, keys, &n_keys) : NULL;
	if (why)
		return api_reply_bad_param(req, "group_by", "group_by: %s", why);

	/* whose rows: a user's own (as larch and as Unix user), else everyone's */
	const struct api_acct_hooks *acct = req->ctx->acct;
	struct db_usage_filter f = { .from_hour = from / DB_USAGE_HOUR_MS,
	                             .to_hour = (to + DB_USAGE_HOUR_MS - 1) / DB_USAGE_HOUR_MS };
	char unix_user[API_USER_MAX] = "";
	const char *scope = api_owner_scope(req);
	if (scope) {
		f.local_user = scope;
		if (acct && acct->unix_user &&
		    acct->unix_user(acct->arg, scope, unix_user, sizeof unix_user) == 0)
			f.slurm_user = unix_user;
	}
	f.merge_users = f.merge_accounts = f.merge_partitions = 1;
	for (int i = 0; i < n_keys; i++) {
		f.by_day |= keys[i] == K_DAY;
		f.merge_users &= keys[i] != K_USER;
		f.merge_accounts &= keys[i] != K_ACCOUNT;
		f.merge_partitions &= keys[i] != K_PARTITION;
	}

	struct db_usage_list list;
	struct db_err err = { 0 };
	int rc = db_usage_query(db, &f, &list, &err);
	if (rc)
		return api_reply_db_error(req, rc, &err);
	if (map_owners(acct, &list) != 0) {
		db_usage_list_release(&list);
		return api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
	}
	struct grouping g = { keys, n_keys };
	if (list.n > 1)
		qsort_r(list.rows, list.n, sizeof *list.rows, cmp_rows, &g);

	struct api_buf b;
	api_buf_init(&b, 256 + list.n * 128);
	api_buf_adds(&b, "{\"from\":");
	api_buf_json_time(&b, f.from_hour * DB_USAGE_HOUR_MS);
	api_buf_adds(&b, ",\"to\":");
	api_buf_json_time(&b, f.to_hour * DB_USAGE_HOUR_MS);
	api_buf_adds(&b, ",\"group_by\":[");
	for (int i = 0; i < n_keys; i++) {
		if (i)
			api_buf_addc(&b, ',');
		api_buf_json_str(&b, key_names[keys[i]]);
	}
	api_buf_adds(&b, "],\"usage\":[");
	for (size_t i = 0, rows = 0; i < list.n;) {
		int64_t cpu = 0, gpu = 0, jobs = 0;
		size_t j = i;
		for (; j < list.n && cmp_rows(&list.rows[i], &list.rows[j], &g) == 0; j++) {
			cpu += list.rows[j].cpu_ms;
			gpu += list.rows[j].gpu_ms;
			jobs += list.rows[j].jobs;
		}
		if (rows++)
			api_buf_addc(&b, ',');
		write_row(&b, &g, &list.rows[i], cpu, gpu, jobs);
		i = j;
	}
	db_usage_list_release(&list);

	char why_off[256], error[256] = "";
	int64_t read_to = 0;
	int on = acct && acct->state && acct->state(acct->arg, why_off, sizeof why_off) == API_ACCT_ON;
	if (on && acct->usage_status)
		acct->usage_status(acct->arg, &read_to, error, sizeof error);
	api_buf_adds(&b, "],\"slurm\":{\"accounting\":");
	api_buf_adds(&b, on ? "true" : "false");
	api_buf_adds(&b, ",\"read_to\":");
	time_value(&b, read_to);
	api_buf_adds(&b, ",\"error\":");
	api_buf_json_str(&b, error[0] ? error : NULL);
	api_buf_adds(&b, "}}");
	return api_reply_buf(req, 200, NULL, &b);
}
