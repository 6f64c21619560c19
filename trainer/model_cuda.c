/* trainer/model_cuda.c - what the CUDA models share: construction over the
 * CPU layout, the parameters' device copy, gradients back to the host,
 * scoring; see model_cuda.h. */
#include "model_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_common.h"
#include "kernels/matmul_cuda.h"
#include "kernels/precision_cuda.h"
#include "kernels/softmax_xent_cuda.h"
#include "cuda_backend.h"
#include "gpu_parts.h"
#include "optim.h"
#include "param_offload.h"
#include "spec/plan.h"

/* ---- the parameter offload engine's slots and copies on the device ---------- */

static float *slots_alloc(long floats)
{
	return kern_cuda_malloc(sizeof(float) * (size_t)floats);
}

static void slots_free(float *slots)
{
	kern_cuda_free(slots);
}

static void slots_zero(float *dst, long floats)
{
	kern_cuda_zero(dst, sizeof(float) * (size_t)floats);
}

static void copy_start(int chan, float *dst, const float *src, long floats)
{
	kern_cuda_copy_async(chan, dst, src, sizeof(float) * (size_t)floats);
}

static void copy_wait(int chan, int to_host)
{
	if (to_host)
		kern_cuda_copy_wait_host(chan);
	else
		kern_cuda_copy_wait(chan);
}

/* host memory the copy stream reads and writes at the link's speed (if the
 * driver refuses to pin it, plain memory: the copies still work, slower) */
static float *host_alloc(long floats)
{
	size_t bytes = sizeof(float) * (size_t)(floats ? floats : 1);
	float *p = malloc(bytes);
	if (p)
		(void)kern_cuda_host_register(p, bytes);
	return p;
}

static void host_free(float *p)
{
	kern_cuda_host_unregister(p);          /* nothing when it was not pinned */
	free(p);
}

const struct trn_copier trn_cuda_copier = {
	.alloc = slots_alloc, .free = slots_free, .host_alloc = host_alloc, .host_free = host_free,
	.zero = slots_zero, .start = copy_start, .wait = copy_wait,
};

/* A block's master weights arrived in their slot: rounded there, on the
 * stream, before the block computes. */
static void round_slot(void *ctx, float *slot, long floats)
{
	trn_cuda_model_round(ctx, slot, floats);
}

/* offload.params: the engine over the device's slots, the blocks' floats
 * as the layout has them. 0, or -1 when out of memory. */
static int param_offload_setup(struct trn_cuda_model *c)
{
	struct trn_model *b = &c->base;
	long *off = malloc(sizeof *off * (size_t)(b->n_blocks + 1));
	long *floats = malloc(sizeof *floats * (size_t)(b->n_blocks + 1));
	b->param_off = calloc(1, sizeof *b->param_off);
	int rc = off && floats && b->param_off ? 0 : -1;
	for (int l = 0; rc == 0 && l < b->n_blocks; l++) {
		const struct trn_param *first = &b->params[b->block_first + l * b->block_params];
		const struct trn_param *last = first + b->block_params - 1;
		off[l] = first->offset;
		floats[l] = last->offset + last->numel - first->offset;
	}
	if (rc == 0)
		rc = trn_param_offload_init(b->param_off, b->n_blocks, off, floats, b->w,
		                            b->streamed ? NULL : b->g, &trn_cuda_copier);
	if (rc == 0 && b->w_master) {
		b->param_off->round_in = round_slot;
		b->param_off->round_ctx = c;
	}
	free(off);
	free(floats);
	return rc;
}

int trn_model_cuda_print_devices(FILE *out)
{
	char why[256], desc[280];
	int n = kern_cuda_device_count(why, sizeof why);
	if (n <= 0)
		fprintf(out, "cuda: none (%s)\n", why);
	for (int i = 0; i < n; i++) {
		struct kern_cuda_device d;
		if (kern_cuda_device_query(i, &d, why, sizeof why) == 0) {
			kern_cuda_device_describe(&d, desc, sizeof desc);
			const char *basis = "";
			double t16 = kern_cuda_peak_tensor16(i, trn_gpu_datasheet_tensor16(d.name), &basis);
			fprintf(out, "cuda:%d %s; peak %.1f TFLOP/s fp32, %.1f TFLOP/s 16-bit tensor (%s)\n",
			        i, desc, kern_cuda_peak_fp32(i) * 1e-12, t16 * 1e-12, basis);
		} else {
			fprintf(out, "cuda:%d (%s)\n", i, why);
		}
	}
	return n > 0 ? n : 0;
}

struct trn_model *trn_model_cuda_new(const struct trn_spec *spec, const struct trn_dataset *ds,
                                     int max_batch, int device,
                                     const struct kern_cuda_opts *kopts, struct trn_err *err)
{
	char why[256];
	int n = kern_cuda_device_count(why, sizeof why);
	if (n <= 0) {
		trn_err_set(err, "cuda: no CUDA device (%s)", why);
		return NULL;
	}
	device %= n;                       /* a rank's local index, round robin over the GPUs */
	if (kern_cuda_use_device(device, why, sizeof why) != 0) {
		trn_err_set(err, "cuda: device %d: %s", device, why);
		return NULL;
	}
	struct trn_model *cpu = trn_model_host_layout(spec, ds, max_batch, err);
	if (!cpu)
		return NULL;
	if (trn_model_alloc(cpu) != 0) {
		trn_model_free(cpu);
		trn_err_set(err, "model: out of memory for the host copy of %ld parameters",
		            cpu->n_floats);
		return NULL;
	}
	kern_cuda_set_opts(kopts);
	/* the spec's "deterministic": false tunes the 16-bit GEMMs (plan.h) */
	kern_matmul_cuda_gemm_tune(trn_gpu_gemm_tune(spec->precision.nondeterministic));
	int tune = cpu->dtype != TRN_DTYPE_FP32 ? kern_matmul_cuda_gemm_tune(-1) : 0;
	struct trn_model *m;
	switch (spec->model.type) {
	case TRN_MODEL_GPT:
		m = trn_gpt_cuda_new(spec, cpu, max_batch, err);
		break;
	case TRN_MODEL_MLP:
		m = trn_mlp_cuda_new(spec, ds, cpu, max_batch, err);
		break;
	default:
		trn_model_free(cpu);
		trn_err_set(err, "model.type: unknown model type");
		return NULL;
	}
	if (m && tune) {                   /* for the "device:" line larch-train prints */
		size_t len = strlen(m->device_desc);
		snprintf(m->device_desc + len, sizeof m->device_desc - len,
		         "; GEMMs tuned (%d candidates)", tune);
	}
	return m;
}

/* The CPU layout cpu's table, host buffers and sizes as c's (taking cpu),
 * and what the device holds of them (res_head, res_tail). */
static void adopt_layout(struct trn_cuda_model *c, struct trn_model *cpu,
                         const struct trn_model_ops *ops)
{
	struct trn_model *b = &c->base;
	c->cpu = cpu;
	/* the trainer sees the CPU layout's table and host buffers */
	b->ops = ops;
	b->params = cpu->params;
	b->n_params = cpu->n_params;
	b->n_floats = cpu->n_floats;
	b->w = cpu->w;
	b->g = cpu->g;
	b->max_batch = cpu->max_batch;
	b->flops_per_sample = cpu->flops_per_sample;
	b->tokens_per_sample = cpu->tokens_per_sample;
	b->dtype = cpu->dtype;
	b->n_blocks = cpu->n_blocks;
	b->block_first = cpu->block_first;
	b->block_params = cpu->block_params;
	b->param_offload = cpu->param_offload;
	b->param_resident_floats = cpu->param_resident_floats;
	b->param_stage_floats = cpu->param_stage_floats;
	b->streamed = cpu->streamed;
	/* the host copies are the master weights: rounded as they come */
	b->w_master = b->param_offload == TRN_OFFLOAD_CPU && b->dtype != TRN_DTYPE_FP32;
	/* g_dev's sum goes to g whole at a step's first backward (grads_out,
	 * grads_range and block_out write it while g_zeroed); offload.params
	 * hands its blocks' gradients over through the engine, which adds */
	b->g_overwritten = b->param_offload == TRN_OFFLOAD_NONE;
	c->res_head = c->res_tail = cpu->n_floats;
	if (b->param_offload == TRN_OFFLOAD_CPU && b->n_blocks > 0) {
		const struct trn_param *first = &b->params[b->block_first];
		const struct trn_param *last = first + b->n_blocks * b->block_params - 1;
		c->res_head = first->offset;
		c->res_tail = last->offset + last->numel;
	}
}

/* The current device's peak for b's compute dtype and its "device:" line. */
static void describe_device(struct trn_model *b)
{
	int dev = kern_cuda_current_device();
	if (b->dtype == TRN_DTYPE_FP32) {
		b->peak_flops = kern_cuda_peak_fp32(dev);
		b->peak_basis = "SMs x FP32 lanes x clock";
	} else {
		struct kern_cuda_device part;
		char pwhy[128];
		double sheet = kern_cuda_device_query(dev, &part, pwhy, sizeof pwhy) == 0
		               ? trn_gpu_datasheet_tensor16(part.name) : 0.0;
		b->peak_flops = kern_cuda_peak_tensor16(dev, sheet, &b->peak_basis);
	}
	struct kern_cuda_device info;
	char why[256], desc[280];
	if (kern_cuda_device_query(dev, &info, why, sizeof why) == 0) {
		kern_cuda_device_describe(&info, desc, sizeof desc);
		snprintf(b->device_desc, sizeof b->device_desc, "cuda:%d %s", dev, desc);
	} else {
		snprintf(b->device_desc, sizeof b->device_desc, "cuda:%d", dev);
	}
}

/* floats of the parameters (and of their gradients) the device holds */
static size_t held_floats(const struct trn_cuda_model *c)
{
	return (size_t)(c->res_head + (c->base.n_floats - c->res_tail));
}

/* The 16-bit copy of the weights the GEMMs read, in values: in 16 bits with
 * every parameter on the device, the weights with the model's gap
 * (w16_pad_at, w16_pad); else 0. */
static size_t weights16_values(const struct trn_cuda_model *c)
{
	const struct trn_model *b = &c->base;
	size_t nf = (size_t)b->n_floats;
	return trn_gpu_weights16(b->dtype, b->param_offload == TRN_OFFLOAD_CPU) && nf > 0
	               ? nf + (size_t)c->w16_pad
	               : 0;
}

/* 0 when the device's buffers (device_alloc's) fit in its free memory, or
 * when it cannot say; else -1 with err. */
static int check_room(const struct trn_cuda_model *c, struct trn_err *err)
{
	const struct trn_model *b = &c->base;
	size_t free_b = 0, total_b = 0;
	size_t need = sizeof(float) * (2 * held_floats(c) + 2 * (size_t)b->param_stage_floats +
	                              (size_t)c->arena_floats) +
	              3 * sizeof(int) * (size_t)c->rows + sizeof(uint16_t) * weights16_values(c);
	if (kern_cuda_mem_info(&free_b, &total_b) == 0 && need > free_b)
		return trn_err_set(err, "cuda: the model needs %.1f MiB of GPU memory at micro-batch "
		                   "%d, %.1f MiB are free (a smaller batch.micro, or larch plan)",
		                   (double)need / 1048576.0, b->max_batch, (double)free_b / 1048576.0);
	return 0;
}

/* The device's buffers: the parameters and gradients it holds, their
 * 16-bit copy, the parameter offload's slots, the arena (zeroed) and the
 * per-row batch buffers. 0, or -1 with err. */
static int device_alloc(struct trn_cuda_model *c, struct trn_err *err)
{
	struct trn_model *b = &c->base;
	size_t held = held_floats(c), n16 = weights16_values(c), rows = (size_t)c->rows;
	c->w_dev = b->w_dev = kern_cuda_malloc(sizeof(float) * held);
	c->g_dev = b->g_dev = kern_cuda_malloc(sizeof(float) * held);
	if (n16) {
		c->w16_dev = kern_cuda_malloc(sizeof(uint16_t) * n16);
		if (c->w16_pad)            /* the gap: zeros for good */
			kern_cuda_zero(c->w16_dev + c->w16_pad_at, sizeof(uint16_t) * (size_t)c->w16_pad);
	}
	if (b->param_offload == TRN_OFFLOAD_CPU && param_offload_setup(c) != 0)
		return trn_err_set(err, "model: out of memory for the parameter offload's staging");
	c->arena = kern_cuda_malloc(sizeof(float) * (size_t)c->arena_floats);
	/* once: a model's padding (between rows it pads) then holds zeros */
	kern_cuda_zero(c->arena, sizeof(float) * (size_t)c->arena_floats);
	c->tokens_dev = kern_cuda_malloc(sizeof(int) * rows);
	c->targets_dev = kern_cuda_malloc(sizeof(int) * rows);
	c->best_dev = kern_cuda_malloc(sizeof(int) * rows);
	return 0;
}

/* The host copies cross PCIe every step unless resident: page-locked, they
 * go at the link's speed (c->pinned says which are). */
static void pin_host(struct trn_cuda_model *c)
{
	struct trn_model *b = &c->base;
	float *host[3] = { b->w, b->g, c->g_stage };
	size_t floats[3] = { (size_t)b->n_floats, (size_t)b->n_floats, (size_t)c->stage_floats };
	for (int i = 0; i < 3; i++) {
		if (host[i] == b->g && b->streamed)
			continue;                  /* mostly unmapped: its resident ends go pageable */
		if (kern_cuda_host_register(host[i], sizeof(float) * floats[i]) == 0)
			c->pinned |= 1 << i;
	}
}

int trn_cuda_model_init(struct trn_cuda_model *c, struct trn_model *cpu,
                        const struct trn_model_ops *ops, long rows, long arena_floats,
                        struct trn_err *err)
{
	struct trn_model *b = &c->base;
	adopt_layout(c, cpu, ops);
	b->act_bytes = b->act_bytes_none = arena_floats * (long)sizeof(float);
	b->device = 1;
	describe_device(b);
	c->rows = rows;
	c->arena_floats = arena_floats;
	c->out_held[0] = c->out_held[1] = -1;
	c->w_version = -1;
	b->w_dev = NULL;
	/* the host's side: the gradients' stage, the per-row results */
	size_t held = held_floats(c);
	c->stage_floats = (long)held < TRN_GRAD_STAGE_FLOATS ? (long)held : TRN_GRAD_STAGE_FLOATS;
	c->g_stage = malloc(sizeof(float) * (size_t)(c->stage_floats + 1));
	c->losses_host = malloc(sizeof(float) * (size_t)rows);
	c->best_host = malloc(sizeof(int) * (size_t)rows);
	if (!c->g_stage || !c->losses_host || !c->best_host)
		return trn_err_set(err, "model: out of memory for the host side of the GPU model");
	if (check_room(c, err) != 0 || device_alloc(c, err) != 0)
		return -1;
	pin_host(c);
	return 0;
}

void trn_cuda_model_round(const struct trn_cuda_model *c, float *x, long n)
{
	if (c->base.dtype == TRN_DTYPE_BF16)
		kern_round_bf16_cuda(x, n);
	else if (c->base.dtype == TRN_DTYPE_FP16)
		kern_round_fp16_cuda(x, n);
}

/* w16_dev[0..n) from w_dev's rounded floats [0, n) (the gap left as it is) */
static void weights16_from(const struct trn_cuda_model *c, const float *w, long n)
{
	long head = n < c->w16_pad_at ? n : c->w16_pad_at;
	void (*to16)(uint16_t *, const float *, long) =
		c->base.dtype == TRN_DTYPE_BF16 ? kern_fp32_to_bf16_cuda : kern_fp32_to_fp16_cuda;
	to16(c->w16_dev, w, head);
	to16(c->w16_dev + head + c->w16_pad, w + head, n - head);
}

void trn_cuda_model_gemms(struct trn_cuda_model *c)
{
	int mm = c->base.dtype == TRN_DTYPE_BF16   ? KERN_MM_BF16
	         : c->base.dtype == TRN_DTYPE_FP16 ? KERN_MM_FP16
	                                           : KERN_MM_FP32;
	kern_matmul_cuda_operands(mm);
	long n = c->base.n_floats;
	if (c->w16_dev && !c->w16_fresh) {
		weights16_from(c, c->w_dev, n);
		c->w16_fresh = 1;
	}
	kern_matmul_cuda_weights16(c->w_dev, c->w16_dev, n, c->w16_pad_at, c->w16_pad, mm);
}

void trn_cuda_model_device_weights_changed(struct trn_model *base)
{
	((struct trn_cuda_model *)base)->w16_fresh = 0;
}

void trn_cuda_model_range_changed(struct trn_model *base, long off, long n)
{
	struct trn_cuda_model *c = (struct trn_cuda_model *)base;
	if (base->resident || base->param_off)
		return;                        /* the device's own, or the engine's to bring */
	kern_cuda_copy_async(TRN_CUDA_W_IN_CHANNEL, c->w_dev + off, base->w + off,
	                     sizeof(float) * (size_t)n);
	if (c->w_streamed && c->w_streamed_version != base->w_version)
		c->w_streamed = 0;             /* a step's worth from before: not this one's */
	c->w_streamed += n;
	c->w_streamed_version = base->w_version;
}

void trn_cuda_model_sync_weights(struct trn_cuda_model *c)
{
	long streamed = c->w_streamed;
	/* w changed once since the copies went, and that change was theirs
	 * (trn_model_weights_streamed), not a rollback or a load after them */
	int just_that = c->w_streamed_version + 1 == c->base.w_version &&
	                c->base.w_streamed_at == c->base.w_version;
	c->w_streamed = 0;
	if (c->w_version == c->base.w_version)
		return;
	c->w16_fresh = 0;                  /* w_dev changes below */
	long n = c->base.n_floats;
	/* the kernels wait for the copies still on their way into w_dev: the
	 * last of them when they are all of w, before the upload below
	 * otherwise (one landing after it would leave what w held before) */
	kern_cuda_copy_wait(TRN_CUDA_W_IN_CHANNEL);
	if (streamed == n && just_that) {
		c->w_version = c->base.w_version;
		c->base.w_sent_streamed++;
		return;
	}
	c->base.w_sent_whole++;
	kern_cuda_upload(c->w_dev, c->base.w, sizeof(float) * (size_t)c->res_head);
	if (c->res_tail < n)
		kern_cuda_upload(c->w_dev + c->res_head, c->base.w + c->res_tail,
		                 sizeof(float) * (size_t)(n - c->res_tail));
	if (c->base.w_master)
		trn_cuda_model_round(c, c->w_dev, c->res_head + (n - c->res_tail));
	c->w_version = c->base.w_version;
}

double trn_cuda_model_score(struct trn_cuda_model *c, const float *losses_dev, int a16,
                            const void *logits_dev, int ld, const int32_t *targets, long rows,
                            int classes, struct trn_fwd_stats *st)
{
	kern_cuda_download(c->losses_host, losses_dev, sizeof(float) * (size_t)rows);
	if (st) {
		kern_argmax_rows_ld_act_cuda(a16, c->best_dev, logits_dev, ld, (int)rows, classes);
		kern_cuda_download(c->best_host, c->best_dev, sizeof(int) * (size_t)rows);
	}
	return trn_model_score_top1(st ? c->best_host : NULL, c->losses_host, targets, rows, st);
}

void trn_cuda_model_zero_device_grads(struct trn_model *base)
{
	struct trn_cuda_model *c = (struct trn_cuda_model *)base;
	kern_cuda_zero(c->g_dev, sizeof(float) * (size_t)base->n_floats);
}

void trn_cuda_model_pull_weights(struct trn_model *base)
{
	struct trn_cuda_model *c = (struct trn_cuda_model *)base;
	kern_cuda_download(base->w, c->w_dev, sizeof(float) * (size_t)base->n_floats);
	c->w_version = base->w_version;        /* the two copies agree */
}

void trn_cuda_model_publish_master(struct trn_model *base, const float *master)
{
	struct trn_cuda_model *c = (struct trn_cuda_model *)base;
	long n = base->n_floats;
	if (!c->w16_dev) {
		kern_cuda_copy(c->w_dev, master, sizeof(float) * (size_t)n);
		trn_cuda_model_round(c, c->w_dev, n);
		return;
	}
	/* both copies in one pass (the gap left as it is) */
	long head = n < c->w16_pad_at ? n : c->w16_pad_at;
	int bf16 = base->dtype == TRN_DTYPE_BF16;
	kern_publish16_cuda(c->w_dev, c->w16_dev, master, head, bf16);
	kern_publish16_cuda(c->w_dev + head, c->w16_dev + head + c->w16_pad, master + head,
	                    n - head, bf16);
	c->w16_fresh = 1;
}

void trn_cuda_model_device_memory(const struct trn_model *base, struct trn_device_memory *out)
{
	(void)base;
	size_t free_b = 0, total_b = 0, now = 0, peak = 0;
	kern_cuda_mem_info(&free_b, &total_b);
	kern_cuda_alloc_bytes(&now, &peak);
	out->in_use = (double)(total_b - free_b);
	out->total = (double)total_b;
	out->alloc_peak = (double)peak;
	out->scratch_peak = (double)kern_cuda_scratch_peak();
}

void trn_cuda_model_grads_begin(struct trn_cuda_model *c)
{
	/* each backward's own, added to g at its end; or this step's sum so far,
	 * which this backward adds to (trn_model_more_micro) */
	size_t held = (size_t)(c->res_head + (c->base.n_floats - c->res_tail));
	if (!c->base.resident && !c->base.grads_held)
		kern_cuda_zero(c->g_dev, sizeof(float) * held);
	c->base.grads_held = 0;
}

/* The gradients stay on the device, adding up over a step's micro-batches
 * until its last (trn_model_more_micro): all of them are there (no
 * offload.params) and none is the optimizer's (not resident). */
static int holds_grads(const struct trn_cuda_model *c)
{
	return c->base.more_micro && !c->base.resident && !c->base.param_off;
}

/* Adds the device's gradients dev[0, n) into the host's g[0, n) through the
 * stage, a stage at a time. */
static void add_down(struct trn_cuda_model *c, float *g, const float *dev, long n)
{
	for (long a = 0; a < n; a += c->stage_floats) {
		long k = n - a < c->stage_floats ? n - a : c->stage_floats;
		kern_cuda_download(c->g_stage, dev + a, sizeof(float) * (size_t)k);
		float *d = g + a;
		const float *s = c->g_stage;
#pragma omp parallel for schedule(static) if (k > 65536)
		for (long i = 0; i < k; i++)
			d[i] += s[i];
	}
}

void trn_cuda_model_grads_range(struct trn_cuda_model *c, long off, long n)
{
	struct trn_model *b = &c->base;
	const float *dev = trn_cuda_model_dev(c, c->g_dev, off);
	if (b->g_zeroed)
		kern_cuda_download(b->g + off, dev, sizeof(float) * (size_t)n);
	else
		add_down(c, b->g + off, dev, n);
}

void trn_cuda_model_grads_out(struct trn_cuda_model *c, const int *ready_order)
{
	struct trn_model *b = &c->base;
	if (b->resident || holds_grads(c)) {  /* they stay, adding up over the micro-batches, */
		/* each backward's sum rounded to 16 bits as grad_ready rounds g */
		trn_cuda_model_round(c, c->g_dev, b->n_floats);
		b->grads_held = !b->resident;
		return;
	}
	if (b->g_zeroed)
		kern_cuda_download(b->g, c->g_dev, sizeof(float) * (size_t)b->n_floats);
	else
		add_down(c, b->g, c->g_dev, b->n_floats);
	b->g_zeroed = 0;
	for (int i = 0; i < b->n_params; i++)
		trn_model_grad_ready(b, ready_order[i]);
}

int trn_cuda_model_reports_on_device(const struct trn_cuda_model *c)
{
	return c->base.resident && c->base.grad_ready;
}

void trn_cuda_model_param_final(struct trn_cuda_model *c, int p)
{
	struct trn_model *b = &c->base;
	const struct trn_param *t = &b->params[p];
	trn_cuda_model_round(c, c->g_dev + t->offset, t->numel);
	b->grad_ready(b->grad_ready_ctx, p);
}

void trn_cuda_model_block_final(struct trn_cuda_model *c, int blk, const int *ready_order)
{
	for (int k = 0; k < c->base.n_params; k++)
		if (trn_model_block_of(&c->base, ready_order[k]) == blk)
			trn_cuda_model_param_final(c, ready_order[k]);
}

int trn_cuda_model_streams_grads(const struct trn_cuda_model *c)
{
	return !c->base.resident && !c->base.param_off && c->base.n_blocks > 0 && !holds_grads(c);
}

/* The block on its way through channel s lands: on the host, added to g
 * unless it went straight there, and handed to the hooks. */
static void land_block(struct trn_cuda_model *c, int s, const int *ready_order)
{
	struct trn_model *b = &c->base;
	int blk = c->out_held[s];
	if (blk < 0)
		return;
	c->out_held[s] = -1;
	kern_cuda_copy_wait_host(TRN_CUDA_GRAD_OUT_CHANNEL + s);
	long floats, off = trn_model_block_range(b, blk, &floats);
	if (!b->g_zeroed) {
		float *g = b->g + off;
		const float *st = c->out_stage[s];
#pragma omp parallel for schedule(static) if (floats > 65536)
		for (long i = 0; i < floats; i++)
			g[i] += st[i];
	}
	for (int k = 0; k < b->n_params; k++)
		if (trn_model_block_of(b, ready_order[k]) == blk)
			trn_model_grad_ready(b, ready_order[k]);
}

void trn_cuda_model_block_out(struct trn_cuda_model *c, int blk, const int *ready_order)
{
	struct trn_model *b = &c->base;
	int s = blk % 2;
	land_block(c, 1 - s, ready_order);   /* block blk + 1, copied beside blk's compute */
	land_block(c, s, ready_order);       /* (landed already at blk + 1's end) */
	long floats, off = trn_model_block_range(b, blk, &floats);
	float *dst = b->g + off;
	if (!b->g_zeroed) {                   /* a later micro-batch: through a stage */
		if (!c->out_stage[s]) {
			c->out_stage[s] = trn_cuda_copier.host_alloc(trn_model_largest_block(b) + 1);
			if (!c->out_stage[s]) {
				fprintf(stderr, "larch-train: out of host memory for the gradient stage\n");
				abort();
			}
		}
		dst = c->out_stage[s];
	}
	kern_cuda_copy_async(TRN_CUDA_GRAD_OUT_CHANNEL + s, dst, c->g_dev + off,
	                     sizeof(float) * (size_t)floats);
	c->out_held[s] = blk;
}

void trn_cuda_model_blocks_out_done(struct trn_cuda_model *c, const int *ready_order)
{
	land_block(c, 1, ready_order);
	land_block(c, 0, ready_order);
}

/* ---- batches copied ahead ------------------------------------------------------ */

/* The staging for one batch at max_batch: 0, or -1 when out of memory (no
 * batch is then copied ahead). */
static int ahead_alloc(struct trn_cuda_model *c)
{
	if (c->ahead.targets)
		return 0;
	long xf = (long)c->base.max_batch * c->ahead.x_row;
	c->ahead.targets = (int32_t *)trn_cuda_copier.host_alloc(c->rows);
	c->ahead.tokens = c->ahead.x_row ? NULL : (int32_t *)trn_cuda_copier.host_alloc(c->rows);
	c->ahead.x = xf ? trn_cuda_copier.host_alloc(xf) : NULL;
	if (!c->ahead.targets || (!c->ahead.x_row && !c->ahead.tokens) || (xf && !c->ahead.x)) {
		trn_cuda_copier.host_free((float *)c->ahead.targets);
		trn_cuda_copier.host_free((float *)c->ahead.tokens);
		trn_cuda_copier.host_free(c->ahead.x);
		c->ahead.targets = c->ahead.tokens = NULL;
		c->ahead.x = NULL;
		return -1;
	}
	c->ahead.targets_dev = kern_cuda_malloc(sizeof(int) * (size_t)c->rows);
	if (c->ahead.tokens)
		c->ahead.tokens_dev = kern_cuda_malloc(sizeof(int) * (size_t)c->rows);
	if (xf)
		c->ahead.x_dev = kern_cuda_malloc(sizeof(float) * (size_t)xf);
	return 0;
}

/* Rows of targets (and tokens) in b: samples x tokens, or samples. */
static long batch_rows(const struct trn_batch *b)
{
	return b->tokens ? (long)b->n * b->seq : b->n;
}

void trn_cuda_model_stage_batch(struct trn_model *base, const struct trn_batch *b)
{
	struct trn_cuda_model *c = (struct trn_cuda_model *)base;
	long rows = batch_rows(b), xf = (long)b->n * c->ahead.x_row;
	if (b->n > base->max_batch || !b->tokens != (c->ahead.x_row != 0) || ahead_alloc(c) != 0)
		return;
	/* the host copies are free once the last copy from them landed */
	kern_cuda_copy_wait_host(TRN_CUDA_BATCH_CHANNEL);
	c->base.batches_not_ahead += c->ahead.live;   /* one no forward took */
	memcpy(c->ahead.targets, b->targets, sizeof(int32_t) * (size_t)rows);
	kern_cuda_copy_async(TRN_CUDA_BATCH_CHANNEL, c->ahead.targets_dev, c->ahead.targets,
	                     sizeof(int32_t) * (size_t)rows);
	if (b->tokens) {
		memcpy(c->ahead.tokens, b->tokens, sizeof(int32_t) * (size_t)rows);
		kern_cuda_copy_async(TRN_CUDA_BATCH_CHANNEL, c->ahead.tokens_dev, c->ahead.tokens,
		                     sizeof(int32_t) * (size_t)rows);
	}
	if (xf) {
		memcpy(c->ahead.x, b->x, sizeof(float) * (size_t)xf);
		kern_cuda_copy_async(TRN_CUDA_BATCH_CHANNEL, c->ahead.x_dev, c->ahead.x,
		                     sizeof(float) * (size_t)xf);
	}
	c->ahead.n = b->n;
	c->ahead.live = 1;
}

/* Whether the staged copy holds b's data. */
static int ahead_holds(const struct trn_cuda_model *c, const struct trn_batch *b, long rows,
                       long xf)
{
	return c->ahead.live && b->n == c->ahead.n &&
	       memcmp(c->ahead.targets, b->targets, sizeof(int32_t) * (size_t)rows) == 0 &&
	       (!b->tokens ||
	        memcmp(c->ahead.tokens, b->tokens, sizeof(int32_t) * (size_t)rows) == 0) &&
	       (!xf || memcmp(c->ahead.x, b->x, sizeof(float) * (size_t)xf) == 0);
}

void trn_cuda_model_inputs(struct trn_cuda_model *c, const struct trn_batch *b, float *x_dev,
                           long x_row)
{
	long rows = batch_rows(b), xf = (long)b->n * x_row;
	if (ahead_holds(c, b, rows, xf)) {
		kern_cuda_copy_wait(TRN_CUDA_BATCH_CHANNEL);
		kern_cuda_copy(c->targets_dev, c->ahead.targets_dev, sizeof(int) * (size_t)rows);
		if (b->tokens)
			kern_cuda_copy(c->tokens_dev, c->ahead.tokens_dev, sizeof(int) * (size_t)rows);
		if (xf)
			kern_cuda_copy(x_dev, c->ahead.x_dev, sizeof(float) * (size_t)xf);
		c->ahead.live = 0;
		c->base.batches_ahead++;
		return;
	}
	/* another batch (an evaluation, a skipped one): its own copy; what was
	 * staged stays for the forward it was meant for */
	kern_cuda_upload(c->targets_dev, b->targets, sizeof(int) * (size_t)rows);
	if (b->tokens)
		kern_cuda_upload(c->tokens_dev, b->tokens, sizeof(int) * (size_t)rows);
	if (xf)
		kern_cuda_upload(x_dev, b->x, sizeof(float) * (size_t)xf);
}

void trn_cuda_model_drain_copies(void)
{
	for (int chan = 0; chan < KERN_CUDA_COPY_CHANNELS; chan++)
		kern_cuda_copy_wait_host(chan);
}

void trn_cuda_model_release(struct trn_cuda_model *c)
{
	for (int s = 0; s < 2; s++)
		if (c->out_stage[s])
			trn_cuda_copier.host_free(c->out_stage[s]);
	if (c->ahead.targets) {
		kern_cuda_copy_wait_host(TRN_CUDA_BATCH_CHANNEL);
		trn_cuda_copier.host_free((float *)c->ahead.targets);
		trn_cuda_copier.host_free((float *)c->ahead.tokens);
		trn_cuda_copier.host_free(c->ahead.x);
		kern_cuda_free(c->ahead.targets_dev);
		kern_cuda_free(c->ahead.tokens_dev);
		kern_cuda_free(c->ahead.x_dev);
		memset(&c->ahead, 0, sizeof c->ahead);
	}
	if (c->base.param_off) {
		trn_param_offload_release(c->base.param_off);
		free(c->base.param_off);
		c->base.param_off = NULL;
	}
	kern_matmul_cuda_weights16(NULL, NULL, 0, 0, 0, KERN_MM_FP32);   /* no longer kept */
	kern_cuda_free(c->w16_dev);
	kern_cuda_free(c->w_dev);
	kern_cuda_free(c->g_dev);
	kern_cuda_free(c->arena);
	kern_cuda_free(c->tokens_dev);
	kern_cuda_free(c->targets_dev);
	kern_cuda_free(c->best_dev);
	float *host[3] = { c->base.w, c->base.g, c->g_stage };
	for (int i = 0; i < 3 && c->pinned; i++)
		if (c->pinned & 1 << i)
			kern_cuda_host_unregister(host[i]);
	c->pinned = 0;
	free(c->g_stage);
	free(c->losses_host);
	free(c->best_host);
	/* the table and host buffers are the CPU layout's */
	c->base.params = NULL;
	c->base.w = c->base.g = NULL;
	trn_model_free(c->cpu);
	c->cpu = NULL;
}

static void gemm_tune_dir(const char *job_dir)
{
	char path[4096];
	if (!kern_matmul_cuda_gemm_tune(-1) || !job_dir ||
	    snprintf(path, sizeof path, "%s/gemm-tune.txt", job_dir) >= (int)sizeof path)
		return;
	kern_matmul_cuda_gemm_tune_file(path);
}

const struct trn_cuda_backend *trn_cuda_backend_entry(void)
{
	static const struct trn_cuda_backend backend = {
		.model_new = trn_model_cuda_new,
		.print_devices = trn_model_cuda_print_devices,
		.optim = &trn_optim_cuda_kernels,
		.comm_open = trn_cuda_comm_open,
		.gemm_tune_dir = gemm_tune_dir,
	};
	return &backend;
}
