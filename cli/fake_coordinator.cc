#include "cli/fake_coordinator.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cli/format.h"
#include "common/grpc_status.h"
#include "common/job_spec.h"
#include "google/protobuf/util/time_util.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace pshard::cli {
namespace {

// One page of `items` at offset `token` ("" = 0): a fake's paging, with the
// coordinator's default page size and the same errors for bad input.
template <typename T, typename Repeated>
grpc::Status Page(const std::vector<const T*>& items, int page_size,
                  const std::string& token, Repeated* out,
                  std::string* next_token) {
  if (page_size < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "page_size: must be >= 0");
  }
  if (page_size == 0) page_size = 500;
  size_t start = 0;
  if (!token.empty() && !absl::SimpleAtoi(token, &start)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "page_token: not a page token");
  }
  size_t i = start;
  for (; i < items.size() && i < start + page_size; ++i) *out->Add() = *items[i];
  if (i < items.size()) *next_token = absl::StrCat(i);
  return grpc::Status::OK;
}

using google::protobuf::util::TimeUtil;

google::protobuf::Timestamp Now() {
  return TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(absl::Now()));
}

}  // namespace

FakeCoordinator::FakeCoordinator(Options options) : options_(options) {
  for (int i = 0; i < options_.idle_workers; ++i) {
    v1::WorkerInfo w;
    w.set_id(absl::StrCat("w-", i + 1));
    w.set_name(absl::StrCat("fake-worker-", i));
    w.set_host("127.0.0.1");
    w.set_device("cpu");
    w.set_device_kind(v1::CPU);
    w.set_state(v1::IDLE);
    w.set_rank(-1);
    *w.mutable_heartbeat_age() = TimeUtil::MillisecondsToDuration(300);
    workers_.push_back(w);
  }
}

FakeCoordinator::~FakeCoordinator() { Shutdown(); }

absl::StatusOr<std::string> FakeCoordinator::Start(const std::string& listen) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(static_cast<v1::JobService::Service*>(this));
  builder.RegisterService(static_cast<v1::ShardService::Service*>(this));
  builder.RegisterService(static_cast<v1::ClusterService::Service*>(this));
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen));
  }
  const std::string host = listen.substr(0, listen.rfind(':'));
  return absl::StrCat(host, ":", port);
}

void FakeCoordinator::Shutdown() {
  std::vector<std::thread> runners;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    runners.swap(runners_);
    changed_.SignalAll();
  }
  for (std::thread& t : runners) t.join();
  if (server_ != nullptr) {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  }
}

void FakeCoordinator::Wait() {
  if (server_ != nullptr) server_->Wait();
}

void FakeCoordinator::FailNextSubmit(absl::Status status) {
  absl::MutexLock lock(&mu_);
  next_submit_error_ = std::move(status);
}

std::string FakeCoordinator::AddJob(const v1::JobSpec& spec) {
  absl::MutexLock lock(&mu_);
  return AddJobLocked(spec);
}

std::string FakeCoordinator::AddJobLocked(const v1::JobSpec& spec) {
  const std::string id = absl::StrCat("job-", next_job_++);
  JobRecord& record = jobs_[id];
  record.job.set_id(id);
  *record.job.mutable_spec() = ApplyJobSpecDefaults(spec);
  *record.job.mutable_submit_time() = Now();
  record.job.mutable_progress()->set_total_steps(spec.steps());
  SetStateLocked(record, v1::QUEUED, "submitted");
  return id;
}

void FakeCoordinator::SetStateLocked(JobRecord& record, v1::JobState state,
                                     const std::string& reason) {
  v1::JobEvent event;
  event.mutable_state_change()->set_from(record.job.state());
  event.mutable_state_change()->set_to(state);
  event.mutable_state_change()->set_reason(reason);
  record.job.set_state(state);
  record.job.set_reason(reason);
  if (state == v1::STARTING) {
    *record.job.mutable_start_time() = Now();
    record.job.set_epoch(record.job.epoch() + 1);
  }
  if (IsTerminal(state)) *record.job.mutable_end_time() = Now();
  AppendEventLocked(record, std::move(event));
}

void FakeCoordinator::AppendEventLocked(JobRecord& record, v1::JobEvent event) {
  event.set_sequence(static_cast<int64_t>(record.events.size()) + 1);
  *event.mutable_time() = Now();
  record.events.push_back(std::move(event));
  changed_.SignalAll();
}

void FakeCoordinator::SetState(const std::string& job_id, v1::JobState state,
                               const std::string& reason) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) SetStateLocked(it->second, state, reason);
}

void FakeCoordinator::AddProgress(const std::string& job_id,
                                  const v1::JobProgress& progress) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  *it->second.job.mutable_progress() = progress;
  v1::JobEvent event;
  *event.mutable_progress() = progress;
  AppendEventLocked(it->second, std::move(event));
}

void FakeCoordinator::SetAssignment(const std::string& job_id,
                                    v1::ShardAssignment assignment) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  it->second.has_assignment = true;
  it->second.assignment = std::move(assignment);
}

void FakeCoordinator::SetOutputPath(const std::string& job_id,
                                    const std::string& path) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it != jobs_.end()) it->second.job.set_output_path(path);
}

void FakeCoordinator::AddWorker(v1::WorkerInfo worker) {
  absl::MutexLock lock(&mu_);
  workers_.push_back(std::move(worker));
}

std::vector<v1::JobState> FakeCoordinator::last_list_states() const {
  absl::MutexLock lock(&mu_);
  return last_list_states_;
}

std::string FakeCoordinator::last_cancel_reason() const {
  absl::MutexLock lock(&mu_);
  return last_cancel_reason_;
}

absl::StatusOr<v1::Job> FakeCoordinator::job(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(job_id);
  return it->second.job;
}

int FakeCoordinator::num_jobs() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(jobs_.size());
}

int FakeCoordinator::open_watches() const {
  absl::MutexLock lock(&mu_);
  return open_watches_;
}

v1::ShardAssignment FakeCoordinator::MakeAssignment(const std::string& job_id,
                                                    int world_size,
                                                    int64_t epoch) {
  v1::ShardAssignment a;
  a.set_job_id(job_id);
  a.set_epoch(epoch);
  a.set_policy(v1::JobSpec::BALANCED);
  const int64_t sizes[] = {4 << 20, 3 << 20, 2 << 20, 1 << 20};
  std::vector<int64_t> owned(std::max(world_size, 1), 0);
  std::vector<int> counts(owned.size(), 0);
  int64_t total = 0;
  for (int i = 0; i < 4; ++i) {
    const int owner = static_cast<int>(
        std::min_element(owned.begin(), owned.end()) - owned.begin());
    v1::BucketAssignment* b = a.add_buckets();
    b->set_index(i);
    b->set_bytes(sizes[i]);
    b->set_num_elements(sizes[i] / 4);
    b->add_parameter_names(absl::StrCat("layers.", 3 - i, ".weight"));
    b->add_parameter_names(absl::StrCat("layers.", 3 - i, ".bias"));
    b->set_owner_rank(owner);
    b->set_owner_worker_id(absl::StrCat("w-", owner + 1));
    owned[owner] += sizes[i];
    counts[owner] += 1;
    total += sizes[i];
  }
  int64_t max_owned = 0;
  for (size_t r = 0; r < owned.size(); ++r) {
    v1::RankShard* s = a.add_ranks();
    s->set_rank(static_cast<int>(r));
    s->set_worker_id(absl::StrCat("w-", r + 1));
    s->set_owned_bytes(owned[r]);
    s->set_owned_elements(owned[r] / 4);
    s->set_num_buckets(counts[r]);
    max_owned = std::max(max_owned, owned[r]);
  }
  a.set_total_bytes(total);
  a.set_imbalance(static_cast<double>(max_owned) /
                  (static_cast<double>(total) / owned.size()));
  return a;
}

void FakeCoordinator::AutoRun(std::string job_id) {
  auto pause = [this]() {
    absl::SleepFor(options_.auto_step);
    absl::MutexLock lock(&mu_);
    return !shutting_down_;
  };
  int64_t steps = 0;
  int world_size = 0;
  {
    absl::MutexLock lock(&mu_);
    JobRecord& r = jobs_[job_id];
    steps = r.job.spec().steps();
    world_size = r.job.spec().world_size();
    for (int rank = 0; rank < world_size; ++rank) {
      v1::JobMember* m = r.job.add_members();
      m->set_rank(rank);
      m->set_worker_id(absl::StrCat("w-", rank + 1));
      m->set_host("127.0.0.1");
    }
    SetStateLocked(r, v1::STARTING, "workers assigned");
  }
  if (!pause()) return;
  {
    absl::MutexLock lock(&mu_);
    JobRecord& r = jobs_[job_id];
    if (IsTerminal(r.job.state())) return;
    r.assignment = MakeAssignment(job_id, world_size, r.job.epoch());
    r.has_assignment = true;
    SetStateLocked(r, v1::RUNNING, "assignment published");
  }
  for (int64_t step = 1; step <= steps; ++step) {
    if (!pause()) return;
    absl::MutexLock lock(&mu_);
    JobRecord& r = jobs_[job_id];
    if (IsTerminal(r.job.state())) return;
    v1::JobProgress p;
    p.set_step(step);
    p.set_total_steps(steps);
    p.set_loss(1.0 / static_cast<double>(step));
    *p.mutable_step_time() = TimeUtil::MillisecondsToDuration(5);
    p.set_samples_per_second(1000);
    *r.job.mutable_progress() = p;
    v1::JobEvent event;
    *event.mutable_progress() = p;
    AppendEventLocked(r, std::move(event));
  }
  absl::MutexLock lock(&mu_);
  JobRecord& r = jobs_[job_id];
  if (IsTerminal(r.job.state())) return;
  if (!r.job.spec().output_dir().empty()) {
    r.job.set_output_path(
        absl::StrCat(r.job.spec().output_dir(), "/params.safetensors"));
  }
  SetStateLocked(r, v1::SUCCEEDED, "all steps done");
}

grpc::Status FakeCoordinator::SubmitJob(grpc::ServerContext*,
                                        const v1::SubmitJobRequest* request,
                                        v1::Job* response) {
  absl::MutexLock lock(&mu_);
  if (!next_submit_error_.ok()) {
    absl::Status s = std::move(next_submit_error_);
    next_submit_error_ = absl::OkStatus();
    return ToGrpcStatus(s);
  }
  if (absl::Status s = ValidateJobSpec(request->spec()); !s.ok()) {
    return ToGrpcStatus(s);
  }
  const std::string id = AddJobLocked(request->spec());
  *response = jobs_[id].job;
  if (options_.auto_run && !shutting_down_) {
    runners_.emplace_back(&FakeCoordinator::AutoRun, this, id);
  }
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::GetJob(grpc::ServerContext*,
                                     const v1::GetJobRequest* request,
                                     v1::Job* response) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(request->job_id());
  if (it == jobs_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no job ", request->job_id()));
  }
  *response = it->second.job;
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::ListJobs(grpc::ServerContext*,
                                       const v1::ListJobsRequest* request,
                                       v1::ListJobsResponse* response) {
  absl::MutexLock lock(&mu_);
  last_list_states_.clear();
  for (int s : request->states()) {
    last_list_states_.push_back(static_cast<v1::JobState>(s));
  }
  ++list_calls_;
  std::vector<const v1::Job*> matching;
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
    const v1::Job& job = it->second.job;
    if (!request->states().empty() &&
        std::find(request->states().begin(), request->states().end(),
                  job.state()) == request->states().end()) {
      continue;
    }
    matching.push_back(&job);
  }
  return Page(matching, request->page_size(), request->page_token(),
              response->mutable_jobs(), response->mutable_next_page_token());
}

grpc::Status FakeCoordinator::CancelJob(grpc::ServerContext*,
                                        const v1::CancelJobRequest* request,
                                        v1::Job* response) {
  absl::MutexLock lock(&mu_);
  last_cancel_reason_ = request->reason();
  auto it = jobs_.find(request->job_id());
  if (it == jobs_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no job ", request->job_id()));
  }
  if (IsTerminal(it->second.job.state())) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("job ", request->job_id(),
                                     " has already ended"));
  }
  SetStateLocked(it->second, v1::CANCELLED, request->reason());
  *response = it->second.job;
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::WatchJob(grpc::ServerContext* context,
                                       const v1::WatchJobRequest* request,
                                       grpc::ServerWriter<v1::JobEvent>* writer) {
  int64_t sent = request->after_sequence();
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(request->job_id());
  if (it == jobs_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no job ", request->job_id()));
  }
  ++open_watches_;
  while (true) {
    JobRecord& record = jobs_[request->job_id()];
    std::vector<v1::JobEvent> pending(
        record.events.begin() + std::min<int64_t>(sent, record.events.size()),
        record.events.end());
    const bool done = IsTerminal(record.job.state());
    mu_.Unlock();
    for (const v1::JobEvent& event : pending) {
      if (!writer->Write(event)) break;
      sent = event.sequence();
    }
    mu_.Lock();
    if (done || context->IsCancelled() || shutting_down_) break;
    if (record.events.size() <= static_cast<size_t>(sent)) {
      changed_.WaitWithTimeout(&mu_, absl::Milliseconds(50));
    }
  }
  --open_watches_;
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::GetShardAssignment(
    grpc::ServerContext*, const v1::GetShardAssignmentRequest* request,
    v1::ShardAssignment* response) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(request->job_id());
  if (it == jobs_.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no job ", request->job_id()));
  }
  if (!it->second.has_assignment) {
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat("job ", request->job_id(), " has no shard assignment yet"));
  }
  *response = it->second.assignment;
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::ListWorkers(grpc::ServerContext*,
                                          const v1::ListWorkersRequest* request,
                                          v1::ListWorkersResponse* response) {
  absl::MutexLock lock(&mu_);
  ++list_calls_;
  std::vector<const v1::WorkerInfo*> matching;
  for (const v1::WorkerInfo& w : workers_) {
    if (w.state() == v1::LOST && !request->include_lost()) continue;
    matching.push_back(&w);
  }
  return Page(matching, request->page_size(), request->page_token(),
              response->mutable_workers(), response->mutable_next_page_token());
}

v1::WorkerInfo* FakeCoordinator::FindWorkerLocked(const std::string& worker) {
  for (v1::WorkerInfo& w : workers_) {
    if (w.id() == worker) return &w;
  }
  for (v1::WorkerInfo& w : workers_) {
    if (w.name() == worker) return &w;
  }
  return nullptr;
}

grpc::Status FakeCoordinator::UpdateWorker(
    const std::string& worker, v1::WorkerInfo* response,
    const std::function<void(v1::WorkerInfo&)>& change) {
  absl::MutexLock lock(&mu_);
  v1::WorkerInfo* w = FindWorkerLocked(worker);
  if (w == nullptr) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no worker \"", worker, "\""));
  }
  change(*w);
  *response = *w;
  return grpc::Status::OK;
}

grpc::Status FakeCoordinator::GetWorker(grpc::ServerContext*,
                                        const v1::GetWorkerRequest* request,
                                        v1::WorkerInfo* response) {
  {
    absl::MutexLock lock(&mu_);
    ++get_worker_calls_;
  }
  return UpdateWorker(request->worker(), response, [](v1::WorkerInfo&) {});
}

grpc::Status FakeCoordinator::DrainWorker(grpc::ServerContext*,
                                          const v1::DrainWorkerRequest* request,
                                          v1::WorkerInfo* response) {
  return UpdateWorker(request->worker(), response, [](v1::WorkerInfo& w) {
    w.set_drain_requested(true);
    w.set_state(v1::DRAINING);
  });
}

grpc::Status FakeCoordinator::UndrainWorker(
    grpc::ServerContext*, const v1::UndrainWorkerRequest* request,
    v1::WorkerInfo* response) {
  return UpdateWorker(request->worker(), response, [](v1::WorkerInfo& w) {
    w.set_drain_requested(false);
    w.set_state(w.job_id().empty() ? v1::IDLE : v1::BUSY);
  });
}

void FakeCoordinator::FinishWorkerJob(const std::string& id) {
  absl::MutexLock lock(&mu_);
  v1::WorkerInfo* w = FindWorkerLocked(id);
  if (w == nullptr) return;
  w->clear_job_id();
  w->set_rank(-1);
  w->set_state(w->drain_requested() ? v1::DRAINING : v1::IDLE);
}

int FakeCoordinator::list_calls() const {
  absl::MutexLock lock(&mu_);
  return list_calls_;
}

int FakeCoordinator::get_worker_calls() const {
  absl::MutexLock lock(&mu_);
  return get_worker_calls_;
}

}  // namespace pshard::cli
