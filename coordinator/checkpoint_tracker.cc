#include "coordinator/checkpoint_tracker.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/sha256.h"
#include "common/proto_time.h"

namespace pshard {
namespace coordinator {
using checkpoint::IsSha256Hex;

absl::StatusOr<CheckpointTracker::Outcome> CheckpointTracker::Add(
    const v1::ReportCheckpointRequest& report, int world_size,
    const std::string& fingerprint) {
  if (report.step() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("step: must be >= 1, got ", report.step()));
  }
  if (report.ok()) {
    const std::string expected =
        checkpoint::ShardFileName(report.rank(), world_size);
    if (report.file_name() != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat("file_name: rank ", report.rank(), " of ", world_size,
                       " writes \"", expected, "\", not \"",
                       absl::CHexEscape(report.file_name().substr(0, 256)),
                       "\""));
    }
    if (report.size_bytes() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("size_bytes: must be >= 0, got ", report.size_bytes()));
    }
    if (!IsSha256Hex(report.sha256())) {
      return absl::InvalidArgumentError(
          "sha256: must be 64 lowercase hex digits");
    }
  }
  StepShards& shards = steps_[report.step()];
  if (shards.files.empty()) {
    shards.files.resize(world_size);
    shards.manifest.step = report.step();
    shards.manifest.world_size = world_size;
    shards.manifest.spec_fingerprint = fingerprint;
  }
  if (shards.ended) return Outcome::kIgnored;
  if (!report.ok()) {
    shards.ended = true;
    return Outcome::kFailed;
  }
  std::optional<checkpoint::ShardFileInfo>& file = shards.files[report.rank()];
  if (file.has_value()) {
    if (file->size_bytes != report.size_bytes() ||
        file->sha256 != report.sha256()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", report.rank(), " reported another shard for step ",
          report.step(), " (size or sha256 differ)"));
    }
    return Outcome::kIgnored;  // a retry
  }
  file = checkpoint::ShardFileInfo{report.file_name(), report.rank(),
                                   report.size_bytes(), report.sha256()};
  if (++shards.reported < world_size) return Outcome::kPending;
  shards.ended = true;
  shards.manifest.files.clear();
  for (const auto& f : shards.files) shards.manifest.files.push_back(*f);
  return Outcome::kComplete;
}

const checkpoint::Manifest* CheckpointTracker::manifest(int64_t step) const {
  auto it = steps_.find(step);
  if (it == steps_.end() || it->second.manifest.files.empty()) return nullptr;
  return &it->second.manifest;
}

void CheckpointTracker::Forget(int64_t step) { steps_.erase(step); }

int CheckpointTracker::pending_steps() const {
  int n = 0;
  for (const auto& [step, shards] : steps_) n += shards.ended ? 0 : 1;
  return n;
}

std::vector<v1::CheckpointRecord> SettleInterruptedCheckpoints(v1::Job& job,
                                                               absl::Time now) {
  std::vector<v1::CheckpointRecord> settled;
  for (v1::CheckpointRecord& record : *job.mutable_checkpoints()) {
    if (record.state() != v1::CheckpointRecord::WRITING) continue;
    absl::StatusOr<checkpoint::Manifest> manifest =
        checkpoint::ReadManifest(record.path());
    if (manifest.ok() && manifest->step == record.step() &&
        manifest->world_size == record.world_size()) {
      int64_t size_bytes = 0;
      for (const checkpoint::ShardFileInfo& f : manifest->files) {
        size_bytes += f.size_bytes;
      }
      record.set_state(v1::CheckpointRecord::COMPLETE);
      record.set_size_bytes(size_bytes);
      record.set_reason(
          "its manifest was written before the coordinator restarted");
    } else {
      record.set_state(v1::CheckpointRecord::FAILED);
      record.set_reason(absl::StrCat(
          "the coordinator restarted before this checkpoint was committed (",
          manifest.ok() ? "its manifest is another checkpoint's"
                        : std::string(manifest.status().message()),
          ")"));
    }
    *record.mutable_time() = ToProto(now);
    settled.push_back(record);
  }
  return settled;
}

}  // namespace coordinator
}  // namespace pshard
