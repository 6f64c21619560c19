/* trainer/spec/opt_offload_sizes.c - optimizer offload's staging size and
 * whether it works in place (opt_offload.h), which the memory plan counts
 * as trainer/opt_offload.c allocates them. */
#include "trainer/opt_offload.h"

long trn_opt_offload_stage_floats(long n, long chunk)
{
	if (chunk < 1)
		chunk = 1;
	return n < chunk ? n : chunk;
}

int trn_opt_offload_works_in_place(int params_offloaded, int streamed, int on_gpu)
{
	return params_offloaded || streamed || on_gpu;
}
