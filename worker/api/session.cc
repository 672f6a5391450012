#include "worker/api/session.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/sha256.h"
#include "common/job_spec.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "worker/api/file_kv_store.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/gpu/gpu_shard_optimizer.h"
#include "worker/gpu/gpu_zero_hook.h"
#include "worker/gpu/nccl_communicator.h"
#include "worker/optim/shard_optimizer.h"
#include "worker/runtime/assignment_client.h"
#include "worker/runtime/checkpoint_saver.h"
#include "worker/runtime/control_plane.h"
#include "worker/runtime/coordinator_kv.h"
#include "worker/runtime/program_failure.h"
#include "worker/runtime/program_keys.h"
#include "worker/runtime/progress_reporter.h"
#include "worker/runtime/result_reporter.h"

namespace pshard::worker {

namespace {

constexpr int64_t kMaxParameterElements = int64_t{1} << 40;
constexpr double kMaxTimeoutSeconds = 86400;
// Deadline of each progress (and result) RPC.
constexpr absl::Duration kProgressRpcTimeout = absl::Seconds(5);
// How long to look, after the join has timed out, for a key that would have
// been published long before (a rank's join, its agent's worker id).
constexpr absl::Duration kAgentKeyTimeout = absl::Seconds(1);

// Reads `name` as an integer in [lo, hi].
absl::StatusOr<int64_t> IntVariable(
    const std::function<const char*(const char*)>& getenv, const char* name,
    int64_t lo, int64_t hi) {
  const char* value = getenv(name);
  if (value == nullptr || *value == '\0') {
    return absl::InvalidArgumentError(absl::StrCat(name, " is not set"));
  }
  int64_t n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < lo || n > hi) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": must be an integer in [", lo, ", ", hi, "], got \"", value,
        "\""));
  }
  return n;
}

absl::StatusOr<std::string> StringVariable(
    const std::function<const char*(const char*)>& getenv, const char* name) {
  const char* value = getenv(name);
  if (value == nullptr || *value == '\0') {
    return absl::InvalidArgumentError(absl::StrCat(name, " is not set"));
  }
  return std::string(value);
}

// "" when unset.
std::string OptionalVariable(
    const std::function<const char*(const char*)>& getenv, const char* name) {
  const char* value = getenv(name);
  return value == nullptr ? "" : value;
}

// Reads `name` as a PrecisionSpec.DType name; fp32 when unset.
absl::StatusOr<DataType> DTypeVariable(
    const std::function<const char*(const char*)>& getenv, const char* name) {
  const std::string value = OptionalVariable(getenv, name);
  if (value.empty()) return DataType::kFloat32;
  if (std::optional<DataType> dtype = ParsePrecisionDType(value)) return *dtype;
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": must be FP32 or BF16, got \"",
                   absl::CHexEscape(value.substr(0, 80)), "\""));
}

// Coordinator mode, before the communicator: announces that this rank's
// program opened its session and waits (up to env.timeout in all) for every
// other rank's, so that a rank whose program never calls pshard.init() is
// named, with its worker (its agent's key), instead of a bare rendezvous
// timeout.
absl::Status JoinProgramRanks(KvClient& kv, const SessionEnvironment& env,
                              absl::string_view scope) {
  const auto joined_key = [&](int r) {
    return absl::StrCat(kProgramJoinedKeyPrefix, scope, r);
  };
  RETURN_IF_ERROR(kv.Put(joined_key(env.rank), env.worker_id));
  absl::Status joined =
      GetFromEveryPeer(kv, env.world_size, env.rank, joined_key, env.timeout)
          .status();
  if (joined.code() != absl::StatusCode::kDeadlineExceeded) return joined;
  // Which rank is missing: the first whose key is still absent (the failure
  // path only; a key present answers at once).
  for (int r = 0; r < env.world_size; ++r) {
    if (r == env.rank) continue;
    absl::StatusOr<std::string> here = kv.Get(joined_key(r), kAgentKeyTimeout);
    if (here.ok()) continue;
    if (here.status().code() != absl::StatusCode::kDeadlineExceeded) {
      return here.status();
    }
    // The agent published its worker id before starting the program.
    absl::StatusOr<std::string> worker =
        kv.Get(absl::StrCat(kProgramAgentKeyPrefix, r), kAgentKeyTimeout);
    return absl::DeadlineExceededError(absl::StrCat(
        "rank ", r, " (worker ", worker.ok() ? *worker : "unknown",
        ") did not join the job's communicator within ",
        absl::FormatDuration(env.timeout),
        ": did its program call pshard.init()?"));
  }
  return absl::OkStatus();
}

// Coordinator-mode sessions this process has opened: the n-th one's
// rendezvous keys are scoped by n, so that a program that closes its
// session and opens another (on every rank, as torch.distributed programs
// re-create process groups) does not meet the first one's stale keys in
// the job attempt's store.
std::atomic<int> coordinator_sessions_opened{0};

// Collective failures end the session; argument and order errors do not.
bool IsSticky(const absl::Status& status) {
  return !status.ok() &&
         status.code() != absl::StatusCode::kInvalidArgument &&
         status.code() != absl::StatusCode::kFailedPrecondition;
}

}  // namespace

absl::StatusOr<SessionEnvironment> ParseSessionEnvironment(
    const std::function<const char*(const char*)>& getenv) {
  SessionEnvironment env;
  const char* coordinator = getenv("PSHARD_COORDINATOR");
  const char* local = getenv("PSHARD_LOCAL_STORE");
  if (coordinator != nullptr && *coordinator != '\0') {
    env.coordinator = coordinator;
    env.coordinator_security = security::ClientSecurityFromEnvironment(getenv);
    ASSIGN_OR_RETURN(env.job_id, StringVariable(getenv, "PSHARD_JOB_ID"));
    ASSIGN_OR_RETURN(env.epoch,
                     IntVariable(getenv, "PSHARD_EPOCH", 1, INT64_MAX));
    ASSIGN_OR_RETURN(env.worker_id,
                     StringVariable(getenv, "PSHARD_WORKER_ID"));
    ASSIGN_OR_RETURN(env.world_size, IntVariable(getenv, "PSHARD_WORLD_SIZE",
                                                 1, kMaxWorldSize));
    ASSIGN_OR_RETURN(env.rank, IntVariable(getenv, "PSHARD_RANK", 0,
                                           env.world_size - 1));
    ASSIGN_OR_RETURN(env.hostname, StringVariable(getenv, "PSHARD_HOSTNAME"));
    env.checkpoint_dir = OptionalVariable(getenv, "PSHARD_CHECKPOINT_DIR");
    env.checkpoint_fingerprint =
        OptionalVariable(getenv, "PSHARD_CHECKPOINT_FINGERPRINT");
    if (!env.checkpoint_fingerprint.empty() &&
        !checkpoint::IsSha256Hex(env.checkpoint_fingerprint)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "PSHARD_CHECKPOINT_FINGERPRINT: must be 64 lowercase hex digits, "
          "got \"", absl::CHexEscape(env.checkpoint_fingerprint.substr(0, 80)),
          "\""));
    }
    env.resume_from = OptionalVariable(getenv, "PSHARD_RESUME_FROM");
    env.error_file = OptionalVariable(getenv, "PSHARD_ERROR_FILE");
  } else if (local != nullptr && *local != '\0') {
    env.local_store = local;
    ASSIGN_OR_RETURN(env.world_size,
                     IntVariable(getenv, "WORLD_SIZE", 1, kMaxWorldSize));
    ASSIGN_OR_RETURN(env.rank,
                     IntVariable(getenv, "RANK", 0, env.world_size - 1));
    const std::string policy =
        OptionalVariable(getenv, "PSHARD_LOCAL_ASSIGNMENT_POLICY");
    if (policy == "SHARDED") {
      env.local_assignment_policy = v1::JobSpec::SHARDED;
    } else if (!policy.empty() && policy != "BALANCED") {
      return absl::InvalidArgumentError(absl::StrCat(
          "PSHARD_LOCAL_ASSIGNMENT_POLICY: must be BALANCED or SHARDED, got "
          "\"", absl::CHexEscape(policy.substr(0, 80)), "\""));
    }
  } else {
    return absl::InvalidArgumentError(
        "PSHARD_COORDINATOR is not set: the program was not started by a "
        "pshard agent (and PSHARD_LOCAL_STORE, the local test mode, is not "
        "set either)");
  }
  if (const char* t = getenv("PSHARD_COLLECTIVE_TIMEOUT_SECONDS");
      t != nullptr && *t != '\0') {
    double seconds = 0;
    if (!absl::SimpleAtod(t, &seconds) || !(seconds > 0) ||
        seconds > kMaxTimeoutSeconds) {
      return absl::InvalidArgumentError(absl::StrCat(
          "PSHARD_COLLECTIVE_TIMEOUT_SECONDS: must be a number of seconds in "
          "(0, ", kMaxTimeoutSeconds, "], got \"", t, "\""));
    }
    env.timeout = absl::Seconds(seconds);
  }
  const std::string overlap =
      OptionalVariable(getenv, "PSHARD_OVERLAP_PARAM_BROADCAST");
  if (!overlap.empty() && overlap != "0" && overlap != "1") {
    return absl::InvalidArgumentError(absl::StrCat(
        "PSHARD_OVERLAP_PARAM_BROADCAST: must be 0 or 1, got \"",
        absl::CHexEscape(overlap.substr(0, 80)), "\""));
  }
  env.overlap_param_broadcast = overlap == "1";
  ASSIGN_OR_RETURN(env.precision.param_dtype,
                   DTypeVariable(getenv, "PSHARD_PARAM_DTYPE"));
  ASSIGN_OR_RETURN(env.precision.reduce_dtype,
                   DTypeVariable(getenv, "PSHARD_REDUCE_DTYPE"));
  return env;
}

Session::Session(SessionEnvironment env, const Clock& clock)
    : env_(std::move(env)),
      clock_(clock),
      assignment_policy_(env_.local_assignment_policy),
      overlap_param_broadcast_(env_.overlap_param_broadcast),
      precision_(env_.precision) {}

Session::~Session() = default;  // a shard write in flight finishes, unreported

absl::StatusOr<std::unique_ptr<Session>> Session::Open(
    const SessionEnvironment& env, const Clock& clock) {
  if (env.world_size < 1 || env.rank < 0 || env.rank >= env.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", env.rank, " is not a rank of a world of ", env.world_size));
  }
  std::unique_ptr<Session> session(new Session(env, clock));
  if (session->local()) {
    session->kv_ = std::make_unique<FileKvStore>(env.local_store, clock);
  } else {
    absl::StatusOr<std::unique_ptr<ControlPlane>> control =
        NewGrpcControlPlane(env.coordinator, env.coordinator_security);
    if (!control.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("PSHARD_TLS_* / PSHARD_INSECURE: ",
                       control.status().message()));
    }
    session->control_ = *std::move(control);
    session->kv_ = std::make_unique<CoordinatorKvClient>(
        session->control_.get(), env.job_id, env.epoch, clock);
    AssignmentClientOptions options;
    options.job_id = env.job_id;
    options.epoch = env.epoch;
    options.rank = env.rank;
    options.world_size = env.world_size;
    options.worker_id = env.worker_id;
    options.clock = &clock;
    session->owned_assignment_ = std::make_unique<AssignmentClient>(
        session->control_.get(), std::move(options));
    session->assignment_ = session->owned_assignment_.get();
  }
  absl::Status joined = session->Join();
  if (!joined.ok()) {
    if (!session->local()) {
      // The job fails with this reason, not with the program's exit status
      // that follows it (the first failure reported is the job's).
      (void)ReportRankResult(
          *session->control_,
          ResultSource{env.job_id, env.epoch, env.rank, env.worker_id},
          /*ok=*/false, joined.message(), FailureCauseOf(joined),
          /*final_step=*/0,
          /*output_path=*/"", kProgressRpcTimeout, clock);
    }
    return joined;
  }
  if (!session->local() && env.rank == 0) {
    Session* const self = session.get();
    session->reporter_ = std::make_unique<ProgressReporter>(
        session->control_.get(),
        ProgressSource{env.job_id, env.epoch, env.rank, env.worker_id},
        kProgressRpcTimeout,
        [self] {
          self->stopped_ = true;
          const absl::Status stopped = absl::AbortedError(absl::StrCat(
              "job ", self->env_.job_id, " was stopped by the coordinator"));
          self->comm_->Abort(stopped);
          if (Communicator* device = self->device_comm_for_abort_.load()) {
            device->Abort(stopped);
          }
        },
        clock);
  }
  session->last_report_time_ = clock.Now();
  return session;
}

absl::Status Session::Join() {
  if (!local()) {
    key_scope_ = absl::StrCat("s", coordinator_sessions_opened.fetch_add(1), "/");
    RETURN_IF_ERROR(JoinProgramRanks(*kv_, env_, key_scope_));
  }
  GlooOptions gloo;
  gloo.rank = env_.rank;
  gloo.world_size = env_.world_size;
  gloo.hostname = env_.hostname;
  gloo.timeout = env_.timeout;
  gloo.key_prefix = absl::StrCat(kProgramCommKeyPrefix, key_scope_);
  ASSIGN_OR_RETURN(owned_comm_, CreateGlooCommunicator(gloo, *kv_));
  comm_ = owned_comm_.get();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Session>> Session::Attach(
    Communicator* comm, const AttachOptions& options, const Clock& clock) {
  if (comm == nullptr) {
    return absl::InvalidArgumentError("Attach needs a communicator");
  }
  if (!(options.timeout > absl::ZeroDuration())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "timeout: must be > 0, got ", absl::FormatDuration(options.timeout)));
  }
  if (AssignmentClient* client = options.assignment_client;
      client != nullptr && (client->options().rank != comm->rank() ||
                            client->options().world_size != comm->world_size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the assignment client is rank ", client->options().rank, " of ",
        client->options().world_size, ", the communicator rank ",
        comm->rank(), " of ", comm->world_size()));
  }
  SessionEnvironment env;
  env.rank = comm->rank();
  env.world_size = comm->world_size();
  env.timeout = options.timeout;
  std::unique_ptr<Session> session(new Session(std::move(env), clock));
  session->comm_ = comm;
  session->assignment_ = options.assignment_client;
  session->assignment_policy_ = options.assignment_policy;
  session->last_report_time_ = clock.Now();
  return session;
}

absl::Status Session::CheckHealthy() const {
  if (closed_) return absl::FailedPreconditionError("the session is closed");
  if (stopped_) {
    return absl::AbortedError(
        absl::StrCat("job ", env_.job_id, " was stopped by the coordinator"));
  }
  if (!failure_.ok()) {
    return absl::AbortedError(
        absl::StrCat("the session failed earlier: ", failure_.ToString()));
  }
  return absl::OkStatus();
}

absl::Status Session::CheckConfiguring() const {
  RETURN_IF_ERROR(CheckHealthy());
  if (hook_ != nullptr) {
    return absl::FailedPreconditionError(
        "the session is already prepared: configure and register parameters "
        "before pshardPrepare");
  }
  return absl::OkStatus();
}

absl::Status Session::Record(absl::Status status) {
  if (IsSticky(status) && failure_.ok()) {
    failure_ = status;
    // For the agent: a program that exits after this failure failed because
    // of it (a lost peer is then the lost worker's fault, not the job's).
    if (!env_.error_file.empty()) {
      (void)WriteProgramFailure(env_.error_file, status);
    }
  }
  return status;
}

absl::Status Session::SetCudaPlacement(const CudaPlacement& placement) {
  RETURN_IF_ERROR(CheckConfiguring());
  if (placement.device < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA device: must be >= 0, got ", placement.device));
  }
  placement_ = placement;
  return absl::OkStatus();
}

absl::Status Session::SetOptimizerJson(absl::string_view json) {
  RETURN_IF_ERROR(CheckConfiguring());
  ASSIGN_OR_RETURN(v1::OptimizerSpec optimizer, ParseOptimizerSpecJson(json));
  optimizer_ = std::move(optimizer);
  return absl::OkStatus();
}

absl::Status Session::SetOptimizer(const v1::OptimizerSpec& spec) {
  // Through JSON, so that both setters check the same rules.
  std::string json;
  const auto printed = google::protobuf::util::MessageToJsonString(spec, &json);
  if (!printed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer: cannot print as JSON: ", std::string(printed.message())));
  }
  return SetOptimizerJson(json);
}

absl::Status Session::SetBucketCapMb(double mb) {
  RETURN_IF_ERROR(CheckConfiguring());
  if (!(mb > 0) || mb > kMaxBucketCapMb) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bucket_cap_mb: must be in (0, ", kMaxBucketCapMb, "], got ", mb));
  }
  bucket_cap_mb_ = mb;
  return absl::OkStatus();
}

absl::Status Session::SetCommMode(v1::JobSpec::CommMode mode) {
  RETURN_IF_ERROR(CheckConfiguring());
  if (mode != v1::JobSpec::REDUCE_BROADCAST &&
      mode != v1::JobSpec::ALLREDUCE_BROADCAST) {
    return absl::InvalidArgumentError(absl::StrCat(
        "comm_mode: must be REDUCE_BROADCAST or ALLREDUCE_BROADCAST, got ",
        static_cast<int>(mode)));
  }
  comm_mode_ = mode;
  return absl::OkStatus();
}

absl::Status Session::SetOverlapParamBroadcast(bool enable) {
  RETURN_IF_ERROR(CheckConfiguring());
  overlap_param_broadcast_ = enable;
  return absl::OkStatus();
}

absl::Status Session::SetPrecision(const MixedPrecision& precision) {
  RETURN_IF_ERROR(CheckConfiguring());
  if (!params_.empty()) {
    return absl::FailedPreconditionError(
        "precision: set it before registering parameters (their dtype is "
        "its param_dtype)");
  }
  precision_ = precision;
  return absl::OkStatus();
}

absl::StatusOr<int> Session::RegisterParameter(absl::string_view name,
                                               std::vector<int64_t> shape,
                                               DataType dtype,
                                               ParameterMemory memory) {
  RETURN_IF_ERROR(CheckConfiguring());
  if (memory != ParameterMemory::kHost && memory != ParameterMemory::kCuda) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter \"", name, "\": memory ", static_cast<int>(memory),
        " is neither host nor CUDA"));
  }
  if (name.empty() || name.size() > kMaxParameterNameLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter name: must be 1..", kMaxParameterNameLength,
                     " bytes, got ", name.size()));
  }
  for (const ParameterInfo& p : params_) {
    if (p.name == name) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter name \"", name, "\" is registered twice"));
    }
  }
  if (shape.size() > static_cast<size_t>(kMaxParameterDims)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter \"", name, "\": at most ", kMaxParameterDims,
        " dimensions, got ", shape.size()));
  }
  int64_t numel = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 1 || shape[d] > kMaxParameterElements ||
        numel > kMaxParameterElements / shape[d]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter \"", name, "\": shape[", d, "] is ", shape[d],
          "; every dimension must be >= 1 and the parameter at most 2^40 "
          "elements"));
    }
    numel *= shape[d];
  }
  if (!params_.empty() && memory != memory_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter \"", name, "\": in ",
        memory == ParameterMemory::kCuda ? "CUDA device" : "host",
        " memory, but the parameters before it are not: every parameter of "
        "a session lives in the same memory"));
  }
  if (dtype != precision_.param_dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter \"", name, "\": dtype ", PrecisionDTypeName(dtype),
        ", but the session's param_dtype is ",
        PrecisionDTypeName(precision_.param_dtype),
        " (the job spec's precision.param_dtype unless the program sets its "
        "own precision first): every parameter has the param_dtype"));
  }
  if (shape.empty()) shape = {1};  // a scalar
  memory_ = memory;
  params_.push_back({std::string(name), std::move(shape), numel});
  return static_cast<int>(params_.size()) - 1;
}

absl::Status Session::Prepare() {
  RETURN_IF_ERROR(CheckConfiguring());
  if (!optimizer_.has_value()) {
    return absl::InvalidArgumentError(
        "optimizer: not set (pshardSetOptimizer before pshardPrepare)");
  }
  if (params_.empty()) {
    return absl::InvalidArgumentError(
        "no parameters registered (pshardRegisterParameter before "
        "pshardPrepare)");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ShardOptimizer> optimizer,
                   ShardOptimizer::Create(*optimizer_));
  // The coordinator's owners through the client, or owners computed here.
  AssignmentProvider provider =
      assignment_ != nullptr
          ? assignment_->Provider(env_.timeout, [] { return absl::OkStatus(); })
          : LocalAssignmentProvider(assignment_policy_, env_.world_size);
  ZeroHookOptions hook_options;
  hook_options.comm_mode = comm_mode_;
  hook_options.bucket_cap_mb = bucket_cap_mb_;
  hook_options.timeout = env_.timeout;
  hook_options.clipping = GradClipping::FromSpec(*optimizer_);
  hook_options.overlap_param_broadcast = overlap_param_broadcast_;
  hook_options.precision = precision_;
  if (memory_ == ParameterMemory::kCuda) {
    return PrepareOnDevice(hook_options, std::move(provider));
  }
  ASSIGN_OR_RETURN(hook_, ZeroHook::Create(params_, comm_, std::move(optimizer),
                                           std::move(provider), hook_options));
  return absl::OkStatus();
}

absl::Status Session::PrepareOnDevice(const ZeroHookOptions& options,
                                      AssignmentProvider provider) {
  if (kv_ == nullptr) {
    return absl::FailedPreconditionError(
        "parameters in CUDA device memory need a session opened from the "
        "environment (its NCCL communicator meets its peers through the "
        "job's rendezvous), not an attached one");
  }
  NcclOptions nccl;
  nccl.job_id = local() ? "local" : env_.job_id;
  nccl.epoch = env_.epoch;
  nccl.rank = env_.rank;
  nccl.world_size = env_.world_size;
  nccl.device = placement_.device;
  nccl.timeout = env_.timeout;
  nccl.key_prefix = absl::StrCat(kProgramNcclKeyPrefix, key_scope_);
  nccl.clock = &clock_;
  // Published (to the session and the reporter's thread) only with the
  // hook, so that a failed Prepare leaves nothing half made behind.
  ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> comm,
                   CreateNcclCommunicator(nccl, *kv_));
  ASSIGN_OR_RETURN(std::unique_ptr<GpuShardOptimizer> optimizer,
                   GpuShardOptimizer::Create(*optimizer_, placement_.device));
  GpuZeroHookOptions device_options;
  device_options.comm_mode = options.comm_mode;
  device_options.bucket_cap_mb = options.bucket_cap_mb;
  device_options.timeout = options.timeout;
  device_options.compute_stream = placement_.stream;
  device_options.clock = &clock_;
  device_options.clipping = options.clipping;
  device_options.precision = options.precision;
  device_options.overlap_param_broadcast = options.overlap_param_broadcast;
  ASSIGN_OR_RETURN(std::unique_ptr<GpuZeroHook> hook,
                   GpuZeroHook::Create(params_, comm.get(),
                                       std::move(optimizer),
                                       std::move(provider), device_options));
  device_comm_ = std::move(comm);
  device_comm_for_abort_ = device_comm_.get();
  hook_ = std::move(hook);
  return absl::OkStatus();
}

absl::Status Session::CheckPrepared() const {
  RETURN_IF_ERROR(CheckHealthy());
  if (hook_ == nullptr) {
    return absl::FailedPreconditionError(
        "the session is not prepared yet (pshardPrepare first)");
  }
  return absl::OkStatus();
}

absl::Status Session::CheckHasBuffers() const {
  if (closed_) return absl::FailedPreconditionError("the session is closed");
  if (hook_ == nullptr) {
    return absl::FailedPreconditionError(
        "the session is not prepared yet (pshardPrepare first)");
  }
  return absl::OkStatus();
}

absl::Span<float> Session::parameter(int i) {
  if (hook_ == nullptr || i < 0 || i >= num_parameters() ||
      hook_->params().empty()) {
    return {};
  }
  return absl::Span<float>(hook_->params()[i], params_[i].numel);
}

absl::Span<float> Session::gradient(int i) {
  if (hook_ == nullptr || i < 0 || i >= num_parameters() ||
      hook_->grads().empty()) {
    return {};
  }
  return absl::Span<float>(hook_->grads()[i], params_[i].numel);
}

void* Session::parameter_data(int i) {
  if (hook_ == nullptr || i < 0 || i >= num_parameters()) return nullptr;
  return hook_->param_data()[i];
}

void* Session::gradient_data(int i) {
  if (hook_ == nullptr || i < 0 || i >= num_parameters()) return nullptr;
  return hook_->grad_data()[i];
}

absl::Status Session::SetParameterValues(int index,
                                         absl::Span<const float> values) {
  RETURN_IF_ERROR(CheckPrepared());
  return hook_->SetParameter(index, values);
}

int64_t Session::steps_finished() const {
  return hook_ == nullptr ? 0 : hook_->steps_finished();
}

std::optional<double> Session::last_grad_norm() const {
  return hook_ == nullptr ? std::nullopt : hook_->last_grad_norm();
}

int Session::num_buckets() const {
  return hook_ == nullptr ? 0 : hook_->layout().num_buckets();
}

std::vector<int> Session::owned_buckets() const {
  std::vector<int> owned;
  if (hook_ == nullptr) return owned;
  for (int b = 0; b < hook_->layout().num_buckets(); ++b) {
    if (hook_->owned_elements(b) > 0) owned.push_back(b);
  }
  return owned;
}

int64_t Session::optimizer_state_bytes() const {
  return hook_ == nullptr ? 0 : hook_->optimizer().total_state_bytes();
}

absl::Status Session::GradientReady(int index) {
  RETURN_IF_ERROR(CheckPrepared());
  return Record(hook_->MarkGradientReady(index));
}

absl::Status Session::FinishStep() {
  RETURN_IF_ERROR(CheckPrepared());
  RETURN_IF_ERROR(Record(hook_->FinishStep()));
  if (saver_ != nullptr) saver_->Poll();  // a finished shard write reported
  return absl::OkStatus();
}

absl::Status Session::CheckParameterIndex(int index) const {
  if (index < 0 || index >= num_parameters()) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter index ", index, " is outside [0, ",
                     num_parameters(), ")"));
  }
  return absl::OkStatus();
}

absl::Status Session::CheckParamGroup(int group) const {
  RETURN_IF_ERROR(CheckPrepared());
  // Prepare required an optimizer.
  return CheckParamGroupIndex(*optimizer_, group);
}

absl::Status Session::SetHyperParameters(
    int group, const v1::OptimizerHyperParameters& changes) {
  RETURN_IF_ERROR(CheckParamGroup(group));
  HyperParameterOverrides next = hook_->hyper_parameters();
  // Not Record()ed: a refused change leaves the session usable.
  RETURN_IF_ERROR(next.Set(*optimizer_, group, changes));
  return hook_->SetHyperParameters(std::move(next));
}

absl::StatusOr<v1::OptimizerHyperParameters> Session::GroupHyperParameters(
    int group) const {
  RETURN_IF_ERROR(CheckParamGroup(group));
  return SettableHyperParameters(*optimizer_, group, hook_->hyper_parameters());
}

absl::StatusOr<int> Session::ParameterGroup(int index) const {
  RETURN_IF_ERROR(CheckPrepared());
  RETURN_IF_ERROR(CheckParameterIndex(index));
  return ParamGroupIndex(*optimizer_, params_[index].name);
}

absl::Status Session::WaitForParameter(int index) {
  RETURN_IF_ERROR(CheckPrepared());
  RETURN_IF_ERROR(CheckParameterIndex(index));
  return Record(hook_->WaitForParameter(index));
}

absl::Status Session::WaitForAllParameters() {
  RETURN_IF_ERROR(CheckPrepared());
  return Record(hook_->WaitForAllParameters());
}

absl::StatusOr<Session::OptimizerStateShard> Session::ExportOptimizerState() {
  RETURN_IF_ERROR(CheckPrepared());
  OptimizerStateShard shard;
  ASSIGN_OR_RETURN(shard.params, hook_->ExportOptimizerState());
  for (const ParameterOptimizerState& param : shard.params) {
    int64_t numel = 0;
    for (const ParameterInfo& info : params_) {
      if (info.name == param.name) numel = info.numel;
    }
    shard.parameter_numels.push_back(numel);
  }
  const auto printed =
      google::protobuf::util::MessageToJsonString(*optimizer_, &shard.optimizer_json);
  if (!printed.ok()) {
    return absl::InternalError(absl::StrCat("printing the optimizer spec: ",
                                            std::string(printed.message())));
  }
  return shard;
}

absl::Status Session::ImportOptimizerState(
    absl::string_view optimizer_json,
    std::vector<ParameterOptimizerState> params, bool slices) {
  RETURN_IF_ERROR(CheckPrepared());
  for (const ParameterOptimizerState& param : params) {
    if (slices) break;
    for (const ParameterInfo& info : params_) {
      if (info.name != param.name) continue;
      for (const auto& [key, values] : param.tensors) {
        if (param.offset != 0 ||
            static_cast<int64_t>(values.size()) != info.numel) {
          return absl::InvalidArgumentError(absl::StrCat(
              "parameter '", param.name, "': state '", key, "' has ",
              values.size(), " elements, the parameter ", info.numel,
              " (a slice needs its offset: pshardImportOptimizerStateSlices)"));
        }
      }
    }
  }
  absl::StatusOr<v1::OptimizerSpec> saved = ParseOptimizerSpecJson(optimizer_json);
  if (!saved.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the optimizer spec of the state to load: ", saved.status().message()));
  }
  if (!google::protobuf::util::MessageDifferencer::Equals(*saved,
                                                          *optimizer_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the state to load was saved with another optimizer (",
        saved->ShortDebugString(), ") than this session's (",
        optimizer_->ShortDebugString(), ")"));
  }
  return LoadOptimizerState(std::move(params));
}

absl::Status Session::LoadOptimizerState(
    std::vector<ParameterOptimizerState> params) {
  RETURN_IF_ERROR(CheckPrepared());
  return hook_->SetInitialOptimizerState(std::move(params));
}

absl::StatusOr<double> Session::AverageLoss(double loss) {
  RETURN_IF_ERROR(CheckHealthy());
  if (env_.world_size == 1) return loss;
  // fp32 as the job runner's average: a loss needs no more.
  float sum = static_cast<float>(loss);
  RETURN_IF_ERROR(Record(
      comm_->AllReduce(&sum, 1, DataType::kFloat32)->Wait(env_.timeout)));
  return static_cast<double>(sum) / env_.world_size;
}

absl::Status Session::Broadcast(int root, absl::Span<char> data) {
  RETURN_IF_ERROR(CheckHealthy());
  if (root < 0 || root >= env_.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "root: must be a rank in [0, ", env_.world_size, "), got ", root));
  }
  if (env_.world_size == 1) return absl::OkStatus();
  // The sizes first: a peer that gives another size would otherwise read
  // past its buffer or wait for bytes that never come. Every rank learns
  // whether any differs, so all refuse together. The communicator moves
  // 2-byte elements; a broadcast never looks at their values.
  int64_t root_size = static_cast<int64_t>(data.size());
  static_assert(sizeof(root_size) % 2 == 0);
  RETURN_IF_ERROR(Record(comm_->Broadcast(&root_size, sizeof(root_size) / 2,
                                          DataType::kBFloat16, root)
                             ->Wait(env_.timeout)));
  float differs = root_size == static_cast<int64_t>(data.size()) ? 0 : 1;
  RETURN_IF_ERROR(Record(
      comm_->AllReduce(&differs, 1, DataType::kFloat32)->Wait(env_.timeout)));
  if (differs != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "size: every rank broadcasts as many bytes as root ", root,
        " (this rank ", data.size(), ", root ", root_size, "; ",
        static_cast<int>(differs), " of ", env_.world_size,
        " ranks differ)"));
  }
  // An odd size goes through a copy one byte longer.
  std::vector<char> padded;
  char* bytes = data.data();
  if (data.size() % 2 != 0) {
    padded.assign(data.begin(), data.end());
    padded.push_back(0);
    bytes = padded.data();
  }
  const int64_t elements = static_cast<int64_t>(data.size() + 1) / 2;
  RETURN_IF_ERROR(Record(
      comm_->Broadcast(bytes, elements, DataType::kBFloat16, root)
          ->Wait(env_.timeout)));
  if (!padded.empty()) std::copy_n(padded.data(), data.size(), data.data());
  return absl::OkStatus();
}

absl::Status Session::Barrier() {
  RETURN_IF_ERROR(CheckHealthy());
  return Record(comm_->Barrier()->Wait(env_.timeout));
}

absl::Status Session::ReportProgress(int64_t step, double loss,
                                     int64_t samples) {
  RETURN_IF_ERROR(CheckHealthy());
  if (step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("step: must be >= 1, got ", step));
  }
  if (samples < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("samples: must be >= 0, got ", samples));
  }
  if (reporter_ == nullptr) return absl::OkStatus();
  const absl::Time now = clock_.Now();
  const int64_t steps = std::max<int64_t>(1, step - last_report_step_);
  const absl::Duration step_time = (now - last_report_time_) / steps;
  last_report_step_ = step;
  last_report_time_ = now;
  v1::JobProgress progress;
  progress.set_step(step);
  progress.set_loss(loss);
  // The default group's lr at optimizer step `step`: the program's, or
  // its schedule's.
  if (optimizer_.has_value()) {
    progress.set_lr(DefaultGroupLearningRate(*optimizer_, step,
                                             hook_ != nullptr
                                                 ? hook_->hyper_parameters()
                                                 : HyperParameterOverrides()));
  }
  if (hook_ != nullptr) SetGradNorm(hook_->last_grad_norm(), progress);
  *progress.mutable_step_time() = ToProto(step_time);
  progress.set_bytes_sent(comm_->bytes_sent() +
                          (device_comm_ != nullptr ? device_comm_->bytes_sent()
                                                   : 0));
  const double seconds = absl::ToDoubleSeconds(step_time);
  progress.set_samples_per_second(
      seconds > 0 ? static_cast<double>(samples) * env_.world_size / seconds
                  : 0);
  reporter_->Post(progress);
  return absl::OkStatus();
}

absl::Status Session::Close() {
  if (closed_) return absl::FailedPreconditionError("the session is closed");
  absl::Status status = absl::OkStatus();
  // The last shard write is reported before the final barrier, so that its
  // checkpoint can complete before the job ends.
  if (saver_ != nullptr && CheckHealthy().ok()) saver_->Finish(env_.timeout);
  // The last step's broadcasts nobody waited for (overlap_param_broadcast)
  // land before the caller reads the parameters one last time.
  if (hook_ != nullptr && CheckHealthy().ok()) status = WaitForAllParameters();
  if (hook_ != nullptr && status.ok() && CheckHealthy().ok()) {
    status = Barrier();
  }
  if (reporter_ != nullptr) {
    reporter_->Flush(kProgressRpcTimeout);
    reporter_.reset();
  }
  closed_ = true;
  return status;
}

}  // namespace pshard::worker
