/* kernels/attention_cpu.c - causal multi-head attention forward and backward:
 * the plain reference and the BLAS-based CPU version; see attention.h.
 *
 * CPU version. Each (batch, head) pair is cut into row tiles of TILE rows;
 * a tile's scores need only the keys up to its last row, so the GEMMs skip
 * the masked half of the [t, t] products (all but a TILE-wide band). The
 * work items, (pair, tile), run on OpenMP threads and call kern_sgemm, which
 * OpenBLAS's OpenMP build runs single-threaded inside a parallel region.
 * q, k and v are read in place inside qkv (row stride 3c), never copied.
 * Scores are formed in att and softmaxed in place, and datt is turned into
 * dpreatt in place, which saves a [t, t] pass each: preatt and dpreatt, the
 * header's scratch, go unused.
 *
 * A row tile's cost grows with its index (forward, dq) or shrinks with it
 * (dk, dv), so each item takes tile f together with tile ntiles-1-f: every
 * item then costs about the same and a static schedule stays balanced.
 * Items write disjoint outputs and the backward's two sweeps are separated
 * by a barrier, so results do not depend on the thread count.
 */
#include "attention.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "blas.h"
#include "vecmath.h"

/* TILE: rows per tile. Larger tiles run the GEMMs closer to peak (OpenBLAS
 * repacks an operand per call) but compute more of the masked triangle;
 * 32..128 were within 10% of each other at t = 256 and 1024. */
enum { TILE = 64 };

/* ---- reference ------------------------------------------------------------ */

void kern_attention_fwd_ref(float *out, float *preatt, float *att, const float *qkv,
                            int b, int t, int c, int nh)
{
	int hs = c / nh;
	double scale = 1.0 / sqrt(hs);
	for (int bb = 0; bb < b; bb++)
		for (int h = 0; h < nh; h++)
			for (int i = 0; i < t; i++) {
				const float *q = qkv + ((size_t)bb * t + i) * 3 * c + (size_t)h * hs;
				float *pre = preatt + (((size_t)bb * nh + h) * t + i) * t;
				float *a = att + (((size_t)bb * nh + h) * t + i) * t;
				double mx = -INFINITY;
				for (int j = 0; j <= i; j++) {
					const float *k = qkv + ((size_t)bb * t + j) * 3 * c + c + (size_t)h * hs;
					double d = 0;
					for (int e = 0; e < hs; e++)
						d += (double)q[e] * k[e];
					pre[j] = (float)(d * scale);
					if (pre[j] > mx)
						mx = pre[j];
				}
				double s = 0;
				for (int j = 0; j <= i; j++)
					s += exp(pre[j] - mx);
				for (int j = 0; j < t; j++) {
					a[j] = j <= i ? (float)(exp(pre[j] - mx) / s) : 0.0f;
					if (j > i)
						pre[j] = 0;
				}
				float *o = out + ((size_t)bb * t + i) * c + (size_t)h * hs;
				for (int e = 0; e < hs; e++) {
					double y = 0;
					for (int j = 0; j <= i; j++)
						y += (double)a[j] * qkv[((size_t)bb * t + j) * 3 * c + 2 * c + (size_t)h * hs + e];
					o[e] = (float)y;
				}
			}
}

void kern_attention_bwd_ref(float *dqkv, float *dpreatt, float *datt, const float *dout,
                            const float *qkv, const float *att, int b, int t, int c, int nh)
{
	int hs = c / nh;
	double scale = 1.0 / sqrt(hs);
	for (int bb = 0; bb < b; bb++)
		for (int h = 0; h < nh; h++)
			for (int i = 0; i < t; i++) {
				size_t row = (((size_t)bb * nh + h) * t + i) * t;
				const float *a = att + row;
				float *da = datt + row, *dpre = dpreatt + row;
				const float *dy = dout + ((size_t)bb * t + i) * c + (size_t)h * hs;
				const float *q = qkv + ((size_t)bb * t + i) * 3 * c + (size_t)h * hs;
				float *dq = dqkv + ((size_t)bb * t + i) * 3 * c + (size_t)h * hs;
				/* out_i = sum_j att_ij v_j */
				for (int j = 0; j <= i; j++) {
					const float *v = qkv + ((size_t)bb * t + j) * 3 * c + 2 * c + (size_t)h * hs;
					float *dv = dqkv + ((size_t)bb * t + j) * 3 * c + 2 * c + (size_t)h * hs;
					double d = 0;
					for (int e = 0; e < hs; e++) {
						d += (double)dy[e] * v[e];
						dv[e] += a[j] * dy[e];
					}
					da[j] = (float)d;
				}
				/* softmax: dpre_ij = att_ij (datt_ij - sum_k att_ik datt_ik) */
				double s = 0;
				for (int j = 0; j <= i; j++)
					s += (double)a[j] * da[j];
				for (int j = 0; j < t; j++) {
					dpre[j] = j <= i ? (float)(a[j] * (da[j] - s)) : 0.0f;
					if (j > i)
						da[j] = 0;
				}
				/* pre_ij = scale q_i . k_j */
				for (int j = 0; j <= i; j++) {
					const float *k = qkv + ((size_t)bb * t + j) * 3 * c + c + (size_t)h * hs;
					float *dk = dqkv + ((size_t)bb * t + j) * 3 * c + c + (size_t)h * hs;
					for (int e = 0; e < hs; e++) {
						dq[e] += (float)(scale * dpre[j] * k[e]);
						dk[e] += (float)(scale * dpre[j] * q[e]);
					}
				}
			}
}

void kern_attention_bwd_set_ref(float *dqkv, float *dpreatt, float *datt, const float *dout,
                                const float *qkv, const float *att, int b, int t, int c, int nh)
{
	if (b > 0 && t > 0 && c > 0)
		memset(dqkv, 0, sizeof(float) * (size_t)b * t * 3 * c);
	kern_attention_bwd_ref(dqkv, dpreatt, datt, dout, qkv, att, b, t, c, nh);
}

/* ---- optimised CPU version -------------------------------------------------- */


/* In place: a[0..n) = softmax(a[0..n)), a[n..t) = 0. The max is exact in
 * any order, so a vector reduction is safe for it; the sum is not. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void softmax_row(float *a, int n, int t)
{
	float m = a[0];
#pragma omp simd reduction(max : m)
	for (int j = 1; j < n; j++)
		m = a[j] > m ? a[j] : m;
#pragma omp simd
	for (int j = 0; j < n; j++)
		a[j] = kern_exp_neg(a[j] - m);
	float inv = 1.0f / kern_row_sum(a, n);
#pragma omp simd
	for (int j = 0; j < n; j++)
		a[j] *= inv;
	if (t > n)
		memset(a + n, 0, sizeof(float) * (size_t)(t - n));
}

/* In place: d[0..n) = a * (d - sum(a * d)) over the n visible keys, turning
 * datt into dpreatt; d[n..end) = 0. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void softmax_bwd_row(float *d, const float *a, int n, int end)
{
	float acc[KERN_LANES] = { 0 };
	int j = 0;
	for (; j + KERN_LANES <= n; j += KERN_LANES)
		for (int l = 0; l < KERN_LANES; l++)
			acc[l] += a[j + l] * d[j + l];
	for (int l = 0; j < n; j++, l++)
		acc[l] += a[j] * d[j];
	float s = kern_lanes_total(acc);
#pragma omp simd
	for (j = 0; j < n; j++)
		d[j] = a[j] * (d[j] - s);
	if (end > n)
		memset(d + n, 0, sizeof(float) * (size_t)(end - n));
}

/* One (batch, head) pair: pointers to its first q column in qkv and dqkv,
 * its column of out and dout, and its [t, t] blocks. Row strides: 3c in qkv
 * and dqkv, c in out and dout, t in att and datt. */
struct head {
	const float *qkv;
	float *dqkv;
	float *out;
	const float *dout;
	float *att_w;           /* forward: scores, then att, in place */
	const float *att;       /* backward */
	float *datt;            /* backward: datt, then dpreatt, in place */
	int t, c, hs;
	float scale;
	float dbeta;            /* backward: 1 adds into dqkv, 0 overwrites it */
};

/* The pair's views of the arrays; NULL arrays (those a sweep does not use)
 * stay NULL. */
static struct head head_at(int pair, int t, int c, int nh, const float *qkv, float *dqkv,
                           float *out, const float *dout, float *att_w, const float *att,
                           float *datt)
{
	int hs = c / nh;
	size_t o_qkv = (size_t)(pair / nh) * t * 3 * c + (size_t)(pair % nh) * hs;
	size_t o_out = (size_t)(pair / nh) * t * c + (size_t)(pair % nh) * hs;
	size_t o_tt = (size_t)pair * t * t;
	return (struct head){
		.qkv = qkv + o_qkv,
		.dqkv = dqkv ? dqkv + o_qkv : NULL,
		.out = out ? out + o_out : NULL,
		.dout = dout ? dout + o_out : NULL,
		.att_w = att_w ? att_w + o_tt : NULL,
		.att = att ? att + o_tt : NULL,
		.datt = datt ? datt + o_tt : NULL,
		.t = t, .c = c, .hs = hs,
		.scale = (float)(1.0 / sqrt(hs)),
		.dbeta = 1.0f,
	};
}

/* Which row tiles item f covers: f and its mirror ntiles-1-f. */
static int item_tiles(int f, int ntiles, int tiles[2])
{
	tiles[0] = f;
	tiles[1] = ntiles - 1 - f;
	return tiles[1] == f ? 1 : 2;
}

/* Rows [i0, i1): scores against keys [0, i1), softmax, then att @ v. The
 * scores go straight into att: preatt is not needed. */
static void fwd_tile(const struct head *hd, int i0, int i1)
{
	int t = hd->t, c = hd->c, m = i1 - i0;
	float *a = hd->att_w + (size_t)i0 * t;
	kern_sgemm(KERN_NO_TRANS, KERN_TRANS, m, i1, hd->hs, hd->scale,
	           hd->qkv + (size_t)i0 * 3 * c, 3 * c, hd->qkv + c, 3 * c, 0.0f, a, t);
	for (int i = i0; i < i1; i++)
		softmax_row(hd->att_w + (size_t)i * t, i + 1, t);
	kern_sgemm(KERN_NO_TRANS, KERN_NO_TRANS, m, hd->hs, i1, 1.0f, a, t,
	           hd->qkv + 2 * c, 3 * c, 0.0f, hd->out + (size_t)i0 * c, c);
}

/* Rows [i0, i1) of datt, turned into dpreatt in place (zero above the
 * diagonal up to column i1, which the column sweep reads), then dq. */
static void bwd_row_tile(const struct head *hd, int i0, int i1)
{
	int t = hd->t, c = hd->c, m = i1 - i0;
	float *d = hd->datt + (size_t)i0 * t;
	kern_sgemm(KERN_NO_TRANS, KERN_TRANS, m, i1, hd->hs, 1.0f,
	           hd->dout + (size_t)i0 * c, c, hd->qkv + 2 * c, 3 * c, 0.0f, d, t);
	for (int i = i0; i < i1; i++)
		softmax_bwd_row(hd->datt + (size_t)i * t, hd->att + (size_t)i * t, i + 1, i1);
	kern_sgemm(KERN_NO_TRANS, KERN_NO_TRANS, m, hd->hs, i1, hd->scale, d, t,
	           hd->qkv + c, 3 * c, hd->dbeta, hd->dqkv + (size_t)i0 * 3 * c, 3 * c);
}

/* Rows [j0, j1) of dk and dv: only queries j0.. see these keys. Each
 * element of dqkv is written by one GEMM (dq by its row tile, dk and dv by
 * their column tile), so with dbeta = 0 they overwrite dqkv entirely. */
static void bwd_col_tile(const struct head *hd, int j0, int j1)
{
	int t = hd->t, c = hd->c, m = j1 - j0;
	size_t diag = (size_t)j0 * t + j0;
	kern_sgemm(KERN_TRANS, KERN_NO_TRANS, m, hd->hs, t - j0, 1.0f,
	           hd->att + diag, t, hd->dout + (size_t)j0 * c, c,
	           hd->dbeta, hd->dqkv + (size_t)j0 * 3 * c + 2 * c, 3 * c);
	kern_sgemm(KERN_TRANS, KERN_NO_TRANS, m, hd->hs, t - j0, hd->scale,
	           hd->datt + diag, t, hd->qkv + (size_t)j0 * 3 * c, 3 * c,
	           hd->dbeta, hd->dqkv + (size_t)j0 * 3 * c + c, 3 * c);
}

void kern_attention_fwd_cpu(float *out, float *preatt, float *att, const float *qkv,
                            int b, int t, int c, int nh)
{
	int ntiles = (t + TILE - 1) / TILE, nfold = (ntiles + 1) / 2;
	int items = b * nh * nfold;
#pragma omp parallel for schedule(static)
	for (int it = 0; it < items; it++) {
		struct head hd = head_at(it / nfold, t, c, nh, qkv, NULL, out, NULL, att, att, NULL);
		int tiles[2], nt = item_tiles(it % nfold, ntiles, tiles);
		for (int k = 0; k < nt; k++) {
			int i0 = tiles[k] * TILE, i1 = i0 + TILE < t ? i0 + TILE : t;
			fwd_tile(&hd, i0, i1);
		}
	}
}

static void attention_bwd(float *dqkv, float *datt, const float *dout, const float *qkv,
                          const float *att, int b, int t, int c, int nh, float dbeta)
{
	int ntiles = (t + TILE - 1) / TILE, nfold = (ntiles + 1) / 2;
	int items = b * nh * nfold;
#pragma omp parallel
	{
		/* sweep 1 by query rows: datt, dpreatt, dq */
#pragma omp for schedule(static)
		for (int it = 0; it < items; it++) {
			struct head hd = head_at(it / nfold, t, c, nh, qkv, dqkv, NULL, dout, NULL,
			                         att, datt);
			hd.dbeta = dbeta;
			int tiles[2], nt = item_tiles(it % nfold, ntiles, tiles);
			for (int k = 0; k < nt; k++) {
				int i0 = tiles[k] * TILE, i1 = i0 + TILE < t ? i0 + TILE : t;
				bwd_row_tile(&hd, i0, i1);
			}
		}
		/* (implicit barrier) sweep 2 by key rows: dk and dv need dpreatt
		 * from every later row tile */
#pragma omp for schedule(static)
		for (int it = 0; it < items; it++) {
			struct head hd = head_at(it / nfold, t, c, nh, qkv, dqkv, NULL, dout, NULL,
			                         att, datt);
			hd.dbeta = dbeta;
			int tiles[2], nt = item_tiles(it % nfold, ntiles, tiles);
			for (int k = 0; k < nt; k++) {
				int j0 = tiles[k] * TILE, j1 = j0 + TILE < t ? j0 + TILE : t;
				bwd_col_tile(&hd, j0, j1);
			}
		}
	}
}

void kern_attention_bwd_cpu(float *dqkv, float *dpreatt, float *datt, const float *dout,
                            const float *qkv, const float *att, int b, int t, int c, int nh)
{
	attention_bwd(dqkv, datt, dout, qkv, att, b, t, c, nh, 1.0f);
}

void kern_attention_bwd_set_cpu(float *dqkv, float *dpreatt, float *datt, const float *dout,
                                const float *qkv, const float *att, int b, int t, int c, int nh)
{
	attention_bwd(dqkv, datt, dout, qkv, att, b, t, c, nh, 0.0f);
}
