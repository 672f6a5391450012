// The coordinator's checkpoint commits and the choice of where a restart
// resumes (coordinator_checkpoints.cc), over real files in a temp dir.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/test_checkpoints.h"
#include "coordinator/fault_state_store.h"
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

  // Both ranks' shards of `step`, written as owners would (the manifest is
  // the coordinator's to write); returns the manifest it is to write.
  checkpoint::Manifest WriteShards(int64_t step) {
    auto manifest = checkpoint::testing::WriteCheckpoint(
        root_, step, 2, checkpoint::testing::MakeParameters(4, step));
    EXPECT_OK(manifest);
    std::remove(absl::StrCat(checkpoint::StepDirectory(root_, step), "/",
                             checkpoint::kManifestFileName)
                    .c_str());
    return manifest.ok() ? *manifest : checkpoint::Manifest();
  }

  // Rank `rank`'s report of its shard of `manifest`.
  absl::StatusOr<v1::ReportCheckpointResponse> ReportShard(
      const v1::Job& job, const checkpoint::Manifest& manifest, int rank) {
    v1::ReportCheckpointRequest req;
    req.set_job_id(job.id());
    req.set_epoch(job.epoch());
    req.set_rank(rank);
    req.set_worker_id(job.members(rank).worker_id());
    req.set_step(manifest.step);
    req.set_ok(true);
    req.set_file_name(manifest.files[rank].name);
    req.set_size_bytes(manifest.files[rank].size_bytes);
    req.set_sha256(manifest.files[rank].sha256);
    return c_->ReportCheckpoint(req);
  }

  // Both ranks' shards of `step`, written then reported; returns the
  // coordinator's last reply.
  v1::ReportCheckpointResponse WriteAndReport(const v1::Job& job, int64_t step) {
    const checkpoint::Manifest manifest = WriteShards(step);
    v1::ReportCheckpointResponse last;
    for (int r = 0; r < 2 && !manifest.files.empty(); ++r) {
      auto resp = ReportShard(job, manifest, r);
      EXPECT_OK(resp);
      if (resp.ok()) last = *resp;
    }
    return last;
  }

  // A coordinator on the SQLite file `path` through a store whose commits
  // the test can fail; returns that store.
  FaultStateStore* OpenWithFaults(const std::string& path) {
    c_.reset();
    absl::StatusOr<std::unique_ptr<StateStore>> inner = StateStore::Open(path);
    EXPECT_OK(inner);
    if (!inner.ok()) return nullptr;
    auto owned = std::make_unique<FaultStateStore>(*std::move(inner));
    FaultStateStore* store = owned.get();
    absl::StatusOr<std::unique_ptr<Coordinator>> c =
        Coordinator::Create(options_, &clock_, std::move(owned));
    EXPECT_OK(c);
    if (c.ok()) c_ = *std::move(c);
    return store;
  }

  std::string root_;
  Worker a_, b_;
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

// kill -9 of the coordinator during a checkpoint's commit, at both crash
// points: before the manifest (the last shard's report is not durable) and
// between the manifest (the commit point on disk) and the durable COMPLETE
// record. A failed commit writes nothing, and a new coordinator on the same
// file is what a restart after kill -9 sees. Either way the checkpoint is
// complete (manifest and every shard verify) or absent (no manifest), and
// the coordinator never records COMPLETE what does not verify.
TEST_F(CoordinatorCheckpointsTest, ACrashDuringTheCommitLeavesItCompleteOrAbsent) {
  const std::string db = TempPath("crash.db");
  FaultStateStore* store = OpenWithFaults(db);
  ASSERT_NE(store, nullptr);
  const v1::Job job = StartCheckpointedJob(0);

  const checkpoint::Manifest step10 = WriteShards(10);
  ASSERT_OK(ReportShard(job, step10, 0).status());
  store->FailCommits(-1, absl::InternalError("killed before the manifest"));
  EXPECT_THAT(ReportShard(job, step10, 1),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("killed")));
  store = OpenWithFaults(db);

  ASSERT_EQ(GetJob(job.id()).state(), v1::RUNNING) << GetJob(job.id()).reason();
  const checkpoint::Manifest step20 = WriteShards(20);
  ASSERT_OK(ReportShard(job, step20, 0).status());
  // The last shard's report commits once (its record), the manifest is
  // written, and the commit of COMPLETE is where it dies.
  store->FailCommits(-1, absl::InternalError("killed after the manifest"),
                     /*pass=*/1);
  EXPECT_THAT(ReportShard(job, step20, 1),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("killed")));
  EXPECT_EQ(store->failed_commits(), 1);
  OpenWithFaults(db);

  // Step 10: absent. Step 20: complete on disk, every shard verifying.
  EXPECT_THAT(checkpoint::VerifyCheckpoint(checkpoint::StepDirectory(root_, 10)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("manifest")));
  ASSERT_OK_AND_ASSIGN(checkpoint::Manifest on_disk,
                       checkpoint::VerifyCheckpoint(
                           checkpoint::StepDirectory(root_, 20)));
  EXPECT_EQ(on_disk.files.size(), 2u);
  const v1::Job after = GetJob(job.id());
  ASSERT_EQ(after.state(), v1::RUNNING) << after.reason();
  ASSERT_EQ(after.members_size(), 2);
  for (const v1::CheckpointRecord& c : after.checkpoints()) {
    SCOPED_TRACE(c.ShortDebugString());
    EXPECT_NE(c.state(), v1::CheckpointRecord::COMPLETE);
  }
  // The job goes on checkpointing after the restart.
  EXPECT_EQ(WriteAndReport(after, 30).state(), v1::CheckpointRecord::COMPLETE);
  const v1::Job later = GetJob(job.id());
  for (const v1::CheckpointRecord& c : later.checkpoints()) {
    if (c.state() == v1::CheckpointRecord::COMPLETE) {
      EXPECT_OK(checkpoint::VerifyCheckpoint(c.path()).status()) << c.path();
    }
  }
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
