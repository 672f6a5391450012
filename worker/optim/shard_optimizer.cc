// The CPU ShardOptimizer: per-bucket state in host memory, stepped with the
// fused kernels of cpu_kernels.h.
#include "worker/optim/shard_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/job_spec.h"
#include "common/lr_schedule.h"
#include "common/status_macros.h"
#include "worker/optim/cpu_kernels.h"

namespace pshard::worker {
namespace {

// Largest element offset accepted in a span: far beyond any real bucket, and
// small enough that offset + numel never overflows.
constexpr int64_t kMaxBucketElements = int64_t{1} << 40;

// A zero-initialised, 64-byte aligned float array (cache line and AVX-512
// friendly; std::vector gives only 16).
class AlignedFloats {
 public:
  AlignedFloats() = default;
  explicit AlignedFloats(int64_t n) : size_(n) {
    if (n > 0) {
      data_ = static_cast<float*>(::operator new[](
          static_cast<size_t>(n) * sizeof(float), std::align_val_t{64}));
      std::memset(data_, 0, static_cast<size_t>(n) * sizeof(float));
    }
  }
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  AlignedFloats(AlignedFloats&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)) {}
  AlignedFloats& operator=(AlignedFloats&& other) noexcept {
    if (this != &other) {
      Free();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  ~AlignedFloats() { Free(); }

  // Shallow const: the state's storage, not its values, is fixed.
  float* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  void Free() {
    if (data_ != nullptr) ::operator delete[](data_, std::align_val_t{64});
    data_ = nullptr;
  }
  float* data_ = nullptr;
  int64_t size_ = 0;
};

// A run of contiguous elements sharing one set of hyper-parameters: the unit a
// kernel call covers. Neighbouring spans of the same group are merged.
struct Segment {
  int64_t offset = 0;        // into the bucket
  int64_t numel = 0;
  int64_t state_offset = 0;  // into the bucket's state arrays
  StateLayout layout;        // the arrays it keeps (empty: no state)
  HyperParameters hp;
};

struct Bucket {
  // Serialises Steps of this bucket; different buckets step concurrently.
  absl::Mutex mu;
  std::vector<Segment> segments;  // ordered by offset
  std::vector<StateSpan> state_spans;  // spans with state, by offset
  int64_t numel = 0;              // elements covered by segments
  // State array k (StateLayout); empty when no span keeps one there.
  AlignedFloats state[kMaxStateArrays];
  int64_t state_bytes = 0;
  StateArrays state_arrays() const {
    StateArrays arrays{};
    for (int k = 0; k < kMaxStateArrays; ++k) arrays[k] = state[k].data();
    return arrays;
  }
  int64_t steps ABSL_GUARDED_BY(mu) = 0;
};

class CpuShardOptimizer final : public ShardOptimizer {
 public:
  CpuShardOptimizer(v1::OptimizerSpec spec, CpuOptimizerOptions options)
      : spec_(std::move(spec)), options_(options) {}

  absl::Status AddBucket(int bucket_index,
                         std::vector<ParamSpan> spans) override;
  using ShardOptimizer::Step;
  absl::Status Step(int bucket_index, float* params, const float* grads,
                    const HyperParameterOverrides& overrides) override;
  int64_t state_bytes(int bucket_index) const override;
  int64_t total_state_bytes() const override;
  absl::StatusOr<BucketStateView> ViewState(int bucket_index) const override;
  absl::Status ImportState(int bucket_index, const BucketState& state) override;

 private:
  Bucket* FindBucket(int bucket_index) const;
  // Steps the elements [begin, end) of the bucket (any split of the bucket
  // gives the same bits).
  void StepRange(const Bucket& bucket, int64_t step,
                 const HyperParameterOverrides& overrides, float* params,
                 const float* grads, int64_t begin, int64_t end) const;

  const v1::OptimizerSpec spec_;
  const CpuOptimizerOptions options_;
  mutable absl::Mutex mu_;
  // unique_ptr: a Bucket stays put while Step runs without holding mu_.
  std::map<int, std::unique_ptr<Bucket>> buckets_ ABSL_GUARDED_BY(mu_);
};

absl::Status CpuShardOptimizer::AddBucket(int bucket_index,
                                          std::vector<ParamSpan> spans) {
  RETURN_IF_ERROR(SortAndCheckSpans(bucket_index, spans));

  auto bucket = std::make_unique<Bucket>();
  int64_t state_numel = 0;
  bool keeps[kMaxStateArrays] = {};
  for (const ParamSpan& span : spans) {
    if (span.numel == 0) continue;
    ASSIGN_OR_RETURN(const HyperParameters hp,
                     ResolveSpanHyperParameters(spec_, bucket_index, span));
    const StateLayout layout = ParameterStateLayout(spec_.kind(), hp);
    const bool has_state = !layout.empty();
    std::vector<Segment>& segs = bucket->segments;
    if (!segs.empty() && segs.back().offset + segs.back().numel == span.offset &&
        segs.back().hp == hp) {
      segs.back().numel += span.numel;
    } else {
      Segment seg;
      seg.offset = span.offset;
      seg.numel = span.numel;
      seg.state_offset = state_numel;
      seg.layout = layout;
      seg.hp = hp;
      segs.push_back(seg);
    }
    if (has_state) {
      bucket->state_spans.push_back(
          {span.name, span.numel, state_numel, layout});
      state_numel += span.numel;
      for (int k = 0; k < kMaxStateArrays; ++k) {
        keeps[k] = keeps[k] || layout.names[k] != nullptr;
      }
    }
    bucket->numel += span.numel;
  }
  int num_state_arrays = 0;
  for (int k = 0; k < kMaxStateArrays; ++k) {
    if (!keeps[k]) continue;
    bucket->state[k] = AlignedFloats(state_numel);
    ++num_state_arrays;
  }
  // Arrays that do not start at zero (Adagrad's "sum").
  for (const StateSpan& span : bucket->state_spans) {
    for (int k = 0; k < kMaxStateArrays; ++k) {
      if (span.layout.names[k] == nullptr || span.layout.initial[k] == 0) {
        continue;
      }
      float* begin = bucket->state[k].data() + span.state_offset;
      std::fill(begin, begin + span.numel, span.layout.initial[k]);
    }
  }
  bucket->state_bytes =
      num_state_arrays * state_numel * static_cast<int64_t>(sizeof(float));

  absl::MutexLock lock(&mu_);
  auto [it, inserted] = buckets_.try_emplace(bucket_index, nullptr);
  if (!inserted) {
    return absl::InvalidArgumentError(
        absl::StrCat("bucket ", bucket_index, " was already added"));
  }
  it->second = std::move(bucket);
  return absl::OkStatus();
}

Bucket* CpuShardOptimizer::FindBucket(int bucket_index) const {
  absl::MutexLock lock(&mu_);
  auto it = buckets_.find(bucket_index);
  return it == buckets_.end() ? nullptr : it->second.get();
}

absl::Status CpuShardOptimizer::Step(int bucket_index, float* params,
                                     const float* grads,
                                     const HyperParameterOverrides& overrides) {
  Bucket* bucket = FindBucket(bucket_index);
  if (bucket == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("bucket ", bucket_index, " is not owned by this rank"));
  }
  if (params == nullptr || grads == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bucket ", bucket_index, ": null parameter or gradient buffer"));
  }
  absl::MutexLock lock(&bucket->mu);
  const int64_t step = ++bucket->steps;
  const int64_t max_threads =
      std::max<int64_t>(1, bucket->numel / options_.min_elements_per_thread);
  const int threads = static_cast<int>(
      std::min<int64_t>(options_.num_threads, max_threads));
  if (threads <= 1) {
    StepRange(*bucket, step, overrides, params, grads, 0, bucket->numel);
    return absl::OkStatus();
  }
  // Split the bucket's covered elements (ranks of elements, not offsets, so
  // gaps cost nothing) into `threads` parts; the caller takes the last.
  const int64_t per = (bucket->numel + threads - 1) / threads;
  std::vector<std::thread> helpers;
  helpers.reserve(threads - 1);
  int64_t begin = 0;
  for (int t = 0; t + 1 < threads; ++t, begin += per) {
    try {
      helpers.emplace_back([this, bucket, step, &overrides, params, grads,
                            begin, per] {
        StepRange(*bucket, step, overrides, params, grads, begin, begin + per);
      });
    } catch (const std::system_error&) {
      // No thread available: do this part here instead.
      StepRange(*bucket, step, overrides, params, grads, begin, begin + per);
    }
  }
  StepRange(*bucket, step, overrides, params, grads, begin, bucket->numel);
  for (std::thread& helper : helpers) helper.join();
  return absl::OkStatus();
}

void CpuShardOptimizer::StepRange(const Bucket& bucket, int64_t step,
                                  const HyperParameterOverrides& overrides,
                                  float* params, const float* grads,
                                  int64_t begin, int64_t end) const {
  const v1::OptimizerSpec::Kind kind = spec_.kind();
  // `covered` counts the elements of the segments before `seg`.
  int64_t covered = 0;
  for (const Segment& seg : bucket.segments) {
    const int64_t lo = std::max(begin, covered);
    const int64_t hi = std::min(end, covered + seg.numel);
    covered += seg.numel;
    if (lo >= hi) continue;
    const int64_t skip = lo - (covered - seg.numel);
    const int64_t n = hi - lo;
    float* p = params + seg.offset + skip;
    const float* g = grads + seg.offset + skip;
    // The group's hyper-parameters with the program's changes, and its lr
    // for this bucket's step: set by the program, or scheduled.
    const HyperParameters& hp = EffectiveHyperParameters(seg.hp, overrides);
    const double lr = StepLearningRate(seg.hp, step, overrides);
    // State array k of this range; null where the segment keeps none.
    float* state[kMaxStateArrays];
    for (int k = 0; k < kMaxStateArrays; ++k) {
      state[k] = seg.layout.names[k] != nullptr
                     ? bucket.state[k].data() + seg.state_offset + skip
                     : nullptr;
    }
    switch (kind) {
      case v1::OptimizerSpec::SGD:
        cpu::SgdStep(p, g, state[0], n,
                     cpu::MakeSgdScalars(lr, hp.momentum, hp.dampening,
                                         hp.nesterov, hp.weight_decay,
                                         /*first_step=*/step == 1));
        break;
      case v1::OptimizerSpec::ADAM:
      case v1::OptimizerSpec::ADAMW:
        cpu::AdamStep(p, g, state[0], state[1], state[2], n,
                      cpu::MakeAdamScalars(
                          lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay,
                          /*decoupled=*/kind == v1::OptimizerSpec::ADAMW, step,
                          hp.amsgrad));
        break;
      case v1::OptimizerSpec::ADAGRAD:
        cpu::AdagradStep(p, g, state[0], n,
                         cpu::MakeAdagradScalars(lr, hp.lr_decay,
                                                 hp.weight_decay, hp.eps,
                                                 step));
        break;
      case v1::OptimizerSpec::RMSPROP:
        cpu::RmspropStep(p, g, state[0], state[1], state[2], n,
                         cpu::MakeRmspropScalars(lr, hp.alpha, hp.eps,
                                                 hp.weight_decay, hp.momentum,
                                                 hp.centered));
        break;
      case v1::OptimizerSpec::LION:
        cpu::LionStep(p, g, state[0], n,
                      cpu::MakeLionScalars(lr, hp.beta1, hp.beta2,
                                           hp.weight_decay));
        break;
      default:
        break;  // Create refuses every other kind
    }
    if (covered >= end) break;
  }
}

absl::StatusOr<BucketStateView> CpuShardOptimizer::ViewState(
    int bucket_index) const {
  Bucket* bucket = FindBucket(bucket_index);
  if (bucket == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("bucket ", bucket_index, " is not owned by this rank"));
  }
  absl::MutexLock lock(&bucket->mu);
  return ViewStateArrays(bucket->state_spans, bucket->steps,
                         bucket->state_arrays());
}

absl::Status CpuShardOptimizer::ImportState(int bucket_index,
                                            const BucketState& state) {
  Bucket* bucket = FindBucket(bucket_index);
  if (bucket == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("bucket ", bucket_index, " is not owned by this rank"));
  }
  RETURN_IF_ERROR(CheckStateFits(bucket_index, bucket->state_spans, state));
  absl::MutexLock lock(&bucket->mu);
  bucket->steps = state.steps;
  ScatterState(bucket->state_spans, state, bucket->state_arrays());
  return absl::OkStatus();
}

int64_t CpuShardOptimizer::state_bytes(int bucket_index) const {
  const Bucket* bucket = FindBucket(bucket_index);
  return bucket == nullptr ? 0 : bucket->state_bytes;
}

int64_t CpuShardOptimizer::total_state_bytes() const {
  absl::MutexLock lock(&mu_);
  int64_t total = 0;
  for (const auto& [index, bucket] : buckets_) total += bucket->state_bytes;
  return total;
}

}  // namespace

StateLayout ParameterStateLayout(v1::OptimizerSpec::Kind kind,
                                 const HyperParameters& hp) {
  StateLayout layout;
  auto& names = layout.names;
  switch (kind) {
    case v1::OptimizerSpec::SGD:
      if (hp.momentum != 0) names[0] = "momentum_buffer";
      break;
    case v1::OptimizerSpec::ADAM:
    case v1::OptimizerSpec::ADAMW:
      names[0] = "exp_avg";
      names[1] = "exp_avg_sq";
      if (hp.amsgrad) names[2] = "max_exp_avg_sq";
      break;
    case v1::OptimizerSpec::ADAGRAD:
      names[0] = "sum";
      // torch.full_like(p, initial_accumulator_value): rounded to fp32.
      layout.initial[0] = static_cast<float>(hp.initial_accumulator_value);
      break;
    case v1::OptimizerSpec::RMSPROP:
      names[0] = "square_avg";
      if (hp.momentum > 0) names[1] = "momentum_buffer";
      if (hp.centered) names[2] = "grad_avg";
      break;
    case v1::OptimizerSpec::LION:
      names[0] = "exp_avg";
      break;
    default:
      break;
  }
  return layout;
}

bool IsSupportedOptimizerKind(v1::OptimizerSpec::Kind kind) {
  switch (kind) {
    case v1::OptimizerSpec::SGD:
    case v1::OptimizerSpec::ADAM:
    case v1::OptimizerSpec::ADAMW:
    case v1::OptimizerSpec::ADAGRAD:
    case v1::OptimizerSpec::RMSPROP:
    case v1::OptimizerSpec::LION:
      return true;
    default:
      return false;
  }
}

absl::Status SortAndCheckSpans(int bucket_index,
                               std::vector<ParamSpan>& spans) {
  if (bucket_index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bucket index must be >= 0, got ", bucket_index));
  }
  if (spans.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bucket ", bucket_index, " has no parameter spans"));
  }
  absl::flat_hash_set<std::string> names;
  for (const ParamSpan& span : spans) {
    if (span.offset < 0 || span.numel < 0 || span.offset > kMaxBucketElements ||
        span.numel > kMaxBucketElements) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bucket ", bucket_index, ": parameter '", span.name,
          "' has an invalid span (offset ", span.offset, ", numel ",
          span.numel, ")"));
    }
    if (!names.insert(span.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("bucket ", bucket_index, ": parameter '", span.name,
                       "' appears twice"));
    }
  }
  std::sort(spans.begin(), spans.end(),
            [](const ParamSpan& a, const ParamSpan& b) {
              return a.offset < b.offset;
            });
  for (size_t i = 1; i < spans.size(); ++i) {
    const ParamSpan& prev = spans[i - 1];
    if (prev.offset + prev.numel > spans[i].offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bucket ", bucket_index, ": parameters '", prev.name, "' [",
          prev.offset, ", ", prev.offset + prev.numel, ") and '",
          spans[i].name, "' [", spans[i].offset, ", ",
          spans[i].offset + spans[i].numel, ") overlap"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<HyperParameters> ResolveSpanHyperParameters(
    const v1::OptimizerSpec& spec, int bucket_index, const ParamSpan& span) {
  HyperParameters hp = ResolveHyperParameters(spec, span.name);
  if (!(hp.lr > 0) || !std::isfinite(hp.lr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bucket ", bucket_index, ": parameter '", span.name,
                     "' resolves to learning rate ", hp.lr,
                     "; it must be > 0 and finite"));
  }
  return hp;
}

namespace {

// The names of a span's state tensors, in array order.
std::vector<std::string> StateNames(const StateLayout& layout) {
  std::vector<std::string> names;
  for (const char* name : layout.names) {
    if (name != nullptr) names.emplace_back(name);
  }
  return names;
}

}  // namespace

BucketStateView ViewStateArrays(const std::vector<StateSpan>& spans,
                                int64_t steps, const StateArrays& arrays) {
  BucketStateView view;
  view.steps = steps;
  for (const StateSpan& span : spans) {
    SpanStateView& out = view.spans.emplace_back();
    out.name = span.name;
    out.numel = span.numel;
    for (int k = 0; k < kMaxStateArrays; ++k) {
      if (span.layout.names[k] == nullptr) continue;
      out.tensors.emplace_back(
          span.layout.names[k],
          absl::Span<const float>(arrays[k] + span.state_offset, span.numel));
    }
  }
  return view;
}

absl::Status CheckStateFits(int bucket_index,
                            const std::vector<StateSpan>& spans,
                            const BucketState& state) {
  if (state.steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bucket ", bucket_index, ": step count ", state.steps, " is < 0"));
  }
  if (state.spans.size() != spans.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bucket ", bucket_index, ": the state has ", state.spans.size(),
        " parameters with state, the bucket ", spans.size()));
  }
  for (size_t s = 0; s < spans.size(); ++s) {
    const SpanState& in = state.spans[s];
    if (in.name != spans[s].name || in.numel != spans[s].numel) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bucket ", bucket_index, ": state entry ", s, " is '", in.name,
          "' (", in.numel, " elements), the bucket has '", spans[s].name,
          "' (", spans[s].numel, " elements) there"));
    }
    const std::vector<std::string> names = StateNames(spans[s].layout);
    if (in.tensors.size() != names.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", in.name, "': ", in.tensors.size(),
          " state tensors, the optimizer keeps ", names.size()));
    }
    for (size_t i = 0; i < names.size(); ++i) {
      const auto& [name, values] = in.tensors[i];
      if (name != names[i] ||
          static_cast<int64_t>(values.size()) != in.numel) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter '", in.name, "': state tensor ", i, " is '", name,
            "' with ", values.size(), " elements; expected '", names[i],
            "' with ", in.numel));
      }
    }
  }
  return absl::OkStatus();
}

void ScatterState(const std::vector<StateSpan>& spans,
                  const BucketState& state, const StateArrays& arrays) {
  for (size_t s = 0; s < spans.size(); ++s) {
    size_t i = 0;  // tensors are in array order
    for (int k = 0; k < kMaxStateArrays; ++k) {
      if (spans[s].layout.names[k] == nullptr) continue;
      const std::vector<float>& values = state.spans[s].tensors[i++].second;
      std::copy(values.begin(), values.end(),
                arrays[k] + spans[s].state_offset);
    }
  }
}

absl::StatusOr<BucketState> ShardOptimizer::ExportState(int bucket_index) const {
  absl::StatusOr<BucketStateView> view = ViewState(bucket_index);
  if (!view.ok()) return view.status();
  BucketState state;
  state.steps = view->steps;
  for (const SpanStateView& span : view->spans) {
    SpanState& out = state.spans.emplace_back();
    out.name = span.name;
    out.numel = span.numel;
    for (const auto& [name, data] : span.tensors) {
      out.tensors.emplace_back(name, std::vector<float>(data.begin(), data.end()));
    }
  }
  return state;
}

absl::StatusOr<std::unique_ptr<ShardOptimizer>> ShardOptimizer::Create(
    const v1::OptimizerSpec& spec) {
  return Create(spec, CpuOptimizerOptions());
}

absl::StatusOr<std::unique_ptr<ShardOptimizer>> ShardOptimizer::Create(
    const v1::OptimizerSpec& spec, const CpuOptimizerOptions& options) {
  if (options.num_threads < 1 || options.min_elements_per_thread < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CPU optimizer options: num_threads (", options.num_threads,
        ") and min_elements_per_thread (", options.min_elements_per_thread,
        ") must be >= 1"));
  }
  if (!IsSupportedOptimizerKind(spec.kind())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer kind ", v1::OptimizerSpec::Kind_Name(spec.kind()),
        " is not supported; use SGD, ADAM, ADAMW, ADAGRAD, RMSPROP or LION"));
  }
  return std::unique_ptr<ShardOptimizer>(new CpuShardOptimizer(spec, options));
}

}  // namespace pshard::worker
