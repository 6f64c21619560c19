/* tests/unit/test_plan.c - trainer/spec/plan.c: the memory plan of a spec. A GPT
 * on a byte-level text file: params and grads of the model's own parameter
 * count, AdamW's two fp32 states, ZeRO-1 halves them, activations grow with
 * the micro-batch, the largest micro-batch that fits a limit is found, and a
 * spec whose buffers would overflow any count is answered TRN_PLAN_TOO_LARGE
 * instead of being planned (the sanitizer build runs this). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kernels/cuda_sizes.h"
#include "trainer/model.h"
#include "trainer/spec/plan.h"
#include "trainer/spec/spec.h"

static char corpus[] = "/tmp/larch-test-plan-XXXXXX";

static int make_spec(struct trn_spec *s, const char *extra_model, long micro, int ranks)
{
	char text[1024];
	snprintf(text, sizeof text,
	         "{\"name\": \"plan\", \"model\": {\"type\": \"gpt\", %s},"
	         " \"data\": {\"format\": \"text\", \"path\": \"%s\"},"
	         " \"batch\": {\"global\": %ld, \"micro\": %ld},"
	         " \"parallel\": {\"ranks\": %d, \"zero_stage\": %d},"
	         " \"optimizer\": {\"type\": \"adamw\", \"lr\": 0.001}, \"steps\": 1}",
	         extra_model, corpus, micro * ranks, micro, ranks, ranks > 1);
	json_error_t jerr;
	json_t *root = json_loads(text, 0, &jerr);
	struct trn_err err = { 0 };
	int rc = root ? trn_spec_from_json(s, root, &err) : -1;
	if (rc != 0)
		fprintf(stderr, "spec: %s%s\n", err.text, root ? "" : jerr.text);
	json_decref(root);
	return rc;
}

static const char small[] = "\"layers\": 2, \"heads\": 2, \"dim\": 64, \"seq\": 32";

static void test_items(void)
{
	struct trn_spec s;
	struct trn_plan p, z;
	struct trn_err err = { 0 };
	if (!CHECK(make_spec(&s, small, 8, 1) == 0))
		return;
	CHECK_INT_EQ(trn_plan_make(&p, &s, 0, &err), 0);
	/* 256 x 64 + 32 x 64 embeddings, per block 12 x 64^2 + 13 x 64, final norm 128 */
	long n = 256 * 64 + 32 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64;
	CHECK_INT_EQ(p.n_params, n);
	CHECK_INT_EQ((long)p.bytes[TRN_PLAN_PARAMS], 4 * n);
	CHECK_INT_EQ((long)p.bytes[TRN_PLAN_GRADS], 4 * n);
	CHECK_INT_EQ((long)p.bytes[TRN_PLAN_OPTIMIZER], 8 * n);
	CHECK(p.bytes[TRN_PLAN_MASTER] == 0 && p.bytes[TRN_PLAN_GRAD_SHARD] == 0);
	CHECK(p.bytes[TRN_PLAN_ACTIVATIONS] > 0 && p.bytes[TRN_PLAN_DATA] > 0);
	CHECK(p.device_bytes == 0 && p.on_host[TRN_PLAN_ACTIVATIONS]);
	double sum = 0;
	for (int i = 0; i < TRN_PLAN_N; i++)
		sum += p.bytes[i];
	CHECK(sum == p.host_bytes);
	/* twice the micro-batch: twice the activations */
	struct trn_plan p2;
	CHECK_INT_EQ(trn_plan_make(&p2, &s, 16, &err), 0);
	CHECK(p2.bytes[TRN_PLAN_ACTIVATIONS] > 1.9 * p.bytes[TRN_PLAN_ACTIVATIONS]);
	trn_spec_release(&s);

	if (!CHECK(make_spec(&s, small, 8, 2) == 0))
		return;
	CHECK_INT_EQ(trn_plan_make(&z, &s, 0, &err), 0);
	CHECK(z.zero && z.ranks_per_node == 2);
	CHECK_INT_EQ(z.shard, (n + 1) / 2);
	CHECK_INT_EQ((long)z.bytes[TRN_PLAN_OPTIMIZER], 8 * ((n + 1) / 2));
	CHECK_INT_EQ((long)z.bytes[TRN_PLAN_GRAD_SHARD], 4 * ((n + 1) / 2));
	json_t *j = trn_plan_json(&z);
	CHECK(j && json_integer_value(json_object_get(j, "host_bytes_per_node")) ==
	               (json_int_t)(2 * z.host_bytes));
	json_decref(j);
	trn_spec_release(&s);
}

static void test_largest_micro(void)
{
	struct trn_spec s;
	struct trn_plan p1, p64;
	struct trn_err err = { 0 };
	if (!CHECK(make_spec(&s, small, 64, 1) == 0))
		return;
	CHECK_INT_EQ(trn_plan_make(&p1, &s, 1, &err), 0);
	CHECK_INT_EQ(trn_plan_make(&p64, &s, 64, &err), 0);
	/* a limit halfway between micro 1 and 64 */
	double limit = (p1.host_bytes + p64.host_bytes) / 2;
	long best = trn_plan_max_micro(&s, limit, 0, &err);
	CHECK(best > 1 && best < 64);
	struct trn_plan at, over;
	CHECK_INT_EQ(trn_plan_make(&at, &s, best, &err), 0);
	CHECK_INT_EQ(trn_plan_make(&over, &s, best + 1, &err), 0);
	CHECK(at.host_bytes <= limit && over.host_bytes > limit);
	CHECK_INT_EQ(trn_plan_max_micro(&s, p1.host_bytes / 2, 0, &err), 0);
	CHECK_INT_EQ(trn_plan_max_micro(&s, 0, 0, &err), 64);
	trn_spec_release(&s);
}

/* A bf16 GPT on a GPU whose attention runs fused (head size 64): with
 * "deterministic": false its backward keeps an fp32 dq of [B, T, C] for the
 * atomic adds, and its GEMMs all go through cuBLASLt (tuned), so cuBLAS's
 * own workspace is left out; the rest is the same (plan.h) */
static void test_nondeterministic_gpu(void)
{
	struct trn_plan p[2];
	struct trn_err err = { 0 };
	const long micro = 4, seq = 32, dim = 128;
	for (int nd = 0; nd < 2; nd++) {
		char text[1024];
		snprintf(text, sizeof text,
		         "{\"model\": {\"type\": \"gpt\", \"layers\": 2, \"heads\": 2,"
		         " \"dim\": %ld, \"seq\": %ld}, \"data\": {\"format\": \"text\","
		         " \"path\": \"%s\"}, \"batch\": {\"global\": %ld},"
		         " \"optimizer\": {\"type\": \"adamw\", \"lr\": 0.001},"
		         " \"precision\": {\"compute\": \"bf16\", \"deterministic\": %s},"
		         " \"resources\": {\"gpus_per_node\": 1}, \"steps\": 1}",
		         dim, seq, corpus, micro, nd ? "false" : "true");
		struct trn_spec s;
		int rc = trn_spec_from_string(&s, text, &err);
		if (!CHECK_MSG(rc == 0, "spec: %s", err.text))
			return;
		CHECK_INT_EQ(trn_plan_make(&p[nd], &s, 0, &err), 0);
		trn_spec_release(&s);
	}
	CHECK((long)p[0].bytes[TRN_PLAN_WORKSPACE] - (long)p[1].bytes[TRN_PLAN_WORKSPACE] ==
	      (long)KERN_CUBLAS_WORKSPACE_BYTES);
	CHECK((long)p[1].bytes[TRN_PLAN_ACTIVATIONS] - (long)p[0].bytes[TRN_PLAN_ACTIVATIONS] ==
	      4 * micro * seq * dim);
	for (int i = 0; i < TRN_PLAN_N; i++)
		if (i != TRN_PLAN_WORKSPACE && i != TRN_PLAN_ACTIVATIONS)
			CHECK_MSG(p[0].bytes[i] == p[1].bytes[i], "%s: %.0f against %.0f",
			          trn_plan_item_name((enum trn_plan_item)i), p[1].bytes[i],
			          p[0].bytes[i]);
}

/* The data's shape is remembered while its file is unchanged, and read
 * again once it changes. */
static void test_data_changes(void)
{
	struct trn_spec s;
	struct trn_plan a, b, c;
	struct trn_err err = { 0 };
	if (!CHECK(make_spec(&s, small, 8, 1) == 0))
		return;
	CHECK_INT_EQ(trn_plan_make(&a, &s, 0, &err), 0);
	CHECK_INT_EQ(trn_plan_make(&b, &s, 0, &err), 0);
	CHECK(a.bytes[TRN_PLAN_DATA] == b.bytes[TRN_PLAN_DATA]);
	FILE *f = fopen(corpus, "a");
	if (CHECK(f != NULL)) {
		for (int i = 0; i < 1000; i++)
			fputs("more text for the plan to find. ", f);
		fclose(f);
	}
	CHECK_INT_EQ(trn_plan_make(&c, &s, 0, &err), 0);
	/* 32000 more bytes, two bytes each in memory */
	CHECK(c.bytes[TRN_PLAN_DATA] == a.bytes[TRN_PLAN_DATA] + 64000.0);
	trn_spec_release(&s);
}

static void test_too_large(void)
{
	struct trn_spec s;
	struct trn_plan p;
	struct trn_err err = { 0 };
	if (!CHECK(make_spec(&s, "\"layers\": 256, \"heads\": 1024, \"dim\": 65536, \"seq\": 65536",
	                     1 << 24, 1) == 0))
		return;
	CHECK_INT_EQ(trn_plan_make(&p, &s, 0, &err), TRN_PLAN_TOO_LARGE);
	CHECK(strstr(err.text, "far more than any machine has") != NULL);
	/* at micro-batch 1 it is only huge: planned, petabytes short of nothing */
	CHECK_INT_EQ(trn_plan_max_micro(&s, 1e12, 0, &err), 0);
	trn_spec_release(&s);
}

int main(void)
{
	int fd = mkstemp(corpus);
	if (fd < 0 || write(fd, "larch plans the memory of a spec. ", 35) != 35) {
		perror("corpus");
		return 1;
	}
	for (int i = 0; i < 200; i++)
		if (write(fd, "the quick brown fox jumps over the lazy dog. ", 45) != 45)
			return 1;
	close(fd);
	CHECK_RUN(test_items);
	CHECK_RUN(test_largest_micro);
	CHECK_RUN(test_too_large);
	CHECK_RUN(test_data_changes);
	CHECK_RUN(test_nondeterministic_gpu);
	unlink(corpus);
	return check_finish();
}
