#include "worker/runtime/coordinator_kv.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/proto_time.h"

namespace pshard::worker {
namespace {
constexpr absl::Duration kPollSlice = absl::Seconds(1);
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
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (cancelled_) {
      return absl::CancelledError("job cancelled during rendezvous");
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("rendezvous key \"", key, "\" of job ", job_id_,
                       " epoch ", epoch_, " did not appear within ",
                       absl::FormatDuration(timeout)));
    }
    const absl::Duration slice = std::min(left, kPollSlice);
    v1::KvGetRequest request;
    request.set_job_id(job_id_);
    request.set_epoch(epoch_);
    request.set_key(key);
    *request.mutable_timeout() = ToProto(slice);
    absl::StatusOr<v1::KvGetResponse> response =
        control_->KvGet(request, slice + kRpcSlack);
    if (response.ok()) return response->value();
    if (response.status().code() == absl::StatusCode::kUnavailable) {
      // The coordinator is restarting or briefly unreachable: try again
      // until the deadline.
      absl::SleepFor(std::min(absl::Milliseconds(200), deadline - absl::Now()));
      continue;
    }
    if (response.status().code() != absl::StatusCode::kDeadlineExceeded) {
      return response.status();
    }
  }
}

}  // namespace pshard::worker
