#include "worker/runtime/job_runner.h"

#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/spec_fingerprint.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "worker/runtime/engine_factory.h"
#include "worker/runtime/checkpoint_resume.h"
#include "worker/runtime/checkpoint_saver.h"
#include "worker/runtime/output_writer.h"
#include "worker/runtime/result_reporter.h"

namespace pshard::worker {
namespace {

AssignmentClientOptions AssignmentOptions(const v1::RunJobDirective& directive,
                                          const JobRunnerOptions& options) {
  AssignmentClientOptions assignment;
  assignment.job_id = directive.job_id();
  assignment.epoch = directive.epoch();
  assignment.rank = directive.rank();
  assignment.world_size = directive.world_size();
  assignment.worker_id = options.worker_id;
  assignment.rpc_timeout = options.rpc_timeout;
  assignment.clock = options.clock;
  return assignment;
}

// The shards this rank owns and its optimizer state, once the assignment is
// in (after the first step).
void FillOwnedShards(ZeroHook& hook, JobSnapshot& snapshot) {
  const BucketLayout& layout = hook.layout();
  snapshot.owned_shards.clear();
  for (int b = 0; b < layout.num_buckets(); ++b) {
    const int64_t owned = hook.owned_elements(b);
    if (owned == 0) continue;
    v1::OwnedShard shard;
    shard.set_bucket_index(b);
    shard.set_num_elements(owned);
    shard.set_bytes(owned * 4);
    shard.set_optimizer_state_bytes(hook.bucket_state_bytes(b));
    snapshot.owned_shards.push_back(shard);
  }
  snapshot.optimizer_state_bytes = hook.optimizer().total_state_bytes();
}

}  // namespace

JobRunner::JobRunner(ControlPlane* control, v1::RunJobDirective directive,
                     JobRunnerOptions options)
    : control_(control),
      directive_(std::move(directive)),
      options_(std::move(options)),
      kv_(control, directive_.job_id(), directive_.epoch(), *options_.clock),
      assignment_(control, AssignmentOptions(directive_, options_)) {
  snapshot_.job_id = directive_.job_id();
  snapshot_.epoch = directive_.epoch();
  snapshot_.rank = directive_.rank();
}

JobRunner::~JobRunner() = default;

void JobRunner::Abort(const absl::Status& reason) {
  absl::Status status =
      reason.ok() ? absl::AbortedError("job aborted") : reason;
  absl::MutexLock lock(&mu_);
  if (!abort_reason_.ok()) return;
  abort_reason_ = status;
  kv_.Cancel();
  if (comm_ != nullptr) comm_->Abort(status);
}

absl::Status JobRunner::CheckAborted() {
  absl::MutexLock lock(&mu_);
  return abort_reason_;
}

void JobRunner::PublishCommunicator(Communicator* comm) {
  absl::MutexLock lock(&mu_);
  comm_ = comm;
  if (comm_ != nullptr && !abort_reason_.ok()) comm_->Abort(abort_reason_);
}

JobSnapshot JobRunner::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return snapshot_;
}

absl::Status JobRunner::Run() {
  absl::Status status = RunSteps();
  // An abort explains the failure better than the collective error it caused.
  if (!status.ok()) {
    absl::Status aborted = CheckAborted();
    if (!aborted.ok()) status = aborted;
  }
  std::string output;
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    output = output_path_;
  }
  ReportResult(status, output);
  return status;
}

absl::Status JobRunner::RunSteps() {
  // The coordinator sends specs with their defaults applied; applying them
  // again here keeps a hand-made directive (tests, older coordinators) on the
  // same documented defaults, from the one place that defines them.
  const v1::JobSpec spec = ApplyJobSpecDefaults(directive_.spec());
  const int rank = directive_.rank();
  const int world = directive_.world_size();
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "directive gives rank ", rank, " of world size ", world));
  }
  const absl::Duration timeout =
      absl::Seconds(spec.collective_timeout_seconds());
  RETURN_IF_ERROR(CheckAborted());

  StepEngineOptions engine_options;
  engine_options.job_id = directive_.job_id();
  engine_options.epoch = directive_.epoch();
  engine_options.rank = rank;
  engine_options.world_size = world;
  engine_options.device = options_.device;
  engine_options.gloo_hostname = options_.gloo_hostname;
  engine_options.timeout = timeout;
  ASSIGN_OR_RETURN(
      std::unique_ptr<StepEngine> engine,
      CreateStepEngine(spec, engine_options, kv_,
                       assignment_.Provider(timeout,
                                            [this] { return CheckAborted(); })));
  PublishCommunicator(&engine->communicator());
  // The communicator must not be reachable through comm_ once it is gone.
  absl::Cleanup unpublish = [this] { PublishCommunicator(nullptr); };

  std::unique_ptr<ProgressReporter> reporter;
  if (rank == 0) {
    reporter = std::make_unique<ProgressReporter>(
        control_,
        ProgressSource{directive_.job_id(), directive_.epoch(), rank,
                       options_.worker_id},
        options_.rpc_timeout,
        [this] {
          Abort(absl::AbortedError(absl::StrCat(
              "job ", directive_.job_id(), " was stopped by the coordinator")));
        },
        *options_.clock);
  }
  ASSIGN_OR_RETURN(
      std::unique_ptr<CheckpointSaver> saver,
      CheckpointSaver::ForJob(spec,
                              ResultSource{directive_.job_id(),
                                           directive_.epoch(), rank,
                                           options_.worker_id},
                              world, control_, options_.rpc_timeout,
                              *options_.clock));
  // A resumed epoch starts after its checkpoint's step.
  if (directive_.has_resume()) {
    ASSIGN_OR_RETURN(const std::string fingerprint,
                     checkpoint::SpecFingerprint(spec));
    RETURN_IF_ERROR(
        ResumeFromCheckpoint(directive_.resume(), fingerprint, *engine));
    first_step_ = directive_.resume().step() + 1;
  }
  for (int64_t step = first_step_; step <= spec.steps(); ++step) {
    RETURN_IF_ERROR(RunStep(*engine, spec, step, reporter.get()));
    if (saver == nullptr) continue;
    saver->Poll();
    // A failed checkpoint is reported; training goes on.
    if (CheckpointSaver::Due(spec, step)) {
      const absl::Time start = options_.clock->Now();
      (void)saver->Start(step, *engine);
      if (options_.metrics != nullptr) {
        options_.metrics->ObserveCheckpointStall(options_.clock->Now() - start);
      }
    }
  }
  // The last step's updates (overlap_param_broadcast leaves them in
  // flight) before the final parameters are read.
  RETURN_IF_ERROR(engine->hook().WaitForAllParameters());
  if (saver != nullptr) saver->Finish(timeout);
  if (reporter != nullptr) reporter->Flush(options_.rpc_timeout);
  RETURN_IF_ERROR(CheckAborted());
  RETURN_IF_ERROR(engine->FinalBarrier());

  if (rank == 0 && !spec.output_dir().empty()) {
    ASSIGN_OR_RETURN(std::vector<std::vector<float>> values,
                     engine->DownloadParameters());
    ASSIGN_OR_RETURN(std::string path,
                     WriteJobOutput(spec.output_dir(),
                                    engine->workload().parameters(), values));
    absl::MutexLock lock(&mu_);
    output_path_ = std::move(path);
  }
  return absl::OkStatus();
}

absl::Status JobRunner::RunStep(StepEngine& engine, const v1::JobSpec& spec,
                                int64_t step, ProgressReporter* reporter) {
  RETURN_IF_ERROR(CheckAborted());
  const absl::Time start = options_.clock->Now();
  ASSIGN_OR_RETURN(double loss, engine.RunStep(step));
  const absl::Duration step_time = options_.clock->Now() - start;
  VLOG(1) << "job " << directive_.job_id() << " epoch " << directive_.epoch()
          << " rank " << directive_.rank() << ": step " << step << " took "
          << absl::FormatDuration(step_time);
  const bool report = step % spec.progress_every() == 0 || step == spec.steps();
  // Only the mlp workload has a loss (the others report NaN). Every rank
  // takes part in the average (same steps, same workload kind).
  if (report && spec.has_mlp()) {
    ASSIGN_OR_RETURN(loss, engine.AverageLoss(loss));
  }
  {
    absl::MutexLock lock(&mu_);
    snapshot_.step = step;
    if (step == first_step_) {
      FillOwnedShards(engine.hook(), snapshot_);
      if (options_.metrics != nullptr) {
        options_.metrics->SetOptimizerStateBytes(snapshot_.optimizer_state_bytes);
      }
    }
  }
  if (options_.metrics != nullptr) {
    const int64_t bytes_sent = engine.communicator().bytes_sent();
    options_.metrics->ObserveStep(step_time,
                                  engine.hook().last_collective_wait(),
                                  bytes_sent - bytes_sent_before_);
    bytes_sent_before_ = bytes_sent;
  }
  if (reporter == nullptr || !report) return absl::OkStatus();
  v1::JobProgress progress;
  progress.set_step(step);
  progress.set_total_steps(spec.steps());
  progress.set_loss(loss);
  progress.set_lr(DefaultGroupLearningRate(spec.optimizer(), step));
  SetGradNorm(engine.hook().last_grad_norm(), progress);
  *progress.mutable_step_time() = ToProto(step_time);
  progress.set_bytes_sent(engine.communicator().bytes_sent());
  const double seconds = absl::ToDoubleSeconds(step_time);
  progress.set_samples_per_second(
      seconds > 0 ? engine.workload().samples_per_step() *
                        directive_.world_size() / seconds
                  : 0);
  reporter->Post(progress);
  return absl::OkStatus();
}

void JobRunner::ReportResult(const absl::Status& status,
                             const std::string& output) {
  (void)ReportRankResult(
      *control_,
      ResultSource{directive_.job_id(), directive_.epoch(), directive_.rank(),
                   options_.worker_id},
      status.ok(), status.ToString(), FailureCauseOf(status), Snapshot().step,
      output, options_.rpc_timeout, *options_.clock,
      ResultRetry{options_.result_retry_for,
                  [this] { return !CheckAborted().ok(); }});
}

}  // namespace pshard::worker
