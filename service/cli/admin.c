/* service/cli/admin.c - larch admin VERB ...: the admin endpoints of
 * docs/api.md ("Admin") as tables, or their JSON with --json.
 *
 *   queues, nodes           GET /v1/queues, GET /v1/nodes
 *   drain NODE --reason R   POST /v1/nodes/NODE/drain {"reason": R}
 *   resume NODE             POST /v1/nodes/NODE/resume
 *   hold|release|requeue ID POST /v1/jobs/ID/hold ...
 *   set-priority ID N       PATCH /v1/jobs/ID {"priority": N} (--nice: {"nice": N})
 *   audit                   GET /v1/audit (--actor, --action, --target, --limit, --all)
 *   accounts                GET /v1/accounts
 *   set-limits ACCOUNT      PATCH /v1/accounts/ACCOUNT[/users/U] {"max_jobs", "max_wall",
 *                           "grp_tres": {"cpu", "gpu"}} (--user U, --max-jobs, --max-wall,
 *                           --cpus, --gpus; "none": null)
 *
 * Everything that came from larchd is printed inert (output.h).
 */
#include "admin.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jobs.h"

enum { OPT_REASON = 0x2000, OPT_NICE, OPT_ACTOR, OPT_ACTION, OPT_TARGET, OPT_LIMIT, OPT_ALL,
       OPT_USER, OPT_MAX_JOBS, OPT_MAX_WALL, OPT_CPUS, OPT_GPUS };

struct admin_args {
	const char *verb;
	const char *pos[3];           /* the verb's own arguments */
	int npos;
	const char *reason, *actor, *action, *target, *limit;
	const char *user, *max_jobs, *max_wall, *cpus, *gpus;   /* set-limits */
	int nice, all;
	long long limit_n;
};

/* An integer field of obj as text ("-" when absent or null). */
static void int_text(const json_t *obj, const char *key, char *out, size_t len)
{
	json_t *v = json_object_get(obj, key);
	if (json_is_integer(v))
		snprintf(out, len, "%lld", (long long)json_integer_value(v));
	else
		snprintf(out, len, "-");
}

/* "a/b/c/d" of the integer fields keys of obj. */
static void slash_text(const json_t *obj, const char *const *keys, char *out, size_t len)
{
	size_t n = 0;
	out[0] = '\0';
	for (int i = 0; keys[i] && n < len; i++) {
		char v[32];
		int_text(obj, keys[i], v, sizeof v);
		n += (size_t)snprintf(out + n, len - n, "%s%s", i ? "/" : "", v);
	}
}

/* A stale view: say so (the table is the last snapshot that worked). */
static void warn_stale(const json_t *view)
{
	if (!json_is_true(json_object_get(view, "stale")))
		return;
	char *err = cli_inert(json_string_value(json_object_get(view, "error")));
	char *at = cli_inert(json_string_value(json_object_get(view, "updated_at")));
	fprintf(stderr, "larch: Slurm did not answer (%s): this is what it said at %s\n", err, at);
	free(err);
	free(at);
}

/* ---- the views ---------------------------------------------------------------- */

static void print_queues(const json_t *view)
{
	static const struct cli_column cols[] = {
		{ .head = "QUEUE" }, { .head = "STATE" }, { .head = "NODES", .right = 1 },
		{ .head = "CPUS(A/I/O/T)", .right = 1 }, { .head = "MAX TIME", .right = 1 },
		{ .head = "PENDING", .right = 1 }, { .head = "RUNNING", .right = 1 },
		{ .head = "LARCH(P/R)", .right = 1 },
	};
	static const char *const cpu_keys[] = { "alloc", "idle", "other", "total", NULL };
	static const char *const job_keys[] = { "pending", "running", NULL };
	struct cli_table *t = cli_table_new(cols, sizeof cols / sizeof cols[0]);
	size_t i;
	json_t *q;
	json_array_foreach(json_object_get(view, "queues"), i, q) {
		char name[160], nodes[32], cpus[96], pend[32], run[32], larch[64];
		snprintf(name, sizeof name, "%s%s", cli_job_str(q, "name") ? cli_job_str(q, "name") : "-",
		         json_is_true(json_object_get(q, "default")) ? "*" : "");
		int_text(json_object_get(q, "nodes"), "count", nodes, sizeof nodes);
		slash_text(json_object_get(q, "cpus"), cpu_keys, cpus, sizeof cpus);
		int_text(json_object_get(q, "jobs"), "pending", pend, sizeof pend);
		int_text(json_object_get(q, "jobs"), "running", run, sizeof run);
		slash_text(json_object_get(q, "larch_jobs"), job_keys, larch, sizeof larch);
		const char *max = cli_job_str(q, "max_time");
		const char *cells[] = { name, cli_job_str(q, "state"), nodes, cpus,
		                        max ? max : "none", pend, run, larch };
		cli_table_row(t, cells);
	}
	cli_table_print(t, stdout, cli_term_width());
	cli_table_free(t);
}

static void print_nodes(const json_t *view)
{
	static const struct cli_column cols[] = {
		{ .head = "NODE" }, { .head = "STATE" }, { .head = "CPUS(A/T)", .right = 1 },
		{ .head = "MEM(MB)", .right = 1 }, { .head = "PARTITIONS" },
		{ .head = "REASON", .elastic = 1 },
	};
	struct cli_table *t = cli_table_new(cols, sizeof cols / sizeof cols[0]);
	size_t i;
	json_t *n;
	json_array_foreach(json_object_get(view, "nodes"), i, n) {
		char state[80], cpus[64], alloc[32], total[32], mem[32], parts[256] = "";
		snprintf(state, sizeof state, "%s%s", cli_job_str(n, "state") ? cli_job_str(n, "state")
		                                                              : "-",
		         json_is_false(json_object_get(n, "responding")) ? "*" : "");
		int_text(json_object_get(n, "cpus"), "alloc", alloc, sizeof alloc);
		int_text(json_object_get(n, "cpus"), "total", total, sizeof total);
		snprintf(cpus, sizeof cpus, "%s/%s", alloc, total);
		int_text(json_object_get(n, "memory_mb"), "total", mem, sizeof mem);
		size_t k, used = 0;
		json_t *p;
		json_array_foreach(json_object_get(n, "partitions"), k, p)
			if (json_is_string(p) && used < sizeof parts)
				used += (size_t)snprintf(parts + used, sizeof parts - used, "%s%s",
				                         k ? "," : "", json_string_value(p));
		struct cli_buf reason = { 0 };
		json_t *r = json_object_get(n, "reason");
		if (json_is_object(r)) {
			cli_buf_adds(&reason, cli_job_str(r, "text") ? cli_job_str(r, "text") : "");
			const char *who = cli_job_str(r, "user"), *when = cli_job_str(r, "time");
			if (who || when)
				cli_buf_addf(&reason, " [%s%s%s]", who ? who : "", who && when ? " " : "",
				             when ? when : "");
		}
		const char *cells[] = { cli_job_str(n, "name"), state, cpus, mem, parts[0] ? parts : "-",
		                        reason.len ? cli_buf_str(&reason) : "-" };
		cli_table_row(t, cells);
		cli_buf_release(&reason);
	}
	cli_table_print(t, stdout, cli_term_width());
	cli_table_free(t);
}

static int view(struct cli *cli, const char *path, void (*print)(const json_t *))
{
	json_t *v = NULL;
	int rc = cli_http_get_json(&cli->http, path, NULL, &v);
	if (rc == CLI_OK) {
		if (cli->json) {
			cli_print_json(v);
		} else {
			warn_stale(v);
			print(v);
		}
	}
	json_decref(v);
	return rc;
}

/* ---- actions ------------------------------------------------------------------- */

/* Sends method path body; the 2xx JSON object in *out. */
static int send_json(struct cli *cli, const char *method, const char *path, json_t *body,
                const char *job, json_t **out)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	struct cli_request rq = { .method = method, .path = path, .body = text,
	                          .body_len = text ? strlen(text) : 0 };
	struct cli_reply r = { 0 };
	int rc = cli_http_send(&cli->http, &rq, &r);
	if (rc == CLI_OK)
		rc = cli_http_take_object(&cli->http, &r, job, out);
	cli_reply_release(&r);
	free(text);
	return rc;
}

static int node_action(struct cli *cli, const struct admin_args *a)
{
	struct cli_buf path = { 0 };
	cli_buf_adds(&path, "/v1/nodes/");
	cli_http_escape(&path, a->pos[0]);
	cli_buf_adds(&path, strcmp(a->verb, "drain") == 0 ? "/drain" : "/resume");
	json_t *body = a->reason ? json_pack("{s:s}", "reason", a->reason) : NULL, *v = NULL;
	int rc = send_json(cli, "POST", cli_buf_str(&path), body, NULL, &v);
	if (rc == CLI_OK && cli->json) {
		cli_print_json(v);
	} else if (rc == CLI_OK) {
		warn_stale(v);
		size_t i;
		json_t *n;
		json_array_foreach(json_object_get(v, "nodes"), i, n) {
			char *name = cli_inert(cli_job_str(n, "name"));
			char *state = cli_inert(cli_job_str(n, "state"));
			printf("%s: %s\n", name, state);
			free(name);
			free(state);
		}
	}
	json_decref(body);
	json_decref(v);
	cli_buf_release(&path);
	return rc;
}

static int job_action(struct cli *cli, const struct admin_args *a)
{
	struct cli_buf path = { 0 };
	json_t *body = NULL, *job = NULL;
	const char *method = "POST";
	if (strcmp(a->verb, "set-priority") == 0) {
		long long n;
		int rc = a->nice ? cli_parse_long(cli, "N", a->pos[1], -2147483645LL, 2147483645LL, &n)
		                 : cli_parse_long(cli, "N", a->pos[1], 1, 4294967294LL, &n);
		if (rc != CLI_OK)
			return rc;
		body = json_pack("{s:I}", a->nice ? "nice" : "priority", (json_int_t)n);
		method = "PATCH";
		cli_job_path(&path, a->pos[0], "");
	} else {
		char suffix[16];
		snprintf(suffix, sizeof suffix, "/%s", a->verb);
		cli_job_path(&path, a->pos[0], suffix);
	}
	int rc = send_json(cli, method, cli_buf_str(&path), body, a->pos[0], &job);
	if (rc == CLI_OK && cli->json) {
		cli_print_json(job);
	} else if (rc == CLI_OK) {
		char *id = cli_inert(cli_job_str(job, "id")), *state = cli_inert(cli_job_str(job, "state"));
		if (body) {
			char prio[32];
			int_text(job, "priority", prio, sizeof prio);
			if (a->nice)
				printf("%s: %s, nice %s\n", id, state, a->pos[1]);
			else
				printf("%s: %s, priority %s\n", id, state, prio);
		} else {
			printf("%s: %s\n", id, state);
		}
		free(id);
		free(state);
	}
	json_decref(body);
	json_decref(job);
	cli_buf_release(&path);
	return rc;
}

/* ---- accounts ------------------------------------------------------------------ */

/* The cells of a limits object: max jobs, max wall, CPUs, GPUs. */
static void limit_cells(const json_t *limits, char cells[4][32])
{
	int_text(limits, "max_jobs", cells[0], 32);
	const char *wall = cli_job_str(limits, "max_wall");
	snprintf(cells[1], 32, "%s", wall ? wall : "-");
	int_text(json_object_get(limits, "grp_tres"), "cpu", cells[2], 32);
	int_text(json_object_get(limits, "grp_tres"), "gpu", cells[3], 32);
}

static void number_text(const json_t *obj, const char *key, char *out, size_t len)
{
	json_t *v = json_object_get(obj, key);
	if (json_is_number(v))
		snprintf(out, len, "%.3f", json_number_value(v));
	else
		snprintf(out, len, "-");
}

static void print_accounts(const json_t *view)
{
	static const struct cli_column cols[] = {
		{ .head = "ACCOUNT" }, { .head = "USER" }, { .head = "MAX JOBS", .right = 1 },
		{ .head = "MAX WALL", .right = 1 }, { .head = "CPUS", .right = 1 },
		{ .head = "GPUS", .right = 1 }, { .head = "SHARE", .right = 1 },
		{ .head = "USAGE", .right = 1 }, { .head = "FAIRSHARE", .right = 1 },
	};
	struct cli_table *t = cli_table_new(cols, sizeof cols / sizeof cols[0]);
	size_t i, k;
	json_t *acc;
	json_array_foreach(json_object_get(view, "accounts"), i, acc) {
		for (k = 0; k == 0 || k <= json_array_size(json_object_get(acc, "users")); k++) {
			const json_t *who = k == 0 ? acc : json_array_get(json_object_get(acc, "users"),
			                                                  k - 1);
			char lim[4][32], share[32], usage[32], fair[32], user[160];
			limit_cells(json_object_get(who, "limits"), lim);
			json_t *fs = json_object_get(who, "fairshare");
			number_text(fs, "norm_shares", share, sizeof share);
			number_text(fs, "effective_usage", usage, sizeof usage);
			number_text(fs, "fairshare", fair, sizeof fair);
			if (k == 0)
				snprintf(user, sizeof user, "-");
			else
				snprintf(user, sizeof user, "%s%s%s%s", cli_job_str(who, "name"),
				         json_is_true(json_object_get(who, "default")) ? " (default)" : "",
				         cli_job_str(who, "partition") ? " @" : "",
				         cli_job_str(who, "partition") ? cli_job_str(who, "partition") : "");
			const char *cells[] = { k == 0 ? cli_job_str(acc, "name") : "", user, lim[0],
			                        lim[1], lim[2], lim[3], share, usage, fair };
			cli_table_row(t, cells);
		}
	}
	cli_table_print(t, stdout, cli_term_width());
	cli_table_free(t);
}

/* A limit option's value into body[key] (sub: into body[sub][key]): an
 * integer in [0, max], "none" (null), or for max_wall a duration as text. */
static int limit_arg(struct cli *cli, json_t *body, const char *sub, const char *key,
                     const char *opt, const char *arg, long long max)
{
	if (!arg)
		return CLI_OK;
	json_t *target = body;
	if (sub) {
		target = json_object_get(body, sub);
		if (!target) {
			target = json_object();
			json_object_set_new(body, sub, target);
		}
	}
	if (strcmp(arg, "none") == 0)
		return json_object_set_new(target, key, json_null()) ? CLI_USAGE : CLI_OK;
	if (max < 0)         /* a duration: larchd checks it */
		return json_object_set_new(target, key, json_string(arg)) ? CLI_USAGE : CLI_OK;
	long long n;
	int rc = cli_parse_long(cli, opt, arg, 0, max, &n);
	if (rc == CLI_OK)
		json_object_set_new(target, key, json_integer(n));
	return rc;
}

static int set_limits(struct cli *cli, const struct admin_args *a)
{
	json_t *body = json_object(), *acc = NULL;
	int rc;
	if ((rc = limit_arg(cli, body, NULL, "max_jobs", "--max-jobs", a->max_jobs, 1000000)) ||
	    (rc = limit_arg(cli, body, NULL, "max_wall", "--max-wall", a->max_wall, -1)) ||
	    (rc = limit_arg(cli, body, "grp_tres", "cpu", "--cpus", a->cpus, 10000000)) ||
	    (rc = limit_arg(cli, body, "grp_tres", "gpu", "--gpus", a->gpus, 1000000))) {
		json_decref(body);
		return rc;
	}
	struct cli_buf path = { 0 };
	cli_buf_adds(&path, "/v1/accounts/");
	cli_http_escape(&path, a->pos[0]);
	if (a->user) {
		cli_buf_adds(&path, "/users/");
		cli_http_escape(&path, a->user);
	}
	rc = send_json(cli, "PATCH", cli_buf_str(&path), body, NULL, &acc);
	if (rc == CLI_OK && cli->json) {
		cli_print_json(acc);
	} else if (rc == CLI_OK) {
		json_t *view = json_pack("{s:[O]}", "accounts", acc);
		if (view && a->user) {       /* only the user's rows under the account */
			json_t *users = json_object_get(json_array_get(json_object_get(view, "accounts"), 0),
			                                "users"), *keep = json_array();
			size_t i;
			json_t *u;
			json_array_foreach(users, i, u)
				if (cli_job_str(u, "name") && strcmp(cli_job_str(u, "name"), a->user) == 0)
					json_array_append(keep, u);
			json_object_set_new(json_array_get(json_object_get(view, "accounts"), 0), "users",
			                    keep);
		}
		if (view)
			print_accounts(view);
		json_decref(view);
	}
	json_decref(body);
	json_decref(acc);
	cli_buf_release(&path);
	return rc;
}

/* ---- audit --------------------------------------------------------------------- */

static int audit(struct cli *cli, const struct admin_args *a)
{
	json_t *entries = json_array(), *page = NULL;
	char *cursor = NULL;
	struct cli_buf path = { 0 };
	cli_buf_adds(&path, "/v1/audit");
	cli_http_param(&path, "limit", a->limit ? a->limit : a->all ? "500" : NULL);
	cli_http_param(&path, "actor", a->actor);
	cli_http_param(&path, "action", a->action);
	cli_http_param(&path, "target", a->target);
	int rc = cli_http_get_list(&cli->http, cli_buf_str(&path), "entries", a->all, entries, &page,
	                           &cursor);
	cli_buf_release(&path);

	if (rc == CLI_OK && cli->json) {
		if (a->all)
			json_object_del(page, "next_cursor");
		json_object_set(page, "entries", entries);
		cli_print_json(page);
	} else if (rc == CLI_OK) {
		static const struct cli_column cols[] = {
			{ .head = "TIME" }, { .head = "ACTOR" }, { .head = "ACTION" }, { .head = "TARGET" },
			{ .head = "STATUS", .right = 1 }, { .head = "MESSAGE", .elastic = 1 },
		};
		struct cli_table *t = cli_table_new(cols, sizeof cols / sizeof cols[0]);
		size_t i;
		json_t *e;
		json_array_foreach(entries, i, e) {
			char status[32];
			int_text(e, "status", status, sizeof status);
			const char *cells[] = { cli_job_str(e, "time"), cli_job_str(e, "actor"),
			                        cli_job_str(e, "action"), cli_job_str(e, "target"), status,
			                        cli_job_str(e, "message") };
			cli_table_row(t, cells);
		}
		cli_table_print(t, stdout, cli_term_width());
		cli_table_free(t);
		if (cursor)
			fputs("larch: there are more entries: --all lists them all\n", stderr);
	}
	free(cursor);
	json_decref(page);
	json_decref(entries);
	return rc;
}

/* ---- the command ----------------------------------------------------------------- */

struct verb {
	const char *name;
	int args;                     /* positional arguments it takes */
	const char *what;             /* what they are, for the usage error */
};

static const struct verb verbs[] = {
	{ "queues", 0, "" }, { "nodes", 0, "" }, { "drain", 1, "a node" },
	{ "resume", 1, "a node" }, { "hold", 1, "a job id" }, { "release", 1, "a job id" },
	{ "requeue", 1, "a job id" }, { "set-priority", 2, "a job id and a number" },
	{ "audit", 0, "" }, { "accounts", 0, "" }, { "set-limits", 1, "an account" },
};

int cli_cmd_admin(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "reason", required_argument, NULL, OPT_REASON },
		{ "nice", no_argument, NULL, OPT_NICE },
		{ "actor", required_argument, NULL, OPT_ACTOR },
		{ "action", required_argument, NULL, OPT_ACTION },
		{ "target", required_argument, NULL, OPT_TARGET },
		{ "limit", required_argument, NULL, OPT_LIMIT },
		{ "all", no_argument, NULL, OPT_ALL },
		{ "user", required_argument, NULL, OPT_USER },
		{ "max-jobs", required_argument, NULL, OPT_MAX_JOBS },
		{ "max-wall", required_argument, NULL, OPT_MAX_WALL },
		{ "cpus", required_argument, NULL, OPT_CPUS },
		{ "gpus", required_argument, NULL, OPT_GPUS },
		CLI_COMMON_OPTIONS, { 0 },
	};
	struct admin_args a = { 0 };
	int c, rc;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case OPT_REASON: a.reason = optarg; break;
		case OPT_NICE: a.nice = 1; break;
		case OPT_ACTOR: a.actor = optarg; break;
		case OPT_ACTION: a.action = optarg; break;
		case OPT_TARGET: a.target = optarg; break;
		case OPT_ALL: a.all = 1; break;
		case OPT_USER: a.user = optarg; break;
		case OPT_MAX_JOBS: a.max_jobs = optarg; break;
		case OPT_MAX_WALL: a.max_wall = optarg; break;
		case OPT_CPUS: a.cpus = optarg; break;
		case OPT_GPUS: a.gpus = optarg; break;
		case OPT_LIMIT:
			if ((rc = cli_parse_long(cli, "--limit", optarg, 1, 500, &a.limit_n)) != CLI_OK)
				return rc;
			a.limit = optarg;
			break;
		default:
			if ((rc = cli_common_option(cli, c, optarg)) != CLI_CONTINUE)
				return rc;
		}
	}
	if (optind >= argc)
		return cli_usage_error(cli, "what to do? (queues, nodes, drain, resume, hold, release, "
		                       "requeue, set-priority, audit, accounts, set-limits)");
	a.verb = argv[optind++];
	const struct verb *v = NULL;
	for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
		if (strcmp(verbs[i].name, a.verb) == 0)
			v = &verbs[i];
	if (!v) {
		char *shown = cli_inert(a.verb);
		rc = cli_usage_error(cli, "no admin command \"%s\"", shown);
		free(shown);
		return rc;
	}
	while (optind < argc && a.npos < 3)
		a.pos[a.npos++] = argv[optind++];
	if (a.npos != v->args || optind < argc)
		return v->args ? cli_usage_error(cli, "%s takes %s", v->name, v->what)
		               : cli_usage_error(cli, "%s takes no arguments", v->name);
	int is_drain = strcmp(v->name, "drain") == 0, is_audit = strcmp(v->name, "audit") == 0;
	if (is_drain && !a.reason)
		return cli_usage_error(cli, "drain needs --reason R (what the node is drained for)");
	if (!is_drain && a.reason)
		return cli_usage_error(cli, "--reason goes with drain");
	if (a.nice && strcmp(v->name, "set-priority") != 0)
		return cli_usage_error(cli, "--nice goes with set-priority");
	if (!is_audit && (a.actor || a.action || a.target || a.limit || a.all))
		return cli_usage_error(cli, "--actor, --action, --target, --limit and --all go with "
		                       "audit");
	int is_limits = strcmp(v->name, "set-limits") == 0;
	if (!is_limits && (a.user || a.max_jobs || a.max_wall || a.cpus || a.gpus))
		return cli_usage_error(cli, "--user, --max-jobs, --max-wall, --cpus and --gpus go "
		                       "with set-limits");
	if (is_limits && !(a.max_jobs || a.max_wall || a.cpus || a.gpus))
		return cli_usage_error(cli, "set-limits needs at least one of --max-jobs, --max-wall, "
		                       "--cpus, --gpus");
	if ((rc = cli_connect(cli)) != CLI_OK)
		return rc;
	if (strcmp(v->name, "accounts") == 0)
		return view(cli, "/v1/accounts", print_accounts);
	if (is_limits)
		return set_limits(cli, &a);
	if (strcmp(v->name, "queues") == 0)
		return view(cli, "/v1/queues", print_queues);
	if (strcmp(v->name, "nodes") == 0)
		return view(cli, "/v1/nodes", print_nodes);
	if (is_drain || strcmp(v->name, "resume") == 0)
		return node_action(cli, &a);
	if (is_audit)
		return audit(cli, &a);
	return job_action(cli, &a);
}
