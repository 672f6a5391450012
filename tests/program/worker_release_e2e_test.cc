// End to end, issue 17 item 3: a worker returns to the pool only when it is
// free. The real pshard-coordinator and two pshard-workers on loopback; the
// first job's program ignores SIGTERM (a long compute step that a cancel
// does not cut short) until the test lets it go. A job submitted after the
// cancel must not be handed to the still-busy workers (before the fix it
// was, and failed after 10 RunJob directives); it starts once they have
// stopped, and succeeds.
#include <algorithm>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"

namespace pshard::testing {
namespace {

// A 2-rank program job running `script` under /bin/sh with OUT=`out`.
v1::JobSpec Program(const std::string& name, const std::string& out,
                    const std::string& script) {
  v1::JobSpec spec;
  spec.set_name(name);
  spec.set_world_size(2);
  v1::ProgramWorkload* program = spec.mutable_program();
  program->add_argv("/bin/sh");
  program->add_argv(WriteTempFile(absl::StrCat(name, ".sh"), script));
  (*program->mutable_env())["OUT"] = out;
  // Longer than the test: only the test's release file ends the step.
  program->set_grace_period_seconds(600);
  return spec;
}

// Whether every one of `names` is in directory `dir`.
bool HasFiles(const std::string& dir, const std::vector<std::string>& names) {
  const std::vector<std::string> present = ListDirectory(dir);
  for (const std::string& name : names) {
    if (std::find(present.begin(), present.end(), name) == present.end()) {
      return false;
    }
  }
  return true;
}

TEST(WorkerReleaseE2eTest, JobSubmittedAfterACancelStartsOnceTheWorkersStop) {
  ClusterOptions options;
  options.workers = 2;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Cluster> cluster,
                       Cluster::Start(options));
  const std::string out = MakeTempDir("release-out");
  const std::string release = absl::StrCat(out, "/release");

  // The long step: SIGTERM is ignored (and stays ignored in the children),
  // so the rank runs on after the cancel until $OUT/release exists.
  ASSERT_OK_AND_ASSIGN(
      const v1::Job first,
      cluster->Submit(Program(
          "long-step", out,
          "trap '' TERM\n"
          "touch \"$OUT/started-$RANK\"\n"
          "while [ ! -e \"$OUT/release\" ]; do sleep 0.02; done\n")));
  ASSERT_TRUE(WaitUntil(
      [&] { return HasFiles(out, {"started-0", "started-1"}); },
      absl::Seconds(60)))
      << cluster->Logs();
  ASSERT_OK_AND_ASSIGN(const v1::Job cancelled, cluster->Cancel(first.id()));
  ASSERT_EQ(cancelled.state(), v1::CANCELLED);

  // The next job checks that the first one's programs are gone (they leave
  // only once the release file exists).
  ASSERT_OK_AND_ASSIGN(
      const v1::Job second,
      cluster->Submit(Program("next", out,
                              "[ -e \"$OUT/release\" ] || exit 3\n"
                              "touch \"$OUT/next-$RANK\"\n")));

  // Both workers show what they finish; nothing is scheduled on them for
  // 20 heartbeat intervals (twice the RunJob directives that failed the
  // next job before).
  auto workers_releasing = [&] {
    absl::StatusOr<std::vector<v1::WorkerInfo>> workers =
        cluster->Workers(/*include_lost=*/false);
    if (!workers.ok() || workers->size() != 2) return false;
    for (const v1::WorkerInfo& w : *workers) {
      if (w.state() != v1::RELEASING || w.job_id() != first.id()) return false;
    }
    return true;
  };
  ASSERT_TRUE(workers_releasing()) << cluster->Logs();
  const bool changed = WaitUntil(
      [&] {
        absl::StatusOr<v1::Job> job = cluster->GetJob(second.id());
        return !job.ok() || job->state() != v1::QUEUED || !workers_releasing();
      },
      20 * options.heartbeat_interval);
  EXPECT_FALSE(changed) << "the next job or a worker moved while the first "
                           "job's ranks still ran\n"
                        << cluster->Logs();

  {
    std::ofstream file(release);
    ASSERT_TRUE(file.good()) << release;
  }
  ASSERT_OK_AND_ASSIGN(const v1::Job ended,
                       cluster->WaitForEnd(second.id(), absl::Seconds(60)));
  EXPECT_EQ(ended.state(), v1::SUCCEEDED) << ended.reason() << cluster->Logs();
  EXPECT_EQ(ended.epoch(), 1);
  EXPECT_TRUE(HasFiles(out, {"next-0", "next-1"}));
  EXPECT_TRUE(cluster->WaitForIdle(2, absl::Seconds(30))) << cluster->Logs();
}

}  // namespace
}  // namespace pshard::testing
