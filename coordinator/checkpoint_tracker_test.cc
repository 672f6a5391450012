#include "coordinator/checkpoint_tracker.h"

#include <optional>
#include <string>

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::HasSubstr;
using Outcome = CheckpointTracker::Outcome;

v1::ReportCheckpointRequest Shard(int rank, int world, int64_t step,
                                  char hash = 'a') {
  v1::ReportCheckpointRequest r;
  r.set_rank(rank);
  r.set_step(step);
  r.set_ok(true);
  r.set_file_name(checkpoint::ShardFileName(rank, world));
  r.set_size_bytes(100 + rank);
  r.set_sha256(std::string(64, hash));
  return r;
}

// Add's outcome, failing the test on an error.
std::optional<Outcome> AddOk(CheckpointTracker& tracker,
                             const v1::ReportCheckpointRequest& report,
                             int world) {
  absl::StatusOr<Outcome> outcome = tracker.Add(report, world, "fp");
  EXPECT_OK(outcome);
  if (!outcome.ok()) return std::nullopt;
  return *outcome;
}

TEST(CheckpointTrackerTest, CompleteWhenEveryRankIsIn) {
  CheckpointTracker tracker;
  EXPECT_EQ(AddOk(tracker, Shard(1, 3, 10), 3), Outcome::kPending);
  EXPECT_EQ(AddOk(tracker, Shard(1, 3, 10), 3), Outcome::kIgnored);
  EXPECT_EQ(AddOk(tracker, Shard(0, 3, 10), 3), Outcome::kPending);
  EXPECT_EQ(tracker.manifest(10), nullptr);
  EXPECT_EQ(tracker.pending_steps(), 1);
  EXPECT_EQ(AddOk(tracker, Shard(2, 3, 10), 3), Outcome::kComplete);
  const checkpoint::Manifest* manifest = tracker.manifest(10);
  ASSERT_NE(manifest, nullptr);
  EXPECT_EQ(manifest->step, 10);
  EXPECT_EQ(manifest->world_size, 3);
  EXPECT_EQ(manifest->spec_fingerprint, "fp");
  ASSERT_EQ(manifest->files.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(manifest->files[r].rank, r);
    EXPECT_EQ(manifest->files[r].size_bytes, 100 + r);
  }
  EXPECT_OK(checkpoint::ValidateManifest(*manifest));
  EXPECT_EQ(tracker.pending_steps(), 0);
  // A late retry of a committed step changes nothing.
  EXPECT_EQ(AddOk(tracker, Shard(0, 3, 10), 3), Outcome::kIgnored);
}

TEST(CheckpointTrackerTest, OneFailureFailsTheStepOnce) {
  CheckpointTracker tracker;
  ASSERT_OK(tracker.Add(Shard(0, 2, 5), 2, "fp").status());
  v1::ReportCheckpointRequest failed;
  failed.set_rank(1);
  failed.set_step(5);
  failed.set_error("disk full");
  EXPECT_EQ(AddOk(tracker, failed, 2), Outcome::kFailed);
  EXPECT_EQ(AddOk(tracker, failed, 2), Outcome::kIgnored);
  EXPECT_EQ(tracker.manifest(5), nullptr);
  // Other steps are independent.
  EXPECT_EQ(AddOk(tracker, Shard(0, 2, 6), 2), Outcome::kPending);
  tracker.Reset();
  EXPECT_EQ(tracker.pending_steps(), 0);
}

TEST(CheckpointTrackerTest, MalformedReportsNameTheField) {
  CheckpointTracker tracker;
  v1::ReportCheckpointRequest r = Shard(0, 2, 0);
  EXPECT_THAT(tracker.Add(r, 2, "fp"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("step: must be >= 1")));
  r = Shard(0, 2, 1);
  r.set_file_name("../../etc/passwd");
  EXPECT_THAT(tracker.Add(r, 2, "fp"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("file_name: rank 0 of 2 writes \"shard-0-of-2.safetensors\"")));
  r = Shard(0, 2, 1);
  r.set_size_bytes(-1);
  EXPECT_THAT(tracker.Add(r, 2, "fp"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("size_bytes")));
  r = Shard(0, 2, 1);
  r.set_sha256(std::string(64, 'G'));
  EXPECT_THAT(tracker.Add(r, 2, "fp"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sha256")));
  ASSERT_OK(tracker.Add(Shard(0, 2, 1), 2, "fp").status());
  EXPECT_THAT(tracker.Add(Shard(0, 2, 1, 'b'), 2, "fp"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 0 reported another shard for step 1")));
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
