/* tests/gpu/test_cuda_embedding.c - kernels/embedding_cuda.cu against the
 * reference (embedding_cpu.c): forward with and without wpe, backward into
 * random initial gradients with dwte and dwpe each NULL or not, tokens
 * repeated many times (a small vocabulary) and GPT-2's vocabulary.
 *
 * Tolerance: exact. Forward is one add per element; backward adds in the
 * reference's order (a token's positions in order, the batches in order).
 */
#include <stdio.h>
#include <stdlib.h>

#include "gpu_test.h"
#include "kernels/cuda_common.h"
#include "kernels/embedding.h"
#include "kernels/embedding_cuda.h"
#include "kernels/matmul_cuda.h"

static uint64_t rng = 81;

struct shape {
	int b, t, c, vocab;
};

static const struct shape shapes[] = {
	{ 1, 1, 1, 1 }, { 2, 7, 13, 5 }, { 4, 64, 48, 3 }, { 3, 33, 768, 50257 },
	{ 8, 256, 96, 1000 }, { 16, 1024, 64, 7 },
};

static void compare(struct shape s, int with_wpe, int want_dwte, int want_dwpe)
{
	char what[160];
	long rows = (long)s.b * s.t, bt_c = rows * s.c;
	int *tokens = malloc(sizeof(int) * (size_t)rows);
	for (long i = 0; i < rows; i++)
		tokens[i] = (int)(check_rand_u64(&rng) % (uint64_t)s.vocab);
	float *wte = host_rand((long)s.vocab * s.c, -1, 1, &rng);
	float *wpe = host_rand((long)s.t * s.c, -1, 1, &rng);
	float *dout = host_rand(bt_c, -1, 1, &rng);
	float *dwte0 = host_rand((long)s.vocab * s.c, -1, 1, &rng);
	float *dwpe0 = host_rand((long)s.t * s.c, -1, 1, &rng);
	int *d_tokens = kern_cuda_dup(tokens, sizeof(int) * (size_t)rows);
	float *d_wte = dev_copy(wte, (long)s.vocab * s.c), *d_wpe = dev_copy(wpe, (long)s.t * s.c);
	float *d_dout = dev_copy(dout, bt_c), *d_out = dev_alloc(bt_c);
	float *d_dwte = dev_copy(dwte0, (long)s.vocab * s.c);
	float *d_dwpe = dev_copy(dwpe0, (long)s.t * s.c);

	float *out = host_zeros(bt_c);
	kern_embedding_fwd_ref(out, tokens, wte, with_wpe ? wpe : NULL, s.b, s.t, s.c);
	kern_embedding_fwd_cuda(d_out, d_tokens, d_wte, with_wpe ? d_wpe : NULL, s.b, s.t, s.c);
	float *gout = dev_fetch(d_out, bt_c);
	snprintf(what, sizeof what, "out b=%d t=%d c=%d vocab=%d wpe=%d", s.b, s.t, s.c, s.vocab,
	         with_wpe);
	check_close(what, gout, out, bt_c, 0, 0);

	float *dwte = host_copy(dwte0, (long)s.vocab * s.c), *dwpe = host_copy(dwpe0, (long)s.t * s.c);
	kern_embedding_bwd_ref(want_dwte ? dwte : NULL, want_dwpe ? dwpe : NULL, dout, tokens, s.b,
	                       s.t, s.c, s.vocab);
	kern_embedding_bwd_cuda(want_dwte ? d_dwte : NULL, want_dwpe ? d_dwpe : NULL, d_dout,
	                        d_tokens, s.b, s.t, s.c, s.vocab);
	float *gdwte = dev_fetch(d_dwte, (long)s.vocab * s.c), *gdwpe = dev_fetch(d_dwpe, (long)s.t * s.c);
	snprintf(what, sizeof what, "dwte b=%d t=%d c=%d vocab=%d (%s)", s.b, s.t, s.c, s.vocab,
	         want_dwte ? "wanted" : "NULL: untouched");
	check_close(what, gdwte, dwte, (long)s.vocab * s.c, 0, 0);
	snprintf(what, sizeof what, "dwpe b=%d t=%d c=%d vocab=%d (%s)", s.b, s.t, s.c, s.vocab,
	         want_dwpe ? "wanted" : "NULL: untouched");
	check_close(what, gdwpe, dwpe, (long)s.t * s.c, 0, 0);

	free(tokens), free(wte), free(wpe), free(dout), free(dwte0), free(dwpe0), free(out);
	free(gout), free(dwte), free(dwpe), free(gdwte), free(gdwpe);
	kern_cuda_free(d_tokens), kern_cuda_free(d_wte), kern_cuda_free(d_wpe);
	kern_cuda_free(d_dout), kern_cuda_free(d_out), kern_cuda_free(d_dwte);
	kern_cuda_free(d_dwpe);
}

static void test_vs_ref(void)
{
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
		compare(shapes[k], 1, 1, 1);
		compare(shapes[k], 0, 1, 0);
		compare(shapes[k], 1, 0, 1);
	}
}

/* With bf16 operands the output is stored as bf16 values: the reference's
 * (one add) rounded, bit for bit. */
static void test_bf16_stores(void)
{
	int b = 4, t = 64, c = 48, vocab = 1000;
	long rows = (long)b * t, btc = rows * c;
	int *tokens = malloc(sizeof(int) * (size_t)rows);
	for (long i = 0; i < rows; i++)
		tokens[i] = (int)(check_rand_u64(&rng) % (uint64_t)vocab);
	float *wte = host_rand((long)vocab * c, -1, 1, &rng), *wpe = host_rand((long)t * c, -1, 1, &rng);
	int *d_tokens = kern_cuda_dup(tokens, sizeof(int) * (size_t)rows);
	float *d_wte = dev_copy(wte, (long)vocab * c), *d_wpe = dev_copy(wpe, (long)t * c);
	float *d_out = dev_alloc(btc), *want = host_zeros(btc);
	kern_embedding_fwd_ref(want, tokens, wte, wpe, b, t, c);
	kern_matmul_cuda_operands(KERN_MM_BF16);
	kern_embedding_fwd_cuda(d_out, d_tokens, d_wte, d_wpe, b, t, c);
	kern_matmul_cuda_operands(KERN_MM_FP32);
	float *got = dev_fetch(d_out, btc);
	check_stored_bf16("bf16 out", got, want, btc, 0, 0);
	free(tokens), free(wte), free(wpe), free(want), free(got);
	kern_cuda_free(d_tokens), kern_cuda_free(d_wte), kern_cuda_free(d_wpe), kern_cuda_free(d_out);
}

int main(void)
{
	gpu_test_init("test_cuda_embedding");
	CHECK_RUN(test_vs_ref);
	CHECK_RUN(test_bf16_stores);
	return check_finish();
}
