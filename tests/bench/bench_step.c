/* tests/bench/bench_step.c - the speed of one larch-train step beside the
 * time of its GEMMs alone.
 *
 *   bench_step SPEC [--rounds R] [--seconds S] [--warmup W] [--threads N]
 *              [--clock wall|cpu] [--activations none|recompute|cpu] [--json]
 *   bench_step --blas     (prints the BLAS line and exits)
 *
 * Builds the model of SPEC with a synthetic micro-batch of the right shape
 * (784 features and 10 classes for the mlp, bytes for gpt: no data files),
 * warms up, records the GEMMs of one step (kern_sgemm_trace_*), then times,
 * in R rounds, a block of full training steps (zero grad, forward and
 * backward per micro-batch, grad norm or clipping, optimizer step: train.c's
 * loop) and a block of GEMM replays, A/B/A/B. Prints ms/step, samples/s
 * (tokens/s for gpt), GFLOP/s and the ratio bound/step per round and their
 * medians, and the BLAS line. --json adds one line "json: {...}" for
 * tests/bench/bench_speed.py. --clock cpu times with the process's CPU time
 * instead of the wall clock: with --threads 1 that is robust to other
 * processes on a busy machine (with more threads it counts OpenMP's
 * spin-waiting too). --activations overrides the spec's
 * offload.activations; the activation memory the model holds is printed
 * (and the host store's with cpu). Not a test: it never fails on a figure.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/blas.h"
#include "kernels/parallel.h"
#include "trainer/model.h"
#include "trainer/optim.h"
#include "trainer/rng.h"
#include "trainer/spec/spec.h"

#define MAX_ROUNDS 64
/* Synthetic samples the steps cycle through: enough that a model does not
 * memorise them during a run (random labels), which would shrink the
 * gradients towards denormals and away from real training's. */
#define POOL_SAMPLES 8192
#define POOL_BATCHES 64

struct opts {
	const char *spec;
	int rounds;
	double seconds;                /* per timed block */
	int warmup;                    /* steps */
	int threads;
	int json;
	int activations;               /* enum trn_offload, or -1: the spec's */
};

struct bench {
	struct trn_spec spec;
	struct trn_dataset ds;         /* only the sizes: no samples */
	struct trn_model *model;
	struct trn_optim opt;
	struct trn_batch *pool;        /* micro-batches, used in turn */
	int n_pool, next;
	double loss, gnorm;
};

static clockid_t clock_id = CLOCK_MONOTONIC;

static double now(void)
{
	struct timespec ts;
	clock_gettime(clock_id, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(const double *x, int n)
{
	double s[MAX_ROUNDS];
	memcpy(s, x, sizeof(double) * (size_t)n);
	qsort(s, (size_t)n, sizeof s[0], cmp_double);
	return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* A JSON number, or null for NaN and infinities (a diverged run), which
 * JSON cannot hold. Returns a new reference. */
static json_t *json_number(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

static double minimum(const double *x, int n)
{
	double m = x[0];
	for (int i = 1; i < n; i++)
		m = x[i] < m ? x[i] : m;
	return m;
}

/* One training step, as trainer/train.c's loop runs it. */
static void step(struct bench *b)
{
	struct trn_model *m = b->model;
	const struct trn_spec *s = &b->spec;
	long accum = s->batch.accum;
	trn_model_zero_grad(m);
	double loss = 0;
	for (long a = 0; a < accum; a++) {
		const struct trn_batch *bt = &b->pool[b->next];
		b->next = (b->next + 1) % b->n_pool;
		loss += trn_model_forward(m, bt, NULL);
		trn_model_more_micro(m, a < accum - 1);
		trn_model_backward(m, bt, 1.0f / (float)accum);
	}
	b->loss = loss / (double)accum;
	b->gnorm = s->optimizer.clip_grad_norm > 0
		? trn_clip_grad_norm(m->g, m->n_floats, s->optimizer.clip_grad_norm)
		: trn_grad_norm(m->g, m->n_floats);
	trn_optim_step(&b->opt, m->w, m->g, s->optimizer.lr, NULL);
}

/* Random inputs of the data's shape: standard normal features and uniform
 * labels for the mlp, uniform bytes for gpt. */
static void fill_batch(struct bench *b, struct trn_batch *bt, struct trn_rng *r)
{
	struct trn_rng rng = *r;
	bt->n = bt->cap;
	if (b->ds.task == TRN_TASK_CLASSIFY) {
		for (long i = 0; i < (long)bt->n * b->ds.dim; i++)
			bt->x[i] = (float)trn_rng_normal(&rng);
		for (int i = 0; i < bt->n; i++)
			bt->targets[i] = (int32_t)trn_rng_below(&rng, (uint64_t)b->ds.n_classes);
	} else {
		for (long i = 0; i < (long)bt->n * bt->seq; i++) {
			bt->tokens[i] = (int32_t)trn_rng_below(&rng, (uint64_t)b->ds.vocab);
			bt->targets[i] = (int32_t)trn_rng_below(&rng, (uint64_t)b->ds.vocab);
		}
	}
	*r = rng;
}


/* LARCH_BLAS and OPENBLAS_CORETYPE, as larch-train's options take them */
static const struct kern_blas_choice *blas_choice(void)
{
	static struct kern_blas_choice c;
	c.library = getenv("LARCH_BLAS");
	c.coretype = getenv("OPENBLAS_CORETYPE");
	return &c;
}

static int setup(struct bench *b, const struct opts *o)
{
	struct trn_err err = { 0 };
	char blas_err[1024];
	if (trn_spec_from_file(&b->spec, o->spec, &err) != 0) {
		fprintf(stderr, "bench_step: %s\n", err.text);
		return -1;
	}
	if (kern_blas_init(blas_choice(), blas_err, sizeof blas_err) != 0) {
		fprintf(stderr, "bench_step: %s\n", blas_err);
		return -1;
	}
	if (o->threads > 0)
		kern_set_threads(o->threads);
	if (o->activations >= 0)
		b->spec.offload.activations = (enum trn_offload)o->activations;
	const struct trn_spec *s = &b->spec;
	int is_tokens = s->model.type == TRN_MODEL_GPT;
	if (!is_tokens) {
		b->ds.task = TRN_TASK_CLASSIFY;
		b->ds.dim = 784;
		b->ds.n_classes = 10;
	} else {
		b->ds.task = TRN_TASK_TOKENS;
		b->ds.seq = s->model.seq;
		b->ds.vocab = s->model.vocab ? s->model.vocab : 256;
		if (b->ds.vocab > 256)
			b->ds.vocab = 256;
	}
	int micro = (int)s->batch.micro;
	if (!(b->model = trn_model_new(s, &b->ds, micro, &err)) ||
	    trn_optim_init(&b->opt, &s->optimizer, b->model->params, b->model->n_params,
	                   b->model->n_floats, &err) != 0) {
		fprintf(stderr, "bench_step: %s\n", err.text);
		return -1;
	}
	b->n_pool = (POOL_SAMPLES + micro - 1) / micro;
	if (b->n_pool > POOL_BATCHES)
		b->n_pool = POOL_BATCHES;
	if (!(b->pool = calloc((size_t)b->n_pool, sizeof *b->pool))) {
		fprintf(stderr, "bench_step: batch: out of memory\n");
		return -1;
	}
	struct trn_rng rng;
	trn_rng_seed(&rng, 1234, 7);
	for (int i = 0; i < b->n_pool; i++) {
		if (trn_batch_alloc(&b->pool[i], &b->ds, micro) != 0) {
			fprintf(stderr, "bench_step: batch: out of memory\n");
			return -1;
		}
		fill_batch(b, &b->pool[i], &rng);
	}
	trn_model_init_weights(b->model, s->seed);
	return 0;
}

static void release(struct bench *b)
{
	for (int i = 0; b->pool && i < b->n_pool; i++)
		trn_batch_release(&b->pool[i]);
	free(b->pool);
	trn_optim_release(&b->opt);
	trn_model_free(b->model);
	trn_spec_release(&b->spec);
}

static void usage(FILE *out)
{
	fputs("usage: bench_step SPEC [--rounds R] [--seconds S] [--warmup W] [--threads N] "
	      "[--clock wall|cpu] [--activations none|recompute|cpu] [--json]\n"
	      "       bench_step --blas\n", out);
}

static int parse_args(struct opts *o, int argc, char **argv)
{
	*o = (struct opts){ .rounds = 7, .seconds = 0.5, .warmup = 5, .activations = -1 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--json") == 0) {
			o->json = 1;
		} else if (strcmp(a, "--blas") == 0) {
			char err[1024];
			if (kern_blas_init(blas_choice(), err, sizeof err) != 0) {
				fprintf(stderr, "bench_step: %s\n", err);
				exit(1);
			}
			printf("blas: %s\n", kern_blas_describe());
			exit(0);
		} else if (strcmp(a, "--help") == 0) {
			usage(stdout);
			exit(0);
		} else if (v && strcmp(a, "--rounds") == 0) {
			o->rounds = atoi(v), i++;
		} else if (v && strcmp(a, "--seconds") == 0) {
			o->seconds = atof(v), i++;
		} else if (v && strcmp(a, "--warmup") == 0) {
			o->warmup = atoi(v), i++;
		} else if (v && strcmp(a, "--clock") == 0) {
			if (strcmp(v, "cpu") != 0 && strcmp(v, "wall") != 0) {
				fprintf(stderr, "bench_step: --clock: cpu or wall (got \"%s\")\n", v);
				return -1;
			}
			clock_id = strcmp(v, "cpu") == 0 ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
			i++;
		} else if (v && strcmp(a, "--activations") == 0) {
			static const char *const names[] = { [TRN_OFFLOAD_NONE] = "none",
			                                      [TRN_OFFLOAD_CPU] = "cpu",
			                                      [TRN_OFFLOAD_RECOMPUTE] = "recompute" };
			for (int k = 0; k < 3; k++)
				if (strcmp(v, names[k]) == 0)
					o->activations = k;
			if (o->activations < 0) {
				fprintf(stderr, "bench_step: --activations: none, recompute or cpu "
				        "(got \"%s\")\n", v);
				return -1;
			}
			i++;
		} else if (v && strcmp(a, "--threads") == 0) {
			o->threads = atoi(v), i++;
		} else if (a[0] != '-' && !o->spec) {
			o->spec = a;
		} else {
			fprintf(stderr, "bench_step: unexpected argument \"%s\"\n", a);
			return -1;
		}
	}
	if (!o->spec || o->rounds < 1 || o->rounds > MAX_ROUNDS || o->seconds <= 0 ||
	    o->warmup < 0) {
		fprintf(stderr, "bench_step: need a spec, --rounds in [1, %d], --seconds > 0, "
		        "--warmup >= 0\n", MAX_ROUNDS);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	if (parse_args(&o, argc, argv) != 0) {
		usage(stderr);
		return 2;
	}
	struct bench b = { 0 };
	if (setup(&b, &o) != 0) {
		release(&b);
		return 1;
	}
	const struct trn_spec *s = &b.spec;
	const struct trn_model *m = b.model;
	int is_gpt = s->model.type == TRN_MODEL_GPT;

	double t0 = now();
	for (int i = 0; i < o.warmup; i++)
		step(&b);
	double t_step = o.warmup ? (now() - t0) / o.warmup : 0;

	double flops = 0;
	kern_sgemm_trace_start();
	step(&b);
	long calls = kern_sgemm_trace_stop(&flops);
	if (calls < 0) {
		fprintf(stderr, "bench_step: out of memory recording the GEMM trace\n");
		release(&b);
		return 1;
	}
	if (!o.warmup) {
		t0 = now();
		step(&b);
		t_step = now() - t0;
	}
	int n = (int)(o.seconds / (t_step > 0 ? t_step : 1e-3));
	if (n < 2)
		n = 2;

	double ms_step[MAX_ROUNDS], ms_gemm[MAX_ROUNDS], ratio[MAX_ROUNDS];
	for (int r = 0; r < o.rounds; r++) {
		t0 = now();
		for (int i = 0; i < n; i++)
			step(&b);
		ms_step[r] = (now() - t0) * 1e3 / n;
		t0 = now();
		for (int i = 0; i < n; i++)
			kern_sgemm_trace_replay();
		ms_gemm[r] = (now() - t0) * 1e3 / n;
		ratio[r] = ms_gemm[r] / ms_step[r];
	}

	double per_step = (double)s->batch.global;          /* samples */
	double tokens = per_step * (double)m->tokens_per_sample;
	const char *unit = is_gpt ? "tokens/s" : "samples/s";
	double units = is_gpt ? tokens : per_step;
	double med_step = median(ms_step, o.rounds), med_gemm = median(ms_gemm, o.rounds);
	double med_ratio = median(ratio, o.rounds);

	printf("bench_step: %s (%s, %ld parameters), batch %ld = micro %ld x accum %ld, %s\n",
	       s->name, is_gpt ? "gpt" : "mlp", m->n_floats, s->batch.global, s->batch.micro,
	       s->batch.accum, trn_opt_name(s->optimizer.type));
	printf("blas: %s\n", kern_blas_describe());
	printf("threads: %d, clock: %s\n", kern_threads(),
	       clock_id == CLOCK_MONOTONIC ? "wall" : "process CPU time");
	printf("gemm trace: %ld calls, %.3f GFLOP per step (model's count %.3f)\n", calls,
	       flops * 1e-9, m->flops_per_sample * per_step * 1e-9);
	static const char *const act_names[] = { [TRN_OFFLOAD_NONE] = "none",
	                                         [TRN_OFFLOAD_CPU] = "cpu",
	                                         [TRN_OFFLOAD_RECOMPUTE] = "recompute" };
	printf("activations: %s, %.2f MiB (none: %.2f MiB), host store %.2f MiB\n",
	       act_names[m->act_offload], m->act_bytes / 1048576.0, m->act_bytes_none / 1048576.0,
	       m->act_host_bytes / 1048576.0);
	printf("rounds: %d x %d steps, then %d replays; last loss %.4f, grad norm %.4g\n",
	       o.rounds, n, n, b.loss, b.gnorm);
	printf("%-6s %10s %10s %12s %9s %8s\n", "round", "step ms", "gemm ms", unit, "GFLOP/s",
	       "ratio");
	for (int r = 0; r < o.rounds; r++)
		printf("%-6d %10.3f %10.3f %12.0f %9.1f %8.3f\n", r, ms_step[r], ms_gemm[r],
		       units / ms_step[r] * 1e3, flops / ms_step[r] * 1e-6, ratio[r]);
	printf("%-6s %10.3f %10.3f %12.0f %9.1f %8.3f\n", "median", med_step, med_gemm,
	       units / med_step * 1e3, flops / med_step * 1e-6, med_ratio);
	printf("step: %.3f ms/step, %.0f %s, %.1f GFLOP/s; gemm bound: %.3f ms, %.0f %s, "
	       "%.1f GFLOP/s; step/bound %.3f\n", med_step, units / med_step * 1e3, unit,
	       flops / med_step * 1e-6, med_gemm, units / med_gemm * 1e3, unit,
	       flops / med_gemm * 1e-6, med_ratio);

	if (o.json) {
		json_t *j = json_pack("{s:s, s:s, s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, "
		                      "s:f, s:o, s:o, s:I, s:I, s:s, s:I, s:I, s:I}",
		                      "name", s->name, "model", is_gpt ? "gpt" : "mlp",
		                      "blas", kern_blas_describe(), "threads", kern_threads(),
		                      "rounds", o.rounds, "step_ms", med_step, "gemm_ms", med_gemm,
		                      "step_ms_min", minimum(ms_step, o.rounds),
		                      "gemm_ms_min", minimum(ms_gemm, o.rounds),
		                      "ratio", med_ratio, "samples_per_step", per_step,
		                      "tokens_per_step", tokens, "gflop_per_step", flops * 1e-9,
		                      "loss", json_number(b.loss), "grad_norm", json_number(b.gnorm),
		                      "gemm_calls", (json_int_t)calls,
		                      "steps_per_round", (json_int_t)n,
		                      "activations", act_names[m->act_offload],
		                      "act_bytes", (json_int_t)m->act_bytes,
		                      "act_bytes_none", (json_int_t)m->act_bytes_none,
		                      "act_host_bytes", (json_int_t)m->act_host_bytes);
		char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
		printf("json: %s\n", text ? text : "{}");
		free(text);
		json_decref(j);
	}
	kern_sgemm_trace_clear();
	release(&b);
	return 0;
}
