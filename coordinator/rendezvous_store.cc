#include "coordinator/rendezvous_store.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/ids.h"

namespace pshard {
namespace coordinator {

absl::Status KvReadMissing(const KvRead& read) {
  std::string what =
      absl::StrCat("rendezvous key \"", Clip(read.keys[read.present], 64),
                   "\" did not appear before the deadline");
  if (read.keys.size() > 1) {
    absl::StrAppend(&what, " (", read.present, " of ", read.keys.size(),
                    " keys read were present)");
  }
  return absl::DeadlineExceededError(what);
}

absl::Status RendezvousStore::CheckKey(absl::string_view key,
                                       const RendezvousLimits& limits) {
  if (key.empty() || key.size() > static_cast<size_t>(limits.max_key_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key: must be 1..", limits.max_key_bytes, " bytes, got ", key.size()));
  }
  return absl::OkStatus();
}

absl::Status RendezvousStore::CheckValue(absl::string_view value,
                                         const RendezvousLimits& limits) {
  if (static_cast<int64_t>(value.size()) > limits.max_value_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("value: at most ", limits.max_value_bytes,
                     " bytes, got ", value.size()));
  }
  return absl::OkStatus();
}

absl::Status RendezvousStore::CheckKeys(const std::vector<std::string>& keys,
                                        const RendezvousLimits& limits) {
  if (keys.empty() ||
      keys.size() > static_cast<size_t>(limits.max_keys_per_read)) {
    return absl::InvalidArgumentError(
        absl::StrCat("keys: must be 1..", limits.max_keys_per_read,
                     " keys, got ", keys.size()));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (absl::Status bad = CheckKey(keys[i], limits); !bad.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("keys[", i, "]: ", bad.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RendezvousStore::WaitId>> RendezvousStore::Put(
    absl::string_view job_id, absl::string_view key, absl::string_view value,
    const RendezvousLimits& limits, int64_t& total_bytes) {
  auto it = values_.find(key);
  const bool is_new = it == values_.end();
  const int64_t old_size = is_new ? 0 : it->second->size();
  if (is_new && static_cast<int64_t>(values_.size()) >= limits.max_keys_per_job) {
    return absl::ResourceExhaustedError(
        absl::StrCat(job_id, ": rendezvous store full (",
                     limits.max_keys_per_job, " keys)"));
  }
  const int64_t new_bytes = bytes_ - old_size +
                            static_cast<int64_t>(value.size()) +
                            (is_new ? static_cast<int64_t>(key.size()) : 0);
  if (new_bytes > limits.max_bytes_per_job) {
    return absl::ResourceExhaustedError(
        absl::StrCat(job_id, ": rendezvous store full (",
                     limits.max_bytes_per_job, " bytes)"));
  }
  if (total_bytes + (new_bytes - bytes_) > limits.max_bytes_total) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rendezvous stores of all jobs full (",
                     limits.max_bytes_total, " bytes)"));
  }
  total_bytes += new_bytes - bytes_;
  bytes_ = new_bytes;
  values_[key] = std::make_shared<const std::string>(value);
  std::vector<WaitId> woken;
  auto wit = waiters_.find(key);
  if (wit != waiters_.end()) {
    woken = std::move(wit->second);
    waiters_.erase(wit);
  }
  return woken;
}

const std::string* RendezvousStore::Get(absl::string_view key) const {
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : it->second.get();
}

void RendezvousStore::AddWaiter(absl::string_view key, WaitId id) {
  waiters_[key].push_back(id);
}

bool RendezvousStore::Advance(KvRead& read,
                              const RendezvousLimits& limits) const {
  while (read.present < read.keys.size()) {
    const std::string* value = Get(read.keys[read.present]);
    if (value == nullptr) return false;
    const int64_t size = static_cast<int64_t>(value->size());
    if (read.present > 0 && read.bytes + size > limits.max_read_bytes) {
      return true;
    }
    read.bytes += size;
    ++read.present;
  }
  return true;
}

std::vector<KvValue> RendezvousStore::Values(
    const KvRead& read, const RendezvousLimits& limits) const {
  std::vector<KvValue> values;
  values.reserve(read.present);
  int64_t bytes = 0;
  for (size_t i = 0; i < read.present; ++i) {
    const KvValue& value = values_.find(read.keys[i])->second;
    bytes += static_cast<int64_t>(value->size());
    if (i > 0 && bytes > limits.max_read_bytes) break;
    values.push_back(value);
  }
  return values;
}

std::vector<RendezvousStore::WaitId> RendezvousStore::Clear(
    int64_t& total_bytes) {
  std::vector<WaitId> pending;
  for (auto& [key, ids] : waiters_) {
    pending.insert(pending.end(), ids.begin(), ids.end());
  }
  waiters_.clear();
  values_.clear();
  total_bytes -= bytes_;
  bytes_ = 0;
  return pending;
}

}  // namespace coordinator
}  // namespace pshard
