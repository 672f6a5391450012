// FakeCoordinator: an in-memory JobService + ShardService + ClusterService
// for pshardctl's tests. Jobs are validated with the real job-spec rules;
// their progress is driven either by the test (SetState, AddProgress,
// SetAssignment) or, with auto_run, by a scripted run that walks a submitted
// job through STARTING, RUNNING (with an assignment and progress) to
// SUCCEEDED. Serves on 127.0.0.1 with a free port.
#ifndef PSHARD_CLI_FAKE_COORDINATOR_H_
#define PSHARD_CLI_FAKE_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "pshard/v1/cluster.grpc.pb.h"
#include "pshard/v1/job.grpc.pb.h"
#include "pshard/v1/shard.grpc.pb.h"

namespace pshard::cli {

class FakeCoordinator final : public v1::JobService::Service,
                              public v1::ShardService::Service,
                              public v1::ClusterService::Service {
 public:
  struct Options {
    // Walk every submitted job to SUCCEEDED (see the class comment).
    bool auto_run = false;
    // Pause between scripted progress events.
    absl::Duration auto_step = absl::Milliseconds(5);
    // Idle workers in the pool from the start.
    int idle_workers = 0;
  };

  FakeCoordinator() : FakeCoordinator(Options()) {}
  explicit FakeCoordinator(Options options);
  ~FakeCoordinator() override;

  // Serves on `listen` ("127.0.0.1:0" picks a port); returns the address.
  absl::StatusOr<std::string> Start(const std::string& listen = "127.0.0.1:0");
  void Shutdown();
  void Wait();  // Until Shutdown (for the fake binary).

  // --- test controls ---
  // The next SubmitJob fails with `status`.
  void FailNextSubmit(absl::Status status);
  // Adds a job as if submitted; returns its id.
  std::string AddJob(const v1::JobSpec& spec);
  void SetState(const std::string& job_id, v1::JobState state,
                const std::string& reason = "");
  void AddProgress(const std::string& job_id, const v1::JobProgress& progress);
  void SetAssignment(const std::string& job_id, v1::ShardAssignment assignment);
  void SetOutputPath(const std::string& job_id, const std::string& path);
  void AddWorker(v1::WorkerInfo worker);
  // Ends the job of worker `id` (as if it finished): IDLE or DRAINING.
  void FinishWorkerJob(const std::string& id);
  // Requests served by ListJobs / ListWorkers / GetWorker so far.
  int list_calls() const;
  int get_worker_calls() const;
  // What the last ListJobs / CancelJob asked for.
  std::vector<v1::JobState> last_list_states() const;
  std::string last_cancel_reason() const;
  absl::StatusOr<v1::Job> job(const std::string& job_id) const;
  int num_jobs() const;
  // Number of WatchJob streams currently open.
  int open_watches() const;

  // --- services ---
  grpc::Status SubmitJob(grpc::ServerContext* context,
                         const v1::SubmitJobRequest* request,
                         v1::Job* response) override;
  grpc::Status GetJob(grpc::ServerContext* context,
                      const v1::GetJobRequest* request,
                      v1::Job* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context,
                        const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context,
                         const v1::CancelJobRequest* request,
                         v1::Job* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context,
                        const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status GetShardAssignment(grpc::ServerContext* context,
                                  const v1::GetShardAssignmentRequest* request,
                                  v1::ShardAssignment* response) override;
  // ListJobs and ListWorkers page like the coordinator (page_size, default
  // 500; the token is the offset, not opaque).
  grpc::Status ListWorkers(grpc::ServerContext* context,
                           const v1::ListWorkersRequest* request,
                           v1::ListWorkersResponse* response) override;
  // By id or name; Drain sets drain_requested and DRAINING, Undrain clears
  // them (IDLE, or BUSY with a job).
  grpc::Status GetWorker(grpc::ServerContext* context,
                         const v1::GetWorkerRequest* request,
                         v1::WorkerInfo* response) override;
  grpc::Status DrainWorker(grpc::ServerContext* context,
                           const v1::DrainWorkerRequest* request,
                           v1::WorkerInfo* response) override;
  grpc::Status UndrainWorker(grpc::ServerContext* context,
                             const v1::UndrainWorkerRequest* request,
                             v1::WorkerInfo* response) override;

  // A plausible assignment for `spec` with `world_size` ranks: four buckets
  // of different sizes, balanced.
  static v1::ShardAssignment MakeAssignment(const std::string& job_id,
                                            int world_size, int64_t epoch);

 private:
  struct JobRecord {
    v1::Job job;
    std::vector<v1::JobEvent> events;
    bool has_assignment = false;
    v1::ShardAssignment assignment;
  };

  std::string AddJobLocked(const v1::JobSpec& spec)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::WorkerInfo* FindWorkerLocked(const std::string& worker)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies `change` to the worker with that id or name and returns it;
  // NOT_FOUND naming `worker` if there is none.
  grpc::Status UpdateWorker(const std::string& worker, v1::WorkerInfo* response,
                            const std::function<void(v1::WorkerInfo&)>& change)
      ABSL_LOCKS_EXCLUDED(mu_);
  void SetStateLocked(JobRecord& record, v1::JobState state,
                      const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AppendEventLocked(JobRecord& record, v1::JobEvent event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AutoRun(std::string job_id);

  const Options options_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // Signalled when an event is appended.
  std::map<std::string, JobRecord> jobs_ ABSL_GUARDED_BY(mu_);
  int next_job_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<v1::WorkerInfo> workers_ ABSL_GUARDED_BY(mu_);
  int list_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int get_worker_calls_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status next_submit_error_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::JobState> last_list_states_ ABSL_GUARDED_BY(mu_);
  std::string last_cancel_reason_ ABSL_GUARDED_BY(mu_);
  int open_watches_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> runners_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace pshard::cli

#endif  // PSHARD_CLI_FAKE_COORDINATOR_H_
