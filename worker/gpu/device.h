// Which CUDA devices this process can use. The worker calls CudaDeviceCount()
// to resolve --device=auto and backend AUTO; GPU tests call it to decide
// whether to skip. Works in every build: without CUDA it reports 0 devices
// and says why.
#ifndef PSHARD_WORKER_GPU_DEVICE_H_
#define PSHARD_WORKER_GPU_DEVICE_H_

#include <string>

#include "absl/status/statusor.h"

namespace pshard::worker {

// Number of usable CUDA devices. 0 when there are none, and then, if
// `why_none` is not null, it is set to the reason: "pshard was built without
// CUDA", or the CUDA error of cudaGetDeviceCount (e.g. "cudaGetDeviceCount:
// cudaErrorInsufficientDriver (35): CUDA driver version is insufficient for
// CUDA runtime version" on a machine without a GPU driver), or "no CUDA device
// is present".
int CudaDeviceCount(std::string* why_none = nullptr);

// A one-line description of `device`, e.g. "NVIDIA H200 (sm_90, 132 SMs,
// 140 GiB)". InvalidArgument for a device that does not exist; Unavailable
// without CUDA.
absl::StatusOr<std::string> CudaDeviceDescription(int device);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_GPU_DEVICE_H_
