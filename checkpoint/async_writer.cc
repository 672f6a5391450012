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

AsyncCheckpointWriter::TensorCopy AsyncCheckpointWriter::Allocate(
    const TensorShape& shape, std::vector<TensorCopy>& spare,
    size_t& next_spare) {
  int64_t numel = 1;
  for (int64_t d : shape.shape) numel *= d;
  TensorCopy copy;
  copy.dtype = shape.dtype;
  copy.shape = shape.shape;
  copy.size = static_cast<size_t>(numel * DTypeSize(shape.dtype));
  if (next_spare < spare.size() && spare[next_spare].size == copy.size) {
    copy.bytes = std::move(spare[next_spare].bytes);
  } else {
    copy.bytes.reset(new char[copy.size]);
  }
  ++next_spare;
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
    int64_t step, absl::Span<const ParameterTensors> parameters,
    std::optional<std::string> program_state) {
  RETURN_IF_ERROR(ValidateParameters(parameters));
  std::vector<EntryLayout> layout;
  layout.reserve(parameters.size());
  for (const ParameterTensors& p : parameters) {
    EntryLayout& entry = layout.emplace_back();
    entry.name = p.name;
    entry.value = {p.value.dtype, p.value.shape};
    entry.slice = p.slice;
    for (const auto& [state_name, tensor] : p.state) {
      entry.state.emplace_back(state_name, TensorShape{tensor.dtype, tensor.shape});
    }
  }
  return Start(step, layout,
               [&](int i, absl::Span<const absl::Span<char>> buffers) {
                 const ParameterTensors& p = parameters[i];
                 std::memcpy(buffers[0].data(), p.value.bytes.data(),
                             buffers[0].size());
                 for (size_t k = 0; k < p.state.size(); ++k) {
                   std::memcpy(buffers[k + 1].data(),
                               p.state[k].second.bytes.data(),
                               buffers[k + 1].size());
                 }
                 return absl::OkStatus();
               },
               std::move(program_state));
}

absl::Status AsyncCheckpointWriter::Start(
    int64_t step, absl::Span<const EntryLayout> layout, FillFunction fill,
    std::optional<std::string> program_state) {
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
  if (program_state.has_value()) {
    RETURN_IF_ERROR(
        CheckProgramStateSize(static_cast<int64_t>(program_state->size())));
  }
  for (const EntryLayout& entry : layout) {
    auto check = [&](const TensorShape& t, absl::string_view what) {
      for (int64_t d : t.shape) {
        if (d < 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "checkpoint tensor ", entry.name, what, ": negative dimension ", d));
        }
      }
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(check(entry.value, ""));
    for (const auto& [state_name, t] : entry.state) {
      RETURN_IF_ERROR(check(t, absl::StrCat(".", state_name)));
    }
  }
  std::vector<TensorCopy> spare;
  {
    absl::MutexLock lock(&mu_);
    spare = std::move(spare_);
    spare_.clear();
  }
  // The snapshot's storage, and the views WriteShard will see, checked as
  // it checks them before anything is copied.
  size_t next_spare = 0;
  Snapshot snapshot;
  snapshot.step = step;
  snapshot.program_state = std::move(program_state);
  snapshot.parameters.reserve(layout.size());
  for (const EntryLayout& entry : layout) {
    ParameterCopy& copy = snapshot.parameters.emplace_back();
    copy.name = entry.name;
    copy.slice = entry.slice;
    copy.value = Allocate(entry.value, spare, next_spare);
    for (const auto& [state_name, t] : entry.state) {
      copy.state.emplace_back(state_name, Allocate(t, spare, next_spare));
    }
  }
  std::vector<ParameterTensors> views = Views(snapshot);
  absl::Status valid = ValidateParameters(views);
  // The copy runs outside the lock: only this thread starts writes.
  const absl::Time copy_start = clock_.Now();
  std::vector<absl::Span<char>> buffers;
  for (size_t i = 0; valid.ok() && i < snapshot.parameters.size(); ++i) {
    ParameterCopy& copy = snapshot.parameters[i];
    buffers.clear();
    buffers.emplace_back(copy.value.bytes.get(), copy.value.size);
    for (auto& [unused, t] : copy.state) buffers.emplace_back(t.bytes.get(), t.size);
    valid = fill(static_cast<int>(i), buffers);
  }
  const absl::Duration copy_time = clock_.Now() - copy_start;
  absl::MutexLock lock(&mu_);
  if (!valid.ok()) {
    spare_ = Buffers(std::move(snapshot));  // kept for the next Start
    return valid;
  }
  last_snapshot_ = copy_time;
  result_.reset();
  pending_ = std::move(snapshot);
  writing_ = true;
  return absl::OkStatus();
}

std::vector<ParameterTensors> AsyncCheckpointWriter::Views(
    const Snapshot& snapshot) {
  std::vector<ParameterTensors> views;
  views.reserve(snapshot.parameters.size());
  for (const ParameterCopy& p : snapshot.parameters) {
    ParameterTensors view{p.name, p.value.ref(), {}, p.slice};
    for (const auto& [state_name, tensor] : p.state) {
      view.state.emplace_back(state_name, tensor.ref());
    }
    views.push_back(std::move(view));
  }
  return views;
}

std::vector<AsyncCheckpointWriter::TensorCopy> AsyncCheckpointWriter::Buffers(
    Snapshot snapshot) {
  std::vector<TensorCopy> buffers;
  for (ParameterCopy& p : snapshot.parameters) {
    buffers.push_back(std::move(p.value));
    for (auto& [unused, tensor] : p.state) buffers.push_back(std::move(tensor));
  }
  return buffers;
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
    absl::StatusOr<ShardFileInfo> result =
        writer_.WriteShard(snapshot.step, Views(snapshot),
                           snapshot.program_state);
    std::vector<TensorCopy> buffers = Buffers(std::move(snapshot));
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
