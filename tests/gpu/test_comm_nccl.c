/* tests/gpu/test_comm_nccl.c - the GPU backend's device communicator
 * (trainer/comm_nccl_cuda.c) on one GPU: a rank of one, so each collective
 * is NCCL's identity or copy, which checks the calls, their stream ordering
 * and the host memory that goes over the host communicator. Two ranks on
 * two GPUs: tests/gpu/test_dp_cuda.py.
 *
 * Ordering: a reduce-scatter and a gather into other buffers are copies on
 * the collectives' stream; the input is scaled on the kernels' stream just
 * before (the copy must wait for it) and the output scaled there just after
 * the wait (which must wait for the copy), so a missing event shows as the
 * wrong factor. Exact throughout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "kernels/cuda_common.h"
#include "kernels/optimizer_cuda.h"
#include "trainer/comm.h"

static struct trn_comm *dc;
static uint64_t rng = 5;

static void scaled(const char *what, const float *dev, const float *x, long n, float f)
{
	float *want = host_copy(x, n), *got = dev_fetch(dev, n);
	for (long i = 0; i < n; i++)
		want[i] *= f;
	check_same_bits(what, got, want, n);
	free(want);
	free(got);
}

static void test_allreduce(void)
{
	const long n = 1000003;
	struct trn_err err = { 0 };
	float *x = host_rand(n, -1, 1, &rng), *d = dev_copy(x, n);
	kern_scale_cuda(d, n, 2.0f);
	CHECK(trn_comm_allreduce_f32(dc, d, n, &err) == 0);
	kern_scale_cuda(d, n, 3.0f);
	scaled("allreduce_f32 of one rank", d, x, n, 6.0f);

	struct trn_comm_req *req = NULL;
	CHECK(trn_comm_iallreduce_f32(dc, d, n, &req, &err) == 0);
	CHECK(trn_comm_wait(dc, req, &err) == 0);
	scaled("iallreduce_f32 of one rank", d, x, n, 6.0f);

	double h[3] = { 1.5, -2.0, 1e300 };
	CHECK(trn_comm_allreduce_f64(dc, h, 3, &err) == 0);   /* host memory: the host's */
	CHECK(h[0] == 1.5 && h[1] == -2.0 && h[2] == 1e300);
	CHECK_MSG(!err.set, "%s", err.text);
	free(x);
	kern_cuda_free(d);
}

static void test_reduce_scatter(void)
{
	const long n = 65537;
	struct trn_err err = { 0 };
	float *x = host_rand(n, -1, 1, &rng), *d = dev_copy(x, n), *out = dev_alloc(n);
	int counts[1] = { (int)n };
	struct trn_comm_req *req = NULL;
	kern_scale_cuda(d, n, 2.0f);                 /* before the copy reads d */
	CHECK(trn_comm_ireduce_scatter_f32(dc, d, out, counts, &req, &err) == 0);
	CHECK(trn_comm_wait(dc, req, &err) == 0);
	kern_scale_cuda(out, n, 0.5f);               /* after the copy wrote out */
	scaled("reduce-scatter of one rank into another buffer", out, x, n, 1.0f);
	CHECK_MSG(!err.set, "%s", err.text);
	free(x);
	kern_cuda_free(d);
	kern_cuda_free(out);
}

static void test_gather_allgather_bcast(void)
{
	const long n = 4099;
	struct trn_err err = { 0 };
	float *x = host_rand(n, -1, 1, &rng), *d = dev_copy(x, n), *full = dev_alloc(n + 7);
	long counts[1] = { n }, displs[1] = { 7 };
	kern_scale_cuda(d, n, 4.0f);
	CHECK(trn_comm_gather_f32(dc, d, full, counts, displs, 0, &err) == 0);
	kern_scale_cuda(full + 7, n, 0.25f);
	scaled("gather of one rank at displacement 7", full + 7, x, n, 1.0f);

	long whole[1] = { n }, at[1] = { 0 };
	CHECK(trn_comm_allgather_f32(dc, d, whole, at, &err) == 0);
	scaled("allgather of one rank, in place", d, x, n, 4.0f);
	CHECK(trn_comm_bcast(dc, d, n * (long)sizeof(float), 0, &err) == 0);
	scaled("bcast of one rank, device memory", d, x, n, 4.0f);

	char hello[32] = "host memory over the host";
	CHECK(trn_comm_bcast(dc, hello, sizeof hello, 0, &err) == 0);
	CHECK_STR_EQ(hello, "host memory over the host");
	CHECK(trn_comm_barrier(dc, &err) == 0);
	CHECK_MSG(!err.set, "%s", err.text);
	free(x);
	kern_cuda_free(d);
	kern_cuda_free(full);
}

int main(void)
{
	gpu_test_init("test_comm_nccl");
	struct trn_err err = { 0 };
	struct trn_comm *host = trn_comm_open(1, NULL, NULL, &err);
	if (!host) {
		printf("FAIL: no host communicator: %s\n", err.text);
		return 1;
	}
	if (!(dc = trn_comm_open_device(host, 0, &err))) {
		printf("no device communicator: skipping test_comm_nccl (%s)\n", err.text);
		trn_comm_close(host);
		return 77;
	}
	CHECK_STR_EQ(dc->ops->name, "nccl");
	CHECK(dc->device && dc->host == host && dc->rank == 0 && dc->size == 1);
	CHECK_RUN(test_allreduce);
	CHECK_RUN(test_reduce_scatter);
	CHECK_RUN(test_gather_allgather_bcast);
	trn_comm_close(dc);                          /* and host */
	return check_finish();
}
