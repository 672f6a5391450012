// InProcessCoordinator: the real coordinator for unit tests of its clients
// (the worker's agent and job runner, pshardctl's commands), so that those
// tests exercise the coordinator's own logic instead of a second
// implementation that can drift from it.
//
// It is coordinator::Coordinator over a SQLite state file (in a fresh temp
// dir unless options say where), driven by a FakeClock, served by the real
// server/ gRPC services, and reached through in-process channels (it also
// listens on loopback, for clients in another process, such as
// cli:fake_coordinator_main's). Time moves only when the
// test says so: AdvanceAndTick() advances the clock and then runs the
// coordinator's Tick() (worker loss, wait deadlines, throttled progress
// events) before it returns, so what was due has happened. The server's own
// ticker is off. Waits inside RPCs that are bounded by the fake clock end
// when the client's (real) gRPC deadline passes or when the clock is
// advanced past them.
//
// For setting up and checking state it also speaks both sides of the
// protocol itself, over an unrecorded channel: jobs (SubmitJob, GetJob,
// CancelJob, Events) and simulated workers (RegisterWorker, Heartbeat,
// StartJob, ReportLayout, ReportProgress, ReportResult, RunPlacedJobs).
// Calls made on Channel() are recorded in rpc_log(), so tests can wait for a
// client to have made a call instead of sleeping, and FailNextCall() fails
// a chosen one with an error the coordinator would not give on demand.
//
// Example:
//   ASSERT_OK_AND_ASSIGN(auto c, InProcessCoordinator::Start());
//   ASSERT_OK_AND_ASSIGN(std::vector<v1::RunJobDirective> ranks,
//                        c->StartJob(spec));   // registers spec.world_size
//                                              // simulated workers
//   ASSERT_OK(c->ReportLayout(ranks, {4 << 20, 2 << 20}));  // RUNNING
//   ASSERT_OK(c->ReportResult(ranks[0], absl::OkStatus()));
//
// Thread-safe. Not for tests/ of the coordinator itself, which call it
// directly.
#ifndef PSHARD_TESTS_TESTING_IN_PROCESS_COORDINATOR_H_
#define PSHARD_TESTS_TESTING_IN_PROCESS_COORDINATOR_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/fake_clock.h"
#include "google/protobuf/message.h"
#include "grpcpp/channel.h"
#include "pshard/v1/cluster.pb.h"
#include "pshard/v1/job.pb.h"
#include "pshard/v1/job_spec.pb.h"
#include "pshard/v1/worker_control.pb.h"
#include "security/transport.h"

namespace pshard {
namespace coordinator {
class Coordinator;
}  // namespace coordinator
namespace server {
class CoordinatorServer;
}  // namespace server

namespace testing {

// The RPCs a client made on a recorded channel, by method name (the last
// part of the path: "SubmitJob", "ListWorkers"). Thread-safe.
class RpcLog {
 public:
  // Calls started so far.
  int calls(absl::string_view method) const;
  // Messages received so far on calls of `method` (replies, stream items).
  int received(absl::string_view method) const;
  // Wait (real time, up to `timeout`) until calls(method) >= n or
  // received(method) >= n; false on timeout.
  bool WaitForCalls(absl::string_view method, int n,
                    absl::Duration timeout) const;
  bool WaitForReceived(absl::string_view method, int n,
                       absl::Duration timeout) const;
  // The request of the latest call of `method`, if there was one and it is
  // an M.
  template <typename M>
  std::optional<M> LastRequest(absl::string_view method) const {
    absl::MutexLock lock(&mu_);
    auto it = last_request_.find(std::string(method));
    if (it == last_request_.end()) return std::nullopt;
    M message;
    if (!message.ParseFromString(it->second)) return std::nullopt;
    return message;
  }

  // Called by the recording interceptor.
  void OnCall(absl::string_view method,
              const google::protobuf::Message* request);
  void OnReceive(absl::string_view method);

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, int, std::less<>> calls_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int, std::less<>> received_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string, std::less<>> last_request_
      ABSL_GUARDED_BY(mu_);
};

// Faults for calls on a recorded channel: the next call of a method fails
// with a chosen status without reaching the coordinator. Thread-safe.
class RpcFaults {
 public:
  void FailNext(absl::string_view method, absl::Status status);
  // The pending fault for `method`, taken; OK if there is none.
  absl::Status Take(absl::string_view method);

 private:
  absl::Mutex mu_;
  std::map<std::string, absl::Status, std::less<>> next_ ABSL_GUARDED_BY(mu_);
};

struct InProcessCoordinatorOptions {
  // Stated to workers in RegisterWorkerResponse: short, so that agents
  // (which beat on the real clock) pick up directives quickly.
  absl::Duration heartbeat_interval = absl::Milliseconds(20);
  // Fake time: a worker is lost only when a test advances the clock.
  absl::Duration worker_timeout = absl::Seconds(10);
  // How often an open WatchJob looks for a cancelled client (real time).
  absl::Duration watch_poll = absl::Milliseconds(50);
  int max_unfinished_jobs = 10000;
  // Where the server also listens (loopback only; port 0: a free one), for
  // clients in other processes.
  std::string listen = "127.0.0.1:0";
  // How it serves there: plaintext unless set (cli/fake_coordinator_main
  // passes its --tls_* flags).
  security::TransportSecurity security = security::Plaintext();
  // The SQLite state file; empty: one in a fresh temp dir.
  std::string state_path;
  // The WorkerStatus address simulated workers register (host:port), for
  // clients that go on to a worker (pshardctl logs); empty: none.
  std::string simulated_worker_address;
};

class InProcessCoordinator {
 public:
  // Errors: those of opening the store or starting the server.
  static absl::StatusOr<std::unique_ptr<InProcessCoordinator>> Start(
      InProcessCoordinatorOptions options = {});
  ~InProcessCoordinator();

  FakeClock& clock() { return clock_; }
  // The port the server listens on (see options.listen).
  int port() const;
  const InProcessCoordinatorOptions& options() const { return options_; }

  // A channel to the services; every call on it is recorded in rpc_log(),
  // and may be failed with FailNextCall().
  std::shared_ptr<grpc::Channel> Channel();
  const RpcLog& rpc_log() const { return *rpc_log_; }
  // The next call of `method` on a Channel() fails with `status` (recorded,
  // but never sent to the coordinator).
  void FailNextCall(absl::string_view method, absl::Status status);

  // Advances the clock by `d`, then runs the coordinator's Tick.
  void AdvanceAndTick(absl::Duration d);

  // ---- Jobs (JobService, ShardService, ClusterService) ----
  absl::StatusOr<v1::Job> SubmitJob(const v1::JobSpec& spec);
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);
  absl::StatusOr<v1::Job> CancelJob(const std::string& job_id,
                                    const std::string& reason);
  // Every event of the job's log so far.
  absl::StatusOr<std::vector<v1::JobEvent>> Events(const std::string& job_id);
  // Every job (up to 1000), newest first.
  absl::StatusOr<std::vector<v1::Job>> ListJobs();
  // Waits (real time, up to `timeout`) until the job is in `state`; returns
  // the job then. FailedPrecondition if it ended in another state;
  // DeadlineExceeded on timeout.
  absl::StatusOr<v1::Job> WaitForJobState(const std::string& job_id,
                                          v1::JobState state,
                                          absl::Duration timeout);
  absl::StatusOr<v1::WorkerInfo> GetWorker(const std::string& worker);

  // ---- Simulated workers (WorkerControl) ----

  // Registers a worker `name` (incarnation "sim") and returns its id.
  absl::StatusOr<std::string> RegisterWorker(const std::string& name);
  // One heartbeat of `worker_id` in `state` (with the job and epoch of
  // `running`, if set).
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const std::string& worker_id, v1::WorkerState state,
      const v1::RunJobDirective* running = nullptr);
  // Makes sure at least `n` simulated workers ("sim-0", "sim-1", ...) are
  // registered; returns the ids of the first n.
  absl::StatusOr<std::vector<std::string>> RegisterSimulatedWorkers(int n);
  // Heartbeats the first `world_size` simulated workers IDLE and collects
  // the RunJob directives of `job_id`; returns them in rank order (the job
  // is STARTING then). FailedPrecondition if the job was not placed on them
  // (e.g. they are busy).
  absl::StatusOr<std::vector<v1::RunJobDirective>> TakeJob(
      const std::string& job_id, int world_size);
  // Heartbeats every simulated worker once and runs each job all of whose
  // ranks have been handed to them by now to the end: a layout of four
  // buckets, one progress report per step, ok from every rank (rank 0's
  // output in the spec's output_dir). Returns the ids of the jobs it ran.
  absl::StatusOr<std::vector<std::string>> RunPlacedJobs();
  // RegisterSimulatedWorkers(spec.world_size()), SubmitJob(spec), TakeJob.
  absl::StatusOr<std::vector<v1::RunJobDirective>> StartJob(
      const v1::JobSpec& spec);
  // Every rank reports a layout of one F32 parameter per bucket, of
  // `bucket_bytes` each: the assignment is published and the job RUNNING.
  absl::Status ReportLayout(const std::vector<v1::RunJobDirective>& ranks,
                            const std::vector<int64_t>& bucket_bytes);
  absl::StatusOr<v1::ReportProgressResponse> ReportProgress(
      const v1::RunJobDirective& rank, const v1::JobProgress& progress);
  // ok or the rank's error; `output_path` for a rank that wrote one.
  absl::Status ReportResult(const v1::RunJobDirective& rank,
                            const absl::Status& result, int64_t final_step = 0,
                            const std::string& output_path = "");

 private:
  class Stubs;
  explicit InProcessCoordinator(InProcessCoordinatorOptions options);
  // The simulated worker that was given `rank`.
  std::string WorkerOf(const v1::RunJobDirective& rank);

  const InProcessCoordinatorOptions options_;
  FakeClock clock_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::unique_ptr<server::CoordinatorServer> server_;
  std::shared_ptr<RpcLog> rpc_log_ = std::make_shared<RpcLog>();
  std::shared_ptr<RpcFaults> faults_ = std::make_shared<RpcFaults>();
  std::unique_ptr<Stubs> stubs_;
  absl::Mutex mu_;
  // Simulated workers by registration order.
  std::vector<std::string> workers_ ABSL_GUARDED_BY(mu_);
  // (job id, rank) -> the simulated worker that runs it.
  std::map<std::pair<std::string, int>, std::string> rank_workers_
      ABSL_GUARDED_BY(mu_);
  // RunPlacedJobs: the ranks handed over so far, by job and rank.
  std::map<std::string, std::map<int, v1::RunJobDirective>> handed_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace testing
}  // namespace pshard

#endif  // PSHARD_TESTS_TESTING_IN_PROCESS_COORDINATOR_H_
