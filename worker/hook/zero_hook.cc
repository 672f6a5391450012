#include "worker/hook/zero_hook.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pshard::worker {

absl::StatusOr<std::unique_ptr<ZeroHook>> ZeroHook::Create(
    std::vector<ParameterInfo> params, Communicator* comm,
    std::unique_ptr<ShardOptimizer> optimizer, AssignmentProvider provider,
    const ZeroHookOptions& options) {
  if (params.empty()) {
    return absl::InvalidArgumentError("the model has no parameters");
  }
  if (comm == nullptr || optimizer == nullptr || !provider) {
    return absl::InvalidArgumentError(
        "a communicator, an optimizer and an assignment provider are needed");
  }
  if (!(options.bucket_cap_mb > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bucket_cap_mb must be > 0, got ", options.bucket_cap_mb));
  }
  std::unique_ptr<ZeroHook> hook(new ZeroHook(std::move(params), comm,
                                              std::move(optimizer),
                                              std::move(provider), options));
  const int n = static_cast<int>(hook->infos_.size());
  const int64_t cap_bytes =
      std::max<int64_t>(1, static_cast<int64_t>(options.bucket_cap_mb * 1024 * 1024));
  ASSIGN_OR_RETURN(BucketLayout layout,
                   BucketLayout::Build(hook->infos_,
                                       BucketLayout::DefaultReadyOrder(n),
                                       cap_bytes));
  hook->layout_ = std::make_unique<BucketLayout>(std::move(layout));
  hook->storage_ = std::make_unique<BucketStorage>(*hook->layout_);
  hook->param_ready_.assign(n, 0);
  return hook;
}

ZeroHook::ZeroHook(std::vector<ParameterInfo> params, Communicator* comm,
                   std::unique_ptr<ShardOptimizer> optimizer,
                   AssignmentProvider provider, const ZeroHookOptions& options)
    : infos_(std::move(params)),
      comm_(comm),
      optimizer_(std::move(optimizer)),
      provider_(std::move(provider)),
      options_(options) {}

ZeroHook::~ZeroHook() {
  // Optimizer steps still queued on the communicator point at this hook:
  // make sure none is left before the hook goes.
  bool pending = false;
  for (const auto& work : works_) pending |= !work->IsCompleted();
  if (pending) {
    comm_->Abort(absl::CancelledError("ZeroHook destroyed mid-step"));
    for (const auto& work : works_) (void)work->Wait(options_.timeout);
  }
}

int64_t ZeroHook::bucket_steps(int b) const {
  if (piece_steps_ == nullptr || b < 0 || b >= layout_->num_buckets()) {
    return 0;
  }
  const std::vector<int>& pieces = bucket_pieces_[b];
  const int64_t steps = piece_steps_[pieces[0]].load();
  for (int p : pieces) {
    if (piece_steps_[p].load() != steps) return -1;
  }
  return steps;
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

std::vector<ParamSpan> ZeroHook::PieceSpans(int p) const {
  const Piece& piece = pieces_[p];
  std::vector<ParamSpan> spans;
  for (const ParamSpan& span : layout_->Spans(piece.bucket)) {
    const int64_t begin = std::max(span.offset, piece.offset);
    const int64_t end =
        std::min(span.offset + span.numel, piece.offset + piece.numel);
    if (begin < end) {
      spans.push_back(ParamSpan{span.name, begin - piece.offset, end - begin});
    }
  }
  return spans;
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
      LaunchBucket(next_bucket_++);
    }
  }
  return absl::OkStatus();
}

void ZeroHook::LaunchBucket(int b) {
  for (int p : bucket_pieces_[b]) LaunchPiece(p);
}

void ZeroHook::LaunchPiece(int p) {
  const Piece& piece = pieces_[p];
  const int owner = assignment_.owners[piece.bucket];
  const int64_t numel = piece.numel;
  float* grads = storage_->bucket_grads(piece.bucket) + piece.offset;
  float* params = storage_->bucket_params(piece.bucket) + piece.offset;
  if (options_.comm_mode == v1::JobSpec::ALLREDUCE_BROADCAST) {
    works_.push_back(comm_->AllReduce(grads, numel, DataType::kFloat32));
  } else {
    // The owner receives the mean (the division fused into the sum).
    works_.push_back(comm_->ReduceMean(grads, numel, DataType::kFloat32, owner));
  }
  if (comm_->rank() == owner) {
    // After an all-reduce the owner holds the sum: average it here (a
    // division, as DDP does, not a multiply by the reciprocal).
    const int world = options_.comm_mode == v1::JobSpec::ALLREDUCE_BROADCAST
                          ? comm_->world_size()
                          : 1;
    ShardOptimizer* optimizer = optimizer_.get();
    std::atomic<int64_t>* counter = &piece_steps_[p];
    works_.push_back(comm_->EnqueueTouching(
        [optimizer, counter, p, grads, params, numel, world]() -> absl::Status {
          if (world > 1) {
            DivideInPlace(grads, numel, DataType::kFloat32,
                          static_cast<float>(world));
          }
          RETURN_IF_ERROR(optimizer->Step(p, params, grads));
          counter->fetch_add(1);
          return absl::OkStatus();
        },
        {{grads, numel * 4}, {params, numel * 4}}));
  }
  // Earlier pieces' broadcasts go after this piece's reduction, so that the
  // owner's steps on them overlap this transfer.
  deferred_broadcasts_.push_back(p);
  while (static_cast<int>(deferred_broadcasts_.size()) >
         std::max(1, options_.broadcast_lag)) {
    IssueBroadcast(deferred_broadcasts_.front());
    deferred_broadcasts_.pop_front();
  }
}

void ZeroHook::IssueBroadcast(int p) {
  const Piece& piece = pieces_[p];
  works_.push_back(comm_->Broadcast(
      storage_->bucket_params(piece.bucket) + piece.offset, piece.numel,
      DataType::kFloat32, assignment_.owners[piece.bucket]));
}

absl::Status ZeroHook::Fail(absl::Status status) {
  if (error_.ok()) error_ = status;
  comm_->Abort(error_);
  return error_;
}

absl::Status ZeroHook::Initialize() {
  // The layout is final only now that the ready order has been observed.
  if (observed_order_ != layout_->ready_order()) {
    const int64_t cap_bytes = std::max<int64_t>(
        1, static_cast<int64_t>(options_.bucket_cap_mb * 1024 * 1024));
    ASSIGN_OR_RETURN(BucketLayout rebuilt,
                     BucketLayout::Build(infos_, observed_order_, cap_bytes));
    auto storage = std::make_unique<BucketStorage>(rebuilt);
    for (size_t i = 0; i < infos_.size(); ++i) {
      std::memcpy(storage->param(i), storage_->param(i), infos_[i].numel * 4);
      std::memcpy(storage->grad(i), storage_->grad(i), infos_[i].numel * 4);
    }
    layout_ = std::make_unique<BucketLayout>(std::move(rebuilt));
    storage_ = std::move(storage);
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
    if (owner < 0 || owner >= comm_->world_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("assignment (epoch ", assignment.epoch, ") gives bucket ",
                       b, " to rank ", owner, ", outside [0, ",
                       comm_->world_size(), ")"));
    }
  }
  // Cut buckets into pieces; the optimizer sees each owned piece as one of
  // its buckets.
  const int64_t piece_elems =
      options_.piece_bytes > 0 ? std::max<int64_t>(1, options_.piece_bytes / 4)
                               : 0;
  pieces_.clear();
  bucket_pieces_.assign(num_buckets, {});
  for (const Bucket& bucket : layout_->buckets()) {
    const int64_t step = piece_elems > 0 ? piece_elems : bucket.numel;
    for (int64_t off = 0; off < bucket.numel; off += step) {
      bucket_pieces_[bucket.index].push_back(static_cast<int>(pieces_.size()));
      pieces_.push_back(
          Piece{bucket.index, off, std::min(step, bucket.numel - off)});
    }
  }
  assignment_ = std::move(assignment);
  for (int p = 0; p < static_cast<int>(pieces_.size()); ++p) {
    if (assignment_.owners[pieces_[p].bucket] == comm_->rank()) {
      RETURN_IF_ERROR(optimizer_->AddBucket(p, PieceSpans(p)));
    }
  }
  piece_steps_.reset(new std::atomic<int64_t>[pieces_.size()]);
  for (size_t p = 0; p < pieces_.size(); ++p) piece_steps_[p] = 0;
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
    for (int b = 0; b < layout_->num_buckets(); ++b) LaunchBucket(b);
  }
  while (!deferred_broadcasts_.empty()) {
    IssueBroadcast(deferred_broadcasts_.front());
    deferred_broadcasts_.pop_front();
  }
  for (const auto& work : works_) {
    absl::Status status = work->Wait(options_.timeout);
    if (!status.ok()) {
      return Fail(absl::Status(
          status.code(), absl::StrCat("step ", steps_finished_ + 1, ": ",
                                      status.message())));
    }
  }
  // Clear per-iteration state.
  works_.clear();
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
