/* service/cluster_slurm.c - the admin endpoints' Slurm commands and their
 * output: queues (sinfo -s, squeue), nodes (sinfo -N), drain/resume and
 * job ops (scontrol); see cluster.h. Runs on the cluster's threads. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/jobs_common.h"
#include "cluster_internal.h"
#include "db/jobs.h"
#include "slurm_cmd.h"

#define HOSTLIST_MAX 100000     /* names one partition's hostlist may expand to */
#define FIELDS_MAX 12

/* ---- running commands --------------------------------------------------------- */

int svc_slurm_unreachable(const struct slurm_cmd_result *r)
{
	static const char *const signs[] = {
		"Unable to contact", "connect failure", "Socket timed out", "Zero Bytes were transmitted",
		"Connection refused", "Could not establish a configuration source",
		"Communication connection failure", NULL,
	};
	if (r->timed_out || r->status < 0)
		return 1;
	for (int i = 0; signs[i]; i++)
		if (strstr(r->err, signs[i]))
			return 1;
	return 0;
}

/* Runs argv: 0 when it exited 0 (res to be released by the caller either
 * way), else -1 with msg saying what failed. */
static int run(struct svc_cluster *c, const char *const argv[], struct slurm_cmd_result *res,
               char *msg, size_t len)
{
	if (slurm_cmd_run(argv, c->timeout_ms, res) == 0)
		return 0;
	slurm_cmd_describe(argv, res, msg, len);
	return -1;
}

/* The command line, for the audit entry: "scontrol hold 12". */
static void command_line(const char *const argv[], char *out, size_t len)
{
	size_t n = 0;
	out[0] = '\0';
	for (int i = 0; argv[i] && n < len; i++)
		n += (size_t)snprintf(out + n, len - n, "%s%s", i ? " " : "", argv[i]);
}

/* Splits line at '|' into at most max fields (the last keeps the rest);
 * returns how many. */
static int split(char *line, char **f, int max)
{
	int n = 0;
	f[n++] = line;
	for (char *p = line; *p && n < max; p++)
		if (*p == '|') {
			*p = '\0';
			f[n++] = p + 1;
		}
	return n;
}

static void strip_bar(char *s)
{
	size_t n = strlen(s);
	if (n && s[n - 1] == '|')
		s[n - 1] = '\0';
}

/* A whole decimal number, or -1 ("N/A", garbage). */
static long long number(const char *s)
{
	if (!s || !isdigit((unsigned char)*s))
		return -1;
	char *end;
	long long v = strtoll(s, &end, 10);
	return *end ? -1 : v;
}

static json_t *number_or_null(const char *s)
{
	long long v = number(s);
	return v < 0 ? json_null() : json_integer(v);
}

/* "A/I/O/T" as {"alloc", "idle", "other", "total"}; NULL if malformed. */
static json_t *cpus_object(const char *s)
{
	long long a, i, o, t;
	char extra;
	if (sscanf(s, "%lld/%lld/%lld/%lld%c", &a, &i, &o, &t, &extra) != 4)
		return NULL;
	return json_pack("{s:I,s:I,s:I,s:I}", "alloc", (json_int_t)a, "idle", (json_int_t)i,
	                 "other", (json_int_t)o, "total", (json_int_t)t);
}

/* ---- parsing ---------------------------------------------------------------- */

long svc_slurm_time_s(const char *s)
{
	if (!s || !*s)
		return -2;
	if (strcasecmp(s, "infinite") == 0 || strcasecmp(s, "unlimited") == 0)
		return -1;
	long d = 0, part[3] = { 0 };
	int n = 0;
	const char *p = s;
	const char *dash = strchr(s, '-');
	if (dash) {
		long long v = 0;
		for (; p < dash; p++) {
			if (!isdigit((unsigned char)*p) || v > 100000)
				return -2;
			v = v * 10 + (*p - '0');
		}
		if (p == s)
			return -2;
		d = (long)v;
		p++;
	}
	while (*p) {
		if (n == 3 || !isdigit((unsigned char)*p))
			return -2;
		long v = 0;
		while (isdigit((unsigned char)*p) && v < 1000000)
			v = v * 10 + (*p++ - '0');
		part[n++] = v;
		if (*p == ':' && p[1])
			p++;
		else if (*p)
			return -2;
	}
	if (n == 0)
		return -2;
	if (dash) {       /* D-H, D-H:M, D-H:M:S */
		long h = part[0], m = n > 1 ? part[1] : 0, sec = n > 2 ? part[2] : 0;
		return ((d * 24 + h) * 60 + m) * 60 + sec;
	}
	if (n == 1)       /* minutes */
		return part[0] * 60;
	if (n == 2)       /* M:S */
		return part[0] * 60 + part[1];
	return (part[0] * 60 + part[1]) * 60 + part[2];    /* H:M:S */
}

void svc_node_state(const char *slurm, char *out, size_t len, int *responding)
{
	char base[64];
	snprintf(base, sizeof base, "%s", slurm ? slurm : "");
	*responding = 1;
	size_t n = strlen(base);
	/* sinfo's flags: * not responding, ~ powered off, # powering up, ! pending
	 * power down, % powering down, $ maintenance, @ pending reboot, ^ rebooting,
	 * - planned */
	while (n && strchr("*~#!%$@^-", base[n - 1])) {
		if (base[n - 1] == '*')
			*responding = 0;
		base[--n] = '\0';
	}
	for (char *p = base; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	const char *name = strcmp(base, "allocated") == 0 ? "alloc"
	                   : strcmp(base, "drained") == 0 ? "drain"
	                   : base[0] ? base : "unknown";
	snprintf(out, len, "%s", name);
}

/* Appends the names of one hostlist term (no top-level comma) to out. */
static int expand_term(const char *term, size_t term_len, char *prefix, size_t plen,
                       size_t cap, json_t *out, size_t max)
{
	const char *open = memchr(term, '[', term_len);
	if (!open) {
		if (plen + term_len >= cap || term_len + plen == 0)
			return -1;
		memcpy(prefix + plen, term, term_len);
		prefix[plen + term_len] = '\0';
		if (json_array_size(out) >= max)
			return -1;
		return json_array_append_new(out, json_string(prefix));
	}
	const char *close = memchr(open, ']', term_len - (size_t)(open - term));
	if (!close)
		return -1;
	size_t head = (size_t)(open - term);
	if (plen + head >= cap)
		return -1;
	memcpy(prefix + plen, term, head);
	plen += head;
	const char *rest = close + 1;
	size_t rest_len = term_len - (size_t)(rest - term);
	/* the ranges: "1-3,07,9" */
	const char *p = open + 1;
	if (p == close)
		return -1;
	while (p < close) {
		const char *comma = memchr(p, ',', (size_t)(close - p));
		if (comma && comma + 1 == close)
			return -1;
		const char *end = comma ? comma : close;
		const char *dash = memchr(p, '-', (size_t)(end - p));
		const char *lo_end = dash ? dash : end;
		int width = (int)(lo_end - p);
		if (width <= 0 || width > 18)
			return -1;
		long long lo = 0, hi;
		for (const char *q = p; q < lo_end; q++) {
			if (!isdigit((unsigned char)*q))
				return -1;
			lo = lo * 10 + (*q - '0');
		}
		hi = lo;
		if (dash) {
			if (end - dash - 1 <= 0 || end - dash - 1 > 18)
				return -1;
			hi = 0;
			for (const char *q = dash + 1; q < end; q++) {
				if (!isdigit((unsigned char)*q))
					return -1;
				hi = hi * 10 + (*q - '0');
			}
		}
		if (hi < lo || (unsigned long long)(hi - lo) >= max)
			return -1;
		for (long long v = lo; v <= hi; v++) {
			char num[24];
			int k = snprintf(num, sizeof num, "%0*lld", width, v);
			if (plen + (size_t)k >= cap)
				return -1;
			memcpy(prefix + plen, num, (size_t)k + 1);
			if (expand_term(rest, rest_len, prefix, plen + (size_t)k, cap, out, max))
				return -1;
		}
		p = end + (comma ? 1 : 0);
	}
	return 0;
}

json_t *svc_hostlist_expand(const char *list, size_t max)
{
	json_t *out = json_array();
	char prefix[512];
	if (!out || !list || !*list)
		goto bad;
	const char *p = list;
	while (*p) {
		/* a term ends at a comma outside brackets */
		const char *q = p;
		int depth = 0;
		while (*q && !(*q == ',' && depth == 0)) {
			depth += *q == '[' ? 1 : *q == ']' ? -1 : 0;
			if (depth < 0 || depth > 1)
				goto bad;
			q++;
		}
		if (depth != 0 || q == p || expand_term(p, (size_t)(q - p), prefix, 0, sizeof prefix,
		                                        out, max))
			goto bad;
		p = *q ? q + 1 : q;
		if (!*p && q[0] == ',')
			goto bad;          /* a trailing comma */
	}
	return out;
bad:
	json_decref(out);
	return NULL;
}

/* sinfo's local "2026-11-23T03:22:39" as RFC 3339 UTC, or null. */
static json_t *slurm_time(const char *s)
{
	struct tm tm;
	memset(&tm, 0, sizeof tm);
	const char *end = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
	if (!end || *end)
		return json_null();
	tm.tm_isdst = -1;
	time_t t = mktime(&tm);
	if (t == (time_t)-1)
		return json_null();
	char text[32];
	api_time_format((int64_t)t * 1000, text);
	return text[0] ? json_string(text) : json_null();
}

/* ---- larch's own jobs ------------------------------------------------------------ */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

struct id_set {
	char **ids;
	size_t n, cap;
};

static void id_set_release(struct id_set *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->ids[i]);
	free(s->ids);
	memset(s, 0, sizeof *s);
}

/* The Slurm ids of the jobs larch has not seen end, sorted. */
static int larch_ids(struct svc_cluster *c, struct id_set *set, char *msg, size_t len)
{
	static const enum db_state states[] = { DB_STATE_PENDING, DB_STATE_QUEUED,
	                                        DB_STATE_RUNNING, DB_STATE_HELD,
	                                        DB_STATE_REQUEUED, DB_STATE_PREEMPTED };
	for (size_t s = 0; s < sizeof states / sizeof states[0]; s++) {
		char cursor[DB_CURSOR_MAX] = "";
		do {
			struct db_job_filter f = { .has_state = 1, .state = states[s],
			                           .limit = DB_LIST_MAX, .cursor = cursor };
			struct db_job_list page;
			struct db_err err = { 0 };
			if (db_jobs_list(c->db, &f, &page, &err) != 0) {
				svc_cluster_say(msg, len, "larch's jobs: %s", err.text);
				return -1;
			}
			for (size_t i = 0; i < page.n; i++) {
				if (!page.jobs[i].slurm_job_id)
					continue;
				if (set->n == set->cap) {
					size_t cap = set->cap ? set->cap * 2 : 64;
					char **grown = realloc(set->ids, cap * sizeof *grown);
					if (!grown) {
						db_job_list_release(&page);
						snprintf(msg, len, "out of memory");
						return -1;
					}
					set->ids = grown;
					set->cap = cap;
				}
				set->ids[set->n] = strdup(page.jobs[i].slurm_job_id);
				if (set->ids[set->n])
					set->n++;
			}
			snprintf(cursor, sizeof cursor, "%s", page.next_cursor);
			db_job_list_release(&page);
		} while (cursor[0]);
	}
	if (set->n)
		qsort(set->ids, set->n, sizeof *set->ids, cmp_str);
	return 0;
}

static int id_set_has(const struct id_set *s, const char *id)
{
	return s->n && bsearch(&id, s->ids, s->n, sizeof *s->ids, cmp_str) != NULL;
}

/* ---- queues -------------------------------------------------------------------- */

static json_t *queue_of(json_t *queues, const char *name)
{
	size_t i;
	json_t *q;
	json_array_foreach(queues, i, q)
		if (strcmp(json_string_value(json_object_get(q, "name")), name) == 0)
			return q;
	return NULL;
}

static void count(json_t *q, const char *key, const char *what)
{
	json_t *o = json_object_get(q, key);
	json_object_set_new(o, what, json_integer(json_integer_value(json_object_get(o, what)) + 1));
}

static json_t *queue_from_line(char *line, char *msg, size_t len)
{
	char *f[FIELDS_MAX];
	if (split(line, f, FIELDS_MAX) != 7) {
		svc_cluster_say(msg, len, "sinfo: unexpected output line \"%.80s\"", line);
		return NULL;
	}
	const char *avail = strcmp(f[1], "inact") == 0 ? "inactive" : f[1];
	size_t plen = strlen(f[5]);
	int is_default = plen && f[5][plen - 1] == '*';
	json_t *cpus = cpus_object(f[3]);
	json_t *names = strcmp(f[6], "") == 0 ? json_array() : svc_hostlist_expand(f[6], HOSTLIST_MAX);
	long limit = svc_slurm_time_s(f[4]);
	if (!cpus || !names || limit == -2) {
		json_decref(cpus);
		json_decref(names);
		svc_cluster_say(msg, len, "sinfo: unexpected fields in \"%.80s\"", line);
		return NULL;
	}
	json_t *q = json_pack("{s:s,s:s,s:b,s:{s:I,s:o},s:o,s:o,s:o,s:{s:i,s:i},s:{s:i,s:i}}",
	                      "name", f[0], "state", avail, "default", is_default,
	                      "nodes", "count", (json_int_t)(number(f[2]) < 0 ? 0 : number(f[2])),
	                      "names", names, "cpus", cpus,
	                      "max_time", limit < 0 ? json_null() : json_string(f[4]),
	                      "max_time_s", limit < 0 ? json_null() : json_integer(limit),
	                      "jobs", "pending", 0, "running", 0,
	                      "larch_jobs", "pending", 0, "running", 0);
	if (!q)
		snprintf(msg, len, "out of memory");
	return q;
}

int svc_cluster_slurm_queues(struct svc_cluster *c, char **items, char *msg, size_t len)
{
	static const char *const sinfo[] = { "sinfo", "-h", "-a", "-s", "-o",
	                                     "%R|%a|%D|%C|%l|%P|%N", NULL };
	static const char *const squeue[] = { "squeue", "-h", "-a", "-t", "PD,R,CF", "-O",
	                                      "JobID:|,Partition:|,State:|", NULL };
	struct slurm_cmd_result parts = { 0 }, jobs = { 0 };
	struct id_set mine = { 0 };
	json_t *queues = json_array();
	int rc = -1;
	*items = NULL;
	if (run(c, sinfo, &parts, msg, len) != 0 || run(c, squeue, &jobs, msg, len) != 0)
		goto out;
	if (!queues || larch_ids(c, &mine, msg, len) != 0)
		goto out;
	char *save = NULL;
	for (char *line = strtok_r(parts.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		json_t *q = queue_from_line(line, msg, len);
		if (!q)
			goto out;
		json_array_append_new(queues, q);
	}
	for (char *line = strtok_r(jobs.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *f[FIELDS_MAX];
		if (split(line, f, FIELDS_MAX) < 3)
			continue;
		int pending = strcmp(f[2], "PENDING") == 0;
		int mine_too = id_set_has(&mine, f[0]);
		char *psave = NULL;
		for (char *p = strtok_r(f[1], ",", &psave); p; p = strtok_r(NULL, ",", &psave)) {
			json_t *q = queue_of(queues, p);
			if (!q)
				continue;
			count(q, "jobs", pending ? "pending" : "running");
			if (mine_too)
				count(q, "larch_jobs", pending ? "pending" : "running");
		}
	}
	*items = json_dumps(queues, JSON_COMPACT);
	rc = *items ? 0 : -1;
	if (rc)
		snprintf(msg, len, "out of memory");
out:
	slurm_cmd_release(&parts);
	slurm_cmd_release(&jobs);
	id_set_release(&mine);
	json_decref(queues);
	return rc;
}

/* ---- nodes --------------------------------------------------------------------- */

static json_t *node_from_fields(char **f, const char *reason)
{
	char state[64];
	int responding;
	svc_node_state(f[1], state, sizeof state, &responding);
	json_t *cpus = cpus_object(f[2]);
	if (!cpus)
		return NULL;
	json_t *why = json_null();
	if (strcmp(reason, "none") != 0 && reason[0])
		why = json_pack("{s:s,s:o,s:o}", "text", reason,
		                "user", strcmp(f[7], "Unknown") == 0 || !f[7][0] ? json_null()
		                                                                 : json_string(f[7]),
		                "time", slurm_time(f[8]));
	if (!why)
		why = json_null();         /* a reason that is not UTF-8 */
	return json_pack("{s:s,s:s,s:s,s:b,s:o,s:{s:o,s:o,s:o},s:[],s:o}",
	                 "name", f[0], "state", state, "slurm_state", f[1],
	                 "responding", responding, "cpus", cpus,
	                 "memory_mb", "total", number_or_null(f[3]), "alloc", number_or_null(f[4]),
	                 "free", number_or_null(f[5]), "partitions", "reason", why);
}

int svc_cluster_slurm_nodes(struct svc_cluster *c, const char *node, char **items, char *msg,
                            size_t len)
{
	const char *argv[] = { "sinfo", "-h", "-a", "-N", "-O",
	                       "NodeList:|,StateLong:|,CPUsState:|,Memory:|,AllocMem:|,FreeMem:|,"
	                       "Partition:|,User:|,Timestamp:|,Reason:|",
	                       node ? "-n" : NULL, node, NULL };
	struct slurm_cmd_result res;
	*items = NULL;
	if (run(c, argv, &res, msg, len) != 0) {
		slurm_cmd_release(&res);
		return -1;
	}
	json_t *nodes = json_array();
	int rc = -1;
	char *save = NULL;
	for (char *line = strtok_r(res.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *f[FIELDS_MAX];
		if (split(line, f, 10) != 10) {
			svc_cluster_say(msg, len, "sinfo: unexpected output line \"%.80s\"", line);
			goto out;
		}
		strip_bar(f[9]);
		size_t plen = strlen(f[6]);
		if (plen && f[6][plen - 1] == '*')
			f[6][plen - 1] = '\0';
		json_t *n = NULL, *e;
		size_t i;
		json_array_foreach(nodes, i, e)
			if (strcmp(json_string_value(json_object_get(e, "name")), f[0]) == 0)
				n = e;
		if (!n) {
			n = node_from_fields(f, f[9]);
			if (!n) {
				svc_cluster_say(msg, len, "sinfo: unexpected fields in \"%.80s\"", line);
				goto out;
			}
			json_array_append_new(nodes, n);
		}
		if (f[6][0])
			json_array_append_new(json_object_get(n, "partitions"), json_string(f[6]));
	}
	*items = json_dumps(nodes, JSON_COMPACT);
	rc = *items ? 0 : -1;
	if (rc)
		snprintf(msg, len, "out of memory");
out:
	json_decref(nodes);
	slurm_cmd_release(&res);
	return rc;
}

/* ---- actions ------------------------------------------------------------------- */

/* A failed action's status and message from what Slurm said. */
static void refused(struct api_admin_call *call, const struct slurm_cmd_result *res,
                    const char *what)
{
	if (svc_slurm_unreachable(res)) {
		call->status = 503;
		svc_cluster_say(call->message, sizeof call->message, "slurm is unreachable: %s", what);
	} else {
		call->status = 409;
		svc_cluster_say(call->message, sizeof call->message, "slurm refused: %s", what);
	}
}

int svc_cluster_slurm_node(struct svc_cluster *c, struct api_admin_call *call)
{
	char node_arg[256], reason_arg[1100];
	snprintf(node_arg, sizeof node_arg, "NodeName=%s", call->node);
	snprintf(reason_arg, sizeof reason_arg, "Reason=%s", call->reason ? call->reason : "");
	const char *argv[] = { "scontrol", "update", node_arg,
	                       call->op == API_ADMIN_DRAIN ? "State=DRAIN" : "State=RESUME",
	                       call->op == API_ADMIN_DRAIN ? reason_arg : NULL, NULL };
	struct slurm_cmd_result res;
	char what[API_ADMIN_MESSAGE_MAX];
	int rc = run(c, argv, &res, what, sizeof what);
	if (rc != 0) {
		if (!svc_slurm_unreachable(&res) && strstr(res.err, "Invalid node name")) {
			call->status = 404;
			svc_cluster_say(call->message, sizeof call->message, "slurm has no node %s", call->node);
		} else if (!svc_slurm_unreachable(&res) && strstr(res.err, "Invalid node state")) {
			call->status = 409;
			svc_cluster_say(call->message, sizeof call->message, "node %s cannot resume: it is not "
			         "drained, draining or down (%s)", call->node, what);
		} else {
			refused(call, &res, what);
		}
		slurm_cmd_release(&res);
		return 0;
	}
	slurm_cmd_release(&res);
	command_line(argv, call->message, sizeof call->message);

	/* the answer: the node(s) as they are now */
	char *items = NULL, error[API_ADMIN_MESSAGE_MAX] = "";
	if (svc_cluster_slurm_nodes(c, call->node, &items, error, sizeof error) != 0)
		items = NULL;
	call->body = svc_cluster_view_body(c->executor, "nodes", items ? items : "[]",
	                                   db_now_ms(), items ? NULL : error);
	free(items);
	call->status = call->body ? 200 : 500;
	if (!call->body)
		svc_cluster_say(call->message, sizeof call->message, "out of memory");
	return 1;
}

/* Slurm job ids as larch stores them: digits, maybe "_" and more digits. */
static int slurm_id_ok(const char *s)
{
	size_t n = strlen(s);
	return n >= 1 && n < 24 && strspn(s, "0123456789_") == n && isdigit((unsigned char)s[0]);
}

/* "Key=value" of one scontrol -o line into out, "" when absent. */
static void scontrol_field(const char *line, const char *key, char *out, size_t len)
{
	out[0] = '\0';
	size_t klen = strlen(key);
	for (const char *p = line; (p = strstr(p, key)) != NULL; p += klen)
		if ((p == line || p[-1] == ' ') && p[klen] == '=') {
			const char *v = p + klen + 1;
			snprintf(out, len, "%.*s", (int)strcspn(v, " \n"), v);
			return;
		}
}

int svc_slurm_job_is(const char *out, const char *name, const char *user, long long task,
                     char *state, size_t len)
{
	char line[8192], f_name[128], f_user[96], f_task[64];
	state[0] = '\0';
	if (!out || !name || !name[0] || !user || !user[0])
		return 0;
	snprintf(line, sizeof line, "%.*s", (int)strcspn(out, "\n"), out);   /* the first record */
	scontrol_field(line, "JobName", f_name, sizeof f_name);
	scontrol_field(line, "UserId", f_user, sizeof f_user);
	f_user[strcspn(f_user, "(")] = '\0';          /* "alice(1001)" */
	if (strcmp(f_name, name) != 0 || strcmp(f_user, user) != 0)
		return 0;
	scontrol_field(line, "ArrayTaskId", f_task, sizeof f_task);
	if (task >= 0 && !f_task[0])
		return 0;                                   /* not an array task */
	if (task < 0 && f_task[0])
		return 0;
	if (task >= 0 && strspn(f_task, "0123456789") == strlen(f_task) &&
	    strtoll(f_task, NULL, 10) != task)
		return 0;                                   /* another task of the array */
	scontrol_field(line, "JobState", state, len);
	return state[0] != '\0';
}

/* Whether the Slurm job call->slurm_job_id is still the larch job's (its
 * name and user): 0 with Slurm's state of it in state, or -1 with the
 * call's failure filled (409 when it has ended or is another job's). */
static int job_check(struct svc_cluster *c, struct api_admin_call *call, char *state,
                     size_t len)
{
	const char *argv[] = { "scontrol", "-o", "show", "job", call->slurm_job_id, NULL };
	char name[SLURM_NAME_MAX], larch_id[DB_JOB_ID_MAX];
	slurm_job_name(c->instance, call->job_id, call->sweep, name, sizeof name);
	db_job_id_format((int64_t)call->job_id, larch_id);
	const char *user = call->unix_user && call->unix_user[0] ? call->unix_user : c->self_user;
	struct slurm_cmd_result res;
	char what[API_ADMIN_MESSAGE_MAX];
	int rc = run(c, argv, &res, what, sizeof what);
	if (rc == 0 && !svc_slurm_job_is(res.out, name, user, call->sweep > 0 ? call->sweep_index
	                                                                       : -1, state, len)) {
		call->status = 409;
		svc_cluster_say(call->message, sizeof call->message, "slurm job %s is not %s's (it is "
		                "another job's now): nothing done", call->slurm_job_id, larch_id);
		rc = -1;
	} else if (rc != 0 && !svc_slurm_unreachable(&res) && strstr(res.err, "Invalid job id")) {
		call->status = 409;
		svc_cluster_say(call->message, sizeof call->message, "slurm no longer has job %s (it has "
		         "ended)", call->slurm_job_id);
	} else if (rc != 0) {
		refused(call, &res, what);
	}
	slurm_cmd_release(&res);
	return rc;
}

/* Slurm takes Nice= of a job that was given a priority and ignores it
 * (exit 0): look, and say so rather than claim it was done. */
static void check_nice(struct svc_cluster *c, struct api_admin_call *call)
{
	const char *argv[] = { "squeue", "-h", "-j", call->slurm_job_id, "-O", "Nice:|", NULL };
	struct slurm_cmd_result res;
	char what[API_ADMIN_MESSAGE_MAX];
	if (run(c, argv, &res, what, sizeof what) == 0) {
		long long now = strtoll(res.out, NULL, 10);
		if (now != call->update.nice) {
			call->status = 409;
			call->partial = 1;
			svc_cluster_say(call->message, sizeof call->message, "slurm kept nice %lld for "
			                "job %s (a job given a priority ignores nice; the rest of the "
			                "update was done)", now, call->slurm_job_id);
		}
	}
	slurm_cmd_release(&res);
}

int svc_cluster_slurm_job(struct svc_cluster *c, struct api_admin_call *call)
{
	if (!call->slurm_job_id || !slurm_id_ok(call->slurm_job_id)) {
		call->status = 500;
		svc_cluster_say(call->message, sizeof call->message, "the job's slurm id \"%.32s\" is not "
		         "one", call->slurm_job_id ? call->slurm_job_id : "");
		return 0;
	}
	char job_arg[64], prio[48], nice[48], limit[48], part[96], state[64];
	const char *argv[10] = { "scontrol" };
	int n = 1;
	if (job_check(c, call, state, sizeof state) != 0)
		return 0;
	switch (call->op) {
	case API_ADMIN_HOLD: {
		if (strcmp(state, "PENDING") != 0) {
			call->status = 409;
			svc_cluster_say(call->message, sizeof call->message, "slurm job %s is %s: only a "
			         "pending job can be held", call->slurm_job_id, state);
			return 0;
		}
		argv[n++] = "hold";
		argv[n++] = call->slurm_job_id;
		break;
	}
	case API_ADMIN_RELEASE:
		argv[n++] = "release";
		argv[n++] = call->slurm_job_id;
		break;
	case API_ADMIN_REQUEUE:
		argv[n++] = "requeue";
		argv[n++] = call->slurm_job_id;
		break;
	case API_ADMIN_UPDATE: {
		const struct api_admin_update *u = &call->update;
		argv[n++] = "update";
		snprintf(job_arg, sizeof job_arg, "JobId=%s", call->slurm_job_id);
		argv[n++] = job_arg;
		if (u->has_priority) {
			snprintf(prio, sizeof prio, "Priority=%lld", u->priority);
			argv[n++] = prio;
		}
		if (u->has_nice) {
			snprintf(nice, sizeof nice, "Nice=%lld", u->nice);
			argv[n++] = nice;
		}
		if (u->time_limit_s > 0) {
			long s = u->time_limit_s;
			snprintf(limit, sizeof limit, "TimeLimit=%ld-%02ld:%02ld:%02ld", s / 86400,
			         s / 3600 % 24, s / 60 % 60, s % 60);
			argv[n++] = limit;
		}
		if (u->partition) {
			snprintf(part, sizeof part, "Partition=%s", u->partition);
			argv[n++] = part;
		}
		break;
	}
	default:
		call->status = 500;
		svc_cluster_say(call->message, sizeof call->message, "not a job operation");
		return 0;
	}
	argv[n] = NULL;
	struct slurm_cmd_result res;
	char what[API_ADMIN_MESSAGE_MAX];
	if (run(c, argv, &res, what, sizeof what) != 0) {
		if (!svc_slurm_unreachable(&res) && strstr(res.err, "Invalid job id")) {
			call->status = 409;
			svc_cluster_say(call->message, sizeof call->message, "slurm no longer has job %s (it "
			         "has ended)", call->slurm_job_id);
		} else if (!svc_slurm_unreachable(&res) && strstr(res.err, "Invalid partition")) {
			call->status = 400;
			svc_cluster_say(call->message, sizeof call->message, "partition: slurm has no "
			         "partition %s", call->update.partition ? call->update.partition : "?");
		} else {
			refused(call, &res, what);
		}
		slurm_cmd_release(&res);
		return 0;
	}
	slurm_cmd_release(&res);
	call->status = 200;
	command_line(argv, call->message, sizeof call->message);
	if (call->op == API_ADMIN_UPDATE && call->update.has_nice)
		check_nice(c, call);
	return 1;
}
