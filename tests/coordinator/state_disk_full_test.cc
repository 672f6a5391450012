// Commit or nothing, end to end: the real pshard-coordinator with its state
// file on a small tmpfs that a test file then fills. A submission is refused
// (UNAVAILABLE, with SQLite's "database or disk is full") and leaves no job
// behind, health turns NOT_SERVING; once the space is back the coordinator
// serves again by itself, and after a kill -9 and a restart on the same
// file exactly the acknowledged jobs are there.
//
// The tmpfs is mounted in a mount namespace of this test's own (the
// coordinator inherits it). Needs CAP_SYS_ADMIN; skips, saying so, without.
#include <signal.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/coordinator/helpers.h"
#include "tests/testing/private_mount.h"

namespace pshard {
namespace coordinator_test {
namespace {

using ::grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;

// Writes zeros to `path` until the disk is full; whether it filled.
bool FillDisk(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const std::string block(64 << 10, '\0');
  while (std::fwrite(block.data(), 1, block.size(), f) == block.size()) {
  }
  // The last partial block, then the kernel's own buffers.
  const bool full = std::fflush(f) != 0 || std::ferror(f) != 0;
  std::fclose(f);
  return full;
}

HealthCheckResponse::ServingStatus Health(grpc::health::v1::Health::Stub* stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  HealthCheckResponse resp;
  if (!stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp).ok()) {
    return HealthCheckResponse::UNKNOWN;
  }
  return resp.status();
}

TEST(StateDiskFullTest, ARefusedSubmissionLeavesNothingAndServingResumes) {
  if (absl::Status ns = testing::PrivateMountNamespace(); !ns.ok()) {
    GTEST_SKIP() << "cannot mount a small tmpfs: " << ns;
  }
  const std::string dir = testing::MakeTempDir("disk-full");
  const std::string disk = dir + "/small-disk";
  ASSERT_OK(testing::MountTmpfs(disk, "1m"));
  testing::CoordinatorOptions options;
  options.dir = dir;  // the log and port file stay off the small disk
  options.state_path = disk + "/state.db";
  options.worker_timeout = absl::Seconds(3);
  ASSERT_OK_AND_ASSIGN(testing::RunningCoordinator coordinator,
                       testing::StartCoordinator(options));
  auto jobs = v1::JobService::NewStub(coordinator.Channel());
  auto health = grpc::health::v1::Health::NewStub(coordinator.Channel());
  ASSERT_OK_AND_ASSIGN(v1::Job first, SubmitJob(jobs.get(), "before", 2, 10));
  EXPECT_EQ(Health(health.get()), HealthCheckResponse::SERVING);

  const std::string filler = disk + "/filler";
  ASSERT_TRUE(FillDisk(filler));
  absl::StatusOr<v1::Job> refused = SubmitJob(jobs.get(), "refused", 2, 10);
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kUnavailable,
                                HasSubstr("database or disk is full")));
  EXPECT_TRUE(testing::WaitUntil(
      [&] { return Health(health.get()) == HealthCheckResponse::NOT_SERVING; },
      absl::Seconds(10)))
      << testing::ReadFile(coordinator.log);
  // Nothing of it is shown.
  EXPECT_THAT(GetJob(jobs.get(), "job-2"),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  ASSERT_OK_AND_ASSIGN(v1::Job still, GetJob(jobs.get(), first.id()));
  EXPECT_EQ(still.state(), v1::QUEUED);

  // Space is back: health recovers by itself (the probe), and submissions
  // are taken again (the refused id is not handed out).
  ASSERT_EQ(std::remove(filler.c_str()), 0);
  EXPECT_TRUE(testing::WaitUntil(
      [&] { return Health(health.get()) == HealthCheckResponse::SERVING; },
      absl::Seconds(10)))
      << testing::ReadFile(coordinator.log);
  ASSERT_OK_AND_ASSIGN(v1::Job after, SubmitJob(jobs.get(), "after", 2, 10));
  EXPECT_EQ(after.id(), "job-3");

  ASSERT_OK(coordinator.process->Signal(SIGKILL));
  ASSERT_OK(coordinator.process->Wait(absl::Seconds(10)).status());
  ASSERT_OK_AND_ASSIGN(testing::RunningCoordinator restarted,
                       testing::StartCoordinator(options));
  auto restarted_jobs = v1::JobService::NewStub(restarted.Channel());
  ASSERT_OK_AND_ASSIGN(v1::Job kept, GetJob(restarted_jobs.get(), first.id()));
  EXPECT_EQ(kept.spec().name(), "before");
  ASSERT_OK_AND_ASSIGN(kept, GetJob(restarted_jobs.get(), after.id()));
  EXPECT_EQ(kept.spec().name(), "after");
  EXPECT_THAT(GetJob(restarted_jobs.get(), "job-2"),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

}  // namespace
}  // namespace coordinator_test
}  // namespace pshard
