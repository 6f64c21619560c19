/* tests/gpu/test_cuda_layernorm.c - kernels/layernorm_cuda.cu against the
 * reference (layernorm_cpu.c): forward (out, mean, rstd), backward adding
 * into dinp, dweight and dbias, the _set backward over NaN, accumulation
 * (adding gives exactly the initial values + what _set and a zero start
 * give), run-to-run determinism.
 *
 * Tolerances (want = _ref in double), those of the CPU version:
 *   out 1e-5 + 1e-5 rel; mean 1e-6 + 1e-5 rel; rstd 1e-5 rel;
 *   dinp 1e-5 + 1e-4 rel; dweight, dbias 1e-4 + 1e-4 rel.
 * fp32 row sums of up to c terms (a warp's lanes each sum c/32, then a
 * tree), and sums over n rows for dweight/dbias (8 rows in fp32, then the
 * partials in double).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "kernels/cuda_common.h"
#include "kernels/layernorm.h"
#include "kernels/layernorm_cuda.h"
#include "kernels/matmul_cuda.h"
#include "kernels/precision.h"

static uint64_t rng = 51;

struct shape {
	int n, c;
};

static const struct shape shapes[] = {
	{ 1, 1 }, { 1, 8 }, { 7, 33 }, { 9, 31 }, { 64, 768 }, { 257, 1600 }, { 1000, 100 },
	{ 4099, 256 }, { 33, 1000 },
};

struct ln {
	int n, c;
	float *inp, *weight, *bias, *dout, *dinp0, *dw0, *db0;
	float *d_inp, *d_weight, *d_bias, *d_out, *d_mean, *d_rstd, *d_dout;
	float *d_dinp, *d_dw, *d_db;
};

static void ln_init(struct ln *s, int n, int c)
{
	long nc = (long)n * c;
	s->n = n;
	s->c = c;
	/* off-centre inputs (mean ~0.5) so the variance pass matters */
	s->inp = host_rand(nc, -2, 3, &rng);
	s->weight = host_rand(c, 0.5f, 1.5f, &rng);
	s->bias = host_rand(c, -0.5f, 0.5f, &rng);
	s->dout = host_rand(nc, -1, 1, &rng);
	s->dinp0 = host_rand(nc, -1, 1, &rng);
	s->dw0 = host_rand(c, -1, 1, &rng);
	s->db0 = host_rand(c, -1, 1, &rng);
	s->d_inp = dev_copy(s->inp, nc);
	s->d_weight = dev_copy(s->weight, c);
	s->d_bias = dev_copy(s->bias, c);
	s->d_dout = dev_copy(s->dout, nc);
	s->d_out = dev_alloc(nc);
	s->d_mean = dev_alloc(n);
	s->d_rstd = dev_alloc(n);
	s->d_dinp = dev_alloc(nc);
	s->d_dw = dev_alloc(c);
	s->d_db = dev_alloc(c);
}

static void ln_free(struct ln *s)
{
	free(s->inp), free(s->weight), free(s->bias), free(s->dout), free(s->dinp0);
	free(s->dw0), free(s->db0);
	kern_cuda_free(s->d_inp), kern_cuda_free(s->d_weight), kern_cuda_free(s->d_bias);
	kern_cuda_free(s->d_dout), kern_cuda_free(s->d_out), kern_cuda_free(s->d_mean);
	kern_cuda_free(s->d_rstd), kern_cuda_free(s->d_dinp), kern_cuda_free(s->d_dw);
	kern_cuda_free(s->d_db);
}

/* runs the GPU backward (or _set) from the given initial gradients; returns
 * the three results in new host buffers */
static void gpu_bwd(struct ln *s, int set, const float *dinp0, const float *dw0,
                    const float *db0, float **dinp, float **dw, float **db)
{
	long nc = (long)s->n * s->c;
	dev_put(s->d_dinp, dinp0, nc);
	dev_put(s->d_dw, dw0, s->c);
	dev_put(s->d_db, db0, s->c);
	(set ? kern_layernorm_bwd_set_cuda : kern_layernorm_bwd_cuda)(
		s->d_dinp, s->d_dw, s->d_db, s->d_dout, s->d_inp, s->d_weight, s->d_mean, s->d_rstd,
		s->n, s->c);
	*dinp = dev_fetch(s->d_dinp, nc);
	*dw = dev_fetch(s->d_dw, s->c);
	*db = dev_fetch(s->d_db, s->c);
}

static void compare(int n, int c)
{
	struct ln s;
	char what[128];
	ln_init(&s, n, c);
	long nc = (long)n * c;

	float *out = host_zeros(nc), *mean = host_zeros(n), *rstd = host_zeros(n);
	kern_layernorm_fwd_ref(out, mean, rstd, s.inp, s.weight, s.bias, n, c);
	kern_layernorm_fwd_cuda(s.d_out, s.d_mean, s.d_rstd, s.d_inp, s.d_weight, s.d_bias, n, c);
	float *gout = dev_fetch(s.d_out, nc), *gmean = dev_fetch(s.d_mean, n);
	float *grstd = dev_fetch(s.d_rstd, n);
	snprintf(what, sizeof what, "out n=%d c=%d", n, c);
	check_close(what, gout, out, nc, 1e-5, 1e-5);
	snprintf(what, sizeof what, "mean n=%d c=%d", n, c);
	check_close(what, gmean, mean, n, 1e-6, 1e-5);
	snprintf(what, sizeof what, "rstd n=%d c=%d", n, c);
	check_close(what, grstd, rstd, n, 0, 1e-5);

	/* backward from the reference's mean and rstd on both sides */
	kern_cuda_upload(s.d_mean, mean, sizeof(float) * (size_t)n);
	kern_cuda_upload(s.d_rstd, rstd, sizeof(float) * (size_t)n);
	float *dinp = host_copy(s.dinp0, nc), *dw = host_copy(s.dw0, c), *db = host_copy(s.db0, c);
	kern_layernorm_bwd_ref(dinp, dw, db, s.dout, s.inp, s.weight, mean, rstd, n, c);
	float *gdinp, *gdw, *gdb;
	gpu_bwd(&s, 0, s.dinp0, s.dw0, s.db0, &gdinp, &gdw, &gdb);
	snprintf(what, sizeof what, "dinp n=%d c=%d", n, c);
	check_close(what, gdinp, dinp, nc, 1e-5, 1e-4);
	snprintf(what, sizeof what, "dweight n=%d c=%d", n, c);
	check_close(what, gdw, dw, c, 1e-4, 1e-4);
	snprintf(what, sizeof what, "dbias n=%d c=%d", n, c);
	check_close(what, gdb, db, c, 1e-4, 1e-4);

	/* _set over NaN against the reference's _set */
	float *sdinp = host_copy(s.dinp0, nc), *sdw = host_copy(s.dw0, c), *sdb = host_copy(s.db0, c);
	kern_layernorm_bwd_set_ref(sdinp, sdw, sdb, s.dout, s.inp, s.weight, mean, rstd, n, c);
	float *nan = host_nan(nc), *zc = host_zeros(c);
	float *gsdinp, *gsdw, *gsdb;
	gpu_bwd(&s, 1, nan, zc, zc, &gsdinp, &gsdw, &gsdb);
	snprintf(what, sizeof what, "set dinp n=%d c=%d", n, c);
	check_close(what, gsdinp, sdinp, nc, 1e-5, 1e-4);

	/* accumulation: adding = initial + (_set's dinp, the zero-start sums) */
	for (long i = 0; i < nc; i++)
		gsdinp[i] += s.dinp0[i];
	for (int j = 0; j < c; j++) {
		gsdw[j] += s.dw0[j];
		gsdb[j] += s.db0[j];
	}
	snprintf(what, sizeof what, "adds into dinp n=%d c=%d", n, c);
	check_same_bits(what, gdinp, gsdinp, nc);
	snprintf(what, sizeof what, "adds into dweight n=%d c=%d", n, c);
	check_same_bits(what, gdw, gsdw, c);
	snprintf(what, sizeof what, "adds into dbias n=%d c=%d", n, c);
	check_same_bits(what, gdb, gsdb, c);

	free(out), free(mean), free(rstd), free(gout), free(gmean), free(grstd);
	free(dinp), free(dw), free(db), free(gdinp), free(gdw), free(gdb);
	free(sdinp), free(sdw), free(sdb), free(nan), free(zc), free(gsdinp), free(gsdw), free(gsdb);
	ln_free(&s);
}

/* every shape */
static void test_vs_ref(void)
{
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
		compare(shapes[k].n, shapes[k].c);
}

static void test_deterministic(void)
{
	struct ln s;
	const int n = 8192, c = 768;
	ln_init(&s, n, c);
	long nc = (long)n * c;
	float *out[2], *dinp[2], *dw[2], *db[2];
	for (int r = 0; r < 2; r++) {
		kern_layernorm_fwd_cuda(s.d_out, s.d_mean, s.d_rstd, s.d_inp, s.d_weight, s.d_bias, n, c);
		out[r] = dev_fetch(s.d_out, nc);
		gpu_bwd(&s, 0, s.dinp0, s.dw0, s.db0, &dinp[r], &dw[r], &db[r]);
	}
	check_same_bits("out", out[0], out[1], nc);
	check_same_bits("dinp", dinp[0], dinp[1], nc);
	check_same_bits("dweight", dw[0], dw[1], c);
	check_same_bits("dbias", db[0], db[1], c);
	for (int r = 0; r < 2; r++)
		free(out[r]), free(dinp[r]), free(dw[r]), free(db[r]);
	ln_free(&s);
}

/* With bf16 operands inp and dout are read as bf16 values and out and dinp
 * stored so (the reference's on the rounded inputs, rounded, within one
 * bf16 spacing); dweight and dbias, the parameters' gradients, stay fp32. */
static void test_bf16_stores(void)
{
	int n = 257, c = 1600;
	long nc = (long)n * c;
	struct ln s;
	ln_init(&s, n, c);
	float *out = host_zeros(nc), *mean = host_zeros(n), *rstd = host_zeros(n);
	float *inp16 = host_copy(s.inp, nc), *dout16 = host_copy(s.dout, nc);
	kern_round_bf16_cpu(inp16, nc);
	kern_round_bf16_cpu(dout16, nc);
	kern_layernorm_fwd_ref(out, mean, rstd, inp16, s.weight, s.bias, n, c);
	float *sdinp = host_copy(s.dinp0, nc), *sdw = host_zeros(c), *sdb = host_zeros(c);
	kern_layernorm_bwd_set_ref(sdinp, sdw, sdb, dout16, inp16, s.weight, mean, rstd, n, c);
	free(inp16), free(dout16);
	kern_matmul_cuda_operands(KERN_MM_BF16);
	kern_layernorm_fwd_cuda(s.d_out, s.d_mean, s.d_rstd, s.d_inp, s.d_weight, s.d_bias, n, c);
	float *gout = dev_fetch(s.d_out, nc);
	kern_cuda_upload(s.d_mean, mean, sizeof(float) * (size_t)n);
	kern_cuda_upload(s.d_rstd, rstd, sizeof(float) * (size_t)n);
	float *zc = host_zeros(c), *gdinp, *gdw, *gdb;
	gpu_bwd(&s, 1, s.dinp0, zc, zc, &gdinp, &gdw, &gdb);
	kern_matmul_cuda_operands(KERN_MM_FP32);
	/* the fp32 paths' absolute tolerances (test_vs_ref) beside a spacing:
	 * a value near zero from cancellation keeps the sums' order's error */
	check_stored_bf16("bf16 out", gout, out, nc, 1e-5, 0x1p-7);
	check_stored_bf16("bf16 set dinp", gdinp, sdinp, nc, 1e-5, 0x1p-7);
	check_close("fp32 dweight beside bf16 dinp", gdw, sdw, c, 1e-4, 1e-4);
	check_close("fp32 dbias beside bf16 dinp", gdb, sdb, c, 1e-4, 1e-4);
	long unrounded = 0;
	for (int j = 0; j < c; j++) {
		uint32_t bits;
		memcpy(&bits, &gdw[j], sizeof bits);
		unrounded += (bits & 0xffffu) != 0;
	}
	CHECK_MSG(unrounded > c / 2, "dweight left unrounded: %ld of %d values", unrounded, c);
	free(out), free(mean), free(rstd), free(sdinp), free(sdw), free(sdb), free(gout);
	free(zc), free(gdinp), free(gdw), free(gdb);
	ln_free(&s);
}

int main(void)
{
	gpu_test_init("test_cuda_layernorm");
	CHECK_RUN(test_vs_ref);
	CHECK_RUN(test_bf16_stores);
	CHECK_RUN(test_deterministic);
	return check_finish();
}
