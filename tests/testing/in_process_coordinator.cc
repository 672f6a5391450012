#include "tests/testing/in_process_coordinator.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/job_state.h"
#include "common/status_macros.h"
#include "coordinator/coordinator.h"
#include "coordinator/state_store.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/client_interceptor.h"
#include "pshard/v1/cluster.grpc.pb.h"
#include "pshard/v1/job.grpc.pb.h"
#include "pshard/v1/worker_control.grpc.pb.h"
#include "server/coordinator_server.h"
#include "tests/testing/subprocess.h"

namespace pshard::testing {
namespace {

namespace ex = ::grpc::experimental;

// Every RPC the harness makes for the test gets this long (real time).
constexpr absl::Duration kRpcDeadline = absl::Seconds(30);

// "/pshard.v1.JobService/SubmitJob" -> "SubmitJob".
std::string MethodName(const ex::ClientRpcInfo& info) {
  absl::string_view method = info.method();
  method.remove_prefix(method.rfind('/') + 1);
  return std::string(method);
}

// Records one call in an RpcLog.
class RecordingInterceptor final : public ex::Interceptor {
 public:
  RecordingInterceptor(std::shared_ptr<RpcLog> log, std::string method)
      : log_(std::move(log)), method_(std::move(method)) {}

  void Intercept(ex::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            ex::InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      log_->OnCall(method_, static_cast<const google::protobuf::Message*>(
                                methods->GetSendMessage()));
    }
    if (methods->QueryInterceptionHookPoint(
            ex::InterceptionHookPoints::POST_RECV_MESSAGE)) {
      log_->OnReceive(method_);
    }
    methods->Proceed();
  }

 private:
  const std::shared_ptr<RpcLog> log_;
  const std::string method_;
};

class RecordingFactory final : public ex::ClientInterceptorFactoryInterface {
 public:
  explicit RecordingFactory(std::shared_ptr<RpcLog> log)
      : log_(std::move(log)) {}

  ex::Interceptor* CreateClientInterceptor(ex::ClientRpcInfo* info) override {
    return new RecordingInterceptor(log_, MethodName(*info));
  }

 private:
  const std::shared_ptr<RpcLog> log_;
};

// Fails a call without sending it: hijacks it, answers no message and
// `status`.
class FailingInterceptor final : public ex::Interceptor {
 public:
  explicit FailingInterceptor(grpc::Status status)
      : status_(std::move(status)) {}

  void Intercept(ex::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            ex::InterceptionHookPoints::PRE_RECV_MESSAGE)) {
      methods->FailHijackedRecvMessage();
    }
    if (methods->QueryInterceptionHookPoint(
            ex::InterceptionHookPoints::PRE_RECV_STATUS)) {
      *methods->GetRecvStatus() = status_;
    }
    if (methods->QueryInterceptionHookPoint(
            ex::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->Hijack();
      return;
    }
    methods->Proceed();
  }

 private:
  const grpc::Status status_;
};

class FaultFactory final : public ex::ClientInterceptorFactoryInterface {
 public:
  explicit FaultFactory(std::shared_ptr<RpcFaults> faults)
      : faults_(std::move(faults)) {}

  ex::Interceptor* CreateClientInterceptor(ex::ClientRpcInfo* info) override {
    absl::Status fault = faults_->Take(MethodName(*info));
    if (fault.ok()) return nullptr;  // this call goes through
    return new FailingInterceptor(ToGrpcStatus(fault));
  }

 private:
  const std::shared_ptr<RpcFaults> faults_;
};

void SetDeadline(grpc::ClientContext& context) {
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoMilliseconds(kRpcDeadline));
}

// One unary call; a failure names the method.
template <typename Stub, typename Request, typename Response>
absl::StatusOr<Response> Call(
    const char* method, Stub& stub,
    grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Request&, Response*),
    const Request& request) {
  grpc::ClientContext context;
  SetDeadline(context);
  Response response;
  grpc::Status status = (stub.*rpc)(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status, method);
  return response;
}

}  // namespace

// ---- RpcLog ----

int RpcLog::calls(absl::string_view method) const {
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(method);
  return it == calls_.end() ? 0 : it->second;
}

int RpcLog::received(absl::string_view method) const {
  absl::MutexLock lock(&mu_);
  auto it = received_.find(method);
  return it == received_.end() ? 0 : it->second;
}

bool RpcLog::WaitForCalls(absl::string_view method, int n,
                          absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  const auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = calls_.find(method);
    return it != calls_.end() && it->second >= n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

bool RpcLog::WaitForReceived(absl::string_view method, int n,
                             absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  const auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = received_.find(method);
    return it != received_.end() && it->second >= n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

void RpcLog::OnCall(absl::string_view method,
                    const google::protobuf::Message* request) {
  std::string bytes;
  if (request != nullptr) request->SerializeToString(&bytes);
  absl::MutexLock lock(&mu_);
  ++calls_[std::string(method)];
  last_request_[std::string(method)] = std::move(bytes);
}

void RpcLog::OnReceive(absl::string_view method) {
  absl::MutexLock lock(&mu_);
  ++received_[std::string(method)];
}

// ---- RpcFaults ----

void RpcFaults::FailNext(absl::string_view method, absl::Status status) {
  absl::MutexLock lock(&mu_);
  next_[std::string(method)] = std::move(status);
}

absl::Status RpcFaults::Take(absl::string_view method) {
  absl::MutexLock lock(&mu_);
  auto it = next_.find(method);
  if (it == next_.end()) return absl::OkStatus();
  absl::Status status = std::move(it->second);
  next_.erase(it);
  return status;
}

// ---- InProcessCoordinator ----

class InProcessCoordinator::Stubs {
 public:
  explicit Stubs(const std::shared_ptr<grpc::Channel>& channel)
      : jobs(v1::JobService::NewStub(channel)),
        cluster(v1::ClusterService::NewStub(channel)),
        workers(v1::WorkerControl::NewStub(channel)) {}

  std::unique_ptr<v1::JobService::Stub> jobs;
  std::unique_ptr<v1::ClusterService::Stub> cluster;
  std::unique_ptr<v1::WorkerControl::Stub> workers;
};

InProcessCoordinator::InProcessCoordinator(InProcessCoordinatorOptions options)
    : options_(options) {}

InProcessCoordinator::~InProcessCoordinator() {
  if (server_) server_->Shutdown(absl::ZeroDuration());
}

absl::StatusOr<std::unique_ptr<InProcessCoordinator>>
InProcessCoordinator::Start(InProcessCoordinatorOptions options) {
  std::unique_ptr<InProcessCoordinator> c(new InProcessCoordinator(options));
  const std::string state_path =
      options.state_path.empty()
          ? MakeTempDir("coordinator") + "/state.db"
          : options.state_path;
  ASSIGN_OR_RETURN(std::unique_ptr<coordinator::StateStore> store,
                   coordinator::StateStore::Open(state_path));
  coordinator::CoordinatorOptions co;
  co.heartbeat_interval = options.heartbeat_interval;
  co.worker_timeout = options.worker_timeout;
  co.recovery_grace = 2 * options.worker_timeout;
  co.max_unfinished_jobs = options.max_unfinished_jobs;
  ASSIGN_OR_RETURN(c->coordinator_,
                   coordinator::Coordinator::Create(co, &c->clock_,
                                                    std::move(store)));
  server::ServerOptions so;
  so.listen = options.listen;
  so.security = options.security;
  // The test ticks (AdvanceAndTick); the server's ticker never does.
  so.tick_interval = absl::InfiniteDuration();
  so.services.watch_poll = options.watch_poll;
  ASSIGN_OR_RETURN(c->server_, server::CoordinatorServer::Start(
                                   c->coordinator_.get(), &c->clock_, so));
  c->stubs_ = std::make_unique<Stubs>(c->server_->InProcessChannel());
  return c;
}

int InProcessCoordinator::port() const { return server_->port(); }

std::shared_ptr<grpc::Channel> InProcessCoordinator::Channel() {
  std::vector<std::unique_ptr<ex::ClientInterceptorFactoryInterface>>
      interceptors;
  // Recorded first: a failed call is still a call the client made.
  interceptors.push_back(std::make_unique<RecordingFactory>(rpc_log_));
  interceptors.push_back(std::make_unique<FaultFactory>(faults_));
  return server_->InProcessChannel(std::move(interceptors));
}

void InProcessCoordinator::FailNextCall(absl::string_view method,
                                        absl::Status status) {
  faults_->FailNext(method, std::move(status));
}

absl::StatusOr<std::vector<v1::Job>> InProcessCoordinator::ListJobs() {
  v1::ListJobsRequest request;
  request.set_page_size(1000);
  ASSIGN_OR_RETURN(v1::ListJobsResponse response,
                   Call("ListJobs", *stubs_->jobs,
                        &v1::JobService::Stub::ListJobs, request));
  return std::vector<v1::Job>(response.jobs().begin(), response.jobs().end());
}

void InProcessCoordinator::AdvanceAndTick(absl::Duration d) {
  clock_.Advance(d);
  coordinator_->Tick();
}

absl::StatusOr<v1::Job> InProcessCoordinator::SubmitJob(
    const v1::JobSpec& spec) {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  return Call("SubmitJob", *stubs_->jobs, &v1::JobService::Stub::SubmitJob,
              request);
}

absl::StatusOr<v1::Job> InProcessCoordinator::GetJob(
    const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  return Call("GetJob", *stubs_->jobs, &v1::JobService::Stub::GetJob, request);
}

absl::StatusOr<v1::Job> InProcessCoordinator::CancelJob(
    const std::string& job_id, const std::string& reason) {
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  return Call("CancelJob", *stubs_->jobs, &v1::JobService::Stub::CancelJob,
              request);
}

absl::StatusOr<std::vector<v1::JobEvent>> InProcessCoordinator::Events(
    const std::string& job_id) {
  // No RPC returns the log without waiting for the job to end: read it from
  // the coordinator.
  std::vector<v1::JobEvent> events;
  for (;;) {
    const int64_t after = events.empty() ? 0 : events.back().sequence();
    ASSIGN_OR_RETURN(coordinator::Coordinator::EventBatch batch,
                     coordinator_->GetEvents(job_id, after, 1000));
    if (batch.events.empty()) return events;
    for (v1::JobEvent& e : batch.events) events.push_back(std::move(e));
  }
}

absl::StatusOr<v1::Job> InProcessCoordinator::WaitForJobState(
    const std::string& job_id, v1::JobState state, absl::Duration timeout) {
  ASSIGN_OR_RETURN(v1::Job job, GetJob(job_id));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoMilliseconds(timeout));
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  auto reader = stubs_->jobs->WatchJob(&context, request);
  v1::JobEvent event;
  v1::JobState last = job.state();
  while (last != state && !IsTerminal(last) && reader->Read(&event)) {
    if (event.has_state_change()) last = event.state_change().to();
  }
  context.TryCancel();
  while (reader->Read(&event)) {
  }
  grpc::Status finished = reader->Finish();
  if (last != state && !IsTerminal(last)) {
    return absl::DeadlineExceededError(
        absl::StrCat(job_id, " not ", v1::JobState_Name(state), " after ",
                     absl::FormatDuration(timeout), " (",
                     finished.error_message(), ")"));
  }
  ASSIGN_OR_RETURN(job, GetJob(job_id));
  if (last != state) {
    return absl::FailedPreconditionError(
        absl::StrCat(job_id, " ended ", v1::JobState_Name(job.state()), ": ",
                     job.reason()));
  }
  return job;
}

absl::StatusOr<v1::WorkerInfo> InProcessCoordinator::GetWorker(
    const std::string& worker) {
  v1::GetWorkerRequest request;
  request.set_worker(worker);
  return Call("GetWorker", *stubs_->cluster,
              &v1::ClusterService::Stub::GetWorker, request);
}

absl::StatusOr<std::string> InProcessCoordinator::RegisterWorker(
    const std::string& name) {
  v1::RegisterWorkerRequest request;
  request.set_name(name);
  request.set_incarnation("sim");
  request.set_address(options_.simulated_worker_address);
  request.set_host("127.0.0.1");
  request.set_device_kind(v1::CPU);
  request.set_device("cpu");
  ASSIGN_OR_RETURN(v1::RegisterWorkerResponse response,
                   Call("RegisterWorker", *stubs_->workers,
                        &v1::WorkerControl::Stub::RegisterWorker, request));
  return response.worker_id();
}

absl::StatusOr<v1::HeartbeatResponse> InProcessCoordinator::Heartbeat(
    const std::string& worker_id, v1::WorkerState state,
    const v1::RunJobDirective* running) {
  v1::HeartbeatRequest request;
  request.set_worker_id(worker_id);
  request.set_incarnation("sim");
  request.set_state(state);
  if (running != nullptr) {
    request.set_job_id(running->job_id());
    request.set_epoch(running->epoch());
  }
  return Call("Heartbeat", *stubs_->workers,
              &v1::WorkerControl::Stub::Heartbeat, request);
}

absl::StatusOr<std::vector<std::string>>
InProcessCoordinator::RegisterSimulatedWorkers(int n) {
  absl::MutexLock lock(&mu_);
  while (static_cast<int>(workers_.size()) < n) {
    ASSIGN_OR_RETURN(std::string id,
                     RegisterWorker(absl::StrCat("sim-", workers_.size())));
    workers_.push_back(std::move(id));
  }
  return std::vector<std::string>(workers_.begin(), workers_.begin() + n);
}

absl::StatusOr<std::vector<v1::RunJobDirective>> InProcessCoordinator::TakeJob(
    const std::string& job_id, int world_size) {
  ASSIGN_OR_RETURN(std::vector<std::string> workers,
                   RegisterSimulatedWorkers(world_size));
  std::vector<v1::RunJobDirective> ranks(world_size);
  int found = 0;
  for (const std::string& worker : workers) {
    ASSIGN_OR_RETURN(v1::HeartbeatResponse beat, Heartbeat(worker, v1::IDLE));
    for (const v1::Directive& d : beat.directives()) {
      if (!d.has_run_job() || d.run_job().job_id() != job_id) continue;
      const v1::RunJobDirective& run = d.run_job();
      if (run.rank() < 0 || run.rank() >= world_size) {
        return absl::InternalError(
            absl::StrCat("RunJob with rank ", run.rank()));
      }
      ranks[run.rank()] = run;
      absl::MutexLock lock(&mu_);
      rank_workers_[{job_id, run.rank()}] = worker;
      ++found;
    }
  }
  if (found != world_size) {
    ASSIGN_OR_RETURN(v1::Job job, GetJob(job_id));
    return absl::FailedPreconditionError(
        absl::StrCat(job_id, " was not placed: ", found, " of ", world_size,
                     " ranks have a RunJob; the job is ",
                     v1::JobState_Name(job.state())));
  }
  return ranks;
}

absl::StatusOr<std::vector<std::string>> InProcessCoordinator::RunPlacedJobs() {
  std::vector<std::string> workers;
  {
    absl::MutexLock lock(&mu_);
    workers = workers_;
  }
  for (const std::string& worker : workers) {
    ASSIGN_OR_RETURN(v1::HeartbeatResponse beat, Heartbeat(worker, v1::IDLE));
    absl::MutexLock lock(&mu_);
    for (const v1::Directive& d : beat.directives()) {
      if (!d.has_run_job()) continue;
      const v1::RunJobDirective& run = d.run_job();
      rank_workers_[{run.job_id(), run.rank()}] = worker;
      handed_[run.job_id()][run.rank()] = run;
    }
  }
  std::vector<std::vector<v1::RunJobDirective>> complete;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = handed_.begin(); it != handed_.end();) {
      const int world = it->second.begin()->second.world_size();
      if (static_cast<int>(it->second.size()) < world) {
        ++it;
        continue;
      }
      std::vector<v1::RunJobDirective> ranks;
      for (auto& [rank, run] : it->second) ranks.push_back(std::move(run));
      complete.push_back(std::move(ranks));
      it = handed_.erase(it);
    }
  }
  std::vector<std::string> ran;
  for (const std::vector<v1::RunJobDirective>& ranks : complete) {
    const v1::JobSpec& spec = ranks[0].spec();
    RETURN_IF_ERROR(
        ReportLayout(ranks, {4 << 20, 3 << 20, 2 << 20, 1 << 20}));
    for (int64_t step = 1; step <= spec.steps(); ++step) {
      v1::JobProgress p;
      p.set_step(step);
      p.set_total_steps(spec.steps());
      p.set_loss(1.0 / static_cast<double>(step));
      RETURN_IF_ERROR(ReportProgress(ranks[0], p).status());
    }
    for (const v1::RunJobDirective& rank : ranks) {
      RETURN_IF_ERROR(ReportResult(
          rank, absl::OkStatus(), spec.steps(),
          rank.rank() == 0 && !spec.output_dir().empty()
              ? spec.output_dir() + "/params.safetensors"
              : ""));
    }
    ran.push_back(ranks[0].job_id());
  }
  return ran;
}

absl::StatusOr<std::vector<v1::RunJobDirective>> InProcessCoordinator::StartJob(
    const v1::JobSpec& spec) {
  RETURN_IF_ERROR(RegisterSimulatedWorkers(spec.world_size()).status());
  ASSIGN_OR_RETURN(v1::Job job, SubmitJob(spec));
  return TakeJob(job.id(), spec.world_size());
}

std::string InProcessCoordinator::WorkerOf(const v1::RunJobDirective& rank) {
  absl::MutexLock lock(&mu_);
  auto it = rank_workers_.find({rank.job_id(), rank.rank()});
  return it == rank_workers_.end() ? "" : it->second;
}

absl::Status InProcessCoordinator::ReportLayout(
    const std::vector<v1::RunJobDirective>& ranks,
    const std::vector<int64_t>& bucket_bytes) {
  for (const v1::RunJobDirective& rank : ranks) {
    v1::ReportBucketsRequest request;
    request.set_job_id(rank.job_id());
    request.set_epoch(rank.epoch());
    request.set_rank(rank.rank());
    request.set_worker_id(WorkerOf(rank));
    for (size_t b = 0; b < bucket_bytes.size(); ++b) {
      v1::BucketLayout* bucket = request.add_buckets();
      bucket->set_index(static_cast<int>(b));
      v1::BucketParameter* p = bucket->add_parameters();
      p->set_name(absl::StrCat("layers.", b, ".weight"));
      p->set_num_elements(bucket_bytes[b] / 4);
      p->set_dtype("F32");
    }
    RETURN_IF_ERROR(Call("ReportBuckets", *stubs_->workers,
                         &v1::WorkerControl::Stub::ReportBuckets, request)
                        .status());
  }
  if (ranks.empty()) return absl::OkStatus();
  // Published once every rank reported; the job is RUNNING then.
  v1::GetAssignmentRequest request;
  request.set_job_id(ranks[0].job_id());
  request.set_epoch(ranks[0].epoch());
  return Call("GetAssignment", *stubs_->workers,
              &v1::WorkerControl::Stub::GetAssignment, request)
      .status();
}

absl::StatusOr<v1::ReportProgressResponse> InProcessCoordinator::ReportProgress(
    const v1::RunJobDirective& rank, const v1::JobProgress& progress) {
  v1::ReportProgressRequest request;
  request.set_job_id(rank.job_id());
  request.set_epoch(rank.epoch());
  request.set_rank(rank.rank());
  request.set_worker_id(WorkerOf(rank));
  *request.mutable_progress() = progress;
  return Call("ReportProgress", *stubs_->workers,
              &v1::WorkerControl::Stub::ReportProgress, request);
}

absl::Status InProcessCoordinator::ReportResult(
    const v1::RunJobDirective& rank, const absl::Status& result,
    int64_t final_step, const std::string& output_path) {
  v1::ReportResultRequest request;
  request.set_job_id(rank.job_id());
  request.set_epoch(rank.epoch());
  request.set_rank(rank.rank());
  request.set_worker_id(WorkerOf(rank));
  request.set_ok(result.ok());
  request.set_error(std::string(result.message()));
  request.set_final_step(final_step);
  request.set_output_path(output_path);
  return Call("ReportResult", *stubs_->workers,
              &v1::WorkerControl::Stub::ReportResult, request)
      .status();
}

}  // namespace pshard::testing
