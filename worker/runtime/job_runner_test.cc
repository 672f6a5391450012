// The job runner against the real coordinator (tests/testing's
// InProcessCoordinator): each test submits its job there and runs the ranks'
// RunJob directives, as the agent would have received them.
#include "worker/runtime/job_runner.h"

#include <unistd.h>

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/in_process_coordinator.h"
#include "tests/testing/subprocess.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard.h"
#include "worker/io/safetensors.h"
#include "worker/runtime/intercepting_control_plane.h"

namespace pshard::worker {
namespace {

using ::pshard::testing::InProcessCoordinator;
using ::pshard::testing::MakeTempDir;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

v1::JobSpec Spec(int world, int64_t steps) {
  v1::JobSpec spec;
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
  return spec;
}

class JobRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(coordinator_, InProcessCoordinator::Start());
    control_ = std::make_unique<InterceptingControlPlane>(NewGrpcControlPlane(
        coordinator_->Channel(), "the in-process coordinator"));
  }

  // Submits `spec` and returns its ranks' directives (the job STARTING).
  std::vector<v1::RunJobDirective> Start(const v1::JobSpec& spec) {
    absl::StatusOr<std::vector<v1::RunJobDirective>> ranks =
        coordinator_->StartJob(spec);
    EXPECT_OK(ranks);
    return ranks.ok() ? *ranks : std::vector<v1::RunJobDirective>();
  }

  JobRunnerOptions Options(const v1::RunJobDirective& d) {
    JobRunnerOptions options;
    absl::StatusOr<v1::WorkerInfo> w =
        coordinator_->GetWorker(absl::StrCat("sim-", d.rank()));
    EXPECT_OK(w);
    options.worker_id = w.ok() ? w->id() : "";
    options.rpc_timeout = absl::Seconds(5);
    return options;
  }

  // Starts `spec` and runs every rank to the end, each on its own thread;
  // returns their directives (empty if the job did not start).
  std::vector<v1::RunJobDirective> RunAllRanks(const v1::JobSpec& spec) {
    std::vector<v1::RunJobDirective> ranks = Start(spec);
    RunRanks(ranks);
    return ranks;
  }

  // Runs `ranks` to the end, each on its own thread, expecting success;
  // returns each rank's last snapshot.
  std::vector<JobSnapshot> RunRanks(const std::vector<v1::RunJobDirective>& ranks) {
    std::vector<JobSnapshot> snapshots(ranks.size());
    std::vector<std::thread> threads;
    for (size_t r = 0; r < ranks.size(); ++r) {
      threads.emplace_back([&, r] {
        JobRunner runner(control_.get(), ranks[r], Options(ranks[r]));
        EXPECT_OK(runner.Run());
        snapshots[r] = runner.Snapshot();
      });
    }
    for (auto& t : threads) t.join();
    return snapshots;
  }

  std::unique_ptr<InProcessCoordinator> coordinator_;
  std::unique_ptr<InterceptingControlPlane> control_;
};

// With max_grad_norm every report carries the step's pre-clip norm (the
// coordinator keeps it); without, none.
TEST_F(JobRunnerTest, ProgressReportsTheGradNormOfClippingJobs) {
  for (const bool clip : {true, false}) {
    SCOPED_TRACE(clip ? "clipping" : "not clipping");
    const size_t before = control_->progress().size();
    v1::JobSpec spec = Spec(2, 4);
    if (clip) spec.mutable_optimizer()->set_max_grad_norm(1);
    std::vector<v1::RunJobDirective> ranks = RunAllRanks(spec);
    ASSERT_EQ(ranks.size(), 2u);
    auto progress = control_->progress();
    ASSERT_GT(progress.size(), before);
    for (size_t i = before; i < progress.size(); ++i) {
      const v1::JobProgress& p = progress[i].progress();
      ASSERT_EQ(p.has_grad_norm(), clip) << "step " << p.step();
      if (clip) {
        EXPECT_TRUE(std::isfinite(p.grad_norm()) && p.grad_norm() > 1)
            << p.grad_norm();  // clipped to 1 from above it
      }
    }
    ASSERT_OK_AND_ASSIGN(v1::Job job, coordinator_->GetJob(ranks[0].job_id()));
    EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.reason();
    EXPECT_EQ(job.progress().has_grad_norm(), clip);
  }
}

TEST_F(JobRunnerTest, TwoRanksTrainReportAndWriteOutput) {
  const std::string out = MakeTempDir("job");
  v1::JobSpec spec = Spec(2, 5);
  spec.set_output_dir(out);
  // lr 0.1 halved every 2 steps: step 5 (index 4) runs at 0.025.
  auto* schedule =
      spec.mutable_optimizer()->mutable_hyper_parameters()->mutable_lr_schedule();
  schedule->set_kind(v1::LrSchedule::STEP);
  schedule->set_step_size(2);
  schedule->set_gamma(0.5);
  std::vector<v1::RunJobDirective> ranks = Start(spec);
  ASSERT_EQ(ranks.size(), 2u);
  std::vector<absl::Status> statuses(2);
  std::vector<std::unique_ptr<JobRunner>> runners;
  for (int r = 0; r < 2; ++r) {
    runners.push_back(std::make_unique<JobRunner>(control_.get(), ranks[r],
                                                  Options(ranks[r])));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] { statuses[r] = runners[r]->Run(); });
  }
  for (auto& t : threads) t.join();
  EXPECT_OK(statuses[0]);
  EXPECT_OK(statuses[1]);

  auto results = control_->results();
  ASSERT_EQ(results.size(), 2u);
  for (const auto& result : results) {
    EXPECT_TRUE(result.ok()) << result.error();
    EXPECT_EQ(result.final_step(), 5);
    EXPECT_EQ(result.epoch(), ranks[0].epoch());
    EXPECT_EQ(result.output_path(),
              result.rank() == 0 ? out + "/params.safetensors" : "");
  }
  // The coordinator took the results: the job succeeded with rank 0's
  // output.
  ASSERT_OK_AND_ASSIGN(v1::Job job, coordinator_->GetJob(ranks[0].job_id()));
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.reason();
  EXPECT_EQ(job.output_path(), out + "/params.safetensors");
  EXPECT_EQ(job.progress().step(), 5);
  // Rank 0 reports progress; the last step is always among the reports.
  auto progress = control_->progress();
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back().progress().step(), 5);
  EXPECT_EQ(progress.back().progress().total_steps(), 5);
  EXPECT_GT(progress.back().progress().bytes_sent(), 0);
  // Each report carries the lr its step ran at (progress_every 2: steps 2,
  // 4 and the last).
  for (const auto& p : progress) {
    EXPECT_EQ(p.rank(), 0);
    EXPECT_DOUBLE_EQ(p.progress().lr(),
                     0.1 * std::pow(0.5, (p.progress().step() - 1) / 2))
        << "step " << p.progress().step();
  }
  EXPECT_DOUBLE_EQ(job.progress().lr(), 0.025);

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

// A stale assignment cannot be had from the real coordinator on demand: the
// interceptor moves the epoch of the real one back by one.
TEST_F(JobRunnerTest, StaleAssignmentEpochIsRefused) {
  control_->set_assignment_epoch_offset(-1);
  std::vector<v1::RunJobDirective> ranks = Start(Spec(1, 3));
  ASSERT_EQ(ranks.size(), 1u);
  const std::string stale =
      absl::StrCat("epoch ", ranks[0].epoch() - 1);
  JobRunner runner(control_.get(), ranks[0], Options(ranks[0]));
  EXPECT_THAT(runner.Run(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr(absl::StrCat("refusing the assignment of job ",
                                              ranks[0].job_id(), " ", stale))));
  auto results = control_->results();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_FALSE(results[0].ok());
  EXPECT_THAT(results[0].error(), HasSubstr(stale));
  ASSERT_OK_AND_ASSIGN(v1::Job job, coordinator_->GetJob(ranks[0].job_id()));
  EXPECT_EQ(job.state(), v1::FAILED);
}

TEST_F(JobRunnerTest, AbortDuringRendezvousReturnsPromptly) {
  std::vector<v1::RunJobDirective> ranks = Start(Spec(2, 3));
  ASSERT_EQ(ranks.size(), 2u);
  // Only rank 0 of 2 runs: it waits in the rendezvous until aborted.
  JobRunner runner(control_.get(), ranks[0], Options(ranks[0]));
  absl::Status status;
  absl::Notification done;
  std::thread t([&] {
    status = runner.Run();
    done.Notify();
  });
  // Rank 0 is blocked in the rendezvous once it waits for rank 1's key.
  EXPECT_TRUE(control_->WaitForKvGets(1, absl::Seconds(30)));
  const absl::Time start = absl::Now();
  runner.Abort(absl::AbortedError("job job-1 cancelled"));
  // The rank notices the abort between two slices of its wait; a slice ends
  // when the coordinator's (fake) time passes it, as real time would.
  while (!done.WaitForNotificationWithTimeout(absl::Milliseconds(20))) {
    coordinator_->AdvanceAndTick(absl::Seconds(1));
  }
  t.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_THAT(status,
              StatusIs(absl::StatusCode::kAborted, "job job-1 cancelled"));
  ASSERT_TRUE(control_->WaitForResults(1, absl::Seconds(5)));
  EXPECT_FALSE(control_->results()[0].ok());
}

// The job is cancelled at the coordinator while it runs: the reply to the
// next progress report says abort.
TEST_F(JobRunnerTest, CoordinatorAbortInProgressReplyStopsJob) {
  std::vector<v1::RunJobDirective> ranks = Start(Spec(1, 1000000));
  ASSERT_EQ(ranks.size(), 1u);
  JobRunner runner(control_.get(), ranks[0], Options(ranks[0]));
  absl::Status status;
  std::thread t([&] { status = runner.Run(); });
  ASSERT_TRUE(control_->WaitForProgress(1, absl::Seconds(30)));
  ASSERT_OK(coordinator_->CancelJob(ranks[0].job_id(), "test").status());
  t.join();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kAborted,
                               HasSubstr("stopped by the coordinator")));
  EXPECT_LT(runner.Snapshot().step, 1000000);
}

TEST_F(JobRunnerTest, NcclIsRefusedOnCpu) {
  v1::JobSpec spec = Spec(1, 1);
  spec.set_backend(v1::JobSpec::NCCL);
  std::vector<v1::RunJobDirective> ranks = Start(spec);
  ASSERT_EQ(ranks.size(), 1u);
  JobRunner runner(control_.get(), ranks[0], Options(ranks[0]));
  EXPECT_THAT(runner.Run(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                     HasSubstr("NCCL")));
}

TEST_F(JobRunnerTest, BadWorkloadFailsAndReports) {
  v1::JobSpec spec = Spec(1, 1);
  spec.mutable_replay()->set_params_path("/nonexistent/p.safetensors");
  spec.mutable_replay()->set_gradients_dir("/nonexistent");
  std::vector<v1::RunJobDirective> ranks = Start(spec);
  ASSERT_EQ(ranks.size(), 1u);
  JobRunner runner(control_.get(), ranks[0], Options(ranks[0]));
  EXPECT_FALSE(runner.Run().ok());
  ASSERT_EQ(control_->results().size(), 1u);
  // The worker reports the error itself; the coordinator names the rank and
  // worker, once.
  EXPECT_THAT(control_->results()[0].error(),
              HasSubstr("cannot open '/nonexistent/p.safetensors'"));
  EXPECT_THAT(control_->results()[0].error(), Not(HasSubstr("rank 0")));
  // A workload that cannot read its inputs is the job's own failure: a
  // restart would fail the same way.
  EXPECT_EQ(control_->results()[0].cause(), v1::FAILURE_CAUSE_JOB);
  ASSERT_OK_AND_ASSIGN(v1::Job job, coordinator_->GetJob(ranks[0].job_id()));
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.reason(), StartsWith("rank 0 (worker w-"));
  EXPECT_THAT(job.reason(), HasSubstr("cannot open '/nonexistent/p.safetensors'"));
}

// ---- Periodic checkpoints ----

v1::JobSpec AdamSpec(int world, int64_t steps) {
  v1::JobSpec spec = Spec(world, steps);
  spec.mutable_optimizer()->Clear();
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  spec.mutable_optimizer()->mutable_hyper_parameters()->set_lr(0.01);
  return spec;
}

TEST_F(JobRunnerTest, CheckpointsCommitPruneAndHoldTheParametersOfTheirStep) {
  const std::string root = MakeTempDir("ckpt") + "/job";
  v1::JobSpec spec = AdamSpec(2, 12);
  spec.mutable_checkpoint()->set_dir(root);
  spec.mutable_checkpoint()->set_every_steps(5);
  spec.mutable_checkpoint()->set_keep_last(1);
  std::vector<v1::RunJobDirective> ranks = RunAllRanks(spec);
  ASSERT_EQ(ranks.size(), 2u);
  ASSERT_OK_AND_ASSIGN(v1::Job job, coordinator_->GetJob(ranks[0].job_id()));
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.reason();
  // Steps 5 and 10 were written (never 12: the last step is the output);
  // keep_last 1 pruned step 5 once step 10 was complete.
  ASSERT_EQ(job.checkpoints_size(), 1) << job.DebugString();
  const v1::CheckpointRecord& kept = job.checkpoints(0);
  EXPECT_EQ(kept.step(), 10);
  EXPECT_EQ(kept.state(), v1::CheckpointRecord::COMPLETE) << kept.reason();
  EXPECT_EQ(kept.path(), root + "/step-10");
  EXPECT_EQ(kept.world_size(), 2);
  EXPECT_GT(kept.size_bytes(), 5000 * 4 * 3);
  EXPECT_FALSE(absl::StatusOr<checkpoint::Manifest>(
                   checkpoint::ReadManifest(root + "/step-5"))
                   .ok());
  EXPECT_EQ(control_->checkpoints().size(), 4u);
  // Each rank wrote what it owns, with its Adam state, keyed by name.
  ASSERT_OK_AND_ASSIGN(auto reader, checkpoint::ShardReader::Open(kept.path()));
  ASSERT_OK_AND_ASSIGN(std::vector<float> exp_avg, reader->ReadFloats("t3.exp_avg"));
  EXPECT_EQ(exp_avg.size(), 1000u);

  // The checkpoint at step 10 holds what a 10-step run ends with.
  const std::string out = MakeTempDir("ten");
  v1::JobSpec ten = AdamSpec(2, 10);
  ten.set_output_dir(out);
  RunAllRanks(ten);
  ASSERT_OK_AND_ASSIGN(auto final_params,
                       ReadSafetensors(out + "/params.safetensors"));
  ASSERT_EQ(final_params.size(), 5u);
  for (const auto& tensor : final_params) {
    ASSERT_OK_AND_ASSIGN(std::vector<float> saved, reader->ReadFloats(tensor.name));
    EXPECT_EQ(saved, tensor.data) << tensor.name;
  }
}

TEST_F(JobRunnerTest, AFailedCheckpointIsRecordedAndTrainingGoesOn) {
  v1::JobSpec spec = AdamSpec(2, 6);
  // The checkpoint root's parent must exist: this one's cannot be made.
  spec.mutable_checkpoint()->set_dir("/proc/self/no-such-dir/ckpt");
  spec.mutable_checkpoint()->set_every_steps(3);
  std::vector<v1::RunJobDirective> ranks = RunAllRanks(spec);
  ASSERT_EQ(ranks.size(), 2u);
  ASSERT_OK_AND_ASSIGN(v1::Job job, coordinator_->GetJob(ranks[0].job_id()));
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.reason();
  ASSERT_EQ(job.checkpoints_size(), 1);
  EXPECT_EQ(job.checkpoints(0).step(), 3);
  EXPECT_EQ(job.checkpoints(0).state(), v1::CheckpointRecord::FAILED);
  EXPECT_THAT(job.checkpoints(0).reason(),
              HasSubstr("could not write its shard"));
  EXPECT_THAT(job.checkpoints(0).reason(), HasSubstr("/proc/self/no-such-dir"));
}

// Runs `spec`'s ranks from `resume` (as a restarted epoch is told to).
std::vector<v1::RunJobDirective> WithResume(std::vector<v1::RunJobDirective> ranks,
                                            const std::string& path, int64_t step) {
  for (v1::RunJobDirective& d : ranks) {
    d.mutable_resume()->set_path(path);
    d.mutable_resume()->set_step(step);
  }
  return ranks;
}

TEST_F(JobRunnerTest, AResumedRunEndsBitIdenticalToAnUninterruptedOne) {
  const std::string root = MakeTempDir("resume") + "/job";
  const std::string full_out = MakeTempDir("full");
  v1::JobSpec spec = AdamSpec(2, 12);
  spec.mutable_checkpoint()->set_dir(root);
  spec.mutable_checkpoint()->set_every_steps(5);
  spec.set_output_dir(full_out);
  RunAllRanks(spec);
  ASSERT_OK_AND_ASSIGN(auto full, ReadSafetensors(full_out + "/params.safetensors"));

  // The same job again, resumed after step 5 (parameters and Adam state by
  // name): steps 6..12 only, the same result to the bit.
  const std::string resumed_out = MakeTempDir("resumed");
  v1::JobSpec again = spec;
  again.set_output_dir(resumed_out);
  again.mutable_checkpoint()->set_dir(MakeTempDir("again") + "/job");
  std::vector<v1::RunJobDirective> ranks =
      WithResume(Start(again), root + "/step-5", 5);
  ASSERT_EQ(ranks.size(), 2u);
  const std::vector<JobSnapshot> snapshots = RunRanks(ranks);
  ASSERT_OK_AND_ASSIGN(auto resumed,
                       ReadSafetensors(resumed_out + "/params.safetensors"));
  ASSERT_EQ(resumed.size(), full.size());
  for (size_t i = 0; i < full.size(); ++i) {
    EXPECT_EQ(resumed[i].name, full[i].name);
    EXPECT_EQ(resumed[i].data, full[i].data) << full[i].name;
  }
  // Owned state was loaded by name at the first step of the epoch.
  EXPECT_FALSE(snapshots[0].owned_shards.empty());
  EXPECT_EQ(snapshots[0].optimizer_state_bytes + snapshots[1].optimizer_state_bytes,
            5000 * 4 * 2);
}

// Parameters without optimizer state (SGD without momentum) are in the
// checkpoint too, whole or (SHARDED) as slices, and a resumed run ends as
// the uninterrupted one.
TEST_F(JobRunnerTest, StatelessParametersAreCheckpointedUnderEveryPolicy) {
  for (v1::JobSpec::AssignmentPolicy policy :
       {v1::JobSpec::BALANCED, v1::JobSpec::SHARDED}) {
    SCOPED_TRACE(v1::JobSpec::AssignmentPolicy_Name(policy));
    const std::string root = MakeTempDir("stateless") + "/job";
    const std::string full_out = MakeTempDir("full");
    v1::JobSpec spec = Spec(2, 6);
    spec.set_assignment_policy(policy);
    spec.mutable_optimizer()->mutable_hyper_parameters()->clear_momentum();
    spec.mutable_checkpoint()->set_dir(root);
    spec.mutable_checkpoint()->set_every_steps(3);
    spec.set_output_dir(full_out);
    RunAllRanks(spec);
    ASSERT_OK_AND_ASSIGN(auto full,
                         ReadSafetensors(full_out + "/params.safetensors"));
    ASSERT_OK_AND_ASSIGN(auto reader,
                         checkpoint::ShardReader::Open(root + "/step-3"));
    EXPECT_EQ(reader->parameter_names().size(), 5u);

    const std::string resumed_out = MakeTempDir("resumed");
    v1::JobSpec again = spec;
    again.clear_checkpoint();
    again.set_output_dir(resumed_out);
    RunRanks(WithResume(Start(again), root + "/step-3", 3));
    ASSERT_OK_AND_ASSIGN(auto resumed,
                         ReadSafetensors(resumed_out + "/params.safetensors"));
    ASSERT_EQ(resumed.size(), full.size());
    for (size_t i = 0; i < full.size(); ++i) {
      EXPECT_EQ(resumed[i].data, full[i].data) << full[i].name;
    }
  }
}

TEST_F(JobRunnerTest, ResumesAtAnotherWorldSizeByName) {
  const std::string root = MakeTempDir("reshard") + "/job";
  v1::JobSpec spec = AdamSpec(2, 8);
  spec.mutable_checkpoint()->set_dir(root);
  spec.mutable_checkpoint()->set_every_steps(4);
  RunAllRanks(spec);
  // Three ranks read the two-rank checkpoint: each its own new buckets.
  v1::JobSpec three = AdamSpec(3, 8);
  std::vector<v1::RunJobDirective> ranks =
      WithResume(Start(three), root + "/step-4", 4);
  ASSERT_EQ(ranks.size(), 3u);
  RunRanks(ranks);
  ASSERT_OK_AND_ASSIGN(v1::Job job, coordinator_->GetJob(ranks[0].job_id()));
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.reason();
  EXPECT_EQ(job.progress().step(), 8);
}

TEST_F(JobRunnerTest, ACorruptCheckpointIsRefusedNamingTheFile) {
  const std::string root = MakeTempDir("corrupt") + "/job";
  v1::JobSpec spec = AdamSpec(2, 6);
  spec.mutable_checkpoint()->set_dir(root);
  spec.mutable_checkpoint()->set_every_steps(3);
  RunAllRanks(spec);
  const std::string shard = root + "/step-3/shard-1-of-2.safetensors";
  ASSERT_EQ(truncate(shard.c_str(), 100), 0);
  std::vector<v1::RunJobDirective> ranks =
      WithResume(Start(AdamSpec(1, 6)), root + "/step-3", 3);
  ASSERT_EQ(ranks.size(), 1u);
  JobRunner runner(control_.get(), ranks[0], Options(ranks[0]));
  EXPECT_THAT(runner.Run(), StatusIs(absl::StatusCode::kDataLoss,
                                     HasSubstr("shard-1-of-2.safetensors")));
  ASSERT_FALSE(control_->results().empty());
  const v1::ReportResultRequest result = control_->results().back();
  EXPECT_THAT(result.error(), HasSubstr("resuming from " + root + "/step-3"));
  // A bad checkpoint is the job's own failure: a restart would not help.
  EXPECT_EQ(result.cause(), v1::FAILURE_CAUSE_JOB);
}

TEST_F(JobRunnerTest, AnotherModelsCheckpointIsRefused) {
  const std::string root = MakeTempDir("other") + "/job";
  v1::JobSpec spec = AdamSpec(1, 4);
  spec.mutable_checkpoint()->set_dir(root);
  spec.mutable_checkpoint()->set_every_steps(2);
  RunAllRanks(spec);
  v1::JobSpec other = AdamSpec(1, 4);
  other.set_seed(99);
  std::vector<v1::RunJobDirective> ranks =
      WithResume(Start(other), root + "/step-2", 2);
  ASSERT_EQ(ranks.size(), 1u);
  JobRunner runner(control_.get(), ranks[0], Options(ranks[0]));
  EXPECT_THAT(runner.Run(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("another model, optimizer or seed")));
}

}  // namespace
}  // namespace pshard::worker
