// CompletionWork: the Work handle every host communicator returns. The
// backend completes it exactly once with the operation's status; waiters and
// completion callbacks are released then. AllOf joins several Works.
#ifndef PSHARD_WORKER_COMM_WORK_IMPL_H_
#define PSHARD_WORKER_COMM_WORK_IMPL_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/comm/communicator.h"

namespace pshard::worker {

class CompletionWork : public Work {
 public:
  CompletionWork() = default;

  // Returns a Work that has already finished with `status`.
  static std::shared_ptr<CompletionWork> Done(absl::Status status);

  bool IsCompleted() override;
  absl::Status Wait(absl::Duration timeout) override;
  void OnCompletion(std::function<void(absl::Status)> done) override;

  // Finishes the work. Later calls are ignored (the first status wins), so a
  // racing Abort and a normal completion are both safe. Callbacks run on the
  // calling thread, after the lock is released.
  void Complete(absl::Status status);

 private:
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(absl::Status)>> callbacks_ ABSL_GUARDED_BY(mu_);
};

// A Work that completes when every one of `works` has, with the first
// failure among them to complete (OK if none failed). One work is returned
// as it is; none gives a finished OK work.
std::shared_ptr<Work> AllOf(std::vector<std::shared_ptr<Work>> works);

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_COMM_WORK_IMPL_H_
