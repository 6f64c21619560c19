/* trainer/options.c - see options.h. */
#include "options.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "env.h"
#include "kernels/tune_table.h"

static const char *const devices[] = { "cpu", "cuda", NULL };
static const char *const isas[] = { "auto", "scalar", "avx2", "avx512", NULL };

#define AT(field) offsetof(struct trn_options, field)

/* cuda_backend: a file that is there (dlopen's own message would come
 * only when a GPU run loads it) */
static int check_file(const char *what, const char *text, char *err, size_t errlen)
{
	struct stat st;
	if (stat(text, &st) == 0 && S_ISREG(st.st_mode))
		return 0;
	snprintf(err, errlen, "%s: not a file: \"%.200s\"", what, text);
	return -1;
}

/* cuda_kernel_picks: "default", or picks as kern_tune_picks_parse takes
 * them (the kernels would stop the run at its first GPU model otherwise) */
static int check_picks(const char *what, const char *text, char *err, size_t errlen)
{
	if (strcmp(text, "default") == 0)
		return 0;
	struct kern_tune_table t = { 0 };
	char why[256];
	int rc = kern_tune_picks_parse(&t, text, why, sizeof why) < 0 ? -1 : 0;
	kern_tune_table_free(&t);
	if (rc != 0)
		snprintf(err, errlen, "%s: %s (\"default\", or KEY=N entries apart by spaces)", what,
		         why);
	return rc;
}

static const struct trn_option rows[] = {
	{ "job_dir", "--job-dir", NULL, TRN_OPTION_STR, AT(job_dir), 0, 0, NULL,
	  "runs/<spec name>", "where spec.json, metrics.jsonl, result.json and checkpoints/ go", NULL },
	{ "resume", "--resume", NULL, TRN_OPTION_BOOL, AT(resume), 0, 1, NULL, "off",
	  "fail unless there is a checkpoint to resume from", NULL },
	{ "threads", "--threads", NULL, TRN_OPTION_INT, AT(threads), 1, 4096, NULL,
	  "OMP_NUM_THREADS or the CPUs", "threads for kernels and BLAS", NULL },
	{ "quiet", "--quiet", NULL, TRN_OPTION_BOOL, AT(quiet), 0, 1, NULL, "off",
	  "no progress lines", NULL },
	{ "device", "--device", NULL, TRN_OPTION_STR, AT(device), 0, 0, devices,
	  "from the spec", "cpu, or cuda (the default when the spec asks for GPUs)", NULL },
	{ "blas", NULL, "LARCH_BLAS", TRN_OPTION_STR, AT(blas), 0, 0, NULL,
	  "the build's candidates", "the CBLAS library GEMMs run in (a path or soname)", NULL },
	{ "openblas_coretype", NULL, "OPENBLAS_CORETYPE", TRN_OPTION_STR, AT(openblas_coretype),
	  0, 0, NULL, "from the CPU's features", "OpenBLAS's kernel family", NULL },
	{ "cpu_isa", NULL, "LARCH_CPU_ISA", TRN_OPTION_STR, AT(cpu_isa), 0, 0, isas, "auto",
	  "the optimizer's loops (auto: the widest the CPU has)", NULL },
	{ "comm_timeout_s", NULL, "LARCH_COMM_TIMEOUT", TRN_OPTION_INT, AT(comm_timeout_s), 1,
	  86400, NULL, "120", "seconds srun's tasks (no MPI) have to meet", NULL },
	{ "comm_host", NULL, "LARCH_COMM_HOST", TRN_OPTION_STR, AT(comm_host), 0, 0, NULL,
	  "the hostname", "the address rank 0 publishes to srun's other tasks", NULL },
	{ "cuda_backend", NULL, "LARCH_CUDA_BACKEND", TRN_OPTION_STR, AT(cuda_backend), 0, 0,
	  NULL, "liblarch_trainer_cuda.so beside liblarch_trainer.so",
	  "the GPU backend's library file", check_file },
	{ "cuda_sync", NULL, "LARCH_CUDA_SYNC", TRN_OPTION_BOOL, AT(cuda_sync), 0, 1, NULL, "off",
	  "wait for each GPU kernel at its launch, so that a fault is reported there", NULL },
	{ "cuda_kernel_picks", NULL, "LARCH_CUDA_KERNEL_PICKS", TRN_OPTION_STR,
	  AT(cuda_kernel_picks), 0, 0, NULL, "timed",
	  "the GPU kernels' same-bits variants: picks made already (\"KEY=N ...\", as a run "
	  "prints them), or default (each op's default, untimed)", check_picks },
};
#define N_ROWS ((int)(sizeof rows / sizeof rows[0]))

_Static_assert(sizeof rows / sizeof rows[0] <= sizeof ((struct trn_options *)0)->source,
               "struct trn_options: one source per row");

const struct trn_option *trn_options_table(int *n)
{
	*n = N_ROWS;
	return rows;
}

const struct trn_option *trn_option_find(const char *name)
{
	for (int i = 0; i < N_ROWS; i++)
		if (strcmp(rows[i].name, name) == 0 || (rows[i].flag && strcmp(rows[i].flag, name) == 0))
			return &rows[i];
	return NULL;
}

/* Parses text into row's field; what names the value in a message. */
static int set_row(struct trn_options *o, const struct trn_option *row, const char *what,
                   const char *text, char *err, size_t errlen)
{
	void *field = (char *)o + row->offset;
	switch (row->type) {
	case TRN_OPTION_STR:
		if (row->choices) {
			int i;
			if (trn_parse_choice(what, text, row->choices, &i, err, errlen) != 0)
				return -1;
			text = row->choices[i];        /* static storage */
		}
		if (row->check && row->check(what, text, err, errlen) != 0)
			return -1;
		*(const char **)field = text;
		return 0;
	case TRN_OPTION_INT: {
		long v;
		if (trn_parse_long(what, text, row->lo, row->hi, &v, err, errlen) != 0)
			return -1;
		*(int *)field = (int)v;
		return 0;
	}
	case TRN_OPTION_BOOL:
		return trn_parse_bool(what, text, (int *)field, err, errlen);
	}
	return -1;
}

int trn_options_set_flag(struct trn_options *o, const struct trn_option *row,
                         const char *text, char *err, size_t errlen)
{
	if (set_row(o, row, row->flag ? row->flag : row->name, text ? text : "1", err, errlen) != 0)
		return -1;
	o->source[row - rows] = TRN_OPTION_FLAG;
	return 0;
}

int trn_options_from_env(struct trn_options *o, char *err, size_t errlen)
{
	for (int i = 0; i < N_ROWS; i++) {
		const char *v = rows[i].env ? trn_env_str(rows[i].env) : NULL;
		if (!v || o->source[i] == TRN_OPTION_FLAG)
			continue;
		if (set_row(o, &rows[i], rows[i].env, v, err, errlen) != 0)
			return -1;
		o->source[i] = TRN_OPTION_ENV;
	}
	return 0;
}

void trn_options_print(FILE *f, const struct trn_options *o)
{
	fputs("options:", f);
	for (int i = 0; i < N_ROWS; i++) {
		const void *field = (const char *)o + rows[i].offset;
		fprintf(f, "%s %s ", i ? "," : "", rows[i].name);
		if (rows[i].type == TRN_OPTION_STR) {
			const char *v = *(const char *const *)field;
			fputs(v ? v : rows[i].dflt, f);
		} else if (rows[i].type == TRN_OPTION_INT && !*(const int *)field) {
			fputs(rows[i].dflt, f);
		} else if (rows[i].type == TRN_OPTION_INT) {
			fprintf(f, "%d", *(const int *)field);
		} else {
			fputs(*(const int *)field ? "on" : "off", f);
		}
		if (o->source[i] == TRN_OPTION_ENV)
			fprintf(f, " (%s)", rows[i].env);
		else if (o->source[i] == TRN_OPTION_FLAG)
			fprintf(f, " (%s)", rows[i].flag);
	}
	fputc('\n', f);
}
