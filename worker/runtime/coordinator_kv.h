// CoordinatorKvClient: the KvClient of one job attempt, over the
// coordinator's KvPut/KvGet/KvGetMany scoped by (job id, epoch), so a restarted job
// never sees a previous attempt's keys. Long waits are cut into short RPCs so
// that cancelling the job (Cancel()) interrupts a rendezvous within a second.
#ifndef PSHARD_WORKER_RUNTIME_COORDINATOR_KV_H_
#define PSHARD_WORKER_RUNTIME_COORDINATOR_KV_H_

#include <atomic>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "worker/comm/kv_store.h"
#include "worker/runtime/control_plane.h"

namespace pshard::worker {

class CoordinatorKvClient : public KvClient {
 public:
  // The coordinator's cap on keys per read (CoordinatorOptions), and a
  // bound on their bytes well inside its 16 MiB request limit.
  static constexpr size_t kMaxKeysPerRead = 1 << 16;
  static constexpr size_t kMaxKeyBytesPerRead = 4 << 20;

  // `control` and `clock` (which measures Get's timeout) must outlive the
  // client.
  CoordinatorKvClient(ControlPlane* control, std::string job_id, int64_t epoch,
                      const Clock& clock = Clock::Real())
      : control_(control),
        job_id_(std::move(job_id)),
        epoch_(epoch),
        clock_(clock) {}

  absl::Status Put(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override;
  // One KvGetMany call per kMaxKeysPerRead keys or kMaxKeyBytesPerRead
  // bytes of keys, whichever comes first (more only when an answer is cut at
  // the coordinator's 256 KiB). DeadlineExceeded names the first key missing.
  absl::StatusOr<std::vector<std::string>> GetMany(
      absl::Span<const std::string> keys, absl::Duration timeout) override;

  // Makes pending and later Get calls fail with Cancelled. Any thread.
  void Cancel() { cancelled_ = true; }

 private:
  ControlPlane* const control_;
  const std::string job_id_;
  const int64_t epoch_;
  const Clock& clock_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_RUNTIME_COORDINATOR_KV_H_
