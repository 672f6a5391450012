// GpuShardOptimizer for builds without CUDA: Create always fails, so no
// instance exists and the other members are never reached.
#include <memory>
#include <utility>
#include <vector>

#include "worker/gpu/cuda_status.h"
#include "worker/gpu/gpu_shard_optimizer.h"

namespace pshard::worker {

class GpuShardOptimizer::Impl {};

absl::StatusOr<std::unique_ptr<GpuShardOptimizer>> GpuShardOptimizer::Create(
    const v1::OptimizerSpec& spec, int device) {
  (void)spec;
  (void)device;
  return absl::UnavailableError(gpu::kBuiltWithoutCuda);
}

GpuShardOptimizer::GpuShardOptimizer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
GpuShardOptimizer::~GpuShardOptimizer() = default;

absl::Status GpuShardOptimizer::AddBucket(int, std::vector<ParamSpan>) {
  return absl::UnavailableError(gpu::kBuiltWithoutCuda);
}
absl::Status GpuShardOptimizer::AddBf16Bucket(int, std::vector<ParamSpan>,
                                              const void*, bool) {
  return absl::UnavailableError(gpu::kBuiltWithoutCuda);
}
absl::Status GpuShardOptimizer::AdoptMasterWeights(int, const float*, int64_t) {
  return absl::UnavailableError(gpu::kBuiltWithoutCuda);
}
absl::Status GpuShardOptimizer::Step(int, float*, const float*,
                                     const HyperParameterOverrides&) {
  return absl::UnavailableError(gpu::kBuiltWithoutCuda);
}
absl::Status GpuShardOptimizer::EnqueueStep(int, float*, const float*,
                                            CUstream_st*,
                                            const HyperParameterOverrides&) {
  return absl::UnavailableError(gpu::kBuiltWithoutCuda);
}
absl::Status GpuShardOptimizer::EnqueueBf16Step(
    int, uint16_t*, const void*, GradType, CUstream_st*,
    const HyperParameterOverrides&) {
  return absl::UnavailableError(gpu::kBuiltWithoutCuda);
}
absl::StatusOr<BucketStateView> GpuShardOptimizer::ViewState(int) const {
  return absl::UnavailableError(gpu::kBuiltWithoutCuda);
}
absl::Status GpuShardOptimizer::ImportState(int, const BucketState&) {
  return absl::UnavailableError(gpu::kBuiltWithoutCuda);
}
absl::Status GpuShardOptimizer::CopyMasterWeightsToHost(int, int64_t, int64_t,
                                                       float*) {
  return absl::UnavailableError(gpu::kBuiltWithoutCuda);
}
absl::Status GpuShardOptimizer::CopyState(int, int, float*) {
  return absl::UnavailableError(gpu::kBuiltWithoutCuda);
}
int64_t GpuShardOptimizer::state_bytes(int) const { return 0; }
int64_t GpuShardOptimizer::total_state_bytes() const { return 0; }
int GpuShardOptimizer::device() const { return -1; }

}  // namespace pshard::worker
