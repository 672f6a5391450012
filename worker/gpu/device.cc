#include "worker/gpu/device.h"

#include <cuda_runtime_api.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/gpu/cuda_util.h"

namespace pshard::worker {

int CudaDeviceCount(std::string* why_none) {
  int count = 0;
  const absl::Status status =
      gpu::CudaStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (!status.ok()) {
    if (why_none != nullptr) *why_none = std::string(status.message());
    return 0;
  }
  if (count <= 0) {
    if (why_none != nullptr) *why_none = "no CUDA device is present";
    return 0;
  }
  return count;
}

absl::StatusOr<std::string> CudaDeviceDescription(int device) {
  std::string why;
  const int count = CudaDeviceCount(&why);
  if (count == 0) return absl::UnavailableError(why);
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA device ", device, " does not exist (", count, " present)"));
  }
  cudaDeviceProp prop;
  absl::Status status = gpu::CudaStatus(cudaGetDeviceProperties(&prop, device),
                                        "cudaGetDeviceProperties");
  if (!status.ok()) return status;
  return absl::StrFormat(
      "%s (sm_%d%d, %d SMs, %.0f GiB)", prop.name, prop.major, prop.minor,
      prop.multiProcessorCount,
      static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
}

}  // namespace pshard::worker
