/* tests/unit/test_model_cuda.c - trainer/model_cuda.c, model_gpt_cuda.c and
 * model_mlp_cuda.c, the models on a GPU, run here over cuda_shim.c (the
 * CUDA entry points done by the CPU kernels): the GPU models must give the
 * CPU models' losses, top-1 counts and gradients bit for bit, take their
 * gradients' grad_ready calls in the same order, accumulate over
 * micro-batches, compute with the weights the trainer last announced, and
 * train (trn_train with --device cuda) the same run as the CPU. Without a
 * GPU this checks everything of the GPU path but the kernels themselves
 * (tests/gpu checks those against the CPU references).
 */
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "trainer/data.h"
#include "trainer/model.h"
#include "trainer/model_cuda.h"
#include "trainer/param_offload.h"
#include "trainer/spec/plan.h"
#include "trainer/spec/spec.h"
#include "trainer/train.h"

extern long cuda_shim_live_buffers;

/* whether a 16-bit GPT keeps its activations as 16-bit values (plan.h's
 * layout) */
static int act16_wanted(enum trn_dtype dt)
{
	struct trn_spec_model m = { .heads = 1, .dim = 64 };
	struct trn_gpt_gpu_layout lay;
	trn_gpt_gpu_layout(&m, dt, 0, &lay);
	return lay.a16;
}

static const char *tmp;
static uint64_t rng = 99;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static int load_spec(struct trn_spec *spec, const char *text)
{
	struct trn_err err = { 0 };
	int rc = trn_spec_from_string(spec, text, &err);
	CHECK_MSG(rc == 0, "spec: %s", err.text);
	return rc;
}

/* grad_ready calls, recorded */
struct order {
	int p[4096];
	int n;
};

static void record(void *ctx, int param)
{
	struct order *o = ctx;
	if (o->n < 4096)
		o->p[o->n++] = param;
}

static int same_floats(const float *a, const float *b, long n, long *where)
{
	for (long i = 0; i < n; i++)
		if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
			*where = i;
			return 0;
		}
	return 1;
}

/* a and b (each before + a sum) within rel of each other, relative to the
 * larger magnitude of the two and of what was added (1e-30 floor): adding
 * rounds relative to the addends, however much they cancel */
static int close_floats(const float *a, const float *b, const float *before, long n, double rel,
                        long *where)
{
	for (long i = 0; i < n; i++) {
		double m = fmax(fmax(fabs(a[i]), fabs(b[i])),
		                fmax(fabs(before[i]), fabs((double)a[i] - before[i])));
		if (!(fabs((double)a[i] - b[i]) <= rel * m + 1e-30)) {
			*where = i;
			return 0;
		}
	}
	return 1;
}

/* One forward and backward on both models, told of the backward before
 * the forward (trn_model_expect_backward) as the trainer tells them: the
 * same loss, stats, gradients and grad_ready order. With accumulated > 0, g already held a
 * micro-batch's gradients: the CPU kernels add into it inside their sums,
 * the GPU model adds its sums to it afterwards, so the two round apart
 * (within accumulated, relative: 4e-6 in fp32, as far as a sum's terms
 * cancel (1.3e-6 seen); an ulp of 16 bits after the gradients' rounding);
 * a fresh gradient is the same bits. */
static void step_both(struct trn_model *cpu, struct trn_model *gpu, const struct trn_batch *b,
                      float scale, double accumulated, const char *what)
{
	struct trn_fwd_stats sc = { 0 }, sg = { 0 };
	/* as the trainer does: a GPU GPT then writes dlogits in its forward */
	trn_model_expect_backward(cpu, scale);
	trn_model_expect_backward(gpu, scale);
	double lc = trn_model_forward(cpu, b, &sc), lg = trn_model_forward(gpu, b, &sg);
	CHECK_MSG(lc == lg, "%s: loss %.9g on the CPU, %.9g on the GPU model", what, lc, lg);
	CHECK_MSG(sc.correct == sg.correct && sc.count == sg.count && sc.loss_sum == sg.loss_sum,
	          "%s: stats %ld/%ld vs %ld/%ld", what, sc.correct, sc.count, sg.correct, sg.count);
	struct order oc = { .n = 0 }, og = { .n = 0 };
	float *before = malloc(sizeof(float) * (size_t)cpu->n_floats);
	if (!before)
		abort();
	memcpy(before, cpu->g, sizeof(float) * (size_t)cpu->n_floats);
	cpu->grad_ready = gpu->grad_ready = record;
	cpu->grad_ready_ctx = &oc;
	gpu->grad_ready_ctx = &og;
	trn_model_backward(cpu, b, scale);
	trn_model_backward(gpu, b, scale);
	cpu->grad_ready = gpu->grad_ready = NULL;
	long at = -1;
	int same = accumulated > 0
	                   ? close_floats(cpu->g, gpu->g, before, cpu->n_floats, accumulated, &at)
	                   : same_floats(cpu->g, gpu->g, cpu->n_floats, &at);
	free(before);
	CHECK_MSG(same, "%s: gradient %ld: %.9g vs %.9g", what, at, at >= 0 ? cpu->g[at] : 0.0,
	          at >= 0 ? gpu->g[at] : 0.0);
	CHECK_MSG(oc.n == cpu->n_params && og.n == oc.n && !memcmp(oc.p, og.p, sizeof(int) * (size_t)oc.n),
	          "%s: grad_ready order differs (%d and %d calls)", what, oc.n, og.n);
}

/* trn_model_zero_grad, as the trainer calls it; a model that overwrites g
 * whole at its next backward (g_overwritten) gets NaN there instead of
 * what it left, so that a float its backward missed shows */
static void zero_grad(struct trn_model *m)
{
	trn_model_zero_grad(m);
	if (m->g_overwritten)
		for (long i = 0; i < m->n_floats; i++)
			m->g[i] = NAN;
}

/* A step of two micro-batches as the trainer runs it (trn_model_more_micro
 * before each backward): after the first, a GPU model that keeps all its
 * gradients on the device and is not resident holds them there (g still
 * zero, no grad_ready call; offload.params sends them out as before); after
 * the second, g holds the sum, as step_both checks it. */
static void step_held(struct trn_model *cpu, struct trn_model *gpu, const struct trn_batch *b,
                      double accumulated, const char *what)
{
	trn_model_zero_grad(cpu);
	zero_grad(gpu);
	trn_model_forward(cpu, b, NULL);
	trn_model_forward(gpu, b, NULL);
	struct order oc = { .n = 0 }, og = { .n = 0 };
	cpu->grad_ready = gpu->grad_ready = record;
	cpu->grad_ready_ctx = &oc;
	gpu->grad_ready_ctx = &og;
	trn_model_more_micro(cpu, 1);
	trn_model_more_micro(gpu, 1);
	trn_model_backward(cpu, b, 0.5f);
	trn_model_backward(gpu, b, 0.5f);
	cpu->grad_ready = gpu->grad_ready = NULL;
	int held = !gpu->param_off;
	CHECK_MSG(oc.n == cpu->n_params && og.n == (held ? 0 : cpu->n_params),
	          "%s: %d grad_ready calls on the GPU model before the step's last micro-batch",
	          what, og.n);
	long written = 0;                 /* (g as zero_grad left it: NaN, or zeros) */
	for (long i = 0; i < gpu->n_floats; i++)
		written += gpu->g_overwritten ? !isnan(gpu->g[i]) : gpu->g[i] != 0;
	CHECK_MSG(!held || (written == 0 && gpu->g_zeroed),
	          "%s: %ld gradients reached g before the step's last micro-batch", what, written);
	trn_model_more_micro(cpu, 0);
	trn_model_more_micro(gpu, 0);
	step_both(cpu, gpu, b, 0.25f, accumulated, what);
}

/* The CPU model's (unrounded) weights handed to both as the trainer hands
 * them over: the CPU model and a GPU model without w_master get them rounded
 * to the dtype, a GPU model with w_master (offload.params, 16 bits) the
 * master weights themselves, which it must round as it reads them. */
static void hand_weights(struct trn_model *cpu, struct trn_model *gpu)
{
	size_t bytes = sizeof(float) * (size_t)cpu->n_floats;
	memcpy(gpu->w, cpu->w, bytes);
	trn_model_round(cpu, cpu->w, cpu->n_floats);
	if (!gpu->w_master)
		memcpy(gpu->w, cpu->w, bytes);
	trn_model_weights_changed(gpu);
}

/* The weights move (as an optimizer step would) and the trainer says so. */
static void nudge(struct trn_model *cpu, struct trn_model *gpu)
{
	for (long i = 0; i < cpu->n_floats; i++)
		cpu->w[i] -= 0.05f * cpu->g[i];
	hand_weights(cpu, gpu);
}

static void compare_models(const char *spec_text, const struct trn_dataset *ds, int B,
                           const char *what)
{
	double acc_rel = strstr(spec_text, "fp16") || strstr(spec_text, "bf16") ? 1.6e-2 : 4e-6;
	struct trn_spec spec;
	if (load_spec(&spec, spec_text))
		return;
	struct trn_err err = { 0 };
	struct trn_model *cpu = trn_model_new(&spec, ds, B, &err);
	CHECK_MSG(cpu != NULL, "%s: CPU model: %s", what, err.text);
	struct trn_model *gpu = trn_model_new_on(&spec, ds, B, 0, NULL, &err);
	CHECK_MSG(gpu != NULL, "%s: GPU model: %s", what, err.text);
	if (!cpu || !gpu)
		goto out;
	CHECK(gpu->device == 1 && gpu->n_floats == cpu->n_floats && gpu->n_params == cpu->n_params);
	CHECK(gpu->flops_per_sample == cpu->flops_per_sample && gpu->peak_flops > 0);
	if (strstr(spec_text, "recompute"))      /* one block's activations, not L */
		CHECK_MSG(gpu->act_offload == TRN_OFFLOAD_RECOMPUTE &&
		          gpu->act_bytes < gpu->act_bytes_none, "%s: %ld of %ld bytes", what,
		          gpu->act_bytes, gpu->act_bytes_none);
	trn_model_init_weights(cpu, 5);
	trn_model_init_weights(gpu, 5);
	long at;
	CHECK_MSG(same_floats(cpu->w, gpu->w, cpu->n_floats, &at), "%s: init differs", what);
	CHECK_MSG(gpu->w_master == (strstr(spec_text, "\"params\": \"cpu\"") &&
	                            gpu->dtype != TRN_DTYPE_FP32),
	          "%s: the GPU model rounds the weights it reads: %d", what, gpu->w_master);
	hand_weights(cpu, gpu);

	struct trn_batch b;
	CHECK_INT_EQ(trn_batch_alloc(&b, ds, B), 0);
	for (int step = 0; step < 3; step++) {
		int n = step == 1 ? B - 1 : B;          /* a short micro-batch too */
		b.n = n;
		if (ds->task == TRN_TASK_TOKENS) {
			for (long i = 0; i < (long)n * ds->seq; i++) {
				b.tokens[i] = (int32_t)(next() % (uint64_t)ds->vocab);
				b.targets[i] = i % 11 == 3 ? -1 : (int32_t)(next() % (uint64_t)ds->vocab);
			}
		} else {
			for (long i = 0; i < (long)n * ds->dim; i++)
				b.x[i] = (float)((double)(next() % 2001) / 1000.0 - 1.0);
			/* the input as the model stores it, as train.c hands it over */
			trn_model_round(cpu, b.x, (long)n * ds->dim);
			for (int i = 0; i < n; i++)
				b.targets[i] = (int32_t)(next() % (uint64_t)ds->n_classes);
		}
		char label[96];
		/* a fresh gradient, then a second micro-batch adding into it */
		trn_model_zero_grad(cpu);
		zero_grad(gpu);
		CHECK_MSG(gpu->g_overwritten == !gpu->param_off,
		          "%s: g overwritten at the first backward: %d", what, gpu->g_overwritten);
		snprintf(label, sizeof label, "%s step %d", what, step);
		step_both(cpu, gpu, &b, 0.5f, 0.0, label);
		snprintf(label, sizeof label, "%s step %d, accumulated", what, step);
		step_both(cpu, gpu, &b, 0.25f, acc_rel, label);
		/* the same two as the trainer runs them: added up on the device */
		snprintf(label, sizeof label, "%s step %d, accumulated on the device", what, step);
		step_held(cpu, gpu, &b, acc_rel, label);
		nudge(cpu, gpu);
	}
	/* a 16-bit GPT keeps its activations in 2 bytes (model_gpt_cuda.c) */
	long act16 = strstr(spec_text, "\"gpt\"") && act16_wanted(gpu->dtype) ? 2 : 1;
	if (strstr(spec_text, "\"activations\": \"cpu\""))   /* blocks went out and back */
		CHECK_MSG(cpu->act_host_bytes > 0 &&
		          gpu->act_host_bytes * act16 >= cpu->act_host_bytes &&
		          gpu->act_host_bytes * act16 < cpu->act_host_bytes * 5 / 4,
		          "%s: host store %ld bytes, the CPU's %ld (the GPU's buffers start on "
		          "256 bytes; a 16-bit GPT's activations take 2)", what,
		          gpu->act_host_bytes, cpu->act_host_bytes);
	if (strstr(spec_text, "\"params\": \"cpu\""))   /* the blocks went through the slots */
		CHECK_MSG(gpu->param_off && gpu->param_off->w_in > 0 && gpu->param_off->g_out > 0 &&
		          gpu->param_off->g_out == cpu->param_off->g_out,
		          "%s: the engine copied no blocks", what);
	trn_batch_release(&b);
out:
	trn_model_free(cpu);
	trn_model_free(gpu);
	trn_spec_release(&spec);
}

/* A small GPT of layers blocks, dim wide in 2 heads, with AdamW and what
 * extra adds to the spec, against the CPU model. */
extern long cuda_shim_ln_residual_calls;

static void compare_gpt(const struct trn_dataset *ds, int layers, int dim, const char *extra,
                        const char *what)
{
	char text[1024];
	snprintf(text, sizeof text, "{\"model\": {\"type\": \"gpt\", \"layers\": %d, \"heads\": 2,"
	         " \"dim\": %d, \"seq\": 8, \"vocab\": 37}, \"data\": {\"format\": \"tokens_u16\","
	         " \"train\": \"x.bin\"}, \"batch\": {\"global\": 3}, \"optimizer\": {\"type\":"
	         " \"adamw\", \"lr\": 0.001}, %s \"steps\": 1}", layers, dim, extra);
	compare_models(text, ds, 3, what);
}

static void test_gpt(void)
{
	struct trn_dataset ds = { .task = TRN_TASK_TOKENS, .seq = 8, .vocab = 37 };
	/* layers, what the spec adds to a small GPT with AdamW, the case */
	static const struct { int layers; const char *extra, *what; } cases[] = {
		{ 2, "", "gpt" },
		/* 16-bit compute: every activation rounded where the CPU rounds it */
		{ 2, "\"precision\": {\"compute\": \"bf16\"},", "gpt bf16" },
		{ 2, "\"precision\": {\"compute\": \"fp16\"},", "gpt fp16" },
		/* offload.activations "recompute": each block's forward again in
		 * backward, against the CPU model's recompute (which equals its
		 * "none"). Three blocks, so that a block below the top one must be
		 * recomputed (the scratch still holds the top one's) */
		{ 3, "\"offload\": {\"activations\": \"recompute\"},", "gpt recompute" },
		{ 2, "\"precision\": {\"compute\": \"bf16\"}, \"offload\": {\"activations\":"
		     " \"recompute\"},", "gpt bf16 recompute" },
		/* offload.activations "cpu": blocks in two slots, copied out to the
		 * host store and back through the copy channels (the shim does each
		 * copy at its wait), against the CPU model's; with parameter
		 * offload too, and in bf16 */
		{ 3, "\"offload\": {\"activations\": \"cpu\"},", "gpt offload.activations cpu" },
		{ 4, "\"precision\": {\"compute\": \"bf16\"}, \"offload\": {\"activations\": \"cpu\","
		     " \"params\": \"cpu\"},", "gpt bf16 offload.activations + params cpu" },
		/* offload.params "cpu": the blocks' weights and gradients through
		 * the engine's device slots and copy channels, against the CPU
		 * model's offload; alone, with recompute, in bf16 (the block
		 * gradients rounded in their slot) */
		{ 3, "\"offload\": {\"params\": \"cpu\"},", "gpt offload.params" },
		{ 3, "\"offload\": {\"params\": \"cpu\", \"activations\": \"recompute\"},",
		  "gpt offload.params + recompute" },
		{ 2, "\"precision\": {\"compute\": \"bf16\"}, \"offload\": {\"params\": \"cpu\"},",
		  "gpt bf16 offload.params" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		long before = cuda_shim_ln_residual_calls;
		compare_gpt(&ds, cases[i].layers, 16, cases[i].extra, cases[i].what);
		/* each residual connection and the LayerNorm after it in one call
		 * (kern_residual_layernorm_fwd_act_cuda): a forward's 2 L */
		long calls = cuda_shim_ln_residual_calls - before;
		CHECK_MSG(calls >= 2 * cases[i].layers, "%s: %ld residual + LayerNorm calls, want at "
		          "least %d", cases[i].what, calls, 2 * cases[i].layers);
	}
	/* one block, one head, a vocabulary wider than the data's */
	compare_models("{\"model\": {\"type\": \"gpt\", \"layers\": 1, \"heads\": 1, \"dim\": 8,"
	               " \"seq\": 8, \"vocab\": 300}, \"data\": {\"format\": \"tokens_u16\", \"train\": \"x.bin\"},"
	               " \"batch\": {\"global\": 2}, \"optimizer\": {\"type\": \"sgd\", \"lr\": 0.1},"
	               " \"steps\": 1}", &ds, 2, "gpt one block, padded vocab");
}

/* A 16-bit GPT with head size 64 runs the fused attention (the shim's,
 * which checks that backward is handed the forward's out and lse), keeping
 * each block's lse where the other keeps [T, T]; alone, recomputed and
 * offloaded, against the CPU model; with another head size (test_gpt's
 * dim 16) the GEMM path */
extern long cuda_shim_flash_calls;

static void test_gpt_flash(void)
{
	struct trn_dataset ds = { .task = TRN_TASK_TOKENS, .seq = 8, .vocab = 37 };
	static const struct { int layers; const char *extra, *what; } cases[] = {
		{ 2, "\"precision\": {\"compute\": \"bf16\"},", "gpt flash bf16" },
		{ 2, "\"precision\": {\"compute\": \"fp16\"},", "gpt flash fp16" },
		{ 3, "\"precision\": {\"compute\": \"bf16\"}, \"offload\": {\"activations\":"
		     " \"recompute\"},", "gpt flash bf16 recompute" },
		{ 3, "\"precision\": {\"compute\": \"bf16\"}, \"offload\": {\"activations\":"
		     " \"cpu\"},", "gpt flash bf16 offload.activations cpu" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		long before = cuda_shim_flash_calls;
		compare_gpt(&ds, cases[i].layers, 128, cases[i].extra, cases[i].what);
		CHECK_MSG(cuda_shim_flash_calls > before, "%s: no fused attention call",
		          cases[i].what);
	}
	/* head size 16: the GEMM path, no fused call */
	long before = cuda_shim_flash_calls;
	compare_gpt(&ds, 2, 16, "\"precision\": {\"compute\": \"bf16\"},", "gpt gemm attention");
	CHECK_MSG(cuda_shim_flash_calls == before, "head size 16: %ld fused attention calls",
	          cuda_shim_flash_calls - before);
}

/* GELU in the fc GEMMs' epilogues: on in a 16-bit GPT, off in fp32 (the
 * shim runs the same ops either way: what is checked is the setting the
 * model leaves, and that the run agrees with the CPU's) */
int kern_matmul_cuda_fused_gelu(int on);

static void test_gpt_gelu_setting(void)
{
	struct trn_dataset ds = { .task = TRN_TASK_TOKENS, .seq = 8, .vocab = 37 };
	static const struct { const char *extra; int want; } cases[] = {
		{ "\"precision\": {\"compute\": \"bf16\"},", 1 },
		{ "", 0 },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		kern_matmul_cuda_fused_gelu(!cases[i].want);
		compare_gpt(&ds, 2, 16, cases[i].extra, "gpt gelu");
		int got = kern_matmul_cuda_fused_gelu(0);
		CHECK_MSG(got == cases[i].want, "%s: the model fused GELU %d, want %d",
		          cases[i].want ? "bf16" : "fp32", got, cases[i].want);
	}
}

/* A GPU GPT told of the backward before its forward writes dlogits in the
 * forward's call over the logits (the shim counts those calls); step_both
 * checks the gradients against the CPU model, and step_held (not told) the
 * two kernels' path */
extern long cuda_shim_xent_fused_calls;

static void test_gpt_xent_setting(void)
{
	struct trn_dataset ds = { .task = TRN_TASK_TOKENS, .seq = 8, .vocab = 37 };
	long before = cuda_shim_xent_fused_calls;
	compare_gpt(&ds, 2, 16, "\"precision\": {\"compute\": \"bf16\"},", "gpt xent bf16");
	compare_gpt(&ds, 2, 16, "", "gpt xent fp32");
	long calls = cuda_shim_xent_fused_calls - before;
	CHECK_MSG(calls > 0, "%ld one-pass cross-entropy calls", calls);
}

/* The spec's "deterministic": false tunes the 16-bit GEMMs (8 candidates)
 * and adds the fused attention's dq atomically in blocks of 128 keys; true
 * (the default) neither. What is checked is the setting each model leaves
 * in the kernels (a run's GEMMs and attention are the GPU tests'), and
 * that the run agrees with the CPU's. */
int kern_matmul_cuda_gemm_tune(int candidates);
int kern_attention_flash_dq_atomic(int keys);

static void test_gpt_deterministic_setting(void)
{
	struct trn_dataset ds = { .task = TRN_TASK_TOKENS, .seq = 8, .vocab = 37 };
	static const struct {
		const char *det;
		int tune, dq;
	} cases[] = {
		{ "true", 0, 0 },
		{ "false", 8, 128 },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		kern_matmul_cuda_gemm_tune(cases[i].tune ? 0 : 2);   /* the other way first */
		kern_attention_flash_dq_atomic(cases[i].dq ? 0 : 128);
		char extra[128];
		snprintf(extra, sizeof extra,
		         "\"precision\": {\"compute\": \"bf16\", \"deterministic\": %s},",
		         cases[i].det);
		compare_gpt(&ds, 2, 128, extra, "gpt deterministic setting");
		int tune = kern_matmul_cuda_gemm_tune(-1), dq = kern_attention_flash_dq_atomic(-1);
		CHECK_MSG(tune == cases[i].tune && dq == cases[i].dq,
		          "deterministic %s: GEMMs tuned over %d candidates (want %d), dq atomic in "
		          "%d keys (want %d)", cases[i].det, tune, cases[i].tune, dq, cases[i].dq);
	}
	kern_matmul_cuda_gemm_tune(0);
	kern_attention_flash_dq_atomic(0);
}

static void test_mlp(void)
{
	struct trn_dataset ds = { .task = TRN_TASK_CLASSIFY, .dim = 20, .n_classes = 7 };
	compare_models("{\"model\": {\"type\": \"mlp\", \"hidden\": [32, 16]},"
	               " \"data\": {\"format\": \"idx\", \"train\": {\"images\": \"i\", \"labels\": \"l\"}},"
	               " \"batch\": {\"global\": 5}, \"optimizer\": {\"type\": \"sgd\", \"lr\": 0.1},"
	               " \"steps\": 1}", &ds, 5, "mlp relu");
	compare_models("{\"model\": {\"type\": \"mlp\", \"hidden\": [24], \"activation\": \"gelu\"},"
	               " \"data\": {\"format\": \"idx\", \"train\": {\"images\": \"i\", \"labels\": \"l\"}},"
	               " \"batch\": {\"global\": 4}, \"optimizer\": {\"type\": \"sgd\", \"lr\": 0.1},"
	               " \"precision\": {\"compute\": \"bf16\"}, \"steps\": 1}", &ds, 4, "mlp gelu bf16");
	compare_models("{\"model\": {\"type\": \"mlp\", \"hidden\": [32, 16]},"
	               " \"data\": {\"format\": \"idx\", \"train\": {\"images\": \"i\", \"labels\": \"l\"}},"
	               " \"batch\": {\"global\": 5}, \"optimizer\": {\"type\": \"sgd\", \"lr\": 0.1},"
	               " \"precision\": {\"compute\": \"fp16\"}, \"steps\": 1}", &ds, 5, "mlp relu fp16");
	compare_models("{\"model\": {\"type\": \"mlp\", \"hidden\": [24], \"activation\": \"gelu\"},"
	               " \"data\": {\"format\": \"idx\", \"train\": {\"images\": \"i\", \"labels\": \"l\"}},"
	               " \"batch\": {\"global\": 4}, \"optimizer\": {\"type\": \"sgd\", \"lr\": 0.1},"
	               " \"steps\": 1}", &ds, 4, "mlp gelu");
	/* the offloads, as model_mlp.c runs them: GELU's input recomputed;
	 * hidden layers staged and stored on the host (GELU keeps two buffers
	 * a layer, ReLU one); layers' weights through the engine's slots */
	static const struct { const char *act, *offload, *what; } offloads[] = {
		{ "gelu", "\"activations\": \"recompute\"", "mlp gelu recompute" },
		{ "gelu", "\"activations\": \"cpu\"", "mlp gelu offload.activations" },
		{ "relu", "\"activations\": \"cpu\"", "mlp relu offload.activations" },
		{ "relu", "\"params\": \"cpu\"", "mlp relu offload.params" },
		{ "gelu", "\"params\": \"cpu\", \"activations\": \"cpu\"", "mlp gelu both offloads" },
	};
	for (size_t i = 0; i < sizeof offloads / sizeof offloads[0]; i++) {
		char text[1024];
		snprintf(text, sizeof text, "{\"model\": {\"type\": \"mlp\", \"hidden\": [32, 24, 16],"
		         " \"activation\": \"%s\"}, \"data\": {\"format\": \"idx\", \"train\":"
		         " {\"images\": \"i\", \"labels\": \"l\"}}, \"batch\": {\"global\": 5},"
		         " \"optimizer\": {\"type\": \"sgd\", \"lr\": 0.1}, \"offload\": {%s},"
		         " \"steps\": 1}", offloads[i].act, offloads[i].offload);
		compare_models(text, &ds, 5, offloads[i].what);
	}
	compare_models("{\"model\": {\"type\": \"mlp\", \"hidden\": [32, 24, 16], \"activation\":"
	               " \"gelu\"}, \"data\": {\"format\": \"idx\", \"train\": {\"images\": \"i\","
	               " \"labels\": \"l\"}}, \"batch\": {\"global\": 5}, \"optimizer\": {\"type\":"
	               " \"sgd\", \"lr\": 0.1}, \"precision\": {\"compute\": \"bf16\"}, \"offload\":"
	               " {\"params\": \"cpu\", \"activations\": \"cpu\"}, \"steps\": 1}", &ds, 5,
	               "mlp gelu bf16 both offloads");
}

/* metrics.jsonl's values of name, in file order, into out; their count */
static int read_metric(const char *dir, const char *name, double *out, int max)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char line[4096];
	int n = 0;
	while (fgets(line, sizeof line, f)) {
		json_t *j = json_loads(line, 0, NULL);
		const char *nm = json_string_value(json_object_get(j, "name"));
		if (nm && !strcmp(nm, name) && n < max)
			out[n++] = json_real_value(json_object_get(j, "value")) +
			           (double)json_integer_value(json_object_get(j, "value"));
		json_decref(j);
	}
	fclose(f);
	return n;
}

/* The runs below: GPT tiny on corpus, 8 steps of 8 samples in micro-batches
 * of micro, AdamW with clipping, warmup and cosine, validation and
 * checkpoints at step 4, plus extra fields. */
static int run_spec(struct trn_spec *spec, const char *corpus, int micro, const char *extra)
{
	char text[8192];
	snprintf(text, sizeof text,
	         "{\"name\": \"same-%d\", \"model\": {\"type\": \"gpt\", \"layers\": 2, \"heads\": 2,"
	         " \"dim\": 16, \"seq\": 16}, \"data\": {\"format\": \"text\", \"path\": \"%s\","
	         " \"val_fraction\": 0.1}, \"batch\": {\"global\": 8, \"micro\": %d},"
	         " \"optimizer\": {\"type\": \"adamw\", \"lr\": 0.01, \"clip_grad_norm\": 1.0},"
	         " \"schedule\": {\"warmup\": {\"steps\": 2}, \"decay\": \"cosine\"},"
	         " \"steps\": 8, \"eval_every\": 4, \"checkpoint_every\": 4, \"log_every\": 2,"
	         " \"seed\": 3%s%s}", micro, corpus, micro, extra ? ", " : "", extra ? extra : "");
	return load_spec(spec, text);
}

/* trn_train on the CPU and on the "GPU" (--device cuda) with micro-batches
 * of micro, 8 a step, plus extra spec fields: the same losses, gradient
 * norms and validation, step by step (AdamW, clipping, validation and
 * checkpoints midway: the weights the GPU computes with must follow every
 * update). One rank is resident on the device (the optimizer steps the
 * device copies, the micro-batches add up there as on the CPU): the same
 * bits. With the optimizer offloaded the GPU model's gradients come back
 * per micro-batch and add up on the host, in another order (as in
 * step_both): within rel. Returns the GPU run's job dir in gpu_dir. */
static void train_both(const char *corpus, int micro, const char *extra, double rel,
                       char *gpu_dir, size_t len)
{
	struct trn_spec spec;
	if (run_spec(&spec, corpus, micro, extra))
		return;
	static int runs;
	char dirs[2][4300];
	const char *devices[2] = { "cpu", "cuda" };
	runs++;
	for (int k = 0; k < 2; k++) {
		snprintf(dirs[k], sizeof dirs[k], "%s/run-%d-%d-%s", tmp, runs, micro, devices[k]);
		struct trn_options o = { .job_dir = dirs[k], .quiet = 1, .threads = 1,
		                            .device = devices[k] };
		CHECK_INT_EQ(trn_train(&spec, &o), TRN_EXIT_OK);
	}
	const char *names[] = { "train/loss", "train/grad_norm", "val/loss", "val/accuracy" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		double a[64], b[64];
		int na = read_metric(dirs[0], names[i], a, 64), nb = read_metric(dirs[1], names[i], b, 64);
		CHECK_MSG(na > 0 && na == nb, "%s: %d points on the CPU, %d on the GPU", names[i], na, nb);
		for (int j = 0; j < na && j < nb; j++)
			CHECK_MSG(fabs(a[j] - b[j]) <= rel * fabs(a[j]), "micro %d%s: %s #%d: %.9g on the "
			          "CPU, %.9g on the GPU", micro, extra ? " offload" : "", names[i], j, a[j],
			          b[j]);
	}
	double mfu[8];
	CHECK_MSG(read_metric(dirs[1], "train/mfu", mfu, 8) > 0, "no train/mfu on the GPU");
	CHECK_MSG(read_metric(dirs[0], "train/mfu", mfu, 8) == 0, "train/mfu on the CPU");
	if (gpu_dir)
		snprintf(gpu_dir, len, "%s", dirs[1]);
	trn_spec_release(&spec);
}

/* Stopped after every step (checkpoint, exit 3) and resumed, resident:
 * the weights (and in 16 bits the device's master weights) come off the
 * device into each checkpoint, the optimizer state down and back up; the
 * run must equal the straight one in `straight` bit for bit. */
static void resume_cycles(const char *corpus, const char *extra, const char *straight)
{
	static int cycles;
	char dir[4300];
	struct trn_spec spec;
	if (run_spec(&spec, corpus, 4, extra))
		return;
	snprintf(dir, sizeof dir, "%s/run-resumed-%d", tmp, ++cycles);
	struct trn_options o = { .job_dir = dir, .quiet = 1, .threads = 1, .device = "cuda" };
	trn_train_request_stop(SIGTERM);       /* stays up: every run stops after one step */
	int rc = -1, runs = 0;
	while (rc != TRN_EXIT_OK && runs < 20) {
		rc = trn_train(&spec, &o);
		runs++;
		CHECK(rc == TRN_EXIT_OK || rc == TRN_EXIT_INTERRUPTED);
	}
	trn_train_request_stop(0);
	CHECK_MSG(runs == 8, "%d runs for 8 steps", runs);
	const char *names[] = { "train/loss", "train/grad_norm", "val/loss" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		double a[64], b[64];
		int na = read_metric(straight, names[i], a, 64), nb = read_metric(dir, names[i], b, 64);
		CHECK_MSG(na > 0 && na == nb, "resumed %s: %s: %d points straight, %d resumed",
		          extra ? extra : "fp32", names[i], na, nb);
		for (int j = 0; j < na && j < nb; j++)
			CHECK_MSG(a[j] == b[j], "resumed %s: %s #%d: %.9g straight, %.9g resumed",
			          extra ? extra : "fp32", names[i], j, a[j], b[j]);
	}
	trn_spec_release(&spec);
}

static void test_train_same_run(void)
{
	char corpus[4200];
	snprintf(corpus, sizeof corpus, "%s/corpus.txt", tmp);
	FILE *f = fopen(corpus, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	for (int i = 0; i < 400; i++)
		fprintf(f, "the quick brown fox %d jumps over the lazy dog; ", i * 7 % 13);
	fclose(f);
	char straight[4300], straight16[4300];
	const char *bf16 = "\"precision\": {\"compute\": \"bf16\"}";
	const char *fp16 = "\"precision\": {\"compute\": \"fp16\", \"init_scale\": 1024}";
	/* resident: fp32, bf16 and fp16 (the loss scaler's check on the device),
	 * with and without accumulation: the CPU's bits */
	train_both(corpus, 8, NULL, 0.0, NULL, 0);
	train_both(corpus, 4, NULL, 0.0, straight, sizeof straight);
	train_both(corpus, 8, bf16, 0.0, NULL, 0);
	train_both(corpus, 4, bf16, 0.0, straight16, sizeof straight16);
	train_both(corpus, 4, fp16, 0.0, NULL, 0);
	/* the optimizer on the host: within rel */
	train_both(corpus, 4, "\"offload\": {\"optimizer\": \"cpu\"}", 1e-5, NULL, 0);
	resume_cycles(corpus, NULL, straight);
	resume_cycles(corpus, bf16, straight16);
}

int main(void)
{
	tmp = check_tmpdir("model_cuda");
	CHECK_RUN(test_gpt);
	CHECK_RUN(test_gpt_flash);
	CHECK_RUN(test_gpt_gelu_setting);
	CHECK_RUN(test_gpt_xent_setting);
	CHECK_RUN(test_gpt_deterministic_setting);
	CHECK_RUN(test_mlp);
	CHECK_RUN(test_train_same_run);
	CHECK_MSG(cuda_shim_live_buffers == 0, "%ld device buffers not freed", cuda_shim_live_buffers);
	return check_finish();
}
