#include "worker/runtime/coordinator_kv.h"

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

}  // namespace pshard::worker
