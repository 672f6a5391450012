// End to end, issue 16 item 6: no head-of-line blocking. The real
// pshard-coordinator and three pshard-workers on loopback, running small
// shell programs. While a job holds two workers, a queued 3-rank job (the
// head) waits for them, and a 1-rank job submitted after it starts on the
// idle third worker and succeeds (backfill); a job wider than the pool says
// it can never start and holds nobody back. Once the first job ends, the
// head runs.
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"

namespace pshard::testing {
namespace {

using ::testing::HasSubstr;

// A program job of `world_size` ranks running `script` under /bin/sh with
// OUT=`out`.
v1::JobSpec Program(const std::string& name, int world_size,
                    const std::string& out, const std::string& script) {
  v1::JobSpec spec;
  spec.set_name(name);
  spec.set_world_size(world_size);
  v1::ProgramWorkload* program = spec.mutable_program();
  program->add_argv("/bin/sh");
  program->add_argv(WriteTempFile(absl::StrCat(name, ".sh"), script));
  (*program->mutable_env())["OUT"] = out;
  return spec;
}

TEST(SchedulingE2eTest, ALaterJobBackfillsWhileTheHeadWaits) {
  ClusterOptions options;
  options.workers = 3;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Cluster> cluster,
                       Cluster::Start(options));
  const std::string out = MakeTempDir("sched-out");

  ASSERT_OK_AND_ASSIGN(
      const v1::Job hold,
      cluster->Submit(Program("hold", 2, out,
                              "while [ ! -e \"$OUT/release\" ]; do "
                              "sleep 0.02; done\n")));
  ASSERT_EQ(hold.state(), v1::STARTING) << hold.reason();
  ASSERT_OK_AND_ASSIGN(
      const v1::Job wide,
      cluster->Submit(Program("wide", 3, out, "touch \"$OUT/wide-$RANK\"\n")));
  EXPECT_EQ(wide.state(), v1::QUEUED);
  EXPECT_EQ(wide.reason(), "submitted; waiting for 3 idle workers");
  ASSERT_OK_AND_ASSIGN(
      const v1::Job huge,
      cluster->Submit(Program("huge", 8, out, "exit 0\n")));
  EXPECT_EQ(huge.state(), v1::QUEUED);
  EXPECT_EQ(huge.reason(),
            "submitted; needs 8 workers; 3 are registered and not draining");

  ASSERT_OK_AND_ASSIGN(
      const v1::Job quick,
      cluster->Submit(Program("quick", 1, out, "touch \"$OUT/quick\"\n")));
  EXPECT_EQ(quick.state(), v1::STARTING) << quick.reason();
  ASSERT_OK_AND_ASSIGN(const v1::Job quick_ended,
                       cluster->WaitForEnd(quick.id(), absl::Seconds(60)));
  EXPECT_EQ(quick_ended.state(), v1::SUCCEEDED)
      << quick_ended.reason() << cluster->Logs();
  ASSERT_OK_AND_ASSIGN(v1::Job still, cluster->GetJob(wide.id()));
  EXPECT_EQ(still.state(), v1::QUEUED) << still.reason();

  {
    const std::string release = absl::StrCat(out, "/release");
    std::ofstream file(release);
    ASSERT_TRUE(file.good()) << release;
  }
  ASSERT_OK_AND_ASSIGN(const v1::Job hold_ended,
                       cluster->WaitForEnd(hold.id(), absl::Seconds(60)));
  EXPECT_EQ(hold_ended.state(), v1::SUCCEEDED) << hold_ended.reason();
  ASSERT_OK_AND_ASSIGN(const v1::Job wide_ended,
                       cluster->WaitForEnd(wide.id(), absl::Seconds(60)));
  EXPECT_EQ(wide_ended.state(), v1::SUCCEEDED)
      << wide_ended.reason() << cluster->Logs();

  ASSERT_OK_AND_ASSIGN(v1::Job huge_now, cluster->GetJob(huge.id()));
  EXPECT_EQ(huge_now.state(), v1::QUEUED);
  EXPECT_THAT(huge_now.reason(), HasSubstr("needs 8 workers"));
  ASSERT_OK(cluster->Cancel(huge.id()));
}

}  // namespace
}  // namespace pshard::testing
