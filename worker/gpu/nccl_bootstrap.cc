#include "worker/gpu/nccl_bootstrap.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "worker/gpu/cuda_status.h"
#include "worker/gpu/cuda_util.h"

namespace pshard::worker::gpu {

absl::Status NcclStatus(ncclResult_t result, ncclComm_t comm,
                        absl::string_view context) {
  if (result == ncclSuccess || result == ncclInProgress) {
    return absl::OkStatus();
  }
  const char* last = ncclGetLastError(comm);
  return NcclResultToStatus(static_cast<int>(result),
                            ncclGetErrorString(result),
                            last == nullptr ? "" : last, context);
}

void NcclCommAbort::operator()(ncclComm_t comm) const {
  (void)ncclCommAbort(comm);
}

std::string NcclScope(const NcclOptions& options) {
  return absl::StrCat("job ", options.job_id, " epoch ", options.epoch);
}

absl::StatusOr<ncclUniqueId> ExchangeNcclUniqueId(const NcclOptions& options,
                                                  KvClient& kv,
                                                  absl::Time deadline) {
  const std::string scope = NcclScope(options);
  const std::string key = absl::StrCat(options.key_prefix, "nccl-unique-id/",
                                       options.job_id, "/", options.epoch);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (options.rank == 0) {
    RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), nullptr,
                               absl::StrCat(scope, ": ncclGetUniqueId")));
    RETURN_IF_ERROR(kv.Put(key, std::string(id.internal, sizeof(id.internal))));
    return id;
  }
  ASSIGN_OR_RETURN(std::string value,
                   kv.Get(key, std::max(deadline - options.clock->Now(),
                                        absl::ZeroDuration())));
  if (value.size() != sizeof(id.internal)) {
    return absl::DataLossError(absl::StrCat(
        scope, ": the NCCL unique id in the rendezvous store has ",
        value.size(), " bytes, expected ", sizeof(id.internal)));
  }
  std::memcpy(id.internal, value.data(), sizeof(id.internal));
  return id;
}

absl::StatusOr<AbortingNcclComm> InitNcclComm(const NcclOptions& options,
                                              const ncclUniqueId& id,
                                              const std::string& name,
                                              absl::Time deadline) {
  const std::string scope = NcclScope(options);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = name.c_str();
  ncclComm_t raw = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&raw, options.world_size, id,
                                                options.rank, &config);
  AbortingNcclComm comm(raw);  // from here on, any failure aborts it
  RETURN_IF_ERROR(
      NcclStatus(r, raw, absl::StrCat(scope, ": ncclCommInitRankConfig")));
  if (comm == nullptr) {
    return absl::InternalError(absl::StrCat(
        scope, ": ncclCommInitRankConfig returned no communicator"));
  }
  // Initialisation proceeds in NCCL's threads; poll it with the deadline.
  Backoff backoff(*options.clock);
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comm.get(), &state);
    RETURN_IF_ERROR(NcclStatus(q, comm.get(),
                               absl::StrCat(scope, ": ncclCommGetAsyncError")));
    if (state == ncclSuccess) return comm;
    if (state != ncclInProgress) {
      return NcclStatus(state, comm.get(),
                        absl::StrCat(scope, ": NCCL initialisation of rank ",
                                     options.rank, " of ", options.world_size));
    }
    if (options.clock->Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(scope, ": NCCL initialisation of rank ", options.rank,
                       " of ", options.world_size, " did not finish within ",
                       absl::FormatDuration(options.timeout),
                       " (are all ranks up and reachable?)"));
    }
    backoff.Pause();
  }
}

}  // namespace pshard::worker::gpu
