/* kernels/cuda_common.cu - checks, device query, buffers and the shared
 * stream and cuBLAS handle of the CUDA kernels (see cuda_common.h). */
#include "cuda_common.h"
#include "tune_table.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cudaStream_t g_stream; /* 0: the legacy default stream */
static int g_gemm_operands;   /* 0 fp32, 1 fp16, 2 bf16 */

extern "C" int kern_cuda_gemm_operands(void)
{
	return g_gemm_operands;
}

extern "C" void kern_cuda_set_gemm_operands(int dtype)
{
	g_gemm_operands = dtype;
}

extern "C" int kern_cuda_switch(int *state, int on)
{
	int prev = *state;
	if (on >= 0)
		*state = on != 0;
	return prev;
}

static int g_sync_after;               /* kern_cuda_opts's sync */

extern "C" int kern_cuda_act_operands(int a16, const char *op)
{
	if (a16 && !g_gemm_operands)
		kern_cuda_fail(__FILE__, __LINE__, op, "16-bit activations with fp32 GEMM operands");
	return g_gemm_operands;
}

extern "C" void kern_cuda_fail(const char *file, int line, const char *what, const char *err)
{
	fprintf(stderr, "larch: %s:%d: %s: %s\n", file, line, what, err);
	fflush(stderr);
	abort();
}

extern "C" void kern_cuda_check_launch(const char *file, int line)
{
	cudaError_t err = cudaGetLastError();
	if (err != cudaSuccess)
		kern_cuda_fail(file, line, "kernel launch", cudaGetErrorString(err));
	if (g_sync_after) {
		err = cudaStreamSynchronize(g_stream);
		if (err != cudaSuccess)
			kern_cuda_fail(file, line, "kernel (sync after launch)", cudaGetErrorString(err));
	}
}

/* ---- devices ------------------------------------------------------------- */

static void set_why(char *why, size_t len, const char *what, cudaError_t err)
{
	if (why && len)
		snprintf(why, len, "%s: %s (error %d)", what, cudaGetErrorString(err), (int)err);
}

extern "C" int kern_cuda_device_count(char *why, size_t whylen)
{
	/* without a driver the runtime returns an error and leaves n unwritten */
	int n = 0;
	cudaError_t err = cudaGetDeviceCount(&n);
	if (err != cudaSuccess) {
		set_why(why, whylen, "cudaGetDeviceCount", err);
		(void)cudaGetLastError(); /* clear the runtime's last error */
		return 0;
	}
	if (n <= 0 && why && whylen)
		snprintf(why, whylen, "cudaGetDeviceCount: no device");
	return n > 0 ? n : 0;
}

extern "C" int kern_cuda_device_query(int index, struct kern_cuda_device *dev, char *why,
                                      size_t whylen)
{
	struct cudaDeviceProp p;
	memset(dev, 0, sizeof *dev);
	cudaError_t err = cudaGetDeviceProperties(&p, index);
	if (err != cudaSuccess) {
		set_why(why, whylen, "cudaGetDeviceProperties", err);
		(void)cudaGetLastError();
		return -1;
	}
	dev->index = index;
	snprintf(dev->name, sizeof dev->name, "%s", p.name);
	dev->cc_major = p.major;
	dev->cc_minor = p.minor;
	dev->sm_count = p.multiProcessorCount;
	dev->mem_total = p.totalGlobalMem;
	dev->l2_bytes = (size_t)p.l2CacheSize;
	dev->smem_block_optin = p.sharedMemPerBlockOptin;
	cudaDriverGetVersion(&dev->driver_version);
	cudaRuntimeGetVersion(&dev->runtime_version);

	int cur = 0;
	size_t free_b = 0, total_b = 0;
	if (cudaGetDevice(&cur) == cudaSuccess && cudaSetDevice(index) == cudaSuccess &&
	    cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
		dev->mem_free = free_b;
	cudaSetDevice(cur);
	(void)cudaGetLastError();
	return 0;
}

extern "C" void kern_cuda_device_describe(const struct kern_cuda_device *d, char *buf,
                                          size_t len)
{
	const double gib = 1024.0 * 1024.0 * 1024.0;
	snprintf(buf, len, "%s, sm_%d%d, %d SMs, %.1f GiB (%.1f free), L2 %.0f MiB, "
	         "driver %d.%d, runtime %d.%d", d->name, d->cc_major, d->cc_minor, d->sm_count,
	         d->mem_total / gib, d->mem_free / gib, d->l2_bytes / (1024.0 * 1024.0),
	         d->driver_version / 1000, d->driver_version % 1000 / 10,
	         d->runtime_version / 1000, d->runtime_version % 1000 / 10);
}

extern "C" int kern_cuda_use_device(int index, char *why, size_t whylen)
{
	cudaError_t err = cudaSetDevice(index);
	if (err != cudaSuccess) {
		set_why(why, whylen, "cudaSetDevice", err);
		(void)cudaGetLastError();
		return -1;
	}
	return 0;
}

extern "C" int kern_cuda_current_device(void)
{
	int dev = 0;
	if (cudaGetDevice(&dev) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return dev;
}

extern "C" int kern_cuda_mem_info(size_t *free_bytes, size_t *total_bytes)
{
	*free_bytes = *total_bytes = 0;
	if (cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess) {
		(void)cudaGetLastError();
		return -1;
	}
	return 0;
}

/* SMs, maximum clock (kHz) and compute capability of device index; 0 or -1 */
static int sm_clock(int index, int *sms, int *khz, int *major, int *minor)
{
	if (cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, index) != cudaSuccess ||
	    cudaDeviceGetAttribute(khz, cudaDevAttrClockRate, index) != cudaSuccess ||
	    cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, index) != cudaSuccess ||
	    cudaDeviceGetAttribute(minor, cudaDevAttrComputeCapabilityMinor, index) != cudaSuccess) {
		(void)cudaGetLastError();
		return -1;
	}
	return 0;
}

extern "C" double kern_cuda_peak_fp32(int index)
{
	int sms, khz, major, minor;
	if (sm_clock(index, &sms, &khz, &major, &minor) != 0)
		return 0;
	/* FP32 lanes per SM: 64 on sm_70 and sm_80 (V100, A100), 128 on sm_86,
	 * sm_89 and sm_90 (consumer Ampere, Ada, Hopper); an FMA is two FLOPs */
	int lanes = major >= 9 || (major == 8 && minor >= 6) ? 128 : 64;
	return (double)sms * lanes * 2.0 * (double)khz * 1e3;
}

extern "C" double kern_cuda_peak_tensor16(int index, double sheet, const char **basis)
{
	if (basis)
		*basis = sheet > 0 ? "NVIDIA's data sheet" : "SMs x clock";
	if (sheet > 0)
		return sheet;
	int sms, khz, major, minor;
	if (sm_clock(index, &sms, &khz, &major, &minor) != 0)
		return 0;
	/* dense fp16/bf16 FLOPs per SM per clock: Hopper 4096, A100 2048,
	 * consumer Ampere and Ada 1024, Volta/Turing fp16 1024 */
	int per = major >= 9 ? 4096 : major == 8 && minor == 0 ? 2048 : 1024;
	return (double)sms * per * (double)khz * 1e3;
}

/* ---- stream and cuBLAS ----------------------------------------------------- */

extern "C" cudaStream_t kern_cuda_stream(void)
{
	return g_stream;
}

extern "C" void kern_cuda_set_stream(cudaStream_t stream)
{
	g_stream = stream;
}

extern "C" cublasHandle_t kern_cuda_cublas(void)
{
	static cublasHandle_t handle;
	static cudaStream_t bound;
	static void *workspace;
	if (!handle) {
		KERN_CUBLAS_CHECK(cublasCreate(&handle));
		/* plain FP32: no TF32 (it would not meet the FP32 tolerances);
		 * a 16-bit output's split-K partial sums kept in fp32, not in
		 * the output's type (the GEMMs promise sums rounded once) */
		KERN_CUBLAS_CHECK(cublasSetMathMode(
			handle, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
			                       CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
		KERN_CUBLAS_CHECK(cublasSetAtomicsMode(handle, CUBLAS_ATOMICS_NOT_ALLOWED));
		workspace = kern_cuda_malloc(KERN_CUBLAS_WORKSPACE_BYTES);
		bound = g_stream;
		KERN_CUBLAS_CHECK(cublasSetStream(handle, bound));
		KERN_CUBLAS_CHECK(cublasSetWorkspace(handle, workspace, KERN_CUBLAS_WORKSPACE_BYTES));
	} else if (bound != g_stream) {
		/* cublasSetStream drops the workspace back to cuBLAS's own pool */
		bound = g_stream;
		KERN_CUBLAS_CHECK(cublasSetStream(handle, bound));
		KERN_CUBLAS_CHECK(cublasSetWorkspace(handle, workspace, KERN_CUBLAS_WORKSPACE_BYTES));
	}
	return handle;
}

extern "C" void kern_cuda_sync(void)
{
	KERN_CUDA_CHECK(cudaStreamSynchronize(g_stream));
}

/* ---- device memory ------------------------------------------------------- */

/* kern_cuda_malloc's live buffers and their sizes (cudaFree does not say
 * one), for kern_cuda_alloc_bytes; a few dozen at most, set up and torn
 * down outside the step loop */
static struct live_buf {
	void *p;
	size_t bytes;
} *g_live;
static size_t g_nlive, g_live_cap, g_alloc_now, g_alloc_peak;
static pthread_mutex_t g_live_lock = PTHREAD_MUTEX_INITIALIZER;

extern "C" void *kern_cuda_malloc(size_t bytes)
{
	if (bytes == 0)
		return NULL;
	void *p = NULL;
	cudaError_t err = cudaMalloc(&p, bytes);
	if (err != cudaSuccess) {
		char what[96];
		snprintf(what, sizeof what, "cudaMalloc(%zu bytes)", bytes);
		kern_cuda_fail(__FILE__, __LINE__, what, cudaGetErrorString(err));
	}
	pthread_mutex_lock(&g_live_lock);
	if (g_nlive == g_live_cap) {
		size_t cap = g_live_cap ? 2 * g_live_cap : 64;
		struct live_buf *more = (struct live_buf *)realloc(g_live, cap * sizeof *more);
		if (!more)
			kern_cuda_fail(__FILE__, __LINE__, "kern_cuda_malloc", "out of host memory");
		g_live = more;
		g_live_cap = cap;
	}
	g_live[g_nlive++] = { p, bytes };
	g_alloc_now += bytes;
	if (g_alloc_now > g_alloc_peak)
		g_alloc_peak = g_alloc_now;
	pthread_mutex_unlock(&g_live_lock);
	return p;
}

extern "C" void kern_cuda_free(void *dev)
{
	if (!dev)
		return;
	KERN_CUDA_CHECK(cudaFree(dev));
	pthread_mutex_lock(&g_live_lock);
	for (size_t i = 0; i < g_nlive; i++)
		if (g_live[i].p == dev) {
			g_alloc_now -= g_live[i].bytes;
			g_live[i] = g_live[--g_nlive];
			break;
		}
	pthread_mutex_unlock(&g_live_lock);
}

extern "C" void kern_cuda_alloc_bytes(size_t *now, size_t *peak)
{
	pthread_mutex_lock(&g_live_lock);
	*now = g_alloc_now;
	*peak = g_alloc_peak;
	pthread_mutex_unlock(&g_live_lock);
}

extern "C" void kern_cuda_upload(void *dev_dst, const void *host_src, size_t bytes)
{
	if (bytes == 0)
		return;
	KERN_CUDA_CHECK(cudaMemcpyAsync(dev_dst, host_src, bytes, cudaMemcpyHostToDevice, g_stream));
	KERN_CUDA_CHECK(cudaStreamSynchronize(g_stream));
}

extern "C" void kern_cuda_download(void *host_dst, const void *dev_src, size_t bytes)
{
	if (bytes == 0)
		return;
	KERN_CUDA_CHECK(cudaMemcpyAsync(host_dst, dev_src, bytes, cudaMemcpyDeviceToHost, g_stream));
	KERN_CUDA_CHECK(cudaStreamSynchronize(g_stream));
}

/* ---- copies beside the compute stream ------------------------------------- */

static cudaStream_t g_copy_stream;
static cudaEvent_t g_copy_after;                 /* the compute stream's work so far */
static cudaEvent_t g_copy_done[KERN_CUDA_COPY_CHANNELS];

static void copy_channels_init(void)
{
	if (g_copy_stream)
		return;
	KERN_CUDA_CHECK(cudaStreamCreateWithFlags(&g_copy_stream, cudaStreamNonBlocking));
	KERN_CUDA_CHECK(cudaEventCreateWithFlags(&g_copy_after, cudaEventDisableTiming));
	for (int i = 0; i < KERN_CUDA_COPY_CHANNELS; i++)
		KERN_CUDA_CHECK(cudaEventCreateWithFlags(&g_copy_done[i], cudaEventDisableTiming));
}

static void check_channel(int chan)
{
	if (chan < 0 || chan >= KERN_CUDA_COPY_CHANNELS)
		kern_cuda_fail(__FILE__, __LINE__, "copy channel", "out of range");
}

extern "C" void kern_cuda_copy_async(int chan, void *dst, const void *src, size_t bytes)
{
	check_channel(chan);
	copy_channels_init();
	/* the copy stream takes the compute stream's state now: the event may be
	 * recorded again at once */
	KERN_CUDA_CHECK(cudaEventRecord(g_copy_after, g_stream));
	KERN_CUDA_CHECK(cudaStreamWaitEvent(g_copy_stream, g_copy_after, 0));
	if (bytes)
		KERN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, g_copy_stream));
	KERN_CUDA_CHECK(cudaEventRecord(g_copy_done[chan], g_copy_stream));
}

extern "C" void kern_cuda_copy_wait(int chan)
{
	check_channel(chan);
	if (g_copy_stream)
		KERN_CUDA_CHECK(cudaStreamWaitEvent(g_stream, g_copy_done[chan], 0));
}

extern "C" void kern_cuda_copy_wait_host(int chan)
{
	check_channel(chan);
	if (g_copy_stream)
		KERN_CUDA_CHECK(cudaEventSynchronize(g_copy_done[chan]));
}

extern "C" int kern_cuda_host_register(void *p, size_t bytes)
{
	if (!p || !bytes)
		return -1;
	if (cudaHostRegister(p, bytes, cudaHostRegisterDefault) != cudaSuccess) {
		(void)cudaGetLastError();
		return -1;
	}
	return 0;
}

extern "C" void kern_cuda_host_unregister(void *p)
{
	if (p && cudaHostUnregister(p) != cudaSuccess)
		(void)cudaGetLastError();
}

extern "C" void *kern_cuda_dup(const void *host_src, size_t bytes)
{
	void *p = kern_cuda_malloc(bytes);
	kern_cuda_upload(p, host_src, bytes);
	return p;
}

extern "C" void kern_cuda_copy(void *dev_dst, const void *dev_src, size_t bytes)
{
	if (bytes)
		KERN_CUDA_CHECK(cudaMemcpyAsync(dev_dst, dev_src, bytes, cudaMemcpyDeviceToDevice,
		                                g_stream));
}

extern "C" void kern_cuda_zero(void *dev, size_t bytes)
{
	if (bytes)
		KERN_CUDA_CHECK(cudaMemsetAsync(dev, 0, bytes, g_stream));
}

/* The device's pool keeps the memory it once held (release threshold: all
 * of it). By default it hands whatever is free back to the driver at every
 * synchronisation (a step has several: the losses, the norms), and the next
 * step's scratch is then mapped afresh: a driver call per cudaMallocAsync,
 * which may also wait. Once, at the first scratch: a process of ours uses
 * one device (a rank per GPU). */
static void keep_pool(void)
{
	static int kept;
	if (kept)
		return;
	kept = 1;
	int dev = kern_cuda_current_device();
	cudaMemPool_t pool;
	uint64_t all = UINT64_MAX;
	if (cudaDeviceGetDefaultMemPool(&pool, dev) != cudaSuccess ||
	    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &all) != cudaSuccess)
		(void)cudaGetLastError();  /* a pool that will not keep: slower, not wrong */
}

extern "C" void *kern_cuda_scratch_alloc(size_t bytes)
{
	if (bytes == 0)
		return NULL;
	keep_pool();
	void *p = NULL;
	cudaError_t err = cudaMallocAsync(&p, bytes, g_stream);
	if (err != cudaSuccess) {
		char what[96];
		snprintf(what, sizeof what, "cudaMallocAsync(%zu bytes)", bytes);
		kern_cuda_fail(__FILE__, __LINE__, what, cudaGetErrorString(err));
	}
	return p;
}

extern "C" size_t kern_cuda_scratch_peak(void)
{
	cudaMemPool_t pool;
	unsigned long long high = 0;   /* the attribute is a 64-bit count */
	if (cudaDeviceGetDefaultMemPool(&pool, kern_cuda_current_device()) != cudaSuccess ||
	    cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &high) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return (size_t)high;
}

extern "C" void kern_cuda_scratch_free(void *dev)
{
	if (dev)
		KERN_CUDA_CHECK(cudaFreeAsync(dev, g_stream));
}

/* ---- same-bits variants, timed ---------------------------------------------- */

#define VARIANT_RUNS 3                 /* timed runs a block, back to back */
#define VARIANT_BLOCKS 2               /* blocks a variant, its least kept */
#define VARIANT_MARGIN 0.02            /* a variant beats the default by more than this */

static int g_kernel_tune = 1;
static struct kern_tune_table g_variants;  /* the picks (variant in word 0), no file */
static long g_variants_tuned;        /* keys timed */

extern "C" int kern_cuda_kernel_tune(int on)
{
	return kern_cuda_switch(&g_kernel_tune, on);
}

extern "C" long kern_cuda_variants_tuned(void)
{
	return g_variants_tuned;
}

/* Variant v's time (ms) a run: the least over VARIANT_BLOCKS blocks of
 * the mean of VARIANT_RUNS runs back to back. Each block starts behind an
 * untimed run, so that the GPU is busy when the first event passes and
 * the host's launches hide behind the runs as in a step (a block from an
 * idle GPU would count a launch's latency, a variant of two kernels
 * twice). */
static float time_variant(kern_cuda_variant_fn run, void *ctx, int v, cudaEvent_t ev[2])
{
	float least = -1.0f;
	for (int blk = 0; blk < VARIANT_BLOCKS; blk++) {
		run(ctx, v);
		KERN_CUDA_CHECK(cudaEventRecord(ev[0], g_stream));
		for (int r = 0; r < VARIANT_RUNS; r++)
			run(ctx, v);
		KERN_CUDA_CHECK(cudaEventRecord(ev[1], g_stream));
		KERN_CUDA_CHECK(cudaEventSynchronize(ev[1]));
		float ms = 0.0f;
		KERN_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
		ms /= VARIANT_RUNS;
		if (least < 0.0f || ms < least)
			least = ms;
	}
	return least;
}

extern "C" void kern_cuda_set_opts(const struct kern_cuda_opts *opts)
{
	g_sync_after = opts->sync != 0;
	const char *text = opts->kernel_picks;
	if (text && strcmp(text, "default") == 0) {
		g_kernel_tune = 0;
		return;
	}
	static char *parsed;               /* the picks taken already (a model per rank) */
	if (!text || !*text || (parsed && strcmp(parsed, text) == 0))
		return;
	char why[KERN_TUNE_KEY + 64];
	if (kern_tune_picks_parse(&g_variants, text, why, sizeof why) < 0)
		kern_cuda_fail(__FILE__, __LINE__, "kernel picks", why);
	free(parsed);
	parsed = strdup(text);
}

extern "C" int kern_cuda_variant_kept(const char *key)
{
	const uint64_t *kept = kern_tune_table_find(&g_variants, key);
	return kept ? (int)kept[0] : -1;
}

extern "C" int kern_cuda_variant_pick_some(const char *key, int n, const char *const names[],
                                           const unsigned char *ok, kern_cuda_variant_fn run,
                                           void *ctx)
{
	int kept = kern_cuda_variant_kept(key);
	if (kept >= 0) {
		if (kept >= n) {
			char why[96];
			snprintf(why, sizeof why, "pick %d of %d variants", kept, n);
			kern_cuda_fail(__FILE__, __LINE__, key, why);
		}
		return kept;
	}
	if (n < 2 || !kern_cuda_kernel_tune(-1))
		return 0;
	if (n > KERN_CUDA_VARIANTS_MOST)
		kern_cuda_fail(__FILE__, __LINE__, key, "more variants than KERN_CUDA_VARIANTS_MOST");
	int offered = 0, only = 0;
	for (int v = n - 1; v >= 0; v--)
		if (!ok || ok[v])
			offered++, only = v;
	float ms[KERN_CUDA_VARIANTS_MOST];
	for (int v = 0; v < n; v++)
		ms[v] = -1.0f;
	if (offered > 1) {
		cudaEvent_t ev[2];
		KERN_CUDA_CHECK(cudaEventCreate(&ev[0]));
		KERN_CUDA_CHECK(cudaEventCreate(&ev[1]));
		for (int v = 0; v < n; v++)
			if (!ok || ok[v])
				ms[v] = time_variant(run, ctx, v, ev);
		KERN_CUDA_CHECK(cudaEventDestroy(ev[0]));
		KERN_CUDA_CHECK(cudaEventDestroy(ev[1]));
	}
	int pick = offered > 1 ? kern_tune_fastest(ms, n, VARIANT_MARGIN) : only;
	uint64_t word[KERN_TUNE_WORDS] = { (uint64_t)pick };
	char why[160];
	if (kern_tune_table_add(&g_variants, NULL, key, word, why, sizeof why) != 0)
		kern_cuda_fail(__FILE__, __LINE__, key, why);  /* a caller's key, or no memory */
	g_variants_tuned++;
	char line[640];
	int len = snprintf(line, sizeof line, "larch: kernels timed: %s=%d (%s):", key, pick,
	                   names[pick]);
	if (offered < 2)
		snprintf(line + len, sizeof line - (size_t)len, " the only way offered");
	for (int v = 0, first = 1; v < n && len > 0 && (size_t)len < sizeof line; v++) {
		if (ms[v] < 0.0f)
			continue;              /* not offered, or not timed */
		len += snprintf(line + len, sizeof line - (size_t)len, "%s %s %.4f ms",
		                first ? "" : ",", names[v], (double)ms[v]);
		first = 0;
	}
	fprintf(stderr, "%s\n", line);
	return pick;
}

extern "C" int kern_cuda_variant_pick(const char *key, int n, const char *const names[],
                                      kern_cuda_variant_fn run, void *ctx)
{
	return kern_cuda_variant_pick_some(key, n, names, NULL, run, ctx);
}

/* ---- launch shapes --------------------------------------------------------- */

extern "C" unsigned kern_cuda_grid(long n, int threads)
{
	static long max_blocks;
	if (!max_blocks) {
		int dev = 0, sms = 0;
		KERN_CUDA_CHECK(cudaGetDevice(&dev));
		KERN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
		/* a few waves of 2048 threads per SM */
		max_blocks = (long)sms * (2048 / threads) * 4;
	}
	long need = (n + threads - 1) / threads;
	if (need < 1)
		need = 1;
	return (unsigned)(need < max_blocks ? need : max_blocks);
}
