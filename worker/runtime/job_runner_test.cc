#include "worker/runtime/job_runner.h"

#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"
#include "worker/io/safetensors.h"
#include "worker/runtime/fake_control_plane.h"

namespace pshard::worker {
namespace {

using ::pshard::testing::MakeTempDir;
using ::testing::HasSubstr;

v1::RunJobDirective Directive(int rank, int world, int64_t steps) {
  v1::RunJobDirective d;
  d.set_job_id("job-1");
  d.set_epoch(3);
  d.set_rank(rank);
  d.set_world_size(world);
  v1::JobSpec& spec = *d.mutable_spec();
  spec.set_name("t");
  spec.set_world_size(world);
  spec.set_backend(v1::JobSpec::AUTO);
  spec.mutable_synthetic()->set_num_parameters(5000);
  spec.mutable_synthetic()->set_tensor_numel(1000);
  spec.set_bucket_cap_mb(0.01);
  spec.set_assignment_policy(v1::JobSpec::BALANCED);
  spec.set_comm_mode(v1::JobSpec::REDUCE_BROADCAST);
  spec.set_steps(steps);
  spec.set_progress_every(2);
  spec.set_collective_timeout_seconds(20);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::SGD);
  spec.mutable_optimizer()->mutable_hyper_parameters()->set_lr(0.1);
  spec.mutable_optimizer()->mutable_hyper_parameters()->set_momentum(0.9);
  return d;
}

JobRunnerOptions Options(int rank) {
  JobRunnerOptions options;
  options.worker_id = absl::StrCat("w-", rank);
  options.rpc_timeout = absl::Seconds(5);
  return options;
}

TEST(JobRunnerTest, TwoRanksTrainReportAndWriteOutput) {
  FakeControlPlane control(2);
  const std::string out = MakeTempDir("job");
  std::vector<absl::Status> statuses(2);
  std::vector<std::unique_ptr<JobRunner>> runners;
  for (int r = 0; r < 2; ++r) {
    v1::RunJobDirective d = Directive(r, 2, 5);
    d.mutable_spec()->set_output_dir(out);
    runners.push_back(std::make_unique<JobRunner>(&control, d, Options(r)));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] { statuses[r] = runners[r]->Run(); });
  }
  for (auto& t : threads) t.join();
  EXPECT_OK(statuses[0]);
  EXPECT_OK(statuses[1]);

  auto results = control.results();
  ASSERT_EQ(results.size(), 2u);
  for (const auto& result : results) {
    EXPECT_TRUE(result.ok()) << result.error();
    EXPECT_EQ(result.final_step(), 5);
    EXPECT_EQ(result.epoch(), 3);
    EXPECT_EQ(result.output_path(),
              result.rank() == 0 ? out + "/params.safetensors" : "");
  }
  // Rank 0 reports progress; the last step is always among the reports.
  auto progress = control.progress();
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back().progress().step(), 5);
  EXPECT_EQ(progress.back().progress().total_steps(), 5);
  EXPECT_GT(progress.back().progress().bytes_sent(), 0);
  for (const auto& p : progress) EXPECT_EQ(p.rank(), 0);

  ASSERT_OK_AND_ASSIGN(auto tensors,
                       ReadSafetensors(out + "/params.safetensors"));
  ASSERT_EQ(tensors.size(), 5u);
  EXPECT_EQ(tensors[0].name, "t0");
  EXPECT_EQ(tensors[4].shape, std::vector<int64_t>{1000});

  // Both ranks own something and their state adds up to the whole model.
  JobSnapshot s0 = runners[0]->Snapshot();
  JobSnapshot s1 = runners[1]->Snapshot();
  EXPECT_EQ(s0.step, 5);
  EXPECT_EQ(s0.optimizer_state_bytes + s1.optimizer_state_bytes, 5000 * 4);
  EXPECT_FALSE(s0.owned_shards.empty());
  EXPECT_FALSE(s1.owned_shards.empty());
}

TEST(JobRunnerTest, StaleAssignmentEpochIsRefused) {
  FakeControlPlane control(1);
  control.set_assignment_epoch_offset(-1);
  JobRunner runner(&control, Directive(0, 1, 3), Options(0));
  EXPECT_THAT(runner.Run(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("refusing the assignment of job job-1 epoch 2")));
  auto results = control.results();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_FALSE(results[0].ok());
  EXPECT_THAT(results[0].error(), HasSubstr("epoch 2"));
}

TEST(JobRunnerTest, AbortDuringRendezvousReturnsPromptly) {
  FakeControlPlane control(2);
  // Only rank 0 of 2 runs: it waits in the rendezvous until aborted.
  JobRunner runner(&control, Directive(0, 2, 3), Options(0));
  absl::Status status;
  std::thread t([&] { status = runner.Run(); });
  // Rank 0 is blocked in the rendezvous once it waits for rank 1's key.
  EXPECT_TRUE(control.WaitForKvGets(1, absl::Seconds(30)));
  const absl::Time start = absl::Now();
  runner.Abort(absl::AbortedError("job job-1 cancelled"));
  t.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kAborted, "job job-1 cancelled"));
  ASSERT_TRUE(control.WaitForResults(1, absl::Seconds(5)));
  EXPECT_FALSE(control.results()[0].ok());
}

TEST(JobRunnerTest, CoordinatorAbortInProgressReplyStopsJob) {
  FakeControlPlane control(1);
  control.set_abort_on_progress(true);
  JobRunner runner(&control, Directive(0, 1, 1000000), Options(0));
  absl::Status status = runner.Run();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kAborted,
                               HasSubstr("stopped by the coordinator")));
  EXPECT_LT(runner.Snapshot().step, 1000000);
}

TEST(JobRunnerTest, NcclIsRefusedOnCpu) {
  FakeControlPlane control(1);
  v1::RunJobDirective d = Directive(0, 1, 1);
  d.mutable_spec()->set_backend(v1::JobSpec::NCCL);
  JobRunner runner(&control, d, Options(0));
  EXPECT_THAT(runner.Run(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                     HasSubstr("NCCL")));
}

TEST(JobRunnerTest, BadWorkloadFailsAndReports) {
  FakeControlPlane control(1);
  v1::RunJobDirective d = Directive(0, 1, 1);
  d.mutable_spec()->mutable_replay()->set_params_path("/nonexistent/p.safetensors");
  d.mutable_spec()->mutable_replay()->set_gradients_dir("/nonexistent");
  JobRunner runner(&control, d, Options(0));
  EXPECT_FALSE(runner.Run().ok());
  ASSERT_EQ(control.results().size(), 1u);
  EXPECT_THAT(control.results()[0].error(), HasSubstr("rank 0"));
}

}  // namespace
}  // namespace pshard::worker
