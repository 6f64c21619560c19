/* trainer/train.c - the training loop; see train.h. */
#include "train.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "clock.h"
#include "comm.h"
#include "data.h"
#include "dp.h"
#include "env.h"
#include "export_hf.h"
#include "gns.h"
#include "kernels/blas.h"
#include "kernels/optimizer.h"
#include "kernels/optimizer_simd.h"
#include "kernels/parallel.h"
#include "kernels/precision.h"
#include "loss_scale.h"
#include "model.h"
#include "optim.h"
#include "opt_offload.h"
#include "spec/plan.h"
#include "report.h"
#include "schedule.h"
#include "state.h"
#include "watchdog.h"

static volatile sig_atomic_t stop_signal;

void trn_train_request_stop(int signo)
{
	stop_signal = signo;
}

struct run {
	const struct trn_spec *spec;   /* the spec this run trains: the caller's, or elastic */
	const struct trn_options *opts;
	struct trn_spec elastic;       /* started on fewer ranks than the spec's
	                                  (parallel.elastic): the spec on those ranks,
	                                  sharing the caller's JSON (trn_spec_elastic) */
	char elastic_why[200];         /* then what changed, for the header and the result */
	struct trn_comm *comm;         /* the ranks; rank 0 writes, prints and reports */
	int lead;                      /* this is rank 0 */
	struct trn_dp dp;
	struct trn_dataset ds;
	struct trn_model *model;
	struct trn_optim opt;          /* over the dp's range [lo, hi) of the buffer */
	float *master;                 /* fp32 master weights of [lo, hi): the model's own w + lo
	                                  with fp32 compute, else master_owned */
	float *master_owned;           /* with offload.optimizer "cpu" always, in host memory */
	float *master_dev;             /* resident in 16 bits: the fp32 master weights on the
	                                  device (opt.k's memory), owned */
	int offload;                   /* offload.optimizer "cpu": off moves grads and params */
	int resident;                  /* on a GPU with the optimizer there too: the device
	                                  holds weights, gradients and state (model.h); one
	                                  rank, or ranks over a device communicator (comm.h) */
	struct trn_opt_offload off;
	/* the update follows backward (trn_spec_streams_update): the step's lr,
	 * the squared gradient norm summed as tensors come, a tensor whose
	 * gradient was not where it should be */
	int streamed;
	double stream_lr, stream_gsq;
	int stream_lost;
	struct trn_loss_scale ls;
	struct trn_watchdog wd;
	struct trn_gns gns;            /* the gradient noise scale (gns.h) */
	int gns_now;                   /* this step is measured */
	double gns_small;              /* one rank: its first micro-batch's |g|^2 */
	struct trn_gns_point gns_last; /* the latest measurement, for the next report */
	int gns_have;
	struct trn_loader loader;
	struct trn_schedule sched;
	struct trn_batch batch;
	struct trn_batch ahead;        /* the next micro-batch, for a model that copies it
	                                  ahead (trn_model_stage_batch) */
	struct trn_report rep;
	struct trn_state state;
	long steps_per_epoch, total_steps;
	struct {                       /* since the last progress line: */
		double t;              /* time in steps */
		double after;          /* of which after the steps' last backward returned */
		double phase[4];       /* with offload.optimizer cpu, that time's parts: the
		                          gradients' wait, their norm (and check), the update,
		                          the parameters' way back */
		long steps;
	} iv;
	double train_t;                /* time in steps, all of them */
	double t_start;
	double last_loss;
	json_t *final;                 /* the last evaluation's figures */
	double val_loss, val_acc;      /* the last evaluation's, on the lead rank */
	long stopped_at;               /* the step whose evaluation reached spec.stop; 0 = none */
	struct trn_plan plan;          /* rank 0: this run's memory plan (make_plan) */
	int have_plan;
};

static double mib(double bytes)
{
	return bytes / (1024.0 * 1024.0);
}

/* What the validator accepts but this build cannot run yet: refuse it up
 * front with the field's name rather than train something else. */
static int check_supported(const struct trn_spec *s, struct trn_err *err)
{
	if (s->init_job[0])
		return trn_err_set(err, "init.job: names a checkpoint of a larch job, which larchd "
		                   "resolves; a run outside larchd needs init.from");
	if (s->parallel.zero_stage > 1)
		return trn_err_set(err, "parallel.zero_stage: ZeRO stage %d is not supported by this "
		                   "larch-train yet (0 or 1)", s->parallel.zero_stage);
	return 0;
}

static int make_dir(const char *path, struct trn_err *err)
{
	char buf[TRN_PATH_MAX];
	snprintf(buf, sizeof buf, "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) != 0 && errno != EEXIST)
			return trn_err_set(err, "job dir %s: %s", buf, strerror(errno));
		*p = '/';
	}
	if (mkdir(buf, 0755) != 0 && errno != EEXIST)
		return trn_err_set(err, "job dir %s: %s", buf, strerror(errno));
	return 0;
}

static int write_spec(const char *job_dir, const struct trn_spec *spec, struct trn_err *err)
{
	char *text = trn_json_dumps(spec->json, JSON_INDENT(2) | JSON_SORT_KEYS);
	if (!text)
		return trn_err_set(err, "spec.json: out of memory");
	char path[TRN_PATH_MAX + 32];
	snprintf(path, sizeof path, "%s/spec.json", job_dir);
	size_t len = strlen(text);
	char *nl = realloc(text, len + 2);
	if (!nl) {
		free(text);
		return trn_err_set(err, "spec.json: out of memory");
	}
	memcpy(nl + len, "\n", 2);
	int rc = trn_write_file_atomic(path, nl, err);
	free(nl);
	return rc;
}

/* Loss and accuracy over the whole validation split. */
static int evaluate(struct run *r, long step)
{
	const struct trn_split *val = &r->ds.val;
	if (val->n == 0)
		return 0;
	struct trn_fwd_stats st = { 0 };
	for (long first = 0; first < val->n; first += r->batch.cap) {
		trn_split_batch(&r->ds, val, first, &r->batch);
		trn_model_forward(r->model, &r->batch, &st);
	}
	double loss = st.count ? st.loss_sum / (double)st.count : 0.0;
	double acc = st.count ? (double)st.correct / (double)st.count : 0.0;
	r->val_loss = loss;
	r->val_acc = acc;
	trn_report_metric(&r->rep, step, "val/loss", loss);
	trn_report_metric(&r->rep, step, "val/accuracy", acc);
	trn_report_flush(&r->rep);
	if (!r->opts->quiet)
		printf("eval step %ld: val/loss %.4f val/accuracy %.4f\n", step, loss, acc);

	json_decref(r->final);
	r->final = json_pack("{s:f, s:f, s:f}", "val/loss", loss, "val/accuracy", acc,
	                     "train/loss", r->last_loss);
	return 0;
}

/* This run's memory plan (plan.h), rank 0's: the spec's, for the loaded
 * data, on this run's device, stepping where it steps. The header prints
 * it; the summary holds the peak against it. */
static void make_plan(struct run *r)
{
	/* the loaded data's shape: its files are not opened again */
	struct trn_dataset shape = r->ds;
	shape.train.x = shape.val.x = NULL;
	shape.train.y = shape.val.y = NULL;
	shape.train.tokens = shape.val.tokens = NULL;
	struct trn_err err = { 0 };
	r->have_plan = trn_plan_make_run(&r->plan, r->spec, &shape, r->model->device, r->resident,
	                                 &err) == 0;
	if (!r->have_plan)
		printf("memory plan: %s\n", err.text);
}

/* This process's peak resident memory beside its plan (make_plan): on the
 * CPU everything the plan counts is resident memory. On a GPU the device's
 * memory in use beside the device's plan, and the host's peak beside the
 * host's plan, both with what CUDA itself holds on top (its context, its
 * libraries). */
static void print_peak(const struct run *r)
{
	const struct trn_plan *p = &r->plan;
	int have = r->have_plan;
	double peak = trn_plan_peak_rss();
	const struct trn_model *m = r->model;
	if (m->device)
		printf("input: %ld batches copied to the device ahead, beside the compute, and "
		       "taken by their forward; %ld not taken\n", m->batches_ahead,
		       m->batches_not_ahead);
	if (m->device && !r->resident && m->param_offload == TRN_OFFLOAD_NONE)
		printf("weights: sent to the device whole %ld times, and %ld times as the update "
		       "wrote them\n", m->w_sent_whole, m->w_sent_streamed);
	if (m->device && m->ops->device_memory) {
		struct trn_device_memory d;
		m->ops->device_memory(m, &d);
		printf("device memory: %.1f MiB of %.1f MiB in use at the end (with the CUDA "
		       "context); larch's buffers peaked at %.1f MiB, planned %.1f MiB (%+.1f%%); the "
		       "kernels' scratch peaked at %.1f MiB\n", mib(d.in_use), mib(d.total),
		       mib(d.alloc_peak), have ? mib(p->device_bytes) : 0.0,
		       have && p->device_bytes > 0
		               ? 100.0 * (d.alloc_peak - p->device_bytes) / p->device_bytes : 0.0,
		       mib(d.scratch_peak));
	}
	if (peak <= 0 || !have || p->host_bytes <= 0)
		return;
	printf("%s: peak resident %.1f MiB, planned %.1f MiB (%+.1f%%)%s\n",
	       m->device ? "host memory" : "memory", mib(peak), mib(p->host_bytes),
	       100.0 * (peak - p->host_bytes) / p->host_bytes,
	       m->device ? " (+ CUDA's libraries)" : "");
}

static void print_plan(struct run *r)
{
	const struct trn_spec *s = r->spec;
	const struct trn_model *m = r->model;

	printf("larch-train: %s: %s model, %ld parameters in %d tensors\n", s->name,
	       s->model.type == TRN_MODEL_MLP ? "mlp" : "gpt", m->n_floats, m->n_params);
	printf("data: %ld train / %ld val samples; batch %ld = micro %ld x %d rank%s x %ld accum; "
	       "%ld steps/epoch, %ld steps\n", r->ds.train.n, r->ds.val.n, s->batch.global,
	       s->batch.micro, s->parallel.ranks, s->parallel.ranks > 1 ? "s" : "", s->batch.accum,
	       r->steps_per_epoch, r->total_steps);
	if (r->comm->size > 1)
		printf("parallel: %d ranks over %s (started by %s), gradients %s in %d bucket%s of "
		       "up to %.3g MiB\n", r->comm->size, r->comm->ops->name, trn_comm_launcher(),
		       r->dp.zero ? "reduce-scattered (ZeRO-1)" : "averaged", r->dp.n_buckets,
		       r->dp.n_buckets == 1 ? "" : "s", mib((double)s->parallel.bucket_bytes));
	if (r->comm->size > 1 && r->comm->ops->caveat)
		printf("comm: %s\n", r->comm->ops->caveat);
	if (r->elastic_why[0])
		printf("%s\n", r->elastic_why);
	printf("optimizer: %s, lr %.4g x %.4g = %.4g, warmup %ld steps from %.4g\n",
	       trn_opt_name(s->optimizer.type), r->sched.base_lr, r->sched.scale, r->sched.peak_lr,
	       r->sched.warmup_steps, r->sched.start_lr);
	if (r->ls.mode == TRN_LOSS_SCALE_DYNAMIC)
		printf("precision: %s compute, fp32 master weights; dynamic loss scale from %.0f, x2 "
		       "after %ld clean steps\n", trn_dtype_name(m->dtype), r->ls.scale,
		       r->ls.growth_interval);
	else if (r->ls.mode == TRN_LOSS_SCALE_STATIC)
		printf("precision: %s compute, fp32 master weights; static loss scale %g\n",
		       trn_dtype_name(m->dtype), r->ls.scale);
	else if (m->dtype != TRN_DTYPE_FP32)
		printf("precision: %s compute, fp32 master weights; no loss scale\n",
		       trn_dtype_name(m->dtype));
	make_plan(r);
	if (r->have_plan)
		trn_plan_print(stdout, &r->plan);
	if (m->device)
		printf("device: %s; peak %.1f TFLOP/s %s (%s; the MFU's denominator); %s\n",
		       m->device_desc, m->peak_flops * 1e-12,
		       m->dtype == TRN_DTYPE_FP32 ? "fp32" : "16-bit tensor",
		       m->peak_basis ? m->peak_basis : "unknown",
		       r->resident ? "weights, gradients and optimizer state on the device"
		                   : "the optimizer on the host (gradients down, weights up a step)");
	trn_gns_print(&r->gns, stdout);
	printf("blas: %s\n", kern_blas_describe());
	trn_options_print(stdout, r->opts);
	fflush(stdout);
}

/* The model's parameters from the master weights: rounded to the compute
 * dtype, and with ZeRO every rank's updated range to all. */
static int publish_params(struct run *r, struct trn_err *err)
{
	struct trn_model *m = r->model;
	if (r->resident) {               /* updated in place on the device */
		if (r->master_dev)
			trn_model_publish_master(m, r->master_dev);
		/* ZeRO: the other ranks' ranges of the rounding came from master
		 * weights this rank does not update; theirs replace them */
		int rc = trn_dp_allgather(&r->dp, m->w_dev, err);
		if (!r->master_dev || r->dp.zero)
			trn_model_device_weights_changed(m);
		return rc;
	}
	if (r->offload) {
		/* host -> device; whole before it is gathered or computed with */
		trn_opt_offload_params_in(&r->off);
		trn_opt_offload_params_wait(&r->off);
		/* all of w went chunk by chunk (one rank): nothing more to send.
		 * (On a GPU those copies read w until the next forward, whose
		 * compute waits for them and whose loss the host waits for: w is
		 * written again only after that, by the next publish or a
		 * rollback, both after a forward.) */
		if (r->off.landed) {
			trn_model_weights_streamed(m);
			return trn_dp_allgather(&r->dp, m->w, err);
		}
	} else if (r->master_owned) {
		long n = r->dp.hi - r->dp.lo;
		memcpy(m->w + r->dp.lo, r->master_owned, sizeof(float) * (size_t)n);
		trn_model_round(m, m->w + r->dp.lo, n);
	}
	trn_model_weights_changed(m);
	return trn_dp_allgather(&r->dp, m->w, err);
}

/* Restores the newest checkpoint (every rank reads it). */
static int load_state(struct run *r, const char *path, struct trn_err *err)
{
	struct trn_optim_state os;
	if (trn_optim_state_init(&os, &r->opt, err) != 0)
		return -1;
	r->state.w = r->model->w;
	r->state.os = &os;
	int rc = trn_state_load(path, &r->state, err);
	if (rc == 0)
		trn_optim_state_take(&r->opt, &os);
	trn_optim_state_release(&os);
	r->state.os = NULL;
	return rc;
}

/* The model's fp32 weights (just initialised or loaded, the same on every
 * rank) become the master weights; the model computes with their rounding. */
static void adopt_weights(struct run *r)
{
	if (r->master_dev) {
		r->opt.k->from_host(r->master_dev, r->model->w,
		                    sizeof(float) * (size_t)r->model->n_floats);
		trn_model_round(r->model, r->model->w, r->model->n_floats);
		return;
	}
	if (!r->master_owned)
		return;
	memcpy(r->master_owned, r->model->w + r->dp.lo, sizeof(float) * (size_t)(r->dp.hi - r->dp.lo));
	trn_model_round(r->model, r->model->w, r->model->n_floats);
}

/* Weights from the spec (init.from, init.hf or the seed's initialisation) and a
 * fresh optimizer and loss scaler: a run's start, or a rollback with no
 * checkpoint yet. */
static int fresh_start(struct run *r, struct trn_err *err)
{
	const struct trn_spec *s = r->spec;
	if (s->init_from[0]) {
		if (trn_params_load(r->model, s->init_from, r->opts->inputs, err) != 0)
			return -1;
	} else if (s->init_hf[0]) {
		if (trn_hf_load(r->model, s, s->init_hf, r->opts->inputs, err) != 0)
			return -1;
	} else {
		trn_model_init_weights(r->model, s->seed);
	}
	trn_optim_reset(&r->opt);
	trn_loss_scale_init(&r->ls, &s->precision);
	return 0;
}

/* Restores the newest checkpoint in the job dir into path's name (1), or,
 * with none, starts afresh (0; path is left alone). -1 with err. */
static int restore_newest(struct run *r, char *path, size_t size, struct trn_err *err)
{
	long *steps = NULL;
	int n = trn_ckpt_list(r->opts->job_dir, &steps, err);
	if (n > 0)
		trn_ckpt_path(path, size, r->opts->job_dir, steps[0]);
	free(steps);
	if (n < 0)
		return -1;
	if (n == 0)
		return fresh_start(r, err) == 0 ? 0 : -1;
	return load_state(r, path, err) == 0 ? 1 : -1;
}

/* dp issued bucket i's reduction (one rank: its gradients are final): its
 * part of this rank's range starts for the host, after the reduction. */
static void offload_bucket(void *ctx, int i)
{
	struct run *r = ctx;
	long a, n = trn_dp_bucket_part(&r->dp, i, &a);
	if (n)
		trn_opt_offload_grads_out(&r->off, i, a, n);
}

/* Streamed: tensor p's gradient is final, its update now (into the master
 * weights, and rounded into the params when they are not the master). */
static void stream_update(void *ctx, int p)
{
	struct run *r = ctx;
	struct trn_model *m = r->model;
	const struct trn_param *t = &m->params[p];
	const float *g = trn_model_grad_of(m, p);
	if (!g) {
		r->stream_lost = p + 1;
		return;
	}
	r->stream_gsq += r->opt.k->sumsq(g, t->numel);
	trn_optim_step_tensor(&r->opt, p, r->master + t->offset, g, r->stream_lr);
	if (r->master != m->w) {
		memcpy(m->w + t->offset, r->master + t->offset, sizeof(float) * (size_t)t->numel);
		trn_model_round(m, m->w + t->offset, t->numel);
	}
	trn_model_tensor_changed(m, p);    /* on a GPU, on its way back now */
}

/* The optimizer offload's parameters [a, a + n) of this rank's range are in
 * w for good: on a GPU they start for the device now, while the next chunk
 * is rounded (two staging buffers and a copy channel: opt_offload.h). */
static void params_landed(void *ctx, long a, long n)
{
	struct run *r = ctx;
	trn_model_range_changed(r->model, r->dp.lo + a, n);
}

/* offload.optimizer "cpu": the master weights and the optimizer state are
 * the host's; the gradients come to it bucket by bucket, the parameters go
 * back in chunks of parallel.bucket_mb. With offload.params "cpu" the
 * model's own parameters and gradients are host memory: in place. */
static int setup_offload(struct run *r, struct trn_err *err)
{
	long n = r->dp.hi - r->dp.lo;
	/* (streamed, the update reads each gradient where the model hands it
	 * out and writes the params itself: nothing for the offload to copy) */
	int in_place = trn_opt_offload_works_in_place(r->model->param_offload == TRN_OFFLOAD_CPU,
	                                              trn_spec_streams_update(r->spec),
	                                              r->model->device);
	if (trn_opt_offload_init(&r->off, n, r->dp.n_buckets,
	                         r->spec->parallel.bucket_bytes / (long)sizeof(float), r->model->dtype,
	                         r->master, r->dp.gs, r->model->w + r->dp.lo, in_place) != 0)
		return trn_err_set(err, "offload.optimizer: out of memory for the host gradients and "
		                   "staging of %ld parameters", n);
	r->offload = 1;
	r->dp.bucket_started = offload_bucket;
	r->dp.bucket_ctx = r;
	if (r->comm->size == 1) {          /* (with ranks, the all-gather writes w after) */
		r->off.landed = params_landed;
		r->off.landed_ctx = r;
	}
	return 0;
}

/* Whether a GPU run keeps weights, gradients and optimizer state on the
 * device: nothing offloaded to the host, and the optimizer's state whole
 * on each rank where it is int8 (ZeRO's cut blocks are agreed on on the
 * host: trn_optim_move_to). */
static int stays_on_device(const struct trn_spec *s, const struct trn_model *m)
{
	int int8_sharded = s->optimizer.state_dtype == TRN_DTYPE_INT8 &&
	                   s->parallel.zero_stage >= 1 && s->parallel.ranks > 1;
	return m->device && s->offload.optimizer == TRN_OFFLOAD_NONE && !int8_sharded &&
	       m->param_offload == TRN_OFFLOAD_NONE;
}

/* Where this rank trains: -1 the CPU, else its index on the node (the
 * GPU is that modulo the node's GPUs: one rank per GPU). --device, else a
 * spec that asks for GPUs. */
static int pick_device(const struct run *r, int *dev, struct trn_err *err)
{
	const char *want = r->opts->device;
	*dev = -1;
	if (want ? strcmp(want, "cuda") != 0 : r->spec->resources.gpus_per_node <= 0)
		return 0;
	if (!trn_model_cuda_built())
		return trn_err_set(err, "%s: this larch-train was built without CUDA (WITH_CUDA=OFF, "
		                   "or no CUDA toolkit at build time); --device cpu trains on the CPU",
		                   want ? "--device cuda" : "resources.gpus_per_node");
	static const char *const local_vars[] = { "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
		                                  "MPI_LOCALRANKID", "PMIX_LOCAL_RANK" };
	*dev = r->comm->rank;
	for (size_t i = 0; i < sizeof local_vars / sizeof local_vars[0]; i++) {
		const char *v = trn_env_str(local_vars[i]);
		if (v) {
			*dev = atoi(v);
			break;
		}
	}
	return 0;
}

/* The optimizer's loops: the option cpu_isa's set where this CPU runs it
 * (the widest otherwise, said once). */
static void pick_isa(const struct run *r)
{
	const char *want = r->opts->cpu_isa;
	if (!want || strcmp(want, "auto") == 0)
		return;
	if (kern_optim_set_isa((enum kern_isa)kern_isa_parse(want)) != 0 && r->lead)
		fprintf(stderr, "larch-train: cpu_isa %s: this CPU or build lacks it; the optimizer "
		        "runs on %s\n", want, kern_isa_name(kern_optim_isa()));
}

/* The ranks, the reporter, the kernels' choices, the job dir, the data and
 * the schedule: an exit code. */
static int open_run(struct run *r, struct trn_err *err)
{
	const struct trn_spec *s = r->spec;
	const char *dir = r->opts->job_dir;
	char blas_err[1024];

	if (check_supported(s, err) != 0)
		return TRN_EXIT_USAGE;
	struct trn_comm_settings tcp = { .timeout_s = r->opts->comm_timeout_s,
	                                 .host = r->opts->comm_host,
	                                 .min_ranks = s->parallel.min_ranks };
	if (!(r->comm = trn_comm_open(s->parallel.ranks, dir, &tcp, err)))
		return TRN_EXIT_USAGE;
	r->lead = r->comm->rank == 0;
	if (r->comm->size > 1) {
		/* where each rank runs, in the job's stderr (stdout is rank 0's) */
		char host[256] = "?";
		if (gethostname(host, sizeof host) != 0)
			snprintf(host, sizeof host, "?");
		host[sizeof host - 1] = '\0';
		fprintf(stderr, "larch-train: rank %d of %d on host %s (pid %ld)\n", r->comm->rank,
		        r->comm->size, host, (long)getpid());
		fflush(stderr);
	}
	if (r->comm->size != s->parallel.ranks) {
		/* fewer ranks than the spec's, as parallel.elastic allows: the
		 * same global batch, in more micro-batches a rank */
		if (trn_spec_elastic(s, r->comm->size, &r->elastic, err) != 0)
			return TRN_EXIT_USAGE;
		snprintf(r->elastic_why, sizeof r->elastic_why, "elastic: %d of the spec's %d ranks "
		         "started (parallel.elastic.min_ranks %d): accumulation %ld -> %ld, global "
		         "batch %ld kept", r->comm->size, s->parallel.ranks, s->parallel.min_ranks,
		         s->batch.accum, r->elastic.batch.accum, s->batch.global);
		r->spec = s = &r->elastic;
	}
	if (r->lead && trn_report_connect(&r->rep, err) != 0)
		return TRN_EXIT_USAGE;
	/* the thread count first: kern_blas_init hands it to the BLAS and
	 * names it in the header's blas: line */
	if (r->opts->threads > 0)
		kern_set_threads(r->opts->threads);
	struct kern_blas_choice blas = { .library = r->opts->blas,
	                                 .coretype = r->opts->openblas_coretype };
	if (kern_blas_init(&blas, blas_err, sizeof blas_err) != 0)
		return trn_err_set(err, "%s", blas_err), TRN_EXIT_FAILED;
	pick_isa(r);
	if (make_dir(dir, err) != 0 || (r->lead && write_spec(dir, s, err) != 0))
		return TRN_EXIT_FAILED;
	if (trn_dataset_load(&r->ds, s, r->opts->inputs, err) != 0)
		return TRN_EXIT_FAILED;
	if (trn_loader_init(&r->loader, &r->ds, &r->ds.train, s->seed, s->data.shuffle,
	                    r->comm->rank, s->parallel.ranks, s->batch.global, s->batch.micro, err) != 0)
		return TRN_EXIT_FAILED;
	r->steps_per_epoch = trn_loader_steps_per_epoch(&r->loader);
	r->total_steps = s->length.in_epochs ? trn_period_steps(&s->length, r->steps_per_epoch)
	                                     : (long)s->length.value;
	if (r->total_steps < 1)
		r->total_steps = 1;
	trn_schedule_init(&r->sched, s, r->steps_per_epoch, r->total_steps);
	return TRN_EXIT_OK;
}

/* The model on its device, its batches, the data-parallel buckets and the
 * optimizer: an exit code. */
static int make_model(struct run *r, struct trn_err *err)
{
	const struct trn_spec *s = r->spec;
	int device;
	if (pick_device(r, &device, err) != 0)
		return TRN_EXIT_USAGE;
	if (!(r->model = trn_model_new_on(s, &r->ds, (int)s->batch.micro, device, r->opts, err)))
		return TRN_EXIT_FAILED;
	if (device >= 0)
		trn_model_cuda_tune_dir(r->opts->job_dir);
	if (trn_batch_alloc(&r->batch, &r->ds, (int)s->batch.micro) != 0 ||
	    (trn_model_stages_batches(r->model) &&
	     trn_batch_alloc(&r->ahead, &r->ds, (int)s->batch.micro) != 0))
		return trn_err_set(err, "batch: out of memory"), TRN_EXIT_FAILED;
	/* one rank per GPU, everything on the devices: the collectives run
	 * there too (the backend's NCCL); without one the gradients go over
	 * MPI on the host and the optimizer steps there */
	if (r->comm->size > 1 && stays_on_device(s, r->model)) {
		struct trn_err why = { 0 };
		struct trn_comm *dc = trn_comm_open_device(r->comm, device, &why);
		if (dc)
			r->comm = dc;
		else if (r->lead)
			printf("data parallel: the gradients go over the host: %s\n", why.text);
	}
	if (trn_dp_init(&r->dp, r->comm, r->model, s->parallel.bucket_bytes,
	                s->parallel.zero_stage >= 1, err) != 0)
		return TRN_EXIT_FAILED;
	if (trn_optim_init_shard(&r->opt, &s->optimizer, r->model->params, r->model->n_params,
	                         r->model->n_floats, r->dp.lo, r->dp.hi, r->comm, err) != 0)
		return TRN_EXIT_FAILED;
	trn_loss_scale_init(&r->ls, &s->precision);
	return TRN_EXIT_OK;
}

/* Where the master weights live and how gradients reach the optimizer:
 * an exit code. */
static int place_master(struct run *r, struct trn_err *err)
{
	const struct trn_spec *s = r->spec;
	/* fp32 master weights are the parameters themselves where those are the
	 * host's (without optimizer offload, or with the parameters offloaded),
	 * and so are 16-bit runs' where the model rounds them as it reads them */
	int params_fp32 = r->model->dtype == TRN_DTYPE_FP32 || r->model->w_master;
	if (params_fp32 && (s->offload.optimizer == TRN_OFFLOAD_NONE ||
	                    r->model->param_offload == TRN_OFFLOAD_CPU)) {
		r->master = r->model->w + r->dp.lo;
	} else {
		long n = r->dp.hi - r->dp.lo;
		if (!(r->master_owned = malloc(sizeof(float) * (size_t)(n + 1))))
			return trn_err_set(err, "master weights: out of memory"), TRN_EXIT_FAILED;
		r->master = r->master_owned;
	}
	if (s->offload.optimizer == TRN_OFFLOAD_CPU && setup_offload(r, err) != 0)
		return TRN_EXIT_FAILED;
	/* on a GPU, neither the optimizer nor the parameters offloaded, one rank
	 * or ranks over a device communicator: it steps the device copies in
	 * place (in 16 bits fp32 master weights on the device, which it
	 * publishes rounded), and nothing crosses to the host in a step; with
	 * several ranks the gradients are reduced there (ZeRO: into a shard
	 * there, the updated ranges gathered there) */
	struct trn_model *m = r->model;
	if (stays_on_device(s, m) && (r->comm->size == 1 || r->comm->device)) {
		const struct trn_optim_kernels *k = trn_optim_kernels_of(m);
		if (trn_optim_move_to(&r->opt, k, err) != 0 || trn_model_set_resident(m) != 0)
			return TRN_EXIT_FAILED;
		r->resident = 1;
		r->master = m->w_dev + r->dp.lo;
		if (m->dtype != TRN_DTYPE_FP32) {
			size_t bytes = sizeof(float) * (size_t)m->n_floats;
			if (!(r->master_dev = k->alloc_zeroed(bytes)))
				return trn_err_set(err, "master weights: out of %s memory", k->name),
				       TRN_EXIT_FAILED;
			r->master = r->master_dev + r->dp.lo;
			free(r->master_owned);
			r->master_owned = NULL;
		}
		if (r->comm->size > 1 && trn_dp_move_to(&r->dp, k, m->g_dev, err) != 0)
			return TRN_EXIT_FAILED;
	}
	if (r->comm->size > 1 || r->offload) {
		/* buckets start reducing (and for the host) while backward goes on */
		r->model->grad_ready = trn_dp_grad_ready;
		r->model->grad_ready_ctx = &r->dp;
	}
	if (trn_spec_streams_update(s)) {  /* one rank: no buckets to reduce */
		r->streamed = 1;
		m->grad_ready = stream_update;
		m->grad_ready_ctx = r;
	}
	return TRN_EXIT_OK;
}

/* The newest checkpoint, or the spec's initial weights, on every rank: an
 * exit code. */
static int start_or_resume(struct run *r, struct trn_err *err)
{
	const struct trn_spec *s = r->spec;
	const char *dir = r->opts->job_dir;
	r->state = (struct trn_state){ .model = r->model, .opt = &r->opt, .loader = &r->loader,
	                               .ls = &r->ls, .seed = s->seed };
	trn_spec_hash(s, r->state.spec_hash);

	char path[TRN_PATH_MAX + 64];
	int restored = restore_newest(r, path, sizeof path, err);
	if (restored < 0)
		return strstr(err->text, "different spec") ? TRN_EXIT_USAGE : TRN_EXIT_FAILED;
	if (!restored) {
		if (r->opts->resume)
			return trn_err_set(err, "--resume: no checkpoint in %s/checkpoints", dir), TRN_EXIT_USAGE;
		if (r->lead && trn_report_open(&r->rep, dir, -1, err) != 0)
			return TRN_EXIT_FAILED;
	} else {
		if (r->lead && trn_report_open(&r->rep, dir, r->state.step, err) != 0)
			return TRN_EXIT_FAILED;
		if (r->lead && r->state.ranks > 0 && r->state.ranks != r->comm->size)
			printf("resume: from %s (step %ld), written by %d ranks, resharded over %d\n",
			       path, r->state.step, r->state.ranks, r->comm->size);
		else if (r->lead)
			printf("resume: from %s (step %ld)\n", path, r->state.step);
	}
	/* every rank starts from rank 0's weights (the same seed makes the same
	 * ones; this makes sure) */
	if (trn_comm_bcast(r->comm, r->model->w, r->model->n_floats * (long)sizeof(float), 0,
	                   err) != 0)
		return TRN_EXIT_FAILED;
	adopt_weights(r);
	trn_model_weights_changed(r->model);
	if (trn_watchdog_init(&r->wd, &s->watchdog, err) != 0)
		return TRN_EXIT_FAILED;
	r->rep.quiet = r->opts->quiet || !r->lead;
	return TRN_EXIT_OK;
}

/* Sets everything up; on resume restores the newest checkpoint. */
static int setup(struct run *r, struct trn_err *err)
{
	int code = open_run(r, err);
	if (code == TRN_EXIT_OK)
		code = make_model(r, err);
	if (code == TRN_EXIT_OK)
		code = place_master(r, err);
	if (code == TRN_EXIT_OK)
		trn_gns_init(&r->gns, &r->spec->metrics, r->spec->batch.micro, r->spec->batch.accum,
		             r->comm->size);
	return code == TRN_EXIT_OK ? start_or_resume(r, err) : code;
}

/* ZeRO: every rank's range of its copy of whole into rank 0's. */
static int gather_range(struct run *r, float *whole, struct trn_err *err)
{
	long n = r->dp.hi - r->dp.lo;
	float *mine = malloc(sizeof(float) * (size_t)(n + 1));
	if (!mine)
		return trn_err_set(err, "checkpoint: out of memory for the master weights");
	memcpy(mine, whole + r->dp.lo, sizeof(float) * (size_t)n);
	int rc = trn_dp_gather(&r->dp, mine, whole, err);
	free(mine);
	return rc;
}

/* Rank 0 writes the run's checkpoint; with ZeRO every rank first sends it
 * its shards (every rank calls this, at the same step). */
static int save(struct run *r, struct trn_err *err)
{
	long n = r->model->n_floats;
	trn_model_pull_weights(r->model);  /* resident: the device's weights */
	float *master = NULL;
	struct trn_optim_state os = { 0 };
	int rc = -1;
	/* master weights that are not sharded are whole on every rank: saved
	 * where they are */
	int gather = r->master_dev || (r->master_owned && r->dp.zero);
	if (gather && !(master = malloc(sizeof(float) * (size_t)n))) {
		trn_err_set(err, "checkpoint: out of memory for the master weights");
		goto out;
	}
	if (r->master_dev)           /* resident: the device's (ZeRO: this rank's range) */
		r->opt.k->to_host(master, r->master_dev, sizeof(float) * (size_t)n);
	if (r->master_dev && r->dp.zero && gather_range(r, master, err) != 0)
		goto out;
	if (trn_optim_state_init(&os, &r->opt, err) != 0)
		goto out;
	/* without ZeRO the ranks' states are the same, rank 0's is the run's */
	if ((r->master_owned && gather && trn_dp_gather(&r->dp, r->master_owned, master, err) != 0) ||
	    trn_optim_state_gather(&os, &r->opt, &r->dp, err) != 0)
		goto out;
	rc = 0;
	if (r->lead) {
		r->state.w = master ? master : r->master_owned ? r->master_owned : r->model->w;
		r->state.os = &os;
		r->state.ranks = r->comm->size;
		rc = trn_state_save(r->opts->job_dir, &r->state, r->spec->keep_checkpoints, err);
		r->state.os = NULL;
	}
out:
	free(master);
	trn_optim_state_release(&os);
	return rc;
}

static void progress(struct run *r, long step, double loss, double lr, double rate)
{
	char elapsed[32], eta[32];
	double wall = trn_now() - r->t_start;
	trn_format_duration(elapsed, sizeof elapsed, wall);
	trn_format_duration(eta, sizeof eta, rate > 0 ? (double)(r->total_steps - step) *
	                    (double)r->spec->batch.global / rate : NAN);
	const char *unit = r->model->tokens_per_sample > 1 ? "tokens/s" : "samples/s";
	double shown = rate * (double)r->model->tokens_per_sample;
	printf("step %ld/%ld | epoch %.2f | loss %.4f | lr %.4e | %.0f %s | elapsed %s | eta %s\n",
	       step, r->total_steps, (double)step / (double)r->steps_per_epoch, loss, lr, shown,
	       unit, elapsed, eta);
}

/* The watchdog saw step's loss go bad: back to the newest checkpoint's
 * weights, optimizer state and loss scale (or to the start when there is
 * none), every rank alike, while the step count, the schedule and the data
 * go on from past the offending batch: the batches since the checkpoint are
 * skipped, and metrics and checkpoints keep one series. */
static int rollback(struct run *r, long step, const char *why, struct trn_err *err)
{
	long steps_now = step, epoch, pos;
	trn_loader_advance(&r->loader);
	epoch = r->loader.epoch;
	pos = r->loader.pos;
	char path[TRN_PATH_MAX + 64] = "the initial weights";
	int restored = restore_newest(r, path, sizeof path, err);
	if (restored < 0)
		return -1;
	long from = restored ? r->state.step : 0;
	adopt_weights(r);
	trn_model_weights_changed(r->model);
	r->state.step = steps_now;
	trn_loader_seek(&r->loader, epoch, pos);
	trn_watchdog_rolled_back(&r->wd);
	trn_report_metric(&r->rep, steps_now, "train/rollbacks", r->wd.rollbacks);
	trn_report_flush(&r->rep);
	if (r->lead)
		printf("watchdog: %s: rolled back to step %ld (%s), skipping the %ld batches after it "
		       "(rollback %d of %d)\n", why, from, path, steps_now - from, r->wd.rollbacks,
		       r->spec->watchdog.max_rollbacks);
	fflush(stdout);
	return 0;
}

/* The gradients of this rank's range, summed over the ranks, averaged and
 * unscaled in fp32: the dp's, or with offload the host's copy of them (the
 * device's went as the reduction left them, and are unscaled there). NULL
 * with err when a collective failed. */
static float *step_grads(struct run *r, double scale, struct trn_err *err)
{
	float inv = (float)(1.0 / scale);
	if (r->resident && r->comm->size == 1) {  /* the device's own, unscaled there */
		if (inv != 1.0f)
			r->opt.k->scale(r->model->g_dev, r->model->n_floats, inv);
		return r->model->g_dev;
	}
	if (!r->offload)
		return trn_dp_finish(&r->dp, inv, err) == 0 ? r->dp.gs : NULL;
	if (trn_dp_wait(&r->dp, err) != 0)
		return NULL;
	trn_opt_offload_grads_wait(&r->off);
	trn_dp_unscale(&r->dp, r->off.grads, inv);
	return r->off.grads;
}

/* One step: what it computed and what became of it. */
struct step {
	long step;                     /* the step's number, from 1 */
	double lr, scale;              /* its learning rate and loss scale */
	double loss, gnorm;
	int apply;                     /* the update ran (fp16: not skipped) */
	int stop;                      /* the ranks agreed to stop after it */
	double t0, t_bwd;              /* its start, and when its last backward returned */
};

/* The squared norm of the gradients the model holds now, this step's
 * micro-batches so far: on the device where a GPU model keeps them
 * (model.h: resident, or summed there between micro-batches), else in g. */
static double held_grads_sumsq(const struct run *r)
{
	const struct trn_model *m = r->model;
	if (m->device && m->param_offload == TRN_OFFLOAD_NONE)
		return trn_optim_kernels_of(m)->sumsq(m->g_dev, m->n_floats);
	return kern_sumsq_cpu(m->g, m->n_floats);
}

/* The step's forward and backward over its micro-batches, gradients summed
 * in the model; the mean loss. */
static double forward_backward(struct run *r, double scale)
{
	struct trn_model *m = r->model;
	long accum = r->spec->batch.accum;
	double loss = 0;
	trn_model_zero_grad(m);
	for (long a = 0; a < accum; a++) {
		trn_loader_micro(&r->loader, a, &r->batch);
		if (r->batch.x)           /* the input as the model stores it */
			trn_model_round(m, r->batch.x, (long)r->batch.n * r->ds.dim);
		float bscale = (float)(scale / (double)accum);
		trn_model_expect_backward(m, bscale);
		loss += trn_model_forward(m, &r->batch, NULL);
		/* the next micro-batch's copy to the device beside this backward */
		if (r->ahead.cap && trn_loader_next_micro(&r->loader, a, accum, &r->ahead)) {
			if (r->ahead.x)
				trn_model_round(m, r->ahead.x, (long)r->ahead.n * r->ds.dim);
			trn_model_stage_batch(m, &r->ahead);
		}
		if (a == accum - 1)
			trn_dp_arm(&r->dp);
		trn_model_more_micro(m, a < accum - 1);
		trn_model_backward(m, &r->batch, bscale);
		/* the buffer holds bscale x the first micro-batch's gradient alone */
		if (a == 0 && r->gns_now && r->gns.source == TRN_GNS_MICRO) {
			double t0 = trn_now();
			r->gns_small = held_grads_sumsq(r) / ((double)bscale * (double)bscale);
			r->gns.spent_s += trn_now() - t0;
		}
	}
	return loss / (double)accum;
}

/* The step's gradients (*gs; NULL when the update followed backward), their
 * squared norm and whether any is inf or NaN. */
static int finish_grads(struct run *r, struct step *st, float **gs, double *gsq, int *nonfinite,
                        struct trn_err *err)
{
	long ns = r->dp.hi - r->dp.lo;
	*gs = NULL;
	*nonfinite = 0;
	if (r->streamed) {             /* no loss scale: nothing to unscale or check */
		if (trn_optim_end(&r->opt, err) != 0)
			return -1;
		if (r->stream_lost)
			return trn_err_set(err, "step %ld: the gradient of %s was not in its window",
			                   st->step, r->model->params[r->stream_lost - 1].name);
		*gsq = r->stream_gsq;
		return 0;
	}
	if (!(*gs = step_grads(r, st->scale, err)))
		return -1;
	double t_grads = trn_now();
	r->iv.phase[0] += t_grads - st->t_bwd;
	*gsq = r->opt.k->sumsq(*gs, ns);
	*nonfinite = r->ls.mode != TRN_LOSS_SCALE_NONE && r->opt.k->nonfinite(*gs, ns);
	r->iv.phase[1] += trn_now() - t_grads;
	return 0;
}

/* With several ranks, what they agree on: the mean loss, whether any was
 * asked to stop (a signal arriving later on one rank waits for the next
 * step's agreement, or the ranks would part ways) or saw an inf or NaN
 * gradient, and with ZeRO the squared norm of the shards. */
static int agree(struct run *r, struct step *st, int *nonfinite, double *gsq,
                 struct trn_err *err)
{
	st->stop = stop_signal != 0;
	if (r->comm->size == 1)
		return 0;
	double shared[5] = { st->loss, st->stop, *nonfinite, r->dp.zero ? *gsq : 0, r->dp.sumsq };
	if (trn_comm_allreduce_f64(r->comm, shared, 5, err) != 0)
		return -1;
	r->dp.sumsq = shared[4];       /* the ranks' own squared norms, summed */
	st->loss = shared[0] / (double)r->comm->size;
	st->stop = shared[1] > 0;
	*nonfinite = shared[2] > 0;
	if (r->dp.zero)
		*gsq = shared[3];
	return 0;
}

/* The update from the gradients gs (clipped first), and the parameters
 * from the master weights. */
static int update(struct run *r, float *gs, const struct step *st, struct trn_err *err)
{
	double clip = r->spec->optimizer.clip_grad_norm;
	if (clip > 0 && st->gnorm > clip)
		r->opt.k->scale(gs, r->dp.hi - r->dp.lo, (float)(clip / (st->gnorm + 1e-6)));
	double t_update = trn_now();
	if (trn_optim_step(&r->opt, r->master, gs, st->lr, err) != 0)
		return -1;
	double t_params = trn_now();
	if (publish_params(r, err) != 0)
		return -1;
	r->iv.phase[2] += t_params - t_update;
	r->iv.phase[3] += trn_now() - t_params;
	return 0;
}

/* The gradient noise scale's measurement of the step whose (unscaled,
 * averaged) gradient has the squared norm gsq: the big batch. */
static void measure_gns(struct run *r, const struct step *st, double gsq)
{
	double small = r->gns_small;
	if (r->gns.source == TRN_GNS_RANK)  /* each rank's scale x its gradient, summed */
		small = r->dp.sumsq / ((double)r->comm->size * st->scale * st->scale);
	trn_gns_add(&r->gns, small, gsq, &r->gns_last);
	r->gns_have = 1;
}

/* Step r->state.step + 1: TRN_EXIT_OK with st filled (st->step 0: the
 * watchdog rolled it back), else an exit code with err. */
static int train_step(struct run *r, struct step *st, struct trn_err *err)
{
	*st = (struct step){ .step = r->state.step + 1, .t0 = trn_now() };
	st->lr = trn_schedule_lr(&r->sched, r->state.step);
	st->scale = r->ls.scale;
	r->gns_now = trn_gns_due(&r->gns, st->step);
	r->dp.sumsq_on = r->gns_now && r->gns.source == TRN_GNS_RANK;
	r->dp.sumsq = 0;
	if (r->streamed) {             /* the update runs in backward */
		trn_optim_begin(&r->opt);
		r->stream_lr = st->lr;
		r->stream_gsq = 0;
	}
	st->loss = forward_backward(r, st->scale);
	st->t_bwd = trn_now();
	float *gs = NULL;
	double gsq = 0;
	int nonfinite = 0;
	if (finish_grads(r, st, &gs, &gsq, &nonfinite, err) != 0 ||
	    agree(r, st, &nonfinite, &gsq, err) != 0)
		return TRN_EXIT_FAILED;
	const struct trn_spec_watchdog *w = &r->spec->watchdog;
	if (w->max_rollbacks > 0 || w->spike_factor > 0) {
		char why[256];
		switch (trn_watchdog_check(&r->wd, st->step, st->loss, why, sizeof why)) {
		case TRN_WATCH_OK:
			break;
		case TRN_WATCH_ROLLBACK:
			st->step = 0;
			return rollback(r, r->state.step + 1, why, err) == 0 ? TRN_EXIT_OK
			                                                    : TRN_EXIT_FAILED;
		case TRN_WATCH_FAIL:
			trn_err_set(err, "%s", why);
			return TRN_EXIT_DIVERGED;
		}
	}
	if (!isfinite(st->loss))
		return trn_err_set(err, "step %ld: the loss is %f (lr %.4g): training diverged",
		                   st->step, st->loss, st->lr), TRN_EXIT_DIVERGED;
	st->gnorm = sqrt(gsq);
	/* fp16: an inf or NaN gradient skips the step and lowers the scale */
	st->apply = trn_loss_scale_update(&r->ls, nonfinite);
	if (st->apply && r->streamed)
		trn_model_weights_streamed(r->model);  /* each tensor updated as it came */
	else if (st->apply && update(r, gs, st, err) != 0)
		return TRN_EXIT_FAILED;
	if (r->gns_now && st->apply)
		measure_gns(r, st, gsq);
	trn_loader_advance(&r->loader);
	r->state.step = st->step;
	r->last_loss = st->loss;
	return TRN_EXIT_OK;
}

/* Every log_every steps: the interval's rates, and a progress line. */
static void report_interval(struct run *r, const struct step *st)
{
	const struct trn_model *m = r->model;
	static const char *const phase_names[] = { "offload/grads_s", "offload/norm_s",
	                                           "offload/update_s", "offload/params_s" };
	long step = st->step, n = r->iv.steps;
	double rate = (double)(n * r->spec->batch.global) / r->iv.t;
	trn_report_metric(&r->rep, step, "train/samples_per_s", rate);
	/* seconds a step spent after its last backward returned: the
	 * gradients' wait, the norm, the update and the parameters' way back
	 * (on the host with offload.optimizer cpu; a resident GPU run's update
	 * is only enqueued there), and with offload.optimizer cpu those parts */
	trn_report_metric(&r->rep, step, "train/after_backward_s", r->iv.after / (double)n);
	for (int i = 0; i < 4 && r->offload; i++)
		trn_report_metric(&r->rep, step, phase_names[i], r->iv.phase[i] / (double)n);
	if (m->tokens_per_sample > 1)
		trn_report_metric(&r->rep, step, "train/tokens_per_s",
		                  rate * (double)m->tokens_per_sample);
	trn_report_metric(&r->rep, step, "train/epoch", (double)step / (double)r->steps_per_epoch);
	if (m->peak_flops > 0)         /* model FLOPs over the device's peak */
		trn_report_metric(&r->rep, step, "train/mfu", rate * m->flops_per_sample / m->peak_flops);
	if (r->gns_have) {             /* the latest, smoothed (metrics.gns_ema) */
		trn_report_metric(&r->rep, step, "train/gns_g2", r->gns_last.g2_smooth);
		trn_report_metric(&r->rep, step, "train/gns_trace", r->gns_last.trace_smooth);
		if (r->gns_last.has_gns)
			trn_report_metric(&r->rep, step, "train/gns", r->gns_last.gns);
		r->gns_have = 0;
	}
	if (!r->opts->quiet && r->lead)
		progress(r, step, st->loss, st->lr, rate);
	trn_report_flush(&r->rep);
	memset(&r->iv, 0, sizeof r->iv);
}

/* The step's metrics, and its time in the interval's. */
static void report_step(struct run *r, const struct step *st)
{
	double t1 = trn_now(), dt = t1 - st->t0;
	long step = st->step;
	r->iv.t += dt;
	r->iv.after += t1 - st->t_bwd;
	r->iv.steps++;
	r->train_t += dt;
	trn_report_metric(&r->rep, step, "train/loss", st->loss);
	trn_report_metric(&r->rep, step, "train/lr", st->lr);
	if (st->apply)
		trn_report_metric(&r->rep, step, "train/grad_norm", st->gnorm);
	if (r->ls.mode != TRN_LOSS_SCALE_NONE) {
		trn_report_metric(&r->rep, step, "train/loss_scale", st->scale);
		trn_report_metric(&r->rep, step, "train/skipped_steps", (double)r->ls.skipped);
	}
	if (step % r->spec->log_every == 0 || step == r->total_steps)
		report_interval(r, st);
}

/* Whether the evaluation of this step reached spec.stop, on every rank (the
 * lead evaluates and tells the others): 1, 0, or -1 with err. */
static int target_reached(struct run *r, struct trn_err *err)
{
	const struct trn_spec_stop *stop = &r->spec->stop;
	double v = stop->metric == TRN_STOP_VAL_ACCURACY ? r->val_acc : r->val_loss;
	double hit = r->lead && r->ds.val.n > 0 && trn_stop_reached(stop, v);
	if (r->comm->size > 1 && trn_comm_allreduce_f64(r->comm, &hit, 1, err) != 0)
		return -1;
	return hit > 0;
}

/* Between steps: evaluation (and its stop target: r->stopped_at), checkpoints,
 * and a stop that was asked for (TRN_EXIT_INTERRUPTED). */
static int between_steps(struct run *r, const struct step *st, struct trn_err *err)
{
	const struct trn_spec *s = r->spec;
	long step = st->step;
	if (s->eval_every && step % s->eval_every == 0) {
		if (r->lead)
			evaluate(r, step);
		int hit = s->stop.metric != TRN_STOP_NONE ? target_reached(r, err) : 0;
		if (hit < 0)
			return TRN_EXIT_FAILED;
		if (hit) {
			r->stopped_at = step;
			return TRN_EXIT_OK;    /* the run ends as at its last step */
		}
	}
	int saved = 0;
	if (s->checkpoint_every && step % s->checkpoint_every == 0) {
		if (save(r, err) != 0)
			return TRN_EXIT_FAILED;
		saved = 1;
	}
	if (!st->stop)
		return TRN_EXIT_OK;
	if (!saved && save(r, err) != 0)
		return TRN_EXIT_FAILED;
	trn_report_flush(&r->rep);
	trn_err_set(err, "stopped by signal %d at step %ld; checkpoint written, rerun to resume",
	            stop_signal ? (int)stop_signal : SIGTERM, step);
	return TRN_EXIT_INTERRUPTED;
}

/* The data-parallel line of the run's summary. */
static void print_parallel(const struct run *r)
{
	double per = 1.0 / (double)(r->dp.steps ? r->dp.steps : 1);
	const char *how = r->dp.zero ? "reduce-scattered" : "allreduced";
	if (r->comm->device) {
		/* the host does not wait for the device's collectives: what
		 * shows the overlap is how many started during backward */
		printf("parallel: %d ranks over %s, %.1f MiB %s per step on the devices, "
		       "%.1f of %d buckets a step started during backward\n", r->comm->size,
		       r->comm->ops->name, mib(r->dp.bytes * per), how, (double)r->dp.early * per,
		       r->dp.n_buckets);
		return;
	}
	printf("parallel: %d ranks, %.1f MiB %s per step, %.3f s per step in communication of "
	       "which %.3f s waited (%.0f%% hidden)", r->comm->size, mib(r->dp.bytes * per), how,
	       r->dp.comm_s * per, r->dp.wait_s * per, 100.0 * trn_dp_overlap(&r->dp));
	if (r->dp.zero)
		printf("; parameter all-gather %.3f s per step", r->dp.gather_s * per);
	printf("\n");
}

/* The time the gradient noise scale's norms took (the big batch's is the
 * step's own), and past 2% of training the gns_every that would keep under. */
static void print_gns_cost(const struct run *r)
{
	double spent = r->gns.spent_s + r->dp.sumsq_s, share = spent / r->train_t;
	printf("gns: %ld measurements, %.3f ms each in the extra norm, %.2f%% of the training "
	       "time", r->gns.n, 1e3 * spent / (double)r->gns.n, 100.0 * share);
	if (share > 0.02)
		printf("; metrics.gns_every %ld would keep it under 2%%",
		       (long)ceil(share / 0.02 * (double)r->gns.every));
	printf("\n");
}

/* The run's summary: throughput, communication, memory against the plan. */
static void print_summary(const struct run *r, long done)
{
	const struct trn_model *m = r->model;
	double sps = (double)(done * r->spec->batch.global) / r->train_t;
	printf("done: %ld steps in %.1fs of training, %.0f samples/s, %.1f GFLOP/s in GEMMs", done,
	       r->train_t, sps, sps * m->flops_per_sample * 1e-9);
	if (m->tokens_per_sample > 1)
		printf(", %.0f tokens/s", sps * (double)m->tokens_per_sample);
	if (m->peak_flops > 0)
		printf(", MFU %.1f%%", 100.0 * sps * m->flops_per_sample / m->peak_flops);
	printf("\n");
	if (r->comm->size > 1)
		print_parallel(r);
	if (r->gns.n > 0)
		print_gns_cost(r);
	print_peak(r);
}

static int train_loop(struct run *r, struct trn_err *err)
{
	long start_step = r->state.step;
	while (r->state.step < r->total_steps) {
		struct step st;
		int code = train_step(r, &st, err);
		if (code != TRN_EXIT_OK)
			return code;
		if (!st.step)              /* rolled back */
			continue;
		report_step(r, &st);
		if (st.step == r->total_steps)
			break;
		if ((code = between_steps(r, &st, err)) != TRN_EXIT_OK)
			return code;
		if (r->stopped_at)
			break;
	}
	if (r->lead && !r->stopped_at) {
		evaluate(r, r->state.step);
		const struct trn_spec_stop *stop = &r->spec->stop;
		if (r->ds.val.n > 0 && trn_stop_reached(stop, stop->metric == TRN_STOP_VAL_ACCURACY
		                                              ? r->val_acc : r->val_loss))
			r->stopped_at = r->state.step;
	}
	if (r->lead && r->stopped_at && r->final) {
		json_object_set_new(r->final, "stop/step", json_integer(r->stopped_at));
		if (!r->opts->quiet)
			printf("stop: %s reached %g at step %ld\n",
			       trn_stop_metric_name(r->spec->stop.metric), r->spec->stop.value,
			       r->stopped_at);
	}
	if (r->spec->checkpoint_at_end && save(r, err) != 0)
		return TRN_EXIT_FAILED;
	trn_report_flush(&r->rep);
	long done = r->state.step - start_step;
	if (done > 0 && !r->opts->quiet && r->lead)
		print_summary(r, done);
	return TRN_EXIT_OK;
}

int trn_train(const struct trn_spec *spec, const struct trn_options *opts)
{
	struct run r = { .spec = spec, .opts = opts, .t_start = trn_now(), .last_loss = NAN };
	struct trn_err err = { 0 };
	int code = setup(&r, &err);
	if (code == TRN_EXIT_OK) {
		if (r.lead)
			print_plan(&r);
		code = train_loop(&r, &err);
	}
	int ranks = r.comm ? r.comm->size : 1;
	static const char *const status[] = {
		[TRN_EXIT_OK] = "completed", [TRN_EXIT_FAILED] = "failed",
		[TRN_EXIT_USAGE] = "failed", [TRN_EXIT_INTERRUPTED] = "interrupted",
		[TRN_EXIT_DIVERGED] = "failed",
	};
	if (err.set && ranks > 1 && (r.lead || code != TRN_EXIT_INTERRUPTED))
		fprintf(stderr, "larch-train: rank %d of %d: %s\n", r.comm->rank, ranks, err.text);
	else if (err.set && ranks == 1)
		fprintf(stderr, "larch-train: %s\n", err.text);
	struct trn_err rerr = { 0 };
	char reached[256] = "";   /* larchd keeps a reason of at most 255 bytes */
	if (code == TRN_EXIT_OK && r.stopped_at)
		snprintf(reached, sizeof reached, "stopped at the target: %s %s %g at step %ld%s%s",
		         trn_stop_metric_name(spec->stop.metric), spec->stop.min ? "<=" : ">=",
		         spec->stop.value, r.stopped_at, r.elastic_why[0] ? "; " : "", r.elastic_why);
	else if (code == TRN_EXIT_OK)
		snprintf(reached, sizeof reached, "%s", r.elastic_why);
	/* a job dir that could not be made has nowhere to put result.json (larchd
	 * still gets the result when reporting) */
	struct stat st;
	struct trn_result res = { .status = status[code], .steps = r.state.step, .final = r.final,
	                          .wall_s = trn_now() - r.t_start, .exit_code = code,
	                          .reason = err.set ? err.text : reached[0] ? reached : NULL };
	if ((!r.comm || r.lead) &&
	    trn_report_finish(&r.rep, stat(opts->job_dir, &st) == 0 ? opts->job_dir : NULL, &res,
	                      &rerr) != 0)
		fprintf(stderr, "larch-train: %s\n", rerr.text);
	/* a rank that failed alone would leave the others waiting in a collective:
	 * end them all (an interrupted run stopped on every rank together) */
	if (ranks > 1 && code != TRN_EXIT_OK && code != TRN_EXIT_INTERRUPTED) {
		fflush(NULL);
		trn_comm_abort(r.comm, code);
	}

	json_decref(r.final);
	trn_report_close(&r.rep);
	trn_optim_release(&r.opt);
	trn_opt_offload_release(&r.off);
	free(r.master_owned);
	if (r.master_dev)
		r.opt.k->release(r.master_dev);
	trn_watchdog_release(&r.wd);
	trn_batch_release(&r.batch);
	trn_batch_release(&r.ahead);
	trn_model_free(r.model);
	trn_loader_release(&r.loader);
	trn_dataset_release(&r.ds);
	trn_dp_release(&r.dp);
	trn_comm_close(r.comm);
	return code;
}
