#include "worker/comm/kv_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pshard::worker {

absl::StatusOr<std::vector<std::string>> KvClient::GetMany(
    absl::Span<const std::string> keys, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const std::string& key : keys) {
    absl::StatusOr<std::string> value =
        Get(key, std::max(deadline - absl::Now(), absl::ZeroDuration()));
    if (!value.ok()) return value.status();
    values.push_back(*std::move(value));
  }
  return values;
}

absl::StatusOr<std::vector<std::string>> GetFromEveryPeer(
    KvClient& kv, int world_size, int rank,
    absl::FunctionRef<std::string(int)> key_of, absl::Duration timeout) {
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) {
    if (r != rank) keys.push_back(key_of(r));
  }
  absl::StatusOr<std::vector<std::string>> values = kv.GetMany(keys, timeout);
  if (values.ok()) values->insert(values->begin() + rank, std::string());
  return values;
}

absl::Status InMemoryKvStore::Put(const std::string& key,
                                  const std::string& value) {
  absl::MutexLock lock(&mu_);
  values_[key] = value;
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryKvStore::Get(const std::string& key,
                                                 absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto present = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return values_.count(key) > 0;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&present), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("key \"", key, "\" did not appear within ",
                     absl::FormatDuration(timeout)));
  }
  return values_[key];
}

}  // namespace pshard::worker
