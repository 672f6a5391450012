#include "worker/hook/zero_hook.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "shard/assignment.h"
#include "worker/comm/reduce_ops.h"

namespace pshard::worker {

namespace {

// The running partial (clip_math.h) of n gradients, in 8 interleaved
// accumulators combined in a fixed order at the end: deterministic, and
// without one long chain of dependent double additions (which -O3 may not
// reorder), several times faster.
double HostPartialNorm(const float* g, int64_t n, NormKind kind) {
  constexpr int kLanes = 8;
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) acc[k] = AccumulateNorm(acc[k], g[i + k], kind);
  }
  for (; i < n; ++i) acc[0] = AccumulateNorm(acc[0], g[i], kind);
  double total = acc[0];
  for (int k = 1; k < kLanes; ++k) total = CombineNorms(total, acc[k], kind);
  return total;
}

// Buckets in host memory (BucketStorage); the owner's step runs on the
// communicator's thread, in the reduction's completion. With bf16
// parameters the owner steps its pieces' fp32 master weights and writes
// them back rounded; with bf16 gradients it widens the reduced gradient
// into fp32 first (the optimizer only ever sees fp32).
class HostMemory final : public HookMemory {
 public:
  HostMemory(ShardOptimizer* optimizer, DataType param_dtype,
             DataType grad_dtype)
      : optimizer_(optimizer),
        param_dtype_(param_dtype),
        grad_dtype_(grad_dtype) {}

  DataType param_dtype() const override { return param_dtype_; }
  DataType grad_dtype() const override { return grad_dtype_; }

  // The re-pack is in place (BucketStorage::Rearrange): a program's views
  // from before it still point into allocated memory.
  absl::Status Arrange(const BucketLayout& layout) override {
    if (storage_ != nullptr) return storage_->Rearrange(layout);
    ASSIGN_OR_RETURN(storage_,
                     BucketStorage::Create(layout, param_dtype_, grad_dtype_));
    return absl::OkStatus();
  }

  void* bucket_params(int b) override { return storage_->bucket_params(b); }
  void* bucket_grads(int b) override { return storage_->bucket_grads(b); }
  const std::vector<void*>& param_views() const override {
    return storage_->param_views();
  }
  const std::vector<void*>& grad_views() const override {
    return storage_->grad_views();
  }

  absl::Status WriteFloats(void* dst, DataType dtype, const float* values,
                           int64_t n) override {
    FromFloats(values, dtype, n, dst);
    return absl::OkStatus();
  }

  absl::Status ReadFloats(const void* src, DataType dtype, int64_t n,
                          float* out) override {
    ToFloats(src, dtype, n, out);
    return absl::OkStatus();
  }

  absl::Status AdoptOwnedPiece(int index, const float* initial,
                               int64_t numel) override {
    if (index < 0 || numel < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("piece ", index, " of ", numel, " elements"));
    }
    if (index >= static_cast<int>(owned_.size())) owned_.resize(index + 1);
    OwnedPiece& piece = owned_[index];
    if (param_dtype_ != DataType::kFloat32) {
      piece.master.assign(initial, initial + numel);
    }
    if (grad_dtype_ != DataType::kFloat32) piece.grads.assign(numel, 0.0f);
    return absl::OkStatus();
  }

  absl::Status ReadMasterParams(int index, int64_t offset, int64_t n,
                                float* out) override {
    if (index < 0 || index >= static_cast<int>(owned_.size()) ||
        owned_[index].master.empty()) {
      return HookMemory::ReadMasterParams(index, offset, n, out);
    }
    const std::vector<float>& master = owned_[index].master;
    if (offset < 0 || n < 0 || offset + n > static_cast<int64_t>(master.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "piece ", index, ": master weights [", offset, ", ", offset + n,
          ") are outside [0, ", master.size(), ")"));
    }
    std::copy(master.begin() + offset, master.begin() + offset + n, out);
    return absl::OkStatus();
  }

  // The training thread wrote the gradients before announcing them.
  absl::StatusOr<std::shared_ptr<Work>> OrderAfterGradients(int) override {
    return nullptr;
  }

  absl::Status OwnerStep(int index, void* params, void* grads, int64_t numel,
                         float divisor,
                         const HyperParameterOverrides& overrides) override {
    ASSIGN_OR_RETURN(float* g, WidenedGradients(index, grads, numel));
    if (divisor != 1) DivideInPlace(g, numel, DataType::kFloat32, divisor);
    return Step(index, params, g, numel, overrides);
  }

  absl::Status PrepareNorms(int num_pieces, int world_size) override {
    piece_norms_.assign(num_pieces, 0);
    slots_.assign(world_size, 0);
    return absl::OkStatus();
  }

  absl::Status PartialNorm(int index, void* grads, int64_t numel,
                           float divisor, NormKind kind) override {
    ASSIGN_OR_RETURN(float* g, WidenedGradients(index, grads, numel));
    if (divisor != 1) DivideInPlace(g, numel, DataType::kFloat32, divisor);
    piece_norms_[index] = HostPartialNorm(g, numel, kind);
    return absl::OkStatus();
  }

  absl::Status GatherNorms(int rank, NormKind kind) override {
    double acc = 0;
    for (double piece : piece_norms_) acc = CombineNorms(acc, piece, kind);
    std::fill(slots_.begin(), slots_.end(), 0.0f);
    slots_[rank] = PartialNormValue(acc, kind);
    return absl::OkStatus();
  }

  float* norm_slots() override { return slots_.data(); }

  absl::Status ClippedOwnerStep(
      int index, void* params, void* grads, int64_t numel, double max_norm,
      NormKind kind, const HyperParameterOverrides& overrides) override {
    // PartialNorm already widened and averaged them.
    float* g = grad_dtype_ == DataType::kFloat32
                   ? static_cast<float*>(grads)
                   : owned_[index].grads.data();
    const float coef = ClipCoefficient(
        TotalNorm(slots_.data(), static_cast<int>(slots_.size()), kind),
        max_norm);
    // As torch: multiplied even by 1 (which changes nothing).
    for (int64_t i = 0; i < numel; ++i) g[i] *= coef;
    return Step(index, params, g, numel, overrides);
  }

  absl::StatusOr<double> TotalGradNorm(NormKind kind) override {
    return TotalNorm(slots_.data(), static_cast<int>(slots_.size()), kind);
  }

  // FinishStep's host wait orders the next forward.
  absl::Status OrderComputeAfter(Work&) override { return absl::OkStatus(); }

  // The forward runs on this thread: wait here.
  absl::Status OrderComputeAfterBroadcast(Work& work,
                                          absl::Duration timeout) override {
    return work.Wait(timeout);
  }

 private:
  // What the owner keeps for a piece under mixed precision.
  struct OwnedPiece {
    std::vector<float> master;  // bf16 parameters: fp32 master weights
    std::vector<float> grads;   // bf16 gradients: widened, fp32
  };

  // Piece `index`'s gradients as fp32: in place, or widened into its room.
  absl::StatusOr<float*> WidenedGradients(int index, void* grads,
                                          int64_t numel) {
    if (grad_dtype_ == DataType::kFloat32) return static_cast<float*>(grads);
    std::vector<float>& room = owned_[index].grads;
    if (static_cast<int64_t>(room.size()) != numel) {
      return absl::InternalError(absl::StrCat(
          "piece ", index, " has no room for its fp32 gradients"));
    }
    ToFloats(grads, grad_dtype_, numel, room.data());
    return room.data();
  }

  // The optimizer's step on fp32 gradients `g`: on the parameters, or on
  // the master weights, then rounded into the bf16 parameters.
  absl::Status Step(int index, void* params, const float* g, int64_t numel,
                    const HyperParameterOverrides& overrides) {
    if (param_dtype_ == DataType::kFloat32) {
      return optimizer_->Step(index, static_cast<float*>(params), g, overrides);
    }
    std::vector<float>& master = owned_[index].master;
    RETURN_IF_ERROR(optimizer_->Step(index, master.data(), g, overrides));
    FromFloats(master.data(), param_dtype_, numel, params);
    return absl::OkStatus();
  }

  ShardOptimizer* const optimizer_;
  const DataType param_dtype_;
  const DataType grad_dtype_;
  std::unique_ptr<BucketStorage> storage_;
  // By piece index; sized before the first step (AdoptOwnedPiece), then
  // each piece's entry is touched only by that piece's steps.
  std::vector<OwnedPiece> owned_;
  // Clipping: per piece, its partial (sum of squares or largest |g|),
  // written and read in the communicator's order; the slots the hook
  // all-reduces.
  std::vector<double> piece_norms_;
  std::vector<float> slots_;
};

}  // namespace

GradClipping GradClipping::FromSpec(const v1::OptimizerSpec& spec) {
  GradClipping clipping;
  if (spec.has_max_grad_norm()) clipping.max_norm = spec.max_grad_norm();
  if (std::isinf(spec.norm_type())) clipping.kind = NormKind::kInf;
  return clipping;
}

MixedPrecision MixedPrecision::FromSpec(const v1::JobSpec& spec) {
  MixedPrecision precision;
  precision.param_dtype = PrecisionDataType(spec.precision().param_dtype());
  precision.reduce_dtype = PrecisionDataType(spec.precision().reduce_dtype());
  return precision;
}

DataType PrecisionDataType(v1::PrecisionSpec::DType dtype) {
  return dtype == v1::PrecisionSpec::BF16 ? DataType::kBFloat16
                                          : DataType::kFloat32;
}

absl::string_view PrecisionDTypeName(DataType dtype) {
  return v1::PrecisionSpec::DType_Name(
      dtype == DataType::kBFloat16 ? v1::PrecisionSpec::BF16
                                   : v1::PrecisionSpec::FP32);
}

std::optional<DataType> ParsePrecisionDType(absl::string_view name) {
  v1::PrecisionSpec::DType dtype;
  if (!v1::PrecisionSpec::DType_Parse(std::string(name), &dtype) ||
      dtype == v1::PrecisionSpec::DTYPE_UNSPECIFIED) {
    return std::nullopt;
  }
  return PrecisionDataType(dtype);
}

std::unique_ptr<HookMemory> NewHostMemory(ShardOptimizer* optimizer,
                                          DataType param_dtype,
                                          DataType grad_dtype) {
  return std::make_unique<HostMemory>(optimizer, param_dtype, grad_dtype);
}

absl::StatusOr<std::unique_ptr<ZeroHook>> ZeroHook::Create(
    std::vector<ParameterInfo> params, Communicator* comm,
    std::unique_ptr<ShardOptimizer> optimizer, AssignmentProvider provider,
    const ZeroHookOptions& options) {
  std::unique_ptr<HookMemory> memory;
  if (optimizer != nullptr) {
    memory = NewHostMemory(optimizer.get(), options.precision.param_dtype,
                           options.precision.reduce_dtype);
  }
  std::unique_ptr<ZeroHook> hook(
      new ZeroHook(std::move(params), comm, std::move(optimizer),
                   std::move(memory), std::move(provider), options));
  RETURN_IF_ERROR(hook->Init());
  return hook;
}

ZeroHook::ZeroHook(std::vector<ParameterInfo> params, Communicator* comm,
                   std::unique_ptr<ShardOptimizer> optimizer,
                   std::unique_ptr<HookMemory> memory,
                   AssignmentProvider provider, const ZeroHookOptions& options)
    : infos_(std::move(params)),
      comm_(comm),
      optimizer_(std::move(optimizer)),
      memory_(std::move(memory)),
      provider_(std::move(provider)),
      options_(options) {}

absl::Status ZeroHook::Init() {
  if (infos_.empty()) {
    return absl::InvalidArgumentError("the model has no parameters");
  }
  if (comm_ == nullptr || optimizer_ == nullptr || memory_ == nullptr ||
      !provider_) {
    return absl::InvalidArgumentError(
        "a communicator, an optimizer and an assignment provider are needed");
  }
  if (!(options_.bucket_cap_mb > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bucket_cap_mb must be > 0, got ", options_.bucket_cap_mb));
  }
  if (options_.piece_bytes < 0 || options_.broadcast_lag < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "piece_bytes and broadcast_lag must be >= 0, got ",
        options_.piece_bytes, " and ", options_.broadcast_lag));
  }
  if (options_.clipping.max_norm != 0 &&
      !(std::isfinite(options_.clipping.max_norm) &&
        options_.clipping.max_norm > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("clipping.max_norm must be finite and > 0 (or 0: none), "
                     "got ", options_.clipping.max_norm));
  }
  if (memory_->param_dtype() != options_.precision.param_dtype ||
      memory_->grad_dtype() != options_.precision.reduce_dtype) {
    return absl::InvalidArgumentError(
        "the hook's memory does not hold the dtypes of options.precision");
  }
  const int n = static_cast<int>(infos_.size());
  issued_broadcasts_.assign(n, {});
  pending_broadcasts_.assign(n, {});
  ASSIGN_OR_RETURN(
      BucketLayout layout,
      BucketLayout::Build(infos_, BucketLayout::DefaultReadyOrder(n),
                          CapBytes(), options_.precision.param_dtype));
  layout_ = std::make_unique<BucketLayout>(std::move(layout));
  RETURN_IF_ERROR(memory_->Arrange(*layout_));
  RefreshFloatViews();
  param_ready_.assign(n, 0);
  return absl::OkStatus();
}

void ZeroHook::RefreshFloatViews() {
  auto as_floats = [](const std::vector<void*>& views, DataType dtype) {
    std::vector<float*> out;
    if (dtype != DataType::kFloat32) return out;
    for (void* v : views) out.push_back(static_cast<float*>(v));
    return out;
  };
  float_params_ = as_floats(memory_->param_views(), memory_->param_dtype());
  float_grads_ = as_floats(memory_->grad_views(), memory_->grad_dtype());
}

void* ZeroHook::PieceParams(int p) {
  const Piece& piece = pieces_[p];
  return AdvanceElements(memory_->bucket_params(piece.bucket), piece.offset,
                         memory_->param_dtype());
}

void* ZeroHook::PieceGrads(int p) {
  const Piece& piece = pieces_[p];
  return AdvanceElements(memory_->bucket_grads(piece.bucket), piece.offset,
                         memory_->grad_dtype());
}

absl::Status ZeroHook::CheckIndex(int index) const {
  if (index < 0 || index >= static_cast<int>(infos_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter index ", index, " is outside [0, ", infos_.size(), ")"));
  }
  return absl::OkStatus();
}

absl::Status ZeroHook::CheckRange(int index, int64_t offset,
                                  int64_t count) const {
  RETURN_IF_ERROR(CheckIndex(index));
  const ParameterInfo& info = infos_[index];
  if (offset < 0 || count < 0 || count > info.numel ||
      offset > info.numel - count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "elements [", offset, ", ", offset + count, ") are outside parameter \"",
        info.name, "\" of ", info.numel));
  }
  return absl::OkStatus();
}

absl::Status ZeroHook::CheckTensorSize(int index, size_t size,
                                       absl::string_view what) const {
  RETURN_IF_ERROR(CheckIndex(index));
  const ParameterInfo& info = infos_[index];
  if (static_cast<int64_t>(size) != info.numel) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter \"", info.name, "\" has ", info.numel,
                     " elements, ", what, " ", size));
  }
  return absl::OkStatus();
}

absl::Status ZeroHook::SetParameter(int index, absl::Span<const float> values) {
  RETURN_IF_ERROR(CheckTensorSize(index, values.size(), "values given:"));
  const ParameterInfo& info = infos_[index];
  if (state_ == HookState::kInitialized) {
    return absl::FailedPreconditionError(absl::StrCat(
        "parameter \"", info.name, "\" set after the first step (the "
        "owners' master weights have started)"));
  }
  RETURN_IF_ERROR(memory_->WriteFloats(memory_->param_views()[index],
                                       memory_->param_dtype(), values.data(),
                                       info.numel));
  if (memory_->param_dtype() == DataType::kFloat32) return absl::OkStatus();
  initial_params_.resize(infos_.size());
  initial_params_[index].assign(values.begin(), values.end());
  return absl::OkStatus();
}

absl::Status ZeroHook::SetGradient(int index, absl::Span<const float> values) {
  RETURN_IF_ERROR(CheckTensorSize(index, values.size(), "values given:"));
  return memory_->WriteFloats(memory_->grad_views()[index],
                              memory_->grad_dtype(), values.data(),
                              static_cast<int64_t>(values.size()));
}

absl::Status ZeroHook::ReadParameter(int index, absl::Span<float> out) const {
  RETURN_IF_ERROR(CheckTensorSize(index, out.size(), "room given:"));
  return ReadParameterRange(index, 0, out);
}

absl::Status ZeroHook::ReadParameterRange(int index, int64_t offset,
                                          absl::Span<float> out) const {
  const int64_t count = static_cast<int64_t>(out.size());
  RETURN_IF_ERROR(CheckRange(index, offset, count));
  return memory_->ReadFloats(
      AdvanceElements(memory_->param_views()[index], offset,
                      memory_->param_dtype()),
      memory_->param_dtype(), count, out.data());
}

absl::Status ZeroHook::ReadOwnedParameter(int index, int64_t offset,
                                          absl::Span<float> out) const {
  const int64_t count = static_cast<int64_t>(out.size());
  RETURN_IF_ERROR(CheckRange(index, offset, count));
  const ParameterInfo& info = infos_[index];
  if (state_ != HookState::kInitialized) {
    return absl::FailedPreconditionError(
        "owned parameters are read after the first step");
  }
  // The range, in bucket elements.
  const int b = layout_->bucket_of(index);
  const int64_t begin = layout_->offset_of(index) + offset;
  const int64_t end = begin + count;
  int64_t covered = 0;
  for (int p : bucket_pieces_[b]) {
    const Piece& piece = pieces_[p];
    const int64_t lo = std::max(begin, piece.offset);
    const int64_t hi = std::min(end, piece.offset + piece.numel);
    if (lo >= hi) continue;
    if (piece.owner != comm_->rank()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", comm_->rank(), " does not own elements [", lo - begin + offset,
          ", ", hi - begin + offset, ") of parameter \"", info.name, "\""));
    }
    float* dst = out.data() + (lo - begin);
    if (memory_->param_dtype() != DataType::kFloat32) {
      RETURN_IF_ERROR(
          memory_->ReadMasterParams(p, lo - piece.offset, hi - lo, dst));
    } else {
      // fp32 parameters are the optimizer's own.
      RETURN_IF_ERROR(memory_->ReadFloats(
          AdvanceElements(memory_->bucket_params(piece.bucket), lo,
                          DataType::kFloat32),
          DataType::kFloat32, hi - lo, dst));
    }
    covered += hi - lo;
  }
  if (covered != count) {
    return absl::InternalError(absl::StrCat(
        "the pieces of parameter \"", info.name, "\" cover ", covered, " of ",
        count, " elements"));
  }
  return absl::OkStatus();
}

absl::Status ZeroHook::AdoptOwnedPieces() {
  const absl::flat_hash_map<std::string, int> index_of = [&] {
    absl::flat_hash_map<std::string, int> m;
    for (int i = 0; i < static_cast<int>(infos_.size()); ++i) {
      m[infos_[i].name] = i;
    }
    return m;
  }();
  std::vector<float> initial;
  for (int p = 0; p < static_cast<int>(pieces_.size()); ++p) {
    const Piece& piece = pieces_[p];
    if (piece.owner != comm_->rank()) continue;
    // The piece's current values widened, then SetParameter's fp32 values
    // over them where there are some.
    initial.assign(piece.numel, 0.0f);
    RETURN_IF_ERROR(memory_->ReadFloats(PieceParams(p), memory_->param_dtype(),
                                        piece.numel, initial.data()));
    const std::vector<ParamSpan> in_piece = PieceSpans(p);
    const std::vector<ParamSpan> in_param =
        PieceSpans(p, /*offsets_in_parameters=*/true);
    for (size_t k = 0; k < in_piece.size(); ++k) {
      const int i = index_of.at(in_piece[k].name);
      if (i >= static_cast<int>(initial_params_.size()) ||
          initial_params_[i].empty()) {
        continue;
      }
      const auto from = initial_params_[i].begin() + in_param[k].offset;
      std::copy(from, from + in_piece[k].numel,
                initial.begin() + in_piece[k].offset);
    }
    RETURN_IF_ERROR(memory_->AdoptOwnedPiece(p, initial.data(), piece.numel));
  }
  initial_params_.clear();
  return absl::OkStatus();
}

int64_t ZeroHook::CapBytes() const {
  return std::max<int64_t>(
      1, static_cast<int64_t>(options_.bucket_cap_mb * 1024 * 1024));
}

ZeroHook::~ZeroHook() {
  // Owner steps still queued on the communicator use this hook's memory and
  // optimizer: make sure none is left before they go.
  std::vector<std::shared_ptr<Work>> all = works_;
  for (const auto* by_param : {&issued_broadcasts_, &pending_broadcasts_}) {
    for (const auto& works : *by_param) {
      all.insert(all.end(), works.begin(), works.end());
    }
  }
  bool pending = false;
  for (const auto& work : all) pending |= !work->IsCompleted();
  if (pending) {
    comm_->Abort(absl::CancelledError("ZeroHook destroyed mid-step"));
    for (const auto& work : all) (void)work->Wait(options_.timeout);
  }
}

int64_t ZeroHook::bucket_steps(int b) const {
  if (piece_steps_ == nullptr || b < 0 || b >= layout_->num_buckets()) {
    return 0;
  }
  std::optional<int64_t> steps;
  for (int p : bucket_pieces_[b]) {
    if (pieces_[p].owner != comm_->rank()) continue;
    const int64_t piece = piece_steps_[p].load();
    if (steps.has_value() && *steps != piece) return -1;
    steps = piece;
  }
  return steps.value_or(0);
}

int64_t ZeroHook::owned_elements(int b) const {
  if (state_ != HookState::kInitialized || b < 0 ||
      b >= layout_->num_buckets()) {
    return 0;
  }
  int64_t owned = 0;
  for (int p : bucket_pieces_[b]) {
    if (pieces_[p].owner == comm_->rank()) owned += pieces_[p].numel;
  }
  return owned;
}

int64_t ZeroHook::bucket_state_bytes(int b) const {
  if (state_ != HookState::kInitialized || b < 0 ||
      b >= layout_->num_buckets()) {
    return 0;
  }
  int64_t bytes = 0;
  for (int p : bucket_pieces_[b]) bytes += optimizer_->state_bytes(p);
  return bytes;
}

std::vector<ParamSpan> ZeroHook::PieceSpans(int p,
                                            bool offsets_in_parameters) const {
  const Piece& piece = pieces_[p];
  std::vector<ParamSpan> spans;
  for (const ParamSpan& span : layout_->Spans(piece.bucket)) {
    const int64_t begin = std::max(span.offset, piece.offset);
    const int64_t end =
        std::min(span.offset + span.numel, piece.offset + piece.numel);
    if (begin < end) {
      spans.push_back(ParamSpan{
          span.name, begin - (offsets_in_parameters ? span.offset : piece.offset),
          end - begin});
    }
  }
  return spans;
}

absl::flat_hash_map<std::string, int64_t> ZeroHook::NumelByName() const {
  absl::flat_hash_map<std::string, int64_t> numel;
  for (const ParameterInfo& info : infos_) numel[info.name] = info.numel;
  return numel;
}

absl::flat_hash_map<std::string, int64_t> ZeroHook::OffsetsInParameters(
    int p) const {
  absl::flat_hash_map<std::string, int64_t> offsets;
  for (const ParamSpan& span : PieceSpans(p, /*offsets_in_parameters=*/true)) {
    offsets[span.name] = span.offset;
  }
  return offsets;
}

absl::StatusOr<std::vector<ZeroHook::OwnedParameter>>
ZeroHook::OwnedParameters() const {
  if (state_ != HookState::kInitialized) {
    return absl::FailedPreconditionError(
        "no owned parameters before the first step has finished");
  }
  std::vector<OwnedParameter> out;
  absl::flat_hash_map<std::string, size_t> index;  // name -> out[i]
  for (int p = 0; p < static_cast<int>(pieces_.size()); ++p) {
    if (pieces_[p].owner != comm_->rank()) continue;
    for (const ParamSpan& span : PieceSpans(p, /*offsets_in_parameters=*/true)) {
      auto [it, added] = index.try_emplace(span.name, out.size());
      if (added) {
        out.push_back({span.name, span.offset, span.numel});
        continue;
      }
      // A rank's pieces of one parameter are adjacent (one range).
      OwnedParameter& param = out[it->second];
      const int64_t begin = std::min(param.offset, span.offset);
      const int64_t end =
          std::max(param.offset + param.numel, span.offset + span.numel);
      if (end - begin != param.numel + span.numel) {
        return absl::InternalError(absl::StrCat(
            "rank ", comm_->rank(), " owns parts of parameter '", span.name,
            "' that are not adjacent"));
      }
      param.offset = begin;
      param.numel = end - begin;
    }
  }
  return out;
}

absl::StatusOr<std::vector<ParameterOptimizerStateView>>
ZeroHook::ViewOptimizerState() const {
  if (state_ != HookState::kInitialized) {
    return absl::FailedPreconditionError(
        "no optimizer state before the first step has finished");
  }
  std::vector<ParameterOptimizerStateView> out;
  absl::flat_hash_map<std::string, size_t> index;  // name -> out[i]
  const absl::flat_hash_map<std::string, int64_t> numel = NumelByName();
  for (int p = 0; p < static_cast<int>(pieces_.size()); ++p) {
    if (pieces_[p].owner != comm_->rank()) continue;
    ASSIGN_OR_RETURN(BucketStateView piece, optimizer_->ViewState(p));
    const absl::flat_hash_map<std::string, int64_t> offset_in_param =
        OffsetsInParameters(p);
    for (SpanStateView& span : piece.spans) {
      auto [it, added] = index.try_emplace(span.name, out.size());
      if (added) {
        ParameterOptimizerStateView& param = out.emplace_back();
        param.name = span.name;
        param.step = piece.steps;
        param.numel = numel.at(span.name);
        for (const auto& tensor : span.tensors) {
          param.tensor_names.push_back(tensor.first);
        }
      }
      ParameterOptimizerStateView::Part& part = out[it->second].parts.emplace_back();
      part.offset = offset_in_param.at(span.name);
      for (const auto& tensor : span.tensors) part.tensors.push_back(tensor.second);
    }
    // Parameters that keep no state: their step only, which their bucket's
    // lr schedule resumes from.
    for (const ParamSpan& span : PieceSpans(p)) {
      if (!index.try_emplace(span.name, out.size()).second) continue;
      ParameterOptimizerStateView& param = out.emplace_back();
      param.name = span.name;
      param.step = piece.steps;
      param.numel = numel.at(span.name);
    }
  }
  return out;
}

absl::StatusOr<std::vector<ParameterOptimizerState>>
ZeroHook::ExportOptimizerState() const {
  ASSIGN_OR_RETURN(std::vector<ParameterOptimizerStateView> views,
                   ViewOptimizerState());
  std::vector<ParameterOptimizerState> out;
  out.reserve(views.size());
  for (const ParameterOptimizerStateView& view : views) {
    if (view.tensor_names.empty()) {  // no state: the step only
      ParameterOptimizerState& param = out.emplace_back();
      param.name = view.name;
      param.step = view.step;
      continue;
    }
    // The parts joined into contiguous runs: the whole parameter, or under
    // SHARDED this rank's slice of it (one run: a rank's range is one).
    std::vector<const ParameterOptimizerStateView::Part*> parts;
    for (const ParameterOptimizerStateView::Part& part : view.parts) {
      parts.push_back(&part);
    }
    std::sort(parts.begin(), parts.end(), [](const auto* a, const auto* b) {
      return a->offset < b->offset;
    });
    for (size_t first = 0; first < parts.size();) {
      size_t last = first;
      int64_t end = parts[first]->offset +
                    static_cast<int64_t>(parts[first]->tensors[0].size());
      while (last + 1 < parts.size() && parts[last + 1]->offset == end) {
        ++last;
        end += static_cast<int64_t>(parts[last]->tensors[0].size());
      }
      ParameterOptimizerState& param = out.emplace_back();
      param.name = view.name;
      param.step = view.step;
      param.offset = parts[first]->offset;
      for (const std::string& name : view.tensor_names) {
        param.tensors.emplace_back(name,
                                   std::vector<float>(end - param.offset));
      }
      for (size_t k = first; k <= last; ++k) {
        for (size_t t = 0; t < parts[k]->tensors.size(); ++t) {
          std::copy(parts[k]->tensors[t].begin(), parts[k]->tensors[t].end(),
                    param.tensors[t].second.begin() +
                        (parts[k]->offset - param.offset));
        }
      }
      first = last + 1;
    }
  }
  return out;
}

absl::Status ZeroHook::SetInitialOptimizerState(
    std::vector<ParameterOptimizerState> state) {
  if (state_ == HookState::kInitialized || steps_finished_ > 0) {
    return absl::FailedPreconditionError(
        "the optimizer state can only be loaded before the first step");
  }
  const absl::flat_hash_map<std::string, int64_t> numel = NumelByName();
  // name -> (offset, end, step) of its entries so far.
  absl::flat_hash_map<std::string,
                      std::vector<std::tuple<int64_t, int64_t, int64_t>>>
      seen;
  for (const ParameterOptimizerState& param : state) {
    auto it = numel.find(param.name);
    if (it == numel.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer state for parameter '", param.name,
          "', which is not registered"));
    }
    if (param.step < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", param.name, "': step ", param.step,
                       " is < 0"));
    }
    const int64_t size =
        param.tensors.empty()
            ? 0
            : static_cast<int64_t>(param.tensors[0].second.size());
    for (const auto& [key, values] : param.tensors) {
      if (static_cast<int64_t>(values.size()) != size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter '", param.name, "' at offset ", param.offset,
            ": state '", key, "' has ", values.size(), " elements, '",
            param.tensors[0].first, "' ", size));
      }
    }
    if (param.offset < 0 || param.offset > it->second - size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter '", param.name, "': state of elements [", param.offset,
          ", ", param.offset + size, ") is outside its ", it->second,
          " elements"));
    }
    for (const auto& [offset, end, step] : seen[param.name]) {
      // A step only (no tensors; every rank holding a slice of a parameter
      // without state exports one) repeats nothing.
      if (offset == param.offset && size > 0 && end > offset) {
        return absl::InvalidArgumentError(absl::StrCat(
            "optimizer state for parameter '", param.name, "' at offset ",
            offset, " given twice"));
      }
      // (A step only covers no elements, so it overlaps nothing.)
      if (size > 0 && end > offset && offset < param.offset + size &&
          param.offset < end) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter '", param.name, "': the state of elements [",
            param.offset, ", ", param.offset + size, ") overlaps [", offset,
            ", ", end, ")"));
      }
      if (step != param.step) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter '", param.name, "': its entries have steps ", step,
            " and ", param.step));
      }
    }
    seen[param.name].emplace_back(param.offset, param.offset + size,
                                  param.step);
  }
  initial_state_ = std::move(state);
  return absl::OkStatus();
}

absl::Status ZeroHook::SetOptimizerStateLoader(OptimizerStateLoader load) {
  if (state_ == HookState::kInitialized || steps_finished_ > 0) {
    return absl::FailedPreconditionError(
        "the optimizer state can only be loaded before the first step");
  }
  if (initial_state_.has_value()) {
    return absl::FailedPreconditionError(
        "optimizer state to load is already set (SetInitialOptimizerState)");
  }
  state_loader_ = std::move(load);
  return absl::OkStatus();
}

absl::Status ZeroHook::LoadOwnedOptimizerState() {
  OptimizerStateLoader load = std::move(state_loader_);
  state_loader_ = nullptr;
  std::vector<ParameterOptimizerState> state;
  absl::flat_hash_set<std::string> loaded;
  for (int p = 0; p < static_cast<int>(pieces_.size()); ++p) {
    if (pieces_[p].owner != comm_->rank()) continue;
    // The fresh state names the spans and the tensors each keeps.
    ASSIGN_OR_RETURN(BucketStateView piece, optimizer_->ViewState(p));
    absl::flat_hash_map<std::string, std::vector<std::string>> names;
    for (const SpanStateView& span : piece.spans) {
      for (const auto& tensor : span.tensors) {
        names[span.name].push_back(tensor.first);
      }
    }
    // Parameters without state too (no tensors): their entry's step is the
    // piece's step count, which its lr schedule goes on from.
    for (const ParamSpan& span : PieceSpans(p)) {
      if (!loaded.insert(span.name).second) continue;
      ASSIGN_OR_RETURN(ParameterOptimizerState saved,
                       load(span.name, names[span.name]));
      state.push_back(std::move(saved));
    }
  }
  initial_state_ = std::move(state);
  return absl::OkStatus();
}

absl::Status ZeroHook::ApplyInitialOptimizerState() {
  // Each parameter's entries (whole, or slices that do not overlap).
  absl::flat_hash_map<std::string, std::vector<const ParameterOptimizerState*>>
      by_name;
  for (const ParameterOptimizerState& param : *initial_state_) {
    by_name[param.name].push_back(&param);
  }
  // The step every entry has (0 when there are none), for a bucket whose
  // parameters have none, if they all have one.
  const int64_t common_step =
      initial_state_->empty() ? 0 : initial_state_->front().step;
  const bool steps_agree = std::all_of(
      initial_state_->begin(), initial_state_->end(),
      [&](const ParameterOptimizerState& param) {
        return param.step == common_step;
      });
  for (int p = 0; p < static_cast<int>(pieces_.size()); ++p) {
    if (pieces_[p].owner != comm_->rank()) continue;
    // The fresh state says which spans keep state, and under which names.
    ASSIGN_OR_RETURN(BucketState piece, optimizer_->ExportState(p));
    const absl::flat_hash_map<std::string, int64_t> offset_in_param =
        OffsetsInParameters(p);
    // The step count, which the lr schedule goes on from, also for a piece
    // whose parameters keep no state: an entry of one of its parameters
    // (a checkpoint's loader gives one for each), else the one step every
    // entry has (every bucket steps every step).
    const std::vector<ParamSpan> spans = PieceSpans(p);
    const auto with_entry =
        std::find_if(spans.begin(), spans.end(), [&](const ParamSpan& span) {
          return by_name.count(span.name) != 0;
        });
    if (with_entry != spans.end()) {
      piece.steps = by_name.at(with_entry->name).front()->step;
    } else if (steps_agree) {
      piece.steps = common_step;
    } else if (piece.spans.empty()) {  // (with state: named just below)
      return absl::InvalidArgumentError(absl::StrCat(
          "the optimizer state to load has no entry for parameter '",
          spans.empty() ? std::string() : spans.front().name,
          "' (it keeps no state, but its entry holds the step its lr "
          "schedule resumes from), and the other entries' steps differ"));
    }
    for (SpanState& span : piece.spans) {
      auto it = by_name.find(span.name);
      if (it == by_name.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the optimizer state to load has no entry for parameter '",
            span.name, "', whose bucket this rank (", comm_->rank(),
            ") owns: at another world size or bucket size, load every "
            "rank's state together"));
      }
      // Elements [begin, begin + span.numel) of the parameter, from the
      // entries that overlap them.
      const int64_t begin = offset_in_param.at(span.name);
      piece.steps = it->second.front()->step;
      int64_t covered = 0;
      for (const ParameterOptimizerState* saved : it->second) {
        const int64_t size =
            saved->tensors.empty()
                ? 0
                : static_cast<int64_t>(saved->tensors[0].second.size());
        const int64_t lo = std::max(begin, saved->offset);
        const int64_t hi = std::min(begin + span.numel, saved->offset + size);
        if (lo >= hi) continue;
        covered += hi - lo;
        for (auto& [key, values] : span.tensors) {
          auto t = std::find_if(saved->tensors.begin(), saved->tensors.end(),
                                [&](const auto& e) { return e.first == key; });
          if (t == saved->tensors.end()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "the optimizer state to load has no '", key,
                "' for parameter '", span.name, "'"));
          }
          const auto from = t->second.begin() + (lo - saved->offset);
          std::copy(from, from + (hi - lo), values.begin() + (lo - begin));
        }
        if (saved->tensors.size() != span.tensors.size()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "parameter '", span.name, "': the state to load has ",
              saved->tensors.size(), " state tensors, the optimizer keeps ",
              span.tensors.size()));
        }
      }
      if (!span.tensors.empty() && covered != span.numel) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the optimizer state to load has no entry for parameter '",
            span.name, "' elements [", begin, ", ", begin + span.numel,
            ") (", covered, " of them covered), which this rank (",
            comm_->rank(), ") owns: at another world size, bucket size or "
            "policy, load every rank's state together"));
      }
    }
    RETURN_IF_ERROR(optimizer_->ImportState(p, piece));
  }
  initial_state_.reset();
  return absl::OkStatus();
}

void ZeroHook::GradientReady(int param_index) {
  if (!error_.ok()) return;
  absl::Status status = MarkGradientReady(param_index);
  if (!status.ok()) error_ = status;
}

absl::Status ZeroHook::MarkGradientReady(int param_index) {
  if (!error_.ok()) return error_;
  const int n = static_cast<int>(infos_.size());
  if (param_index < 0 || param_index >= n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter index ", param_index, " is outside [0, ", n, ")"));
  }
  if (param_ready_[param_index]) {
    return absl::FailedPreconditionError(
        absl::StrCat("gradient of parameter \"", infos_[param_index].name,
                     "\" marked ready twice in one step"));
  }
  param_ready_[param_index] = 1;
  if (state_ != HookState::kInitialized) {
    // Rebuild phase: record the order, hold the gradient.
    observed_order_.push_back(param_index);
    return absl::OkStatus();
  }
  const int b = layout_->bucket_of(param_index);
  if (--bucket_pending_[b] == 0) {
    // Launch in bucket order only, so that every rank issues the same
    // collectives in the same order even if ready orders differed.
    while (next_bucket_ < layout_->num_buckets() &&
           bucket_pending_[next_bucket_] == 0) {
      absl::Status status = LaunchBucket(next_bucket_++);
      // The step is broken, not just this call: FinishStep must fail too.
      if (!status.ok()) return error_ = status;
    }
  }
  return absl::OkStatus();
}

absl::Status ZeroHook::LaunchBucket(int b) {
  ASSIGN_OR_RETURN(std::shared_ptr<Work> ordered,
                   memory_->OrderAfterGradients(b));
  if (ordered != nullptr) works_.push_back(std::move(ordered));
  for (int round : bucket_rounds_[b]) LaunchRound(round);
  return absl::OkStatus();
}

std::vector<CollectiveSegment> ZeroHook::RoundSegments(int round,
                                                       bool params) {
  std::vector<CollectiveSegment> segments;
  for (int p : rounds_[round]) {
    segments.push_back(
        {params ? PieceParams(p) : PieceGrads(p), pieces_[p].numel,
         pieces_[p].owner});
  }
  return segments;
}

void ZeroHook::LaunchRound(int round) {
  const DataType grad_dtype = memory_->grad_dtype();
  // The owners receive the mean (the division fused into the reduction);
  // a round of several owners is one group (a reduce-scatter).
  works_.push_back(comm_->IssueGroup(
      options_.comm_mode == v1::JobSpec::ALLREDUCE_BROADCAST
          ? CollectiveKind::kAllReduce
          : CollectiveKind::kReduceMean,
      RoundSegments(round, /*params=*/false), grad_dtype));
  // After an all-reduce the owner holds the sum: average it in the step (a
  // division, as DDP does, not a multiply by the reciprocal).
  const float divisor = options_.comm_mode == v1::JobSpec::ALLREDUCE_BROADCAST
                            ? static_cast<float>(comm_->world_size())
                            : 1.0f;
  HookMemory* memory = memory_.get();
  for (int p : rounds_[round]) {
    if (pieces_[p].owner != comm_->rank()) continue;
    const int64_t numel = pieces_[p].numel;
    void* grads = PieceGrads(p);
    void* params = PieceParams(p);
    const int64_t grad_bytes = numel * DataTypeSize(grad_dtype);
    const int64_t param_bytes = numel * DataTypeSize(memory_->param_dtype());
    if (options_.clipping.enabled()) {
      // The owner's step waits for the global norm (IssueClippedSteps); its
      // piece's share of the norm is taken now, in the reduction's
      // completion.
      const NormKind kind = options_.clipping.kind;
      works_.push_back(comm_->EnqueueTouching(
          [memory, p, grads, numel, divisor, kind] {
            return memory->PartialNorm(p, grads, numel, divisor, kind);
          },
          {{grads, grad_bytes}}));
      continue;
    }
    std::atomic<int64_t>* counter = &piece_steps_[p];
    works_.push_back(comm_->EnqueueTouching(
        [memory, counter, p, grads, params, numel, divisor,
         overrides = hyper_parameters_]() -> absl::Status {
          RETURN_IF_ERROR(
              memory->OwnerStep(p, params, grads, numel, divisor, *overrides));
          counter->fetch_add(1);
          return absl::OkStatus();
        },
        {{grads, grad_bytes}, {params, param_bytes}}));
  }
  if (options_.clipping.enabled()) return;
  // Earlier rounds' broadcasts go after this round's reduction, so that the
  // owners' steps on them overlap this transfer.
  deferred_rounds_.push_back(round);
  while (DeferredPieces() > options_.broadcast_lag) IssueFirstDeferred();
}

int ZeroHook::DeferredPieces() const {
  int pieces = 0;
  for (int round : deferred_rounds_) {
    pieces += static_cast<int>(rounds_[round].size());
  }
  return pieces;
}

void ZeroHook::IssueFirstDeferred() {
  const int round = deferred_rounds_.front();
  deferred_rounds_.pop_front();
  IssueBroadcasts(round);
}

void ZeroHook::IssueBroadcasts(int round) {
  // A round of several owners is one group (an all-gather).
  std::shared_ptr<Work> work =
      comm_->IssueGroup(CollectiveKind::kBroadcast,
                        RoundSegments(round, /*params=*/true),
                        memory_->param_dtype());
  if (!options_.overlap_param_broadcast) {
    works_.push_back(std::move(work));
    return;
  }
  for (int p : rounds_[round]) {
    for (int param : piece_params_[p]) issued_broadcasts_[param].push_back(work);
  }
}

absl::Status ZeroHook::WaitForParameter(int param_index) {
  if (!error_.ok()) return error_;
  if (param_index < 0 || param_index >= static_cast<int>(infos_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter index ", param_index, " is outside [0, ",
                     infos_.size(), ")"));
  }
  std::vector<std::shared_ptr<Work>>& works = pending_broadcasts_[param_index];
  for (const auto& work : works) {
    absl::Status status =
        memory_->OrderComputeAfterBroadcast(*work, options_.timeout);
    if (!status.ok()) {
      return Fail(absl::Status(
          status.code(),
          absl::StrCat("waiting for the update of parameter \"",
                       infos_[param_index].name, "\": ", status.message())));
    }
  }
  works.clear();
  return absl::OkStatus();
}

absl::Status ZeroHook::WaitForAllParameters() {
  for (int i = 0; i < static_cast<int>(infos_.size()); ++i) {
    RETURN_IF_ERROR(WaitForParameter(i));
  }
  return absl::OkStatus();
}

void ZeroHook::IssueClippedSteps() {
  const int rank = comm_->rank();
  HookMemory* memory = memory_.get();
  const NormKind kind = options_.clipping.kind;
  const double max_norm = options_.clipping.max_norm;
  works_.push_back(comm_->Enqueue(
      [memory, rank, kind] { return memory->GatherNorms(rank, kind); }));
  // Every slot is one rank's partial and zero elsewhere: the sum is exact
  // and the same on every rank.
  works_.push_back(comm_->AllReduce(memory_->norm_slots(), comm_->world_size(),
                                    DataType::kFloat32));
  for (int p = 0; p < static_cast<int>(pieces_.size()); ++p) {
    const Piece& piece = pieces_[p];
    if (piece.owner == rank) {
      void* grads = PieceGrads(p);
      void* params = PieceParams(p);
      const int64_t numel = piece.numel;
      std::atomic<int64_t>* counter = &piece_steps_[p];
      works_.push_back(comm_->EnqueueTouching(
          [memory, counter, p, grads, params, numel, max_norm, kind,
           overrides = hyper_parameters_]() -> absl::Status {
            RETURN_IF_ERROR(memory->ClippedOwnerStep(
                p, params, grads, numel, max_norm, kind, *overrides));
            counter->fetch_add(1);
            return absl::OkStatus();
          },
          {{grads, numel * DataTypeSize(memory_->grad_dtype())},
           {params, numel * DataTypeSize(memory_->param_dtype())},
           {memory_->norm_slots(), comm_->world_size() * 4}}));
    }
  }
  // Broadcasts after every step: each waits only for its own piece's step
  // (EnqueueTouching), whereas a step runs after every earlier operation, so
  // a step issued after a broadcast would wait for that transfer.
  for (int round = 0; round < static_cast<int>(rounds_.size()); ++round) {
    IssueBroadcasts(round);
  }
}

absl::Status ZeroHook::SetHyperParameters(HyperParameterOverrides overrides) {
  if (std::find(param_ready_.begin(), param_ready_.end(), 1) !=
      param_ready_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "hyper-parameters change between steps only: step ",
        steps_finished_ + 1,
        " already has gradients marked ready (set them before the backward "
        "pass, e.g. right after the previous step, as lr schedulers do)"));
  }
  hyper_parameters_ =
      std::make_shared<const HyperParameterOverrides>(std::move(overrides));
  return absl::OkStatus();
}

absl::Status ZeroHook::Fail(absl::Status status) {
  if (error_.ok()) error_ = status;
  comm_->Abort(error_);
  return error_;
}

absl::Status ZeroHook::Initialize() {
  // The layout is final only now that the ready order has been observed.
  if (observed_order_ != layout_->ready_order()) {
    ASSIGN_OR_RETURN(BucketLayout rebuilt,
                     BucketLayout::Build(infos_, observed_order_, CapBytes(),
                                         options_.precision.param_dtype));
    RETURN_IF_ERROR(memory_->Arrange(rebuilt));
    layout_ = std::make_unique<BucketLayout>(std::move(rebuilt));
    RefreshFloatViews();
  }
  state_ = HookState::kLayoutReported;

  ASSIGN_OR_RETURN(BucketAssignment assignment, provider_(*layout_));
  const int num_buckets = layout_->num_buckets();
  if (static_cast<int>(assignment.owners.size()) != num_buckets) {
    return absl::InvalidArgumentError(absl::StrCat(
        "assignment (epoch ", assignment.epoch, ") has ",
        assignment.owners.size(), " buckets, the layout has ", num_buckets));
  }
  for (int b = 0; b < num_buckets; ++b) {
    const int owner = assignment.owners[b];
    if (owner != shard::kEveryRank &&
        (owner < 0 || owner >= comm_->world_size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("assignment (epoch ", assignment.epoch, ") gives bucket ",
                       b, " to rank ", owner, ", outside [0, ",
                       comm_->world_size(), ")"));
    }
  }
  // Cut buckets (under SHARDED each rank's range of a bucket) into pieces;
  // the optimizer sees each owned piece as one of its buckets.
  const int64_t piece_elems =
      options_.piece_bytes > 0
          ? std::max<int64_t>(1, options_.piece_bytes /
                                     DataTypeSize(memory_->grad_dtype()))
          : 0;
  pieces_.clear();
  rounds_.clear();
  bucket_pieces_.assign(num_buckets, {});
  bucket_rounds_.assign(num_buckets, {});
  for (const Bucket& bucket : layout_->buckets()) {
    const int owner = assignment.owners[bucket.index];
    std::vector<std::pair<shard::ElementRange, int>> owned_ranges;
    if (owner == shard::kEveryRank) {
      const std::vector<shard::ElementRange> ranges =
          shard::ShardRanges(bucket.numel, comm_->world_size());
      for (int r = 0; r < comm_->world_size(); ++r) {
        owned_ranges.emplace_back(ranges[r], r);
      }
    } else {
      owned_ranges.emplace_back(shard::ElementRange{0, bucket.numel}, owner);
    }
    // Pieces are issued in rounds, range by range in turn (range 0's first
    // piece, range 1's first, ..., then every range's second): a round is
    // one group, a reduce-scatter in which every rank sends and receives at
    // once.
    for (int64_t k = 0;; ++k) {
      std::vector<int> round;
      for (const auto& [range, range_owner] : owned_ranges) {
        const int64_t step = piece_elems > 0 ? piece_elems : range.size();
        const int64_t off = range.begin + k * step;
        if (step == 0 || off >= range.end) continue;
        round.push_back(static_cast<int>(pieces_.size()));
        bucket_pieces_[bucket.index].push_back(round.back());
        pieces_.push_back(Piece{bucket.index, off,
                                std::min(step, range.end - off), range_owner});
      }
      if (round.empty()) break;
      bucket_rounds_[bucket.index].push_back(
          static_cast<int>(rounds_.size()));
      rounds_.push_back(std::move(round));
    }
  }
  piece_params_.assign(pieces_.size(), {});
  for (int p = 0; p < static_cast<int>(pieces_.size()); ++p) {
    const Piece& piece = pieces_[p];
    for (const BucketEntry& e : layout_->buckets()[piece.bucket].entries) {
      if (e.offset < piece.offset + piece.numel &&
          piece.offset < e.offset + e.numel) {
        piece_params_[p].push_back(e.param_index);
      }
    }
  }
  assignment_ = std::move(assignment);
  for (int p = 0; p < static_cast<int>(pieces_.size()); ++p) {
    if (pieces_[p].owner == comm_->rank()) {
      RETURN_IF_ERROR(optimizer_->AddBucket(p, PieceSpans(p)));
    }
  }
  if (options_.precision.mixed()) RETURN_IF_ERROR(AdoptOwnedPieces());
  if (state_loader_) RETURN_IF_ERROR(LoadOwnedOptimizerState());
  if (initial_state_.has_value()) RETURN_IF_ERROR(ApplyInitialOptimizerState());
  piece_steps_.reset(new std::atomic<int64_t>[pieces_.size()]);
  for (size_t p = 0; p < pieces_.size(); ++p) piece_steps_[p] = 0;
  if (options_.clipping.enabled()) {
    RETURN_IF_ERROR(memory_->PrepareNorms(static_cast<int>(pieces_.size()),
                                          comm_->world_size()));
  }
  bucket_pending_.assign(num_buckets, 0);
  state_ = HookState::kInitialized;
  return absl::OkStatus();
}

absl::Status ZeroHook::FinishStep() {
  if (!error_.ok()) return Fail(error_);
  for (size_t i = 0; i < infos_.size(); ++i) {
    if (!param_ready_[i]) {
      return Fail(absl::FailedPreconditionError(absl::StrCat(
          "step ", steps_finished_ + 1, " finished before the gradient of \"",
          infos_[i].name, "\" was marked ready")));
    }
  }
  if (state_ != HookState::kInitialized) {
    absl::Status status = Initialize();
    if (!status.ok()) return Fail(status);
    // The held buckets of the first step.
    for (int b = 0; b < layout_->num_buckets(); ++b) {
      status = LaunchBucket(b);
      if (!status.ok()) return Fail(status);
    }
  }
  while (!deferred_rounds_.empty()) IssueFirstDeferred();
  if (options_.clipping.enabled()) IssueClippedSteps();
  // The last step's updates of parameters the forward never asked for.
  if (absl::Status status = WaitForAllParameters(); !status.ok()) {
    return Fail(status);
  }
  if (!works_.empty()) {
    // E.g. the next forward after the last broadcast, on the device.
    absl::Status status = memory_->OrderComputeAfter(*works_.back());
    if (!status.ok()) return Fail(status);
  }
  // A duration, not a time of day: the steady clock.
  const auto wait_start = std::chrono::steady_clock::now();
  for (const auto& work : works_) {
    absl::Status status = work->Wait(options_.timeout);
    if (!status.ok()) {
      return Fail(absl::Status(
          status.code(), absl::StrCat("step ", steps_finished_ + 1, ": ",
                                      status.message())));
    }
  }
  last_collective_wait_ =
      absl::FromChrono(std::chrono::steady_clock::now() - wait_start);
  if (options_.clipping.enabled()) {
    absl::StatusOr<double> norm =
        memory_->TotalGradNorm(options_.clipping.kind);
    if (!norm.ok()) return Fail(norm.status());
    last_grad_norm_ = *norm;
  }
  // Clear per-iteration state.
  works_.clear();
  std::swap(pending_broadcasts_, issued_broadcasts_);
  std::fill(param_ready_.begin(), param_ready_.end(), 0);
  for (const Bucket& bucket : layout_->buckets()) {
    bucket_pending_[bucket.index] = static_cast<int>(bucket.entries.size());
  }
  next_bucket_ = 0;
  observed_order_.clear();
  ++steps_finished_;
  return absl::OkStatus();
}

}  // namespace pshard::worker
