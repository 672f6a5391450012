// CoordinatorKvClient: the KvClient of one job attempt, over the
// coordinator's KvPut/KvGet scoped by (job id, epoch), so a restarted job
// never sees a previous attempt's keys. Long waits are cut into short RPCs so
// that cancelling the job (Cancel()) interrupts a rendezvous within a second.
#ifndef PSHARD_WORKER_RUNTIME_COORDINATOR_KV_H_
#define PSHARD_WORKER_RUNTIME_COORDINATOR_KV_H_

#include <atomic>
#include <string>

#include "worker/comm/kv_store.h"
#include "worker/runtime/control_plane.h"

namespace pshard::worker {

class CoordinatorKvClient : public KvClient {
 public:
  CoordinatorKvClient(ControlPlane* control, std::string job_id, int64_t epoch)
      : control_(control), job_id_(std::move(job_id)), epoch_(epoch) {}

  absl::Status Put(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override;

  // Makes pending and later Get calls fail with Cancelled. Any thread.
  void Cancel() { cancelled_ = true; }

 private:
  ControlPlane* const control_;
  const std::string job_id_;
  const int64_t epoch_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_COORDINATOR_KV_H_
