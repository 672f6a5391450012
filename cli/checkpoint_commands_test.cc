// pshardctl's checkpoint commands against the real coordinator
// (InProcessCoordinator) and real checkpoint files: `submit
// --from_checkpoint` and `checkpoints JOB`.
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/manifest.h"
#include "checkpoint/spec_fingerprint.h"
#include "checkpoint/test_checkpoints.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "common/fake_clock.h"
#include "common/job_spec.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "pshard/v1/worker_control.grpc.pb.h"
#include "tests/testing/in_process_coordinator.h"
#include "tests/testing/subprocess.h"

namespace pshard::cli {
namespace {

using ::pshard::testing::InProcessCoordinator;
using ::pshard::testing::WriteTempFile;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kSpec[] = R"json({
  "name": "resumed",
  "world_size": 2,
  "mlp": {"input_dim": 4, "hidden_dims": [8], "output_dim": 2, "batch_size": 16},
  "optimizer": {"kind": "adam"},
  "steps": 5
})json";

class CheckpointCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(coordinator_, InProcessCoordinator::Start());
    root_ = absl::StrCat(::pshard::testing::MakeTempDir("ckpt"), "/job-a");
    spec_path_ = WriteTempFile("spec.json", kSpec);
  }

  int Run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    CliIo io{&out_, &err_, false};
    return RunCommand(
        args, options_, io,
        [this]() -> absl::StatusOr<std::unique_ptr<CoordinatorClient>> {
          ++connects_;
          return std::make_unique<CoordinatorClient>(
              coordinator_->Channel(), "the in-process coordinator",
              absl::Seconds(5));
        },
        &cancel_, cli_clock_);
  }

  // A complete checkpoint of kSpec's training at `step`, `world` shards;
  // returns its manifest.
  checkpoint::Manifest WriteCheckpoint(int64_t step, int world) {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpecJson(kSpec);
    EXPECT_OK(spec);
    absl::StatusOr<std::string> fingerprint =
        checkpoint::SpecFingerprint(ApplyJobSpecDefaults(*spec));
    EXPECT_OK(fingerprint);
    absl::StatusOr<checkpoint::Manifest> manifest =
        checkpoint::testing::WriteCheckpoint(
            root_, step, world, checkpoint::testing::MakeParameters(3, step),
            {}, fingerprint.ok() ? *fingerprint : "");
    EXPECT_OK(manifest);
    return manifest.ok() ? *manifest : checkpoint::Manifest();
  }

  std::unique_ptr<InProcessCoordinator> coordinator_;
  FakeClock cli_clock_;
  CliOptions options_;
  Cancellation cancel_;
  std::ostringstream out_;
  std::ostringstream err_;
  int connects_ = 0;
  std::string root_;
  std::string spec_path_;
};

TEST_F(CheckpointCommandsTest, SubmitFromCheckpointStartsTheJobThere) {
  WriteCheckpoint(2, 3);
  options_.from_checkpoint = root_;
  ASSERT_EQ(Run({"submit", spec_path_}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), "job-1\n");
  ASSERT_OK_AND_ASSIGN(v1::Job job, coordinator_->GetJob("job-1"));
  EXPECT_EQ(job.spec().from_checkpoint(), root_);
  const std::string step2 = checkpoint::StepDirectory(root_, 2);
  EXPECT_EQ(job.initialized_from().path(), step2);
  EXPECT_EQ(job.initialized_from().step(), 2);

  options_.from_checkpoint.clear();
  ASSERT_EQ(Run({"get", "job-1"}), kExitOk) << err_.str();
  EXPECT_THAT(out_.str(),
              HasSubstr(absl::StrCat("initialised from ", step2, " (step 2)")));
  ASSERT_EQ(Run({"checkpoints", "job-1"}), kExitOk) << err_.str();
  EXPECT_EQ(out_.str(), absl::StrCat("initialised from ", step2,
                                     " (step 2)\njob-1: no checkpoints\n"));
}

TEST_F(CheckpointCommandsTest, SubmitFromCheckpointRefusals) {
  // A relative path reaching RunCommand (main() absolutises the flag) is
  // bad input, refused before connecting.
  options_.from_checkpoint = "ckpt/job-a";
  EXPECT_EQ(Run({"submit", spec_path_}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("from_checkpoint"));
  EXPECT_EQ(connects_, 0);
  // No checkpoint there: the coordinator's refusal names the path.
  options_.from_checkpoint = root_;
  EXPECT_EQ(Run({"submit", spec_path_}), kExitError);
  EXPECT_THAT(err_.str(), HasSubstr(absl::StrCat("from_checkpoint: ", root_)));
  // Step 5 of a 5-step spec: nothing left to run.
  WriteCheckpoint(5, 2);
  EXPECT_EQ(Run({"submit", spec_path_}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("not before steps (5)"));
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> jobs, coordinator_->ListJobs());
  EXPECT_THAT(jobs, IsEmpty());
}

TEST_F(CheckpointCommandsTest, CheckpointsListsTheRecordsAsATableOrJson) {
  EXPECT_EQ(Run({"checkpoints", "job-404"}), kExitError);
  EXPECT_THAT(err_.str(), HasSubstr("job-404"));
  EXPECT_EQ(Run({"checkpoints"}), kExitUsage);

  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecJson(kSpec);
  ASSERT_OK(spec);
  spec->mutable_checkpoint()->set_dir(root_);
  spec->mutable_checkpoint()->set_every_steps(2);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::RunJobDirective> ranks,
                       coordinator_->StartJob(*spec));
  ASSERT_OK(coordinator_->ReportLayout(ranks, {1024}));
  // The owners' shards of step 2, reported as workers do; the coordinator
  // writes the manifest.
  const checkpoint::Manifest manifest = WriteCheckpoint(2, 2);
  ASSERT_EQ(std::remove(absl::StrCat(checkpoint::StepDirectory(root_, 2), "/",
                                     checkpoint::kManifestFileName)
                            .c_str()),
            0);
  ASSERT_OK_AND_ASSIGN(const v1::Job running,
                       coordinator_->GetJob(ranks[0].job_id()));
  auto stub = v1::WorkerControl::NewStub(coordinator_->Channel());
  for (int r = 0; r < 2; ++r) {
    v1::ReportCheckpointRequest req;
    req.set_job_id(ranks[r].job_id());
    req.set_epoch(ranks[r].epoch());
    req.set_rank(r);
    req.set_worker_id(running.members(r).worker_id());
    req.set_step(2);
    req.set_ok(true);
    req.set_file_name(manifest.files[r].name);
    req.set_size_bytes(manifest.files[r].size_bytes);
    req.set_sha256(manifest.files[r].sha256);
    grpc::ClientContext context;
    v1::ReportCheckpointResponse resp;
    ASSERT_TRUE(stub->ReportCheckpoint(&context, req, &resp).ok());
  }
  // Step 4's rank 1 cannot write its shard.
  v1::ReportCheckpointRequest failed;
  failed.set_job_id(ranks[1].job_id());
  failed.set_epoch(ranks[1].epoch());
  failed.set_rank(1);
  failed.set_worker_id(running.members(1).worker_id());
  failed.set_step(4);
  failed.set_ok(false);
  failed.set_error("disk full");
  grpc::ClientContext context;
  v1::ReportCheckpointResponse resp;
  ASSERT_TRUE(stub->ReportCheckpoint(&context, failed, &resp).ok());

  const std::string id = ranks[0].job_id();
  ASSERT_EQ(Run({"checkpoints", id}), kExitOk) << err_.str();
  const std::string table = out_.str();
  EXPECT_THAT(table, HasSubstr("STEP  STATE"));
  EXPECT_THAT(table, HasSubstr("WORLD"));
  EXPECT_THAT(table, HasSubstr("REASON"));
  EXPECT_THAT(table, HasSubstr(absl::StrCat("COMPLETE      2")));
  EXPECT_THAT(table, HasSubstr(checkpoint::StepDirectory(root_, 2)));
  EXPECT_THAT(table, HasSubstr("FAILED"));
  EXPECT_THAT(table, HasSubstr("could not write its shard: disk full"));

  options_.output = OutputFormat::kJson;
  ASSERT_EQ(Run({"checkpoints", id}), kExitOk) << err_.str();
  v1::Job listed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &listed).ok())
      << out_.str();
  EXPECT_EQ(listed.id(), id);
  ASSERT_EQ(listed.checkpoints_size(), 2);
  EXPECT_EQ(listed.checkpoints(0).step(), 2);
  EXPECT_EQ(listed.checkpoints(0).state(), v1::CheckpointRecord::COMPLETE);
  EXPECT_EQ(listed.checkpoints(0).world_size(), 2);
  EXPECT_GT(listed.checkpoints(0).size_bytes(), 0);
  EXPECT_EQ(listed.checkpoints(1).state(), v1::CheckpointRecord::FAILED);
  EXPECT_FALSE(listed.has_spec());  // only the checkpoints
}

}  // namespace
}  // namespace pshard::cli
