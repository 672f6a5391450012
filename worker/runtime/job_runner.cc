#include "worker/runtime/job_runner.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/job_spec.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "shard/layout.h"
#include "shard/layout_fingerprint.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/gpu/backend_choice.h"
#include "worker/gpu/gpu_job.h"
#include "worker/hook/zero_hook.h"
#include "worker/io/safetensors.h"
#include "worker/optim/shard_optimizer.h"
#include "worker/runtime/sliced_wait.h"
#include "worker/workload/workload.h"

namespace pshard::worker {
namespace {

// Sends rank 0's progress off the training thread: at most one report in
// flight, newer progress replacing an unsent one, so a slow coordinator never
// slows the steps.
class ProgressReporter {
 public:
  ProgressReporter(ControlPlane* control, absl::Duration rpc_timeout,
                   std::function<void()> on_abort)
      : control_(control),
        rpc_timeout_(rpc_timeout),
        on_abort_(std::move(on_abort)),
        thread_([this] { Loop(); }) {}

  ~ProgressReporter() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }

  void Post(v1::ReportProgressRequest request) {
    absl::MutexLock lock(&mu_);
    pending_ = std::move(request);
  }

  // Waits until everything posted so far has been sent (or `timeout`).
  void Flush(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !pending_.has_value() && !sending_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
  }

 private:
  void Loop() {
    while (true) {
      v1::ReportProgressRequest request;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_ || pending_.has_value();
        };
        mu_.Await(absl::Condition(&ready));
        if (!pending_.has_value()) return;
        request = *std::move(pending_);
        pending_.reset();
        sending_ = true;
      }
      absl::StatusOr<v1::ReportProgressResponse> response =
          control_->ReportProgress(request, rpc_timeout_);
      // A job the coordinator no longer runs (cancelled, failed, replaced by a
      // newer epoch) must stop; a transient failure is not a reason to.
      const bool abort =
          (response.ok() && response->abort()) ||
          (!response.ok() &&
           (response.status().code() == absl::StatusCode::kNotFound ||
            response.status().code() == absl::StatusCode::kFailedPrecondition));
      if (abort) on_abort_();
      absl::MutexLock lock(&mu_);
      sending_ = false;
    }
  }

  ControlPlane* const control_;
  const absl::Duration rpc_timeout_;
  std::function<void()> on_abort_;
  absl::Mutex mu_;
  std::optional<v1::ReportProgressRequest> pending_ ABSL_GUARDED_BY(mu_);
  bool sending_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace

JobRunner::JobRunner(ControlPlane* control, v1::RunJobDirective directive,
                     JobRunnerOptions options)
    : control_(control),
      directive_(std::move(directive)),
      options_(std::move(options)),
      kv_(control, directive_.job_id(), directive_.epoch()) {
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

// What a step needs from the backend: the CPU path (ZeroHook + Gloo) and the
// GPU path (GpuJob: GpuZeroHook + NCCL) behind one face.
class StepEngine {
 public:
  virtual ~StepEngine() = default;
  virtual absl::StatusOr<double> RunStep(int64_t step) = 0;
  virtual Communicator& comm() = 0;
  virtual const Workload& workload() const = 0;
  // The hook (host or device memory: GpuZeroHook is a ZeroHook).
  virtual ZeroHook& hook() = 0;
  // Every parameter's values on the host, in parameters() order.
  virtual absl::StatusOr<std::vector<std::vector<float>>> Parameters() = 0;

  // Owned shards and optimizer state, once the assignment is in.
  void FillSnapshot(int rank, JobSnapshot& snapshot) {
    ZeroHook& zero = hook();
    const BucketLayout& layout = zero.layout();
    snapshot.owned_shards.clear();
    for (int b = 0; b < layout.num_buckets(); ++b) {
      if (zero.owners()[b] != rank) continue;
      v1::OwnedShard shard;
      shard.set_bucket_index(b);
      shard.set_num_elements(layout.buckets()[b].numel);
      shard.set_bytes(layout.buckets()[b].numel * 4);
      shard.set_optimizer_state_bytes(zero.bucket_state_bytes(b));
      snapshot.owned_shards.push_back(shard);
    }
    snapshot.optimizer_state_bytes = zero.optimizer().total_state_bytes();
  }
};

namespace {

class CpuEngine : public StepEngine {
 public:
  // Members in destruction order: the communicator goes before the hook,
  // whose buffers an aborted transport may still hold until then.
  std::unique_ptr<Workload> workload_;
  std::unique_ptr<ZeroHook> hook_;
  std::unique_ptr<Communicator> comm_;

  ~CpuEngine() override { comm_.reset(); }

  absl::StatusOr<double> RunStep(int64_t step) override {
    std::vector<const float*> params(hook_->params().begin(),
                                     hook_->params().end());
    ASSIGN_OR_RETURN(double loss, workload_->ComputeGradients(
                                      step, params, hook_->grads(), *hook_));
    RETURN_IF_ERROR(hook_->FinishStep());
    return loss;
  }
  Communicator& comm() override { return *comm_; }
  const Workload& workload() const override { return *workload_; }
  ZeroHook& hook() override { return *hook_; }
  absl::StatusOr<std::vector<std::vector<float>>> Parameters() override {
    std::vector<std::vector<float>> out;
    const auto& infos = workload_->parameters();
    for (size_t i = 0; i < infos.size(); ++i) {
      const float* p = hook_->params()[i];
      out.emplace_back(p, p + infos[i].numel);
    }
    return out;
  }
};

class GpuEngine : public StepEngine {
 public:
  explicit GpuEngine(std::unique_ptr<GpuJob> job) : job_(std::move(job)) {}
  absl::StatusOr<double> RunStep(int64_t step) override {
    return job_->RunStep(step);
  }
  Communicator& comm() override { return job_->communicator(); }
  const Workload& workload() const override { return job_->workload(); }
  ZeroHook& hook() override { return job_->hook(); }
  absl::StatusOr<std::vector<std::vector<float>>> Parameters() override {
    return job_->DownloadParameters();
  }

 private:
  std::unique_ptr<GpuJob> job_;
};

}  // namespace

AssignmentProvider JobRunner::MakeProvider(absl::Duration timeout) {
  // Rebuild phase: report the observed layout, wait for the assignment.
  return [this, timeout](const BucketLayout& layout)
      -> absl::StatusOr<BucketAssignment> {
    v1::ReportBucketsRequest report;
    report.set_job_id(directive_.job_id());
    report.set_epoch(directive_.epoch());
    report.set_rank(directive_.rank());
    report.set_worker_id(options_.worker_id);
    for (auto& bucket : layout.ToProto()) *report.add_buckets() = std::move(bucket);
    // Every rank normally has the same layout: rank 0 sends it, the others
    // only its fingerprint (waiting, at the coordinator, for rank 0's), and
    // the whole layout only when the coordinator asks for it.
    bool send_layout = directive_.rank() == 0;
    if (!send_layout) {
      v1::ReportBucketsRequest by_fingerprint = report;
      by_fingerprint.set_layout_fingerprint(
          shard::LayoutFingerprint(report.buckets()));
      by_fingerprint.clear_buckets();
      *by_fingerprint.mutable_timeout() = ToProto(options_.rpc_timeout / 2);
      ASSIGN_OR_RETURN(v1::ReportBucketsResponse response,
                       control_->ReportBuckets(by_fingerprint, options_.rpc_timeout));
      send_layout = response.send_layout();
    }
    if (send_layout) {
      RETURN_IF_ERROR(
          control_->ReportBuckets(report, options_.rpc_timeout).status());
    }
    v1::GetAssignmentRequest request;
    request.set_job_id(directive_.job_id());
    request.set_epoch(directive_.epoch());
    // Only each bucket's owner: the rank knows its own layout.
    request.set_view(v1::ASSIGNMENT_VIEW_OWNERS);
    // Every rank must finish its first backward first: allow the collective
    // timeout, waiting in slices so that an abort is noticed.
    SlicedWaitOptions wait;
    wait.timeout = timeout;
    absl::StatusOr<v1::ShardAssignment> assignment;
    RETURN_IF_ERROR(WaitInSlices(
        wait,
        absl::StrCat("assignment of job ", directive_.job_id(), " epoch ",
                     directive_.epoch(), " not published"),
        [this] { return CheckAborted(); },
        [&](absl::Duration slice) {
          *request.mutable_timeout() = ToProto(slice);
          assignment =
              control_->GetAssignment(request, slice + options_.rpc_timeout);
          return assignment.status();
        }));
    if (assignment->job_id() != directive_.job_id() ||
        assignment->epoch() != directive_.epoch()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "refusing the assignment of job ", assignment->job_id(), " epoch ",
          assignment->epoch(), ": this rank runs job ", directive_.job_id(),
          " epoch ", directive_.epoch()));
    }
    BucketAssignment result;
    result.epoch = assignment->epoch();
    ASSIGN_OR_RETURN(result.owners,
                     shard::DecodeOwners(*assignment, layout.num_buckets(),
                                         directive_.world_size()));
    return result;
  };

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
  ASSIGN_OR_RETURN(CommBackend backend,
                   ChooseBackend(spec.backend(), options_.device));
  const absl::Duration timeout =
      absl::Seconds(spec.collective_timeout_seconds());
  RETURN_IF_ERROR(CheckAborted());

  std::unique_ptr<StepEngine> engine;
  if (backend == CommBackend::kNccl) {
    GpuJobOptions gpu;
    gpu.job_id = directive_.job_id();
    gpu.epoch = directive_.epoch();
    gpu.rank = rank;
    gpu.world_size = world;
    gpu.device = options_.device.cuda_device;
    gpu.timeout = timeout;
    ASSIGN_OR_RETURN(std::unique_ptr<GpuJob> job,
                     GpuJob::Create(spec, gpu, kv_, MakeProvider(timeout)));
    engine = std::make_unique<GpuEngine>(std::move(job));
  } else {
    auto cpu = std::make_unique<CpuEngine>();
    ASSIGN_OR_RETURN(cpu->workload_, CreateWorkload(spec, rank, world));
    ASSIGN_OR_RETURN(std::unique_ptr<ShardOptimizer> optimizer,
                     ShardOptimizer::Create(spec.optimizer()));
    GlooOptions gloo;
    gloo.rank = rank;
    gloo.world_size = world;
    gloo.hostname = options_.gloo_hostname;
    gloo.timeout = timeout;
    gloo.key_prefix = "gloo/";
    ASSIGN_OR_RETURN(cpu->comm_, CreateGlooCommunicator(gloo, kv_));
    ZeroHookOptions hook_options;
    hook_options.comm_mode = spec.comm_mode();
    hook_options.bucket_cap_mb = spec.bucket_cap_mb();
    hook_options.timeout = timeout;
    ASSIGN_OR_RETURN(cpu->hook_,
                     ZeroHook::Create(cpu->workload_->parameters(),
                                      cpu->comm_.get(), std::move(optimizer),
                                      MakeProvider(timeout), hook_options));
    RETURN_IF_ERROR(
        cpu->workload_->InitializeParameters(cpu->hook_->params()));
    engine = std::move(cpu);
  }
  {
    absl::MutexLock lock(&mu_);
    comm_ = &engine->comm();
    if (!abort_reason_.ok()) comm_->Abort(abort_reason_);
  }
  // The communicator must not be reachable through comm_ once it is gone.
  struct Unpublish {
    JobRunner* runner;
    ~Unpublish() {
      absl::MutexLock lock(&runner->mu_);
      runner->comm_ = nullptr;
    }
  } unpublish{this};
  const Workload& workload = engine->workload();
  std::unique_ptr<ProgressReporter> reporter;
  if (rank == 0) {
    reporter = std::make_unique<ProgressReporter>(
        control_, options_.rpc_timeout, [this] {
          Abort(absl::AbortedError(absl::StrCat(
              "job ", directive_.job_id(), " was stopped by the coordinator")));
        });
  }
  const int64_t steps = spec.steps();
  const int64_t every = spec.progress_every();
  // Only the mlp workload has a loss (the others report NaN).
  const bool has_loss = spec.has_mlp();
  for (int64_t step = 1; step <= steps; ++step) {
    RETURN_IF_ERROR(CheckAborted());
    const absl::Time start = absl::Now();
    ASSIGN_OR_RETURN(double loss, engine->RunStep(step));
    const absl::Duration step_time = absl::Now() - start;
    const bool report = step % every == 0 || step == steps;
    // (On NCCL the communicator takes device memory: rank 0's loss then.)
    if (report && has_loss && world > 1 && backend == CommBackend::kGloo) {
      // The reported loss is the average over ranks. Every rank takes part
      // (same steps, same workload kind), so the collective order matches.
      float sum = static_cast<float>(loss);
      RETURN_IF_ERROR(engine->comm()
                          .AllReduce(&sum, 1, DataType::kFloat32)
                          ->Wait(timeout));
      loss = sum / world;
    }
    {
      absl::MutexLock lock(&mu_);
      snapshot_.step = step;
      // Owned shards are known once the assignment is in.
      if (step == 1) engine->FillSnapshot(rank, snapshot_);
    }
    if (reporter != nullptr && report) {
      v1::ReportProgressRequest request;
      request.set_job_id(directive_.job_id());
      request.set_epoch(directive_.epoch());
      request.set_rank(rank);
      request.set_worker_id(options_.worker_id);
      v1::JobProgress* progress = request.mutable_progress();
      progress->set_step(step);
      progress->set_total_steps(steps);
      progress->set_loss(loss);
      *progress->mutable_step_time() = ToProto(step_time);
      progress->set_bytes_sent(engine->comm().bytes_sent());
      const double seconds = absl::ToDoubleSeconds(step_time);
      progress->set_samples_per_second(
          seconds > 0 ? workload.samples_per_step() * world / seconds : 0);
      reporter->Post(std::move(request));
    }
  }
  if (reporter != nullptr) reporter->Flush(options_.rpc_timeout);
  RETURN_IF_ERROR(CheckAborted());
  // Nobody tears down the transport while a peer may still be receiving the
  // last broadcasts from it.
  RETURN_IF_ERROR(engine->comm().Barrier()->Wait(timeout));

  if (rank == 0 && !spec.output_dir().empty()) {
    std::vector<std::string> names;
    std::vector<std::vector<int64_t>> shapes;
    for (const ParameterInfo& p : workload.parameters()) {
      names.push_back(p.name);
      shapes.push_back(p.shape.empty() ? std::vector<int64_t>{p.numel} : p.shape);
    }
    std::string path;
    ASSIGN_OR_RETURN(std::vector<std::vector<float>> values,
                     engine->Parameters());
    RETURN_IF_ERROR(WriteOutput(values, shapes, names, &path));
    absl::MutexLock lock(&mu_);
    output_path_ = path;
  }
  return absl::OkStatus();
}

absl::Status JobRunner::WriteOutput(
    const std::vector<std::vector<float>>& params,
    const std::vector<std::vector<int64_t>>& shapes,
    const std::vector<std::string>& names, std::string* output_path) {
  const std::string& dir = directive_.spec().output_dir();
  // Create the directory (one level) if needed; an existing one is fine.
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("cannot create output directory ",
                                            dir, ": ", std::strerror(errno)));
  }
  std::vector<SafetensorsTensorView> views;
  for (size_t i = 0; i < params.size(); ++i) {
    int64_t numel = 1;
    for (int64_t d : shapes[i]) numel *= d;
    if (numel != static_cast<int64_t>(params[i].size())) {
      return absl::InternalError(absl::StrCat(
          "parameter ", names[i], " has ", params[i].size(),
          " values for its shape of ", numel));
    }
    views.push_back(SafetensorsTensorView{names[i], shapes[i], params[i]});
  }
  *output_path = dir + "/params.safetensors";
  return WriteSafetensorsAtomic(*output_path, views);
}

void JobRunner::ReportResult(const absl::Status& status,
                             const std::string& output) {
  v1::ReportResultRequest request;
  request.set_job_id(directive_.job_id());
  request.set_epoch(directive_.epoch());
  request.set_rank(directive_.rank());
  request.set_worker_id(options_.worker_id);
  request.set_ok(status.ok());
  if (!status.ok()) {
    request.set_error(absl::StrCat("rank ", directive_.rank(), " (worker ",
                                   options_.worker_id, "): ",
                                   status.ToString()));
  }
  request.set_final_step(Snapshot().step);
  request.set_output_path(output);
  // The result matters (the job's fate): retry transient failures a few
  // times, each bounded.
  for (int attempt = 0; attempt < 3; ++attempt) {
    absl::Status sent = control_->ReportResult(request, options_.rpc_timeout);
    if (sent.ok() || sent.code() != absl::StatusCode::kUnavailable) return;
    absl::SleepFor(absl::Milliseconds(200));
  }
}

}  // namespace pshard::worker
