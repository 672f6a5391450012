// ZeroHook: DDP's gradient-bucket communication overlapped with a ZeRO-style
// sharded optimizer step (the seed's hook_with_zero_step), for any
// Communicator and any memory the buckets live in.
//
// For every bucket that becomes ready during backward, with owner o:
//   1. reduce its gradient (REDUCE_BROADCAST: to o only, as the mean;
//      ALLREDUCE_BROADCAST: all-reduce, as the seed);
//   2. on o only, in the reduction's completion (Communicator::Enqueue):
//      divide by the world size (after an all-reduce) and run the optimizer
//      step on the bucket;
//   3. broadcast the bucket's parameters from o.
// Under the SHARDED policy a bucket has no single owner: rank r owns element
// range r of it (shard::ShardRanges), and steps 1-3 run per range, each
// with its own owner: a reduce-scatter and an all-gather, made of the same
// reductions and broadcasts, each round of them (range r's k-th piece for
// every r) issued as one Communicator::IssueGroup (on NCCL one launch).
// FinishStep() waits for every broadcast (with the deadline) and clears the
// per-iteration state (the seed's wait_for_broadcasts/clear_per_iter_info).
// Reductions are launched as soon as a bucket's last gradient is ready, so
// early buckets travel while backward computes later ones.
//
// State machine (the seed's _OverlapStatus), with the assignment's epoch:
//
//   kUninitialized ──first FinishStep: layout observed──▶ kLayoutReported
//        (gradients held)        (AssignmentProvider: report layout, get
//                                 the published assignment)
//   kLayoutReported ──assignment arrives──▶ kInitialized (epoch e)
//        then the held buckets run through steps 1-3: the first step
//        updates the parameters too, unlike the seed, which loses 2-3.
//
// Global gradient-norm clipping (options.clipping; clip_grad_norm_ of
// PyTorch 1.13 on the averaged gradients of every parameter) changes when an
// owner may step: it needs the norm of every rank's buckets. Reductions still
// launch as buckets become ready and overlap backward; in each reduction's
// completion the owner takes its piece's partial norm; the steps wait for
// FinishStep, which, once backward has handed over every gradient, issues on
// every rank: the rank's partial into its slot of a world_size vector, one
// all-reduce of that vector (every rank then holds every partial and
// combines them in rank order), the owner's clipped steps of its pieces,
// then every piece's broadcast in piece order (each waits only for its own
// piece's step, so a rank's later steps overlap the transfers of pieces
// already stepped and of other owners' pieces). Without clipping none of
// this is issued and the schedule above is unchanged.
//
//   backward ─ ready(b0) ─ ready(b1) ─ ... ─ FinishStep
//   comm:  reduce(b0) [norm b0] reduce(b1) [norm b1] ... gather ─ all-reduce
//          (world floats) ─ [clip+step owned b] ... ─ bcast(b0) bcast(b1) ...
//
// In the first step gradients are only held, because the layout is not final
// until the ready order has been observed: the buffers are laid out in
// reverse registration order up front (DDP's guess) and re-packed, values
// copied, if the observed order differs.
//
// One algorithm, two memories. This class owns everything that decides what
// happens and in which order: the state machine, held first-step gradients,
// the observed ready order and the re-pack, launch in bucket order, pieces
// and deferred broadcasts, per-piece step counts, and FinishStep's error
// handling (abort the communicator, sticky error). A HookMemory
// (hook_memory.h) supplies what differs between memories: the buffers, how
// the owner's step runs, and ordering with the training's compute. Create()
// below uses host memory; worker/gpu's GpuZeroHook is this class with device
// memory, so the CPU tests run every line of the algorithm the GPU path runs.
//
// Thread-compatible: GradientReady/FinishStep are called from one training
// thread; owner steps run where the communicator runs Enqueue'd functions.
#ifndef PSHARD_WORKER_HOOK_ZERO_HOOK_H_
#define PSHARD_WORKER_HOOK_ZERO_HOOK_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "absl/time/time.h"
#include "pshard/v1/job_spec.pb.h"
#include "worker/bucket/bucket_layout.h"
#include "worker/comm/communicator.h"
#include "worker/hook/hook_memory.h"
#include "worker/optim/shard_optimizer.h"
#include "worker/workload/workload.h"

namespace pshard::worker {

enum class HookState { kUninitialized, kLayoutReported, kInitialized };

// One parameter's optimizer state (a bucket's pieces joined), as a
// checkpoint of this rank's shard holds it: `step` is its bucket's step
// count, `tensors` PyTorch's names of its state (SpanState), each holding
// elements [offset, offset + its size) of the parameter: the whole
// parameter (offset 0, its numel floats), or under SHARDED the slice a rank
// owns (entries of one parameter are then keyed by name and offset).
struct ParameterOptimizerState {
  std::string name;
  int64_t step = 0;
  std::vector<std::pair<std::string, std::vector<float>>> tensors;
  int64_t offset = 0;
};

// The same, where it lives: the parts of the parameter in this rank's
// pieces, each a view into the optimizer's buffers at its element offset in
// the parameter (checkpoint snapshots copy from them once).
struct ParameterOptimizerStateView {
  struct Part {
    int64_t offset = 0;                      // elements into the parameter
    std::vector<absl::Span<const float>> tensors;  // by tensor_names
  };
  std::string name;
  int64_t step = 0;
  int64_t numel = 0;
  std::vector<std::string> tensor_names;
  std::vector<Part> parts;
};

// Bucket -> owner rank, published for one epoch. An owner of
// shard::kEveryRank (the SHARDED policy) splits the bucket by
// shard::ShardRanges: rank r owns, steps and broadcasts range r.
struct BucketAssignment {
  int64_t epoch = 0;
  std::vector<int> owners;  // indexed by bucket
};

// Called once, in the first FinishStep, with the observed layout; returns the
// assignment (the job runner reports the layout to the coordinator and waits
// for the published assignment; the C++ API computes it locally).
using AssignmentProvider =
    std::function<absl::StatusOr<BucketAssignment>(const BucketLayout&)>;

// Global gradient-norm clipping: torch.nn.utils.clip_grad_norm_(params,
// max_norm, norm_type) between backward and the step.
struct GradClipping {
  // 0: no clipping; otherwise finite and > 0.
  double max_norm = 0;
  NormKind kind = NormKind::kL2;

  bool enabled() const { return max_norm > 0; }
  // OptimizerSpec.max_grad_norm and norm_type (of a valid spec).
  static GradClipping FromSpec(const v1::OptimizerSpec& spec);
};

// Mixed precision (JobSpec.precision): the dtype of the model's parameters
// (held by every rank, broadcast by owners) and of the gradient reduction.
// Anything but fp32 keeps fp32 master weights and fp32 gradients at the
// owner, for its pieces only.
struct MixedPrecision {
  DataType param_dtype = DataType::kFloat32;
  DataType reduce_dtype = DataType::kFloat32;

  bool mixed() const {
    return param_dtype != DataType::kFloat32 ||
           reduce_dtype != DataType::kFloat32;
  }
  // JobSpec.precision (of a valid spec; unset is fp32 throughout).
  static MixedPrecision FromSpec(const v1::JobSpec& spec);
};

// The dtypes of PrecisionSpec by their spec names ("FP32", "BF16"; as the
// agent passes them to a program in PSHARD_PARAM_DTYPE / PSHARD_REDUCE_DTYPE).
// DTYPE_UNSPECIFIED is fp32.
DataType PrecisionDataType(v1::PrecisionSpec::DType dtype);
absl::string_view PrecisionDTypeName(DataType dtype);
// nullopt for a name that is not "FP32" or "BF16".
std::optional<DataType> ParsePrecisionDType(absl::string_view name);

struct ZeroHookOptions {
  v1::JobSpec::CommMode comm_mode = v1::JobSpec::REDUCE_BROADCAST;
  double bucket_cap_mb = 25;
  // Deadline for FinishStep's wait on all of a step's communication.
  absl::Duration timeout = absl::Seconds(60);
  // Buckets travel and are stepped in pieces of at most this many bytes, so
  // that the owner steps piece k while piece k+1 is still arriving and piece
  // k-1 is already on its way back (a bucket is still owned, stepped and
  // broadcast by one rank; pieces only pipeline it). 0: whole buckets.
  int64_t piece_bytes = int64_t{4} << 20;
  // A piece's broadcast is issued after the reductions of this many later
  // pieces, so that the owner's communicator keeps posting reductions while
  // it steps (every rank issues the same order). Under SHARDED a round's
  // pieces (one per rank) are reduced and broadcast as one group, so its
  // broadcasts wait until more than this many pieces are deferred. 0: right
  // after the round's own steps. >= 0.
  int broadcast_lag = 4;
  // FinishStep does not wait for the parameter broadcasts: the next
  // forward calls WaitForParameter(i) before it reads parameter i, so it
  // starts on the first layers while later ones are still arriving
  // (Megatron's --overlap-param-gather, in the order the forward really
  // reads them). On device memory the wait is the compute stream's, on the
  // device (HookMemory::OrderComputeAfterBroadcast).
  bool overlap_param_broadcast = false;
  // Off by default. When on, owners step only once the step's reductions
  // are done (see the file comment); invalid values are refused by Create.
  GradClipping clipping;
  // fp32 by default. Host memory only (ZeroHook::Create).
  MixedPrecision precision;
};

class ZeroHook : public GradientSink {
 public:
  // The hook on host memory. `comm` must outlive the hook. InvalidArgument
  // for an empty or invalid parameter list, missing pieces or bad options.
  static absl::StatusOr<std::unique_ptr<ZeroHook>> Create(
      std::vector<ParameterInfo> params, Communicator* comm,
      std::unique_ptr<ShardOptimizer> optimizer, AssignmentProvider provider,
      const ZeroHookOptions& options);

  ~ZeroHook() override;

  // Views of each parameter and its gradient inside the bucket buffers, as
  // fp32: empty when their dtype (options.precision) is not fp32. They stay
  // valid until the end of the first FinishStep, which may re-pack the
  // buffers; fetch them again after it.
  const std::vector<float*>& params() const { return float_params_; }
  const std::vector<float*>& grads() const { return float_grads_; }
  // The same views in any dtype: param_dtype() and grad_dtype() elements.
  const std::vector<void*>& param_data() const {
    return memory_->param_views();
  }
  const std::vector<void*>& grad_data() const { return memory_->grad_views(); }
  DataType param_dtype() const { return memory_->param_dtype(); }
  DataType grad_dtype() const { return memory_->grad_dtype(); }
  const std::vector<ParameterInfo>& parameter_infos() const { return infos_; }

  // Host values in and out, whatever memory the buckets are in (device
  // memory copies on its compute stream and waits: not for a step's inner
  // loop there).
  //
  // Before the first step: parameter `index` takes `values` (its numel
  // floats) on this rank, rounded to nearest even for bf16 parameters,
  // whose owner starts its fp32 master weights from `values` themselves
  // (so a resume from fp32 values loses nothing). InvalidArgument: index
  // out of range or the wrong size; FailedPrecondition after the first
  // step.
  absl::Status SetParameter(int index, absl::Span<const float> values);
  // Parameter `index`'s gradient takes `values` (its numel floats), rounded
  // to nearest even for bf16 gradients (the caller then marks it ready).
  // Errors as SetParameter's (any time).
  absl::Status SetGradient(int index, absl::Span<const float> values);
  // Parameter `index` as this rank's model holds it, widened to fp32
  // (exact), into `out` (its numel floats). With overlap_param_broadcast
  // call WaitForParameter first. Errors as SetParameter's (any time).
  absl::Status ReadParameter(int index, absl::Span<float> out) const;
  // The same for elements [offset, offset + out.size()) of it.
  // InvalidArgument for a range outside the parameter.
  absl::Status ReadParameterRange(int index, int64_t offset,
                                  absl::Span<float> out) const;
  // After the first step, between steps: elements [offset, offset +
  // out.size()) of parameter `index`, which this rank must own, as its
  // optimizer holds them: the fp32 master weights under mixed precision,
  // the parameters otherwise (what a checkpoint keeps), copied to the host
  // from device memory. FailedPrecondition when this rank does not own them
  // all or before the first step; InvalidArgument for a range outside the
  // parameter.
  absl::Status ReadOwnedParameter(int index, int64_t offset,
                                  absl::Span<float> out) const;

  // GradientSink: parameter `param_index`'s gradient is final. Launches its
  // bucket's communication when the bucket is complete (after the first
  // step). Errors are kept and returned by FinishStep.
  void GradientReady(int param_index) override;
  // The same, returning the error: InvalidArgument for an index out of
  // range, FailedPrecondition for a gradient marked twice (the step goes on);
  // a failure to launch is also kept and fails FinishStep.
  absl::Status MarkGradientReady(int param_index);

  // Ends the step: every gradient must have been marked ready. Waits for all
  // broadcasts (each bounded by options.timeout); on return the parameters
  // hold the step's update on every rank (with overlap_param_broadcast only
  // once WaitForParameter has returned for them: FinishStep waits for the
  // reductions and the previous step's broadcasts nobody waited for). On
  // error the communicator has been aborted (its buffers can no longer be
  // trusted) and the hook is unusable.
  //   FailedPrecondition: a gradient was not marked ready; InvalidArgument:
  //   the assignment does not fit the layout; others from the provider, the
  //   communicator or the optimizer.
  absl::Status FinishStep();
  // GradientSink: returns once parameter `param_index` holds the last
  // step's update (at once without overlap_param_broadcast, or when it has
  // already arrived). Errors as FinishStep's (the communicator is aborted),
  // InvalidArgument for an index out of range.
  absl::Status WaitForParameter(int param_index) override;
  // WaitForParameter for every parameter: before reading them all outside
  // a forward (the job's output, a checkpoint).
  absl::Status WaitForAllParameters();

  // The hyper-parameters the program has changed (`overrides`, checked by
  // the caller against the optimizer spec) from the next step on: what
  // torch's schedulers write into param_groups. Between steps only, so that
  // every bucket of a step runs with the same values: the owners' steps
  // already issued (with overlap_param_broadcast, perhaps still running)
  // keep the ones they were issued with.
  //   FailedPrecondition: a gradient of the current step is already marked
  //   ready.
  absl::Status SetHyperParameters(HyperParameterOverrides overrides);
  // The changes SetHyperParameters has set.
  const HyperParameterOverrides& hyper_parameters() const {
    return *hyper_parameters_;
  }

  // How long the last FinishStep waited for the step's collectives after the
  // backward pass had handed over its last gradient: the communication the
  // backward pass did not hide.
  absl::Duration last_collective_wait() const { return last_collective_wait_; }

  // The total gradient norm of the last finished step before clipping, as
  // clip_grad_norm_ returns it; nullopt without clipping or before a step.
  // The same on every rank. Non-finite when a gradient was.
  std::optional<double> last_grad_norm() const { return last_grad_norm_; }

  HookState state() const { return state_; }
  int64_t epoch() const { return assignment_.epoch; }
  const BucketLayout& layout() const { return *layout_; }
  // Each bucket's owner: a rank, or shard::kEveryRank under SHARDED.
  const std::vector<int>& owners() const { return assignment_.owners; }
  // Elements of bucket b this rank owns (steps and holds state for): the
  // whole bucket, none, or its SHARDED range. 0 before the first step.
  int64_t owned_elements(int b) const;
  ShardOptimizer& optimizer() { return *optimizer_; }
  int64_t steps_finished() const { return steps_finished_; }

  // After the first step: the optimizer state of the parameters in the
  // buckets this rank owns, in bucket order: whole, or under SHARDED the
  // slice of a parameter this rank holds (one entry per contiguous part,
  // with its offset). A parameter that keeps no state (SGD without
  // momentum) has one entry with its step and no tensors (offset 0): its
  // bucket's lr schedule resumes from that step. FailedPrecondition before
  // the first step; the optimizer's errors (device memory: a failed copy).
  absl::StatusOr<std::vector<ParameterOptimizerState>> ExportOptimizerState()
      const;
  // After the first step: every parameter this rank owns, with or without
  // optimizer state, in bucket order: whole, or under SHARDED the
  // contiguous part of it inside this rank's ranges (elements [offset,
  // offset + numel) of the parameter). FailedPrecondition before the first
  // step.
  struct OwnedParameter {
    std::string name;
    int64_t offset = 0;
    int64_t numel = 0;
  };
  absl::StatusOr<std::vector<OwnedParameter>> OwnedParameters() const;
  // The same parameters (per bucket, those with state first), as views
  // valid until the next step (on
  // device memory, views of a host copy that the next ViewOptimizerState
  // or ExportOptimizerState also replaces).
  absl::StatusOr<std::vector<ParameterOptimizerStateView>> ViewOptimizerState()
      const;
  // Before the first step: the state to resume from (ExportOptimizerState
  // of the same rank and layout, or the entries of every rank's together at
  // any world size, layout or policy: they are keyed by parameter name and
  // offset, whole parameters or slices), applied inside the first
  // FinishStep once the owners are known; entries of parameters this rank
  // does not own are ignored. InvalidArgument now: an unknown parameter, an
  // entry (name, offset) with tensors given twice (one without tensors, a
  // step only, may come from every rank) or slices of one parameter that
  // overlap, tensors of one entry of different sizes or outside the
  // parameter, a negative step or steps of one parameter that differ. At the
  // first FinishStep (InvalidArgument, naming the parameter): owned elements
  // of a parameter with state that no entry covers, a tensor name the
  // optimizer does not keep. FailedPrecondition after the first step.
  // Each owned bucket resumes its step count (its lr schedule's t) from an
  // entry of one of its parameters (those without state have a step-only
  // entry); a bucket whose parameters have none takes the step all entries
  // share (0 for an empty state), and fails the first step
  // (InvalidArgument, naming a parameter) when they differ.
  absl::Status SetInitialOptimizerState(
      std::vector<ParameterOptimizerState> state);

  // Reads one parameter's optimizer state to resume from: `state_names` are
  // the tensors the optimizer keeps for it (none for plain SGD).
  using OptimizerStateLoader = std::function<absl::StatusOr<
      ParameterOptimizerState>(const std::string& name,
                               const std::vector<std::string>& state_names)>;
  // Before the first step: resume from state saved at any world size or
  // bucket layout. At the first FinishStep, once the owners are known,
  // `load` is called once for each parameter this rank owns (and only
  // those: resharding is a read; parameters without state too, for their
  // bucket's step count), and the results are applied as
  // SetInitialOptimizerState's would be. Its errors fail that step.
  // FailedPrecondition after the first step, or with
  // SetInitialOptimizerState's state pending.
  absl::Status SetOptimizerStateLoader(OptimizerStateLoader load);

  // How many times this rank has run (host memory) or enqueued (device
  // memory) the optimizer on its part of bucket b (on every piece of it it
  // owns; -1 if those pieces disagree; 0 if it owns none).
  int64_t bucket_steps(int b) const;

  // Optimizer state this rank holds for bucket b.
  int64_t bucket_state_bytes(int b) const;

 protected:
  // For hooks on other memories (GpuZeroHook): construct, then Init().
  // `memory` runs `optimizer`'s steps; both must be non-null, as must comm.
  ZeroHook(std::vector<ParameterInfo> params, Communicator* comm,
           std::unique_ptr<ShardOptimizer> optimizer,
           std::unique_ptr<HookMemory> memory, AssignmentProvider provider,
           const ZeroHookOptions& options);

  // Checks the arguments and lays the buckets out in DDP's guessed order.
  absl::Status Init();
  // After each Arrange: the fp32 views params()/grads() return.
  void RefreshFloatViews();

  HookMemory& memory() { return *memory_; }

 private:
  // A contiguous part of a bucket: the unit of transfer and of stepping,
  // reduced to, stepped and broadcast by its owner.
  struct Piece {
    int bucket = 0;
    int64_t offset = 0;  // elements from the bucket's start
    int64_t numel = 0;
    int owner = 0;
  };

  int64_t CapBytes() const;
  absl::Status Initialize();
  absl::Status LaunchBucket(int b);
  // A round's reduction (one group), then the owned pieces' steps (or,
  // clipping, their partial norms); the broadcasts are deferred.
  void LaunchRound(int round);
  // The round's pieces as segments of the parameters or the gradients, each
  // with its owner as the root.
  std::vector<CollectiveSegment> RoundSegments(int round, bool params);
  // The pieces of the deferred rounds (options_.broadcast_lag bounds them).
  int DeferredPieces() const;
  // The oldest deferred round's broadcasts.
  void IssueFirstDeferred();
  // A round's broadcasts, one group.
  void IssueBroadcasts(int round);
  // Clipping: after every reduction of the step, the norm's all-reduce and
  // each owned piece's clipped step, each piece's broadcast.
  void IssueClippedSteps();
  // Piece p's parameter spans, offsets inside the piece or (for
  // checkpoints) inside each span's parameter.
  std::vector<ParamSpan> PieceSpans(int p,
                                    bool offsets_in_parameters = false) const;
  // Where each parameter of piece p starts inside the parameter.
  absl::flat_hash_map<std::string, int64_t> OffsetsInParameters(int p) const;
  // Each registered parameter's element count, by name.
  absl::flat_hash_map<std::string, int64_t> NumelByName() const;
  // Loads initial_state_ into the owned pieces' optimizer (Initialize).
  absl::Status ApplyInitialOptimizerState();
  // Fills initial_state_ from state_loader_ for the owned parameters.
  absl::Status LoadOwnedOptimizerState();
  // Mixed precision: every owned piece's master weights, from the values
  // SetParameter was given, else from the parameters (Initialize).
  absl::Status AdoptOwnedPieces();
  // InvalidArgument naming `index` when it is not a parameter's.
  absl::Status CheckIndex(int index) const;
  // CheckIndex, and InvalidArgument when [offset, offset + count) is not
  // inside the parameter.
  absl::Status CheckRange(int index, int64_t offset, int64_t count) const;
  // Index in range and `size` its numel; `what` says what `size` counts in
  // the error.
  absl::Status CheckTensorSize(int index, size_t size,
                               absl::string_view what) const;
  // Piece p's bucket buffers at its offset.
  void* PieceParams(int p);
  void* PieceGrads(int p);
  absl::Status Fail(absl::Status status);

  std::vector<ParameterInfo> infos_;
  Communicator* const comm_;
  std::unique_ptr<ShardOptimizer> optimizer_;
  std::unique_ptr<HookMemory> memory_;
  AssignmentProvider provider_;
  const ZeroHookOptions options_;
  std::vector<float*> float_params_;
  std::vector<float*> float_grads_;
  // Mixed precision, until the first step: SetParameter's fp32 values by
  // parameter (empty where it was not called).
  std::vector<std::vector<float>> initial_params_;

  HookState state_ = HookState::kUninitialized;
  std::unique_ptr<BucketLayout> layout_;
  BucketAssignment assignment_;
  absl::Status error_;
  int64_t steps_finished_ = 0;
  absl::Duration last_collective_wait_ = absl::ZeroDuration();
  std::optional<double> last_grad_norm_;
  // SetHyperParameters'; each owner step shares the snapshot it was issued
  // with (a new one replaces this, never changes it).
  std::shared_ptr<const HyperParameterOverrides> hyper_parameters_ =
      std::make_shared<const HyperParameterOverrides>();
  // SetInitialOptimizerState's, until the first step applies it.
  std::optional<std::vector<ParameterOptimizerState>> initial_state_;
  // SetOptimizerStateLoader's, until the first step calls it.
  OptimizerStateLoader state_loader_;

  // Per iteration (cleared by FinishStep).
  std::vector<int> observed_order_;       // first step only
  std::vector<char> param_ready_;
  std::vector<int> bucket_pending_;       // gradients not yet ready
  int next_bucket_ = 0;                   // next bucket to launch
  // Rounds whose broadcasts wait for later reductions, oldest first.
  std::deque<int> deferred_rounds_;
  std::vector<std::shared_ptr<Work>> works_;
  // overlap_param_broadcast: by parameter, the broadcasts that carry it,
  // issued this step and (pending) by the step before, not yet waited for.
  std::vector<std::vector<std::shared_ptr<Work>>> issued_broadcasts_;
  std::vector<std::vector<std::shared_ptr<Work>>> pending_broadcasts_;

  std::vector<Piece> pieces_;
  std::vector<std::vector<int>> bucket_pieces_;
  // Pieces issued as one group: one per owner range, at the same position
  // in each (under SHARDED, world_size pieces; otherwise one).
  std::vector<std::vector<int>> rounds_;
  std::vector<std::vector<int>> bucket_rounds_;  // round indices
  std::vector<std::vector<int>> piece_params_;  // parameter indices
  // Optimizer steps run on each piece by this rank.
  std::unique_ptr<std::atomic<int64_t>[]> piece_steps_;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_HOOK_ZERO_HOOK_H_
