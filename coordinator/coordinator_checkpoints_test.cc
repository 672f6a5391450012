// The coordinator's checkpoint commits and the choice of where a restart
// resumes (coordinator_checkpoints.cc), over real files in a temp dir.
#include <cstdio>
#include <string>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/manifest.h"
#include "checkpoint/test_checkpoints.h"
#include "coordinator/coordinator_test_fixture.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::HasSubstr;

class CoordinatorCheckpointsTest : public CoordinatorTest {
 protected:
  // A two-rank job with checkpoints under a fresh root, RUNNING on a and b.
  v1::Job StartCheckpointedJob(int max_restarts) {
    root_ = absl::StrCat(::pshard::testing::MakeTempDir("ckpt"), "/job");
    a_ = Register("a");
    b_ = Register("b");
    v1::JobSpec spec = Spec(2);
    spec.mutable_checkpoint()->set_dir(root_);
    spec.mutable_checkpoint()->set_every_steps(10);
    spec.set_max_restarts(max_restarts);
    auto submitted = c_->SubmitJob(spec);
    EXPECT_OK(submitted);
    if (!submitted.ok()) return v1::Job();
    StartRank(a_);
    StartRank(b_);
    v1::Job job = GetJob(submitted->id());
    PublishLayout(job, {10});
    return GetJob(job.id());
  }

  // Both ranks' shards of `step`, written as owners would, then the first
  // `ranks` of them reported; returns the coordinator's last reply.
  v1::ReportCheckpointResponse WriteAndReport(const v1::Job& job, int64_t step,
                                              int ranks = 2) {
    auto manifest = checkpoint::testing::WriteCheckpoint(
        root_, step, 2, checkpoint::testing::MakeParameters(4, step));
    EXPECT_OK(manifest);
    // The owners write shards; the manifest is the coordinator's to write.
    std::remove(absl::StrCat(checkpoint::StepDirectory(root_, step), "/",
                             checkpoint::kManifestFileName)
                    .c_str());
    v1::ReportCheckpointResponse last;
    for (int r = 0; r < ranks && manifest.ok(); ++r) {
      v1::ReportCheckpointRequest req;
      req.set_job_id(job.id());
      req.set_epoch(job.epoch());
      req.set_rank(r);
      req.set_worker_id(job.members(r).worker_id());
      req.set_step(step);
      req.set_ok(true);
      req.set_file_name(manifest->files[r].name);
      req.set_size_bytes(manifest->files[r].size_bytes);
      req.set_sha256(manifest->files[r].sha256);
      auto resp = c_->ReportCheckpoint(req);
      if (!expect_reports_ok_) continue;
      EXPECT_OK(resp);
      if (resp.ok()) last = *resp;
    }
    return last;
  }

  const v1::CheckpointRecord* Record(const v1::Job& job, int64_t step) {
    for (const v1::CheckpointRecord& c : job.checkpoints()) {
      if (c.step() == step) return &c;
    }
    ADD_FAILURE() << "no record of step " << step << ": " << job.DebugString();
    return nullptr;
  }

  std::string root_;
  Worker a_, b_;
  bool expect_reports_ok_ = true;
};

TEST_F(CoordinatorCheckpointsTest, TheLastShardCommitsTheManifest) {
  const v1::Job job = StartCheckpointedJob(0);
  EXPECT_EQ(WriteAndReport(job, 10).state(), v1::CheckpointRecord::COMPLETE);
  ASSERT_OK_AND_ASSIGN(checkpoint::Manifest manifest,
                       checkpoint::VerifyCheckpoint(
                           checkpoint::StepDirectory(root_, 10)));
  EXPECT_EQ(manifest.world_size, 2);
  const v1::Job after = GetJob(job.id());
  ASSERT_EQ(after.checkpoints_size(), 1);
  EXPECT_EQ(after.checkpoints(0).state(), v1::CheckpointRecord::COMPLETE);
  EXPECT_GT(after.checkpoints(0).size_bytes(), 0);
  int checkpoint_events = 0;
  for (const v1::JobEvent& e : Events(job.id())) {
    checkpoint_events += e.has_checkpoint() ? 1 : 0;
  }
  EXPECT_EQ(checkpoint_events, 1);
}

TEST_F(CoordinatorCheckpointsTest, ReportsOfAnotherEpochOrWithoutASpecAreRefusedOrIgnored) {
  const v1::Job job = StartCheckpointedJob(0);
  v1::ReportCheckpointRequest req;
  req.set_job_id(job.id());
  req.set_epoch(job.epoch() + 5);
  req.set_rank(0);
  req.set_worker_id(job.members(0).worker_id());
  req.set_step(10);
  req.set_ok(true);
  EXPECT_OK(c_->ReportCheckpoint(req).status());  // stale: ignored
  EXPECT_EQ(GetJob(job.id()).checkpoints_size(), 0);
  req.set_epoch(job.epoch());
  req.set_worker_id(job.members(1).worker_id());
  EXPECT_THAT(c_->ReportCheckpoint(req),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 0")));
}

TEST_F(CoordinatorCheckpointsTest, ARestartResumesFromTheNewestThatVerifies) {
  const v1::Job job = StartCheckpointedJob(1);
  WriteAndReport(job, 10);
  WriteAndReport(job, 20);
  // Step 20's second shard is corrupted on disk after its commit.
  checkpoint::testing::FlipByte(
      absl::StrCat(checkpoint::StepDirectory(root_, 20), "/",
                   checkpoint::ShardFileName(1, 2)),
      -1);
  v1::ReportResultRequest failed = ResultRequest(job, 0, false, "peer gone");
  failed.set_cause(v1::FAILURE_CAUSE_WORKER);
  ASSERT_OK(c_->ReportResult(failed));
  // Too few workers at once (the reporting worker is left out): the job
  // waits, and is placed when another comes.
  const Worker spare = Register("c");
  c_->Tick();
  const v1::Job restarted = GetJob(job.id());
  ASSERT_EQ(restarted.epoch(), job.epoch() + 1) << restarted.reason();
  ASSERT_TRUE(restarted.has_resumed_from()) << restarted.reason();
  EXPECT_EQ(restarted.resumed_from().step(), 10);
  EXPECT_EQ(restarted.resumed_from().path(), checkpoint::StepDirectory(root_, 10));
  EXPECT_EQ(restarted.progress().step(), 10);
  EXPECT_THAT(restarted.reason(), HasSubstr("resuming from step 10"));
  EXPECT_THAT(restarted.reason(), HasSubstr("step 20 refused"));
  EXPECT_THAT(restarted.reason(), HasSubstr("shard-1-of-2.safetensors"));
  // Every rank of the new epoch is told where to resume.
  for (const v1::JobMember& m : restarted.members()) {
    // b ran the old epoch; the others are idle.
    const Worker w = m.worker_id() == a_.id ? a_ : spare;
    auto resp = m.worker_id() == b_.id ? Beat(b_, v1::BUSY, job.id(), job.epoch())
                                       : Beat(w);
    ASSERT_OK(resp);
    bool told = false;
    for (const auto& d : resp->directives()) {
      if (d.has_run_job()) {
        told = true;
        EXPECT_EQ(d.run_job().resume().step(), 10);
        EXPECT_EQ(d.run_job().restart_count(), 1);
      }
    }
    EXPECT_TRUE(told) << m.worker_id() << " (b is " << b_.id << "): "
                      << resp->ShortDebugString();
  }
}

// kill -9 of the coordinator in a checkpoint's commit, at each of its two
// points ("kill and restart" is reopening the state file, as in
// coordinator_recovery_test): the checkpoint is complete or absent, never
// half, and the records say which.

TEST_F(CoordinatorCheckpointsTest, KilledBeforeTheManifestTheCheckpointNeverCounts) {
  const std::string path = TempPath("ckpt.db");
  Open(path);
  const v1::Job job = StartCheckpointedJob(0);
  WriteAndReport(job, 10);
  WriteAndReport(job, 20, /*ranks=*/1);  // rank 1's report dies with the process
  Open(path);
  const v1::Job after = GetJob(job.id());
  ASSERT_NE(Record(after, 20), nullptr);
  EXPECT_EQ(Record(after, 20)->state(), v1::CheckpointRecord::FAILED);
  EXPECT_THAT(Record(after, 20)->reason(),
              HasSubstr("the coordinator restarted before this checkpoint was "
                        "committed"));
  EXPECT_EQ(Record(after, 10)->state(), v1::CheckpointRecord::COMPLETE);
  ASSERT_OK_AND_ASSIGN(checkpoint::CompleteCheckpoint latest,
                       checkpoint::LatestCompleteCheckpoint(root_));
  EXPECT_EQ(latest.manifest.step, 10);
  const std::vector<v1::JobEvent> events = Events(job.id());
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(events.back().has_checkpoint());
  EXPECT_EQ(events.back().checkpoint().step(), 20);
  EXPECT_EQ(events.back().checkpoint().state(), v1::CheckpointRecord::FAILED);
  // Settled once: a second restart changes nothing.
  Open(path);
  EXPECT_EQ(Events(job.id()).size(), events.size());
}

// Both ranks find the disk full: one FAILED record and one event for the
// step (the first failure's reason), not one per rank.
TEST_F(CoordinatorCheckpointsTest, EveryRankFailingAStepRecordsItOnce) {
  const v1::Job job = StartCheckpointedJob(0);
  for (int r = 0; r < 2; ++r) {
    v1::ReportCheckpointRequest req;
    req.set_job_id(job.id());
    req.set_epoch(job.epoch());
    req.set_rank(r);
    req.set_worker_id(job.members(r).worker_id());
    req.set_step(10);
    req.set_ok(false);
    req.set_error(absl::StrCat("rank ", r, ": No space left on device"));
    ASSERT_OK_AND_ASSIGN(v1::ReportCheckpointResponse resp,
                         c_->ReportCheckpoint(req));
    EXPECT_EQ(resp.state(), v1::CheckpointRecord::FAILED);
  }
  const v1::Job after = GetJob(job.id());
  ASSERT_EQ(after.checkpoints_size(), 1);
  EXPECT_THAT(after.checkpoints(0).reason(), HasSubstr("rank 0: No space"));
  int failed_events = 0;
  for (const v1::JobEvent& e : Events(job.id())) {
    failed_events += e.has_checkpoint() &&
                     e.checkpoint().state() == v1::CheckpointRecord::FAILED;
  }
  EXPECT_EQ(failed_events, 1);
}

TEST_F(CoordinatorCheckpointsTest, KilledAfterTheManifestTheCheckpointIsComplete) {
  const std::string path = TempPath("ckpt.db");
  FaultStateStore* faults = OpenWithFaults(path);
  ASSERT_NE(faults, nullptr);
  const v1::Job job = StartCheckpointedJob(0);
  // Rank 1's report commits twice: its shard (then the manifest is written),
  // then COMPLETE. The process dies before the second.
  faults->FailCommits(-1, absl::UnavailableError("killed"), /*after=*/2);
  expect_reports_ok_ = false;
  WriteAndReport(job, 10);
  ASSERT_EQ(faults->failed_commits(), 1);
  Open(path);
  const v1::Job after = GetJob(job.id());
  ASSERT_NE(Record(after, 10), nullptr);
  EXPECT_EQ(Record(after, 10)->state(), v1::CheckpointRecord::COMPLETE)
      << Record(after, 10)->reason();
  EXPECT_THAT(Record(after, 10)->reason(),
              HasSubstr("manifest was written before the coordinator restarted"));
  EXPECT_GT(Record(after, 10)->size_bytes(), 0);
  ASSERT_OK_AND_ASSIGN(checkpoint::Manifest verified,
                       checkpoint::VerifyCheckpoint(Record(after, 10)->path()));
  EXPECT_EQ(verified.step, 10);
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
