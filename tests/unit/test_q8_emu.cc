/* tests/unit/test_q8_emu.cc - the GPU's fused updates of 8-bit block-wise
 * optimizer state (kernels/quant8_kernels.cuh) run on the CPU through
 * cuda_emu.hh, against quant8_cpu.c's: the codes of single values (ties
 * included), and SGD (plain and Nesterov), AdamW,
 * LARS and LAMB (its norm pass and its update) must give
 * the CPU's bits: weights, codes and block scales, and the LAMB norm as a
 * double. The state covers what the codes must get right: a short last
 * block, a block whose state is all zero (scale 0), values spread over many
 * decades, a tiny positive v (never code 0), and with the norm a buffer of
 * more blocks than the CPU sums in one chunk each (its chunked order).
 * tests/gpu/test_cuda_optimizer.c does the same on a GPU.
 */
#include "cuda_emu.hh"

#include <cstdio>
#include <vector>

extern "C" {
#include "check.h"
}

#include "kernels/quant8_kernels.cuh"

static uint64_t rng = 8888;

static float uniform(float lo, float hi)
{
	rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
	return lo + (hi - lo) * (float)((rng >> 40) * 0x1p-24);
}

/* |x| spread over decades 10^-7 .. 10^0, sign random (or positive) */
static float spread(int positive)
{
	float mag = std::pow(10.0f, uniform(-7, 0));
	return positive || uniform(0, 1) < 0.5f ? mag : -mag;
}

struct state {
	std::vector<float> w, g;
	std::vector<int8_t> mq;
	std::vector<uint8_t> vq;
	std::vector<float> ms, vs;
};

/* n values, the state quantized from fp32 values by the CPU; block 1 (when
 * there is one) all zero, and one tiny v */
static state make_state(long n)
{
	long nb = kern_q8_blocks(n);
	state s;
	std::vector<float> m((size_t)n), v((size_t)n);
	s.w.resize((size_t)n), s.g.resize((size_t)n);
	for (long i = 0; i < n; i++) {
		s.w[(size_t)i] = uniform(-1, 1);
		s.g[(size_t)i] = spread(0) * 0.1f;
		m[(size_t)i] = spread(0) * 0.01f;
		v[(size_t)i] = spread(1) * 1e-4f;
		if (i / KERN_Q8_BLOCK == 1)
			m[(size_t)i] = v[(size_t)i] = 0.0f;
	}
	v[(size_t)(n - 1)] = 1e-30f;
	s.mq.resize((size_t)n), s.vq.resize((size_t)n);
	s.ms.resize((size_t)nb), s.vs.resize((size_t)nb);
	kern_q8_quantize_s_cpu(m.data(), n, s.mq.data(), s.ms.data());
	kern_q8_quantize_u_cpu(v.data(), n, s.vq.data(), s.vs.data());
	return s;
}

template <typename T>
static void same(const char *what, const std::vector<T> &got, const std::vector<T> &want)
{
	long bad = -1;
	for (size_t i = 0; i < want.size() && bad < 0; i++)
		if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0)
			bad = (long)i;
	CHECK_MSG(bad < 0, "%s: differs from the CPU's at %ld of %zu", what, bad, want.size());
}

static void same_state(const char *what, const state &got, const state &want, int has_v)
{
	char buf[160];
	snprintf(buf, sizeof buf, "%s w", what);
	same(buf, got.w, want.w);
	snprintf(buf, sizeof buf, "%s m codes", what);
	same(buf, got.mq, want.mq);
	snprintf(buf, sizeof buf, "%s m scales", what);
	same(buf, got.ms, want.ms);
	if (has_v) {
		snprintf(buf, sizeof buf, "%s v codes", what);
		same(buf, got.vq, want.vq);
		snprintf(buf, sizeof buf, "%s v scales", what);
		same(buf, got.vs, want.vs);
	}
}

static const float LR = 0.01f, MU = 0.9f, WD = 0.01f, B1 = 0.9f, B2 = 0.999f, EPS = 1e-8f;
static const float BC1 = 0.1f, BC2 = 0.001f;

template <int OP>
static void run_update(state &s, long n, const q8_hyper &h)
{
	q8_table tab = q8_table_of();
	emu_launch(dim3((unsigned)kern_q8_blocks(n)), dim3(Q8_THREADS), [&] {
		q8_update_kernel<OP>(&tab, s.w.data(), s.mq.data(), s.ms.data(), s.vq.data(),
		                     s.vs.data(), s.g.data(), n, h);
	});
}

static q8_hyper hyper(float lr, float mu, float wd, int nesterov)
{
	q8_hyper h;
	h.lr = lr, h.mu = mu, h.wd = wd, h.b1 = B1, h.b2 = B2, h.eps = EPS;
	h.bc1 = BC1, h.bc2 = BC2, h.nesterov = nesterov;
	return h;
}

static void updates_case(long n)
{
	char what[96];
	for (int nesterov = 0; nesterov < 2; nesterov++) {
		state cpu = make_state(n), gpu = cpu;
		kern_sgd_update_q8_cpu(cpu.w.data(), cpu.mq.data(), cpu.ms.data(), cpu.g.data(), n, LR,
		                       MU, WD, nesterov);
		run_update<Q8_SGD>(gpu, n, hyper(LR, MU, WD, nesterov));
		snprintf(what, sizeof what, "sgd%s n=%ld", nesterov ? " nesterov" : "", n);
		same_state(what, gpu, cpu, 0);
	}
	{
		state cpu = make_state(n), gpu = cpu;
		kern_adamw_update_q8_cpu(cpu.w.data(), cpu.mq.data(), cpu.ms.data(), cpu.vq.data(),
		                         cpu.vs.data(), cpu.g.data(), n, LR, B1, B2, EPS, WD, BC1, BC2);
		run_update<Q8_ADAMW>(gpu, n, hyper(LR, 0, WD, 0));
		snprintf(what, sizeof what, "adamw n=%ld", n);
		same_state(what, gpu, cpu, 1);
	}
	{
		state cpu = make_state(n), gpu = cpu;
		kern_lars_update_q8_cpu(cpu.w.data(), cpu.mq.data(), cpu.ms.data(), cpu.g.data(), n,
		                        0.3f, MU, WD);
		run_update<Q8_LARS>(gpu, n, hyper(0.3f, MU, WD, 0));
		snprintf(what, sizeof what, "lars n=%ld", n);
		same_state(what, gpu, cpu, 0);
	}
	{
		state cpu = make_state(n), gpu = cpu;
		kern_lamb_update_q8_cpu(cpu.w.data(), cpu.mq.data(), cpu.ms.data(), cpu.vq.data(),
		                        cpu.vs.data(), cpu.g.data(), n, 0.02f, B1, B2, EPS, WD, BC1, BC2);
		run_update<Q8_LAMB>(gpu, n, hyper(0.02f, 0, WD, 0));
		snprintf(what, sizeof what, "lamb n=%ld", n);
		same_state(what, gpu, cpu, 1);
	}
}

/* the norm pass: the CPU's double, bit for bit, and nothing written */
static void norm_case(long n)
{
	state s = make_state(n), before = s;
	double want = kern_lamb_norm_q8_cpu(s.mq.data(), s.ms.data(), s.vq.data(), s.vs.data(),
	                                    s.g.data(), s.w.data(), n, B1, B2, EPS, WD, BC1, BC2);
	long nb = kern_q8_blocks(n), per = kern_q8_norm_chunk(nb);
	std::vector<double> part((size_t)nb + 1, NAN);
	q8_table tab = q8_table_of();
	q8_hyper h = hyper(0, 0, WD, 0);
	emu_launch(dim3((unsigned)nb), dim3(Q8_THREADS), [&] {
		q8_lamb_norm_kernel(&tab, part.data(), s.mq.data(), s.ms.data(), s.vq.data(),
		                    s.vs.data(), s.g.data(), s.w.data(), n, h);
	});
	emu_launch(dim3(1), dim3(Q8_THREADS), [&] {
		q8_norm_sum_kernel(&part[(size_t)nb], part.data(), nb, per);
	});
	double got = part[(size_t)nb];
	CHECK_MSG(std::memcmp(&got, &want, sizeof got) == 0,
	          "lamb norm n=%ld (%ld blocks, %ld a chunk): %.17g, the CPU's %.17g", n, nb, per,
	          got, want);
	same_state("lamb norm leaves the state", s, before, 1);
}

/* the codes of single values against kern_q8_encode_*: every midpoint (a
 * tie goes to the smaller magnitude), its neighbours, the values, signs,
 * zero, NaN and a tiny positive v, at scale 1 and another */
static void test_encode(void)
{
	q8_table t = q8_table_of();
	std::vector<float> xs = { 0.0f, -0.0f, NAN, 1e-30f, 1.0f, -1.0f };
	for (int k = 0; k < 255; k++) {
		float a = t.mid_u[k], b = k < 127 ? t.mid_s[k] : 0.5f;
		for (float x : { a, std::nextafter(a, 0.0f), std::nextafter(a, 2.0f), b,
		                 std::nextafter(b, 0.0f), std::nextafter(b, 2.0f), t.u[k] })
			xs.push_back(x), xs.push_back(-x);
	}
	for (float scale : { 1.0f, 0.37f }) {
		long n = (long)xs.size();
		std::vector<float> x(xs);
		for (float &v : x)
			v *= scale;
		std::vector<int8_t> qs((size_t)n), qs_want((size_t)n);
		std::vector<uint8_t> qu((size_t)n), qu_want((size_t)n);
		kern_q8_encode_s(x.data(), n, scale, qs_want.data());
		kern_q8_encode_u(x.data(), n, scale, qu_want.data());
		for (long i = 0; i < n; i++) {
			qs[(size_t)i] = q8_enc_s(&t, x[(size_t)i], scale);
			/* unsigned states hold no negative values */
			qu[(size_t)i] = x[(size_t)i] < 0 ? qu_want[(size_t)i]
			                                 : q8_enc_u(&t, x[(size_t)i], scale);
		}
		char what[64];
		snprintf(what, sizeof what, "signed codes scale %g", (double)scale);
		same(what, qs, qs_want);
		snprintf(what, sizeof what, "unsigned codes scale %g", (double)scale);
		same(what, qu, qu_want);
	}
}

static void test_updates(void)
{
	updates_case(1);
	updates_case(3 * KERN_Q8_BLOCK + 37);
}

static void test_norm(void)
{
	norm_case(2 * KERN_Q8_BLOCK + 5);
	/* more blocks than chunks: two blocks a chunk, the last chunk one */
	norm_case((KERN_Q8_NORM_CHUNKS + 3) * KERN_Q8_BLOCK - 100);
}

int main(void)
{
	CHECK_RUN(test_encode);
	CHECK_RUN(test_updates);
	CHECK_RUN(test_norm);
	return check_finish();
}
