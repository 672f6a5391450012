#include "worker/runtime/coordinator_kv.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "worker/runtime/sliced_wait.h"

namespace pshard::worker {
namespace {
constexpr absl::Duration kRpcSlack = absl::Seconds(10);
}  // namespace

absl::Status CoordinatorKvClient::Put(const std::string& key,
                                      const std::string& value) {
  if (cancelled_) return absl::CancelledError("job cancelled during rendezvous");
  v1::KvPutRequest request;
  request.set_job_id(job_id_);
  request.set_epoch(epoch_);
  request.set_key(key);
  request.set_value(value);
  return control_->KvPut(request, kRpcSlack);
}

absl::StatusOr<std::string> CoordinatorKvClient::Get(const std::string& key,
                                                     absl::Duration timeout) {
  SlicedWaitOptions wait;
  wait.timeout = timeout;
  wait.clock = &clock_;
  v1::KvGetRequest request;
  request.set_job_id(job_id_);
  request.set_epoch(epoch_);
  request.set_key(key);
  absl::StatusOr<v1::KvGetResponse> response;
  RETURN_IF_ERROR(WaitInSlices(
      wait,
      absl::StrCat("rendezvous key \"", key, "\" of job ", job_id_, " epoch ",
                   epoch_, " did not appear"),
      [this] {
        return cancelled_ ? absl::CancelledError("job cancelled during rendezvous")
                          : absl::OkStatus();
      },
      [&](absl::Duration slice) {
        *request.mutable_timeout() = ToProto(slice);
        response = control_->KvGet(request, slice + kRpcSlack);
        return response.status();
      }));
  return response->value();
}

absl::StatusOr<std::vector<std::string>> CoordinatorKvClient::GetMany(
    absl::Span<const std::string> keys, absl::Duration timeout) {
  std::vector<std::string> values;
  values.reserve(keys.size());
  const absl::Time deadline = clock_.Now() + timeout;
  while (values.size() < keys.size()) {
    const size_t first = values.size();
    // As many keys as the coordinator takes in one read, and no more bytes
    // of them than fit well inside its request size limit.
    size_t count = 0;
    size_t key_bytes = 0;
    while (first + count < keys.size() && count < kMaxKeysPerRead) {
      const size_t size = keys[first + count].size();
      if (count > 0 && key_bytes + size > kMaxKeyBytesPerRead) break;
      key_bytes += size;
      ++count;
    }
    v1::KvGetManyRequest request;
    request.set_job_id(job_id_);
    request.set_epoch(epoch_);
    for (size_t i = first; i < first + count; ++i) request.add_keys(keys[i]);
    SlicedWaitOptions wait;
    wait.timeout = std::max(deadline - clock_.Now(), absl::ZeroDuration());
    wait.clock = &clock_;
    absl::StatusOr<v1::KvGetManyResponse> response;
    // The coordinator's last word on a slice: which key it still lacked.
    std::string missing;
    absl::Status read = WaitInSlices(
        wait,
        absl::StrCat("rendezvous keys of job ", job_id_, " epoch ", epoch_,
                     " did not all appear"),
        [this] {
          return cancelled_
                     ? absl::CancelledError("job cancelled during rendezvous")
                     : absl::OkStatus();
        },
        [&](absl::Duration slice) {
          *request.mutable_timeout() = ToProto(slice);
          response = control_->KvGetMany(request, slice + kRpcSlack);
          if (response.status().code() == absl::StatusCode::kDeadlineExceeded) {
            missing = std::string(response.status().message());
          }
          return response.status();
        });
    if (read.code() == absl::StatusCode::kDeadlineExceeded &&
        !missing.empty()) {
      return absl::DeadlineExceededError(
          absl::StrCat(read.message(), ": ", missing));
    }
    RETURN_IF_ERROR(read);
    const size_t got = response->values_size();
    if (got == 0 || got > count) {
      return absl::DataLossError(
          absl::StrCat("the coordinator answered ", got, " values to a read of ",
                       count, " rendezvous keys"));
    }
    for (std::string& value : *response->mutable_values()) {
      values.push_back(std::move(value));
    }
  }
  return values;
}

}  // namespace pshard::worker
