// How an NcclCommunicator's NCCL communicator comes to be, apart from the
// communicator that then uses it (nccl_communicator.cc): the ncclUniqueId
// exchanged through the job's rendezvous store, and the non-blocking
// initialisation polled to a deadline. Plus NcclStatus, the one conversion
// of an ncclResult_t that both sides use. Internal to the CUDA build of
// :nccl_communicator.
//
// The exchange: rank 0 creates the id and puts it under
//   <key_prefix>nccl-unique-id/<job_id>/<epoch>
// (scoped by epoch, so a restarted job never sees a previous attempt's id);
// every other rank gets it, waiting until the deadline.
#ifndef PSHARD_WORKER_GPU_NCCL_BOOTSTRAP_H_
#define PSHARD_WORKER_GPU_NCCL_BOOTSTRAP_H_

#include <nccl.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "worker/comm/kv_store.h"
#include "worker/gpu/nccl_communicator.h"

namespace pshard::worker::gpu {

// The status of an NCCL call on `comm` (may be null): OK for ncclSuccess and
// ncclInProgress, else gpu::NcclResultToStatus with NCCL's last error.
absl::Status NcclStatus(ncclResult_t result, ncclComm_t comm,
                        absl::string_view context);

// An NCCL communicator that is aborted (ncclCommAbort) unless released: what
// the bootstrap hands over until the NcclCommunicator owns it.
struct NcclCommAbort {
  void operator()(ncclComm_t comm) const;
};
using AbortingNcclComm = std::unique_ptr<ncclComm, NcclCommAbort>;

// "job <job_id> epoch <epoch>": how errors of the bootstrap name the
// communicator.
std::string NcclScope(const NcclOptions& options);

// Rank 0: creates the unique id and publishes it through `kv`. Other ranks:
// fetch it, waiting until `deadline` (on options.clock).
// Errors: the KvClient's (DeadlineExceeded when rank 0 does not publish in
// time), DataLoss (a value of the wrong size in the store), or NCCL's from
// ncclGetUniqueId.
absl::StatusOr<ncclUniqueId> ExchangeNcclUniqueId(const NcclOptions& options,
                                                  KvClient& kv,
                                                  absl::Time deadline);

// Initialises rank options.rank's communicator with blocking = 0, named
// `name` (NCCL's config keeps the pointer: `name` must outlive the
// communicator), and polls NCCL's asynchronous state until done or
// `deadline` (on options.clock).
// Errors: NCCL's (Unavailable for system/remote errors), DeadlineExceeded
// (peers did not join in time), Internal (NCCL returned no communicator).
absl::StatusOr<AbortingNcclComm> InitNcclComm(const NcclOptions& options,
                                              const ncclUniqueId& id,
                                              const std::string& name,
                                              absl::Time deadline);

}  // namespace pshard::worker::gpu

#endif  // PSHARD_WORKER_GPU_NCCL_BOOTSTRAP_H_
