// ShardOptimizer: the optimizer state and step for the buckets this rank owns.
//
// State (SGD momentum, Adam's moments, ...) is allocated only for buckets
// added with AddBucket, so a rank holds about 1/world of the total.
// Arithmetic follows PyTorch's single-tensor ("foreach=False") SGD, Adam,
// AdamW, Adagrad and RMSprop (and Lion as lion-pytorch writes it), in the
// same operation order and in fp32, so that the same gradients give the same
// parameters (bit for bit against torch 1.13's CPU build; the per-element
// formulas are written out in worker/optim/cpu_kernels.h).
//
// Thread safety: all methods may be called from any thread. Steps of
// different buckets run concurrently; Steps of one bucket are serialised.
// By default the CPU implementation steps a bucket on the calling thread
// only; CpuOptimizerOptions::num_threads splits large buckets over more
// threads (bit-identical results: the kernels are element-wise). On the
// 2-core CI machine a second thread doubles the kernel's bandwidth when the
// other core is idle, but in a worker that core runs the backward pass and
// the communicator, so the default stays 1 (bench/optimizer/README.md).
#ifndef PSHARD_WORKER_OPTIM_SHARD_OPTIMIZER_H_
#define PSHARD_WORKER_OPTIM_SHARD_OPTIMIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/job_spec.h"
#include "pshard/v1/job_spec.pb.h"

namespace pshard::worker {

// Where one parameter sits inside a flat bucket.
struct ParamSpan {
  std::string name;
  int64_t offset = 0;  // in elements, from the start of the bucket
  int64_t numel = 0;
};

// The most state arrays a bucket keeps (one per torch state tensor).
inline constexpr int kMaxStateArrays = 3;

// Which state arrays a parameter keeps, by PyTorch's names, and what they
// start at. Array k of a bucket holds the tensor names[k] of every parameter
// that keeps one there:
//   SGD      0 "momentum_buffer" (only with momentum != 0)
//   ADAM(W)  0 "exp_avg", 1 "exp_avg_sq", 2 "max_exp_avg_sq" (amsgrad)
//   ADAGRAD  0 "sum" (starts at initial_accumulator_value)
//   RMSPROP  0 "square_avg", 1 "momentum_buffer" (momentum > 0),
//            2 "grad_avg" (centered)
//   LION     0 "exp_avg"
// The layout every backend uses: spans sorted by offset; every span with any
// state takes the next span.numel elements of each array the bucket keeps
// (so a bucket whose groups keep different arrays leaves the elements of a
// parameter that does not use an array unused there).
struct StateLayout {
  std::array<const char*, kMaxStateArrays> names = {};  // null: not kept
  std::array<float, kMaxStateArrays> initial = {};      // starting value
  bool empty() const {
    for (const char* n : names) {
      if (n != nullptr) return false;
    }
    return true;
  }
};

// The state of a parameter with hyper-parameters `hp` under `kind`.
StateLayout ParameterStateLayout(v1::OptimizerSpec::Kind kind,
                                 const HyperParameters& hp);

// True for the optimizer kinds the ShardOptimizers implement.
bool IsSupportedOptimizerKind(v1::OptimizerSpec::Kind kind);

// The optimizer state of one parameter's part in a bucket, by PyTorch's
// names (StateLayout; in array order); each `numel` floats.
struct SpanState {
  std::string name;
  int64_t numel = 0;
  std::vector<std::pair<std::string, std::vector<float>>> tensors;
};

// A bucket's optimizer state: its step count and each span's state, in
// offset order (only spans with state).
struct BucketState {
  int64_t steps = 0;
  std::vector<SpanState> spans;
};

// The same, as views into the optimizer's own buffers (no copy).
struct SpanStateView {
  std::string name;
  int64_t numel = 0;
  std::vector<std::pair<std::string, absl::Span<const float>>> tensors;
};
struct BucketStateView {
  int64_t steps = 0;
  std::vector<SpanStateView> spans;
};

// Where one parameter's state lies in its bucket's state arrays (the layout
// of StateLayout's comment, which every backend keeps).
struct StateSpan {
  std::string name;
  int64_t numel = 0;
  int64_t state_offset = 0;  // into each state array the span keeps
  StateLayout layout;        // never empty: spans without state have none
};

// A bucket's state arrays, by StateLayout index; null where none is kept.
using StateArrays = std::array<float*, kMaxStateArrays>;

// The BucketStateView of arrays laid out as `spans` says (views, no copy).
BucketStateView ViewStateArrays(const std::vector<StateSpan>& spans,
                                int64_t steps, const StateArrays& arrays);

// Checks that `state` fits bucket `bucket_index`, whose state spans are
// `spans`: ImportState's rules (same spans, names, numels and tensor names,
// in order; steps >= 0). InvalidArgument names the first mismatch.
absl::Status CheckStateFits(int bucket_index,
                            const std::vector<StateSpan>& spans,
                            const BucketState& state);

// Copies `state` (CheckStateFits) into `arrays`; elements outside the
// spans are left as they are.
void ScatterState(const std::vector<StateSpan>& spans,
                  const BucketState& state, const StateArrays& arrays);

// Checks the spans of bucket `bucket_index` and sorts them by offset; the
// rules every ShardOptimizer backend applies in AddBucket. InvalidArgument:
// no spans, a negative or huge (> 2^40) offset or numel, a name that appears
// twice, or overlapping spans.
absl::Status SortAndCheckSpans(int bucket_index,
                               std::vector<ParamSpan>& spans);

// The hyper-parameters of `span` in bucket `bucket_index`, resolved with
// ResolveHyperParameters. InvalidArgument if the learning rate is not > 0 and
// finite.
absl::StatusOr<HyperParameters> ResolveSpanHyperParameters(
    const v1::OptimizerSpec& spec, int bucket_index, const ParamSpan& span);

// Options of the CPU implementation.
struct CpuOptimizerOptions {
  // Threads that step one bucket, the calling thread included; >= 1.
  int num_threads = 1;
  // Each extra thread gets at least this many elements; smaller buckets are
  // stepped on the calling thread alone (a thread start costs ~50 us).
  int64_t min_elements_per_thread = int64_t{1} << 20;
};

class ShardOptimizer {
 public:
  // `spec` must be valid (ValidateJobSpec); hyper-parameters are resolved per
  // parameter name with ResolveHyperParameters (common/job_spec.h), once, in
  // AddBucket. Returns the CPU implementation. InvalidArgument: the kind is
  // not one of SGD, ADAM, ADAMW, ADAGRAD, RMSPROP, LION.
  static absl::StatusOr<std::unique_ptr<ShardOptimizer>> Create(
      const v1::OptimizerSpec& spec);
  // The same with explicit CPU options. InvalidArgument also for
  // num_threads < 1 or min_elements_per_thread < 1.
  static absl::StatusOr<std::unique_ptr<ShardOptimizer>> Create(
      const v1::OptimizerSpec& spec, const CpuOptimizerOptions& options);

  virtual ~ShardOptimizer() = default;

  // Takes ownership of bucket `bucket_index` (fp32, `spans` laid out inside
  // it) and allocates its state (StateLayout: one fp32 array per state
  // tensor, over the parameters that keep any state; zeroed, except
  // Adagrad's "sum", which starts at initial_accumulator_value).
  // Elements between spans are never touched. InvalidArgument if spans
  // overlap, are negative, repeat a name or are empty, if a parameter
  // resolves to a learning rate that is not > 0, or if the bucket was already
  // added.
  virtual absl::Status AddBucket(int bucket_index,
                                 std::vector<ParamSpan> spans) = 0;

  // One optimizer step on an owned bucket: updates `params` in place from
  // `grads` (already averaged over ranks), each parameter group at its
  // hyper-parameters with the program's changes in `overrides` applied
  // (EffectiveHyperParameters; lr: StepLearningRate). Each bucket
  // counts its own steps (Adam's bias correction; SGD's first momentum
  // step; Adagrad's lr_decay; the schedule). NotFound if the bucket is not
  // owned; InvalidArgument for null buffers.
  virtual absl::Status Step(int bucket_index, float* params, const float* grads,
                            const HyperParameterOverrides& overrides) = 0;
  // The same with every group at its job spec's hyper-parameters.
  absl::Status Step(int bucket_index, float* params, const float* grads) {
    return Step(bucket_index, params, grads, HyperParameterOverrides());
  }

  // An owned bucket's state in host memory (checkpoint snapshots copy from
  // it once, between steps): the CPU backend's own arrays, the GPU's host
  // copy of its device arrays. Valid until the bucket's next Step,
  // ImportState or ViewState. NotFound if the bucket is not owned.
  virtual absl::StatusOr<BucketStateView> ViewState(int bucket_index) const = 0;
  // A copy of ViewState.
  absl::StatusOr<BucketState> ExportState(int bucket_index) const;
  // Replaces an owned bucket's state and step count with `state`, which must
  // have exactly the spans ExportState would give (same names, numels and
  // tensor names, same order); nothing changes on error. NotFound: not
  // owned; InvalidArgument names the first mismatch (CheckStateFits).
  virtual absl::Status ImportState(int bucket_index,
                                   const BucketState& state) = 0;

  // Bytes of optimizer state held for one bucket (0 if not owned) and in all.
  virtual int64_t state_bytes(int bucket_index) const = 0;
  virtual int64_t total_state_bytes() const = 0;
};

}  // namespace pshard::worker

#endif  // PSHARD_WORKER_OPTIM_SHARD_OPTIMIZER_H_
