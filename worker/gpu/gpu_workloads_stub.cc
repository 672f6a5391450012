// GPU workloads for builds without CUDA: always Unavailable.
#include <memory>
#include <utility>

#include "worker/gpu/cuda_status.h"
#include "worker/gpu/gpu_workloads.h"

namespace pshard::worker {

absl::StatusOr<std::unique_ptr<Workload>> CreateGpuSyntheticWorkload(
    const v1::SyntheticWorkload&, uint64_t, int, int, CUstream_st*) {
  return absl::UnavailableError(gpu::kBuiltWithoutCuda);
}

absl::StatusOr<std::unique_ptr<Workload>> CreateGpuMlpWorkload(
    const v1::MlpWorkload&, uint64_t, int, int, CUstream_st*) {
  return absl::UnavailableError(gpu::kBuiltWithoutCuda);
}

absl::StatusOr<std::unique_ptr<Workload>> AdaptHostWorkloadToDevice(
    std::unique_ptr<Workload>, int, CUstream_st*) {
  return absl::UnavailableError(gpu::kBuiltWithoutCuda);
}

absl::StatusOr<std::unique_ptr<AccumulationArithmetic>>
NewDeviceAccumulationArithmetic(int, CUstream_st*) {
  return absl::UnavailableError(gpu::kBuiltWithoutCuda);
}

absl::StatusOr<std::unique_ptr<Workload>> CreateGpuWorkload(const v1::JobSpec&,
                                                            int, int, int,
                                                            CUstream_st*) {
  return absl::UnavailableError(gpu::kBuiltWithoutCuda);
}

}  // namespace pshard::worker
