#include "coordinator/notifier.h"

#include <utility>

namespace pshard {
namespace coordinator {

Notifier::Notifier() { thread_ = std::thread([this] { Loop(); }); }

Notifier::~Notifier() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void Notifier::Post(std::vector<std::function<void()>> fns) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(fns));
  ++posted_;
}

bool Notifier::WaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(
      absl::Condition(
          +[](Notifier* n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(n->mu_) {
            return n->done_ == n->posted_;
          },
          this),
      timeout);
}

void Notifier::Loop() {
  for (;;) {
    std::vector<std::function<void()>> fns;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Notifier* n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(n->mu_) {
            return n->stop_ || !n->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stop_ and nothing left
      fns = std::move(queue_.front());
      queue_.pop_front();
    }
    for (auto& fn : fns) fn();
    absl::MutexLock lock(&mu_);
    ++done_;
  }
}

}  // namespace coordinator
}  // namespace pshard
