/* tests/gpu/gpu_test.c - see gpu_test.h. */
#include "gpu_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_common.h"
#include "kernels/precision.h"

static int g_standin;

void gpu_test_init(const char *test)
{
	char why[256] = "";
	int n = kern_cuda_device_count(why, sizeof why);
	if (n == 0) {
		printf("no CUDA device: skipping %s (%s)\n", test, why);
		fflush(stdout);
		exit(77);
	}
	struct kern_cuda_device dev;
	if (kern_cuda_device_query(0, &dev, why, sizeof why) != 0) {
		printf("no usable CUDA device: skipping %s (%s)\n", test, why);
		fflush(stdout);
		exit(77);
	}
	char line[512];
	kern_cuda_device_describe(&dev, line, sizeof line);
	fprintf(stderr, "%s on %s\n", test, line);
	g_standin = strcmp(dev.name, "CPU shim") == 0;
}

int gpu_test_standin(void)
{
	return g_standin;
}

static float *host_alloc(long n)
{
	float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
	if (!p) {
		fprintf(stderr, "out of host memory (%ld floats)\n", n);
		abort();
	}
	return p;
}

float *host_rand(long n, float lo, float hi, uint64_t *rng)
{
	float *p = host_alloc(n);
	check_fill(p, n, lo, hi, rng);
	return p;
}

float *host_rand16(long n, float lo, float hi, int bf16, uint64_t *rng)
{
	float *x = host_rand(n, lo, hi, rng);
	if (bf16)
		kern_round_bf16_cpu(x, n);
	else
		kern_round_fp16_cpu(x, n);
	return x;
}

float *host_zeros(long n)
{
	float *p = host_alloc(n);
	memset(p, 0, sizeof(float) * (size_t)(n > 0 ? n : 1));
	return p;
}

float *host_nan(long n)
{
	float *p = host_alloc(n);
	for (long i = 0; i < n; i++)
		p[i] = NAN;
	return p;
}

float *host_copy(const float *x, long n)
{
	float *p = host_alloc(n);
	if (n > 0)
		memcpy(p, x, sizeof(float) * (size_t)n);
	return p;
}

float *dev_alloc(long n)
{
	return kern_cuda_malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
}

float *dev_copy(const float *host, long n)
{
	float *d = dev_alloc(n);
	dev_put(d, host, n);
	return d;
}

void dev_put(float *dev, const float *host, long n)
{
	if (n > 0)
		kern_cuda_upload(dev, host, sizeof(float) * (size_t)n);
}

void *dev_copy16(const float *x, long n, int bf16)
{
	uint16_t *h = malloc(sizeof *h * (size_t)(n > 0 ? n : 1));
	if (!h)
		abort();
	if (bf16)
		kern_fp32_to_bf16_cpu(h, x, n);
	else
		kern_fp32_to_fp16_cpu(h, x, n);
	void *d = kern_cuda_dup(h, sizeof *h * (size_t)(n > 0 ? n : 1));
	free(h);
	return d;
}

float *dev_fetch(const float *dev, long n)
{
	float *h = host_alloc(n);
	if (n > 0)
		kern_cuda_download(h, dev, sizeof(float) * (size_t)n);
	return h;
}

int check_same_bits(const char *what, const float *a, const float *b, long n)
{
	for (long i = 0; i < n; i++)
		if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
			return CHECK_MSG(0, "%s: element %ld differs: %.9g vs %.9g (of %ld)", what, i,
			                 a[i], b[i], n);
	return CHECK_MSG(1, "%s", what);
}

int check_stored_bf16(const char *what, const float *got, const float *want, long n, double atol,
                      double rtol)
{
	for (long i = 0; i < n; i++) {
		uint32_t bits;
		memcpy(&bits, &got[i], sizeof bits);
		if (bits & 0xffffu)
			return CHECK_MSG(0, "%s: element %ld (%.9g) is not a bf16 value", what, i, got[i]);
	}
	float *r = host_copy(want, n);
	kern_round_bf16_cpu(r, n);
	int ok = rtol == 0 ? check_same_bits(what, got, r, n)
	                   : check_close(what, got, r, n, atol > 0 ? atol : 1e-30, rtol);
	free(r);
	return ok;
}
