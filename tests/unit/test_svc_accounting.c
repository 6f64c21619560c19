/* tests/unit/test_svc_accounting.c - service/accounting_slurm.c's reading
 * of Slurm's accounting tools: sacctmgr's associations and default
 * accounts with sshare's fair share as the accounts view, TRES lists, and
 * sacct's finished jobs as usage (jobs that never ran or still run left
 * out); malformed output is an error, never a guess. The output is as
 * Debian's Slurm 22.05 prints it (tests/integration/test_accounting.py runs
 * the real tools). Also who is who: larch user -> Unix user. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "service/accounting.h"

static const char assoc[] =
	"root||||1|||\n"
	"root|root|||1|||\n"
	"ml-team|||root|1|3|01:00:00|cpu=8,gres/gpu=2\n"
	"ml-team|alice|||1|3|01:00:00|\n"
	"physics|||root|1|||\n"
	"physics|bob|||1|||\n"
	"physics|alice|gpu||1|1|2-00:00:00|cpu=4\n";
static const char users[] = "alice|ml-team|\nbob|physics|\nroot|root|\n";
static const char users2[] = "alice|ml-team\nbob|physics\nroot|root\n";
static const char sshare[] =
	"root|||0.000000|0|1.000000|\n"
	" root|root|1|0.333333|0|0.000000|1.000000\n"
	" ml-team||1|0.333333|0|0.000000|\n"
	"  ml-team|alice|1|1.000000|120|1.000000|0.500000\n"
	" physics||parent|0.333333|0|0.000000|\n"
	"  physics|alice|1|0.500000|0|0.000000|1.000000\n"
	"  physics|bob|1|0.500000|0|0.000000|1.000000\n";

static json_t *user_of(json_t *acc, const char *name)
{
	size_t i;
	json_t *u;
	json_array_foreach(json_object_get(acc, "users"), i, u)
		if (strcmp(json_string_value(json_object_get(u, "name")), name) == 0)
			return u;
	return NULL;
}

static long long int_at(json_t *o, const char *a, const char *b)
{
	json_t *v = json_object_get(o, a);
	if (b)
		v = json_object_get(v, b);
	return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

static void test_accounts(void)
{
	char err[256] = "";
	json_t *acc = svc_acct_parse_accounts(assoc, users2, sshare, err, sizeof err);
	CHECK_MSG(acc != NULL, "%s", err);
	if (!acc)
		return;
	CHECK_INT_EQ(json_array_size(acc), 3);
	const char *order[] = { "ml-team", "physics", "root" };
	for (size_t i = 0; i < 3 && i < json_array_size(acc); i++)
		CHECK_STR_EQ(json_string_value(json_object_get(json_array_get(acc, i), "name")),
		             order[i]);
	json_t *ml = json_array_get(acc, 0), *phys = json_array_get(acc, 1);
	json_t *root = json_array_get(acc, 2);
	CHECK_STR_EQ(json_string_value(json_object_get(ml, "parent")), "root");
	CHECK(json_is_null(json_object_get(root, "parent")));
	json_t *lim = json_object_get(ml, "limits");
	CHECK_INT_EQ(int_at(lim, "max_jobs", NULL), 3);
	CHECK_STR_EQ(json_string_value(json_object_get(lim, "max_wall")), "01:00:00");
	CHECK_INT_EQ(int_at(lim, "max_wall_s", NULL), 3600);
	CHECK_INT_EQ(int_at(json_object_get(lim, "grp_tres"), "cpu", NULL), 8);
	CHECK_INT_EQ(int_at(json_object_get(lim, "grp_tres"), "gpu", NULL), 2);
	CHECK(json_is_null(json_object_get(json_object_get(phys, "limits"), "max_jobs")));
	CHECK(json_is_null(json_object_get(json_object_get(json_object_get(phys, "limits"),
	                                                   "grp_tres"), "cpu")));

	/* users, sorted, with their default account and partition */
	json_t *pu = json_object_get(phys, "users");
	CHECK_INT_EQ(json_array_size(pu), 2);
	CHECK_STR_EQ(json_string_value(json_object_get(json_array_get(pu, 0), "name")), "alice");
	json_t *alice_ml = user_of(ml, "alice"), *alice_ph = user_of(phys, "alice");
	json_t *bob = user_of(phys, "bob");
	CHECK(alice_ml && alice_ph && bob);
	if (alice_ml && alice_ph && bob) {
		CHECK(json_is_true(json_object_get(alice_ml, "default")));
		CHECK(json_is_false(json_object_get(alice_ph, "default")));
		CHECK(json_is_true(json_object_get(bob, "default")));
		CHECK_STR_EQ(json_string_value(json_object_get(alice_ph, "partition")), "gpu");
		CHECK(json_is_null(json_object_get(bob, "partition")));
		CHECK_INT_EQ(int_at(json_object_get(alice_ph, "limits"), "max_wall_s", NULL), 172800);
		CHECK_INT_EQ(int_at(json_object_get(json_object_get(alice_ph, "limits"), "grp_tres"),
		                    "cpu", NULL), 4);
		/* fair share from sshare, by account and user */
		json_t *fs = json_object_get(alice_ml, "fairshare");
		CHECK_INT_EQ(int_at(fs, "raw_usage", NULL), 120);
		CHECK(json_real_value(json_object_get(fs, "fairshare")) == 0.5);
		CHECK(json_real_value(json_object_get(fs, "norm_shares")) == 1.0);
	}
	json_t *pfs = json_object_get(phys, "fairshare");
	CHECK(json_is_null(json_object_get(pfs, "raw_shares")));   /* "parent" */
	CHECK(json_is_null(json_object_get(pfs, "fairshare")));
	json_decref(acc);

	/* without sshare: no fair share */
	acc = svc_acct_parse_accounts(assoc, users2, NULL, err, sizeof err);
	CHECK(acc != NULL);
	CHECK(json_is_null(json_object_get(json_array_get(acc, 0), "fairshare")));
	json_decref(acc);
	acc = svc_acct_parse_accounts("", "", "", err, sizeof err);
	CHECK(acc && json_array_size(acc) == 0);
	json_decref(acc);
}

static void test_accounts_malformed(void)
{
	static const struct {
		const char *assoc, *users, *sshare, *says;
	} bad[] = {
		{ "root|||1|||\n", users2, NULL, "show assoc" },                   /* 7 fields */
		{ "root||||1||||x\n", users2, NULL, "show assoc" },                /* 9 fields */
		{ "ml|||root|1|x||\n", users2, NULL, "limits" },                   /* MaxJobs */
		{ "ml|||root|1||soon|\n", users2, NULL, "limits" },                /* MaxWall */
		{ "ml|||root|1|||cpu\n", users2, NULL, "limits" },                 /* GrpTRES */
		{ assoc, users, NULL, "show user" },                               /* 3 fields */
		{ assoc, users2, "root|x\n", "sshare" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char err[256] = "";
		json_t *acc = svc_acct_parse_accounts(bad[i].assoc, bad[i].users, bad[i].sshare, err,
		                                      sizeof err);
		CHECK_MSG(acc == NULL, "case %zu parsed", i);
		CHECK_MSG(strstr(err, bad[i].says) != NULL, "case %zu: \"%s\" lacks \"%s\"", i, err,
		          bad[i].says);
		json_decref(acc);
	}
}

static void test_tres(void)
{
	long long cpu, gpu;
	CHECK_INT_EQ(svc_acct_tres("cpu=8,mem=4G,gres/gpu=2", &cpu, &gpu), 0);
	CHECK(cpu == 8 && gpu == 2);
	CHECK_INT_EQ(svc_acct_tres("billing=1,cpu=1,mem=500M,node=1", &cpu, &gpu), 0);
	CHECK(cpu == 1 && gpu == -1);
	CHECK_INT_EQ(svc_acct_tres("gres/gpu:a100=2,gres/gpu:v100=1", &cpu, &gpu), 0);
	CHECK(cpu == -1 && gpu == 3);
	CHECK_INT_EQ(svc_acct_tres("gres/gpu=4,gres/gpu:a100=4", &cpu, &gpu), 0);
	CHECK_INT_EQ(gpu, 4);
	CHECK_INT_EQ(svc_acct_tres("", &cpu, &gpu), 0);
	CHECK(cpu == -1 && gpu == -1);
	CHECK_INT_EQ(svc_acct_tres(NULL, &cpu, &gpu), 0);
	static const char *const bad[] = { "cpu", "cpu=", "=4", "cpu=x", "cpu=-1", "cpu=1,,gpu" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		CHECK_MSG(svc_acct_tres(bad[i], &cpu, &gpu) == -1, "\"%s\" parsed", bad[i]);
}

/* sacct's local time of epoch seconds t. */
static void local(long long t, char *out, size_t len)
{
	time_t tt = (time_t)t;
	struct tm tm;
	localtime_r(&tt, &tm);
	strftime(out, len, "%Y-%m-%dT%H:%M:%S", &tm);
}

static void test_sacct(void)
{
	const long long t0 = 1796621870;
	char s0[32], s1[32], s2[32], s3[32];
	local(t0, s0, sizeof s0);
	local(t0 + 1, s1, sizeof s1);
	local(t0 + 61, s2, sizeof s2);
	local(t0 + 3600, s3, sizeof s3);
	char text[2048];
	snprintf(text, sizeof text,
	         "1|alice|physics|debug|%s|%s|%s|1|billing=1,cpu=1,mem=500M,node=1|COMPLETED\n"
	         "2|bob|ml-team|batch|%s|%s|%s|4|cpu=4,gres/gpu=2,mem=2G,node=1|CANCELLED by 0\n"
	         "3|alice|physics|debug|%s|Unknown|Unknown|0||CANCELLED by 0\n"
	         "4|alice|physics|debug|%s|%s|Unknown|1|cpu=1|RUNNING\n"
	         "5|bob|ml-team|batch|%s|None|%s|0||CANCELLED by 0\n",
	         s0, s1, s2, s0, s1, s3, s0, s0, s1, s0, s2);
	struct svc_acct_sacct jobs;
	char err[256] = "";
	CHECK_MSG(svc_acct_parse_sacct(text, &jobs, err, sizeof err) == 0, "%s", err);
	CHECK_INT_EQ(jobs.n, 2);
	CHECK_INT_EQ(jobs.skipped, 3);
	if (jobs.n == 2) {
		const struct db_usage_job *a = &jobs.jobs[0], *b = &jobs.jobs[1];
		char key[64];
		snprintf(key, sizeof key, "1@%lld@%lld", t0, t0 + 1);
		CHECK_STR_EQ(a->key, key);
		CHECK_STR_EQ(a->user, "alice");
		CHECK_STR_EQ(a->account, "physics");
		CHECK_STR_EQ(a->partition, "debug");
		CHECK_INT_EQ(a->start_ms, (t0 + 1) * 1000);
		CHECK_INT_EQ(a->end_ms, (t0 + 61) * 1000);
		CHECK(a->cpus == 1 && a->gpus == 0);
		CHECK_STR_EQ(b->user, "bob");
		CHECK(b->cpus == 4 && b->gpus == 2);
		CHECK_INT_EQ(b->end_ms - b->start_ms, 3599000);
	}
	svc_acct_sacct_release(&jobs);

	static const char *const bad[] = {
		"1|alice|physics|debug\n",                                             /* too few */
		"1|alice|a|p|2026-12-07T05:00:00|2026-12-07T05:00:01|2026-12-07T05:00:02|x|cpu=1|CD\n",
		"1|alice|a|p|2026-12-07T05:00:00|2026-12-07T05:00:01|2026-12-07T05:00:02|1|cpu|CD\n",
		"|alice|a|p|2026-12-07T05:00:00|2026-12-07T05:00:01|2026-12-07T05:00:02|1|cpu=1|CD\n",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char *copy = strdup(bad[i]);
		CHECK_MSG(svc_acct_parse_sacct(copy, &jobs, err, sizeof err) == -1, "case %zu parsed",
		          i);
		CHECK(strstr(err, "sacct") != NULL);
		svc_acct_sacct_release(&jobs);
		free(copy);
	}
	char empty[] = "";
	CHECK_INT_EQ(svc_acct_parse_sacct(empty, &jobs, err, sizeof err), 0);
	CHECK_INT_EQ(jobs.n, 0);
	svc_acct_sacct_release(&jobs);
}

static void test_unix_user(void)
{
	char out[33];
	CHECK_INT_EQ(svc_acct_unix_user("alice", out, sizeof out), 0);
	CHECK_STR_EQ(out, "alice");
	CHECK_INT_EQ(svc_acct_unix_user("svc.ml_team-1", out, sizeof out), 0);
	static const char *const bad[] = { "", "-rf", "a b", "al/ice", "x$(id)",
	                                   "a234567890123456789012345678901234" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		CHECK_MSG(svc_acct_unix_user(bad[i], out, sizeof out) == -1, "\"%s\" taken", bad[i]);
	CHECK_INT_EQ(svc_acct_unix_user("alice", out, 3), -1);
}

int main(void)
{
	CHECK_RUN(test_accounts);
	CHECK_RUN(test_accounts_malformed);
	CHECK_RUN(test_tres);
	CHECK_RUN(test_sacct);
	CHECK_RUN(test_unix_user);
	return check_finish();
}
