#include "worker/runtime/agent.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/proto_time.h"
#include "worker/runtime/job_runner.h"
#include "worker/runtime/program_job.h"

namespace pshard::worker {

Agent::Agent(ControlPlane* control, AgentOptions options)
    : control_(control), options_(std::move(options)) {
  absl::MutexLock lock(&mu_);
  interval_ = options_.default_heartbeat_interval;
}

Agent::~Agent() { Stop(absl::CancelledError("worker shutting down")); }

void Agent::Start() {
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
  attach_thread_ = std::thread([this] { AttachLoop(); });
}

void Agent::Stop(const absl::Status& reason) {
  std::thread job_thread;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (job_ != nullptr && job_running_) job_->Abort(reason);
  }
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  {
    absl::MutexLock lock(&mu_);
    job_thread = std::move(job_thread_);
  }
  // The job reports its result (bounded by its RPC deadlines) and returns.
  if (job_thread.joinable()) job_thread.join();
  // Detached last, so that the coordinator hears the job's result before
  // the stream's end makes this worker LOST.
  {
    absl::MutexLock lock(&mu_);
    if (attachment_ != nullptr) attachment_->Cancel();
  }
  if (attach_thread_.joinable()) attach_thread_.join();
}

void Agent::Drain() {
  absl::MutexLock lock(&mu_);
  if (!own_drain_) {
    LOG(INFO) << "draining: no new job; the running one, if any, runs until "
                 "it ends or commits its next checkpoint";
  }
  own_drain_ = true;
  draining_ = true;
  if (!drain_checkpoint_step_.has_value()) {
    drain_checkpoint_step_ = job_checkpoint_step_;
  }
  if (!job_running_) drained_ = true;
  wake_ = true;  // tell the coordinator at once
}

bool Agent::WaitForDrained(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return options_.clock->AwaitWithTimeout(mu_, absl::Condition(&drained_),
                                          timeout);
}

v1::WorkerState Agent::StateLocked() const {
  if (draining_) return v1::DRAINING;
  return job_running_ ? v1::BUSY : v1::IDLE;
}

v1::GetWorkerStatusResponse Agent::Status() const {
  v1::GetWorkerStatusResponse response;
  absl::MutexLock lock(&mu_);
  response.set_worker_id(worker_id_);
  response.set_name(options_.name);
  response.set_state(StateLocked());
  response.set_device(options_.device);
  response.set_rank(-1);
  if (job_ != nullptr && job_running_) {
    JobSnapshot snapshot = job_->Snapshot();
    response.set_job_id(snapshot.job_id);
    response.set_epoch(snapshot.epoch);
    response.set_rank(snapshot.rank);
    response.set_step(snapshot.step);
    for (const auto& shard : snapshot.owned_shards) {
      *response.add_owned_shards() = shard;
    }
    response.set_optimizer_state_bytes(snapshot.optimizer_state_bytes);
  }
  return response;
}

absl::Status Agent::Register() {
  v1::RegisterWorkerRequest request;
  request.set_name(options_.name);
  request.set_incarnation(options_.incarnation);
  request.set_address(options_.address);
  request.set_host(options_.host);
  request.set_device_kind(options_.device_kind);
  request.set_device(options_.device);
  absl::StatusOr<v1::RegisterWorkerResponse> response =
      control_->RegisterWorker(request, options_.rpc_timeout);
  NoteCoordinatorCall(response.status());
  if (!response.ok()) {
    const absl::StatusCode code = response.status().code();
    if (code != absl::StatusCode::kUnavailable &&
        code != absl::StatusCode::kDeadlineExceeded) {
      // Not an outage (NoteCoordinatorCall says those once): refused.
      LOG(ERROR) << "registering with the coordinator "
                 << options_.coordinator_address << " failed: "
                 << response.status();
    }
    return response.status();
  }
  absl::MutexLock lock(&mu_);
  worker_id_ = response->worker_id();
  ++registrations_;
  LOG(INFO) << (registrations_ == 1 ? "registered" : "registered again")
            << " with the coordinator " << options_.coordinator_address
            << " as worker " << worker_id_ << " (name " << options_.name
            << ", host " << options_.host << ", device " << options_.device
            << ")";
  // The stream of the registration before is stale now: attach again.
  if (attachment_ != nullptr) attachment_->Cancel();
  if (response->has_heartbeat_interval()) {
    const absl::Duration interval = FromProto(response->heartbeat_interval());
    if (interval > absl::ZeroDuration()) interval_ = interval;
  }
  return absl::OkStatus();
}

void Agent::NoteCoordinatorCall(const absl::Status& status) {
  const bool reachable =
      status.code() != absl::StatusCode::kUnavailable &&
      status.code() != absl::StatusCode::kDeadlineExceeded;
  absl::MutexLock lock(&mu_);
  if (reachable == coordinator_reachable_) return;
  coordinator_reachable_ = reachable;
  if (reachable) {
    LOG(INFO) << "coordinator " << options_.coordinator_address
              << " reachable again";
  } else {
    LOG(WARNING) << "coordinator " << options_.coordinator_address
                 << " unreachable (retrying every heartbeat; said once): "
                 << status;
  }
}

void Agent::HeartbeatLoop() {
  while (true) {
    absl::Duration wait;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      wait = interval_;
    }
    bool registered;
    {
      absl::MutexLock lock(&mu_);
      registered = !worker_id_.empty();
    }
    if (!registered) {
      absl::Status status = Register();
      if (!status.ok()) {
        // The coordinator is not up yet: retry soon.
        wait = std::min(wait, absl::Milliseconds(500));
      } else {
        Beat();  // at once: a job may be waiting for us
      }
    } else {
      Beat();
    }
    absl::MutexLock lock(&mu_);
    auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || wake_;
    };
    options_.clock->AwaitWithTimeout(mu_, absl::Condition(&woken), wait);
    wake_ = false;
  }
}

void Agent::AttachLoop() {
  absl::Duration backoff = kAttachBackoffMin;
  while (true) {
    v1::AttachRequest request;
    int64_t registration;
    {
      absl::MutexLock lock(&mu_);
      auto registered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !worker_id_.empty();
      };
      if (!options_.clock->AwaitWithTimeout(mu_, absl::Condition(&registered),
                                            kAttachBackoffMax)) {
        continue;
      }
      if (stopping_) return;
      request.set_worker_id(worker_id_);
      request.set_incarnation(options_.incarnation);
      registration = registrations_;
    }
    absl::StatusOr<std::unique_ptr<Attachment>> attachment =
        control_->Attach(request, options_.rpc_timeout);
    if (attachment.ok()) {
      bool current;
      {
        absl::MutexLock lock(&mu_);
        current = !stopping_ && registrations_ == registration;
        if (current) attachment_ = attachment->get();
      }
      if (!current) continue;  // registered again meanwhile (or stopping)
      backoff = kAttachBackoffMin;
      // Held until it ends: the coordinator went away, or Stop or a new
      // registration cancelled it. Each wait is bounded; the stream's end is
      // certain once cancelled.
      while (!(*attachment)->WaitForEnd(kAttachBackoffMax).has_value()) {
      }
      absl::MutexLock lock(&mu_);
      attachment_ = nullptr;
      if (stopping_) return;
    }
    // Broken or refused (NotFound: the heartbeat loop registers again):
    // retry after the backoff, or at once after a new registration.
    absl::MutexLock lock(&mu_);
    auto retry_now = [this, registration]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || registrations_ != registration;
    };
    options_.clock->AwaitWithTimeout(mu_, absl::Condition(&retry_now),
                                     backoff);
    backoff = std::min(2 * backoff, kAttachBackoffMax);
  }
}

void Agent::Beat() {
  v1::HeartbeatRequest request;
  {
    absl::MutexLock lock(&mu_);
    ReapJob();
    if (pending_run_.has_value() && !job_running_) {
      if (!stopping_ && !draining_) StartJob(*pending_run_);
      pending_run_.reset();
    }
    if (draining_ && !job_running_) {
      drained_ = true;
    }
    request.set_worker_id(worker_id_);
    request.set_incarnation(options_.incarnation);
    request.set_state(StateLocked());
    if (job_ != nullptr && job_running_) {
      JobSnapshot snapshot = job_->Snapshot();
      request.set_job_id(snapshot.job_id);
      request.set_epoch(snapshot.epoch);
      request.set_step(snapshot.step);
    }
  }
  absl::StatusOr<v1::HeartbeatResponse> response =
      control_->Heartbeat(request, options_.rpc_timeout);
  NoteCoordinatorCall(response.status());
  if (!response.ok()) {
    if (response.status().code() == absl::StatusCode::kNotFound) {
      // Forgotten or replaced: register again on the next beat.
      LOG(WARNING) << "the coordinator does not know this worker any more ("
                   << response.status().message() << "); registering again";
      absl::MutexLock lock(&mu_);
      worker_id_.clear();
    }
    return;
  }
  absl::MutexLock lock(&mu_);
  if (job_running_) {
    job_checkpoint_step_ = response->job_checkpoint_step();
    if (own_drain_ && !drained_) {
      if (!drain_checkpoint_step_.has_value()) {
        // Drained before the job's first reply: this is the baseline.
        drain_checkpoint_step_ = job_checkpoint_step_;
      } else if (*job_checkpoint_step_ > *drain_checkpoint_step_) {
        LOG(INFO) << "drained: job " << job_->job_id()
                  << " committed its checkpoint at step "
                  << *job_checkpoint_step_
                  << "; it restarts from there when this worker stops";
        drained_ = true;
      }
    }
  }
  for (const v1::Directive& directive : response->directives()) {
    switch (directive.directive_case()) {
      case v1::Directive::kRunJob:
        if (stopping_ || draining_) break;
        if (job_running_) {
          // One job at a time. A repeat of the current one is ignored; a new
          // one waits for the current one's thread to end (it has normally
          // already reported its result, or the coordinator would not have
          // sent another job).
          if (directive.run_job().job_id() != job_->job_id() ||
              directive.run_job().epoch() != job_->epoch()) {
            pending_run_ = directive.run_job();
          }
          break;
        }
        StartJob(directive.run_job());
        break;
      case v1::Directive::kAbortJob: {
        const auto& abort = directive.abort_job();
        if (job_ != nullptr && job_running_ &&
            job_->job_id() == abort.job_id() &&
            (abort.epoch() == 0 || abort.epoch() == job_->epoch())) {
          LOG(INFO) << "job " << abort.job_id() << " epoch "
                    << job_->epoch() << ": aborted by the coordinator"
                    << (abort.reason().empty() ? "" : ": ") << abort.reason();
          job_->Abort(absl::AbortedError(absl::StrCat(
              "job ", abort.job_id(), " aborted by the coordinator",
              abort.reason().empty() ? "" : ": ", abort.reason())));
        }
        break;
      }
      case v1::Directive::kDrain:
        // Reserved: today's coordinator drains a worker itself (no new
        // jobs) and never sends Drain; see the header.
        draining_ = true;
        if (!job_running_) drained_ = true;
        break;
      case v1::Directive::DIRECTIVE_NOT_SET:
        break;
    }
  }
}

void Agent::ReapJob() {
  if (job_running_ || !job_thread_.joinable()) return;
  job_thread_.join();
  job_.reset();
}

void Agent::StartJob(const v1::RunJobDirective& directive) {
  ReapJob();
  if (directive.spec().has_program()) {
    ProgramJobOptions options;
    options.worker_id = worker_id_;
    options.coordinator_address = options_.coordinator_address;
    options.coordinator_security = options_.coordinator_security;
    options.hostname = options_.gloo_hostname;
    options.device = options_.worker_device;
    options.log_dir = options_.program_log_dir;
    options.log_max_bytes = options_.program_log_max_bytes;
    options.rpc_timeout = options_.rpc_timeout;
    options.result_retry_for = options_.result_retry_for;
    options.clock = options_.clock;
    job_ = std::make_unique<ProgramJob>(control_, directive, options);
  } else {
    JobRunnerOptions options;
    options.worker_id = worker_id_;
    options.gloo_hostname = options_.gloo_hostname;
    options.rpc_timeout = options_.rpc_timeout;
    options.result_retry_for = options_.result_retry_for;
    options.device = options_.worker_device;
    options.clock = options_.clock;
    options.metrics = options_.metrics;
    job_ = std::make_unique<JobRunner>(control_, directive, options);
  }
  job_running_ = true;
  job_checkpoint_step_.reset();
  RankJob* runner = job_.get();
  // "job j-1 epoch 2 rank 0 of 4": the context of each of the job's lines.
  std::string what =
      absl::StrCat("job ", directive.job_id(), " epoch ", directive.epoch(),
                   " rank ", directive.rank(), " of ", directive.world_size());
  LOG(INFO) << what << ": starting ("
            << (directive.spec().has_program()
                    ? std::string("a program")
                    : absl::StrCat(directive.spec().steps(), " steps"))
            << (directive.has_resume()
                    ? absl::StrCat(", resuming after step ",
                                   directive.resume().step())
                    : std::string())
            << ")";
  job_thread_ = std::thread([this, runner, what = std::move(what)] {
    const absl::Time start = options_.clock->Now();
    const absl::Status result = runner->Run();
    const std::string took =
        absl::FormatDuration(options_.clock->Now() - start);
    if (result.ok()) {
      LOG(INFO) << what << ": succeeded (step " << runner->Snapshot().step
                << ", " << took << ")";
    } else if (absl::IsAborted(result) || absl::IsCancelled(result)) {
      LOG(WARNING) << what << ": stopped at step " << runner->Snapshot().step
                   << " after " << took << ": " << result;
    } else {
      LOG(ERROR) << what << ": failed at step " << runner->Snapshot().step
                 << " after " << took << ": " << result;
    }
    absl::MutexLock lock(&mu_);
    job_running_ = false;
    wake_ = true;  // tell the coordinator at once, start a pending job
    if (draining_) drained_ = true;
  });
}

}  // namespace pshard::worker
