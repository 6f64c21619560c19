/* tests/unit/test_plan.c - trainer/spec/plan.c: the memory plan of a spec. A GPT
 * on a byte-level text file: params and grads of the model's own parameter
 * count, AdamW's two fp32 states, ZeRO-1 halves them, activations grow with
 * the micro-batch, the largest micro-batch that fits a limit is found, and a
 * spec whose buffers would overflow any count is answered TRN_PLAN_TOO_LARGE
 * instead of being planned, a run's plan follows its device and where it
 * steps, and the table prints every item (the sanitizer build runs this). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kernels/cuda_sizes.h"
#include "trainer/data.h"
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

/* A spec with ranks ranks (ZeRO-1 with two), compute dtype dt and gpus
 * GPUs a node. */
static int gpu_spec(struct trn_spec *s, int ranks, const char *dt, int gpus)
{
	char text[1024];
	struct trn_err err = { 0 };
	snprintf(text, sizeof text,
	         "{\"model\": {\"type\": \"gpt\", %s}, \"data\": {\"format\": \"text\","
	         " \"path\": \"%s\"}, \"batch\": {\"global\": %d, \"micro\": 8},"
	         " \"parallel\": {\"ranks\": %d, \"zero_stage\": %d},"
	         " \"optimizer\": {\"type\": \"adamw\", \"lr\": 0.001},"
	         " \"precision\": {\"compute\": \"%s\"},"
	         " \"resources\": {\"gpus_per_node\": %d}, \"steps\": 1}",
	         small, corpus, 8 * ranks, ranks, ranks > 1, dt, gpus);
	int rc = trn_spec_from_string(s, text, &err);
	CHECK_MSG(rc == 0, "spec: %s", err.text);
	return rc;
}

/* A run's plan: the spec's on the device it runs on, stepping where it
 * steps (two ranks over a device communicator step on the device, which a
 * spec's plan leaves to one rank). */
static void test_run_plan(void)
{
	struct trn_spec gpu, cpu;
	struct trn_dataset shape;
	struct trn_plan spec_gpu, spec_cpu, on_cpu, host, dev, forced;
	struct trn_err err = { 0 };
	if (gpu_spec(&gpu, 2, "bf16", 1) != 0)
		return;
	if (gpu_spec(&cpu, 2, "bf16", 0) != 0) {
		trn_spec_release(&gpu);
		return;
	}
	CHECK_INT_EQ(trn_dataset_shape(&shape, &gpu, NULL, &err), 0);
	CHECK_INT_EQ(trn_plan_make(&spec_gpu, &gpu, 0, &err), 0);
	CHECK_INT_EQ(trn_plan_make(&spec_cpu, &cpu, 0, &err), 0);
	CHECK_INT_EQ(trn_plan_make_run(&on_cpu, &gpu, &shape, 0, 1, &err), 0);
	CHECK_INT_EQ(trn_plan_make_run(&host, &gpu, &shape, 1, 0, &err), 0);
	CHECK_INT_EQ(trn_plan_make_run(&dev, &gpu, &shape, 1, 1, &err), 0);
	CHECK_INT_EQ(trn_plan_make_run(&forced, &cpu, &shape, 1, 0, &err), 0);
	/* --device cpu: the CPU's plan, whatever the spec asks */
	CHECK(on_cpu.gpus == 0 && on_cpu.device_bytes == 0 && !on_cpu.resident);
	CHECK(on_cpu.host_bytes == spec_cpu.host_bytes);
	/* on the host, as the spec's plan of two ranks says; a GPU the spec
	 * does not ask for is planned as the one it runs on */
	for (int i = 0; i < TRN_PLAN_N; i++) {
		CHECK(host.bytes[i] == spec_gpu.bytes[i] && host.on_host[i] == spec_gpu.on_host[i]);
		CHECK(forced.bytes[i] == spec_gpu.bytes[i]);
	}
	CHECK(forced.gpus == 1 && forced.device_bytes == spec_gpu.device_bytes);
	/* stepping on the device: the master weights, the state and the
	 * gradient shard move there, and the checkpoint brings them back */
	CHECK(dev.resident && !host.resident);
	double moved = 0;
	for (int i = TRN_PLAN_GRAD_SHARD; i <= TRN_PLAN_OPTIMIZER; i++) {
		CHECK(!dev.on_host[i] && host.on_host[i] && dev.bytes[i] > 0);
		moved += dev.bytes[i];
	}
	CHECK(dev.device_bytes == host.device_bytes + moved);
	CHECK(dev.host_bytes == host.host_bytes - moved);
	trn_spec_release(&gpu);
	trn_spec_release(&cpu);
}

/* The table prints every item of the plan that is not 0 with its MiB,
 * where it lives and its dtype, the master weights ZeRO leaves out, and the
 * totals. */
static void test_print(void)
{
	struct trn_spec s;
	struct trn_plan p;
	struct trn_err err = { 0 };
	char *text = NULL, line[256];
	size_t len = 0;
	for (int gpus = 0; gpus < 2; gpus++) {
		const char *dt = gpus ? "bf16" : "fp32";
		if (gpu_spec(&s, 2, dt, gpus) != 0)
			return;
		CHECK_INT_EQ(trn_plan_make(&p, &s, 0, &err), 0);
		FILE *f = open_memstream(&text, &len);
		if (!CHECK(f != NULL))
			return;
		trn_plan_print(f, &p);
		fclose(f);
		snprintf(line, sizeof line, "memory plan per rank: %ld parameters, micro-batch 8, "
		         "2 ranks (ZeRO-1), %s\n", p.n_params,
		         gpus ? "GPU, the optimizer on the host" : "CPU");
		CHECK_MSG(strncmp(text, line, strlen(line)) == 0, "%s", text);
		int lines = 0;
		for (const char *c = text; *c; c++)
			lines += *c == '\n';
		/* the header and the columns, the host's and the node's totals,
		 * the device's on a GPU or on the CPU the line of a master absent
		 * (fp32: the params are the master weights), and the items */
		int want = 2 + 2 + 1;
		for (int i = 0; i < TRN_PLAN_N; i++) {
			if (p.bytes[i] <= 0)
				continue;
			want++;
			snprintf(line, sizeof line, "\n  %-13s %10.2f MiB  %-6s  ",
			         trn_plan_item_name((enum trn_plan_item)i),
			         p.bytes[i] / (1024.0 * 1024.0), p.on_host[i] ? "host" : "device");
			CHECK_MSG(strstr(text, line) != NULL, "no \"%s\" in\n%s", line + 1, text);
		}
		CHECK_MSG(lines == want, "%d lines, not %d:\n%s", lines, want, text);
		if (gpus) {
			CHECK(strstr(text, "\n  params16 ") && strstr(text, "device  bf16   the 16-bit"));
			CHECK(strstr(text, "  master ") && strstr(text, "fp32   1/2 of "));
			snprintf(line, sizeof line, "\n  device        %10.2f MiB  total, per GPU\n",
			         p.device_bytes / (1024.0 * 1024.0));
			CHECK_MSG(strstr(text, line) != NULL, "%s", text);
		} else {
			CHECK_MSG(strstr(text, "\n  master                 -      none: the fp32 params "
			                       "are the master weights\n") != NULL, "%s", text);
		}
		snprintf(line, sizeof line, "\n  host          %10.2f MiB  total\n",
		         p.host_bytes / (1024.0 * 1024.0));
		CHECK_MSG(strstr(text, line) != NULL, "%s", text);
		CHECK(strstr(text, "host total, 2 ranks per node\n") != NULL);
		free(text);
		text = NULL;
		trn_spec_release(&s);
	}
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
	CHECK_RUN(test_run_plan);
	CHECK_RUN(test_print);
	unlink(corpus);
	return check_finish();
}
