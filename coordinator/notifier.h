// Runs batches of callbacks on its own thread, in the order posted: where
// the coordinator answers thousands of completed waits (an assignment
// published to 4,096 parked ranks) or a reply that must wait for a write,
// so that the call that caused it answers at once.
//
// Thread-safe. The destructor runs what is queued, then joins.
#ifndef PSHARD_COORDINATOR_NOTIFIER_H_
#define PSHARD_COORDINATOR_NOTIFIER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pshard {
namespace coordinator {

class Notifier {
 public:
  Notifier();
  ~Notifier();
  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;

  // Queues `fns` to run, in order, after everything posted before.
  void Post(std::vector<std::function<void()>> fns) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits (up to `timeout`) until everything posted so far has run; false
  // on timeout.
  bool WaitIdle(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex mu_;
  std::deque<std::vector<std::function<void()>>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t posted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  // Started last, in the constructor's body.
  std::thread thread_;
};

}  // namespace coordinator
}  // namespace pshard

#endif  // PSHARD_COORDINATOR_NOTIFIER_H_
