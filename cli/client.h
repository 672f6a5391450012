// CoordinatorClient: pshardctl's typed view of the coordinator's client-facing
// services (JobService, ShardService, ClusterService). Every call has a
// deadline and returns absl::Status; grpc::Status is converted here, once.
#ifndef PSHARD_CLI_CLIENT_H_
#define PSHARD_CLI_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "pshard/v1/cluster.grpc.pb.h"
#include "pshard/v1/job.grpc.pb.h"
#include "pshard/v1/shard.grpc.pb.h"
#include "pshard/v1/worker_status.grpc.pb.h"
#include "security/transport.h"

namespace pshard::cli {

// Lets another thread (a signal handler thread) stop blocking calls, such as
// a WatchJob stream or the StreamLogs streams of `logs --follow`, from
// outside. Thread-safe.
class Cancellation {
 public:
  // Cancels the calls in progress, if any, and every later one.
  void Cancel();
  bool cancelled() const;

  // Called by the clients around a cancellable call. Attach returns false
  // (and attaches nothing) when already cancelled.
  bool Attach(grpc::ClientContext* context);
  void Detach(grpc::ClientContext* context);

 private:
  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::set<grpc::ClientContext*> contexts_ ABSL_GUARDED_BY(mu_);
};

class CoordinatorClient {
 public:
  // Opens a channel to `address` (host:port) and waits up to
  // `connect_timeout` for it to connect. Unavailable, naming the address, if
  // nothing answers in time.
  // `security`: TLS settings (security/transport.h); InvalidArgument for bad
  // ones.
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect(
      const std::string& address, const security::TransportSecurity& security,
      absl::Duration connect_timeout, absl::Duration rpc_timeout);

  // Wraps an existing channel (tests, in-process servers). `address` is only
  // used in error messages.
  CoordinatorClient(std::shared_ptr<grpc::Channel> channel,
                    std::string address, absl::Duration rpc_timeout);

  const std::string& address() const { return address_; }

  // The errors are the RPCs' own (see job.proto, shard.proto), with the call
  // named in the message.
  // SubmitJob with `request_id` (empty: none). With one, a call that failed
  // UNAVAILABLE or DEADLINE_EXCEEDED (the request or its reply may have been
  // lost) is sent again with the same id, up to kSubmitAttempts in all:
  // the coordinator answers a repeat with the job the first one made.
  static constexpr int kSubmitAttempts = 3;
  absl::StatusOr<v1::Job> SubmitJob(const v1::JobSpec& spec,
                                    const std::string& request_id = "");
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);
  // Newest first, following the pages: every job when `limit` is 0,
  // otherwise at most `limit`.
  absl::StatusOr<std::vector<v1::Job>> ListJobs(
      const std::vector<v1::JobState>& states, int limit);
  absl::StatusOr<v1::Job> CancelJob(const std::string& job_id,
                                    const std::string& reason);
  absl::StatusOr<v1::ShardAssignment> GetShardAssignment(
      const std::string& job_id);
  // In id order, following the pages: every worker when `limit` is 0,
  // otherwise at most `limit`.
  absl::StatusOr<std::vector<v1::WorkerInfo>> ListWorkers(bool include_lost,
                                                          int limit = 0);
  // `worker` is a worker id or name.
  absl::StatusOr<v1::WorkerInfo> GetWorker(const std::string& worker);
  absl::StatusOr<v1::WorkerInfo> DrainWorker(const std::string& worker);
  absl::StatusOr<v1::WorkerInfo> UndrainWorker(const std::string& worker);

  // Streams the job's events after `after_sequence` to `on_event` until the
  // server ends the stream (the job reached a terminal state), `timeout`
  // passes (DeadlineExceeded) or `cancel` fires (Cancelled). `cancel` may be
  // null.
  absl::Status WatchJob(const std::string& job_id, int64_t after_sequence,
                        absl::Duration timeout,
                        const std::function<void(const v1::JobEvent&)>& on_event,
                        Cancellation* cancel);

 private:
  void SetDeadline(grpc::ClientContext& context) const;
  // One unary call with the RPC deadline; a failure names `method`.
  template <typename Stub, typename Request, typename Response>
  absl::StatusOr<Response> Call(
      const char* method, Stub* stub,
      grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Request&,
                                Response*),
      const Request& request) const;

  std::string address_;
  absl::Duration rpc_timeout_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::ShardService::Stub> shards_;
  std::unique_ptr<v1::ClusterService::Stub> cluster_;
};

// WorkerLogClient: pshardctl's view of one worker's WorkerStatus service, for
// `logs` (StreamLogs). grpc::Status is converted here, once.
class WorkerLogClient {
 public:
  // Opens a channel to `address` (the worker's registered host:port) and
  // waits up to `connect_timeout` for it to connect. Unavailable if nothing
  // answers in time (callers name the worker and address).
  static absl::StatusOr<std::unique_ptr<WorkerLogClient>> Connect(
      const std::string& address, const security::TransportSecurity& security,
      absl::Duration connect_timeout);

  explicit WorkerLogClient(std::shared_ptr<grpc::Channel> channel);

  // Streams the log `request` names to `on_chunk` until the worker ends the
  // stream, `timeout` passes (DeadlineExceeded) or `cancel` fires
  // (Cancelled); the worker's errors (worker_status.proto) otherwise.
  // Each of `cancels` may be null.
  absl::Status StreamLogs(
      const v1::StreamLogsRequest& request, absl::Duration timeout,
      const std::function<void(const v1::LogChunk&)>& on_chunk,
      const std::vector<Cancellation*>& cancels);

 private:
  std::unique_ptr<v1::WorkerStatus::Stub> status_;
};

}  // namespace pshard::cli

#endif  // PSHARD_CLI_CLIENT_H_
