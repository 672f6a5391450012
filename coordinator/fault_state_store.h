// A StateStore for tests that fails chosen writes: it forwards to a real
// store (usually StateStore::Open(":memory:")) until told to fail, so a test
// can prove that a failed commit is reported to the caller whose change it
// held, and that the coordinator goes on once the store recovers.
#ifndef PSHARD_COORDINATOR_FAULT_STATE_STORE_H_
#define PSHARD_COORDINATOR_FAULT_STATE_STORE_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/state_store.h"

namespace pshard {
namespace coordinator {

// Thread-safe: the test thread may arm faults while the coordinator writes.
class FaultStateStore final : public StateStore {
 public:
  explicit FaultStateStore(std::unique_ptr<StateStore> inner)
      : inner_(std::move(inner)) {}

  // After `after` more non-empty commits go through, the next `count` fail
  // with `error` and write nothing; later ones go through again. count < 0:
  // every commit fails until Heal(). `after` picks one commit of an RPC that
  // makes several (as a crash between them would leave it).
  void FailCommits(int count, absl::Status error, int after = 0)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Commits go through again.
  void Heal() ABSL_LOCKS_EXCLUDED(mu_);
  // While held, non-empty commits wait (as behind a slow disk) until
  // Release().
  void Hold() ABSL_LOCKS_EXCLUDED(mu_);
  void Release() ABSL_LOCKS_EXCLUDED(mu_);
  // What has committed through this store so far (workers, jobs, events,
  // assignments, finished ranks as Load would give them): what a test can
  // see is durable, with no second connection to the file (it has one
  // owner).
  Snapshot committed() const ABSL_LOCKS_EXCLUDED(mu_);
  // Non-empty commits attempted so far (failed ones included).
  int64_t commits() const ABSL_LOCKS_EXCLUDED(mu_);
  // Commits failed so far.
  int64_t failed_commits() const ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<Snapshot> Load() override;
  absl::Status Commit(const Batch& batch) override ABSL_LOCKS_EXCLUDED(mu_);
  // Fails with the armed error while commits would fail (without using up
  // a counted failure), else probes the inner store.
  absl::Status Probe() override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::unique_ptr<StateStore> inner_;
  mutable absl::Mutex mu_;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  Snapshot committed_ ABSL_GUARDED_BY(mu_);
  int pass_count_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_count_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  int64_t commits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failed_commits_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_FAULT_STATE_STORE_H_
