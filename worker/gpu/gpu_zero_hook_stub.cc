// GpuZeroHook for builds without CUDA: Create always fails with Unavailable.
#include <memory>
#include <utility>
#include <vector>

#include "worker/gpu/cuda_status.h"
#include "worker/gpu/gpu_zero_hook.h"

namespace pshard::worker {

absl::StatusOr<std::unique_ptr<GpuZeroHook>> GpuZeroHook::Create(
    std::vector<ParameterInfo>, NcclCommunicator*,
    std::unique_ptr<GpuShardOptimizer>, AssignmentProvider,
    const GpuZeroHookOptions&) {
  return absl::UnavailableError(gpu::kBuiltWithoutCuda);
}

}  // namespace pshard::worker
