/* trainer/spec/spec_data.c - the spec sections that name things outside the spec:
 * "data" (named datasets and data files) and "resources" (the Slurm request,
 * memory and time limit in Slurm's own formats). See spec.h and docs/spec.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/env.h"
#include "spec.h"
#include "spec_fields.h"

#define DATASET_ROOT "/usr/share/datasets"   /* Debian's dataset-* packages */
#define MEM_MAX (1LL << 50)                 /* 1024T */
#define TIME_MAX (365L * 86400)

static const struct trn_range VAL_FRACTION = { 0, 1, 0, 1 };

/* Named datasets: files under <root>/<name>/, root = $LARCH_DATASET_ROOT or
 * DATASET_ROOT. One line per dataset; NULL val files = none. */
static const struct dataset {
	const char *name;
	enum trn_data_format format;
	const char *train, *train_labels, *val, *val_labels;
} datasets[] = {
	{ "fashion-mnist", TRN_DATA_IDX, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
	  "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz" },
};
#define N_DATASETS (sizeof datasets / sizeof datasets[0])

static int resolve(struct trn_fields *f, const char *root, const char *name, const char *file,
                   char *out)
{
	out[0] = '\0';
	if (!file)
		return 0;
	int n = snprintf(out, TRN_PATH_MAX, "%s/%s/%s", root, name, file);
	if (n < 0 || n >= TRN_PATH_MAX)
		return trn_fields_fail(f, "name", "path under the dataset root is too long");
	return 0;
}

static const char *const formats[] = { "idx", "tokens_u16", "text", NULL };
static const char *const format_keys[][7] = {
	[TRN_DATA_IDX] = { "format", "train", "val", "val_fraction", "shuffle", "standardize", NULL },
	[TRN_DATA_TOKENS_U16] = { "format", "train", "val", "val_fraction", "shuffle", NULL },
	[TRN_DATA_TEXT] = { "format", "path", "val_fraction", "shuffle", NULL },
};
static const char *const format_all_keys[] = { "train", "val", "path", "standardize", NULL };
static const char *const standardizations[] = { "global", "per_feature", NULL };

/* {"name": "fashion-mnist", "shuffle", "val_fraction"}: the canonical spec
 * keeps the name; the struct gets the resolved paths. val_fraction > 0 holds
 * validation out of train instead of using the dataset's own split. */
static int parse_named(struct trn_fields *f, struct trn_spec_data *d)
{
	static const char *const keys[] = { "name", "shuffle", "val_fraction", "standardize", NULL };
	const struct dataset *ds = NULL;
	const char *root = trn_env_str("LARCH_DATASET_ROOT");
	char known[256], q[512];
	size_t o = 0;
	if (!root)
		root = DATASET_ROOT;
	if (trn_fields_known(f, keys, format_all_keys, "a named dataset") < 0 ||
	    trn_fields_name(f, "name", TRN_REQUIRED, 0, d->name) < 0)
		return -1;
	for (size_t i = 0; i < N_DATASETS; i++) {
		if (strcmp(datasets[i].name, d->name) == 0)
			ds = &datasets[i];
		o += (size_t)snprintf(known + o, sizeof known - o, "%s%s", i ? ", " : "",
		                      datasets[i].name);
	}
	if (!ds)
		return trn_fields_fail(f, "name", "unknown dataset %s (known: %s)",
		                       trn_quote(d->name, q, sizeof q), known);
	d->format = ds->format;
	int std = 0;
	if (trn_fields_num(f, "val_fraction", VAL_FRACTION, 0, 0, &d->val_fraction) < 0 ||
	    trn_fields_bool(f, "shuffle", 1, &d->shuffle) < 0 ||
	    (ds->format == TRN_DATA_IDX &&
	     trn_fields_enum(f, "standardize", standardizations, 0, 0, &std) < 0) ||
	    resolve(f, root, ds->name, ds->train, d->train) < 0 ||
	    resolve(f, root, ds->name, ds->train_labels, d->train_labels) < 0)
		return -1;
	if (ds->format == TRN_DATA_IDX)
		d->standardize = (enum trn_standardize)std;
	if (d->val_fraction > 0)
		return 0;
	if (resolve(f, root, ds->name, ds->val, d->val) < 0 ||
	    resolve(f, root, ds->name, ds->val_labels, d->val_labels) < 0)
		return -1;
	return 0;
}

/* idx: {"images": P, "labels": P}; returns 1 when given. */
static int parse_idx_pair(struct trn_fields *f, const char *key, int required, char *images,
                          char *labels)
{
	static const char *const keys[] = { "images", "labels", NULL };
	struct trn_fields p;
	if (!required && !json_object_get(f->in, key))
		return 0;
	if (trn_fields_object(&p, f, key, required) < 0 ||
	    trn_fields_known(&p, keys, NULL, NULL) < 0 ||
	    trn_fields_filepath(&p, "images", TRN_REQUIRED, images) < 0 ||
	    trn_fields_filepath(&p, "labels", TRN_REQUIRED, labels) < 0)
		return -1;
	return 1;
}

static int parse_files(struct trn_fields *f, struct trn_spec_data *d)
{
	int fmt, has_val;
	char what[32];
	if (trn_fields_enum(f, "format", formats, TRN_REQUIRED, 0, &fmt) < 0)
		return -1;
	d->format = (enum trn_data_format)fmt;
	snprintf(what, sizeof what, "format \"%s\"", formats[fmt]);
	if (trn_fields_known(f, format_keys[fmt], format_all_keys, what) < 0)
		return -1;
	if (fmt == TRN_DATA_IDX) {
		int std = 0;
		if (parse_idx_pair(f, "train", TRN_REQUIRED, d->train, d->train_labels) < 0 ||
		    (has_val = parse_idx_pair(f, "val", 0, d->val, d->val_labels)) < 0 ||
		    trn_fields_enum(f, "standardize", standardizations, 0, 0, &std) < 0)
			return -1;
		d->standardize = (enum trn_standardize)std;
	} else if (fmt == TRN_DATA_TOKENS_U16) {
		if (trn_fields_filepath(f, "train", TRN_REQUIRED, d->train) < 0 ||
		    (has_val = trn_fields_filepath(f, "val", 0, d->val)) < 0)
			return -1;
	} else {
		has_val = 0;
		if (trn_fields_filepath(f, "path", TRN_REQUIRED, d->train) < 0)
			return -1;
	}
	if (trn_fields_num(f, "val_fraction", VAL_FRACTION, 0, fmt == TRN_DATA_TEXT ? 0.05 : 0,
	                   &d->val_fraction) < 0 ||
	    trn_fields_bool(f, "shuffle", 1, &d->shuffle) < 0)
		return -1;
	if (has_val && d->val_fraction > 0)
		return trn_fields_fail(f, "val_fraction", "must be 0 when data.val is given");
	return 0;
}

int trn_spec_parse_data(struct trn_fields *root, struct trn_spec_data *d)
{
	struct trn_fields f;
	if (trn_fields_object(&f, root, "data", TRN_REQUIRED) < 0)
		return -1;
	int has_name = json_object_get(f.in, "name") != NULL;
	if (has_name == (json_object_get(f.in, "format") != NULL))
		return trn_fields_fail(&f, NULL, "exactly one of \"name\" or \"format\"");
	return has_name ? parse_named(&f, d) : parse_files(&f, d);
}

/* ---- resources -------------------------------------------------------------- */

/* Digits then end or a separator; at most 9 digits. */
static int read_uint(const char **p, long *out)
{
	long v = 0;
	int n = 0;
	for (; **p >= '0' && **p <= '9'; (*p)++, n++) {
		if (n == 9)
			return -1;
		v = v * 10 + (**p - '0');
	}
	*out = v;
	return n ? 0 : -1;
}

/* Slurm's --mem: "<n>[K|M|G|T]", no unit = M. Returns bytes or -1. */
static long long parse_mem(const char *s)
{
	const char *p = s;
	long n;
	int shift = 20;
	if (read_uint(&p, &n) < 0)
		return -1;
	switch (*p) {
	case 'K': case 'k': shift = 10; p++; break;
	case 'M': case 'm': shift = 20; p++; break;
	case 'G': case 'g': shift = 30; p++; break;
	case 'T': case 't': shift = 40; p++; break;
	}
	if (*p || n < 1 || n > (MEM_MAX >> shift))
		return -1;
	return (long long)n << shift;
}

/* Slurm's --time: "MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM", "D-HH:MM:SS".
 * Fields after the first must be in range. Returns seconds or -1. */
static long parse_time(const char *s)
{
	long v[3] = { 0, 0, 0 }, days = 0, h, m, sec;
	int n = 1, has_days = 0;
	const char *p = s;
	if (read_uint(&p, &v[0]) < 0)
		return -1;
	if (*p == '-') {
		has_days = 1;
		days = v[0];
		p++;
		if (read_uint(&p, &v[0]) < 0 || v[0] > 23)
			return -1;
	}
	for (; *p == ':' && n < 3; n++) {
		p++;
		if (read_uint(&p, &v[n]) < 0 || v[n] > 59)
			return -1;
	}
	if (*p)
		return -1;
	if (has_days || n == 3) {
		h = v[0];
		m = v[1];
		sec = v[2];
	} else {
		h = 0;
		m = v[0];
		sec = v[1];
	}
	long t = ((days * 24 + h) * 60 + m) * 60 + sec;
	return t > 0 && t <= TIME_MAX ? t : -1;
}

/* The value as given, for messages. */
static const char *got(const json_t *v, char *buf, size_t size)
{
	if (json_is_string(v))
		return trn_quote(json_string_value(v), buf, size);
	if (json_is_integer(v))
		snprintf(buf, size, "%lld", (long long)json_integer_value(v));
	else
		snprintf(buf, size, "%s", trn_json_type_name(v));
	return buf;
}

static int parse_mem_field(struct trn_fields *f, long long *bytes)
{
	static const char units[] = "KMGT";
	json_t *v = json_object_get(f->in, "mem");
	char buf[512];
	*bytes = 0;
	if (!v)
		return 0;
	if (json_is_integer(v) && json_integer_value(v) >= 1 &&
	    json_integer_value(v) <= (MEM_MAX >> 20))
		*bytes = (long long)json_integer_value(v) << 20;
	else if (json_is_string(v))
		*bytes = parse_mem(json_string_value(v));
	if (*bytes <= 0)
		return trn_fields_fail(f, "mem", "must be a size like \"4G\" or \"512M\" (K, M, G or "
		                       "T; no unit = M) between 1K and 1024T (got %s)",
		                       got(v, buf, sizeof buf));
	int u = 3;
	while (u > 0 && *bytes % (1LL << (10 * (u + 1))))
		u--;
	snprintf(buf, sizeof buf, "%lld%c", *bytes >> (10 * (u + 1)), units[u]);
	return trn_fields_put(f, "mem", json_string(buf));
}

static int parse_time_field(struct trn_fields *f, long *seconds)
{
	json_t *v = json_object_get(f->in, "time_limit");
	char buf[512];
	*seconds = 0;
	if (!v)
		return 0;
	if (json_is_integer(v) && json_integer_value(v) >= 1 &&
	    json_integer_value(v) <= TIME_MAX / 60)
		*seconds = (long)json_integer_value(v) * 60;
	else if (json_is_string(v))
		*seconds = parse_time(json_string_value(v));
	if (*seconds <= 0)
		return trn_fields_fail(f, "time_limit", "must be a Slurm time limit (\"MM\", "
		                       "\"MM:SS\", \"HH:MM:SS\", \"D-HH\", \"D-HH:MM\", \"D-HH:MM:SS\" "
		                       "or minutes as a number) between 1 second and 365 days (got %s)",
		                       got(v, buf, sizeof buf));
	long t = *seconds, d = t / 86400, h = t / 3600 % 24, m = t / 60 % 60, s = t % 60;
	if (d)
		snprintf(buf, sizeof buf, "%ld-%02ld:%02ld:%02ld", d, h, m, s);
	else
		snprintf(buf, sizeof buf, "%02ld:%02ld:%02ld", h, m, s);
	return trn_fields_put(f, "time_limit", json_string(buf));
}

int trn_spec_parse_resources(struct trn_fields *root, struct trn_spec_resources *r)
{
	static const char *const keys[] = { "nodes", "gpus_per_node", "cpus_per_task", "mem",
	                                    "time_limit", "partition", "qos", "account", NULL };
	struct trn_fields f;
	long long nodes, gpus, cpus;
	if (trn_fields_object(&f, root, "resources", TRN_OPTIONAL) < 0 ||
	    trn_fields_known(&f, keys, NULL, NULL) < 0 ||
	    trn_fields_int(&f, "nodes", 1, 4096, 0, 1, &nodes) < 0 ||
	    trn_fields_int(&f, "gpus_per_node", 0, 64, 0, 0, &gpus) < 0 ||
	    trn_fields_int(&f, "cpus_per_task", 1, 1024, 0, 1, &cpus) < 0 ||
	    parse_mem_field(&f, &r->mem_bytes) < 0 ||
	    parse_time_field(&f, &r->time_limit_s) < 0 ||
	    trn_fields_name(&f, "partition", 0, 0, r->partition) < 0 ||
	    trn_fields_name(&f, "qos", 0, 1, r->qos) < 0 ||
	    trn_fields_name(&f, "account", 0, 1, r->account) < 0)
		return -1;
	r->nodes = (int)nodes;
	r->gpus_per_node = (int)gpus;
	r->cpus_per_task = (int)cpus;
	return 0;
}
