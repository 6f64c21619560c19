/* tests/unit/test_flash_emu.cc - the fused attention's kernels
 * (kernels/attention_flash_*.cuh) run on the CPU through cuda_emu.hh,
 * against attention_cpu.c's reference on the same 16-bit inputs: the
 * tiling, the causal masks, partial tiles (t not a multiple of 64), the
 * forward's online softmax over several key tiles, both backward kernels,
 * and which lane holds which value of the tensor cores' operands (the
 * emulated mma and ldmatrix follow the PTX ISA's layouts), in bf16 and
 * fp16. The GPU runs them in tests/gpu/test_cuda_act16.c.
 *
 * Tolerances (against the fp32 reference on the same 16-bit values), as
 * tests/gpu/test_cuda_attention.c holds the GEMM path to: lse 1e-5 of the
 * largest |lse|; out and dqkv normwise, ||got - want|| / ||want|| <= 3u
 * (u = 2^-9 bf16, 2^-12 fp16): the probabilities (and ds) rounded to 16
 * bits for their products, 2u as there, and one more u for the 16-bit
 * out that D = rowsum(dout * out) and the stored results are made of.
 * The backward that adds dq atomically in its dk, dv kernel (AddDq, 8
 * warps: kern_attention_flash_dq_atomic's 128 keys) is held to the two
 * kernels' results (check_dq_added).
 *
 * The shapes cover every edge of the tiles: one row, one whole tile, a
 * partial tile after whole ones (also past a block of 128 keys), several
 * heads and batches.
 */
#include "cuda_emu.hh"

#include <cstdio>

extern "C" {
#include "check.h"
#include "kernels/attention.h"
#include "kernels/precision.h"
}

#include "kernels/precision_cuda.cuh"

float emu_of16(uint16_t bits, bool bf16)
{
	return bf16 ? fp32_of_bf16(bits) : fp32_of_fp16(bits);
}

#include "kernels/attention_flash_bwd_cuda.cuh"
#include "kernels/attention_flash_fwd_cuda.cuh"

static uint64_t rng = 12345;

static float uniform(float lo, float hi)
{
	rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
	return lo + (hi - lo) * (float)((rng >> 40) * 0x1p-24);
}

struct buf16 {
	std::vector<float> f;              /* the values */
	std::vector<uint16_t> h;           /* their bits */
};

static buf16 rand16(long n, float lo, float hi, int bf16)
{
	buf16 b;
	b.f.resize((size_t)n);
	b.h.resize((size_t)n);
	for (long i = 0; i < n; i++) {
		float x = uniform(lo, hi);
		b.h[(size_t)i] = bf16 ? kern_fp32_to_bf16(x) : kern_fp32_to_fp16(x);
		b.f[(size_t)i] = bf16 ? kern_bf16_to_fp32(b.h[(size_t)i]) : kern_fp16_to_fp32(b.h[(size_t)i]);
	}
	return b;
}

static std::vector<float> of16(const std::vector<uint16_t> &h, int bf16)
{
	std::vector<float> f(h.size());
	for (size_t i = 0; i < h.size(); i++)
		f[i] = bf16 ? kern_bf16_to_fp32(h[i]) : kern_fp16_to_fp32(h[i]);
	return f;
}

/* every |got - want| <= rel_big max |want| */
static void near(const char *what, const std::vector<float> &got, const std::vector<float> &want,
                 double rel_big)
{
	double big = 0;
	for (float w : want)
		big = std::fmax(big, std::fabs(w));
	for (size_t i = 0; i < want.size(); i++)
		if (!(std::fabs(got[i] - want[i]) <= rel_big * big)) {
			CHECK_MSG(0, "%s: [%zu] %.9g, the reference's %.9g", what, i, got[i], want[i]);
			return;
		}
	CHECK(1);
}

/* ||got - want|| <= bound ||want|| */
static void normwise(const char *what, const std::vector<float> &got,
                     const std::vector<float> &want, double bound)
{
	double se = 0, sw = 0;
	for (size_t i = 0; i < want.size(); i++) {
		se += (got[i] - want[i]) * (double)(got[i] - want[i]);
		sw += want[i] * (double)want[i];
	}
	CHECK_MSG(std::sqrt(se) <= bound * std::sqrt(sw), "%s: normwise error %.3g, bound %.3g", what,
	          std::sqrt(se / sw), bound);
}

/* The backward with dq added atomically by the dk, dv kernel (AddDq) of
 * 8 warps (blocks of 128 keys), as flash_bwd runs it: D with the fp32 dq
 * cleared beside it (NaN before, so a value missed shows), the dk, dv
 * kernel, then the rounding of dq into dqkv. dk and dv: the bits of the
 * two-kernel backward's (two_kernels); dq: within rounding of its dq,
 * normwise u (the sums' order differs, then both round to 16 bits). */
template <typename T>
static void check_dq_added(const std::vector<uint16_t> &two_kernels, const buf16 &dout,
                           const buf16 &qkv, const std::vector<uint16_t> &out16,
                           const std::vector<float> &lse, int b, int t, int nh, int bf16)
{
	const int Warps = 8;
	int c = nh * FA_HS, keys = 16 * Warps;
	long btc = (long)b * t * c, rows = (long)b * nh * t;
	float scale = (float)(1.0 / std::sqrt((double)FA_HS));
	const char *ty = bf16 ? "bf16" : "fp16";
	dim3 grid = fa_grid(b, nh, t, keys);
	std::vector<float> dd((size_t)rows, NAN), dq_acc((size_t)btc, NAN);
	std::vector<uint16_t> dqkv((size_t)(3 * btc), 0xffff);
	emu_launch(dim3((unsigned)((rows + FA_ROWDOT_ROWS - 1) / FA_ROWDOT_ROWS)), dim3(256), [&] {
		fa_rowdot_kernel(dd.data(), dq_acc.data(), dout.h.data(), out16.data(), b, t, c, nh,
		                 bf16);
	});
	emu_launch(grid, dim3(32 * Warps), [&] {
		fa_bwd_kv_kernel<T, true, Warps>(dqkv.data(), dq_acc.data(), dout.h.data(), qkv.h.data(),
		                                 lse.data(), dd.data(), t, c, nh, scale, bf16);
	});
	long n = (long)b * t * (c / 8);
	emu_launch(dim3((unsigned)((n + 255) / 256)), dim3(256), [&] {
		fa_dq_round_kernel(dqkv.data(), dq_acc.data(), (long)b * t, c, bf16);
	});
	/* by column block of each row: q, k, v */
	std::vector<float> dq_got, dq_want;
	long kv_differ = 0;
	for (long r = 0; r < (long)b * t; r++)
		for (int j = 0; j < 3 * c; j++) {
			size_t at = (size_t)r * 3 * c + (size_t)j;
			if (j < c) {
				dq_got.push_back(bf16 ? kern_bf16_to_fp32(dqkv[at]) : kern_fp16_to_fp32(dqkv[at]));
				dq_want.push_back(bf16 ? kern_bf16_to_fp32(two_kernels[at])
				                       : kern_fp16_to_fp32(two_kernels[at]));
			} else {
				kv_differ += dqkv[at] != two_kernels[at];
			}
		}
	CHECK_MSG(kv_differ == 0, "%s dq added (%d keys) b=%d t=%d nh=%d: %ld values of dk, dv differ",
	          ty, keys, b, t, nh, kv_differ);
	char what[160];
	snprintf(what, sizeof what, "%s dq added (%d keys) b=%d t=%d nh=%d, against the dq kernel's",
	         ty, keys, b, t, nh);
	normwise(what, dq_got, dq_want, bf16 ? 0x1p-9 : 0x1p-12);
}

template <typename T>
static void run_case(int b, int t, int nh, int bf16)
{
	int c = nh * FA_HS;
	long btc = (long)b * t * c;
	char what[160];
	const char *ty = bf16 ? "bf16" : "fp16";
	double u = bf16 ? 0x1p-9 : 0x1p-12;
	buf16 qkv = rand16(3 * btc, -1.5f, 1.5f, bf16), dout = rand16(btc, -1, 1, bf16);
	float scale = (float)(1.0 / std::sqrt((double)FA_HS));

	/* the reference on the same values */
	std::vector<float> out_ref((size_t)btc), att((size_t)b * nh * t * t);
	std::vector<float> preatt(att.size()), dqkv_ref((size_t)(3 * btc)), datt(att.size());
	std::vector<float> dpreatt(att.size());
	kern_attention_fwd_ref(out_ref.data(), preatt.data(), att.data(), qkv.f.data(), b, t, c, nh);

	std::vector<uint16_t> out16((size_t)btc, 0xffff), dqkv16((size_t)(3 * btc), 0xffff);
	std::vector<float> lse((size_t)b * nh * t, NAN), dd((size_t)b * nh * t, NAN);
	dim3 grid = fa_grid(b, nh, t, FA_TILE);
	emu_launch(grid, dim3(FA_THREADS), [&] {
		fa_fwd_kernel<T>(out16.data(), lse.data(), qkv.h.data(), t, c, nh, scale, bf16);
	});

	/* lse against the scores the reference left in preatt (scaled) */
	std::vector<float> lse_ref(lse.size());
	for (long r = 0; r < (long)lse.size(); r++) {
		int i = (int)(r % t);
		const float *s = preatt.data() + (size_t)r * t;
		double m = -INFINITY, sum = 0;
		for (int j = 0; j <= i; j++)
			m = std::fmax(m, s[j]);
		for (int j = 0; j <= i; j++)
			sum += std::exp(s[j] - m);
		lse_ref[(size_t)r] = (float)(m + std::log(sum));
	}
	snprintf(what, sizeof what, "%s lse b=%d t=%d nh=%d", ty, b, t, nh);
	near(what, lse, lse_ref, 1e-5);
	std::vector<float> out = of16(out16, bf16);
	snprintf(what, sizeof what, "%s out b=%d t=%d nh=%d", ty, b, t, nh);
	normwise(what, out, out_ref, 3 * u);

	/* backward: D, then the two kernels; the reference from the same out */
	long rows = (long)b * nh * t;
	emu_launch(dim3((unsigned)((rows + FA_ROWDOT_ROWS - 1) / FA_ROWDOT_ROWS)), dim3(256), [&] {
		fa_rowdot_kernel(dd.data(), nullptr, dout.h.data(), out16.data(), b, t, c, nh, bf16);
	});
	{
		/* D against a double sum of the same 16-bit values, within the
		 * float sum's error of 64 terms: relative to the sum of |terms| */
		std::vector<float> dof = of16(dout.h, bf16);
		long bad = -1;
		double got_bad = 0, want_bad = 0;
		for (long r = 0; r < rows && bad < 0; r++) {
			int i = (int)(r % t), bh = (int)(r / t), bb = bh / nh, h = bh % nh;
			size_t at = ((size_t)bb * t + i) * c + (size_t)h * FA_HS;
			double sum = 0, mag = 0;
			for (int j = 0; j < FA_HS; j++) {
				sum += (double)dof[at + j] * out[at + j];
				mag += std::fabs((double)dof[at + j] * out[at + j]);
			}
			if (!(std::fabs(dd[(size_t)r] - sum) <= 8e-6 * mag + 1e-30))
				bad = r, got_bad = dd[(size_t)r], want_bad = sum;
		}
		CHECK_MSG(bad < 0, "%s D b=%d t=%d nh=%d: row %ld %.9g, the reference's %.9g", ty, b, t,
		          nh, bad, got_bad, want_bad);
	}
	/* the two kernels, each walk's next tile's cp.async copies in flight
	 * while this one is used (the emulation lands them only at the wait,
	 * so a read before the wait shows) */
	emu_launch(grid, dim3(FA_THREADS), [&] {
		fa_bwd_kv_kernel<T>(dqkv16.data(), nullptr, dout.h.data(), qkv.h.data(), lse.data(),
		                    dd.data(), t, c, nh, scale, bf16);
	});
	emu_launch(grid, dim3(FA_THREADS), [&] {
		fa_bwd_q_kernel<T>(dqkv16.data(), dout.h.data(), qkv.h.data(), lse.data(), dd.data(), t,
		                   c, nh, scale, bf16);
	});
	check_dq_added<T>(dqkv16, dout, qkv, out16, lse, b, t, nh, bf16);
	std::fill(dqkv_ref.begin(), dqkv_ref.end(), 0.0f);
	kern_attention_bwd_ref(dqkv_ref.data(), dpreatt.data(), datt.data(), dout.f.data(),
	                       qkv.f.data(), att.data(), b, t, c, nh);
	std::vector<float> dqkv = of16(dqkv16, bf16);
	snprintf(what, sizeof what, "%s dqkv b=%d t=%d nh=%d", ty, b, t, nh);
	normwise(what, dqkv, dqkv_ref, 3 * u);
}

static void test_flash(void)
{
	/* b, t, nh: two batches and heads in a partial tile; two whole
	 * tiles and a partial third (past the 128 keys of an atomic-dq
	 * block); one whole tile */
	static const int shapes[][3] = { { 2, 3, 2 }, { 1, 130, 1 }, { 1, 64, 1 } };
	const size_t n = sizeof shapes / sizeof shapes[0];
	for (size_t i = 0; i < n; i++) {
		run_case<__nv_bfloat16>(shapes[i][0], shapes[i][1], shapes[i][2], 1);
		run_case<__half>(shapes[i][0], shapes[i][1], shapes[i][2], 0);
	}
}

int main(void)
{
	CHECK_RUN(test_flash);
	return check_finish();
}
