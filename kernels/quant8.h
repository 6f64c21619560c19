/* kernels/quant8.h - 8-bit optimizer state, quantized block by block
 * (Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization").
 *
 * A state buffer of n values is cut into blocks of KERN_Q8_BLOCK values
 * from its first one (the last block may be shorter). A block keeps one
 * fp32 scale, the largest |x| in it (0 when all are 0), and one 8-bit code
 * per value: x ~ value(q) * scale, value() from a 256-entry table in [-1, 1].
 * Signed states (momentum m) have int8 codes q in [-127, 127], value(-q) =
 * -value(q), value(0) = 0, value(127) = 1; unsigned states (Adam's second
 * moment v) have uint8 codes q in [0, 255], value(0) = 0, value(255) = 1.
 *
 * The code map is the dynamic tree of bitsandbytes, values spread over six
 * decades: the signed magnitudes are 2^i means of linspace(0.1, 1, 2^i + 1)
 * times 10^(i-6), i = 1..6, the unsigned values 2^(i+1) such means times
 * 10^(i-6), i = 0..6; then 0 and 1. Relative resolution is about the same
 * at every size down to ~1e-6 of the block's largest (trainer/optim_q8.c
 * says why not an affine map).
 *
 * Rounding is to the nearest value, deterministic (no stochastic rounding):
 * q is the number of midpoints between consecutive table values (rounded
 * to float) that lie below x / scale, so that a tie goes to the smaller
 * magnitude; a positive value of an unsigned state never rounds to 0 (it
 * takes code 1): Adam divides by sqrt(v), and a v that rounded to 0 under
 * an m that did not would make a step of m / eps. Round trip:
 * |x - value(q(x)) * scale| <= scale * gap / 2 (+ float rounding), gap the
 * widest step between neighbouring values (kern_q8_max_gap), except for that
 * lifted tiny v. An inf or NaN makes its block's scale inf or NaN, and the
 * whole block decodes as NaN: the run is lost anyway, and it shows.
 *
 * The fused updates run, block by block, dequantize -> the fp32 update of
 * kernels/optimizer.h (its _ref per-element code, so the arithmetic is the
 * fp32 optimizer's exactly) -> requantize with the block's new absmax. The
 * weights are updated from the fresh fp32 state, as the fp32 optimizer
 * would from the dequantized one; only what is stored is rounded. Threads
 * take whole blocks: results are the same bits for any thread count.
 */
#ifndef LARCH_KERNELS_QUANT8_H
#define LARCH_KERNELS_QUANT8_H

#include <stdint.h>

#define KERN_Q8_BLOCK 2048L

/* The code map's name, as checkpoints record it ("int8-dynamic-2048") */
#define KERN_Q8_MAP_NAME "dynamic"

/* The values of the codes: signed, indexed by (uint8_t)q (index 128,
 * q = -128, is never produced and reads as -1); unsigned, indexed by q.
 * 256 floats each, static storage. */
const float *kern_q8_values_s(void);
const float *kern_q8_values_u(void);

/* The midpoints between neighbouring values that encoding counts (a
 * code's magnitude is the number of them below |x| / scale): of the signed
 * magnitudes, 127 ascending; of the unsigned values, 255 ascending. Static
 * storage. */
const float *kern_q8_midpoints_s(void);
const float *kern_q8_midpoints_u(void);

/* The widest gap between neighbouring values of the signed (u = 0) or
 * unsigned (u = 1) table: twice the worst relative round-trip error. */
double kern_q8_max_gap(int u);

/* Blocks of an n-value buffer: ceil(n / KERN_Q8_BLOCK). */
long kern_q8_blocks(long n);

/* max |x[i]|, 0 for n = 0; NaN if any x[i] is NaN. */
float kern_q8_absmax(const float *x, long n);

/* n values at one given scale (scale >= max |x|; scale 0 gives codes 0),
 * and back: x[i] = value(q[i]) * scale. */
void kern_q8_encode_s(const float *x, long n, float scale, int8_t *q);
void kern_q8_encode_u(const float *x, long n, float scale, uint8_t *q);
void kern_q8_decode_s(const int8_t *q, long n, float scale, float *x);
void kern_q8_decode_u(const uint8_t *q, long n, float scale, float *x);

/* Block-wise: scale[b] = absmax of block b, then its codes; and back.
 * _ref finds codes by a plain scan of the midpoints, _cpu by bisection,
 * threaded over blocks; both give the same codes. */
void kern_q8_quantize_s_ref(const float *x, long n, int8_t *q, float *scale);
void kern_q8_quantize_s_cpu(const float *x, long n, int8_t *q, float *scale);
void kern_q8_quantize_u_ref(const float *x, long n, uint8_t *q, float *scale);
void kern_q8_quantize_u_cpu(const float *x, long n, uint8_t *q, float *scale);
void kern_q8_dequantize_s_cpu(const int8_t *q, const float *scale, long n, float *x);
void kern_q8_dequantize_u_cpu(const uint8_t *q, const float *scale, long n, float *x);

/* Fused updates of n values whose state is block-quantized from element 0
 * (mq, ms: m's codes and block scales; vq, vs: v's): the semantics of the
 * kern_<op>_update of optimizer.h. SGD needs mu > 0 (without momentum there
 * is no state: use kern_sgd_update_cpu with m NULL). */
void kern_sgd_update_q8_cpu(float *w, int8_t *mq, float *ms, const float *g, long n,
                            float lr, float mu, float wd, int nesterov);
void kern_adamw_update_q8_cpu(float *w, int8_t *mq, float *ms, uint8_t *vq, float *vs,
                              const float *g, long n, float lr, float b1, float b2, float eps,
                              float wd, float bc1, float bc2);
void kern_lars_update_q8_cpu(float *w, int8_t *mq, float *ms, const float *g, long n,
                             float step, float mu, float wd);

/* LAMB in two passes over int8 state. Pass 1 changes nothing: it returns
 * ||u||^2 of the moments this step makes (kern_lamb_moments's sum, per
 * block in order, then per chunk of kern_q8_norm_chunk(blocks) blocks in
 * order, then the chunks in order: a layout that depends on n only, which
 * the GPU's version keeps too). Pass 2
 * makes the same moments again, applies w -= step * u and stores them. */
/* The LAMB norm's blocks are summed in at most KERN_Q8_NORM_CHUNKS chunks
 * of this many blocks each (the last may hold fewer). */
#define KERN_Q8_NORM_CHUNKS 1024L
long kern_q8_norm_chunk(long blocks);
double kern_lamb_norm_q8_cpu(const int8_t *mq, const float *ms, const uint8_t *vq,
                             const float *vs, const float *g, const float *w, long n, float b1,
                             float b2, float eps, float wd, float bc1, float bc2);
void kern_lamb_update_q8_cpu(float *w, int8_t *mq, float *ms, uint8_t *vq, float *vs,
                             const float *g, long n, float step, float b1, float b2, float eps,
                             float wd, float bc1, float bc2);

#endif
