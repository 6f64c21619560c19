/* tests/unit/test_gpu_parts.c - trainer/gpu_parts.c: the data-sheet peaks
 * by the names CUDA gives the parts, form factors before the plain name,
 * a part's word not found inside a longer one, and parts it does not know. */
#include <math.h>
#include <stddef.h>

#include "check.h"
#include "trainer/gpu_parts.h"

static void check_peak(const char *name, double tflops)
{
	double got = trn_gpu_datasheet_tensor16(name) * 1e-12;
	CHECK_MSG(fabs(got - tflops) < 1e-6, "%s: %.2f TFLOP/s, want %.2f", name ? name : "NULL",
	          got, tflops);
}

static void test_known_parts(void)
{
	check_peak("NVIDIA H100 80GB HBM3", 989.4);     /* SXM5 */
	check_peak("NVIDIA H100 PCIe", 756.5);
	check_peak("NVIDIA H100 NVL", 835.5);
	check_peak("NVIDIA H200", 989.4);
	check_peak("NVIDIA H200 NVL", 835.5);
	check_peak("NVIDIA GH200 480GB", 989.4);
	check_peak("NVIDIA H800", 989.4);
	check_peak("NVIDIA A100-SXM4-80GB", 312.0);
	check_peak("NVIDIA A100 80GB PCIe", 312.0);
	check_peak("NVIDIA A100-PCIE-40GB", 312.0);
	check_peak("NVIDIA L40S", 362.05);
	check_peak("NVIDIA L4", 121.0);
	check_peak("nvidia h100 pcie", 756.5);           /* any case */
}

static void test_words(void)
{
	check_peak("NVIDIA L40", 0);       /* not an L4, and not in the table */
	check_peak("NVIDIA H1000", 0);     /* not an H100 */
	check_peak("NVIDIA XH100", 0);
	check_peak("NVIDIA H100PCIe", 0);
}

static void test_unknown(void)
{
	check_peak("NVIDIA GeForce RTX 4090", 0);
	check_peak("Tesla V100-SXM2-16GB", 0);
	check_peak("", 0);
	check_peak(NULL, 0);
}

int main(void)
{
	CHECK_RUN(test_known_parts);
	CHECK_RUN(test_words);
	CHECK_RUN(test_unknown);
	return check_finish();
}
