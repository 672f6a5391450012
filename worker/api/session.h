// Session: one rank of a training loop of the user's own — the one
// implementation behind the C API (pshard.h, and the Python package over it)
// and the C++ Trainer (trainer.h, a thin layer over this class). It joins
// (or is handed) the rank's communicator, holds the configuration until the
// parameters are registered, and then drives the ZeRO hook
// (worker/hook/zero_hook.h): buckets, owners at the first step, steps.
//
//   Open(env) | Attach(comm) ──▶ configuring ──Prepare──▶ prepared ──Close
//                                              (hook: buckets; owners
//                                               settled at the 1st step)
//
// Where the communicator and the bucket owners come from:
//  - Open, coordinator mode (a `program` job's rank, started by its agent):
//    rendezvous through the coordinator's KV scoped by (job, epoch), the
//    owners through AssignmentClient (as the built-in job runner), rank 0's
//    progress through ProgressReporter;
//  - Open, local mode, for tests only: rendezvous through files in a
//    directory (FileKvStore), owners computed on every rank, no progress;
//  - Attach: the caller's communicator; owners from the caller's
//    AssignmentClient, or computed on every rank when there is none (a mode
//    for tests and the threads example, where no coordinator runs).
//
// Where the buckets live: host memory, reduced over the Gloo communicator
// above; or, when the parameters are registered in CUDA device memory, a
// GpuZeroHook (worker/gpu) on the device, over an NCCL communicator that
// Prepare opens through the same rendezvous store (Open's sessions only).
// The Gloo communicator stays for the host-side collectives (AverageLoss,
// Barrier, Close's final barrier).
//
// Thread-compatible; the C API serialises calls on one session.
#ifndef PSHARD_WORKER_API_SESSION_H_
#define PSHARD_WORKER_API_SESSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "absl/types/span.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/comm/communicator.h"
#include "worker/comm/kv_store.h"
#include "worker/hook/zero_hook.h"
#include "worker/runtime/rank_model.h"
#include "worker/workload/workload.h"
#include "security/transport.h"

// cudaStream_t is `CUstream_st*`; declared here so this header needs no CUDA.
struct CUstream_st;

namespace pshard::worker {

class AssignmentClient;
class NcclCommunicator;
class CheckpointSaver;
class ControlPlane;
class ProgressReporter;

// Prefix of the communicator's rendezvous keys (the program contract).
inline constexpr char kProgramCommKeyPrefix[] = "pshard/program/comm/";
// Prefix of the NCCL communicator's (device memory).
inline constexpr char kProgramNcclKeyPrefix[] = "pshard/program/nccl/";
// Limits of RegisterParameter.
inline constexpr int kMaxParameterNameLength = 256;
inline constexpr int kMaxParameterDims = 16;

// What a rank learns from its environment (the agent ↔ program contract).
struct SessionEnvironment {
  // Non-empty: coordinator mode, with job_id, epoch and worker_id.
  std::string coordinator;
  // How to reach it: PSHARD_TLS_* / PSHARD_INSECURE.
  security::TransportSecurity coordinator_security;
  std::string job_id;
  int64_t epoch = 0;
  std::string worker_id;
  // Local test mode: the rendezvous directory.
  std::string local_store;
  int rank = 0;
  int world_size = 1;
  // What this rank's communicator listens on and publishes.
  std::string hostname = "127.0.0.1";
  absl::Duration timeout = absl::Seconds(60);
  // Checkpoints (coordinator mode; empty when the job's spec has none):
  // JobSpec.checkpoint.dir, and the spec fingerprint that shards carry and
  // loads check (empty: not checked).
  std::string checkpoint_dir;
  std::string checkpoint_fingerprint;
  // The step directory a restarted epoch resumes from (empty: none).
  std::string resume_from;
  // PSHARD_OVERLAP_PARAM_BROADCAST=1: the job spec's overlap_param_broadcast
  // (the session's default; SetOverlapParamBroadcast overrides it).
  bool overlap_param_broadcast = false;
  // PSHARD_PARAM_DTYPE / PSHARD_REDUCE_DTYPE ("FP32" or "BF16"; fp32 when
  // unset): the job spec's precision (the session's default; SetPrecision
  // overrides it).
  MixedPrecision precision;
  // Local test mode only: PSHARD_LOCAL_ASSIGNMENT_POLICY (BALANCED or
  // SHARDED, default BALANCED), the policy of the owners every rank
  // computes (coordinator mode: the coordinator's, from the job spec).
  v1::JobSpec::AssignmentPolicy local_assignment_policy = v1::JobSpec::BALANCED;
  // Where the first collective failure is written for the agent
  // (PSHARD_ERROR_FILE, program_failure.h; empty: nowhere).
  std::string error_file;
};

// Reads the contract's variables through `getenv` (returns nullptr for an
// unset name; ::getenv in the C API). InvalidArgument names the variable:
// neither PSHARD_COORDINATOR nor PSHARD_LOCAL_STORE set, a required one
// missing, a number that does not parse or is out of range (rank outside
// [0, world), world outside [1, 4096], timeout not in (0, 86400] seconds),
// a PSHARD_CHECKPOINT_FINGERPRINT that is not 64 hex digits,
// PSHARD_OVERLAP_PARAM_BROADCAST not "0" or "1", a PSHARD_PARAM_DTYPE or
// PSHARD_REDUCE_DTYPE not FP32 or BF16, a PSHARD_LOCAL_ASSIGNMENT_POLICY not
// BALANCED or SHARDED.
absl::StatusOr<SessionEnvironment> ParseSessionEnvironment(
    const std::function<const char*(const char*)>& getenv);

// Attach's options.
struct AttachOptions {
  // The coordinator's layout/assignment protocol for this rank of a job
  // attempt (its rank and world size must be the communicator's; it must
  // outlive the session). nullptr: owners computed on every rank with
  // assignment_policy (tests and the threads example only).
  AssignmentClient* assignment_client = nullptr;
  v1::JobSpec::AssignmentPolicy assignment_policy = v1::JobSpec::BALANCED;
  // Deadline of every wait inside a step.
  absl::Duration timeout = absl::Seconds(60);
};

// Where a session's parameters live (RegisterParameter; one kind for all).
enum class ParameterMemory { kHost, kCuda };

// Where a device-memory session computes: the CUDA device of its
// parameters, and the stream the program computes on (its gradients are
// final on it when it calls GradientReady; FinishStep orders it after the
// step's broadcasts). nullptr: the legacy default stream.
struct CudaPlacement {
  int device = 0;
  CUstream_st* stream = nullptr;
};

// A RankModel (privately) so that it writes and resumes checkpoints through
// worker/runtime's CheckpointSaver and ResumeFromCheckpoint, as built-in
// jobs do.
class Session : private RankModel {
 public:
  // Joins the communicator (Gloo, host memory) of `env`'s job. Errors:
  // InvalidArgument for a bad environment; the rendezvous's
  // (DeadlineExceeded when the other ranks do not show up within
  // env.timeout — in coordinator mode "rank R (worker W) did not join the
  // job's communicator within T: did its program call pshard.init()?" —,
  // Unavailable when the coordinator is unreachable). In coordinator mode
  // a failure to join is also reported to the coordinator as this rank's
  // result (ReportResult), so that it is the job's reason and the other
  // ranks' programs are stopped.
  static absl::StatusOr<std::unique_ptr<Session>> Open(
      const SessionEnvironment& env, const Clock& clock = Clock::Real());

  // A session over `comm` (joined with every other rank; it must outlive
  // the session). InvalidArgument: comm null, an assignment client of
  // another rank or world size, a timeout <= 0.
  static absl::StatusOr<std::unique_ptr<Session>> Attach(
      Communicator* comm, const AttachOptions& options,
      const Clock& clock = Clock::Real());

  ~Session() override;

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  bool local() const { return env_.coordinator.empty(); }

  // Configuration; FailedPrecondition after Prepare.
  // InvalidArgument names the field (ParseOptimizerSpecJson's rules, for
  // both).
  absl::Status SetOptimizerJson(absl::string_view json);
  absl::Status SetOptimizer(const v1::OptimizerSpec& spec);
  // InvalidArgument unless in (0, kMaxBucketCapMb].
  absl::Status SetBucketCapMb(double mb);
  absl::Status SetCommMode(v1::JobSpec::CommMode mode);
  // ZeroHookOptions.overlap_param_broadcast: FinishStep returns without
  // waiting for the parameter broadcasts, and the caller calls
  // WaitForParameter(i) before it reads parameter i (the next forward, in
  // the order it reads them). Defaults to the environment's (the job
  // spec's overlap_param_broadcast).
  absl::Status SetOverlapParamBroadcast(bool enable);
  bool overlap_param_broadcast() const { return overlap_param_broadcast_; }
  // Mixed precision, with JobSpec.precision's semantics: every parameter is
  // registered in precision.param_dtype (its buffer holds that dtype on
  // every rank), gradient buffers hold precision.reduce_dtype (the dtype
  // they are reduced in), and an owner keeps fp32 master weights and fp32
  // optimizer state for its pieces. Defaults to the environment's (the job
  // spec's). FailedPrecondition once a parameter is registered.
  absl::Status SetPrecision(const MixedPrecision& precision);
  const MixedPrecision& precision() const { return precision_; }

  // Device memory's placement (CudaPlacement); before Prepare.
  // InvalidArgument: a negative device.
  absl::Status SetCudaPlacement(const CudaPlacement& placement);

  // The next parameter's index. InvalidArgument: a name empty, too long or
  // used before, too many dimensions, a dimension < 1, more than 2^40
  // elements, a dtype other than precision().param_dtype, a memory other
  // than the first parameter's. FailedPrecondition after Prepare.
  absl::StatusOr<int> RegisterParameter(
      absl::string_view name, std::vector<int64_t> shape,
      DataType dtype = DataType::kFloat32,
      ParameterMemory memory = ParameterMemory::kHost);
  // The parameters' memory (host until one is registered in device memory).
  ParameterMemory memory() const { return memory_; }

  // Allocates the bucket buffers (the hook). InvalidArgument: no optimizer
  // set, no parameters; FailedPrecondition if already prepared. In device
  // memory it also opens the NCCL communicator (a collective: every rank's
  // Prepare) and fails with FailedPrecondition for what the device path
  // does not do yet (an Attach session, overlap_param_broadcast) and with
  // Unavailable when pshard was built without CUDA or the device is not
  // there.
  absl::Status Prepare();
  // OK once prepared and healthy: FailedPrecondition before Prepare (or
  // after Close), Aborted after a failure.
  absl::Status CheckPrepared() const;
  // OK once prepared, a failed session too (its buffers stay until Close,
  // holding what the last step left in them): FailedPrecondition before
  // Prepare or after Close.
  absl::Status CheckHasBuffers() const;

  // Parameters registered so far.
  int num_parameters() const { return static_cast<int>(params_.size()); }
  // Parameter i's element count (0 for a bad index).
  int64_t parameter_numel(int i) const {
    return i < 0 || i >= num_parameters() ? 0 : params_[i].numel;
  }
  // After Prepare (empty or 0 before it; an empty span for a bad index).
  // parameter(i) and gradient(i) point into the bucket buffers (device
  // pointers in device memory): the first FinishStep may move them (it
  // re-packs in the order gradients became ready); they are stable from
  // then on.
  // As fp32 spans: empty unless their dtype (precision()) is fp32.
  absl::Span<float> parameter(int i);
  absl::Span<float> gradient(int i);
  // The same in any dtype: parameter_data(i) holds its numel elements of
  // precision().param_dtype, gradient_data(i) of precision().reduce_dtype.
  // nullptr before Prepare or for a bad index.
  void* parameter_data(int i);
  void* gradient_data(int i);
  // After Prepare, before the first step: parameter `index` takes `values`
  // (its numel floats), rounded to nearest even into a bf16 buffer; its
  // owner starts its fp32 master weights from `values` themselves, not from
  // the rounded copy (the masters of parameters never set this way start
  // from their buffers). InvalidArgument: a bad index or size;
  // FailedPrecondition before Prepare or after the first step.
  absl::Status SetParameterValues(int index, absl::Span<const float> values);
  int64_t steps_finished() const;
  // The last finished step's total gradient norm before clipping (the
  // optimizer's max_grad_norm/norm_type; as clip_grad_norm_ returns it);
  // nullopt without clipping or before the first step. The same on every
  // rank; NaN or infinite when a gradient was (the step went on).
  std::optional<double> last_grad_norm() const;
  // After the first step: buckets, the ones this rank owns (wholly or, under
  // SHARDED, its range of them), and the
  // optimizer state it holds in bytes (about 1/world of the total).
  int num_buckets() const;
  std::vector<int> owned_buckets() const;
  int64_t optimizer_state_bytes() const;

  // Step calls. InvalidArgument: an index out of range; FailedPrecondition:
  // a gradient marked twice, a step before every gradient was marked. A
  // failure in a collective is sticky: later calls fail with Aborted naming
  // it.
  absl::Status GradientReady(int index);
  absl::Status FinishStep();
  // Group `group` (-1: the default group, else an index into the
  // optimizer's param_groups) steps with `changes` from the next step on
  // (HyperParameterOverrides::Set, ZeroHook::SetHyperParameters): between
  // steps, after Prepare. InvalidArgument: no such group, a change
  // HyperParameterOverrides refuses (the session stays usable);
  // FailedPrecondition: mid-step, or not prepared.
  absl::Status SetHyperParameters(int group,
                                  const v1::OptimizerHyperParameters& changes);
  // Group `group`'s settable hyper-parameters with the changes set so far
  // (SettableHyperParameters; lr: the set one, else the spec's, the base
  // its lr_schedule scales). Errors as SetHyperParameters' for the group.
  absl::StatusOr<v1::OptimizerHyperParameters> GroupHyperParameters(
      int group) const;
  // The parameter group of parameter `index`: -1 (the default group) or
  // the index of the first of the optimizer's param_groups whose glob
  // matches its name. After Prepare; InvalidArgument for a bad index.
  absl::StatusOr<int> ParameterGroup(int index) const;
  // Returns once parameter `index` holds the last step's update: at once
  // without overlap_param_broadcast, before the first step or when it has
  // already arrived (ZeroHook::WaitForParameter). InvalidArgument: an index
  // out of range; FailedPrecondition before Prepare; a failed broadcast is
  // sticky (Aborted afterwards). WaitForAllParameters: every parameter, as
  // before reading them all outside a forward (SaveCheckpoint and Close do
  // it themselves).
  absl::Status WaitForParameter(int index);
  absl::Status WaitForAllParameters();
  absl::StatusOr<double> AverageLoss(double loss);
  absl::Status Barrier();
  // Copies root's `data` (host memory, any bytes) into every rank's `data`,
  // over the host communicator, as DDP broadcasts a model's buffers (batch
  // norm statistics) from rank 0. A collective: every rank calls it with
  // the same root and size. InvalidArgument: a root outside the world, or
  // a size that differs from root's (every rank says so; nothing is
  // copied). A failed transfer is sticky, as every collective's.
  absl::Status Broadcast(int root, absl::Span<char> data);

  // This rank's shard of the optimizer state, for a checkpoint (in device
  // memory: copied to the host; loaded state goes back at the first step).
  struct OptimizerStateShard {
    // The session's OptimizerSpec, as protobuf JSON.
    std::string optimizer_json;
    // Whole parameters, or under SHARDED slices (ParameterOptimizerState's
    // offset and its tensors' size).
    std::vector<ParameterOptimizerState> params;
    // The whole numel of params[i]'s parameter.
    std::vector<int64_t> parameter_numels;
  };
  // After the first step (FailedPrecondition before it).
  absl::StatusOr<OptimizerStateShard> ExportOptimizerState();
  // After Prepare and before the first step: the state FinishStep resumes
  // from (ZeroHook::SetInitialOptimizerState's checks: whole parameters or
  // slices, of any ranks together). InvalidArgument also when
  // `optimizer_json` is not this session's optimizer (compared as specs),
  // and, unless `slices`, an entry that is not a whole parameter (offset 0,
  // the parameter's numel).
  absl::Status ImportOptimizerState(absl::string_view optimizer_json,
                                    std::vector<ParameterOptimizerState> params,
                                    bool slices = false);
  // The same without the spec (the caller's own, as the C++ Trainer's).
  absl::Status LoadOptimizerState(std::vector<ParameterOptimizerState> params);

  // Checkpoints in the job's sharded format (docs/checkpoints.md).
  //
  // Starts saving this rank's shard of the checkpoint at `step` (the state
  // after `step` updates; every rank saves the same steps): the parameters
  // this rank owns and their optimizer state, keyed by name, copied now and
  // written on a background thread into JobSpec.checkpoint.dir/step-<N>/.
  // When the write ends it is reported to the coordinator (at a later step
  // or Close), which writes the manifest once every rank's shard is in; only
  // then is the checkpoint complete. FailedPrecondition: local mode (the
  // coordinator commits checkpoints), a job spec without checkpoint.dir,
  // before the first step; InvalidArgument: step < 1 or not after the last
  // saved one. A failed write is the checkpoint's, not the session's: it is
  // reported (the coordinator marks it FAILED) and training goes on.
  // `program_state`, when set, is stored in this rank's shard with it: the
  // program's own state (a scheduler's, a data loader's position, RNG
  // states), at most checkpoint::kMaxProgramStateBytes (InvalidArgument).
  absl::Status SaveCheckpoint(
      int64_t step, std::optional<std::string> program_state = std::nullopt);

  // After Prepare, before the first step: loads a checkpoint and returns its
  // step. `path` is a step directory, or a checkpoint root (its latest
  // complete checkpoint); empty: the one this epoch resumes from
  // (PSHARD_RESUME_FROM), and nothing (step 0) when there is none. Every
  // shard's size and SHA-256 are checked, the parameters are read by name
  // into the buffers, and the optimizer state of the parameters this rank
  // comes to own is read by name at the first step: any world size. Errors
  // name the checkpoint: NotFound (no checkpoint there, a parameter it
  // lacks), DataLoss (a corrupted shard), FailedPrecondition (another job's
  // model, optimizer or seed; a session already stepped).
  absl::StatusOr<int64_t> LoadCheckpoint(absl::string_view path);
  // The program state rank `rank` saved with the checkpoint LoadCheckpoint
  // loaded (valid until the next LoadCheckpoint); null when it saved none,
  // the checkpoint had no such rank, or none was loaded.
  const std::string* LoadedProgramState(int rank) const;

  // InvalidArgument: step < 1, samples < 0. Aborted once the coordinator
  // has told rank 0 that the job was stopped.
  absl::Status ReportProgress(int64_t step, double loss, int64_t samples);

  // A final barrier when prepared and healthy, the last progress sent; the
  // session is finished afterwards (every later call fails).
  absl::Status Close();

 private:
  Session(SessionEnvironment env, const Clock& clock);

  // Joins the communicator; in coordinator mode first waits for every
  // rank's program to open its session (DeadlineExceeded names a rank that
  // did not, and its worker).
  absl::Status Join();
  absl::Status CheckHealthy() const;
  absl::Status CheckConfiguring() const;
  // InvalidArgument naming `index` unless it is a registered parameter's.
  absl::Status CheckParameterIndex(int index) const;
  // CheckPrepared, and InvalidArgument naming `group` unless it is -1 or
  // an index into the optimizer's param_groups.
  absl::Status CheckParamGroup(int group) const;
  // Records `status` as the sticky failure when it came from a collective.
  absl::Status Record(absl::Status status);
  // Prepare's device half: the NCCL communicator and the GpuZeroHook.
  absl::Status PrepareOnDevice(const ZeroHookOptions& options,
                               AssignmentProvider provider);

  // RankModel, for the checkpoint saver and resume (session_checkpoint.cc).
  ZeroHook& hook() override { return *hook_; }
  const std::vector<ParameterInfo>& parameters() const override {
    return params_;
  }
  absl::Status UploadParameters(
      const std::vector<std::vector<float>>& values) override;

  const SessionEnvironment env_;
  const Clock& clock_;

  // Open's coordinator mode only.
  std::unique_ptr<ControlPlane> control_;
  std::unique_ptr<AssignmentClient> owned_assignment_;
  // owned_assignment_'s, Attach's, or nullptr: owners computed here.
  AssignmentClient* assignment_ = nullptr;
  v1::JobSpec::AssignmentPolicy assignment_policy_ = v1::JobSpec::BALANCED;

  std::unique_ptr<KvClient> kv_;
  // Coordinator mode: this process's session ordinal ("s<n>/"), inside the
  // rendezvous key prefixes; empty otherwise.
  std::string key_scope_;
  // Device memory: the hook's communicator. Declared before hook_, so that
  // the hook goes first (as GpuJob's: a hook destroyed mid-step aborts the
  // communicator and waits for its stream before its buffers go).
  // Published for the reporter's thread, which aborts it too.
  std::unique_ptr<NcclCommunicator> device_comm_;
  std::atomic<Communicator*> device_comm_for_abort_{nullptr};
  // Declared before owned_comm_ so that the communicator goes first (an
  // aborted transport may hold the hook's buffers until it is gone).
  std::unique_ptr<ZeroHook> hook_;
  std::unique_ptr<Communicator> owned_comm_;  // Open's
  Communicator* comm_ = nullptr;              // owned_comm_ or Attach's
  std::unique_ptr<ProgressReporter> reporter_;

  std::optional<v1::OptimizerSpec> optimizer_;
  double bucket_cap_mb_ = 25;
  v1::JobSpec::CommMode comm_mode_ = v1::JobSpec::REDUCE_BROADCAST;
  bool overlap_param_broadcast_ = false;  // env_'s until set
  MixedPrecision precision_;              // env_'s until set
  ParameterMemory memory_ = ParameterMemory::kHost;
  CudaPlacement placement_;
  std::vector<ParameterInfo> params_;

  // The first SaveCheckpoint's; the last step it saved.
  std::unique_ptr<CheckpointSaver> saver_;
  int64_t last_saved_step_ = 0;
  // The loaded checkpoint's program states, by rank.
  std::map<int, std::string> loaded_program_states_;

  absl::Status failure_;
  bool closed_ = false;
  // Set by the reporter's thread when the coordinator stops the job.
  std::atomic<bool> stopped_{false};
  // The previous report, for samples/s.
  int64_t last_report_step_ = 0;
  absl::Time last_report_time_;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_API_SESSION_H_
