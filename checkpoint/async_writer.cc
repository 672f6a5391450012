#include "checkpoint/async_writer.h"

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pshard::checkpoint {

TensorRef AsyncCheckpointWriter::TensorCopy::ref() const {
  return TensorRef{dtype, shape, absl::Span<const char>(bytes.get(), size)};
}

AsyncCheckpointWriter::TensorCopy AsyncCheckpointWriter::Copy(
    const TensorRef& tensor, std::vector<TensorCopy>& spare, size_t& next_spare) {
  TensorCopy copy;
  copy.dtype = tensor.dtype;
  copy.shape = tensor.shape;
  copy.size = tensor.bytes.size();
  if (next_spare < spare.size() && spare[next_spare].size == copy.size) {
    copy.bytes = std::move(spare[next_spare].bytes);
  } else {
    copy.bytes.reset(new char[copy.size]);
  }
  ++next_spare;
  if (copy.size > 0) std::memcpy(copy.bytes.get(), tensor.bytes.data(), copy.size);
  return copy;
}

AsyncCheckpointWriter::AsyncCheckpointWriter(CheckpointWriter writer,
                                             const Clock& clock)
    : writer_(std::move(writer)), clock_(clock), thread_([this] { Run(); }) {}

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

absl::Status AsyncCheckpointWriter::Start(
    int64_t step, absl::Span<const ParameterTensors> parameters) {
  {
    absl::MutexLock lock(&mu_);
    if (writing_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint rank ", writer_.rank(),
          ": a write is still in flight; Wait() for it before starting step ",
          step));
    }
  }
  if (step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint step ", step, " is negative"));
  }
  RETURN_IF_ERROR(ValidateParameters(parameters));
  std::vector<TensorCopy> spare;
  {
    absl::MutexLock lock(&mu_);
    spare = std::move(spare_);
    spare_.clear();
  }
  // The copy runs outside the lock: only this thread starts writes.
  const absl::Time copy_start = clock_.Now();
  size_t next_spare = 0;
  Snapshot snapshot;
  snapshot.step = step;
  snapshot.parameters.reserve(parameters.size());
  for (const ParameterTensors& p : parameters) {
    ParameterCopy copy;
    copy.name = p.name;
    copy.value = Copy(p.value, spare, next_spare);
    for (const auto& [state_name, tensor] : p.state) {
      copy.state.emplace_back(state_name, Copy(tensor, spare, next_spare));
    }
    snapshot.parameters.push_back(std::move(copy));
  }
  const absl::Duration copy_time = clock_.Now() - copy_start;
  absl::MutexLock lock(&mu_);
  last_snapshot_ = copy_time;
  result_.reset();
  pending_ = std::move(snapshot);
  writing_ = true;
  return absl::OkStatus();
}

void AsyncCheckpointWriter::Run() {
  while (true) {
    Snapshot snapshot;
    {
      absl::MutexLock lock(&mu_);
      // The thread idles here; no deadline: the destructor wakes it.
      mu_.Await(absl::Condition(this, &AsyncCheckpointWriter::HasWorkOrStop));
      if (!pending_.has_value()) return;  // stopping with nothing queued
      snapshot = *std::move(pending_);
      pending_.reset();
    }
    std::vector<ParameterTensors> views;
    views.reserve(snapshot.parameters.size());
    for (const ParameterCopy& p : snapshot.parameters) {
      ParameterTensors view{p.name, p.value.ref(), {}};
      for (const auto& [state_name, tensor] : p.state) {
        view.state.emplace_back(state_name, tensor.ref());
      }
      views.push_back(std::move(view));
    }
    absl::StatusOr<ShardFileInfo> result =
        writer_.WriteShard(snapshot.step, views);
    std::vector<TensorCopy> buffers;
    for (ParameterCopy& p : snapshot.parameters) {
      buffers.push_back(std::move(p.value));
      for (auto& [unused, tensor] : p.state) buffers.push_back(std::move(tensor));
    }
    absl::MutexLock lock(&mu_);
    result_ = std::move(result);
    spare_ = std::move(buffers);
    writing_ = false;
  }
}

bool AsyncCheckpointWriter::HasWorkOrStop() const {
  return pending_.has_value() || stopping_;
}

bool AsyncCheckpointWriter::NotWriting() const { return !writing_; }

bool AsyncCheckpointWriter::IsCompleted() const {
  absl::MutexLock lock(&mu_);
  return !writing_;
}

absl::StatusOr<ShardFileInfo> AsyncCheckpointWriter::Wait(
    absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const bool done = clock_.AwaitWithTimeout(
      mu_, absl::Condition(this, &AsyncCheckpointWriter::NotWriting), timeout);
  if (!done) {
    return absl::DeadlineExceededError(absl::StrCat(
        "checkpoint rank ", writer_.rank(), ": the write is still running after ",
        absl::FormatDuration(timeout)));
  }
  if (!result_.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint rank ", writer_.rank(), ": no write to wait for"));
  }
  absl::StatusOr<ShardFileInfo> result = *std::move(result_);
  result_.reset();
  return result;
}

absl::Duration AsyncCheckpointWriter::last_snapshot_duration() const {
  absl::MutexLock lock(&mu_);
  return last_snapshot_;
}

}  // namespace pshard::checkpoint
