// Text and JSON rendering for pshardctl: aligned tables, human-readable sizes
// and durations, the shard table, and the progress line/bar that `watch`
// draws. Pure functions of their inputs (the current time is passed in), so
// they are tested without a server.
#ifndef PSHARD_CLI_FORMAT_H_
#define PSHARD_CLI_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/job_state.h"
#include "google/protobuf/message.h"
#include "pshard/v1/cluster.pb.h"
#include "pshard/v1/job.pb.h"
#include "pshard/v1/shard.pb.h"

namespace pshard::cli {

// A text table whose columns are padded to their widest cell. Columns marked
// numeric are right-aligned so digits line up.
class Table {
 public:
  explicit Table(std::vector<std::string> header,
                 std::vector<bool> numeric = {});

  void AddRow(std::vector<std::string> cells);
  // Rendered rows, each ending in '\n'; trailing spaces are trimmed.
  std::string Render() const;

 private:
  std::vector<std::string> header_;
  std::vector<bool> numeric_;
  std::vector<std::vector<std::string>> rows_;
};

// 0 -> "0 B", 1536 -> "1.5 KiB", 26214400 -> "25.0 MiB".
std::string HumanBytes(int64_t bytes);

// 0.0123 s -> "12.3ms", 75 s -> "1m15s": compact, for tables and progress.
std::string HumanDuration(absl::Duration d);

// "QUEUED", "RUNNING", ... (enum name without prefix).
std::string JobStateName(v1::JobState state);
std::string WorkerStateName(v1::WorkerState state);
std::string PolicyName(v1::JobSpec::AssignmentPolicy policy);
// "mlp", "synthetic", "replay", "program python3" (argv[0]); "-" if none.
std::string JobWorkload(const v1::JobSpec& spec);

// Parses a job state name, case-insensitively ("running", "SUCCEEDED").
// InvalidArgument lists the valid names.
absl::StatusOr<v1::JobState> ParseJobState(absl::string_view name);

// The message under protobuf's JSON mapping (proto field names, indented,
// default-valued scalars included so scripts see every field), ending in '\n'.
std::string ToJson(const google::protobuf::Message& message);
// Same, on one line (for streams of events: one JSON object per line).
std::string ToJsonLine(const google::protobuf::Message& message);

// `pshardctl list`: ID, NAME, STATE, WORKERS, STEP, SUBMITTED (age).
std::string FormatJobsTable(const std::vector<v1::Job>& jobs, absl::Time now);

// `pshardctl get`: one "key: value" line per interesting field.
std::string FormatJobDetails(const v1::Job& job, absl::Time now);

// A restart event, on one line (`watch`):
// "restart 1 of 3: epoch 2 on 2 workers from step 50: <cause>".
std::string FormatRestartLine(const v1::JobEvent::Restart& restart,
                              int max_restarts);

// A checkpoint event, on one line (`watch`):
// "checkpoint step 50 COMPLETE: 4 shards, 3.1 MiB at /ckpt/job-7/step-50", or
// "checkpoint step 50 FAILED: <reason>".
std::string FormatCheckpointLine(const v1::CheckpointRecord& checkpoint);

// `pshardctl checkpoints`: "initialised from PATH (step s)" first for a job
// submitted with from_checkpoint, then STEP, STATE, WORLD, SIZE, TIME (age),
// PATH, REASON, oldest first; "no checkpoints" when there are none.
std::string FormatCheckpointsTable(const v1::Job& job, absl::Time now);

// `pshardctl shards`: a bucket table (bucket, bytes, elements, owner rank,
// worker, parameters), a per-rank totals table, then a summary line with the
// policy, the imbalance and the epoch.
std::string FormatShardTable(const v1::ShardAssignment& assignment);

// `pshardctl workers`: ID, NAME, HOST, DEVICE, STATE, JOB, RANK, HEARTBEAT.
std::string FormatWorkersTable(const std::vector<v1::WorkerInfo>& workers);

// One plain progress line:
// "step 120/200 (60%)  loss 0.01234  step 12.3ms  3200 samples/s".
std::string FormatProgressLine(const v1::JobProgress& progress);

// A progress bar of `bar_width` cells followed by the progress line's figures,
// for redrawing in place on a terminal:
// "[############--------]  120/200  60%  loss 0.01234  12.3ms/step  3200 samples/s".
std::string FormatProgressBar(const v1::JobProgress& progress, int bar_width);

}  // namespace pshard::cli

#endif  // PSHARD_CLI_FORMAT_H_
