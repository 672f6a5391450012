#include "coordinator/wait_registry.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace pshard {
namespace coordinator {

absl::Status WaitRegistry::CheckCapacity() const {
  if (static_cast<int>(waits_.size()) >= max_waits_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("too many pending waits (", max_waits_, ")"));
  }
  return absl::OkStatus();
}

WaitId WaitRegistry::Park(Wait wait, absl::Time deadline) {
  const WaitId id = ++next_id_;
  deadlines_.emplace(deadline, id);
  waits_.emplace(id, std::move(wait));
  return id;
}

std::vector<Wait> WaitRegistry::TakeExpired(absl::Time now) {
  std::vector<Wait> expired;
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const WaitId id = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    auto it = waits_.find(id);
    if (it == waits_.end()) continue;
    expired.push_back(std::move(it->second));
    waits_.erase(it);
  }
  return expired;
}

std::vector<Wait> WaitRegistry::TakeAll() {
  std::vector<Wait> all;
  all.reserve(waits_.size());
  for (auto& [id, wait] : waits_) all.push_back(std::move(wait));
  waits_.clear();
  deadlines_.clear();
  return all;
}

}  // namespace coordinator
}  // namespace pshard
