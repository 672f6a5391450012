#include "worker/runtime/checkpoint_saver.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/shard.h"
#include "checkpoint/spec_fingerprint.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace pshard::worker {

absl::StatusOr<std::unique_ptr<CheckpointSaver>> CheckpointSaver::Create(
    const Options& options, const ResultSource& source, ControlPlane* control,
    const Clock& clock) {
  ASSIGN_OR_RETURN(checkpoint::CheckpointWriter writer,
                   checkpoint::CheckpointWriter::Create(
                       options.dir, source.rank, options.world_size,
                       options.fingerprint));
  return std::unique_ptr<CheckpointSaver>(new CheckpointSaver(
      options, source, std::move(writer), control, clock));
}

absl::StatusOr<std::unique_ptr<CheckpointSaver>> CheckpointSaver::ForJob(
    const v1::JobSpec& spec, const ResultSource& source, int world_size,
    ControlPlane* control, absl::Duration rpc_timeout, const Clock& clock) {
  if (!spec.has_checkpoint() || spec.checkpoint().every_steps() <= 0) {
    return nullptr;
  }
  Options options;
  options.dir = spec.checkpoint().dir();
  ASSIGN_OR_RETURN(options.fingerprint, checkpoint::SpecFingerprint(spec));
  options.world_size = world_size;
  options.write_timeout = absl::Seconds(spec.collective_timeout_seconds());
  options.rpc_timeout = rpc_timeout;
  return Create(options, source, control, clock);
}

CheckpointSaver::CheckpointSaver(const Options& options,
                                 const ResultSource& source,
                                 checkpoint::CheckpointWriter writer,
                                 ControlPlane* control, const Clock& clock)
    : write_timeout_(options.write_timeout),
      source_(source),
      control_(control),
      rpc_timeout_(options.rpc_timeout),
      clock_(clock),
      writer_(std::move(writer), clock) {}

bool CheckpointSaver::Due(const v1::JobSpec& spec, int64_t step) {
  const int64_t every = spec.has_checkpoint() ? spec.checkpoint().every_steps() : 0;
  return every > 0 && step % every == 0 && step < spec.steps();
}

absl::Status CheckpointSaver::Start(int64_t step, RankModel& model,
                                    std::optional<std::string> program_state) {
  if (in_flight_.has_value()) Report(writer_.Wait(write_timeout_));
  SendReports();
  in_flight_ = step;
  absl::Status started = Snapshot(step, model, std::move(program_state));
  if (!started.ok()) Report(started);
  return started;
}

absl::Status CheckpointSaver::Snapshot(
    int64_t step, RankModel& model, std::optional<std::string> program_state) {
  // What this rank owns, as of now, copied once straight into the writer's
  // buffers (the stall training sees).
  ASSIGN_OR_RETURN(const std::vector<ZeroHook::OwnedParameter> owned,
                   model.hook().OwnedParameters());
  ASSIGN_OR_RETURN(const std::vector<ParameterOptimizerStateView> states,
                   model.hook().ViewOptimizerState());
  absl::flat_hash_map<std::string, const ParameterOptimizerStateView*> state_of;
  for (const ParameterOptimizerStateView& view : states) {
    state_of[view.name] = &view;
  }
  absl::flat_hash_map<std::string, int> index;
  const std::vector<ParameterInfo>& params = model.parameters();
  for (int i = 0; i < static_cast<int>(params.size()); ++i) {
    index[params[i].name] = i;
  }
  // Under SHARDED a rank owns one contiguous slice of some parameters: it
  // writes them as slices, which the reader joins with the other ranks'
  // (checkpoint/shard.h).
  std::vector<int> param_of(owned.size());
  std::vector<const ParameterOptimizerStateView*> state(owned.size());
  std::vector<checkpoint::AsyncCheckpointWriter::EntryLayout> layout;
  layout.reserve(owned.size());
  for (size_t k = 0; k < owned.size(); ++k) {
    auto it = index.find(owned[k].name);
    if (it == index.end()) {
      return absl::InternalError(absl::StrCat(
          "this rank owns \"", owned[k].name,
          "\", which is not one of the parameters"));
    }
    param_of[k] = it->second;
    auto s = state_of.find(owned[k].name);
    state[k] = s == state_of.end() ? nullptr : s->second;
    const ParameterInfo& info = params[it->second];
    const std::vector<int64_t> shape =
        info.shape.empty() ? std::vector<int64_t>{info.numel} : info.shape;
    const bool sliced = owned[k].numel != info.numel;
    const std::vector<int64_t> stored =
        sliced ? std::vector<int64_t>{owned[k].numel} : shape;
    auto& entry = layout.emplace_back();
    entry.name = owned[k].name;
    entry.value = {checkpoint::DType::kF32, stored};
    if (sliced) entry.slice = checkpoint::TensorSlice{owned[k].offset, shape};
    if (state[k] == nullptr) continue;
    for (const std::string& state_name : state[k]->tensor_names) {
      entry.state.emplace_back(
          state_name,
          checkpoint::AsyncCheckpointWriter::TensorShape{checkpoint::DType::kF32,
                                                        stored});
    }
  }
  return writer_.Start(
      step, layout,
      [&](int k, absl::Span<const absl::Span<char>> buffers) -> absl::Status {
        float* value = reinterpret_cast<float*>(buffers[0].data());
        const ZeroHook::OwnedParameter& part_owned = owned[k];
        // Only the owned elements (the whole parameter, or its slice).
        RETURN_IF_ERROR(model.CopyOwnedParameterRangeToHost(
            param_of[k], part_owned.offset, part_owned.numel, value));
        if (state[k] == nullptr) return absl::OkStatus();
        for (const ParameterOptimizerStateView::Part& part : state[k]->parts) {
          for (size_t t = 0; t < part.tensors.size(); ++t) {
            float* to = reinterpret_cast<float*>(buffers[t + 1].data());
            std::copy(part.tensors[t].begin(), part.tensors[t].end(),
                      to + (part.offset - part_owned.offset));
          }
        }
        return absl::OkStatus();
      },
      std::move(program_state));
}

void CheckpointSaver::Poll() {
  if (in_flight_.has_value() && writer_.IsCompleted()) {
    Report(writer_.Wait(absl::ZeroDuration()));
  }
  SendReports();
}

void CheckpointSaver::Finish(absl::Duration timeout) {
  const absl::Time deadline = clock_.Now() + timeout;
  if (in_flight_.has_value()) Report(writer_.Wait(timeout));
  // The last chance: wait for a restarting coordinator (a try every
  // kRetryPause).
  SendReports();
  while (!unsent_.empty() && clock_.Now() < deadline) {
    clock_.SleepFor(std::min(next_try_, deadline) - clock_.Now());
    SendReports();
  }
  for (const v1::ReportCheckpointRequest& request : unsent_) {
    LOG(ERROR) << "job " << source_.job_id << " epoch " << source_.epoch
               << " rank " << source_.rank << ": checkpoint step "
               << request.step()
               << " was never reported (the coordinator stayed unreachable)";
  }
  unsent_.clear();
}

void CheckpointSaver::Report(
    const absl::StatusOr<checkpoint::ShardFileInfo>& result) {
  v1::ReportCheckpointRequest request;
  request.set_job_id(source_.job_id);
  request.set_epoch(source_.epoch);
  request.set_rank(source_.rank);
  request.set_worker_id(source_.worker_id);
  request.set_step(*in_flight_);
  in_flight_.reset();
  request.set_ok(result.ok());
  if (result.ok()) {
    request.set_file_name(result->name);
    request.set_size_bytes(result->size_bytes);
    request.set_sha256(result->sha256);
  } else {
    request.set_error(result.status().ToString());
  }
  if (unsent_.size() >= kMaxUnsentReports) {
    LOG(ERROR) << "job " << source_.job_id << " epoch " << source_.epoch
               << " rank " << source_.rank << ": checkpoint step "
               << unsent_.front().step()
               << " dropped unreported (too many reports waiting)";
    unsent_.pop_front();
  }
  unsent_.push_back(std::move(request));
  SendReports();
}

void CheckpointSaver::SendReports() {
  if (clock_.Now() < next_try_) return;
  while (!unsent_.empty()) {
    const v1::ReportCheckpointRequest& request = unsent_.front();
    absl::StatusOr<v1::ReportCheckpointResponse> sent =
        control_->ReportCheckpoint(request, rpc_timeout_);
    if (CoordinatorUnreachable(sent.status())) {
      next_try_ = clock_.Now() + kRetryPause;
      if (!said_unsent_) {
        LOG(WARNING) << "job " << source_.job_id << " epoch " << source_.epoch
                     << " rank " << source_.rank << ": the coordinator cannot "
                     << "take checkpoint step " << request.step()
                     << "'s report yet (" << sent.status()
                     << "); it is sent again at the next checkpoint call";
        said_unsent_ = true;
      }
      return;
    }
    if (!sent.ok()) {
      // Refused: the checkpoint stays incomplete (no manifest), never counts.
      LOG(ERROR) << "job " << source_.job_id << " epoch " << source_.epoch
                 << " rank " << source_.rank << ": reporting checkpoint step "
                 << request.step() << " failed: " << sent.status();
    } else if (said_unsent_) {
      LOG(INFO) << "job " << source_.job_id << " epoch " << source_.epoch
                << " rank " << source_.rank << ": checkpoint step "
                << request.step() << " reported";
    }
    said_unsent_ = false;
    unsent_.pop_front();
  }
}

}  // namespace pshard::worker
