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
#include "common/status_macros.h"

namespace pshard::worker {

absl::StatusOr<std::unique_ptr<CheckpointSaver>> CheckpointSaver::Create(
    const v1::JobSpec& spec, const ResultSource& source, int world_size,
    ControlPlane* control, absl::Duration rpc_timeout, const Clock& clock) {
  if (!spec.has_checkpoint() || spec.checkpoint().every_steps() <= 0) {
    return nullptr;
  }
  ASSIGN_OR_RETURN(const std::string fingerprint,
                   checkpoint::SpecFingerprint(spec));
  ASSIGN_OR_RETURN(checkpoint::CheckpointWriter writer,
                   checkpoint::CheckpointWriter::Create(
                       spec.checkpoint().dir(), source.rank, world_size,
                       fingerprint));
  return std::unique_ptr<CheckpointSaver>(new CheckpointSaver(
      spec, source, std::move(writer), control, rpc_timeout, clock));
}

CheckpointSaver::CheckpointSaver(const v1::JobSpec& spec,
                                 const ResultSource& source,
                                 checkpoint::CheckpointWriter writer,
                                 ControlPlane* control,
                                 absl::Duration rpc_timeout, const Clock& clock)
    : every_steps_(spec.checkpoint().every_steps()),
      last_step_(spec.steps()),
      write_timeout_(absl::Seconds(spec.collective_timeout_seconds())),
      source_(source),
      control_(control),
      rpc_timeout_(rpc_timeout),
      writer_(std::move(writer), clock) {}

bool CheckpointSaver::Due(int64_t step) const {
  return step % every_steps_ == 0 && step < last_step_;
}

void CheckpointSaver::Start(int64_t step, StepEngine& engine) {
  if (in_flight_.has_value()) Report(writer_.Wait(write_timeout_));
  in_flight_ = step;
  // The snapshot: what this rank owns, as of now, copied once straight into
  // the writer's buffers (the stall training sees).
  absl::Status started = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<ParameterOptimizerStateView> owned,
                     engine.hook().ViewOptimizerState());
    absl::flat_hash_map<std::string, int> index;
    const std::vector<ParameterInfo>& params = engine.workload().parameters();
    for (int i = 0; i < static_cast<int>(params.size()); ++i) {
      index[params[i].name] = i;
    }
    std::vector<int> param_of(owned.size());
    std::vector<checkpoint::AsyncCheckpointWriter::EntryLayout> layout;
    layout.reserve(owned.size());
    for (size_t k = 0; k < owned.size(); ++k) {
      auto it = index.find(owned[k].name);
      if (it == index.end()) {
        return absl::InternalError(absl::StrCat(
            "the optimizer holds state for \"", owned[k].name,
            "\", which is not a parameter of the workload"));
      }
      param_of[k] = it->second;
      const ParameterInfo& info = params[it->second];
      const std::vector<int64_t> shape =
          info.shape.empty() ? std::vector<int64_t>{info.numel} : info.shape;
      auto& entry = layout.emplace_back();
      entry.name = owned[k].name;
      entry.value = {checkpoint::DType::kF32, shape};
      for (const std::string& state_name : owned[k].tensor_names) {
        entry.state.emplace_back(
            state_name,
            checkpoint::AsyncCheckpointWriter::TensorShape{checkpoint::DType::kF32,
                                                          shape});
      }
    }
    return writer_.Start(
        step, layout,
        [&](int k, absl::Span<const absl::Span<char>> buffers) -> absl::Status {
          RETURN_IF_ERROR(engine.CopyParameterToHost(
              param_of[k], reinterpret_cast<float*>(buffers[0].data())));
          for (const ParameterOptimizerStateView::Part& part : owned[k].parts) {
            for (size_t t = 0; t < part.tensors.size(); ++t) {
              float* to = reinterpret_cast<float*>(buffers[t + 1].data());
              std::copy(part.tensors[t].begin(), part.tensors[t].end(),
                        to + part.offset);
            }
          }
          return absl::OkStatus();
        });
  }();
  if (!started.ok()) Report(started);
}

void CheckpointSaver::Poll() {
  if (in_flight_.has_value() && writer_.IsCompleted()) {
    Report(writer_.Wait(absl::ZeroDuration()));
  }
}

void CheckpointSaver::Finish(absl::Duration timeout) {
  if (in_flight_.has_value()) Report(writer_.Wait(timeout));
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
  absl::StatusOr<v1::ReportCheckpointResponse> sent =
      control_->ReportCheckpoint(request, rpc_timeout_);
  if (!sent.ok()) {
    // The checkpoint stays incomplete (no manifest): it never counts.
    fprintf(stderr, "pshard-worker: %s rank %d: reporting checkpoint step %lld: %s\n",
            source_.job_id.c_str(), source_.rank,
            static_cast<long long>(request.step()),
            std::string(sent.status().message()).c_str());
  }
}

}  // namespace pshard::worker
