/* tests/bench/bench_optim_cpu.c - the optimizer updates (kernels/optimizer.h)
 * against the memory bandwidth they stream at.
 *
 *   bench_optim_cpu [--n N] [--rounds R] [--reps K] [--threads T] [--raw]
 *
 * Allocates w, m, v, g (N floats each, default 64 Mi: 1 GiB together) and a
 * scratch buffer, then runs R rounds; each round times K calls of every case
 * in turn (the order reversed every other round), and prints per case the
 * median over rounds of elements/s, the GB/s that makes (the bytes the
 * update must move per element: AdamW reads w, m, v, g and writes w, m, v:
 * 28 B) and its ratio to the bound:
 *
 *   adamw, sgd (momentum), lars, lamb (the trainer's three passes: ||w||^2,
 *   moments with ||u||^2, apply), sumsq, scale: kern_*_cpu on the ISA the
 *   library chose, all threads; adamw also on each ISA this CPU has
 *   (kern_optim_set_isa) and on one thread.
 *   adamw.int8: AdamW on int8 state (kern_adamw_update_q8_cpu, quant8.h: the
 *   dynamic code map, a scale per 2048 values), all threads and one: 16 B
 *   an element (w and g as fp32's, m and v codes read and written).
 *   stream: the bound. A loop with AdamW's traffic and no arithmetic to
 *   speak of (w = w*1 + g*0, the same for m and v, 1 and 0 unknown to the
 *   compiler) over the same buffers, blocks and threads: the GB/s this
 *   machine streams 4 reads and 3 writes at. AdamW's elements/s at that
 *   bandwidth is stream's elements/s. Also on one thread (the bound of
 *   adamw.1t).
 *   copy: memcpy of g to the scratch buffer, block by block on all threads,
 *   counted as 8 B an element, for reference (the stores' read-for-
 *   ownership moves 4 more that it does not count).
 *
 * --raw prints "raw CASE ELEMENTS_PER_S BYTES_PER_ELEMENT" lines instead of
 * the table (tests/bench/bench_optim_cpu.sh runs one round at a time and
 * pairs it with numpy's). Not a test: it never fails on a figure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/optimizer.h"
#include "kernels/optimizer_simd.h"
#include "kernels/parallel.h"
#include "kernels/quant8.h"

#define MAX_ROUNDS 64
#define MAX_CASES 20
#define BLOCK 8192L             /* as the kernels' blocks */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define BENCH_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define BENCH_CLONES
#endif

enum op { OP_ADAMW, OP_ADAMW_Q8, OP_SGD, OP_LARS, OP_LAMB, OP_SUMSQ, OP_SCALE, OP_STREAM, OP_READ, OP_COPY };

struct bench_case {
	char name[24];
	enum op op;
	int isa;                    /* enum kern_isa, or -1: the library's choice */
	int threads;                /* 0: all */
	int bytes;                  /* moved per element */
	double rate[MAX_ROUNDS];    /* elements/s per round */
};

struct opts {
	long n;
	int rounds, reps, threads, raw;
};

struct bufs {
	float *w, *m, *v, *g, *x;
	long n;
	/* int8 state: codes, and a scale per KERN_Q8_BLOCK */
	int8_t *mq;
	uint8_t *vq;
	float *ms, *vs;
};

/* 1 and 0 from memory the compiler cannot see into */
static volatile float one = 1.0f, zero = 0.0f;
static volatile double sink;    /* keeps the sums */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
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

/* AdamW's memory traffic with no arithmetic to speak of, in vectors of the
 * widest kind the CPU has (omp simd: vectorised at -O2 too, with no checks
 * for overlapping buffers) */
BENCH_CLONES
static void stream_span(float *w, float *m, float *v, const float *g, long n, float a, float b)
{
#pragma omp simd
	for (long i = 0; i < n; i++) {
		float d = g[i] * b;
		w[i] = w[i] * a + d;
		m[i] = m[i] * a + d;
		v[i] = v[i] * a + d;
	}
}

static void stream(struct bufs *b)
{
	float a = one, z = zero;
	long nblk = (b->n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static)
	for (long k = 0; k < nblk; k++) {
		long lo = k * BLOCK, len = b->n - lo < BLOCK ? b->n - lo : BLOCK;
		stream_span(b->w + lo, b->m + lo, b->v + lo, b->g + lo, len, a, z);
	}
}

/* a plain sum of g: the bound of a read-only pass */
BENCH_CLONES
static float read_span(const float *g, long n)
{
	float s = 0;
#pragma omp simd reduction(+ : s)
	for (long i = 0; i < n; i++)
		s += g[i];
	return s;
}

static void read_all(struct bufs *b)
{
	long nblk = (b->n + BLOCK - 1) / BLOCK;
	float s = 0;
#pragma omp parallel for schedule(static) reduction(+ : s)
	for (long k = 0; k < nblk; k++) {
		long lo = k * BLOCK, len = b->n - lo < BLOCK ? b->n - lo : BLOCK;
		s += read_span(b->g + lo, len);
	}
	sink = s;
}

static void copy(struct bufs *b)
{
	long nblk = (b->n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static)
	for (long k = 0; k < nblk; k++) {
		long lo = k * BLOCK, len = b->n - lo < BLOCK ? b->n - lo : BLOCK;
		memcpy(b->x + lo, b->g + lo, sizeof(float) * (size_t)len);
	}
}

/* Adam's t = 10; the state stays finite and normal over any number of calls */
static const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
static const float bc1 = 0.6513216f, bc2 = 0.009955119f;

static void run_op(enum op op, struct bufs *b)
{
	long n = b->n;
	switch (op) {
	case OP_ADAMW:
		kern_adamw_update_cpu(b->w, b->m, b->v, b->g, n, lr, b1, b2, eps, wd, bc1, bc2);
		break;
	case OP_ADAMW_Q8:
		kern_adamw_update_q8_cpu(b->w, b->mq, b->ms, b->vq, b->vs, b->g, n, lr, b1, b2, eps, wd,
		                         bc1, bc2);
		break;
	case OP_SGD:
		kern_sgd_update_cpu(b->w, b->m, b->g, n, lr, 0.9f, wd, 0);
		break;
	case OP_LARS:
		kern_lars_update_cpu(b->w, b->m, b->g, n, lr, 0.9f, wd);
		break;
	case OP_LAMB: {
		double wn = kern_sumsq_cpu(b->w, n);
		double un = kern_lamb_moments_cpu(b->m, b->v, b->g, b->w, n, b1, b2, eps, wd, bc1, bc2);
		kern_lamb_apply_cpu(b->w, b->m, b->v, n, (float)(lr * sqrt(wn / un)), eps, wd, bc1, bc2);
		break;
	}
	case OP_SUMSQ:
		sink = kern_sumsq_cpu(b->g, n);
		break;
	case OP_SCALE:
		kern_scale_cpu(b->g, n, one);
		break;
	case OP_STREAM:
		stream(b);
		break;
	case OP_READ:
		read_all(b);
		break;
	case OP_COPY:
		copy(b);
		break;
	}
}

/* K calls of one case; returns elements/s */
static double time_case(const struct bench_case *c, struct bufs *b, int reps, int threads)
{
	enum kern_isa dflt = kern_optim_isa();
	if (c->isa >= 0)
		kern_optim_set_isa((enum kern_isa)c->isa);
	kern_set_threads(c->threads ? c->threads : threads);
	double t = now();
	for (int r = 0; r < reps; r++)
		run_op(c->op, b);
	t = now() - t;
	kern_set_threads(threads);
	kern_optim_set_isa(dflt);
	return (double)b->n * reps / t;
}

static int add_case(struct bench_case *cs, int n, const char *name, enum op op, int isa,
                    int threads, int bytes)
{
	struct bench_case *c = &cs[n];
	*c = (struct bench_case){ .op = op, .isa = isa, .threads = threads, .bytes = bytes };
	snprintf(c->name, sizeof c->name, "%s", name);
	return n + 1;
}

static int make_cases(struct bench_case *cs)
{
	int n = 0;
	n = add_case(cs, n, "adamw", OP_ADAMW, -1, 0, 28);
	for (int i = KERN_ISA_COUNT - 1; i >= 0; i--) {
		char name[24];
		if (!kern_isa_supported((enum kern_isa)i))
			continue;
		snprintf(name, sizeof name, "adamw.%s", kern_isa_name((enum kern_isa)i));
		n = add_case(cs, n, name, OP_ADAMW, i, 0, 28);
	}
	n = add_case(cs, n, "adamw.1t", OP_ADAMW, -1, 1, 28);
	n = add_case(cs, n, "adamw.int8", OP_ADAMW_Q8, -1, 0, 16);
	n = add_case(cs, n, "adamw.int8.1t", OP_ADAMW_Q8, -1, 1, 16);
	n = add_case(cs, n, "sgd", OP_SGD, -1, 0, 20);
	n = add_case(cs, n, "lars", OP_LARS, -1, 0, 20);
	n = add_case(cs, n, "lamb", OP_LAMB, -1, 0, 44);
	n = add_case(cs, n, "sumsq", OP_SUMSQ, -1, 0, 4);
	n = add_case(cs, n, "scale", OP_SCALE, -1, 0, 8);
	n = add_case(cs, n, "stream", OP_STREAM, -1, 0, 28);
	n = add_case(cs, n, "stream.1t", OP_STREAM, -1, 1, 28);
	n = add_case(cs, n, "read", OP_READ, -1, 0, 4);
	n = add_case(cs, n, "copy", OP_COPY, -1, 0, 8);
	return n;
}

/* the case whose GB/s bounds case c's: read for the read-only passes,
 * stream for the others, on c's thread count */
static int bound_of(const struct bench_case *cs, int nc, int c)
{
	enum op op = cs[c].op == OP_SUMSQ || cs[c].op == OP_READ ? OP_READ : OP_STREAM;
	int threads = op == OP_READ ? 0 : cs[c].threads;
	for (int k = 0; k < nc; k++)
		if (cs[k].op == op && cs[k].threads == threads)
			return k;
	return c;
}

static void fill(struct bufs *b)
{
#pragma omp parallel for schedule(static)
	for (long i = 0; i < b->n; i++) {
		uint32_t h = (uint32_t)i * 2654435761u;
		float u = (float)(h >> 8) / 16777216.0f;          /* [0, 1) */
		b->w[i] = u - 0.5f;
		b->g[i] = 0.5f - u * u;
		b->m[i] = 0.1f * b->g[i];
		b->v[i] = 0.01f * b->g[i] * b->g[i];
		b->x[i] = 0;
	}
	kern_q8_quantize_s_cpu(b->m, b->n, b->mq, b->ms);
	kern_q8_quantize_u_cpu(b->v, b->n, b->vq, b->vs);
}

static void usage(FILE *out)
{
	fputs("usage: bench_optim_cpu [--n N] [--rounds R] [--reps K] [--threads T] [--raw]\n", out);
}

static int parse_args(struct opts *o, int argc, char **argv)
{
	*o = (struct opts){ .n = 64L << 20, .rounds = 5, .reps = 3, .threads = kern_threads() };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--raw") == 0) {
			o->raw = 1;
		} else if (strcmp(a, "--help") == 0) {
			usage(stdout);
			exit(0);
		} else if (v && strcmp(a, "--n") == 0) {
			o->n = atol(v), i++;
		} else if (v && strcmp(a, "--rounds") == 0) {
			o->rounds = atoi(v), i++;
		} else if (v && strcmp(a, "--reps") == 0) {
			o->reps = atoi(v), i++;
		} else if (v && strcmp(a, "--threads") == 0) {
			o->threads = atoi(v), i++;
		} else {
			fprintf(stderr, "bench_optim_cpu: unexpected argument \"%s\"\n", a);
			return -1;
		}
	}
	if (o->n < 1 || o->rounds < 1 || o->rounds > MAX_ROUNDS || o->reps < 1 || o->threads < 1) {
		fprintf(stderr, "bench_optim_cpu: need --n >= 1, --rounds in [1, %d], --reps >= 1, "
		        "--threads >= 1\n", MAX_ROUNDS);
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
	kern_set_threads(o.threads);
	struct bufs b = { .n = o.n };
	float **p[] = { &b.w, &b.m, &b.v, &b.g, &b.x };
	for (int i = 0; i < 5; i++)
		*p[i] = malloc(sizeof(float) * (size_t)o.n);
	long nb = kern_q8_blocks(o.n);
	b.mq = malloc((size_t)o.n), b.vq = malloc((size_t)o.n);
	b.ms = malloc(sizeof(float) * (size_t)nb), b.vs = malloc(sizeof(float) * (size_t)nb);
	if (!b.w || !b.m || !b.v || !b.g || !b.x || !b.mq || !b.vq || !b.ms || !b.vs) {
		fprintf(stderr, "bench_optim_cpu: out of memory for 5 x %ld floats and int8 state\n",
		        o.n);
		return 1;
	}
	fill(&b);

	struct bench_case cs[MAX_CASES];
	int nc = make_cases(cs);
	const char *env = getenv("LARCH_CPU_ISA");    /* as larch-train's option cpu_isa */
	if (env && *env && strcmp(env, "auto") != 0 &&
	    kern_optim_set_isa((enum kern_isa)kern_isa_parse(env)) != 0)
		fprintf(stderr, "bench_optim_cpu: LARCH_CPU_ISA=%s: not a set this CPU and build run\n",
		        env);
	char has[64] = "";
	for (int i = KERN_ISA_COUNT - 1; i >= 0; i--)
		if (kern_isa_supported((enum kern_isa)i))
			snprintf(has + strlen(has), sizeof has - strlen(has), " %s",
			         kern_isa_name((enum kern_isa)i));
	printf("bench_optim_cpu: %ld floats a buffer (%.0f MiB), %d threads, %d rounds of %d calls\n",
	       o.n, o.n * 4.0 / (1 << 20), o.threads, o.rounds, o.reps);
	printf("isa: %s (this CPU and build:%s; LARCH_CPU_ISA %s)\n",
	       kern_isa_name(kern_optim_isa()), has, env ? env : "unset");
	fflush(stdout);

	for (int c = 0; c < nc; c++) /* warm-up: page faults, thread pool, clocks */
		time_case(&cs[c], &b, 1, o.threads);
	for (int r = 0; r < o.rounds; r++)
		for (int k = 0; k < nc; k++) {
			int c = r % 2 ? nc - 1 - k : k;
			cs[c].rate[r] = time_case(&cs[c], &b, o.reps, o.threads);
		}

	if (!o.raw)
		printf("%-14s %-7s %7s %12s %9s %9s\n", "case", "isa", "threads", "Melem/s", "GB/s",
		       "x bound");
	for (int c = 0; c < nc; c++) {
		double rate = median(cs[c].rate, o.rounds);
		if (o.raw) {
			printf("raw %s %.6g %d\n", cs[c].name, rate, cs[c].bytes);
			continue;
		}
		/* each round's GB/s over its bound's in the same round */
		const struct bench_case *bc = &cs[bound_of(cs, nc, c)];
		double ratio[MAX_ROUNDS];
		for (int r = 0; r < o.rounds; r++)
			ratio[r] = cs[c].rate[r] * cs[c].bytes / (bc->rate[r] * bc->bytes);
		printf("%-14s %-7s %7d %12.1f %9.2f %9.2f\n", cs[c].name,
		       kern_isa_name(cs[c].isa >= 0 ? (enum kern_isa)cs[c].isa : kern_optim_isa()),
		       cs[c].threads ? cs[c].threads : o.threads, rate / 1e6,
		       rate * cs[c].bytes / 1e9, median(ratio, o.rounds));
	}
	if (!o.raw)
		printf("x bound: GB/s over stream's at the same thread count (read's for sumsq), "
		       "the median of the rounds' ratios;\nAdamW at stream's bandwidth: %.1f Melem/s\n",
		       median(cs[bound_of(cs, nc, 0)].rate, o.rounds) / 1e6);
	/* int8 state beside fp32's on one thread, in the same rounds */
	int i8 = -1, f32 = -1;
	for (int c = 0; c < nc; c++) {
		i8 = strcmp(cs[c].name, "adamw.int8.1t") == 0 ? c : i8;
		f32 = strcmp(cs[c].name, "adamw.1t") == 0 ? c : f32;
	}
	if (!o.raw && i8 >= 0 && f32 >= 0) {
		double r8 = median(cs[i8].rate, o.rounds), r32 = median(cs[f32].rate, o.rounds);
		printf("AdamW on one thread: int8 state %.2f ns an element, fp32 state %.2f (int8 takes "
		       "x%.2f fp32's time)\n", 1e9 / r8, 1e9 / r32, r32 / r8);
	}
	for (int i = 0; i < 5; i++)
		free(*p[i]);
	free(b.mq), free(b.vq), free(b.ms), free(b.vs);
	return 0;
}
