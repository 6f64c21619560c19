/* trainer/comm_nccl_cuda.c - the GPU backend's device communicator: NCCL
 * over the ranks of the host one (comm.h, trn_comm_open_device).
 *
 * One rank per GPU. Rank 0 makes NCCL's unique id and sends it over the
 * host communicator (MPI); every rank then joins with ncclCommInitRank on
 * the device its model runs on (the current one).
 *
 * Ordering: the collectives run on a stream of their own. Each starts once
 * the work enqueued on the kernels' stream so far is done (an event), and
 * a blocking call makes the kernels' stream wait for it, so that what is
 * enqueued there afterwards reads its result; the host does not wait. A
 * non-blocking one records an event that trn_comm_wait makes the kernels'
 * stream wait for: the gradients' buckets reduce beside the rest of
 * backward and the update waits for them on the device.
 *
 * Memory: device pointers go to NCCL; host memory (the loss and flags a
 * step shares, norms, checkpoint shards, the first weights) goes over the
 * host communicator, which is there whenever this one is.
 *
 * NCCL wants equal counts for its reduce-scatter and all-gather; ZeRO's
 * ranges differ by a float where the buffer does not divide, so unequal
 * counts become one reduce (or broadcast) per rank in a group.
 */
#include "cuda_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"

#ifdef LARCH_HAVE_NCCL

#include <nccl.h>

#include "kernels/cuda_common.h"

struct nccl_comm {
	struct trn_comm base;
	struct trn_comm *host;         /* not owned (trn_comm_open_device owns it) */
	ncclComm_t nc;
	cudaStream_t stream;           /* the collectives' */
	cudaEvent_t after;             /* the kernels' stream's work so far */
	cudaEvent_t done;              /* a blocking collective's end */
};

struct trn_comm_req {
	cudaEvent_t done;
};

static struct nccl_comm *nccl_of(struct trn_comm *c)
{
	return (struct nccl_comm *)c;
}

static int nccl_fail(struct nccl_comm *c, const char *file, int line, const char *what,
                     ncclResult_t r, struct trn_err *err)
{
	const char *last = c && c->nc ? ncclGetLastError(c->nc) : NULL;
	return trn_err_set(err, "NCCL: %s:%d: %s: %s%s%s", file, line, what,
	                   ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
}

static int cuda_fail(const char *file, int line, const char *what, cudaError_t e,
                     struct trn_err *err)
{
	return trn_err_set(err, "NCCL: %s:%d: %s: %s", file, line, what, cudaGetErrorString(e));
}

#define NCCL_TRY(c, call)                                                               \
	do {                                                                            \
		ncclResult_t nccl_r_ = (call);                                          \
		if (nccl_r_ != ncclSuccess)                                             \
			return nccl_fail((c), __FILE__, __LINE__, #call, nccl_r_, err); \
	} while (0)

#define CUDA_TRY(call)                                                                  \
	do {                                                                            \
		cudaError_t cuda_e_ = (call);                                           \
		if (cuda_e_ != cudaSuccess)                                             \
			return cuda_fail(__FILE__, __LINE__, #call, cuda_e_, err);      \
	} while (0)

/* Whether p is device memory (host memory, pinned or not, is not). */
static int on_device(const void *p)
{
	struct cudaPointerAttributes a;
	if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* The collective stream waits for the kernels' stream's work so far. */
static int begin(struct nccl_comm *c, struct trn_err *err)
{
	CUDA_TRY(cudaEventRecord(c->after, kern_cuda_stream()));
	CUDA_TRY(cudaStreamWaitEvent(c->stream, c->after, 0));
	return 0;
}

/* The kernels' stream waits for what the collective stream has so far. */
static int end(struct nccl_comm *c, struct trn_err *err)
{
	CUDA_TRY(cudaEventRecord(c->done, c->stream));
	CUDA_TRY(cudaStreamWaitEvent(kern_cuda_stream(), c->done, 0));
	return 0;
}

static int nccl_allreduce(struct trn_comm *cc, void *buf, long n, ncclDataType_t type,
                          struct trn_err *err)
{
	struct nccl_comm *c = nccl_of(cc);
	if (n <= 0)
		return 0;
	if (begin(c, err) != 0)
		return -1;
	NCCL_TRY(c, ncclAllReduce(buf, buf, (size_t)n, type, ncclSum, c->nc, c->stream));
	return end(c, err);
}

static int nccl_allreduce_f32(struct trn_comm *cc, float *buf, long n, struct trn_err *err)
{
	struct nccl_comm *c = nccl_of(cc);
	if (!on_device(buf))
		return trn_comm_allreduce_f32(c->host, buf, n, err);
	return nccl_allreduce(cc, buf, n, ncclFloat32, err);
}

static int nccl_allreduce_f64(struct trn_comm *cc, double *buf, long n, struct trn_err *err)
{
	struct nccl_comm *c = nccl_of(cc);
	if (!on_device(buf))
		return trn_comm_allreduce_f64(c->host, buf, n, err);
	return nccl_allreduce(cc, buf, n, ncclFloat64, err);
}

/* A request whose event marks the collective stream's work so far. */
static int request(struct nccl_comm *c, struct trn_comm_req **req, struct trn_err *err)
{
	struct trn_comm_req *r = calloc(1, sizeof *r);
	if (!r)
		return trn_err_set(err, "NCCL: out of memory for a request");
	cudaError_t e = cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming);
	if (e == cudaSuccess)
		e = cudaEventRecord(r->done, c->stream);
	if (e != cudaSuccess) {
		free(r);
		return cuda_fail(__FILE__, __LINE__, "a request's event", e, err);
	}
	*req = r;
	return 0;
}

static int nccl_iallreduce_f32(struct trn_comm *cc, float *buf, long n,
                               struct trn_comm_req **req, struct trn_err *err)
{
	struct nccl_comm *c = nccl_of(cc);
	*req = NULL;
	if (!on_device(buf))                 /* done when it returns */
		return trn_comm_allreduce_f32(c->host, buf, n, err);
	if (begin(c, err) != 0)
		return -1;
	if (n > 0)
		NCCL_TRY(c, ncclAllReduce(buf, buf, (size_t)n, ncclFloat32, ncclSum, c->nc,
		                          c->stream));
	return request(c, req, err);
}

static int nccl_ireduce_scatter_f32(struct trn_comm *cc, const float *send, float *recv,
                                    const int *counts, struct trn_comm_req **req,
                                    struct trn_err *err)
{
	struct nccl_comm *c = nccl_of(cc);
	int size = cc->size, equal = 1;
	*req = NULL;
	if (!on_device(send) || !on_device(recv)) {
		/* host memory: over the host, complete when it returns */
		struct trn_comm_req *hr = NULL;
		if (trn_comm_ireduce_scatter_f32(c->host, send, recv, counts, &hr, err) != 0)
			return -1;
		return trn_comm_wait(c->host, hr, err);
	}
	for (int r = 1; r < size; r++)
		equal &= counts[r] == counts[0];
	if (begin(c, err) != 0)
		return -1;
	if (equal && counts[0] > 0) {
		NCCL_TRY(c, ncclReduceScatter(send, recv, (size_t)counts[0], ncclFloat32, ncclSum,
		                              c->nc, c->stream));
	} else if (!equal) {
		NCCL_TRY(c, ncclGroupStart());
		long at = 0;
		ncclResult_t rc = ncclSuccess;
		for (int r = 0; r < size && rc == ncclSuccess; r++) {
			if (counts[r] > 0)
				rc = ncclReduce(send + at, r == cc->rank ? recv : (float *)send + at,
				                (size_t)counts[r], ncclFloat32, ncclSum, r, c->nc, c->stream);
			at += counts[r];
		}
		ncclResult_t ge = ncclGroupEnd();
		if (rc != ncclSuccess)
			return nccl_fail(c, __FILE__, __LINE__, "ncclReduce", rc, err);
		if (ge != ncclSuccess)
			return nccl_fail(c, __FILE__, __LINE__, "ncclGroupEnd", ge, err);
	}
	return request(c, req, err);
}

static int nccl_allgather_f32(struct trn_comm *cc, float *buf, const long *counts,
                              const long *displs, struct trn_err *err)
{
	struct nccl_comm *c = nccl_of(cc);
	if (!on_device(buf))
		return trn_comm_allgather_f32(c->host, buf, counts, displs, err);
	if (begin(c, err) != 0)
		return -1;
	NCCL_TRY(c, ncclGroupStart());
	ncclResult_t rc = ncclSuccess;
	for (int r = 0; r < cc->size && rc == ncclSuccess; r++)
		if (counts[r] > 0)
			rc = ncclBroadcast(buf + displs[r], buf + displs[r], (size_t)counts[r],
			                   ncclFloat32, r, c->nc, c->stream);
	ncclResult_t ge = ncclGroupEnd();
	if (rc != ncclSuccess)
		return nccl_fail(c, __FILE__, __LINE__, "ncclBroadcast", rc, err);
	if (ge != ncclSuccess)
		return nccl_fail(c, __FILE__, __LINE__, "ncclGroupEnd", ge, err);
	return end(c, err);
}

static int nccl_gather_f32(struct trn_comm *cc, const float *send, float *recv,
                           const long *counts, const long *displs, int root,
                           struct trn_err *err)
{
	struct nccl_comm *c = nccl_of(cc);
	int dev_send = on_device(send), dev_recv = cc->rank != root || on_device(recv);
	if (!dev_send && (cc->rank != root || !on_device(recv)))
		return trn_comm_gather_f32(c->host, send, recv, counts, displs, root, err);
	if (!dev_send || !dev_recv)
		return trn_err_set(err, "NCCL: gather: host and device memory mixed");
	if (begin(c, err) != 0)
		return -1;
	NCCL_TRY(c, ncclGroupStart());
	ncclResult_t rc = ncclSuccess;
	if (cc->rank != root) {
		if (counts[cc->rank] > 0)
			rc = ncclSend(send, (size_t)counts[cc->rank], ncclFloat32, root, c->nc, c->stream);
	} else {
		for (int r = 0; r < cc->size && rc == ncclSuccess; r++)
			if (r != root && counts[r] > 0)
				rc = ncclRecv(recv + displs[r], (size_t)counts[r], ncclFloat32, r, c->nc,
				              c->stream);
	}
	ncclResult_t ge = ncclGroupEnd();
	if (rc != ncclSuccess)
		return nccl_fail(c, __FILE__, __LINE__, "ncclSend/ncclRecv", rc, err);
	if (ge != ncclSuccess)
		return nccl_fail(c, __FILE__, __LINE__, "ncclGroupEnd", ge, err);
	if (cc->rank == root && recv + displs[root] != send && counts[root] > 0)
		CUDA_TRY(cudaMemcpyAsync(recv + displs[root], send, sizeof(float) * (size_t)counts[root],
		                         cudaMemcpyDeviceToDevice, c->stream));
	return end(c, err);
}

static int nccl_wait(struct trn_comm *cc, struct trn_comm_req *req, struct trn_err *err)
{
	(void)cc;
	if (!req)
		return 0;
	cudaError_t e = cudaStreamWaitEvent(kern_cuda_stream(), req->done, 0);
	cudaEventDestroy(req->done);
	free(req);
	if (e != cudaSuccess)
		return cuda_fail(__FILE__, __LINE__, "cudaStreamWaitEvent", e, err);
	return 0;
}

static void nccl_progress(struct trn_comm *cc)
{
	(void)cc;
}

static int nccl_bcast(struct trn_comm *cc, void *buf, long bytes, int root, struct trn_err *err)
{
	struct nccl_comm *c = nccl_of(cc);
	if (!on_device(buf))
		return trn_comm_bcast(c->host, buf, bytes, root, err);
	if (bytes <= 0)
		return 0;
	if (begin(c, err) != 0)
		return -1;
	NCCL_TRY(c, ncclBroadcast(buf, buf, (size_t)bytes, ncclUint8, root, c->nc, c->stream));
	return end(c, err);
}

static int nccl_barrier(struct trn_comm *cc, struct trn_err *err)
{
	struct nccl_comm *c = nccl_of(cc);
	CUDA_TRY(cudaStreamSynchronize(c->stream));
	return trn_comm_barrier(c->host, err);
}

static void nccl_abort(struct trn_comm *cc, int code)
{
	struct nccl_comm *c = nccl_of(cc);
	if (c->nc)
		ncclCommAbort(c->nc);
	c->nc = NULL;
	trn_comm_abort(c->host, code);
}

static void nccl_close(struct trn_comm *cc)
{
	struct nccl_comm *c = nccl_of(cc);
	if (c->stream)
		cudaStreamSynchronize(c->stream);
	if (c->nc)
		ncclCommDestroy(c->nc);
	if (c->after)
		cudaEventDestroy(c->after);
	if (c->done)
		cudaEventDestroy(c->done);
	if (c->stream)
		cudaStreamDestroy(c->stream);
	free(c);
}

static const struct trn_comm_ops nccl_ops = {
	.name = "nccl",
	.allreduce_f32 = nccl_allreduce_f32,
	.allreduce_f64 = nccl_allreduce_f64,
	.iallreduce_f32 = nccl_iallreduce_f32,
	.ireduce_scatter_f32 = nccl_ireduce_scatter_f32,
	.allgather_f32 = nccl_allgather_f32,
	.gather_f32 = nccl_gather_f32,
	.wait = nccl_wait,
	.progress = nccl_progress,
	.bcast = nccl_bcast,
	.barrier = nccl_barrier,
	.abort = nccl_abort,
	.close = nccl_close,
};

/* Rank 0's unique id, or why it has none, as every rank receives it. */
struct nccl_hello {
	int ok;
	char why[240];
	ncclUniqueId id;
};

static int join(struct nccl_comm *c, struct trn_comm *host, int device, struct trn_err *err)
{
	struct nccl_hello hello;
	memset(&hello, 0, sizeof hello);
	if (host->rank == 0) {
		ncclResult_t r = ncclGetUniqueId(&hello.id);
		hello.ok = r == ncclSuccess;
		if (!hello.ok)
			snprintf(hello.why, sizeof hello.why, "%s", ncclGetErrorString(r));
	}
	if (trn_comm_bcast(host, &hello, (long)sizeof hello, 0, err) != 0)
		return -1;
	if (!hello.ok)
		return trn_err_set(err, "NCCL: ncclGetUniqueId on rank 0: %s", hello.why);
	int current = -1;
	CUDA_TRY(cudaGetDevice(&current));
	CUDA_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
	CUDA_TRY(cudaEventCreateWithFlags(&c->after, cudaEventDisableTiming));
	CUDA_TRY(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming));
	ncclResult_t r = ncclCommInitRank(&c->nc, host->size, hello.id, host->rank);
	if (r != ncclSuccess) {
		c->nc = NULL;
		return trn_err_set(err, "NCCL: ncclCommInitRank (rank %d of %d, GPU %d for local "
		                   "rank %d): %s", host->rank, host->size, current, device,
		                   ncclGetErrorString(r));
	}
	return 0;
}

struct trn_comm *trn_cuda_comm_open(struct trn_comm *host, int device, struct trn_err *err)
{
	struct nccl_comm *c = calloc(1, sizeof *c);
	if (!c) {
		trn_err_set(err, "NCCL: out of memory");
		return NULL;
	}
	c->base = (struct trn_comm){ .ops = &nccl_ops, .rank = host->rank, .size = host->size };
	c->host = host;
	if (join(c, host, device, err) != 0) {
		nccl_close(&c->base);
		return NULL;
	}
	return &c->base;
}

#else /* !LARCH_HAVE_NCCL */

struct trn_comm *trn_cuda_comm_open(struct trn_comm *host, int device, struct trn_err *err)
{
	(void)host, (void)device;
	trn_err_set(err, "this GPU backend was built without NCCL (no nccl.h and libnccl at "
	            "build time)");
	return NULL;
}

#endif
