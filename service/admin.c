/* service/admin.c - `larchd token ...` and `larchd db ...`; see admin.h. */
#include "admin.h"
#include "auth_db.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "db/db.h"
#include "db/jobs.h"
#include "db/tokens.h"
#include "identity.h"
#include "state_dir.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

#define MAX_POS 4

struct args {
	const char *group, *verb;
	const char *user, *role, *unix_user;
	const char *pos[MAX_POS];
	int n_pos;
	struct svc_config cfg;
	char db_path[4200];
};

struct command {
	const char *group, *verb;
	int n_pos;                          /* positional arguments it takes */
	int user_role;                      /* takes --user and --role (and --unix-user) */
	int create_db;                      /* may create the state dir and database */
	int (*run)(struct args *a, struct db *db);
	const char *synopsis;
};

/* ---- the commands ------------------------------------------------------------ */

static void when(int64_t ms, char *out, size_t len)
{
	if (ms <= 0) {
		snprintf(out, len, "-");
		return;
	}
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int token_create(struct args *a, struct db *db)
{
	int role = db_role_parse(a->role);
	if (role != DB_ROLE_USER && role != DB_ROLE_ADMIN) {
		fprintf(stderr, "larchd: --role must be user or admin (got \"%s\")\n", a->role);
		return EXIT_USAGE;
	}
	char token[DB_TOKEN_LEN + 1];
	struct db_token info;
	struct db_err err = { 0 };
	int rc = db_tokens_create(db, a->user, (enum db_role)role, 0, token, &info, &err);
	if (rc == DB_INVALID) {
		fprintf(stderr, "larchd: --user must be a name of 1 to 64 bytes (got \"%s\")\n",
		        a->user);
		return EXIT_USAGE;
	}
	if (rc == DB_CONFLICT) {
		fprintf(stderr, "larchd: user %s exists with another role than %s\n", a->user,
		        a->role);
		return EXIT_FAIL;
	}
	if (rc != 0) {
		fprintf(stderr, "larchd: token create: %s\n", err.text);
		return EXIT_FAIL;
	}
	if (a->unix_user && (rc = db_users_set_unix(db, a->user, a->unix_user, &err)) != 0) {
		db_err_clear(&err);
		db_tokens_revoke(db, info.id, 0, &err);   /* no token for a user half made */
		explicit_bzero(token, sizeof token);
		fprintf(stderr, "larchd: --unix-user must be 1 to %d characters of A-Z a-z 0-9 . _ - "
		        "not starting with - (got \"%s\")\n", DB_UNIX_NAME_MAX, a->unix_user);
		return rc == DB_INVALID ? EXIT_USAGE : EXIT_FAIL;
	}
	char unix_user[DB_UNIX_NAME_MAX + 1] = "";
	db_err_clear(&err);
	db_users_unix(db, a->user, unix_user, &err);
	printf("%s\n", token);
	explicit_bzero(token, sizeof token);
	fflush(stdout);
	fprintf(stderr, "larchd: token %lld for %s (%s) created; it is shown only this once\n",
	        (long long)info.id, info.user, db_role_name(info.role));
	if (!unix_user[0])
		fprintf(stderr, "larchd: warning: %s is not a Unix user name and is mapped to none: "
		        "where jobs run as their owner (run_as owner), %s cannot submit until "
		        "--unix-user maps it\n", info.user, info.user);
	else if (svc_unix_user_exists(unix_user) == 0)
		fprintf(stderr, "larchd: warning: there is no Unix user %s on this host: where jobs "
		        "run as their owner (run_as owner), %s's submits are refused until it exists "
		        "(or --unix-user maps %s to another)\n", unix_user, info.user, info.user);
	if (a->unix_user) {
		char serr[4400];
		if (svc_auth_tokens_changed(a->cfg.state_dir, serr, sizeof serr) != 0)
			fprintf(stderr, "larchd: telling a running larchd: %s\n", serr);
	}
	return EXIT_OK;
}

static int token_list(struct args *a, struct db *db)
{
	(void)a;
	struct db_token_list list = { 0 };
	struct db_err err = { 0 };
	if (db_tokens_list(db, NULL, &list, &err) != 0) {
		fprintf(stderr, "larchd: token list: %s\n", err.text);
		return EXIT_FAIL;
	}
	printf("%-6s %-20s %-6s %-10s %-20s %-20s %s\n", "ID", "USER", "ROLE", "JOB", "CREATED",
	       "LAST USED", "REVOKED");
	for (size_t i = 0; i < list.n; i++) {
		const struct db_token *t = &list.items[i];
		char job[DB_JOB_ID_MAX] = "-", created[32], used[32], revoked[32];
		if (t->job)
			db_job_id_format(t->job, job);
		when(t->created_ms, created, sizeof created);
		when(t->last_used_ms, used, sizeof used);
		when(t->revoked_ms, revoked, sizeof revoked);
		printf("%-6lld %-20s %-6s %-10s %-20s %-20s %s\n", (long long)t->id, t->user,
		       db_role_name(t->role), job, created, used, revoked);
	}
	db_token_list_release(&list);
	return EXIT_OK;
}

static int token_revoke(struct args *a, struct db *db)
{
	char *end;
	errno = 0;
	long long id = strtoll(a->pos[0], &end, 10);
	if (errno || *end || end == a->pos[0] || id <= 0) {
		fprintf(stderr, "larchd: token revoke: ID must be a token id from `larchd token list` "
		        "(got \"%s\")\n", a->pos[0]);
		return EXIT_USAGE;
	}
	struct db_err err = { 0 };
	int rc = db_tokens_revoke(db, id, 0, &err);
	if (rc == DB_NOT_FOUND) {
		fprintf(stderr, "larchd: token revoke: no token %lld\n", id);
		return EXIT_FAIL;
	}
	if (rc != 0) {
		fprintf(stderr, "larchd: token revoke: %s\n", err.text);
		return EXIT_FAIL;
	}
	char serr[4400];
	if (svc_auth_tokens_changed(a->cfg.state_dir, serr, sizeof serr) != 0)
		fprintf(stderr, "larchd: token revoke: telling a running larchd: %s; it may accept "
		        "the token for a few more seconds\n", serr);
	printf("larchd: token %lld revoked\n", id);
	return EXIT_OK;
}

static int db_migrate_cmd(struct args *a, struct db *db)
{
	int before = 0, applied = 0;
	struct db_err err = { 0 };
	if (db_schema_version(db, &before, &err) != 0 || db_migrate(db, &applied, &err) != 0) {
		fprintf(stderr, "larchd: db migrate: %s\n", err.text);
		return EXIT_FAIL;
	}
	printf("larchd: %s: schema version %d -> %d (%d migrations applied)\n", a->db_path, before,
	       before + applied, applied);
	return EXIT_OK;
}

static int db_check_cmd(struct args *a, struct db *db)
{
	char *report = NULL;
	struct db_err err = { 0 };
	int rc = db_check(db, &report, &err);
	if (rc == 0)
		printf("larchd: %s: ok\n", a->db_path);
	else if (rc == DB_CORRUPT)
		fprintf(stderr, "larchd: %s: problems found:\n%s", a->db_path, report ? report : "");
	else
		fprintf(stderr, "larchd: db check: %s\n", err.text);
	free(report);
	return rc == 0 ? EXIT_OK : EXIT_FAIL;
}

static int db_backup_cmd(struct args *a, struct db *db)
{
	struct db_err err = { 0 };
	if (db_backup(db, a->pos[0], &err) != 0) {
		fprintf(stderr, "larchd: db backup: %s\n", err.text);
		return EXIT_FAIL;
	}
	printf("larchd: backup of %s written to %s\n", a->db_path, a->pos[0]);
	return EXIT_OK;
}

static const struct command commands[] = {
	{ "token", "create", 0, 1, 1, token_create,
	  "token create --user NAME --role user|admin [--unix-user UNIX]" },
	{ "token", "list", 0, 0, 0, token_list, "token list" },
	{ "token", "revoke", 1, 0, 0, token_revoke, "token revoke ID" },
	{ "db", "migrate", 0, 0, 0, db_migrate_cmd, "db migrate" },
	{ "db", "check", 0, 0, 0, db_check_cmd, "db check" },
	{ "db", "backup", 1, 0, 0, db_backup_cmd, "db backup DEST" },
};

#define N_COMMANDS (sizeof commands / sizeof commands[0])

/* ---- arguments --------------------------------------------------------------- */

static void usage(FILE *out, const char *group)
{
	fprintf(out, "usage:\n");
	for (size_t i = 0; i < N_COMMANDS; i++)
		if (!group || strcmp(commands[i].group, group) == 0)
			fprintf(out, "  larchd %s [--state-dir DIR] [--config FILE]\n",
			        commands[i].synopsis);
	fprintf(out, "\nThey work on STATE_DIR/larch.db, also while larchd runs. Exit status: 0 "
	        "done, 1 failed, 2 bad usage.\n");
}

int svc_admin_is_command(int argc, char **argv)
{
	return argc > 1 && (strcmp(argv[1], "token") == 0 || strcmp(argv[1], "db") == 0);
}

static int bad_usage(const char *group, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int bad_usage(const char *group, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "larchd: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	usage(stderr, group);
	return EXIT_USAGE;
}

/* Splits argv into the command's own arguments and larchd's settings, which
 * go to svc_config_load (cfg_argv[0] is the program). */
static int parse(int argc, char **argv, struct args *a, const struct command **cmd,
                 char **cfg_argv, int *cfg_argc)
{
	a->group = argv[1];
	if (argc < 3 || strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0) {
		usage(argc < 3 ? stderr : stdout, a->group);
		return argc < 3 ? EXIT_USAGE : -1;
	}
	a->verb = argv[2];
	for (size_t i = 0; i < N_COMMANDS && !*cmd; i++)
		if (strcmp(commands[i].group, a->group) == 0 && strcmp(commands[i].verb, a->verb) == 0)
			*cmd = &commands[i];
	if (!*cmd)
		return bad_usage(a->group, "unknown command \"%s\"", a->verb);
	cfg_argv[(*cfg_argc)++] = argv[0];
	for (int i = 3; i < argc; i++) {
		const char *arg = argv[i];
		const char **own = NULL;
		if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
			usage(stdout, a->group);
			return -1;
		}
		if (strncmp(arg, "--user", 6) == 0 && (arg[6] == '\0' || arg[6] == '='))
			own = &a->user;
		else if (strncmp(arg, "--role", 6) == 0 && (arg[6] == '\0' || arg[6] == '='))
			own = &a->role;
		else if (strncmp(arg, "--unix-user", 11) == 0 && (arg[11] == '\0' || arg[11] == '='))
			own = &a->unix_user;
		if (own) {
			size_t len = own == &a->unix_user ? 11 : 6;
			if (!(*cmd)->user_role)
				return bad_usage(a->group, "%.*s: not an option of this command", (int)len,
				                 arg);
			if (arg[len] == '=')
				*own = arg + len + 1;
			else if (i + 1 < argc)
				*own = argv[++i];
			else
				return bad_usage(a->group, "%s: needs a value", arg);
		} else if (strncmp(arg, "--", 2) == 0) {
			cfg_argv[(*cfg_argc)++] = argv[i];        /* a setting, and its value */
			if (!strchr(arg, '=') && i + 1 < argc)
				cfg_argv[(*cfg_argc)++] = argv[++i];
		} else if (a->n_pos < (*cmd)->n_pos) {
			a->pos[a->n_pos++] = arg;
		} else {
			return bad_usage(a->group, "unexpected argument \"%s\"", arg);
		}
	}
	if (a->n_pos < (*cmd)->n_pos)
		return bad_usage(a->group, "%s: missing argument", (*cmd)->synopsis);
	if ((*cmd)->user_role && (!a->user || !a->role))
		return bad_usage(a->group, "%s: needs --user and --role", (*cmd)->synopsis);
	return 0;
}

int svc_admin_main(int argc, char **argv)
{
	struct args a;
	memset(&a, 0, sizeof a);
	const struct command *cmd = NULL;
	char **cfg_argv = calloc((size_t)argc + 1, sizeof *cfg_argv);
	int cfg_argc = 0;
	if (!cfg_argv) {
		fprintf(stderr, "larchd: out of memory\n");
		return EXIT_FAIL;
	}
	int rc = parse(argc, argv, &a, &cmd, cfg_argv, &cfg_argc);
	if (rc != 0) {
		free(cfg_argv);
		return rc < 0 ? EXIT_OK : rc;
	}
	char err[4096 + 512];
	int crc = svc_config_load(&a.cfg, cfg_argc, cfg_argv, err, sizeof err);
	free(cfg_argv);
	if (crc != SVC_CONFIG_RUN) {
		if (crc == SVC_CONFIG_ERROR)
			fprintf(stderr, "larchd: %s\n", err);
		svc_config_release(&a.cfg);
		return crc == SVC_CONFIG_EXIT ? EXIT_OK : EXIT_USAGE;
	}
	snprintf(a.db_path, sizeof a.db_path, "%s/larch.db", a.cfg.state_dir);
	if (cmd->create_db) {
		if (svc_state_dir_make(a.cfg.state_dir, err, sizeof err) != 0) {
			fprintf(stderr, "larchd: %s\n", err);
			svc_config_release(&a.cfg);
			return EXIT_FAIL;
		}
	} else if (access(a.db_path, F_OK) != 0) {
		fprintf(stderr, "larchd: no database at %s (has larchd run with --state-dir %s?)\n",
		        a.db_path, a.cfg.state_dir);
		svc_config_release(&a.cfg);
		return EXIT_FAIL;
	}
	/* the db commands take the file as it is: check and backup must not change
	 * it (a backup taken before a migration is the one worth having), and
	 * migrate says what it applied */
	int no_migrate = strcmp(cmd->group, "db") == 0;
	struct db_options opts = { .no_migrate = no_migrate };
	struct db_err dberr = { 0 };
	struct db *db = db_open(a.db_path, &opts, &dberr);
	if (!db) {
		fprintf(stderr, "larchd: %s: %s\n", a.db_path, dberr.text);
		svc_config_release(&a.cfg);
		return EXIT_FAIL;
	}
	rc = cmd->run(&a, db);
	if (db_close(db) != 0 && rc == EXIT_OK) {
		fprintf(stderr, "larchd: %s: closing the database failed\n", a.db_path);
		rc = EXIT_FAIL;
	}
	svc_config_release(&a.cfg);
	return rc;
}
