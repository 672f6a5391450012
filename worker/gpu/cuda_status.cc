#include "worker/gpu/cuda_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace pshard::worker::gpu {
namespace {

// cudaError_t values (driver_types.h); repeated here so this file needs no
// CUDA headers. cuda_status_test checks them against the real enum.
constexpr int kCudaSuccess = 0;
constexpr int kCudaErrorInvalidValue = 1;
constexpr int kCudaErrorMemoryAllocation = 2;
constexpr int kCudaErrorInsufficientDriver = 35;
constexpr int kCudaErrorInvalidDevice = 101;
constexpr int kCudaErrorNoDevice = 100;
constexpr int kCudaErrorDevicesUnavailable = 46;
constexpr int kCudaErrorNotReady = 600;

// ncclResult_t values (nccl.h).
constexpr int kNcclSuccess = 0;
constexpr int kNcclUnhandledCudaError = 1;
constexpr int kNcclSystemError = 2;
constexpr int kNcclInternalError = 3;
constexpr int kNcclInvalidArgument = 4;
constexpr int kNcclInvalidUsage = 5;
constexpr int kNcclRemoteError = 6;
constexpr int kNcclInProgress = 7;

absl::StatusCode CudaCode(int code) {
  switch (code) {
    case kCudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case kCudaErrorInsufficientDriver:
    case kCudaErrorNoDevice:
    case kCudaErrorDevicesUnavailable:
    case kCudaErrorNotReady:
      return absl::StatusCode::kUnavailable;
    case kCudaErrorInvalidValue:
    case kCudaErrorInvalidDevice:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::StatusCode NcclCode(int result) {
  switch (result) {
    case kNcclInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    case kNcclInvalidUsage:
      return absl::StatusCode::kFailedPrecondition;
    case kNcclSystemError:
    case kNcclRemoteError:
      return absl::StatusCode::kUnavailable;
    case kNcclUnhandledCudaError:
    case kNcclInternalError:
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status CudaErrorToStatus(int code, absl::string_view name,
                               absl::string_view text,
                               absl::string_view context) {
  if (code == kCudaSuccess) return absl::OkStatus();
  return absl::Status(
      CudaCode(code),
      absl::StrCat(context, ": ", name.empty() ? "cudaError" : name, " (", code,
                   "): ", text.empty() ? "unknown CUDA error" : text));
}

absl::Status NcclResultToStatus(int result, absl::string_view text,
                                absl::string_view last_error,
                                absl::string_view context) {
  if (result == kNcclSuccess || result == kNcclInProgress) {
    return absl::OkStatus();
  }
  std::string message = absl::StrCat(
      context, ": NCCL ", text.empty() ? "error" : text, " (", result, ")");
  if (!last_error.empty()) absl::StrAppend(&message, ": ", last_error);
  return absl::Status(NcclCode(result), message);
}

}  // namespace pshard::worker::gpu
