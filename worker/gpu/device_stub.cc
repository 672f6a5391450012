// CudaDeviceCount for builds without CUDA (--config=cpu_only, or no
// /usr/local/cuda): never any device.
#include <string>

#include "worker/gpu/cuda_status.h"
#include "worker/gpu/device.h"

namespace pshard::worker {

int CudaDeviceCount(std::string* why_none) {
  if (why_none != nullptr) *why_none = std::string(gpu::kBuiltWithoutCuda);
  return 0;
}

absl::StatusOr<std::string> CudaDeviceDescription(int device) {
  (void)device;
  return absl::UnavailableError(gpu::kBuiltWithoutCuda);
}

}  // namespace pshard::worker
