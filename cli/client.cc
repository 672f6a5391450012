#include "cli/client.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "grpc/support/time.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace pshard::cli {
namespace {

// `timeout` from now, on gRPC's own (monotonic) clock: gRPC measures every
// deadline there, whatever clock pshardctl's logic runs on (tests run that
// on a FakeClock).
gpr_timespec GrpcDeadline(absl::Duration timeout) {
  return gpr_convert_clock_type(
      gpr_time_from_nanos(absl::ToInt64Nanoseconds(timeout), GPR_TIMESPAN),
      GPR_CLOCK_MONOTONIC);
}

// gRPC's own message when a call's deadline passes, which says neither what
// did not answer nor within how long.
constexpr absl::string_view kGrpcDeadlineMessage = "Deadline Exceeded";

// `status` converted, with `method` prefixed; a deadline passed on our side
// says `what_late` (e.g. "the coordinator at h:p did not answer") and the
// `timeout`.
absl::Status CallStatus(const grpc::Status& status, absl::string_view method,
                        absl::string_view what_late, absl::Duration timeout) {
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
      status.error_message() == kGrpcDeadlineMessage) {
    return absl::DeadlineExceededError(absl::StrCat(
        method, method.empty() ? "" : ": ", what_late, " within ",
        absl::FormatDuration(timeout)));
  }
  return method.empty() ? FromGrpcStatus(status)
                        : FromGrpcStatus(status, method);
}

// Waits up to `timeout` for `channel` to connect. A refused connection (or
// a host that does not resolve) puts the channel in TRANSIENT_FAILURE at
// once: that ends the wait there, rather than after `timeout` of gRPC's
// retries. Unavailable either way: `what` "refuses connections" or "does not
// answer within <timeout>", then `hint`.
// What to check when a connection fails at once under `security`.
std::string TransportHint(const security::TransportSecurity& security) {
  return security.insecure
             ? "; if the server uses TLS, drop --insecure and pass --tls_ca"
             : "; with TLS, also check --tls_ca (and --tls_cert/--tls_key where "
               "the server asks for a client certificate), or pass --insecure "
               "for a plaintext server";
}

absl::Status AwaitConnected(grpc::Channel& channel,
                            const security::TransportSecurity& security,
                            absl::Duration timeout, absl::string_view what,
                            absl::string_view hint) {
  const gpr_timespec deadline = GrpcDeadline(timeout);
  for (grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
       state != GRPC_CHANNEL_READY;
       state = channel.GetState(/*try_to_connect=*/true)) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE ||
        state == GRPC_CHANNEL_SHUTDOWN) {
      return absl::UnavailableError(absl::StrCat(
          what,
          ": the connection failed at once (refused, the host is unknown, or "
          "the TLS handshake failed",
          TransportHint(security), ")", hint));
    }
    if (!channel.WaitForStateChange(state, deadline)) {
      return absl::UnavailableError(absl::StrCat(
          what, " within ", absl::FormatDuration(timeout), hint));
    }
  }
  return absl::OkStatus();
}

// One server-streaming call with a deadline: `start` opens it on the
// context, every message goes to `on_message` until the server ends the
// stream. Cancelled (naming `method`) once any of `cancels` (each may be
// null) fires; otherwise the stream's own status, prefixed with `method`
// when `name_method`; past the deadline, "<what_late> within <timeout>".
template <typename Message>
absl::Status ReadServerStream(
    const char* method, bool name_method, absl::string_view what_late,
    absl::Duration timeout,
    const std::vector<Cancellation*>& cancels,
    const std::function<std::unique_ptr<grpc::ClientReader<Message>>(
        grpc::ClientContext*)>& start,
    const std::function<void(const Message&)>& on_message) {
  grpc::ClientContext context;
  context.set_deadline(GrpcDeadline(timeout));
  std::vector<Cancellation*> attached;
  auto detach = [&] {
    for (Cancellation* cancel : attached) cancel->Detach(&context);
  };
  const absl::Status cancelled =
      absl::CancelledError(absl::StrCat(method, ": cancelled"));
  for (Cancellation* cancel : cancels) {
    if (cancel == nullptr) continue;
    if (!cancel->Attach(&context)) {
      detach();
      return cancelled;
    }
    attached.push_back(cancel);
  }
  std::unique_ptr<grpc::ClientReader<Message>> reader = start(&context);
  Message message;
  while (reader->Read(&message)) on_message(message);
  const grpc::Status status = reader->Finish();
  detach();
  for (Cancellation* cancel : attached) {
    if (cancel->cancelled()) return cancelled;
  }
  return CallStatus(status, name_method ? method : "", what_late, timeout);
}

}  // namespace

void Cancellation::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (grpc::ClientContext* context : contexts_) context->TryCancel();
}

bool Cancellation::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

bool Cancellation::Attach(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return false;
  contexts_.insert(context);
  return true;
}

void Cancellation::Detach(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  contexts_.erase(context);
}

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(
    const std::string& address, const security::TransportSecurity& security,
    absl::Duration connect_timeout, absl::Duration rpc_timeout) {
  if (address.empty()) {
    return absl::InvalidArgumentError(
        "--coordinator is empty; pass host:port or set $PSHARD_COORDINATOR");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                   security::NewChannel(address, security));
  RETURN_IF_ERROR(AwaitConnected(
      *channel, security, connect_timeout,
      absl::StrCat("cannot reach the coordinator at ", address),
      " (is pshard-coordinator running? set --coordinator or "
      "$PSHARD_COORDINATOR)"));
  return std::make_unique<CoordinatorClient>(std::move(channel), address,
                                             rpc_timeout);
}

CoordinatorClient::CoordinatorClient(std::shared_ptr<grpc::Channel> channel,
                                     std::string address,
                                     absl::Duration rpc_timeout)
    : address_(std::move(address)),
      rpc_timeout_(rpc_timeout),
      jobs_(v1::JobService::NewStub(channel)),
      shards_(v1::ShardService::NewStub(channel)),
      cluster_(v1::ClusterService::NewStub(channel)) {}

void CoordinatorClient::SetDeadline(grpc::ClientContext& context) const {
  context.set_deadline(GrpcDeadline(rpc_timeout_));
}

template <typename Stub, typename Request, typename Response>
absl::StatusOr<Response> CoordinatorClient::Call(
    const char* method, Stub* stub,
    grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Request&, Response*),
    const Request& request) const {
  grpc::ClientContext context;
  SetDeadline(context);
  Response response;
  grpc::Status status = (stub->*rpc)(&context, request, &response);
  if (!status.ok()) {
    return CallStatus(
        status, method,
        absl::StrCat("the coordinator at ", address_, " did not answer"),
        rpc_timeout_);
  }
  return response;
}

absl::StatusOr<v1::Job> CoordinatorClient::SubmitJob(
    const v1::JobSpec& spec, const std::string& request_id) {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  request.set_request_id(request_id);
  // Without a request id a retry could submit the job twice.
  const int attempts = request_id.empty() ? 1 : kSubmitAttempts;
  absl::StatusOr<v1::Job> job;
  for (int attempt = 1; attempt <= attempts; ++attempt) {
    job = Call("SubmitJob", jobs_.get(), &v1::JobService::Stub::SubmitJob,
               request);
    if (job.ok() || !(absl::IsUnavailable(job.status()) ||
                      absl::IsDeadlineExceeded(job.status()))) {
      break;
    }
  }
  return job;
}

absl::StatusOr<v1::Job> CoordinatorClient::GetJob(const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  return Call("GetJob", jobs_.get(), &v1::JobService::Stub::GetJob, request);
}

namespace {

// Asks for pages of at most this many items (the servers' maximum).
constexpr int kPageSize = 1000;

// Calls `list(page_size, page_token, &items)` page after page until the last
// page or `limit` items (0: no limit); returns the next_page_token given.
template <typename Item, typename ListPage>
absl::StatusOr<std::vector<Item>> FollowPages(int limit, ListPage list) {
  std::vector<Item> items;
  std::string token;
  do {
    int page_size = kPageSize;
    if (limit > 0) {
      page_size = std::min<int>(page_size, limit - static_cast<int>(items.size()));
    }
    ASSIGN_OR_RETURN(token, list(page_size, token, &items));
  } while (!token.empty() &&
           (limit == 0 || static_cast<int>(items.size()) < limit));
  if (limit > 0 && static_cast<int>(items.size()) > limit) items.resize(limit);
  return items;
}

}  // namespace

absl::StatusOr<std::vector<v1::Job>> CoordinatorClient::ListJobs(
    const std::vector<v1::JobState>& states, int limit) {
  return FollowPages<v1::Job>(
      limit,
      [&](int page_size, const std::string& token,
          std::vector<v1::Job>* jobs) -> absl::StatusOr<std::string> {
        v1::ListJobsRequest request;
        for (v1::JobState s : states) request.add_states(s);
        request.set_page_size(page_size);
        request.set_page_token(token);
        ASSIGN_OR_RETURN(v1::ListJobsResponse response,
                         Call("ListJobs", jobs_.get(),
                              &v1::JobService::Stub::ListJobs, request));
        for (v1::Job& job : *response.mutable_jobs()) jobs->push_back(std::move(job));
        return std::move(*response.mutable_next_page_token());
      });
}

absl::StatusOr<v1::Job> CoordinatorClient::CancelJob(const std::string& job_id,
                                                     const std::string& reason) {
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  return Call("CancelJob", jobs_.get(), &v1::JobService::Stub::CancelJob,
              request);
}

absl::StatusOr<v1::ShardAssignment> CoordinatorClient::GetShardAssignment(
    const std::string& job_id) {
  v1::GetShardAssignmentRequest request;
  request.set_job_id(job_id);
  return Call("GetShardAssignment", shards_.get(),
              &v1::ShardService::Stub::GetShardAssignment, request);
}

absl::StatusOr<std::vector<v1::WorkerInfo>> CoordinatorClient::ListWorkers(
    bool include_lost, int limit) {
  return FollowPages<v1::WorkerInfo>(
      limit,
      [&](int page_size, const std::string& token,
          std::vector<v1::WorkerInfo>* workers) -> absl::StatusOr<std::string> {
        v1::ListWorkersRequest request;
        request.set_include_lost(include_lost);
        request.set_page_size(page_size);
        request.set_page_token(token);
        ASSIGN_OR_RETURN(v1::ListWorkersResponse response,
                         Call("ListWorkers", cluster_.get(),
                              &v1::ClusterService::Stub::ListWorkers, request));
        for (v1::WorkerInfo& w : *response.mutable_workers()) {
          workers->push_back(std::move(w));
        }
        return std::move(*response.mutable_next_page_token());
      });
}

absl::StatusOr<v1::WorkerInfo> CoordinatorClient::GetWorker(
    const std::string& worker) {
  v1::GetWorkerRequest request;
  request.set_worker(worker);
  return Call("GetWorker", cluster_.get(),
              &v1::ClusterService::Stub::GetWorker, request);
}

absl::StatusOr<v1::WorkerInfo> CoordinatorClient::DrainWorker(
    const std::string& worker) {
  v1::DrainWorkerRequest request;
  request.set_worker(worker);
  return Call("DrainWorker", cluster_.get(),
              &v1::ClusterService::Stub::DrainWorker, request);
}

absl::StatusOr<v1::WorkerInfo> CoordinatorClient::UndrainWorker(
    const std::string& worker) {
  v1::UndrainWorkerRequest request;
  request.set_worker(worker);
  return Call("UndrainWorker", cluster_.get(),
              &v1::ClusterService::Stub::UndrainWorker, request);
}

absl::Status CoordinatorClient::WatchJob(
    const std::string& job_id, int64_t after_sequence, absl::Duration timeout,
    const std::function<void(const v1::JobEvent&)>& on_event,
    Cancellation* cancel) {
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  request.set_after_sequence(after_sequence);
  return ReadServerStream<v1::JobEvent>(
      "WatchJob", /*name_method=*/true, "the job did not end", timeout,
      {cancel},
      [&](grpc::ClientContext* context) {
        return jobs_->WatchJob(context, request);
      },
      on_event);
}

absl::StatusOr<std::unique_ptr<WorkerLogClient>> WorkerLogClient::Connect(
    const std::string& address, const security::TransportSecurity& security,
    absl::Duration connect_timeout) {
  if (address.empty()) {
    return absl::UnavailableError(
        "the worker registered no status address (is it an older "
        "pshard-worker?)");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                   security::NewChannel(address, security));
  RETURN_IF_ERROR(AwaitConnected(*channel, security, connect_timeout,
                                 "cannot reach its status server", ""));
  return std::make_unique<WorkerLogClient>(std::move(channel));
}

WorkerLogClient::WorkerLogClient(std::shared_ptr<grpc::Channel> channel)
    : status_(v1::WorkerStatus::NewStub(std::move(channel))) {}

absl::Status WorkerLogClient::StreamLogs(
    const v1::StreamLogsRequest& request, absl::Duration timeout,
    const std::function<void(const v1::LogChunk&)>& on_chunk,
    const std::vector<Cancellation*>& cancels) {
  // The worker's own message says what is wrong; callers name the rank.
  return ReadServerStream<v1::LogChunk>(
      "StreamLogs", /*name_method=*/false,
      "the worker did not finish sending the log", timeout, cancels,
      [&](grpc::ClientContext* context) {
        return status_->StreamLogs(context, request);
      },
      on_chunk);
}

}  // namespace pshard::cli
