/* trainer/gpu_parts.h - what NVIDIA's data sheets say of the GPUs larch
 * knows by name, for the MFU's denominator. Plain C, no CUDA: the GPU
 * backend (model_cuda.c) hands its figure to the CUDA library
 * (kern_cuda_peak_tensor16, kernels/cuda_common.h), and the unit suite
 * tests it (tests/unit/test_gpu_parts.c).
 *
 * Why a table: the 16-bit tensor peaks NVIDIA quotes, and every MFU figure
 * published against them (PaLM's, Megatron's, llm.c's, nanoGPT's), assume a
 * lower clock than the part's maximum: an H100 SXM's 989.4 TFLOP/s dense is
 * 132 SMs x 4096 FLOPs a clock x 1.83 GHz, where the maximum clock (1.98 GHz)
 * says 1070.5. Its FP32 figure, 66.9 TFLOP/s, is the maximum clock's, so
 * FP32 needs no table. */
#ifndef LARCH_TRAINER_GPU_PARTS_H
#define LARCH_TRAINER_GPU_PARTS_H

#ifdef __cplusplus
extern "C" {
#endif

/* The dense fp16/bf16 tensor-core peak (fp32 accumulation, no sparsity) in
 * FLOP/s of NVIDIA's data sheet for the part whose CUDA name is name
 * ("NVIDIA H100 80GB HBM3"), matched by the part's word in it ("H100",
 * "H100 PCIe", any case, not inside a longer word: "GH200" is not an
 * "H200"); 0 for a part the table lacks, or a NULL name. */
double trn_gpu_datasheet_tensor16(const char *name);

#ifdef __cplusplus
}
#endif

#endif
