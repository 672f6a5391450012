// End to end, the operator's logs (docs/user-guide.md, "Troubleshooting"):
// the real coordinator (--log_format=json) and workers (text) log the
// registrations, a failing job's transitions with reason and epoch and the
// worker's error line naming job, rank and what failed; a 50-step job that
// succeeds adds a handful of lines, none per step.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"

namespace pshard::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// The line of `text` that contains every one of `parts`, or "".
std::string LineWith(const std::string& text,
                     const std::vector<std::string>& parts) {
  for (const std::string& line : Lines(text)) {
    bool all = true;
    for (const std::string& p : parts) all = all && absl::StrContains(line, p);
    if (all) return line;
  }
  return "";
}

// The line of the files at `paths` with every part, polled for up to 10 s
// (a worker logs its rank's end after the coordinator has its result).
std::string WaitForLine(const std::vector<std::string>& paths,
                        const std::vector<std::string>& parts) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (true) {
    std::string all;
    for (const std::string& path : paths) all += ReadFile(path);
    const std::string line = LineWith(all, parts);
    if (!line.empty() || absl::Now() > deadline) return line;
    absl::SleepFor(absl::Milliseconds(50));
  }
}

std::string WaitForWorkerLine(Cluster& cluster,
                              const std::vector<std::string>& parts) {
  std::vector<std::string> paths;
  for (int i = 0; i < cluster.num_workers(); ++i) {
    paths.push_back(cluster.worker_log_path(i));
  }
  return WaitForLine(paths, parts);
}

v1::JobSpec MlpSpec(int steps) {
  v1::JobSpec spec;
  spec.set_name("logged");
  spec.set_world_size(2);
  auto* mlp = spec.mutable_mlp();
  mlp->set_input_dim(8);
  mlp->add_hidden_dims(16);
  mlp->set_output_dim(4);
  mlp->set_batch_size(8);
  spec.set_bucket_cap_mb(0.01);
  spec.set_steps(steps);
  spec.set_seed(1);
  spec.set_progress_every(1);
  spec.set_collective_timeout_seconds(20);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  spec.mutable_optimizer()->mutable_hyper_parameters()->set_lr(0.01);
  return spec;
}

TEST(LoggingE2eTest, TransitionsErrorsAndNothingPerStep) {
  ClusterOptions options;
  options.workers = 2;
  options.coordinator_flags = {"--log_format=json"};
  ASSERT_OK_AND_ASSIGN(auto cluster, Cluster::Start(options));

  // Registration: id, name, host and device; never the incarnation.
  std::string coordinator_log = ReadFile(cluster->coordinator_log_path());
  for (int i = 0; i < 2; ++i) {
    const std::string line = WaitForLine(
        {cluster->coordinator_log_path()},
        {absl::StrCat("(worker-", i, ") registered: host 127.0.0.1"),
         "device cpu"});
    EXPECT_THAT(line, AllOf(StartsWith("{\"time\":\""),
                            HasSubstr("\"level\":\"info\""),
                            HasSubstr("\"program\":\"pshard-coordinator\"")))
        << coordinator_log;
  }
  coordinator_log = ReadFile(cluster->coordinator_log_path());
  ASSERT_OK_AND_ASSIGN(std::vector<v1::WorkerInfo> workers,
                       cluster->Workers(false));
  for (const v1::WorkerInfo& w : workers) {
    if (!w.incarnation().empty()) {
      EXPECT_THAT(coordinator_log, Not(HasSubstr(w.incarnation())));
    }
  }
  // The worker logs its registration after the coordinator's reply, which
  // can come after the coordinator's own line: wait for it.
  for (int i = 0; i < 2; ++i) {
    EXPECT_NE(WaitForLine({cluster->worker_log_path(i)},
                          {"registered with the coordinator"}),
              "")
        << ReadFile(cluster->worker_log_path(i));
  }

  // A job that fails: rank 0 cannot create its output directory.
  v1::JobSpec failing = MlpSpec(3);
  failing.set_output_dir(cluster->dir() + "/no/such/parent");
  ASSERT_OK_AND_ASSIGN(v1::Job submitted, cluster->Submit(failing));
  const std::string& id = submitted.id();
  ASSERT_OK_AND_ASSIGN(v1::Job failed,
                       cluster->WaitForEnd(id, absl::Seconds(60)));
  ASSERT_EQ(failed.state(), v1::FAILED) << failed.reason() << cluster->Logs();
  coordinator_log = ReadFile(cluster->coordinator_log_path());
  EXPECT_NE(LineWith(coordinator_log, {"job " + id + " submitted"}), "")
      << coordinator_log;
  EXPECT_NE(LineWith(coordinator_log,
                     {"job " + id + ": QUEUED -> STARTING (epoch 1): ",
                      "scheduled on 2 workers"}),
            "")
      << coordinator_log;
  EXPECT_NE(LineWith(coordinator_log,
                     {"job " + id + ": STARTING -> RUNNING (epoch 1)"}),
            "")
      << coordinator_log;
  const std::string failed_line = LineWith(
      coordinator_log, {"job " + id + ": RUNNING -> FAILED (epoch 1): ",
                        "rank 0", "cannot create output directory"});
  EXPECT_THAT(failed_line, HasSubstr("\"level\":\"warning\"")) << coordinator_log;

  // The worker's error line: job, epoch, rank, what failed.
  const std::string error_line = WaitForWorkerLine(
      *cluster, {"job " + id + " epoch 1 rank 0 of 2: failed at step 3",
                 "cannot create output directory"});
  EXPECT_THAT(error_line, StartsWith("E")) << cluster->Logs();
  EXPECT_NE(WaitForWorkerLine(*cluster,
                              {"job " + id + " epoch 1 rank 1 of 2: starting"}),
            "")
      << cluster->Logs();

  // 50 steps that succeed: a few lines each, none per step.
  ASSERT_TRUE(cluster->WaitForIdle(2, absl::Seconds(20))) << cluster->Logs();
  std::vector<size_t> before = {
      Lines(ReadFile(cluster->coordinator_log_path())).size(),
      Lines(ReadFile(cluster->worker_log_path(0))).size(),
      Lines(ReadFile(cluster->worker_log_path(1))).size()};
  ASSERT_OK_AND_ASSIGN(v1::Job second, cluster->Submit(MlpSpec(50)));
  ASSERT_OK_AND_ASSIGN(v1::Job succeeded,
                       cluster->WaitForEnd(second.id(), absl::Seconds(60)));
  ASSERT_EQ(succeeded.state(), v1::SUCCEEDED)
      << succeeded.reason() << cluster->Logs();
  EXPECT_NE(WaitForWorkerLine(*cluster, {"job " + second.id() +
                                             " epoch 1 rank 0 of 2: succeeded "
                                             "(step 50"}),
            "")
      << cluster->Logs();
  EXPECT_NE(WaitForWorkerLine(*cluster, {"job " + second.id() +
                                             " epoch 1 rank 1 of 2: succeeded"}),
            "")
      << cluster->Logs();
  const std::vector<std::string> paths = {cluster->coordinator_log_path(),
                                          cluster->worker_log_path(0),
                                          cluster->worker_log_path(1)};
  for (size_t p = 0; p < paths.size(); ++p) {
    const std::vector<std::string> lines = Lines(ReadFile(paths[p]));
    const std::vector<std::string> added(lines.begin() + before[p],
                                         lines.end());
    // Coordinator: submitted and three transitions; a worker: start and end.
    EXPECT_LE(added.size(), 8u)
        << paths[p] << " gained:\n" << absl::StrJoin(added, "\n");
    EXPECT_GE(added.size(), p == 0 ? 4u : 2u) << paths[p];
  }
  const std::string last = ReadFile(cluster->coordinator_log_path());
  EXPECT_NE(LineWith(last, {"job " + second.id() +
                                ": RUNNING -> SUCCEEDED (epoch 1)"}),
            "")
      << last;
}

}  // namespace
}  // namespace pshard::testing
