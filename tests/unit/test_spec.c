/* tests/unit/test_spec.c - trainer/spec/spec.c: every bad spec under
 * specs/invalid/ gives exactly the message in its .error file; every spec
 * under specs/valid/ loads, with its defaults and derived values checked; the
 * canonical JSON reparses to itself and hashes the same whatever the key
 * order, whitespace or spelled-out defaults; the watchdog section's accepted
 * edges; init's two forms; a spec file that is not JSON is not echoed;
 * parallel.elastic stays out of the hash, and the spec on fewer ranks keeps
 * the global batch or is refused. */
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "trainer/spec/spec.h"

static char spec_dir[4096];

/* specs/ under $LARCH_TEST_DIR (set by ctest), else next to this file. */
static void find_spec_dir(void)
{
	const char *dir = getenv("LARCH_TEST_DIR");
	if (dir && *dir) {
		snprintf(spec_dir, sizeof spec_dir, "%s/specs", dir);
		return;
	}
	snprintf(spec_dir, sizeof spec_dir, "%s", __FILE__);
	char *slash = strrchr(spec_dir, '/');
	if (slash)
		strcpy(slash + 1, "specs");
	else
		strcpy(spec_dir, "specs");
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The sorted names in dir ending in suffix, without it; returns the count. */
static int list_cases(const char *dir, const char *suffix, char ***out)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL;
	int n = 0;
	size_t ls = strlen(suffix);
	CHECK_MSG(d != NULL, "cannot open %s", dir);
	while (d && (e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l <= ls || strcmp(e->d_name + l - ls, suffix) != 0)
			continue;
		names = realloc(names, sizeof *names * (size_t)(n + 1));
		names[n] = strndup(e->d_name, l - ls);
		n++;
	}
	if (d)
		closedir(d);
	if (n)
		qsort(names, (size_t)n, sizeof *names, by_name);
	*out = names;
	return n;
}

static void free_cases(char **names, int n)
{
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* The first line of a file, without its newline; 0 when unreadable. */
static int read_line(const char *path, char *buf, size_t size)
{
	FILE *fp = fopen(path, "r");
	if (!fp)
		return 0;
	int ok = fgets(buf, (int)size, fp) != NULL;
	fclose(fp);
	buf[strcspn(buf, "\n")] = '\0';
	return ok;
}

static int load(struct trn_spec *s, const char *name, struct trn_err *err)
{
	char path[8192];
	snprintf(path, sizeof path, "%s/valid/%s.json", spec_dir, name);
	trn_err_clear(err);
	int rc = trn_spec_from_file(s, path, err);
	CHECK_MSG(rc == 0, "valid/%s.json: %s", name, err->text);
	return rc;
}

static void test_invalid_cases(void)
{
	char dir[4200], path[8192], want[1024];
	char **names, **errors;
	snprintf(dir, sizeof dir, "%s/invalid", spec_dir);
	int n = list_cases(dir, ".json", &names);
	int n_err = list_cases(dir, ".error", &errors);
	CHECK_MSG(n >= 45, "%d invalid cases, want at least 45", n);
	CHECK_MSG(n == n_err, "%d .json but %d .error files", n, n_err);
	for (int i = 0; i < n; i++) {
		struct trn_spec s;
		struct trn_err err = { 0 };
		snprintf(path, sizeof path, "%s/%s.error", dir, names[i]);
		if (!CHECK_MSG(read_line(path, want, sizeof want), "%s: no .error file", names[i]))
			continue;
		/* "{dir}" in a message stands for the folder of the cases */
		char *at = strstr(want, "{dir}");
		if (at) {
			char rest[1024];
			snprintf(rest, sizeof rest, "%s", at + 5);
			snprintf(at, sizeof want - (size_t)(at - want), "%s%s", dir, rest);
		}
		snprintf(path, sizeof path, "%s/%s.json", dir, names[i]);
		int rc = trn_spec_from_file(&s, path, &err);
		CHECK_MSG(rc == -1, "%s: accepted", names[i]);
		CHECK_MSG(strcmp(err.text, want) == 0, "%s:\n  got  %s\n  want %s", names[i],
		          err.text, want);
		CHECK_MSG(s.json == NULL, "%s: json kept after failure", names[i]);
		trn_spec_release(&s);
	}
	free_cases(names, n);
	free_cases(errors, n_err);
}

/* Every valid spec loads, and its canonical JSON reparses to itself. */
static void test_valid_cases_reparse(void)
{
	char dir[4200], a[65], b[65];
	char **names;
	snprintf(dir, sizeof dir, "%s/valid", spec_dir);
	int n = list_cases(dir, ".json", &names);
	CHECK_MSG(n >= 5, "%d valid cases, want at least 5", n);
	for (int i = 0; i < n; i++) {
		struct trn_spec s, t;
		struct trn_err err = { 0 };
		if (load(&s, names[i], &err) != 0)
			continue;
		int rc = trn_spec_from_json(&t, s.json, &err);
		CHECK_MSG(rc == 0, "%s: canonical JSON rejected: %s", names[i], err.text);
		if (rc == 0) {
			CHECK_MSG(json_equal(s.json, t.json), "%s: canonical JSON not a fixed point",
			          names[i]);
			trn_spec_hash(&s, a);
			trn_spec_hash(&t, b);
			CHECK_STR_EQ(a, b);
			trn_spec_release(&t);
		}
		trn_spec_release(&s);
	}
	free_cases(names, n);
}

static void test_minimal_defaults(void)
{
	struct trn_spec s;
	struct trn_err err = { 0 };
	setenv("LARCH_DATASET_ROOT", "/srv/sets", 1);
	int rc = load(&s, "mlp_fmnist_minimal", &err);
	unsetenv("LARCH_DATASET_ROOT");
	if (rc)
		return;
	CHECK_STR_EQ(s.name, "job");
	CHECK_INT_EQ(s.model.type, TRN_MODEL_MLP);
	CHECK_INT_EQ(s.model.n_hidden, 1);
	CHECK_INT_EQ(s.model.hidden[0], 128);
	CHECK_INT_EQ(s.model.activation, TRN_ACT_RELU);
	CHECK_INT_EQ(s.data.format, TRN_DATA_IDX);
	CHECK_STR_EQ(s.data.name, "fashion-mnist");
	CHECK_STR_EQ(s.data.train, "/srv/sets/fashion-mnist/train-images-idx3-ubyte.gz");
	CHECK_STR_EQ(s.data.train_labels, "/srv/sets/fashion-mnist/train-labels-idx1-ubyte.gz");
	CHECK_STR_EQ(s.data.val, "/srv/sets/fashion-mnist/t10k-images-idx3-ubyte.gz");
	CHECK_STR_EQ(s.data.val_labels, "/srv/sets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
	CHECK(s.data.val_fraction == 0);
	CHECK_INT_EQ(s.data.shuffle, 1);
	CHECK_INT_EQ(s.batch.global, 256);
	CHECK_INT_EQ(s.batch.micro, 256);
	CHECK_INT_EQ(s.batch.reference, 256);
	CHECK_INT_EQ(s.batch.accum, 1);
	CHECK_INT_EQ(s.optimizer.type, TRN_OPT_SGD);
	CHECK(s.optimizer.lr == 0.1);
	CHECK(s.optimizer.momentum == 0.9);
	CHECK_INT_EQ(s.optimizer.nesterov, 0);
	CHECK(s.optimizer.weight_decay == 0 && s.optimizer.clip_grad_norm == 0);
	CHECK_INT_EQ(s.optimizer.n_exclude_from_weight_decay, 0);
	CHECK_INT_EQ(s.optimizer.state_dtype, TRN_DTYPE_FP32);
	CHECK_INT_EQ(s.schedule.lr_scaling, TRN_SCALE_NONE);
	CHECK(s.schedule.warmup.value == 0);
	CHECK_INT_EQ(s.schedule.decay, TRN_DECAY_NONE);
	CHECK_INT_EQ(s.precision.compute, TRN_DTYPE_FP32);
	CHECK_INT_EQ(s.precision.master, TRN_DTYPE_FP32);
	CHECK_INT_EQ(s.precision.dynamic_loss_scale, 1);
	CHECK(s.precision.init_scale == 65536);
	CHECK_INT_EQ(s.precision.growth_interval, 2000);
	CHECK_INT_EQ(s.precision.nondeterministic, 0);
	CHECK_INT_EQ(s.offload.optimizer, TRN_OFFLOAD_NONE);
	CHECK_INT_EQ(s.offload.params, TRN_OFFLOAD_NONE);
	CHECK_INT_EQ(s.offload.activations, TRN_OFFLOAD_NONE);
	CHECK_INT_EQ(s.parallel.ranks, 1);
	CHECK_INT_EQ(s.parallel.zero_stage, 0);
	CHECK_INT_EQ(s.resources.nodes, 1);
	CHECK_INT_EQ(s.resources.gpus_per_node, 0);
	CHECK_INT_EQ(s.resources.cpus_per_task, 1);
	CHECK_INT_EQ(s.resources.mem_bytes, 0);
	CHECK_INT_EQ(s.resources.time_limit_s, 0);
	CHECK_STR_EQ(s.resources.partition, "");
	CHECK_STR_EQ(s.resources.qos, "");
	CHECK_INT_EQ(s.length.in_epochs, 0);
	CHECK(s.length.value == 100);
	CHECK_INT_EQ(s.eval_every, 0);
	CHECK_INT_EQ(s.checkpoint_every, 0);
	CHECK_INT_EQ(s.keep_checkpoints, 3);
	CHECK_INT_EQ(s.log_every, 10);
	CHECK_STR_EQ(s.init_job, "");
	CHECK_INT_EQ(s.seed, 0);
	CHECK_STR_EQ(s.init_from, "");
	CHECK_INT_EQ(s.watchdog.max_rollbacks, 0);
	CHECK(s.watchdog.spike_factor == 0);
	CHECK_INT_EQ(s.watchdog.window, 100);
	/* the canonical JSON keeps the dataset's name, not the resolved paths */
	json_t *data = json_object_get(s.json, "data");
	CHECK_STR_EQ(json_string_value(json_object_get(data, "name")), "fashion-mnist");
	CHECK(json_object_get(data, "train") == NULL);
	CHECK_INT_EQ(json_integer_value(json_object_get(json_object_get(s.json, "batch"), "micro")),
	             256);
	CHECK_STR_EQ(json_string_value(json_object_get(s.json, "name")), "job");
	CHECK(json_object_get(s.json, "init") == NULL);
	/* the watchdog's defaults are spelled out like every other section's */
	json_t *wd = json_object_get(s.json, "watchdog");
	CHECK_INT_EQ(json_object_size(wd), 3);
	CHECK(json_is_integer(json_object_get(wd, "max_rollbacks")) &&
	      json_integer_value(json_object_get(wd, "max_rollbacks")) == 0);
	CHECK(json_is_real(json_object_get(wd, "spike_factor")) &&
	      json_real_value(json_object_get(wd, "spike_factor")) == 0);
	CHECK(json_is_integer(json_object_get(wd, "window")) &&
	      json_integer_value(json_object_get(wd, "window")) == 100);
	trn_spec_release(&s);
}

static void test_dataset_root_default(void)
{
	struct trn_spec s;
	struct trn_err err = { 0 };
	unsetenv("LARCH_DATASET_ROOT");
	if (load(&s, "mlp_fmnist_minimal", &err))
		return;
	CHECK_STR_EQ(s.data.train, "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
	trn_spec_release(&s);
}

static void test_full(void)
{
	struct trn_spec s;
	struct trn_err err = { 0 };
	if (load(&s, "mlp_fmnist_full", &err))
		return;
	CHECK_STR_EQ(s.name, "fmnist-8k");
	CHECK_INT_EQ(s.model.n_hidden, 2);
	CHECK_INT_EQ(s.model.hidden[1], 1024);
	CHECK_INT_EQ(s.model.activation, TRN_ACT_GELU);
	CHECK_STR_EQ(s.data.name, "");
	CHECK_STR_EQ(s.data.val_labels, "/data/fmnist/t10k-labels-idx1-ubyte.gz");
	CHECK_INT_EQ(s.data.shuffle, 0);
	CHECK_INT_EQ(s.batch.accum, 8);           /* 8192 / (256 x 4) */
	CHECK_INT_EQ(s.optimizer.type, TRN_OPT_LARS);
	CHECK(s.optimizer.momentum == 0.95 && s.optimizer.trust_coef == 0.002);
	CHECK(s.optimizer.weight_decay == 5e-4 && s.optimizer.clip_grad_norm == 1.0);
	CHECK_INT_EQ(s.optimizer.n_exclude_from_weight_decay, 1);
	CHECK_STR_EQ(s.optimizer.exclude_from_weight_decay[0], "bias");
	CHECK_INT_EQ(s.optimizer.n_exclude_from_adaptation, 3);
	CHECK_STR_EQ(s.optimizer.exclude_from_adaptation[2], "ln_");
	CHECK_INT_EQ(s.optimizer.state_dtype, TRN_DTYPE_INT8);
	CHECK_INT_EQ(s.schedule.lr_scaling, TRN_SCALE_LINEAR);
	CHECK(s.schedule.warmup.value == 5 && s.schedule.warmup.in_epochs);
	CHECK(s.schedule.warmup_start_lr == 0.05);
	CHECK_INT_EQ(s.schedule.decay, TRN_DECAY_STEP);
	CHECK(s.schedule.step_size.value == 10 && s.schedule.step_size.in_epochs);
	CHECK(s.schedule.gamma == 0.5);
	CHECK_INT_EQ(s.precision.compute, TRN_DTYPE_BF16);
	CHECK_INT_EQ(s.precision.dynamic_loss_scale, 0);
	CHECK(s.precision.loss_scale == 1024 && s.precision.init_scale == 32768);
	CHECK_INT_EQ(s.precision.growth_interval, 1000);
	CHECK_INT_EQ(s.precision.nondeterministic, 1);
	CHECK_INT_EQ(s.offload.optimizer, TRN_OFFLOAD_CPU);
	CHECK_INT_EQ(s.offload.params, TRN_OFFLOAD_CPU);
	CHECK_INT_EQ(s.offload.activations, TRN_OFFLOAD_RECOMPUTE);
	CHECK_INT_EQ(s.parallel.ranks, 4);
	CHECK_INT_EQ(s.parallel.zero_stage, 1);
	CHECK(s.length.value == 30 && s.length.in_epochs);
	CHECK_INT_EQ(s.eval_every, 500);
	CHECK_INT_EQ(s.checkpoint_every, 1000);
	CHECK_INT_EQ(s.keep_checkpoints, 5);
	CHECK_INT_EQ(s.log_every, 20);
	CHECK_INT_EQ(s.seed, 42);
	CHECK_STR_EQ(s.init_from, "/data/init/mlp.safetensors");
	CHECK_INT_EQ(s.watchdog.max_rollbacks, 3);
	CHECK(s.watchdog.spike_factor == 4.5);
	CHECK_INT_EQ(s.watchdog.window, 50);
	CHECK_INT_EQ(s.resources.nodes, 2);
	CHECK_INT_EQ(s.resources.gpus_per_node, 2);
	CHECK_INT_EQ(s.resources.cpus_per_task, 8);
	CHECK_INT_EQ(s.resources.mem_bytes, 4096LL << 20);
	CHECK_INT_EQ(s.resources.time_limit_s, 86400 + 12 * 3600 + 30 * 60);
	CHECK_STR_EQ(s.resources.partition, "gpu");
	CHECK_STR_EQ(s.resources.qos, "high");
	CHECK_STR_EQ(s.resources.account, "ml-team");
	json_t *r = json_object_get(s.json, "resources");
	CHECK_STR_EQ(json_string_value(json_object_get(r, "mem")), "4G");
	CHECK_STR_EQ(json_string_value(json_object_get(r, "time_limit")), "1-12:30:00");
	trn_spec_release(&s);
}

static void test_gpt_text(void)
{
	struct trn_spec s;
	struct trn_err err = { 0 };
	if (load(&s, "gpt_text", &err))
		return;
	CHECK_INT_EQ(s.model.type, TRN_MODEL_GPT);
	CHECK(s.model.layers == 2 && s.model.heads == 4 && s.model.dim == 128 && s.model.seq == 64);
	CHECK_INT_EQ(s.model.vocab, 256);         /* text: one token per byte */
	CHECK_INT_EQ(s.model.activation, TRN_ACT_GELU);
	CHECK_INT_EQ(s.data.format, TRN_DATA_TEXT);
	CHECK_STR_EQ(s.data.train, "corpus.txt");
	CHECK(s.data.val_fraction == 0.05);
	CHECK_INT_EQ(s.batch.micro, 16);
	CHECK_INT_EQ(s.batch.reference, 64);
	CHECK_INT_EQ(s.batch.accum, 4);
	CHECK_INT_EQ(s.optimizer.type, TRN_OPT_ADAMW);
	CHECK(s.optimizer.beta1 == 0.9 && s.optimizer.beta2 == 0.999 && s.optimizer.eps == 1e-8);
	CHECK_INT_EQ(s.optimizer.n_exclude_from_weight_decay, 0);
	CHECK(s.schedule.warmup.value == 100 && !s.schedule.warmup.in_epochs);
	CHECK(s.schedule.warmup_start_lr == 0);   /* no scaling: warm up from 0 */
	CHECK_INT_EQ(s.schedule.decay, TRN_DECAY_COSINE);
	CHECK(s.schedule.final_lr == 3e-5);
	CHECK_INT_EQ(s.resources.mem_bytes, 2LL << 30);
	CHECK_INT_EQ(s.resources.time_limit_s, 1800);
	CHECK_INT_EQ(json_integer_value(json_object_get(json_object_get(s.json, "model"), "vocab")),
	             256);
	trn_spec_release(&s);
}

static void test_gpt_tokens(void)
{
	struct trn_spec s;
	struct trn_err err = { 0 };
	if (load(&s, "gpt_tokens_u16", &err))
		return;
	CHECK_INT_EQ(s.model.vocab, 50304);
	CHECK_INT_EQ(s.data.format, TRN_DATA_TOKENS_U16);
	CHECK_STR_EQ(s.data.val, "data/fineweb_val_000000.bin");
	CHECK(s.data.val_fraction == 0);
	CHECK_INT_EQ(s.batch.accum, 8);           /* 128 / (8 x 2) */
	CHECK_INT_EQ(s.batch.reference, 32);
	CHECK(s.optimizer.beta2 == 0.95);
	CHECK_INT_EQ(s.optimizer.n_exclude_from_weight_decay, 3);
	CHECK_INT_EQ(s.schedule.lr_scaling, TRN_SCALE_SQRT);
	CHECK(s.schedule.warmup_start_lr == 6e-4); /* scaled: warm up from the base lr */
	CHECK_INT_EQ(s.schedule.decay, TRN_DECAY_POLY);
	CHECK(s.schedule.power == 2 && s.schedule.final_lr == 0);
	CHECK_INT_EQ(s.precision.compute, TRN_DTYPE_FP16);
	CHECK_STR_EQ(s.resources.qos, "");
	CHECK_STR_EQ(s.resources.account, "");
	CHECK_INT_EQ(s.resources.time_limit_s, 7200);
	trn_spec_release(&s);
}

static void test_lamb_warmup_epochs(void)
{
	struct trn_spec s;
	struct trn_err err = { 0 };
	if (load(&s, "lamb_warmup_epochs_poly", &err))
		return;
	CHECK_INT_EQ(s.optimizer.type, TRN_OPT_LAMB);
	CHECK(s.optimizer.eps == 1e-6);
	CHECK_INT_EQ(s.optimizer.n_exclude_from_weight_decay, 2);
	CHECK_STR_EQ(s.optimizer.exclude_from_weight_decay[0], "bias");
	CHECK_STR_EQ(s.optimizer.exclude_from_weight_decay[1], "norm");
	CHECK_INT_EQ(s.optimizer.n_exclude_from_adaptation, 2);
	CHECK_STR_EQ(s.optimizer.exclude_from_adaptation[1], "norm");
	CHECK_INT_EQ(s.batch.accum, 16);
	CHECK(s.schedule.warmup.value == 2.5 && s.schedule.warmup.in_epochs);
	CHECK(s.schedule.warmup_start_lr == 0.002);
	CHECK(s.schedule.power == 1);
	/* val_fraction on a named dataset: validate on a part of train instead */
	CHECK(s.data.val_fraction == 0.1);
	CHECK_STR_EQ(s.data.val, "");
	CHECK(s.length.value == 40 && s.length.in_epochs);
	/* 60000 / 16384 = 3 steps per epoch */
	CHECK_INT_EQ(trn_period_steps(&s.schedule.warmup, 3), 8);  /* 7.5 rounds up */
	CHECK_INT_EQ(trn_period_steps(&s.length, 3), 120);
	trn_spec_release(&s);
}

static void test_sgd_nesterov(void)
{
	struct trn_spec s;
	struct trn_err err = { 0 };
	if (load(&s, "sgd_nesterov_step_decay", &err))
		return;
	CHECK_INT_EQ(s.optimizer.nesterov, 1);
	CHECK_INT_EQ(s.batch.micro, 256);         /* global / ranks */
	CHECK_INT_EQ(s.batch.accum, 1);
	CHECK(s.schedule.warmup_start_lr == 0.01);
	CHECK(s.schedule.step_size.value == 300 && !s.schedule.step_size.in_epochs);
	CHECK(s.schedule.gamma == 0.1);
	CHECK_INT_EQ(s.resources.mem_bytes, 1536LL << 20);
	CHECK_INT_EQ(s.resources.time_limit_s, 5400);
	json_t *r = json_object_get(s.json, "resources");
	CHECK_STR_EQ(json_string_value(json_object_get(r, "mem")), "1536M");
	CHECK_STR_EQ(json_string_value(json_object_get(r, "time_limit")), "01:30:00");
	trn_spec_release(&s);
}

static int hash_of(const char *text, char out[65])
{
	struct trn_spec s;
	struct trn_err err = { 0 };
	out[0] = '\0';
	if (!CHECK_MSG(trn_spec_from_string(&s, text, &err) == 0, "%s: %s", text, err.text))
		return -1;
	trn_spec_hash(&s, out);
	trn_spec_release(&s);
	return 0;
}

static void test_hash(void)
{
	char a[65], b[65], c[65], d[65], e[65], f[65];
	hash_of("{\"model\": {\"type\": \"mlp\", \"hidden\": [128]}, \"data\": {\"name\": "
	        "\"fashion-mnist\"}, \"batch\": {\"global\": 256}, \"optimizer\": {\"type\": \"sgd\", "
	        "\"lr\": 0.1}, \"epochs\": 3}", a);
	/* keys reordered, other whitespace, 3.0 for 3, 1e-1 for 0.1 */
	hash_of("{\n\"epochs\":3.0,\"optimizer\":{\"lr\":1e-1,\"type\":\"sgd\"},\n\t\"batch\":"
	        "{\"global\":256},\"data\":{\"name\":\"fashion-mnist\"},\"model\":{\"hidden\":[128],"
	        "\"type\":\"mlp\"}}", b);
	/* defaults spelled out */
	hash_of("{\"name\": \"job\", \"model\": {\"type\": \"mlp\", \"hidden\": [128], \"activation\": "
	        "\"relu\"}, \"data\": {\"name\": \"fashion-mnist\", \"shuffle\": true}, \"batch\": "
	        "{\"global\": 256, \"micro\": 256, \"reference\": 256}, \"optimizer\": {\"type\": "
	        "\"sgd\", \"lr\": 0.1, \"momentum\": 0.9}, \"parallel\": {\"ranks\": 1}, \"schedule\": "
	        "{\"lr_scaling\": \"none\"}, \"precision\": {\"loss_scale\": \"dynamic\"}, "
	        "\"epochs\": 3, \"seed\": 0, \"keep_checkpoints\": 3, \"resources\": {\"qos\": null}, "
	        "\"watchdog\": {\"max_rollbacks\": 0, \"spike_factor\": 0, \"window\": 100}}", c);
	/* one value changed */
	hash_of("{\"model\": {\"type\": \"mlp\", \"hidden\": [128]}, \"data\": {\"name\": "
	        "\"fashion-mnist\"}, \"batch\": {\"global\": 256}, \"optimizer\": {\"type\": \"sgd\", "
	        "\"lr\": 0.1}, \"epochs\": 3, \"seed\": 1}", d);
	hash_of("{\"model\": {\"type\": \"mlp\", \"hidden\": [128]}, \"data\": {\"name\": "
	        "\"fashion-mnist\"}, \"batch\": {\"global\": 256}, \"optimizer\": {\"type\": \"sgd\", "
	        "\"lr\": 0.10000001}, \"epochs\": 3}", e);
	/* the memory spelled another way */
	hash_of("{\"model\": {\"type\": \"mlp\", \"hidden\": [128]}, \"data\": {\"name\": "
	        "\"fashion-mnist\"}, \"batch\": {\"global\": 256}, \"optimizer\": {\"type\": \"sgd\", "
	        "\"lr\": 0.1}, \"epochs\": 3, \"resources\": {\"mem\": \"2G\"}}", f);
	CHECK_INT_EQ(strlen(a), 64);
	CHECK_INT_EQ(strspn(a, "0123456789abcdef"), 64);
	CHECK_STR_EQ(b, a);
	CHECK_STR_EQ(c, a);
	CHECK(strcmp(d, a) != 0);
	CHECK(strcmp(e, a) != 0);
	CHECK(strcmp(f, a) != 0);
	hash_of("{\"model\": {\"type\": \"mlp\", \"hidden\": [128]}, \"data\": {\"name\": "
	        "\"fashion-mnist\"}, \"batch\": {\"global\": 256}, \"optimizer\": {\"type\": \"sgd\", "
	        "\"lr\": 0.1}, \"epochs\": 3, \"resources\": {\"mem\": \"2048m\"}}", b);
	CHECK_STR_EQ(b, f);
	hash_of("{\"model\": {\"type\": \"mlp\", \"hidden\": [128]}, \"data\": {\"name\": "
	        "\"fashion-mnist\"}, \"batch\": {\"global\": 256}, \"optimizer\": {\"type\": \"sgd\", "
	        "\"lr\": 0.1}, \"epochs\": 3, \"watchdog\": {\"max_rollbacks\": 2}}", b);
	CHECK(strcmp(b, a) != 0);
}

/* Parses a minimal valid spec with extra ("\"key\": value") added at its top
 * level into s; 1 when it parsed (release s), 0 after a failed check. */
static int parse_minimal(struct trn_spec *s, const char *extra)
{
	char text[1024];
	struct trn_err err = { 0 };
	snprintf(text, sizeof text, "{\"model\": {\"type\": \"mlp\", \"hidden\": [8]}, \"data\": "
	         "{\"name\": \"fashion-mnist\"}, \"batch\": {\"global\": 8}, \"optimizer\": "
	         "{\"type\": \"sgd\", \"lr\": 0.1}, \"steps\": 1, %s}", extra);
	return CHECK_MSG(trn_spec_from_string(s, text, &err) == 0, "%s: %s", extra, err.text);
}

/* The watchdog's edges that are accepted, and what they become. */
static void test_watchdog_edges(void)
{
	static const struct {
		const char *json;
		int max_rollbacks;
		double spike_factor;
		long window;
	} cases[] = {
		{ "{}", 0, 0, 100 },
		{ "{\"max_rollbacks\": 1000}", 1000, 0, 100 },
		{ "{\"spike_factor\": 0.0}", 0, 0, 100 },
		{ "{\"spike_factor\": 1.0000001}", 0, 1.0000001, 100 },
		{ "{\"spike_factor\": 3}", 0, 3, 100 },
		{ "{\"spike_factor\": 1e6, \"window\": 1}", 0, 1e6, 1 },
		{ "{\"max_rollbacks\": 5, \"spike_factor\": 2.5, \"window\": 100000}", 5, 2.5, 100000 },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char extra[512];
		struct trn_spec s;
		snprintf(extra, sizeof extra, "\"watchdog\": %s", cases[i].json);
		if (!parse_minimal(&s, extra))
			continue;
		CHECK_INT_EQ(s.watchdog.max_rollbacks, cases[i].max_rollbacks);
		CHECK_MSG(s.watchdog.spike_factor == cases[i].spike_factor, "%s: spike_factor %g",
		          cases[i].json, s.watchdog.spike_factor);
		CHECK_INT_EQ(s.watchdog.window, cases[i].window);
		json_t *wd = json_object_get(s.json, "watchdog");
		CHECK_INT_EQ(json_integer_value(json_object_get(wd, "max_rollbacks")),
		             cases[i].max_rollbacks);
		CHECK(json_real_value(json_object_get(wd, "spike_factor")) == cases[i].spike_factor);
		CHECK_INT_EQ(json_integer_value(json_object_get(wd, "window")), cases[i].window);
		trn_spec_release(&s);
	}
}

static void test_period_steps(void)
{
	struct trn_period steps = { 100, 0 }, half = { 0.5, 1 }, two5 = { 2.5, 1 };
	struct trn_period tenth = { 0.1, 1 }, none = { 0, 0 }, huge = { 1e6, 1 };
	CHECK_INT_EQ(trn_period_steps(&steps, 7), 100);
	CHECK_INT_EQ(trn_period_steps(&steps, 0), 100);
	CHECK_INT_EQ(trn_period_steps(&half, 3), 2);    /* 1.5 rounds away from zero */
	CHECK_INT_EQ(trn_period_steps(&half, 5), 3);
	CHECK_INT_EQ(trn_period_steps(&two5, 7), 18);   /* 17.5 */
	CHECK_INT_EQ(trn_period_steps(&two5, 6), 15);
	CHECK_INT_EQ(trn_period_steps(&tenth, 4), 0);   /* 0.4 */
	CHECK_INT_EQ(trn_period_steps(&tenth, 6), 1);   /* 0.6 */
	CHECK_INT_EQ(trn_period_steps(&none, 100), 0);
	CHECK_INT_EQ(trn_period_steps(&half, 0), 0);
	CHECK_INT_EQ(trn_period_steps(&half, -4), 0);
	CHECK_INT_EQ(trn_period_steps(&huge, LONG_MAX), LONG_MAX);
}

/* Slurm's memory and time formats, and their canonical spellings. */
static void test_resources_formats(void)
{
	static const struct {
		const char *json;
		long long mem;
		long time;
		const char *mem_c, *time_c;
	} cases[] = {
		{ "\"mem\": \"512\", \"time_limit\": \"5\"", 512LL << 20, 300, "512M", "00:05:00" },
		{ "\"mem\": \"1024k\", \"time_limit\": \"5:30\"", 1LL << 20, 330, "1M", "00:05:30" },
		{ "\"mem\": \"3K\", \"time_limit\": \"90:00\"", 3LL << 10, 5400, "3K", "01:30:00" },
		{ "\"mem\": \"1T\", \"time_limit\": \"100:00:00\"", 1LL << 40, 360000, "1T",
		  "4-04:00:00" },
		{ "\"mem\": \"1024T\", \"time_limit\": \"2-0\"", 1LL << 50, 172800, "1024T",
		  "2-00:00:00" },
		{ "\"mem\": 2048, \"time_limit\": \"0-1:5\"", 2LL << 30, 3900, "2G", "01:05:00" },
		{ "\"mem\": \"1536M\", \"time_limit\": \"365-0:0:0\"", 1536LL << 20, 365L * 86400,
		  "1536M", "365-00:00:00" },
		{ "\"mem\": \"4g\", \"time_limit\": \"0:1\"", 4LL << 30, 1, "4G", "00:00:01" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char extra[512];
		struct trn_spec s;
		snprintf(extra, sizeof extra, "\"resources\": {%s}", cases[i].json);
		if (!parse_minimal(&s, extra))
			continue;
		json_t *r = json_object_get(s.json, "resources");
		CHECK_INT_EQ(s.resources.mem_bytes, cases[i].mem);
		CHECK_INT_EQ(s.resources.time_limit_s, cases[i].time);
		CHECK_STR_EQ(json_string_value(json_object_get(r, "mem")), cases[i].mem_c);
		CHECK_STR_EQ(json_string_value(json_object_get(r, "time_limit")), cases[i].time_c);
		trn_spec_release(&s);
	}
}

/* warmup.start_lr defaults to the base lr only when scaling changes the lr */
static void test_warmup_start_default(void)
{
	static const struct {
		const char *scaling;
		int reference;
		double want;
	} cases[] = { { "none", 64, 0 }, { "linear", 64, 0.1 }, { "sqrt", 64, 0.1 },
	              { "linear", 256, 0 } };
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char text[1024];
		struct trn_spec s;
		struct trn_err err = { 0 };
		snprintf(text, sizeof text, "{\"model\": {\"type\": \"mlp\", \"hidden\": [8]}, \"data\": "
		         "{\"name\": \"fashion-mnist\"}, \"batch\": {\"global\": 256, \"reference\": %d}, "
		         "\"optimizer\": {\"type\": \"sgd\", \"lr\": 0.1}, \"steps\": 100, \"schedule\": "
		         "{\"lr_scaling\": \"%s\", \"warmup\": {\"steps\": 10}}}", cases[i].reference,
		         cases[i].scaling);
		if (!CHECK_MSG(trn_spec_from_string(&s, text, &err) == 0, "%s", err.text))
			continue;
		CHECK_MSG(s.schedule.warmup_start_lr == cases[i].want, "%s, reference %d: start_lr %g",
		          cases[i].scaling, cases[i].reference, s.schedule.warmup_start_lr);
		json_t *w = json_object_get(json_object_get(s.json, "schedule"), "warmup");
		CHECK(json_real_value(json_object_get(w, "start_lr")) == cases[i].want);
		trn_spec_release(&s);
	}
}

static void test_api_edges(void)
{
	struct trn_spec s;
	struct trn_err err = { 0 };
	json_t *root = json_loads("{\"model\": {\"type\": \"mlp\", \"hidden\": [8]}, \"data\": "
	                          "{\"name\": \"fashion-mnist\"}, \"batch\": {\"global\": 8}, "
	                          "\"optimizer\": {\"type\": \"sgd\", \"lr\": 0.1}, \"steps\": 1}",
	                          0, NULL);
	/* borrows root: the caller's reference is untouched, the canonical copy is new */
	CHECK(trn_spec_from_json(&s, root, &err) == 0);
	CHECK_INT_EQ(root->refcount, 1);
	CHECK(s.json != root && s.json->refcount == 1);
	trn_spec_release(&s);
	trn_spec_release(&s);                      /* a second release is harmless */
	CHECK(s.json == NULL);
	json_decref(root);

	CHECK(trn_spec_from_string(&s, NULL, &err) == -1);
	CHECK_STR_EQ(err.text, "spec: no text");
	trn_err_clear(&err);
	CHECK(trn_spec_from_file(&s, "/nonexistent/spec.json", &err) == -1);
	CHECK_STR_EQ(err.text, "spec: /nonexistent/spec.json: No such file or directory");
	trn_err_clear(&err);
	CHECK(trn_spec_from_json(&s, NULL, NULL) == -1);   /* err may be NULL */

	CHECK_STR_EQ(trn_opt_name(TRN_OPT_SGD), "sgd");
	CHECK_STR_EQ(trn_opt_name(TRN_OPT_LAMB), "lamb");
	CHECK_STR_EQ(trn_dtype_name(TRN_DTYPE_BF16), "bf16");
	CHECK_STR_EQ(trn_dtype_name(TRN_DTYPE_INT8), "int8");
	CHECK_STR_EQ(trn_dtype_name((enum trn_dtype)99), "unknown");
}

/* "init": {"job": id, "step": n}: kept for larchd to resolve, in the
 * struct and in the canonical spec; step absent = the newest (-1). */
static void test_init_job(void)
{
	static const char *const base = "{\"model\": {\"type\": \"mlp\", \"hidden\": [8]}, "
	                                "\"data\": {\"name\": \"fashion-mnist\"}, \"batch\": "
	                                "{\"global\": 8}, \"optimizer\": {\"type\": \"sgd\", "
	                                "\"lr\": 0.1}, \"steps\": 1, \"init\": %s}";
	char text[1024];
	struct trn_spec s;
	struct trn_err err = { 0 };
	snprintf(text, sizeof text, base, "{\"job\": \"j-000123\", \"step\": 300}");
	if (CHECK_MSG(trn_spec_from_string(&s, text, &err) == 0, "%s", err.text)) {
		CHECK_STR_EQ(s.init_job, "j-000123");
		CHECK_INT_EQ(s.init_step, 300);
		CHECK_STR_EQ(s.init_from, "");
		json_t *init = json_object_get(s.json, "init");
		CHECK_STR_EQ(json_string_value(json_object_get(init, "job")), "j-000123");
		CHECK_INT_EQ(json_integer_value(json_object_get(init, "step")), 300);
		trn_spec_release(&s);
	}
	snprintf(text, sizeof text, base, "{\"job\": \"j-1234567\"}");
	if (CHECK_MSG(trn_spec_from_string(&s, text, &err) == 0, "%s", err.text)) {
		CHECK_STR_EQ(s.init_job, "j-1234567");
		CHECK_INT_EQ(s.init_step, -1);
		CHECK(json_object_get(json_object_get(s.json, "init"), "step") == NULL);
		trn_spec_release(&s);
	}
	snprintf(text, sizeof text, base, "{\"from\": \"w.safetensors\"}");
	if (CHECK_MSG(trn_spec_from_string(&s, text, &err) == 0, "%s", err.text)) {
		CHECK_STR_EQ(s.init_job, "");
		CHECK_INT_EQ(s.init_step, -1);
		CHECK_STR_EQ(s.init_from, "w.safetensors");
		trn_spec_release(&s);
	}
}

/* A spec file that is not JSON (a secret file named as the spec) fails
 * without a byte of it in the message; a FIFO is refused, not read. */
static void test_file_not_echoed(void)
{
	static const char secret[] = "root:$y$j9T$Zq7Vb3kXw2Pn0Lr5:19700:0:99999:7:::\n";
	const char *dir = check_tmpdir("spec");
	char path[4200];
	struct trn_spec s;
	struct trn_err err = { 0 };
	snprintf(path, sizeof path, "%s/secret", dir);
	FILE *f = fopen(path, "w");
	CHECK(f && fputs(secret, f) >= 0 && fclose(f) == 0);
	CHECK(trn_spec_from_file(&s, path, &err) == -1);
	CHECK_MSG(strstr(err.text, "spec: invalid JSON at line 1 column ") == err.text, "%s",
	          err.text);
	CHECK_NO_LEAK(err.text, secret, sizeof secret - 1);
	/* the same bytes after a valid start: no quoted input either */
	snprintf(path, sizeof path, "%s/secret2", dir);
	f = fopen(path, "w");
	CHECK(f && fprintf(f, "{\"a\": %s", secret) > 0 && fclose(f) == 0);
	trn_err_clear(&err);
	CHECK(trn_spec_from_file(&s, path, &err) == -1);
	CHECK_NO_LEAK(err.text, secret, sizeof secret - 1);
	CHECK_MSG(strstr(err.text, "near") == NULL, "%s", err.text);
	snprintf(path, sizeof path, "%s/fifo", dir);
	CHECK(mkfifo(path, 0600) == 0);
	trn_err_clear(&err);
	CHECK(trn_spec_from_file(&s, path, &err) == -1);
	CHECK_MSG(strstr(err.text, "not a regular file") != NULL, "%s", err.text);
}

/* trn_json_dumps: reals in their shortest round-trip form, still reals;
 * strings (with escapes and digits in them) and integers untouched. */
static void test_short_reals(void)
{
	const double values[] = { 0.1, 0.9, 5e-4, 1.0, 0.0, -2.5, 65536.0, 1e-7, 123456.789,
	                          1e300, 0.30000000000000004, 2.2250738585072014e-308,
	                          1.0 / 3.0, 6.02214076e23 };
	for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
		json_t *j = json_pack("{s:f,s:s,s:i}", "x", values[i], "s", "0.10000000000000001 \"1.5\"",
		                      "n", 12345);
		char *text = trn_json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
		json_t *back = json_loads(text, 0, NULL);
		CHECK_MSG(back && json_is_real(json_object_get(back, "x")) &&
		          json_real_value(json_object_get(back, "x")) == values[i], "%s", text);
		CHECK_STR_EQ(json_string_value(json_object_get(back, "s")), "0.10000000000000001 \"1.5\"");
		CHECK(json_integer_value(json_object_get(back, "n")) == 12345);
		char *plain = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
		CHECK(strlen(text) <= strlen(plain));
		free(plain);
		json_decref(back);
		free(text);
		json_decref(j);
	}
	json_t *j = json_pack("{s:f,s:f,s:f}", "lr", 0.1, "one", 1.0, "wd", 5e-4);
	char *text = trn_json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	CHECK_STR_EQ(text, "{\"lr\":0.1,\"one\":1.0,\"wd\":0.0005}");
	free(text);
	json_decref(j);
}

#define ELASTIC_SPEC(parallel, batch) \
	"{\"model\": {\"type\": \"mlp\", \"hidden\": [16]}, \"data\": {\"name\": " \
	"\"fashion-mnist\"}, \"batch\": " batch ", \"optimizer\": {\"type\": \"sgd\", " \
	"\"lr\": 0.1}, \"steps\": 10, \"parallel\": " parallel "}"

static void test_elastic(void)
{
	char a[65], b[65], c[65];
	hash_of(ELASTIC_SPEC("{\"ranks\": 4}", "{\"global\": 256, \"micro\": 32}"), a);
	hash_of(ELASTIC_SPEC("{\"ranks\": 4, \"elastic\": {\"min_ranks\": 2}}",
	                     "{\"global\": 256, \"micro\": 32}"), b);
	hash_of(ELASTIC_SPEC("{\"ranks\": 2}", "{\"global\": 256, \"micro\": 32}"), c);
	CHECK_STR_EQ(a, b);             /* where it may start is not what it trains */
	CHECK(strcmp(a, c) != 0);       /* the rank count still is */

	struct trn_spec s, e;
	struct trn_err err = { 0 };
	/* absent, elastic stays out of the canonical spec */
	CHECK(trn_spec_from_string(&s, ELASTIC_SPEC("{\"ranks\": 4}", "{\"global\": 256}"),
	                           &err) == 0);
	CHECK(!json_object_get(json_object_get(s.json, "parallel"), "elastic"));
	CHECK_INT_EQ(s.parallel.min_ranks, 0);
	CHECK(trn_spec_elastic(&s, 4, &e, &err) == 0 && e.parallel.ranks == 4);
	CHECK(trn_spec_elastic(&s, 2, &e, &err) == -1);
	CHECK_MSG(strstr(err.text, "parallel.ranks: the spec asks for 4 ranks but the launcher "
	                 "started 2") == err.text, "%s", err.text);
	trn_spec_release(&s);

	err = (struct trn_err){ 0 };
	CHECK(trn_spec_from_string(&s, ELASTIC_SPEC("{\"ranks\": 4, \"elastic\": {\"min_ranks\": 2}}",
	                                            "{\"global\": 256, \"micro\": 32}"), &err) == 0);
	CHECK_INT_EQ(s.parallel.min_ranks, 2);
	CHECK_INT_EQ(json_integer_value(json_object_get(json_object_get(json_object_get(
	             s.json, "parallel"), "elastic"), "min_ranks")), 2);
	CHECK_INT_EQ(s.batch.accum, 2);
	CHECK(trn_spec_elastic(&s, 2, &e, &err) == 0);
	CHECK_INT_EQ(e.parallel.ranks, 2);
	CHECK_INT_EQ(e.batch.accum, 4);
	CHECK_INT_EQ(e.batch.global, 256);
	CHECK_INT_EQ(e.batch.micro, 32);
	CHECK(e.json == s.json);
	err = (struct trn_err){ 0 };   /* (it keeps the first error) */
	CHECK(trn_spec_elastic(&s, 3, &e, &err) == -1);   /* 256 / (32 x 3) */
	CHECK_STR_EQ(err.text, "parallel.elastic: 3 ranks started, and batch.global is not a "
	             "multiple of batch.micro x 3 (got 256, 32 x 3): the global batch cannot be kept");
	err = (struct trn_err){ 0 };
	CHECK(trn_spec_elastic(&s, 1, &e, &err) == -1);
	CHECK_STR_EQ(err.text, "parallel.elastic.min_ranks: 1 ranks started, outside 2..4 (the "
	             "spec's min_ranks..ranks)");
	CHECK(trn_spec_elastic(&s, 5, &e, &err) == -1);
	trn_spec_release(&s);
}

int main(void)
{
	find_spec_dir();
	CHECK_RUN(test_invalid_cases);
	CHECK_RUN(test_valid_cases_reparse);
	CHECK_RUN(test_minimal_defaults);
	CHECK_RUN(test_dataset_root_default);
	CHECK_RUN(test_full);
	CHECK_RUN(test_gpt_text);
	CHECK_RUN(test_gpt_tokens);
	CHECK_RUN(test_lamb_warmup_epochs);
	CHECK_RUN(test_sgd_nesterov);
	CHECK_RUN(test_hash);
	CHECK_RUN(test_period_steps);
	CHECK_RUN(test_resources_formats);
	CHECK_RUN(test_warmup_start_default);
	CHECK_RUN(test_watchdog_edges);
	CHECK_RUN(test_api_edges);
	CHECK_RUN(test_init_job);
	CHECK_RUN(test_file_not_echoed);
	CHECK_RUN(test_short_reals);
	CHECK_RUN(test_elastic);
	return check_finish();
}
