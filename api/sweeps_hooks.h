/* api/sweeps_hooks.h - what the sweep endpoints ask of the service.
 *
 * A sweep's children are ordinary jobs: they reach an executor the way any
 * job does (api/jobs_hooks.h, submitted). An executor that runs a sweep as
 * one unit (a Slurm job array) takes it through sweep_submitted instead of
 * job by job; without that hook every child is handed over on its own.
 */
#ifndef LARCH_API_SWEEPS_HOOKS_H
#define LARCH_API_SWEEPS_HOOKS_H

struct api_sweeps_hooks {
	unsigned max_children;         /* a sweep of more children is refused (400); 0 = 1000 */
	/* Optional. Sweep id and its children were stored (PENDING): hand them
	 * over as one unit. Returns at once. */
	void (*sweep_submitted)(void *arg, long long sweep);
	/* Optional. The whole sweep is being cancelled: an executor that runs
	 * it as one unit stops it with one order (scancel of the array). Each
	 * child is then cancelled through api_jobs_hooks.cancel as well, which
	 * records who asked. Returns at once. */
	void (*sweep_cancel)(void *arg, long long sweep);
	void *arg;
};

#endif
