/* service/accounting_slurm.c - Slurm's accounting tools and their output:
 * scontrol show config (is slurmdbd there), sacctmgr and sshare (accounts,
 * limits, fair share), sacct (usage), sacctmgr modify (limits); see
 * accounting.h. Runs on the accounting thread. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accounting_internal.h"
#include "cluster.h"
#include "db/db.h"
#include "log.h"
#include "slurm_cmd.h"

#define FIELDS_MAX 12

/* Splits line at '|' into at most max fields; returns how many there were
 * (max + 1: more than max). */
static int split(char *line, char **f, int max)
{
	int n = 0;
	f[n++] = line;
	for (char *p = line; *p; p++)
		if (*p == '|') {
			if (n == max)
				return max + 1;
			*p = '\0';
			f[n++] = p + 1;
		}
	return n;
}

/* Trims spaces at both ends, in place. */
static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	size_t n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
		s[--n] = '\0';
	return s;
}

/* A whole number >= 0, or -1 for "" and anything else. */
static long long whole(const char *s)
{
	if (!s || !isdigit((unsigned char)*s))
		return -1;
	char *end;
	long long v = strtoll(s, &end, 10);
	return *end ? -1 : v;
}

static json_t *whole_or_null(const char *s)
{
	long long v = whole(s);
	return v < 0 ? json_null() : json_integer(v);
}

static json_t *real_or_null(const char *s)
{
	if (!s || !*s)
		return json_null();
	char *end;
	double v = strtod(s, &end);
	return *end || end == s ? json_null() : json_real(v);
}

/* ---- parsing ---------------------------------------------------------------- */

int svc_acct_tres(const char *tres, long long *cpu, long long *gpu)
{
	*cpu = -1;
	*gpu = -1;
	long long typed = -1;
	const char *p = tres ? tres : "";
	while (*p) {
		const char *end = strchr(p, ',');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		const char *eq = memchr(p, '=', n);
		if (!eq || eq == p)
			return -1;
		char name[64], value[32];
		size_t kn = (size_t)(eq - p), vn = n - kn - 1;
		if (kn >= sizeof name || vn >= sizeof value || vn == 0)
			return -1;
		memcpy(name, p, kn);
		name[kn] = '\0';
		memcpy(value, eq + 1, vn);
		value[vn] = '\0';
		if (strcmp(name, "cpu") == 0 || strcmp(name, "gres/gpu") == 0 ||
		    strncmp(name, "gres/gpu:", 9) == 0) {
			long long v = whole(value);
			if (v < 0)
				return -1;
			if (strcmp(name, "cpu") == 0)
				*cpu = v;
			else if (strcmp(name, "gres/gpu") == 0)
				*gpu = v;
			else
				typed = (typed < 0 ? 0 : typed) + v;
		}
		p += n + (end ? 1 : 0);
	}
	if (*gpu < 0)
		*gpu = typed;
	return 0;
}

static json_t *limits_object(const char *max_jobs, const char *max_wall, const char *grp_tres)
{
	long long cpu, gpu;
	if (svc_acct_tres(grp_tres, &cpu, &gpu) != 0 || (max_jobs[0] && whole(max_jobs) < 0))
		return NULL;
	long wall = max_wall[0] ? svc_slurm_time_s(max_wall) : -1;
	if (wall == -2)
		return NULL;
	return json_pack("{s:o,s:o,s:o,s:{s:o,s:o}}", "max_jobs", whole_or_null(max_jobs),
	                 "max_wall", wall < 0 ? json_null() : json_string(max_wall),
	                 "max_wall_s", wall < 0 ? json_null() : json_integer(wall),
	                 "grp_tres", "cpu", cpu < 0 ? json_null() : json_integer(cpu),
	                 "gpu", gpu < 0 ? json_null() : json_integer(gpu));
}

/* sshare's row of (account, user) as the fairshare object, or null. */
static json_t *fairshare_of(json_t *shares, const char *account, const char *user)
{
	char key[256];
	snprintf(key, sizeof key, "%s|%s", account, user);
	json_t *f = json_object_get(shares, key);
	return f ? json_incref(f) : json_null();
}

static int by_name(const void *a, const void *b)
{
	const char *x = json_string_value(json_object_get(*(json_t *const *)a, "name"));
	const char *y = json_string_value(json_object_get(*(json_t *const *)b, "name"));
	int c = strcmp(x ? x : "", y ? y : "");
	if (c)
		return c;
	const char *p = json_string_value(json_object_get(*(json_t *const *)a, "partition"));
	const char *q = json_string_value(json_object_get(*(json_t *const *)b, "partition"));
	return strcmp(p ? p : "", q ? q : "");
}

/* Sorts a JSON array of objects by "name" (then "partition"), in place. */
static int sort_by_name(json_t *array)
{
	size_t n = json_array_size(array);
	if (n < 2)
		return 0;
	json_t **items = malloc(n * sizeof *items);
	if (!items)
		return -1;
	for (size_t i = 0; i < n; i++)
		items[i] = json_incref(json_array_get(array, i));
	qsort(items, n, sizeof *items, by_name);
	json_array_clear(array);
	int rc = 0;
	for (size_t i = 0; i < n; i++)
		rc |= json_array_append_new(array, items[i]);
	free(items);
	return rc;
}

/* {"account|user": fairshare object} from sshare's output. */
static json_t *parse_sshare(const char *text, char *err, size_t errlen)
{
	json_t *shares = json_object();
	char *copy = strdup(text ? text : "");
	if (!shares || !copy)
		goto oom;
	char *save = NULL;
	for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *f[FIELDS_MAX], shown[81];
		if (!trim(line)[0])
			continue;
		svc_msgf(shown, sizeof shown, "%s", line);
		if (split(line, f, 7) != 7) {
			svc_msgf(err, errlen, "sshare: unexpected output line \"%s\"", shown);
			goto bad;
		}
		char key[256];
		snprintf(key, sizeof key, "%s|%s", trim(f[0]), trim(f[1]));
		json_t *o = json_pack("{s:o,s:o,s:o,s:o,s:o}", "raw_shares", whole_or_null(f[2]),
		                      "norm_shares", real_or_null(f[3]), "raw_usage",
		                      whole_or_null(f[4]), "effective_usage", real_or_null(f[5]),
		                      "fairshare", real_or_null(f[6]));
		if (!o || json_object_set_new(shares, key, o))
			goto oom;
	}
	free(copy);
	return shares;
oom:
	svc_msgf(err, errlen, "out of memory");
bad:
	free(copy);
	json_decref(shares);
	return NULL;
}

json_t *svc_acct_parse_accounts(const char *assoc, const char *users, const char *sshare,
                                char *err, size_t errlen)
{
	json_t *accounts = json_array(), *defaults = json_object(), *shares = NULL;
	json_t *index = json_object();      /* account name -> its object in accounts */
	char *a_copy = strdup(assoc ? assoc : ""), *u_copy = strdup(users ? users : "");
	if (!accounts || !defaults || !index || !a_copy || !u_copy) {
		svc_msgf(err, errlen, "out of memory");
		goto bad;
	}
	if (sshare && !(shares = parse_sshare(sshare, err, errlen)))
		goto bad;
	char *save = NULL;
	for (char *line = strtok_r(u_copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *f[FIELDS_MAX], shown[81];
		if (!trim(line)[0])
			continue;
		svc_msgf(shown, sizeof shown, "%s", line);
		if (split(line, f, 2) != 2 || !f[0][0]) {
			svc_msgf(err, errlen, "sacctmgr show user: unexpected output line \"%s\"", shown);
			goto bad;
		}
		json_object_set_new(defaults, f[0], json_string(f[1]));
	}
	/* the accounts first (their rows have no user), then the users, in any order */
	for (int pass = 0; pass < 2; pass++) {
		char *text = strdup(a_copy);
		if (!text) {
			svc_msgf(err, errlen, "out of memory");
			goto bad;
		}
		for (char *line = strtok_r(text, "\n", &save); line;
		     line = strtok_r(NULL, "\n", &save)) {
			char *f[FIELDS_MAX], shown[81];
			if (!trim(line)[0])
				continue;
			svc_msgf(shown, sizeof shown, "%s", line);
			if (split(line, f, 8) != 8 || !f[0][0]) {
				svc_msgf(err, errlen, "sacctmgr show assoc: unexpected output line \"%s\"",
				    shown);
				free(text);
				goto bad;
			}
			int is_user = f[1][0] != '\0';
			if (is_user != pass)
				continue;
			json_t *limits = limits_object(f[5], f[6], f[7]);
			if (!limits) {
				svc_msgf(err, errlen, "sacctmgr show assoc: unexpected limits in \"%s\"", shown);
				free(text);
				goto bad;
			}
			json_t *acc = json_object_get(index, f[0]);
			if (!is_user) {
				if (acc) {            /* one row per account; a second is ignored */
					json_decref(limits);
					continue;
				}
				acc = json_pack("{s:s,s:o,s:o,s:o,s:[]}", "name", f[0], "parent",
				                f[3][0] ? json_string(f[3]) : json_null(), "limits", limits,
				                "fairshare", shares ? fairshare_of(shares, f[0], "")
				                                    : json_null(), "users");
				if (!acc || json_array_append_new(accounts, acc) ||
				    json_object_set(index, f[0], acc)) {
					svc_msgf(err, errlen, "out of memory");
					free(text);
					goto bad;
				}
				continue;
			}
			if (!acc) {
				json_decref(limits);
				continue;           /* a user row of an account not listed: skip it */
			}
			const char *def = json_string_value(json_object_get(defaults, f[1]));
			json_t *u = json_pack("{s:s,s:o,s:b,s:o,s:o}", "name", f[1], "partition",
			                      f[2][0] ? json_string(f[2]) : json_null(), "default",
			                      def && strcmp(def, f[0]) == 0, "limits", limits,
			                      "fairshare", shares ? fairshare_of(shares, f[0], f[1])
			                                          : json_null());
			if (!u || json_array_append_new(json_object_get(acc, "users"), u)) {
				svc_msgf(err, errlen, "out of memory");
				free(text);
				goto bad;
			}
		}
		free(text);
	}
	size_t i;
	json_t *acc;
	int rc = sort_by_name(accounts);
	json_array_foreach(accounts, i, acc)
		rc |= sort_by_name(json_object_get(acc, "users"));
	if (rc) {
		svc_msgf(err, errlen, "out of memory");
		goto bad;
	}
	json_decref(index);
	json_decref(defaults);
	json_decref(shares);
	free(a_copy);
	free(u_copy);
	return accounts;
bad:
	json_decref(index);
	json_decref(defaults);
	json_decref(shares);
	json_decref(accounts);
	free(a_copy);
	free(u_copy);
	return NULL;
}

/* sacct's local "2026-11-23T03:22:39" in seconds since the epoch; -1 for
 * "Unknown", "None" and anything else. */
static long long local_time_s(const char *s)
{
	struct tm tm;
	memset(&tm, 0, sizeof tm);
	const char *end = s && isdigit((unsigned char)*s) ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm)
	                                                  : NULL;
	if (!end || *end)
		return -1;
	tm.tm_isdst = -1;
	time_t t = mktime(&tm);
	return t == (time_t)-1 ? -1 : (long long)t;
}

void svc_acct_sacct_release(struct svc_acct_sacct *s)
{
	free(s->jobs);
	free(s->keys);
	memset(s, 0, sizeof *s);
}

int svc_acct_parse_sacct(char *text, struct svc_acct_sacct *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	size_t lines = 1;
	for (const char *p = text; *p; p++)
		lines += *p == '\n';
	out->jobs = calloc(lines, sizeof *out->jobs);
	out->keys = calloc(lines, sizeof *out->keys);
	if (!out->jobs || !out->keys) {
		svc_msgf(err, errlen, "out of memory");
		return -1;
	}
	char *save = NULL;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *f[FIELDS_MAX], shown[81];
		if (!trim(line)[0])
			continue;
		svc_msgf(shown, sizeof shown, "%s", line);
		if (split(line, f, 10) != 10 || !f[0][0]) {
			svc_msgf(err, errlen, "sacct: unexpected output line \"%s\"", shown);
			return -1;
		}
		long long submit = local_time_s(f[4]), start = local_time_s(f[5]),
		          end = local_time_s(f[6]), cpus = whole(f[7]), cpu_tres, gpus;
		if (start < 0 || end < 0 || !f[1][0]) {
			out->skipped++;         /* never ran, still running, or no user */
			continue;
		}
		if (cpus < 0 || svc_acct_tres(f[8], &cpu_tres, &gpus) != 0) {
			svc_msgf(err, errlen, "sacct: unexpected fields in \"%s\"", shown);
			return -1;
		}
		struct db_usage_job *j = &out->jobs[out->n];
		snprintf(out->keys[out->n], sizeof out->keys[0], "%.64s@%lld@%lld", f[0],
		         submit < 0 ? 0 : submit, start);
		*j = (struct db_usage_job){ .key = out->keys[out->n], .user = f[1], .account = f[2],
		                            .partition = f[3], .start_ms = start * 1000,
		                            .end_ms = (end < start ? start : end) * 1000,
		                            .cpus = cpus, .gpus = gpus < 0 ? 0 : gpus };
		out->n++;
	}
	return 0;
}

/* ---- commands ---------------------------------------------------------------- */

static int run(const char *const argv[], int timeout_ms, struct slurm_cmd_result *res,
               char *msg, size_t len)
{
	if (slurm_cmd_run(argv, timeout_ms, res) == 0)
		return 0;
	slurm_cmd_describe(argv, res, msg, len);
	return -1;
}

/* "Key   = value" of scontrol show config into out. */
static void config_value(const char *text, const char *key, char *out, size_t len)
{
	out[0] = '\0';
	size_t klen = strlen(key);
	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (strncmp(p, key, klen) != 0 || (p[klen] != ' ' && p[klen] != '='))
			continue;
		const char *v = p + klen;
		while (*v == ' ')
			v++;
		if (*v != '=')
			continue;
		v++;
		while (*v == ' ')
			v++;
		size_t n = strcspn(v, "\n");
		svc_msgf(out, len, "%.*s", (int)n, v);
		return;
	}
}

int svc_acct_slurm_probe(int timeout_ms, int *on, char *cluster, size_t cluster_len,
                         char *why, size_t why_len, char *msg, size_t len)
{
	static const char *const argv[] = { "scontrol", "show", "config", NULL };
	struct slurm_cmd_result res;
	*on = 0;
	int rc = run(argv, timeout_ms, &res, msg, len);
	if (rc == 0) {
		char storage[128];
		config_value(res.out, "AccountingStorageType", storage, sizeof storage);
		config_value(res.out, "ClusterName", cluster, cluster_len);
		*on = strcmp(storage, "accounting_storage/slurmdbd") == 0;
		if (!*on)
			svc_msgf(why, why_len, "slurm has no accounting database (AccountingStorageType=%s; "
			    "slurmdbd keeps accounts and usage)", storage[0] ? storage : "none");
		if (!storage[0] || !cluster[0]) {
			svc_msgf(msg, len, "scontrol show config: no AccountingStorageType or ClusterName");
			rc = -1;
		}
	}
	slurm_cmd_release(&res);
	return rc;
}

int svc_acct_slurm_accounts(int timeout_ms, const char *cluster, json_t **accounts,
                            int *no_fairshare, char *msg, size_t len)
{
	char cluster_arg[96];
	svc_msgf(cluster_arg, sizeof cluster_arg, "cluster=%s", cluster);
	const char *assoc_argv[] = { "sacctmgr", "-nP", "show", "assoc", cluster_arg,
	                             "format=account,user,partition,parentname,share,maxjobs,"
	                             "maxwall,grptres", NULL };
	static const char *const users_argv[] = { "sacctmgr", "-nP", "show", "user",
	                                          "format=user,defaultaccount", NULL };
	static const char *const sshare_argv[] = { "sshare", "-a", "-P", "-n", "-o",
	                                           "Account,User,RawShares,NormShares,RawUsage,"
	                                           "EffectvUsage,FairShare", NULL };
	struct slurm_cmd_result assoc = { 0 }, users = { 0 }, shares = { 0 };
	char share_msg[256];
	int rc = -1;
	*accounts = NULL;
	*no_fairshare = 0;
	if (run(assoc_argv, timeout_ms, &assoc, msg, len) != 0 ||
	    run(users_argv, timeout_ms, &users, msg, len) != 0)
		goto out;
	if (run(sshare_argv, timeout_ms, &shares, share_msg, sizeof share_msg) != 0)
		*no_fairshare = 1;
	*accounts = svc_acct_parse_accounts(assoc.out, users.out, *no_fairshare ? NULL : shares.out,
	                                    msg, len);
	rc = *accounts ? 0 : -1;
out:
	slurm_cmd_release(&assoc);
	slurm_cmd_release(&users);
	slurm_cmd_release(&shares);
	return rc;
}

/* ms since the epoch as sacct's local "2026-11-23T03:22:39". */
static void sacct_time(int64_t ms, char *out, size_t len)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	localtime_r(&t, &tm);
	strftime(out, len, "%Y-%m-%dT%H:%M:%S", &tm);
}

int svc_acct_slurm_usage(int timeout_ms, struct db *db, int64_t from_ms, int64_t to_ms,
                         size_t *seen, size_t *added, char *msg, size_t len)
{
	char from[32], to[32];
	sacct_time(from_ms, from, sizeof from);
	sacct_time(to_ms, to, sizeof to);
	const char *argv[] = { "sacct", "-a", "-X", "-D", "-n", "-P", "-S", from, "-E", to, "-s",
	                       "CA,CD,DL,F,NF,OOM,PR,TO,RQ", "-o",
	                       "JobIDRaw,User,Account,Partition,Submit,Start,End,AllocCPUS,"
	                       "AllocTRES,State", NULL };
	struct slurm_cmd_result res;
	struct svc_acct_sacct jobs = { 0 };
	*added = *seen = 0;
	int rc = run(argv, timeout_ms, &res, msg, len);
	if (rc == 0)
		rc = svc_acct_parse_sacct(res.out, &jobs, msg, len);
	*seen = jobs.n + jobs.skipped;
	if (rc == 0) {
		struct db_err err = { 0 };
		if (db_usage_add(db, DB_USAGE_SLURM, jobs.jobs, jobs.n, to_ms, added, &err) != 0) {
			svc_msgf(msg, len, "storing sacct's usage: %s", err.text);
			rc = -1;
		}
	}
	svc_acct_sacct_release(&jobs);
	slurm_cmd_release(&res);
	return rc;
}

int svc_acct_slurm_set(int timeout_ms, const char *cluster, const struct api_acct_limits *in,
                       int *changed, char *cmd, size_t cmd_len, unsigned *status, char *msg,
                       size_t len)
{
	char name[96], account[96], cluster_arg[96], jobs[48], wall[48], tres[96];
	const char *argv[16] = { "sacctmgr", "-i", "modify", in->user ? "user" : "account",
	                         "where" };
	int n = 5;
	svc_msgf(name, sizeof name, "name=%s", in->user ? in->user : in->account);
	argv[n++] = name;
	if (in->user) {
		svc_msgf(account, sizeof account, "account=%s", in->account);
		argv[n++] = account;
	}
	svc_msgf(cluster_arg, sizeof cluster_arg, "cluster=%s", cluster);
	argv[n++] = cluster_arg;
	argv[n++] = "set";
	if (in->max_jobs != API_ACCT_UNSET) {
		svc_msgf(jobs, sizeof jobs, "MaxJobs=%lld", in->max_jobs < 0 ? -1 : in->max_jobs);
		argv[n++] = jobs;
	}
	if (in->max_wall_s != API_ACCT_UNSET) {
		long long s = in->max_wall_s;
		if (s < 0)
			svc_msgf(wall, sizeof wall, "MaxWall=-1");
		else
			svc_msgf(wall, sizeof wall, "MaxWall=%lld-%02lld:%02lld:%02lld", s / 86400,
			    s / 3600 % 24, s / 60 % 60, s % 60);
		argv[n++] = wall;
	}
	if (in->grp_cpu != API_ACCT_UNSET || in->grp_gpu != API_ACCT_UNSET) {
		size_t k = (size_t)snprintf(tres, sizeof tres, "GrpTRES=");
		if (in->grp_cpu != API_ACCT_UNSET)
			k += (size_t)snprintf(tres + k, sizeof tres - k, "cpu=%lld",
			                      in->grp_cpu < 0 ? -1 : in->grp_cpu);
		if (in->grp_gpu != API_ACCT_UNSET)
			snprintf(tres + k, sizeof tres - k, "%sgres/gpu=%lld",
			         in->grp_cpu != API_ACCT_UNSET ? "," : "", in->grp_gpu < 0 ? -1
			                                                             : in->grp_gpu);
		argv[n++] = tres;
	}
	argv[n] = NULL;
	size_t k = 0;
	cmd[0] = '\0';
	for (int i = 0; argv[i] && k < cmd_len; i++)
		k += (size_t)snprintf(cmd + k, cmd_len - k, "%s%s", i ? " " : "", argv[i]);

	struct slurm_cmd_result res;
	*changed = 1;
	int rc = run(argv, timeout_ms, &res, msg, len);
	if (rc != 0 && !res.timed_out && res.status == 1 && strstr(res.out, "Nothing modified")) {
		*changed = 0;
		rc = 0;
	} else if (rc != 0) {
		*status = svc_slurm_unreachable(&res) ? 503 : 400;
		/* sacctmgr says why on stdout as often as on stderr */
		if (!res.err[0] && res.out && res.out[0])
			svc_msgf(msg, len, "%s: %.200s", argv[0], trim(res.out));
	}
	slurm_cmd_release(&res);
	return rc;
}
