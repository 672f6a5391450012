#include "checkpoint/async_writer.h"

#include <signal.h>
#include <sys/resource.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/catalog.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard.h"
#include "checkpoint/test_checkpoints.h"
#include "common/clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace pshard::checkpoint {
namespace {

using ::pshard::checkpoint::testing::MakeParameters;
using ::pshard::checkpoint::testing::OwnedParameter;
using ::pshard::testing::ListDirectory;
using ::pshard::testing::MakeTempDir;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<ParameterTensors> Views(const std::vector<OwnedParameter>& params) {
  std::vector<ParameterTensors> views;
  for (const auto& p : params) views.push_back(p.View());
  return views;
}

// Every parameter and both of its Adam state tensors read back as `params`.
void ExpectCheckpointHolds(const std::string& step_dir,
                           const std::vector<OwnedParameter>& params) {
  ASSERT_OK_AND_ASSIGN(auto reader, ShardReader::Open(step_dir));
  for (const OwnedParameter& p : params) {
    SCOPED_TRACE(p.name);
    ASSERT_OK_AND_ASSIGN(auto value, reader->ReadFloats(p.name));
    EXPECT_EQ(value, p.value);
    ASSERT_OK_AND_ASSIGN(auto m, reader->ReadFloats(p.name + ".exp_avg"));
    EXPECT_EQ(m, p.exp_avg);
    ASSERT_OK_AND_ASSIGN(auto v, reader->ReadFloats(p.name + ".exp_avg_sq"));
    EXPECT_EQ(v, p.exp_avg_sq);
  }
}

TEST(AsyncCheckpointWriterTest, WritesTheSnapshotNotLaterChanges) {
  const std::string root = MakeTempDir("async");
  ASSERT_OK_AND_ASSIGN(CheckpointWriter writer, CheckpointWriter::Create(root, 0, 1, "fp"));
  AsyncCheckpointWriter async(writer, Clock::Real());
  EXPECT_TRUE(async.IsCompleted());
  EXPECT_THAT(async.Wait(absl::Seconds(1)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no write")));

  std::vector<OwnedParameter> params = MakeParameters(4, 7);
  const std::vector<OwnedParameter> snapshot = params;
  ASSERT_OK(async.Start(7, Views(params)));
  // Training goes on and changes every tensor right away.
  for (auto& p : params) {
    for (float& x : p.value) x = -1;
    for (float& x : p.exp_avg) x = -1;
  }
  ASSERT_OK_AND_ASSIGN(ShardFileInfo file, async.Wait(absl::Minutes(2)));
  EXPECT_TRUE(async.IsCompleted());
  EXPECT_EQ(file.name, "shard-0-of-1.safetensors");
  EXPECT_GE(async.last_snapshot_duration(), absl::ZeroDuration());
  ASSERT_OK(WriteManifest(root, {7, "fp", 1, {file}}));
  ExpectCheckpointHolds(StepDirectory(root, 7), snapshot);
  // A second checkpoint of the same shapes (reusing the first snapshot's
  // buffers) holds the new values, and the program state given with them.
  ASSERT_OK(async.Start(8, Views(params), std::string("after 8")));
  ASSERT_OK_AND_ASSIGN(ShardFileInfo file8, async.Wait(absl::Minutes(2)));
  ASSERT_OK(WriteManifest(root, {8, "fp", 1, {file8}}));
  ExpectCheckpointHolds(StepDirectory(root, 8), params);
  ASSERT_OK_AND_ASSIGN(auto reader, ShardReader::Open(StepDirectory(root, 8)));
  ASSERT_OK_AND_ASSIGN(auto states, reader->ProgramStates());
  EXPECT_EQ(states[0], "after 8");
  // The result is taken once.
  EXPECT_THAT(async.Wait(absl::Seconds(1)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no write")));
  // Bad input is refused before anything is copied or queued.
  const std::vector<float> x = {1, 2};
  EXPECT_THAT(async.Start(8, {{"w", FloatTensor(x, {3}), {}}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'w'")));
  EXPECT_THAT(async.Start(-1, {}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("-1")));
  EXPECT_THAT(async.Start(9, {}, std::string(kMaxProgramStateBytes + 1, 'x')),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("program state")));
  EXPECT_TRUE(async.IsCompleted());
}

// The caller fills the snapshot itself (each tensor from wherever it
// lives: here, a parameter split in two pieces); a fill that fails queues
// nothing and the next Start still works.
TEST(AsyncCheckpointWriterTest, FillsTheSnapshotInPlace) {
  const std::string root = MakeTempDir("async-fill");
  ASSERT_OK_AND_ASSIGN(CheckpointWriter writer, CheckpointWriter::Create(root, 0, 1, "fp"));
  AsyncCheckpointWriter async(writer, Clock::Real());
  const std::vector<OwnedParameter> params = MakeParameters(3, 5);
  std::vector<AsyncCheckpointWriter::EntryLayout> layout;
  for (const OwnedParameter& p : params) {
    layout.push_back({p.name, {DType::kF32, p.shape},
                      {{"exp_avg", {DType::kF32, p.shape}},
                       {"exp_avg_sq", {DType::kF32, p.shape}}}});
  }
  auto fill = [&](int i, absl::Span<const absl::Span<char>> buffers) {
    const OwnedParameter& p = params[i];
    const std::vector<float>* sources[] = {&p.value, &p.exp_avg, &p.exp_avg_sq};
    EXPECT_EQ(buffers.size(), 3u);
    for (size_t t = 0; t < 3; ++t) {
      const std::vector<float>& from = *sources[t];
      EXPECT_EQ(buffers[t].size(), from.size() * sizeof(float));
      const size_t half = from.size() / 2;  // two pieces
      std::memcpy(buffers[t].data(), from.data(), half * sizeof(float));
      std::memcpy(buffers[t].data() + half * sizeof(float), from.data() + half,
                  (from.size() - half) * sizeof(float));
    }
    return absl::OkStatus();
  };
  EXPECT_THAT(async.Start(5, layout,
                          [](int i, absl::Span<const absl::Span<char>>) {
                            return i == 1 ? absl::InternalError("device lost")
                                          : absl::OkStatus();
                          }),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("device lost")));
  EXPECT_TRUE(async.IsCompleted());
  EXPECT_THAT(async.Wait(absl::Seconds(1)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no write")));
  std::vector<AsyncCheckpointWriter::EntryLayout> negative = layout;
  negative[0].state[1].second.shape = {-4};
  EXPECT_THAT(async.Start(5, negative, fill),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(params[0].name + ".exp_avg_sq: negative")));
  ASSERT_OK(async.Start(5, layout, fill));
  ASSERT_OK_AND_ASSIGN(ShardFileInfo file, async.Wait(absl::Minutes(2)));
  ASSERT_OK(WriteManifest(root, {5, "fp", 1, {file}}));
  ExpectCheckpointHolds(StepDirectory(root, 5), params);
}

// Lowers this process's file-size limit (RLIMIT_FSIZE: works unprivileged,
// unlike a small tmpfs) with SIGXFSZ ignored, so a write past it fails with
// EFBIG, as a full disk fails with ENOSPC. Restored on destruction.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit saved_;
  sighandler_t old_handler_;
};

TEST(AsyncCheckpointWriterTest, AFullDiskFailsTheWriteAndKeepsThePreviousCheckpoint) {
  const std::string root = MakeTempDir("full");
  ASSERT_OK_AND_ASSIGN(CheckpointWriter writer, CheckpointWriter::Create(root, 0, 1, "fp"));
  AsyncCheckpointWriter async(writer, Clock::Real());
  const std::vector<OwnedParameter> small = MakeParameters(3, 10);
  ASSERT_OK(async.Start(10, Views(small)));
  ASSERT_OK_AND_ASSIGN(ShardFileInfo file10, async.Wait(absl::Minutes(2)));
  ASSERT_OK(WriteManifest(root, {10, "fp", 1, {file10}}));

  // Step 20 is 3 MiB; the limit is 64 KiB.
  OwnedParameter big = MakeParameters(1, 20)[0];
  big.shape = {1 << 18};
  big.value.assign(1 << 18, 1.0f);
  big.exp_avg.assign(1 << 18, 2.0f);
  big.exp_avg_sq.assign(1 << 18, 3.0f);
  absl::StatusOr<ShardFileInfo> failed;
  {
    FileSizeLimit limit(64 << 10);
    ASSERT_OK(async.Start(20, {big.View()}));
    failed = async.Wait(absl::Minutes(2));
  }
  EXPECT_THAT(failed, StatusIs(absl::StatusCode::kResourceExhausted,
                               HasSubstr("step-20/shard-0-of-1.safetensors")));
  // Nothing half-written is left, and step 10 is still the latest complete.
  EXPECT_THAT(ListDirectory(StepDirectory(root, 20)), ElementsAre());
  ASSERT_OK_AND_ASSIGN(CompleteCheckpoint latest, LatestCompleteCheckpoint(root));
  EXPECT_EQ(latest.manifest.step, 10);
  EXPECT_THAT(latest.skipped, ElementsAre(HasSubstr("step-20 is incomplete")));

  // Training went on; the next checkpoint, with room again, succeeds.
  ASSERT_OK(async.Start(30, {big.View()}));
  ASSERT_OK_AND_ASSIGN(ShardFileInfo file30, async.Wait(absl::Minutes(2)));
  ASSERT_OK(WriteManifest(root, {30, "fp", 1, {file30}}));
  ASSERT_OK_AND_ASSIGN(latest, LatestCompleteCheckpoint(root));
  EXPECT_EQ(latest.manifest.step, 30);
}

}  // namespace
}  // namespace pshard::checkpoint
