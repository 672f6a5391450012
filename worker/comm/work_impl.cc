#include "worker/comm/work_impl.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace pshard::worker {

std::shared_ptr<CompletionWork> CompletionWork::Done(absl::Status status) {
  auto work = std::make_shared<CompletionWork>();
  work->Complete(std::move(status));
  return work;
}

bool CompletionWork::IsCompleted() {
  absl::MutexLock lock(&mu_);
  return done_;
}

absl::Status CompletionWork::Wait(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(&done_), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "communication operation did not finish within ",
        absl::FormatDuration(timeout)));
  }
  return status_;
}

void CompletionWork::OnCompletion(std::function<void(absl::Status)> done) {
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (!done_) {
      callbacks_.push_back(std::move(done));
      return;
    }
    status = status_;
  }
  done(status);
}

void CompletionWork::Complete(absl::Status status) {
  std::vector<std::function<void(absl::Status)>> callbacks;
  {
    absl::MutexLock lock(&mu_);
    if (done_) return;
    done_ = true;
    status_ = status;
    callbacks.swap(callbacks_);
  }
  for (auto& callback : callbacks) callback(status);
}

std::shared_ptr<Work> AllOf(std::vector<std::shared_ptr<Work>> works) {
  if (works.size() == 1) return std::move(works.front());
  auto all = std::make_shared<CompletionWork>();
  if (works.empty()) {
    all->Complete(absl::OkStatus());
    return all;
  }
  struct Pending {
    explicit Pending(size_t parts) : left(parts) {}
    absl::Mutex mu;
    size_t left ABSL_GUARDED_BY(mu);
    absl::Status first_failure ABSL_GUARDED_BY(mu);
  };
  auto pending = std::make_shared<Pending>(works.size());
  for (const std::shared_ptr<Work>& work : works) {
    work->OnCompletion([all, pending](absl::Status status) {
      absl::Status outcome;
      {
        absl::MutexLock lock(&pending->mu);
        if (!status.ok() && pending->first_failure.ok()) {
          pending->first_failure = std::move(status);
        }
        if (--pending->left > 0) return;
        outcome = pending->first_failure;
      }
      all->Complete(std::move(outcome));
    });
  }
  return all;
}

}  // namespace pshard::worker
