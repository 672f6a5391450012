// Jobs submitted with JobSpec.from_checkpoint (coordinator_jobs.cc
// SubmitJob, coordinator_checkpoints.cc ChooseResumePoint): what is accepted
// and refused, the resume point of the first epoch and of restarts, and its
// durability across a coordinator restart. Real checkpoints in a temp dir.
#include <cstdio>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/spec_fingerprint.h"
#include "checkpoint/test_checkpoints.h"
#include "common/job_spec.h"
#include "coordinator/coordinator_test_fixture.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

class FromCheckpointTest : public CoordinatorTest {
 protected:
  void SetUp() override {
    CoordinatorTest::SetUp();
    root_ = absl::StrCat(::pshard::testing::MakeTempDir("ckpt"), "/job-a");
  }

  // A checkpoint of `spec`'s training at `step`, written at `world` ranks.
  void WriteFor(const v1::JobSpec& spec, int64_t step, int world) {
    ASSERT_OK_AND_ASSIGN(const std::string fingerprint,
                         checkpoint::SpecFingerprint(ApplyJobSpecDefaults(spec)));
    ASSERT_OK(checkpoint::testing::WriteCheckpoint(
                  root_, step, world,
                  checkpoint::testing::MakeParameters(5, step), {}, fingerprint)
                  .status());
  }

  v1::JobSpec FromSpec(int world, int64_t steps, const std::string& path) {
    v1::JobSpec spec = Spec(world, steps);
    spec.set_from_checkpoint(path);
    return spec;
  }

  // Nothing was stored: a refused submission changes no state.
  void ExpectNoJobs() {
    ASSERT_OK_AND_ASSIGN(auto jobs, c_->ListJobs({}, 0, ""));
    EXPECT_THAT(jobs.jobs, SizeIs(0));
  }

  std::string root_;
};

TEST_F(FromCheckpointTest, AJobDirectoryResolvesToItsLatestAndTheFirstEpochResumesThere) {
  const v1::JobSpec spec = FromSpec(2, 10, root_);
  WriteFor(spec, 3, 3);  // a 3-rank checkpoint, resumed at 2
  WriteFor(spec, 6, 3);
  ASSERT_OK_AND_ASSIGN(v1::Job submitted, c_->SubmitJob(spec));
  const std::string step6 = checkpoint::StepDirectory(root_, 6);
  EXPECT_EQ(submitted.initialized_from().path(), step6);
  EXPECT_EQ(submitted.initialized_from().step(), 6);
  EXPECT_EQ(submitted.resumed_from().step(), 6);
  EXPECT_EQ(submitted.progress().step(), 6);
  EXPECT_EQ(submitted.progress().total_steps(), 10);
  EXPECT_THAT(submitted.reason(),
              HasSubstr(absl::StrCat("initialised from ", step6, " (step 6)")));
  const std::vector<v1::JobEvent> events = Events(submitted.id());
  ASSERT_THAT(events, SizeIs(1));
  EXPECT_THAT(events[0].state_change().reason(), HasSubstr("initialised from"));

  const Worker a = Register("a");
  const Worker b = Register("b");
  for (const Worker& w : {a, b}) {
    const v1::RunJobDirective run = StartRank(w);
    EXPECT_EQ(run.world_size(), 2);
    EXPECT_EQ(run.resume().path(), step6);
    EXPECT_EQ(run.resume().step(), 6);
    EXPECT_EQ(run.restart_count(), 0);
  }
}

TEST_F(FromCheckpointTest, AStepDirectoryIsTakenAsItIs) {
  const v1::JobSpec probe = FromSpec(3, 10, root_);
  WriteFor(probe, 3, 2);
  WriteFor(probe, 6, 2);
  const std::string step3 = checkpoint::StepDirectory(root_, 3);
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(FromSpec(3, 10, step3)));
  EXPECT_EQ(job.initialized_from().path(), step3);
  EXPECT_EQ(job.initialized_from().step(), 3);
}

TEST_F(FromCheckpointTest, RefusalsNameThePathAndWhatDiffersAndStoreNothing) {
  // No such directory.
  const std::string missing = absl::StrCat(root_, "-missing");
  EXPECT_THAT(c_->SubmitJob(FromSpec(2, 10, missing)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr(absl::StrCat("from_checkpoint: ", missing))));
  ExpectNoJobs();

  // Shards but no manifest: never complete.
  const v1::JobSpec spec = FromSpec(2, 10, root_);
  WriteFor(spec, 4, 2);
  ASSERT_EQ(std::remove(absl::StrCat(checkpoint::StepDirectory(root_, 4), "/",
                                     checkpoint::kManifestFileName)
                            .c_str()),
            0);
  EXPECT_THAT(c_->SubmitJob(spec),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("is not a complete checkpoint")));
  ExpectNoJobs();

  // A corrupted shard is named.
  WriteFor(spec, 5, 2);
  checkpoint::testing::FlipByte(
      absl::StrCat(checkpoint::StepDirectory(root_, 5), "/",
                   checkpoint::ShardFileName(1, 2)),
      -1);
  EXPECT_THAT(c_->SubmitJob(FromSpec(2, 10, checkpoint::StepDirectory(root_, 5))),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("shard-1-of-2.safetensors")));
  ExpectNoJobs();

  // Another seed: another training.
  WriteFor(spec, 7, 2);
  v1::JobSpec other_seed = spec;
  other_seed.set_seed(spec.seed() + 1);
  EXPECT_THAT(c_->SubmitJob(other_seed),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("spec fingerprint")));
  ExpectNoJobs();

  // Nothing left to run: step >= steps.
  EXPECT_THAT(c_->SubmitJob(FromSpec(2, 7, root_)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("is at step 7, not before steps (7)")));
  ExpectNoJobs();

  // A relative path is refused by validation.
  EXPECT_THAT(c_->SubmitJob(FromSpec(2, 10, "ckpt/job-a")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("from_checkpoint")));
  ExpectNoJobs();
  // The latest complete (step 7) is accepted when steps allow it.
  ASSERT_OK_AND_ASSIGN(v1::Job job, c_->SubmitJob(FromSpec(2, 8, root_)));
  EXPECT_EQ(job.initialized_from().step(), 7);
}

TEST_F(FromCheckpointTest, ARestartBeforeItsOwnCheckpointResumesFromTheInitialPoint) {
  v1::JobSpec spec = FromSpec(2, 10, root_);
  spec.set_max_restarts(1);
  WriteFor(spec, 4, 2);
  const Worker a = Register("a");
  const Worker b = Register("b");
  ASSERT_OK_AND_ASSIGN(v1::Job submitted, c_->SubmitJob(spec));
  StartRank(a);
  StartRank(b);
  const v1::Job job = GetJob(submitted.id());
  PublishLayout(job, {10});
  v1::ReportResultRequest failed = ResultRequest(job, 0, false, "worker lost");
  failed.set_cause(v1::FAILURE_CAUSE_WORKER);
  ASSERT_OK(c_->ReportResult(failed));
  Register("c");
  c_->Tick();
  const v1::Job restarted = GetJob(job.id());
  ASSERT_EQ(restarted.epoch(), job.epoch() + 1) << restarted.reason();
  EXPECT_EQ(restarted.resumed_from().step(), 4);
  EXPECT_EQ(restarted.resumed_from().path(), checkpoint::StepDirectory(root_, 4));
  EXPECT_EQ(restarted.progress().step(), 4);
  EXPECT_THAT(restarted.reason(), HasSubstr("resuming from step 4, as initialised from"));
}

TEST_F(FromCheckpointTest, TheInitialPointSurvivesACoordinatorRestart) {
  const std::string db = TempPath("from-checkpoint.db");
  Open(db);
  const v1::JobSpec spec = FromSpec(2, 10, root_);
  WriteFor(spec, 4, 3);
  const Worker a = Register("a");
  const Worker b = Register("b");
  ASSERT_OK_AND_ASSIGN(v1::Job submitted, c_->SubmitJob(spec));
  StartRank(a);
  StartRank(b);
  Open(db);  // "kill and restart": the job is STARTING, so it restarts
  v1::Job stored = GetJob(submitted.id());
  EXPECT_EQ(stored.initialized_from().path(), checkpoint::StepDirectory(root_, 4));
  EXPECT_EQ(stored.initialized_from().step(), 4);
  ASSERT_OK(Beat(a, v1::BUSY, submitted.id(), 1));
  ASSERT_OK_AND_ASSIGN(v1::HeartbeatResponse resp,
                       Beat(b, v1::BUSY, submitted.id(), 1));
  const v1::Job after = GetJob(submitted.id());
  ASSERT_EQ(after.epoch(), 2) << after.reason();
  EXPECT_EQ(after.resumed_from().step(), 4);
  bool told = false;
  for (const auto& d : resp.directives()) {
    if (d.has_run_job() && d.run_job().epoch() == 2) {
      told = true;
      EXPECT_EQ(d.run_job().resume().step(), 4);
    }
  }
  EXPECT_TRUE(told) << resp.ShortDebugString();
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
