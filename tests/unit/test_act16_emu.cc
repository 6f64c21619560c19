/* tests/unit/test_act16_emu.cc - the CUDA kernels that store activations
 * as 16 bits (KERN_ACT_16: LayerNorm, GELU, the residual, softmax +
 * cross-entropy and its argmax, the embedding, attention's causal softmax,
 * matmul's bias store and bias gradient, and the hash of a GEMM's output its
 * same-bits tuning compares; kernels/<op>_kernels.cuh; not the GEMMs, which
 * are cuBLAS's) run on the CPU through cuda_emu.hh, in bf16
 * and fp16:
 *   - with packed 16-bit buffers (a16 1) each output is the fp32-buffer
 *     path's (a16 0) bit for bit, once packed: the same values read, the
 *     same rounding in the store; statistics and parameter gradients equal;
 *   - the fp32-buffer path is the CPU reference's on the same 16-bit
 *     values, within the tolerances of tests/unit/test_kern_<op>.c, which
 *     checks that the emulation runs the kernels as a GPU would;
 * on odd sizes, the four-a-thread paths (8-byte packed accesses) and the
 * scalar ones (a view one value off alignment). tests/gpu/test_cuda_act16.c
 * does the same on a GPU.
 */
#include "cuda_emu.hh"

#include <algorithm>
#include <cstdio>

extern "C" {
#include "check.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/precision.h"
#include "kernels/residual.h"
#include "kernels/softmax_xent.h"
}

#include "kernels/matmul_cuda.h"

#include "kernels/attention_kernels.cuh"
#include "kernels/embedding_kernels.cuh"
#include "kernels/gelu_kernels.cuh"
#include "kernels/layernorm_kernels.cuh"
#include "kernels/matmul_kernels.cuh"
#include "kernels/matmul_lt_kernels.cuh"
#include "kernels/residual_kernels.cuh"
#include "kernels/softmax_xent_kernels.cuh"

static uint64_t rng = 4242;
static int g_ops;                      /* 1 fp16, 2 bf16 (kern_cuda_gemm_operands) */

static const char *ty()
{
	return g_ops == 2 ? "bf16" : "fp16";
}

static float uniform(float lo, float hi)
{
	rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
	return lo + (hi - lo) * (float)((rng >> 40) * 0x1p-24);
}

static uint16_t bits16(float x)
{
	return g_ops == 2 ? kern_fp32_to_bf16(x) : kern_fp32_to_fp16(x);
}

static float value16(uint16_t h)
{
	return g_ops == 2 ? kern_bf16_to_fp32(h) : kern_fp16_to_fp32(h);
}

/* n 16-bit values in [lo, hi) as floats */
static std::vector<float> rand16(long n, float lo, float hi)
{
	std::vector<float> x((size_t)n);
	for (auto &v : x)
		v = value16(bits16(uniform(lo, hi)));
	return x;
}

static std::vector<uint16_t> pack(const std::vector<float> &x)
{
	std::vector<uint16_t> h(x.size());
	for (size_t i = 0; i < x.size(); i++)
		h[i] = bits16(x[i]);
	return h;
}

/* got (packed) is want (fp32 buffer) packed, bit for bit */
static void same16(const char *what, const uint16_t *got, const float *want, long n)
{
	for (long i = 0; i < n; i++)
		if (got[i] != bits16(want[i])) {
			CHECK_MSG(0, "%s %s: [%ld] %#06x, the fp32 path's %.9g (%#06x)", ty(), what, i,
			          got[i], want[i], bits16(want[i]));
			return;
		}
	CHECK(1);
}

static void same32(const char *what, const float *got, const float *want, long n)
{
	CHECK_MSG(std::memcmp(got, want, sizeof(float) * (size_t)n) == 0, "%s %s differs", ty(),
	          what);
}

/* |got - want| <= atol + rtol |want| */
static void close(const char *what, const float *got, const float *want, long n, double atol,
                  double rtol)
{
	for (long i = 0; i < n; i++)
		if (!(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]))) {
			CHECK_MSG(0, "%s %s: [%ld] %.9g, the reference's %.9g", ty(), what, i, got[i],
			          want[i]);
			return;
		}
	CHECK(1);
}

/* LayerNorm forward and backward over n rows of c, fp32 and 16-bit
 * storage, with vec (groups of four) as asked: the two storages the same
 * bits, both against the reference; the fp32 results into out (forward),
 * di (dinp of the accumulating backward), gw and gb */
static void layernorm_case(int n, int c, int vec, std::vector<float> &out, std::vector<float> &di,
                           std::vector<float> &gw, std::vector<float> &gb)
{
	long nc = (long)n * c;
	uint64_t keep = rng;
	rng = 7 + (uint64_t)c;           /* the same data for every vec of n, c */
	int nblk = (n + LN_ROWS - 1) / LN_ROWS;
	auto x = rand16(nc, -2, 2), dy = rand16(nc, -1, 1), di0 = rand16(nc, -1, 1);
	auto w = rand16(c, 0.5f, 1.5f), b = rand16(c, -0.5f, 0.5f);
	rng = keep;
	auto x16 = pack(x), dy16 = pack(dy);
	out.assign((size_t)nc, 0.0f);
	std::vector<float> mean(n), rstd(n), mean16(n), rstd16(n);
	std::vector<uint16_t> out16((size_t)nc);
	dim3 fgrid((unsigned)((n + LN_FWD_WARPS - 1) / LN_FWD_WARPS));
	emu_launch(fgrid, dim3(LN_FWD_WARPS * 32), [&] {
		ln_fwd_kernel(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), n, c,
		              vec, 0, g_ops);
	});
	emu_launch(fgrid, dim3(LN_FWD_WARPS * 32), [&] {
		ln_fwd_kernel(out16.data(), mean16.data(), rstd16.data(), x16.data(), w.data(),
		              b.data(), n, c, vec, 1, g_ops);
	});
	same16("layernorm out", out16.data(), out.data(), nc);
	same32("layernorm mean", mean16.data(), mean.data(), n);
	same32("layernorm rstd", rstd16.data(), rstd.data(), n);
	std::vector<float> ref((size_t)nc), rmean(n), rrstd(n);
	kern_layernorm_fwd_ref(ref.data(), rmean.data(), rrstd.data(), x.data(), w.data(), b.data(),
	                       n, c);
	for (auto &v : ref)
		v = value16(bits16(v));
	/* within a 16-bit spacing of the reference's rounding (a sum's order) */
	close("layernorm out vs reference", out.data(), ref.data(), nc, 1e-5, g_ops == 2 ? 0x1p-7 : 0x1p-10);

	for (int set = 1; set >= 0; set--) {
		di = di0;
		gw.assign(c, 0.0f);
		gb.assign(c, 0.0f);
		std::vector<float> gw16(c, 0.0f), gb16(c, 0.0f);
		auto di16 = pack(di0);
		std::vector<float> part((size_t)2 * c * nblk), part16(part.size());
		emu_launch(dim3((unsigned)nblk), dim3(LN_BWD_THREADS), [&] {
			ln_bwd_kernel(di.data(), part.data(), dy.data(), x.data(), w.data(), mean.data(),
			              rstd.data(), n, c, set, vec, 0, g_ops);
		});
		emu_launch(dim3((unsigned)nblk), dim3(LN_BWD_THREADS), [&] {
			ln_bwd_kernel(di16.data(), part16.data(), dy16.data(), x16.data(), w.data(),
			              mean.data(), rstd.data(), n, c, set, vec, 1, g_ops);
		});
		dim3 g2((unsigned)((2 * c + 31) / 32)), b2(32, LN_FINAL_TY);
		emu_launch(g2, b2, [&] { ln_bwd_final_kernel(gw.data(), gb.data(), part.data(), nblk, c); });
		emu_launch(g2, b2, [&] {
			ln_bwd_final_kernel(gw16.data(), gb16.data(), part16.data(), nblk, c);
		});
		char what[64];
		std::snprintf(what, sizeof what, "layernorm dinp set=%d", set);
		same16(what, di16.data(), di.data(), nc);
		same32("layernorm dweight", gw16.data(), gw.data(), c);
		same32("layernorm dbias", gb16.data(), gb.data(), c);
		/* the reference: the same sums, dinp rounded as the kernel stores it */
		std::vector<float> rdi(di0), rgw(c, 0.0f), rgb(c, 0.0f);
		(set ? kern_layernorm_bwd_set_ref : kern_layernorm_bwd_ref)(
			rdi.data(), rgw.data(), rgb.data(), dy.data(), x.data(), w.data(), mean.data(),
			rstd.data(), n, c);
		for (auto &v : rdi)
			v = value16(bits16(v));
		std::snprintf(what, sizeof what, "layernorm dinp set=%d vs reference", set);
		close(what, di.data(), rdi.data(), nc, 1e-5, g_ops == 2 ? 0x1p-7 : 0x1p-10);
		close("layernorm dweight vs reference", gw.data(), rgw.data(), c, 1e-4, 1e-4);
		close("layernorm dbias vs reference", gb.data(), rgb.data(), c, 1e-4, 1e-4);
	}
}

static void test_layernorm()
{
	std::vector<float> out, di, gw, gb, out1, di1, gw1, gb1;
	layernorm_case(37, 77, 0, out, di, gw, gb);   /* c not a multiple of 4 */
	/* groups of four against one at a time: the row sums in another order
	 * (out and dinp within an ulp or so), the column sums in the same order
	 * (but for where the compiler fuses a multiply-add) */
	layernorm_case(37, 96, 1, out, di, gw, gb);
	layernorm_case(37, 96, 0, out1, di1, gw1, gb1);
	close("layernorm out, vec against not", out.data(), out1.data(), (long)out.size(), 1e-6,
	      1e-5);
	close("layernorm dinp, vec against not", di.data(), di1.data(), (long)di.size(), 1e-6, 1e-5);
	close("layernorm dweight, vec against not", gw.data(), gw1.data(), (long)gw.size(), 1e-6,
	      1e-6);
	close("layernorm dbias, vec against not", gb.data(), gb1.data(), (long)gb.size(), 1e-6, 1e-6);
	/* GPT-2's width: three groups a lane; a row past the last block of
	 * LN_ROWS (the last block part full) with a lane's groups part used */
	layernorm_case(9, 768, 1, out, di, gw, gb);
}

/* The residual connection and the LayerNorm after it in one kernel
 * (ln_res_fwd_kernel, G groups of four a lane) against residual_fwd_kernel
 * then ln_fwd_kernel's groups of four: res, out, mean and rstd the same
 * bits, in fp32 buffers and packed 16-bit ones */
template <int G>
static void residual_layernorm_case(int n, int c)
{
	long nc = (long)n * c;
	auto a = rand16(nc, -2, 2), b = rand16(nc, -1, 1);
	auto w = rand16(c, 0.5f, 1.5f), bi = rand16(c, -0.5f, 0.5f);
	dim3 fgrid((unsigned)((n + LN_FWD_WARPS - 1) / LN_FWD_WARPS)), fblock(LN_FWD_WARPS * 32);
	char what[96];
	for (int a16 = 0; a16 < 2; a16++) {
		/* [0] the two kernels, [1] the one; packed 16-bit values (a16) or
		 * floats, each in a vector of floats big enough for either */
		std::vector<float> res[2], out[2], mean[2], rstd[2];
		std::vector<uint16_t> a16v = pack(a), b16v = pack(b);
		std::vector<uint16_t> res16[2], out16[2];
		for (int k = 0; k < 2; k++) {
			res[k].assign((size_t)nc, 0.0f), out[k].assign((size_t)nc, 0.0f);
			res16[k].assign((size_t)nc, 0), out16[k].assign((size_t)nc, 0);
			mean[k].assign((size_t)n, 0.0f), rstd[k].assign((size_t)n, 0.0f);
		}
		const void *pa = a16 ? (const void *)a16v.data() : (const void *)a.data();
		const void *pb = a16 ? (const void *)b16v.data() : (const void *)b.data();
		for (int k = 0; k < 2; k++) {
			void *pr = a16 ? (void *)res16[k].data() : (void *)res[k].data();
			void *po = a16 ? (void *)out16[k].data() : (void *)out[k].data();
			if (k == 0) {
				emu_launch(dim3(3), dim3(64), [&] {
					residual_fwd_kernel(pr, pa, pb, nc, 1, a16, g_ops);
				});
				emu_launch(fgrid, fblock, [&] {
					ln_fwd_kernel(po, mean[k].data(), rstd[k].data(), pr, w.data(), bi.data(),
					              n, c, 1, a16, g_ops);
				});
			} else {
				emu_launch(fgrid, fblock, [&] {
					ln_res_fwd_kernel<G>(pr, po, mean[k].data(), rstd[k].data(), pa, pb,
					                     w.data(), bi.data(), n, c, a16, g_ops);
				});
			}
		}
		std::snprintf(what, sizeof what, "residual + layernorm G=%d n=%d c=%d a16=%d", G, n, c,
		              a16);
		if (a16) {
			CHECK_MSG(res16[0] == res16[1], "%s %s: res differs", ty(), what);
			CHECK_MSG(out16[0] == out16[1], "%s %s: out differs", ty(), what);
		} else {
			same32(what, res[1].data(), res[0].data(), nc);
			same32(what, out[1].data(), out[0].data(), nc);
		}
		same32(what, mean[1].data(), mean[0].data(), n);
		same32(what, rstd[1].data(), rstd[0].data(), n);
	}
}

static void test_residual_layernorm()
{
	residual_layernorm_case<8>(9, 768);    /* GPT-2's: 6 of a lane's 8 groups */
	residual_layernorm_case<2>(37, 96);    /* one group a lane, some lanes none */
	residual_layernorm_case<16>(3, 768);   /* more registers than the row needs */
	residual_layernorm_case<8>(3, 1000);   /* the last group part of the lanes */
	residual_layernorm_case<16>(2, 2048);  /* every register used */
}

/* GELU forward and backward in place and the residual into its first
 * input, on n values starting off values into the buffers (off 1: the
 * packed views are not 8-byte aligned, so the scalar loop runs) */
static void elementwise_case(long n, int off)
{
	char what[96];
	auto x = rand16(n + off, -4, 4), y = rand16(n + off, -1, 1);
	auto x16 = pack(x), y16 = pack(y);
	std::vector<float> o((size_t)(n + off)), yy(y), xx(x);
	std::vector<uint16_t> o16((size_t)(n + off)), yy16(y16), xx16(x16);
	int vec32 = kern_aligned_act4(0, o.data() + off, x.data() + off, x.data() + off);
	int vec16 = kern_aligned_act4(1, o16.data() + off, x16.data() + off, x16.data() + off);
	dim3 grid(3), block(64);
	emu_launch(grid, block, [&] {
		gelu_fwd_kernel(o.data() + off, x.data() + off, n, vec32, 0, g_ops);
	});
	emu_launch(grid, block, [&] {
		gelu_fwd_kernel(o16.data() + off, x16.data() + off, n, vec16, 1, g_ops);
	});
	std::snprintf(what, sizeof what, "gelu out n=%ld off=%d vec=%d", n, off, vec16);
	same16(what, o16.data() + off, o.data() + off, n);
	std::vector<float> ref((size_t)n);
	kern_gelu_fwd_ref(ref.data(), x.data() + off, n);
	for (auto &v : ref)
		v = value16(bits16(v));
	std::snprintf(what, sizeof what, "gelu out n=%ld vs reference", n);
	close(what, o.data() + off, ref.data(), n, 1e-6, g_ops == 2 ? 0x1p-7 : 0x1p-10);

	emu_launch(grid, block, [&] {
		gelu_bwd_kernel(yy.data() + off, x.data() + off, yy.data() + off, n, vec32, 1, 0, g_ops);
	});
	emu_launch(grid, block, [&] {
		gelu_bwd_kernel(yy16.data() + off, x16.data() + off, yy16.data() + off, n, vec16, 1, 1,
		                g_ops);
	});
	std::snprintf(what, sizeof what, "gelu dinp in place n=%ld off=%d", n, off);
	same16(what, yy16.data() + off, yy.data() + off, n);

	emu_launch(grid, block, [&] {
		residual_fwd_kernel(xx.data() + off, xx.data() + off, o.data() + off, n, vec32, 0, g_ops);
	});
	emu_launch(grid, block, [&] {
		residual_fwd_kernel(xx16.data() + off, xx16.data() + off, o16.data() + off, n, vec16, 1,
		                    g_ops);
	});
	std::snprintf(what, sizeof what, "residual n=%ld off=%d", n, off);
	same16(what, xx16.data() + off, xx.data() + off, n);
	std::vector<float> rres((size_t)n);
	kern_residual_fwd_ref(rres.data(), x.data() + off, o.data() + off, n);
	for (auto &v : rres)
		v = value16(bits16(v));
	std::snprintf(what, sizeof what, "residual n=%ld vs reference", n);
	close(what, xx.data() + off, rres.data(), n, 0, 0);
	/* the residual's backward (fp32 buffers only): both gradients add dout */
	std::vector<float> da(y), db(x), rda(y), rdb(x);
	int vecb = kern_aligned16(da.data() + off, db.data() + off, o.data() + off);
	emu_launch(grid, block, [&] {
		residual_bwd_kernel(da.data() + off, db.data() + off, o.data() + off, n, vecb, g_ops);
	});
	kern_residual_bwd_ref(rda.data() + off, rdb.data() + off, o.data() + off, n);
	for (long i = off; i < n + off; i++) {   /* as the kernel stores them */
		rda[(size_t)i] = value16(bits16(rda[(size_t)i]));
		rdb[(size_t)i] = value16(bits16(rdb[(size_t)i]));
	}
	std::snprintf(what, sizeof what, "residual backward n=%ld off=%d", n, off);
	close(what, da.data() + off, rda.data() + off, n, 0, 0);
	close(what, db.data() + off, rdb.data() + off, n, 0, 0);
}

static void test_elementwise()
{
	for (long n : { 1L, 3L, 4L, 7L, 64L, 1003L }) {
		elementwise_case(n, 0);
		elementwise_case(n, 1);
	}
}

/* The forward and _set backward in one kernel (xent_fwd_bwd_kernel) on the
 * fp32 logits x and their packed x16: losses, lse and dlogits (padding
 * columns untouched: zeros) the bits the two kernels gave (l, lse, d, d16;
 * NaNs too) */
static void xent_one_pass(const std::vector<float> &x, const std::vector<uint16_t> &x16,
                          const std::vector<int> &tgt, int v, int ld, int vec,
                          const std::vector<float> &l, const std::vector<float> &lse,
                          const std::vector<float> &d, const std::vector<uint16_t> &d16)
{
	int n = (int)tgt.size();
	auto bits = [](const void *a, const void *b, size_t bytes) { return !std::memcmp(a, b, bytes); };
	for (int a16 = 0; a16 < 2; a16++) {
		std::vector<float> l1(n, -1.0f), lse1(n, -1.0f), d1(d.size(), 0.0f);
		std::vector<uint16_t> h1(d16.size(), 0);
		emu_launch(dim3(n), dim3(XENT_FWD_THREADS), [&] {
			if (a16)
				xent_fwd_bwd_kernel(l1.data(), lse1.data(), h1.data(), 0.37f, x16.data(), ld,
				                    tgt.data(), v, vec, 1, g_ops);
			else
				xent_fwd_bwd_kernel(l1.data(), lse1.data(), d1.data(), 0.37f, x.data(), ld,
				                    tgt.data(), v, vec, 0, g_ops);
		});
		CHECK_MSG(bits(l1.data(), l.data(), sizeof(float) * n) &&
		          bits(lse1.data(), lse.data(), sizeof(float) * n),
		          "%s xent in one pass (a16 %d, vec %d, v %d): losses or lse differ", ty(), a16,
		          vec, v);
		CHECK_MSG(a16 ? bits(h1.data(), d16.data(), sizeof(uint16_t) * h1.size())
		              : bits(d1.data(), d.data(), sizeof(float) * d1.size()),
		          "%s xent in one pass (a16 %d, vec %d, v %d): dlogits differ", ty(), a16, vec, v);
	}
}

/* the forward and backward over n rows of v logits ld apart, fp32 and
 * 16-bit storage, with vec (groups of eight) as asked: the two storages the
 * same bits; losses and lse into l, lse, dlogits (set, then accumulated
 * once more) into d */
static void xent_case(int n, int v, int ld, int vec, std::vector<float> &l,
                      std::vector<float> &lse, std::vector<float> &d)
{
	long total = (long)n * ld;
	uint64_t keep = rng;
	rng = 77;                        /* the same logits for every case of n, ld */
	auto x = rand16(total, -8, 8);
	rng = keep;
	/* a row with an -inf logit, a row with a NaN (its loss NaN) */
	x[(size_t)1 * ld + 5] = -INFINITY;
	x[(size_t)6 * ld + 2] = NAN;
	auto x16 = pack(x);
	std::vector<int> tgt(n);
	for (int i = 0; i < n; i++)
		tgt[i] = i == 4 ? -1 : (i * 37) % v;
	l.assign(n, 0.0f);
	lse.assign(n, 0.0f);
	std::vector<float> l16(n), lse16(n);
	emu_launch(dim3(n), dim3(XENT_FWD_THREADS), [&] {
		xent_fwd_kernel(l.data(), lse.data(), x.data(), ld, tgt.data(), v, vec, 0, g_ops);
	});
	emu_launch(dim3(n), dim3(XENT_FWD_THREADS), [&] {
		xent_fwd_kernel(l16.data(), lse16.data(), x16.data(), ld, tgt.data(), v, vec, 1, g_ops);
	});
	same32("xent losses", l16.data(), l.data(), n);
	same32("xent lse", lse16.data(), lse.data(), n);
	CHECK_MSG(std::isnan(l[6]) && !std::isnan(l[1]), "xent: a NaN logit's loss %g, -inf's %g",
	          l[6], l[1]);
	x[(size_t)6 * ld + 2] = 0.0f;    /* the reference has no NaN to compare */
	std::vector<float> packed((size_t)n * v), rl(n), rlse(n);
	for (int r = 0; r < n; r++)
		std::memcpy(packed.data() + (size_t)r * v, x.data() + (size_t)r * ld, sizeof(float) * v);
	kern_softmax_xent_fwd_ref(rl.data(), rlse.data(), packed.data(), tgt.data(), n, v);
	l[6] = rl[6];
	close("xent losses vs reference", l.data(), rl.data(), n, 1e-5, 1e-5);
	l[6] = NAN;
	x[(size_t)6 * ld + 2] = NAN;

	d.assign(total, 0.0f);
	std::vector<uint16_t> d16(total, 0);
	dim3 grid(n, (unsigned)((v + XENT_BWD_THREADS * XENT_BWD_PER_THREAD - 1) /
	                        (XENT_BWD_THREADS * XENT_BWD_PER_THREAD)));
	for (int set : { 1, 0 }) {
		emu_launch(grid, dim3(XENT_BWD_THREADS), [&] {
			xent_bwd_kernel(d.data(), 0.37f, x.data(), ld, lse.data(), tgt.data(), v, set, vec,
			                0, g_ops);
		});
		emu_launch(grid, dim3(XENT_BWD_THREADS), [&] {
			xent_bwd_kernel(d16.data(), 0.37f, x16.data(), ld, lse.data(), tgt.data(), v, set,
			                vec, 1, g_ops);
		});
		same16(set ? "xent dlogits (padding included)" : "xent dlogits accumulated",
		       d16.data(), d.data(), total);
		if (set)
			xent_one_pass(x, x16, tgt, v, ld, vec, l, lse, d, d16);
	}
}

static void test_softmax_xent()
{
	const int n = 9, v = 1001, ld = 1024;
	std::vector<float> l, lse, d, l1, lse1, d1;
	/* groups of eight against one at a time: lse summed in another order
	 * (within a few ulp), dlogits element by element the same */
	xent_case(n, v, ld, 1, l, lse, d);
	xent_case(n, v, ld, 0, l1, lse1, d1);
	CHECK_MSG(std::isnan(lse[6]) && std::isnan(lse1[6]), "%s xent: a NaN logit's lse", ty());
	l[6] = l1[6] = lse[6] = lse1[6] = 0.0f;
	close("xent lse, vec against not", lse.data(), lse1.data(), n, 0, 4e-7);
	close("xent losses, vec against not", l.data(), l1.data(), n, 2e-6, 2e-6);
	bool same_d = true;
	for (size_t i = 0; i < d.size() && same_d; i++)
		same_d = std::isnan(d[i]) ? std::isnan(d1[i]) : d[i] == d1[i] ||
		         std::fabs(d[i] - d1[i]) <= 2e-6 * std::fabs(d1[i]);
	CHECK_MSG(same_d, "%s xent dlogits: vec against not", ty());
	/* rows of another length than a multiple of eight */
	xent_case(n, 1001, 1003, 0, l1, lse1, d1);
	/* v a multiple of eight: no element left over */
	xent_case(n, 1000, 1000, 1, l1, lse1, d1);
	/* several groups a thread (1536 of 512 threads), five left over */
	xent_case(n, 12293, 12296, 1, l1, lse1, d1);

	const long total = (long)n * ld;
	auto x = rand16(total, -8, 8);
	auto x16 = pack(x);
	std::vector<int> best(n), best16(n);
	emu_launch(dim3(n), dim3(XENT_FWD_THREADS), [&] {
		argmax_kernel(best.data(), x.data(), ld, v, 0, g_ops);
	});
	emu_launch(dim3(n), dim3(XENT_FWD_THREADS), [&] {
		argmax_kernel(best16.data(), x16.data(), ld, v, 1, g_ops);
	});
	CHECK_MSG(best == best16, "%s argmax differs", ty());
	for (int r = 0; r < n; r++) {
		int want = 0;
		for (int j = 1; j < v; j++)
			if (x[(size_t)r * ld + j] > x[(size_t)r * ld + want])
				want = j;
		CHECK_MSG(best[(size_t)r] == want, "%s argmax row %d: %d, the scan's %d", ty(), r,
		          best[(size_t)r], want);
	}
}

/* attention's causal softmax over random scores: the probabilities as 16
 * bits alone (the 16-bit path) or beside fp32 ones (the fp32 path), then
 * the backward from 16-bit probabilities or fp32 ones holding them */
static void test_attention_softmax()
{
	const int t = 37;
	const long rows = 2L * 3 * t, tt = rows * t;
	std::vector<float> sc((size_t)tt), g((size_t)tt);
	for (auto &v : sc)
		v = uniform(-3, 3);
	for (auto &v : g)
		v = uniform(-1, 1);
	std::vector<float> att(sc), scores(sc);
	std::vector<uint16_t> a16a((size_t)tt), a16b((size_t)tt);
	dim3 grid((unsigned)((rows + ATT_SOFTMAX_WARPS - 1) / ATT_SOFTMAX_WARPS));
	dim3 block(ATT_SOFTMAX_WARPS * 32);
	emu_launch(grid, block, [&] {
		causal_softmax_kernel(att.data(), a16a.data(), g_ops == 2, 0, rows, t);
	});
	emu_launch(grid, block, [&] {
		causal_softmax_kernel(scores.data(), a16b.data(), g_ops == 2, 1, rows, t);
	});
	CHECK_MSG(a16a == a16b, "%s softmax: the 16-bit probabilities differ", ty());
	CHECK_MSG(scores == sc, "%s softmax: only16 wrote over the scores", ty());
	same16("softmax att (fp32 path, rounded)", a16a.data(), att.data(), tt);
	std::vector<float> ref((size_t)tt, 0.0f);
	for (long r = 0; r < rows; r++) {
		int i = (int)(r % t);
		double m = -INFINITY, sum = 0;
		for (int j = 0; j <= i; j++)
			m = std::fmax(m, sc[(size_t)(r * t + j)]);
		for (int j = 0; j <= i; j++)
			sum += std::exp(sc[(size_t)(r * t + j)] - m);
		for (int j = 0; j <= i; j++)
			ref[(size_t)(r * t + j)] = value16(bits16((float)(std::exp(sc[(size_t)(r * t + j)] - m) / sum)));
	}
	close("softmax att vs reference", att.data(), ref.data(), tt, 1e-6,
	      g_ops == 2 ? 0x1p-7 : 0x1p-10);

	std::vector<float> d32(g), d16in(g);
	std::vector<uint16_t> h32((size_t)tt), h16((size_t)tt);
	emu_launch(grid, block, [&] {
		causal_softmax_bwd_kernel(d32.data(), h32.data(), g_ops == 2, att.data(), nullptr, rows,
		                          t);
	});
	emu_launch(grid, block, [&] {
		causal_softmax_bwd_kernel(d16in.data(), h16.data(), g_ops == 2, nullptr, a16a.data(),
		                          rows, t);
	});
	CHECK_MSG(h32 == h16, "%s softmax backward: dpreatt from 16-bit probabilities differs",
	          ty());
	same16("softmax dpreatt (fp32 path, rounded)", h16.data(), d32.data(), tt);
}

/* matmul's bias gradient from a packed dout and an fp32 one (rows ld
 * apart), w columns a thread (dbias_columns): the sums into db */
template <int W>
static void dbias_case(int n, int oc, int ld, std::vector<float> &db)
{
	uint64_t keep = rng;
	rng = 5;                         /* the same dout for every case */
	auto dout = rand16((long)n * ld, -1, 1);
	rng = keep;
	auto d16 = pack(dout);
	CHECK_MSG(dbias_columns(dout.data(), oc, ld, 0, W) == W &&
	          dbias_columns(d16.data(), oc, ld, 1, W) == W,
	          "matmul dbias oc %d ld %d: %d columns a thread allowed", oc, ld, W);
	int nchunk = (n + DBIAS_ROWS - 1) / DBIAS_ROWS;
	std::vector<double> part((size_t)nchunk * oc), part16(part.size());
	db.assign(oc, 0.5f);
	std::vector<float> db16(oc, 0.5f);
	dim3 grid((unsigned)((oc + 32 * W - 1) / (32 * W)), (unsigned)nchunk), block(32, DBIAS_TY);
	emu_launch(grid, block, [&] {
		dbias_partial_kernel<W>(part.data(), dout.data(), n, oc, ld, 0, g_ops);
	});
	emu_launch(grid, block, [&] {
		dbias_partial_kernel<W>(part16.data(), d16.data(), n, oc, ld, 1, g_ops);
	});
	dim3 g2((unsigned)((oc + 31) / 32)), b2(32, DBIAS_FY);
	emu_launch(g2, b2, [&] { dbias_final_kernel(db.data(), part.data(), nchunk, oc); });
	emu_launch(g2, b2, [&] { dbias_final_kernel(db16.data(), part16.data(), nchunk, oc); });
	same32("matmul dbias", db16.data(), db.data(), oc);
	std::vector<float> ref(oc);
	for (int o = 0; o < oc; o++) {
		double sum = 0;
		for (int i = 0; i < n; i++)
			sum += dout[(size_t)i * ld + o];
		ref[(size_t)o] = (float)(0.5 + sum);
	}
	close("matmul dbias vs reference", db.data(), ref.data(), oc, 1e-5, 1e-6);
}

/* the bias gradient one column a thread, four and eight (the same sums in
 * the same order: the same bits; more columns than a block's 32 W, rows
 * past a chunk's), which of them the rows allow, and the fallback's
 * rounded sum + bias */
static void test_matmul_small()
{
	std::vector<float> db, db4, db8;
	dbias_case<1>(300, 45, 48, db);
	dbias_case<1>(300, 344, 352, db);
	dbias_case<4>(300, 344, 352, db4);
	dbias_case<8>(300, 344, 352, db8);
	same32("matmul dbias, four columns a thread against one", db4.data(), db.data(), 344);
	same32("matmul dbias, eight columns a thread against one", db8.data(), db.data(), 344);
	std::vector<uint16_t> rows(64 * 24 + 8);
	uint16_t *al = (uint16_t *)(((uintptr_t)rows.data() + 15) & ~(uintptr_t)15);
	CHECK(dbias_columns(al, 24, 24, 1, 8) == 8 && dbias_columns(al, 24, 24, 1, 4) == 4 &&
	      dbias_columns(al + 4, 24, 24, 1, 8) == 4 && dbias_columns(al + 2, 24, 24, 1, 8) == 1 &&
	      dbias_columns(al, 20, 20, 1, 8) == 4 && dbias_columns(al, 24, 26, 1, 8) == 1);
	const int n = 300, oc = 45, ld = 48;
	std::vector<float> tmp((size_t)n * oc), bias(oc);
	for (auto &v : tmp)
		v = uniform(-2, 2);
	for (auto &v : bias)
		v = uniform(-1, 1);
	long total = (long)n * oc;
	/* the bias broadcast (fp32 path's fallback): rows ld apart, padding kept */
	std::vector<float> bc((size_t)n * ld, -7.0f);
	emu_launch(dim3(4), dim3(64), [&] {
		broadcast_rows_kernel(bc.data(), bias.data(), total, oc, ld);
	});
	int wrong = 0;
	for (int i = 0; i < n; i++)
		for (int j = 0; j < ld; j++)
			wrong += bc[(size_t)i * ld + j] != (j < oc ? bias[(size_t)j] : -7.0f);
	CHECK_MSG(!wrong, "%s bias broadcast: %d values wrong", ty(), wrong);
	/* the product, then an empty one (no tmp: the bias alone) */
	for (int empty = 0; empty < 2; empty++) {
		std::vector<uint16_t> out((size_t)n * ld, 0x7777);
		const float *t = empty ? nullptr : tmp.data();
		emu_launch(dim3(4), dim3(64), [&] {
			bias_store16_kernel(out.data(), t, bias.data(), total, oc, ld, g_ops);
		});
		int bad = 0;
		for (int i = 0; i < n && !bad; i++)
			for (int j = 0; j < ld; j++) {
				float x = j < oc ? (t ? t[(size_t)i * oc + j] : 0.0f) + bias[(size_t)j] : 0;
				uint16_t want = j < oc ? bits16(x) : 0x7777;
				if (out[(size_t)i * ld + j] != want) {
					CHECK_MSG(0, "%s bias store%s: [%d, %d] %#06x, want %#06x", ty(),
					          empty ? " (empty product)" : "", i, j,
					          out[(size_t)i * ld + j], want);
					bad = 1;
					break;
				}
			}
	}
}

/* The hash a GEMM's same-bits tuning compares outputs by (bits_hash_kernel):
 * the host's sum of the same terms, whatever the grid; blind to what lies
 * between the columns; moved by one bit of one element, and by two
 * elements swapped. The pattern it fills C with (bits_fill_kernel): every
 * value of magnitude 0.25 to 1, of both signs, the same for any grid, the
 * gaps between the columns left as they were. */
template <typename E>
static void gemm_bits_case(int bf16)
{
	const long rows = 37, cols = 23, ld = 40;
	const int es = (int)sizeof(E);
	std::vector<E> m((size_t)(ld * cols));
	for (auto &v : m)
		v = (E)(uint32_t)(uniform(0, 1) * 4294967295.0);
	auto hash = [&](const std::vector<E> &x, unsigned grid, unsigned block) {
		unsigned long long h = 0;
		emu_launch(dim3(grid), dim3(block), [&] {
			bits_hash_kernel(&h, x.data(), es, rows, cols, ld);
		});
		return h;
	};
	unsigned long long want = 0;
	for (long e = 0; e < rows * cols; e++)
		want += bits_mix64((uint64_t)m[(size_t)(e / rows * ld + e % rows)] +
		                   (uint64_t)e * 0x9e3779b97f4a7c15ull);
	unsigned long long h = hash(m, 1, 32);
	CHECK_MSG(h == want && hash(m, 3, 64) == want && hash(m, 40, 32) == want,
	          "gemm bits hash (%d bytes): %#llx, want %#llx", es, h, want);
	auto gap = m;
	gap[(size_t)(2 * ld + rows + 1)] ^= 1;
	CHECK_MSG(hash(gap, 2, 32) == want, "gemm bits hash (%d bytes): moved by the gaps", es);
	auto bit = m;
	bit[(size_t)(5 * ld + 7)] ^= 1;
	CHECK_MSG(hash(bit, 2, 32) != want, "gemm bits hash (%d bytes): one bit not seen", es);
	auto swap = m;
	const size_t p1 = (size_t)(3 * ld + 1), p2 = p1 + 1;
	swap[p2] = (E)(swap[p1] + 1);
	auto swapped = swap;
	std::swap(swapped[p1], swapped[p2]);
	CHECK_MSG(hash(swap, 2, 32) != hash(swapped, 2, 32),
	          "gemm bits hash (%d bytes): two elements swapped not seen", es);

	std::vector<E> f1(m.size(), (E)7), f2(f1);
	emu_launch(dim3(1), dim3(32), [&] {
		bits_fill_kernel(f1.data(), es, bf16, rows, cols, ld);
	});
	emu_launch(dim3(5), dim3(64), [&] {
		bits_fill_kernel(f2.data(), es, bf16, rows, cols, ld);
	});
	CHECK_MSG(f1 == f2, "gemm bits fill (%d bytes): another grid, other values", es);
	int bad = 0, neg = 0;
	for (long j = 0; j < cols; j++)
		for (long i = 0; i < ld; i++) {
			E bits = f1[(size_t)(j * ld + i)];
			if (i >= rows) {
				bad += bits != (E)7;
				continue;
			}
			float v;
			if (es == 4) {
				uint32_t u = (uint32_t)bits;
				std::memcpy(&v, &u, sizeof v);
			} else {
				uint16_t u = (uint16_t)bits;
				if (bf16)
					kern_bf16_to_fp32_cpu(&v, &u, 1);
				else
					kern_fp16_to_fp32_cpu(&v, &u, 1);
			}
			bad += !(std::fabs(v) >= 0.25f && std::fabs(v) < 1.0f);
			neg += v < 0;
		}
	CHECK_MSG(!bad && neg > rows * cols / 4 && neg < rows * cols * 3 / 4,
	          "gemm bits fill (%d bytes, bf16 %d): %d values out of place, %d of %ld negative",
	          es, bf16, bad, neg, rows * cols);
}

static void test_gemm_bits()
{
	gemm_bits_case<uint32_t>(0);
	gemm_bits_case<uint16_t>(1);
	gemm_bits_case<uint16_t>(0);
}

/* the embedding's forward into a packed buffer and an fp32 one, and its
 * backward from a packed dout and an fp32 one (the positions sorted by
 * token as CUB's stable radix sort leaves them) */
static void test_embedding()
{
	const int b = 3, t = 29, c = 40, vocab = 23;
	const long rows = (long)b * t, btc = rows * c;
	std::vector<int> tokens((size_t)rows);
	for (long r = 0; r < rows; r++)
		tokens[(size_t)r] = (int)((r * 7 + r / 5) % (r % 3 ? vocab : 5));
	auto wte = rand16((long)vocab * c, -1, 1), wpe = rand16((long)t * c, -1, 1);
	std::vector<float> out((size_t)btc);
	std::vector<uint16_t> out16((size_t)btc);
	emu_launch(dim3(5), dim3(EMB_THREADS), [&] {
		embedding_fwd_kernel(out.data(), tokens.data(), wte.data(), wpe.data(), btc, t, c, 0,
		                     g_ops);
	});
	emu_launch(dim3(5), dim3(EMB_THREADS), [&] {
		embedding_fwd_kernel(out16.data(), tokens.data(), wte.data(), wpe.data(), btc, t, c, 1,
		                     g_ops);
	});
	same16("embedding out", out16.data(), out.data(), btc);

	auto dout = rand16(btc, -1, 1);
	auto d16 = pack(dout);
	std::vector<unsigned> tok_sorted((size_t)rows), pos_sorted((size_t)rows);
	emu_launch(dim3(2), dim3(EMB_THREADS), [&] { iota_kernel(pos_sorted.data(), rows); });
	for (long r = 0; r < rows; r++)
		CHECK(pos_sorted[(size_t)r] == (unsigned)r);
	std::stable_sort(pos_sorted.begin(), pos_sorted.end(),
	                 [&](unsigned x, unsigned y) { return tokens[x] < tokens[y]; });
	for (long r = 0; r < rows; r++)
		tok_sorted[(size_t)r] = (unsigned)tokens[pos_sorted[(size_t)r]];
	std::vector<float> dwte((size_t)vocab * c, 0.25f), dwte16(dwte), dwpe((size_t)t * c, 0.5f);
	std::vector<float> dwpe16(dwpe);
	emu_launch(dim3((unsigned)rows), dim3(EMB_DWTE_THREADS), [&] {
		dwte_kernel(dwte.data(), dout.data(), tok_sorted.data(), pos_sorted.data(), rows, c, 0,
		            g_ops);
	});
	emu_launch(dim3((unsigned)rows), dim3(EMB_DWTE_THREADS), [&] {
		dwte_kernel(dwte16.data(), d16.data(), tok_sorted.data(), pos_sorted.data(), rows, c, 1,
		            g_ops);
	});
	emu_launch(dim3(3), dim3(EMB_THREADS), [&] {
		dwpe_kernel(dwpe.data(), dout.data(), b, t, c, 0, g_ops);
	});
	emu_launch(dim3(3), dim3(EMB_THREADS), [&] {
		dwpe_kernel(dwpe16.data(), d16.data(), b, t, c, 1, g_ops);
	});
	same32("embedding dwte", dwte16.data(), dwte.data(), (long)dwte.size());
	same32("embedding dwpe", dwpe16.data(), dwpe.data(), (long)dwpe.size());
	/* the reference's order: positions in order for a token, batches in
	 * order for a position */
	std::vector<float> rte((size_t)vocab * c, 0.25f), rpe((size_t)t * c, 0.5f);
	for (long r = 0; r < rows; r++)
		for (int j = 0; j < c; j++) {
			rte[(size_t)tokens[(size_t)r] * c + j] += dout[(size_t)r * c + j];
			rpe[(size_t)(r % t) * c + j] += dout[(size_t)r * c + j];
		}
	close("embedding dwte vs reference", dwte.data(), rte.data(), (long)rte.size(), 0, 0);
	close("embedding dwpe vs reference", dwpe.data(), rpe.data(), (long)rpe.size(), 0, 0);
}

int main(void)
{
	for (g_ops = 2; g_ops >= 1; g_ops--) {
		CHECK_RUN(test_layernorm);
		CHECK_RUN(test_residual_layernorm);
		CHECK_RUN(test_elementwise);
		CHECK_RUN(test_softmax_xent);
		CHECK_RUN(test_attention_softmax);
		CHECK_RUN(test_matmul_small);
		CHECK_RUN(test_embedding);
	}
	CHECK_RUN(test_gemm_bits);
	return check_finish();
}
