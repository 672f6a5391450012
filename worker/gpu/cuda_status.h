// Conversion of CUDA and NCCL error codes into absl::Status, in one place.
//
// These functions take the numeric code and the library's own text, so they
// build and are tested without CUDA; the CUDA-side wrappers in cuda_util.h
// (CudaStatus, NcclStatus) feed them cudaGetErrorName/cudaGetErrorString and
// ncclGetErrorString/ncclGetLastError. Every CUDA or NCCL call in worker/gpu
// is converted exactly once, at the call site, through those wrappers.
#ifndef PSHARD_WORKER_GPU_CUDA_STATUS_H_
#define PSHARD_WORKER_GPU_CUDA_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pshard::worker::gpu {

// Message used by every GPU entry point of a build without CUDA.
inline constexpr absl::string_view kBuiltWithoutCuda =
    "pshard was built without CUDA";

// The status of a CUDA runtime call that returned `code` (cudaError_t):
// OK for 0 (cudaSuccess); otherwise "<context>: <name> (<code>): <text>".
// Codes: out of memory -> ResourceExhausted; no device / driver too old /
// device unavailable -> Unavailable; invalid value or device ->
// InvalidArgument; not ready -> Unavailable; anything else (launch failures,
// illegal address, sticky errors) -> Internal.
absl::Status CudaErrorToStatus(int code, absl::string_view name,
                               absl::string_view text,
                               absl::string_view context);

// The status of an NCCL call that returned `result` (ncclResult_t): OK for 0
// (ncclSuccess) and 7 (ncclInProgress: not an error, callers poll for it);
// otherwise "<context>: NCCL <text> (<result>)" plus ": <last_error>" when
// NCCL gave details. Codes: invalid argument -> InvalidArgument; invalid usage
// -> FailedPrecondition; system and remote errors (sockets, a peer gone) ->
// Unavailable; unhandled CUDA and internal errors -> Internal.
absl::Status NcclResultToStatus(int result, absl::string_view text,
                                absl::string_view last_error,
                                absl::string_view context);

}  // namespace pshard::worker::gpu

#endif  // PSHARD_WORKER_GPU_CUDA_STATUS_H_
