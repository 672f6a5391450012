// Launchers of pshard's CUDA kernels (kernels.cu). A plain interface on
// purpose: raw device pointers, a cudaStream_t, a cudaError_t back; nvcc never
// sees Abseil. Callers in .cc files convert the result with CudaStatus()
// (cuda_status.h). Every launcher only enqueues work on `stream` and returns
// its own launch error (cudaGetLastError, cleared before the launch), never a
// later execution error.
#ifndef PSHARD_WORKER_GPU_KERNELS_H_
#define PSHARD_WORKER_GPU_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/gpu/kernel_params.h"

namespace pshard::worker::gpu {

// One optimizer step over every chunk of `launch` (multi-tensor: all
// parameters of a bucket, one fused pass, one launch). The per-element
// arithmetic is the formulas of worker/optim/cpu_kernels.h, operation by
// operation, with IEEE round-to-nearest intrinsics (no contraction), so it
// matches the CPU kernels bit for bit.
cudaError_t LaunchOptimizerStep(const OptimizerLaunchParams& launch,
                                const OptimizerBuffers& buffers,
                                cudaStream_t stream);

// out[i] = bf16(in[i]), rounding to nearest even (as torch's .to(bfloat16)).
cudaError_t LaunchFloatToBFloat16(const float* in, uint16_t* out, int64_t n,
                                  cudaStream_t stream);

// out[i] = float(in[i]) (exact).
cudaError_t LaunchBFloat16ToFloat(const uint16_t* in, float* out, int64_t n,
                                  cudaStream_t stream);

// data[i] *= factor, for fp32 or bf16 (computed in fp32, rounded back):
// turns a summed gradient into an average.
cudaError_t LaunchScale(void* data, int32_t dtype, int64_t n, float factor,
                        cudaStream_t stream);

// data[i] /= divisor, for fp32 or bf16 (an IEEE division in fp32, rounded
// back to nearest even): the host's averages (the CPU hook's, and
// DivideInPlace after a sum).
cudaError_t LaunchDivide(void* data, int32_t dtype, int64_t n, float divisor,
                         cudaStream_t stream);

// Gradient accumulation (worker/workload/accumulating_workload.h), the host
// arithmetic's exact operations: sum[i] += micro[i], and sum[i] = (sum[i] +
// micro[i]) / divisor (IEEE rounding of each).
cudaError_t LaunchAccumulate(float* sum, const float* micro, int64_t n,
                             cudaStream_t stream);
cudaError_t LaunchAccumulateAndDivide(float* sum, const float* micro,
                                      int64_t n, float divisor,
                                      cudaStream_t stream);

// ---- global gradient-norm clipping (worker/hook/clip_math.h) ----

// Blocks of LaunchPartialNorm: each piece keeps this many partials.
inline constexpr int kNormBlocks = 64;

// partials[b], b < kNormBlocks: block b's fixed grid-stride share of
// grads[0, n) as a running partial (inf != 0: largest |g|; else sum of
// squares in double). Deterministic: no atomics.
cudaError_t LaunchPartialNorm(const float* grads, int64_t n, int32_t inf,
                              double* partials, cudaStream_t stream);

// One block: slots[rank] = PartialNormValue of partials[0, count) combined
// in order, every other of the world_size slots 0.
cudaError_t LaunchGatherNorms(const double* partials, int64_t count,
                              int32_t inf, float* slots, int world_size,
                              int rank, cudaStream_t stream);

// grads[i] *= ClipCoefficient(TotalNorm(slots, world_size), max_norm).
cudaError_t LaunchClipScale(float* grads, int64_t n, const float* slots,
                            int world_size, int32_t inf, double max_norm,
                            cudaStream_t stream);

// The synthetic workload's values: out[i] = SymmetricUniformAt(key,
// first_index + i) * scale (synthetic.h; with scale 1 and first_index 0,
// exactly FillUniformSymmetric(key, out, n) of worker/workload/random.h).
cudaError_t LaunchSyntheticValues(float* out, int64_t n, uint64_t key,
                                  int64_t first_index, float scale,
                                  cudaStream_t stream);

// ---- the mlp workload's element-wise pieces (cuBLAS does the matmuls) ----

// y[r * cols + c] += b[c] for r < rows: a Linear layer's bias.
cudaError_t LaunchAddBias(float* y, const float* b, int64_t rows, int64_t cols,
                          cudaStream_t stream);

// out[i] = in[i] > 0 ? in[i] : 0 (in == out allowed).
cudaError_t LaunchRelu(const float* in, float* out, int64_t n,
                       cudaStream_t stream);

// delta[i] = 0 where !(pre[i] > 0): the gradient through a ReLU.
cudaError_t LaunchReluBackward(const float* pre, float* delta, int64_t n,
                               cudaStream_t stream);

// Mean squared error pieces: diff = out[i] - target[i]; delta[i] = scale *
// diff; *sum += sum of diff^2 (in double; *sum must be zeroed first).
cudaError_t LaunchMseGrad(const float* out, const float* target, int64_t n,
                          float scale, float* delta, double* sum,
                          cudaStream_t stream);

// dst[i] = src[i] for n floats with a plain vectorised copy kernel: the
// benchmark's second reference point next to cudaMemcpyAsync.
cudaError_t LaunchCopy(const float* src, float* dst, int64_t n,
                       cudaStream_t stream);

}  // namespace pshard::worker::gpu

#endif  // PSHARD_WORKER_GPU_KERNELS_H_
