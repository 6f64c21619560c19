/* trainer/copier.h - how an offload engine's copies run on a device
 * (param_offload.h, act_offload.h): its staging in device memory, its host
 * store page-locked, and its copies on a copy stream beside the compute,
 * each waited for before what it writes is read or what it reads is
 * rewritten. An engine given no copier runs on the CPU: host memory, and
 * each copy done by memcpy at its wait (the latest moment an asynchronous
 * copy could have finished), so that a missing wait shows as wrong bits.
 */
#ifndef LARCH_TRAINER_COPIER_H
#define LARCH_TRAINER_COPIER_H

struct trn_copier {
	float *(*alloc)(long floats);          /* device memory; NULL when out of memory */
	void (*free)(float *p);
	float *(*host_alloc)(long floats);     /* host memory, page-locked where possible */
	void (*host_free)(float *p);
	void (*zero)(float *dst, long floats);  /* device memory, in order with the compute */
	/* starts a copy on channel chan once the compute enqueued so far is done */
	void (*start)(int chan, float *dst, const float *src, long floats);
	/* the compute enqueued from now on waits for chan's copy; with to_host
	 * the host waits for it too (it reads or rewrites the host side) */
	void (*wait)(int chan, int to_host);
};

#endif
