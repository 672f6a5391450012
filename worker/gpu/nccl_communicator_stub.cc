// NcclCommunicator for builds without CUDA: creation always fails with
// Unavailable, so backend AUTO falls back to Gloo and backend NCCL reports why.
#include <memory>
#include <string>

#include "worker/gpu/cuda_status.h"
#include "worker/gpu/nccl_communicator.h"

namespace pshard::worker {

absl::Status StreamWaitFor(Work& work, CUstream_st* stream,
                           absl::Duration timeout) {
  (void)stream;
  return work.Wait(timeout);
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateNcclCommunicator(
    const NcclOptions& options, KvClient& kv) {
  (void)options;
  (void)kv;
  return absl::UnavailableError(gpu::kBuiltWithoutCuda);
}

}  // namespace pshard::worker
