// `pshardctl submit --from_checkpoint` and `pshardctl checkpoints` end to
// end: the real pshard-coordinator and three real CPU pshard-workers on
// loopback. Job A (mlp, Adam, 2 ranks) checkpoints as it trains; new jobs
// start from its checkpoints at 2 ranks (bit-identical to A's own
// uninterrupted run), at 3 ranks (2 -> 3), and at 2 from the 3-rank job's
// checkpoint (3 -> 2); a SHARDED job's checkpoints (parameter slices) and
// a SHARDED job from A's.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "checkpoint/manifest.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "pshard/v1/job.pb.h"
#include "tests/cli/pshardctl_runner.h"
#include "tests/testing/cluster.h"
#include "tests/testing/subprocess.h"

namespace pshard {
namespace {

using ::pshard::testing::CliResult;
using ::pshard::testing::Cluster;
using ::pshard::testing::ClusterOptions;
using ::pshard::testing::RunPshardctl;
using ::pshard::testing::WriteTempFile;
using ::testing::HasSubstr;

constexpr int64_t kSteps = 60;

v1::JobSpec MlpSpec(int world_size, const std::string& output_dir) {
  v1::JobSpec spec;
  spec.set_name(absl::StrCat("mlp-", world_size));
  spec.set_world_size(world_size);
  auto* mlp = spec.mutable_mlp();
  mlp->set_input_dim(16);
  mlp->add_hidden_dims(32);
  mlp->set_output_dim(4);
  mlp->set_batch_size(32);
  spec.set_bucket_cap_mb(0.001);
  spec.set_steps(kSteps);
  spec.set_seed(5);
  spec.set_progress_every(1);
  spec.set_collective_timeout_seconds(20);
  spec.mutable_optimizer()->set_kind(v1::OptimizerSpec::ADAM);
  spec.mutable_optimizer()->mutable_hyper_parameters()->set_lr(0.01);
  spec.set_output_dir(output_dir);
  return spec;
}

void CheckpointEvery(v1::JobSpec& spec, const std::string& dir, int every) {
  spec.mutable_checkpoint()->set_dir(dir);
  spec.mutable_checkpoint()->set_every_steps(every);
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

class FromCheckpointE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterOptions options;
    options.workers = 3;
    ASSERT_OK_AND_ASSIGN(cluster_, Cluster::Start(options));
  }

  CliResult Cli(std::vector<std::string> args) {
    args.push_back("--coordinator=" + cluster_->address());
    for (std::string& flag : cluster_->ClientFlags()) args.push_back(flag);
    return RunPshardctl(args, {}, absl::Seconds(120));
  }

  // `pshardctl submit SPEC --from_checkpoint FROM --watch`; returns the job
  // as it ended.
  v1::Job SubmitFrom(const v1::JobSpec& spec, const std::string& from) {
    std::string json;
    EXPECT_TRUE(google::protobuf::util::MessageToJsonString(spec, &json).ok());
    const std::string path = WriteTempFile(absl::StrCat(spec.name(), ".json"), json);
    const CliResult submit =
        Cli({"submit", path, "--from_checkpoint=" + from, "--watch"});
    EXPECT_EQ(submit.exit_code, 0) << submit.out << submit.err << cluster_->Logs();
    // The first line is the job id.
    const std::string id = submit.out.substr(0, submit.out.find('\n'));
    absl::StatusOr<v1::Job> job = cluster_->GetJob(id);
    EXPECT_OK(job) << submit.out;
    EXPECT_TRUE(cluster_->WaitForIdle(3, absl::Seconds(10))) << cluster_->Logs();
    return job.ok() ? *job : v1::Job();
  }

  std::unique_ptr<Cluster> cluster_;
};

TEST_F(FromCheckpointE2eTest, NewJobsStartFromCheckpointsAtAnyWorldSize) {
  const std::string dir = cluster_->dir();
  const std::string ckpt_a = absl::StrCat(dir, "/ckpt-a");
  // A: 2 ranks, checkpoints after steps 20 and 40 (never after the last).
  v1::JobSpec spec_a = MlpSpec(2, absl::StrCat(dir, "/out-a"));
  CheckpointEvery(spec_a, ckpt_a, 20);
  ASSERT_OK_AND_ASSIGN(v1::Job submitted_a, cluster_->Submit(spec_a));
  ASSERT_OK_AND_ASSIGN(v1::Job a,
                       cluster_->WaitForEnd(submitted_a.id(), absl::Seconds(60)));
  ASSERT_EQ(a.state(), v1::SUCCEEDED) << a.reason() << cluster_->Logs();
  ASSERT_TRUE(cluster_->WaitForIdle(3, absl::Seconds(10))) << cluster_->Logs();

  const CliResult listed = Cli({"checkpoints", a.id()});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_THAT(listed.out, HasSubstr("STEP  STATE"));
  EXPECT_THAT(listed.out, HasSubstr(checkpoint::StepDirectory(ckpt_a, 20)));
  EXPECT_THAT(listed.out, HasSubstr(checkpoint::StepDirectory(ckpt_a, 40)));
  EXPECT_THAT(Cli({"checkpoints", "job-99"}).err, HasSubstr("job-99"));

  // D: the same spec at the same world from A's step 20 runs steps 21..60
  // on the same data in the same reduction order: bit-identical to A.
  const v1::Job d = SubmitFrom(MlpSpec(2, absl::StrCat(dir, "/out-d")),
                               checkpoint::StepDirectory(ckpt_a, 20));
  ASSERT_EQ(d.state(), v1::SUCCEEDED) << d.reason() << cluster_->Logs();
  EXPECT_EQ(d.initialized_from().step(), 20);
  EXPECT_EQ(d.progress().step(), kSteps);
  const std::string a_bytes = ReadBytes(a.output_path());
  ASSERT_FALSE(a_bytes.empty());
  EXPECT_TRUE(ReadBytes(d.output_path()) == a_bytes)
      << "resumed at step 20, the parameters differ from the uninterrupted run's";

  // B: 2 -> 3 ranks from A's directory (its latest, step 40), itself
  // checkpointing at 3 ranks.
  const std::string ckpt_b = absl::StrCat(dir, "/ckpt-b");
  v1::JobSpec spec_b = MlpSpec(3, absl::StrCat(dir, "/out-b"));
  CheckpointEvery(spec_b, ckpt_b, 10);
  const v1::Job b = SubmitFrom(spec_b, ckpt_a);
  ASSERT_EQ(b.state(), v1::SUCCEEDED) << b.reason() << cluster_->Logs();
  EXPECT_EQ(b.initialized_from().path(), checkpoint::StepDirectory(ckpt_a, 40));
  EXPECT_EQ(b.members_size(), 3);
  EXPECT_EQ(b.progress().step(), kSteps);
  const CliResult got = Cli({"get", b.id()});
  EXPECT_THAT(got.out,
              HasSubstr(absl::StrCat("initialised from ",
                                     checkpoint::StepDirectory(ckpt_a, 40),
                                     " (step 40)")));
  // The same 3-rank spec from the same point without checkpointing: its own
  // uninterrupted counterpart, bit for bit (checkpoints do not perturb it).
  const v1::Job b_plain = SubmitFrom(MlpSpec(3, absl::StrCat(dir, "/out-b-plain")),
                                     checkpoint::StepDirectory(ckpt_a, 40));
  ASSERT_EQ(b_plain.state(), v1::SUCCEEDED) << b_plain.reason();
  EXPECT_TRUE(ReadBytes(b.output_path()) == ReadBytes(b_plain.output_path()));
  // Ranks' data is a function of (seed, rank, step) with a per-rank batch,
  // so 3 ranks train on other samples than 2: B must differ from A.
  EXPECT_FALSE(ReadBytes(b.output_path()) == a_bytes);

  // C: 3 -> 2 ranks from B's 3-rank checkpoint of step 50.
  const std::string b50 = checkpoint::StepDirectory(ckpt_b, 50);
  const CliResult b_listed = Cli({"checkpoints", b.id(), "--output=json"});
  ASSERT_EQ(b_listed.exit_code, 0) << b_listed.err;
  v1::Job b_records;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(b_listed.out, &b_records).ok())
      << b_listed.out;
  bool has_b50 = false;
  for (const v1::CheckpointRecord& c : b_records.checkpoints()) {
    if (c.path() == b50) {
      has_b50 = c.state() == v1::CheckpointRecord::COMPLETE && c.world_size() == 3;
    }
  }
  EXPECT_TRUE(has_b50) << b_listed.out;
  EXPECT_EQ(b_records.initialized_from().step(), 40);
  const v1::Job c = SubmitFrom(MlpSpec(2, absl::StrCat(dir, "/out-c")), b50);
  ASSERT_EQ(c.state(), v1::SUCCEEDED) << c.reason() << cluster_->Logs();
  EXPECT_EQ(c.initialized_from().step(), 50);
  EXPECT_EQ(c.members_size(), 2);
  EXPECT_EQ(c.progress().step(), kSteps);

  // SHARDED (each rank owns a range of every bucket, so its checkpoint
  // shard holds slices of parameters) trains A's job bit for bit at 2
  // ranks (a 2-rank mean is one addition either way), writes checkpoints
  // that a BALANCED 3-rank job resumes from exactly as from A's, and
  // resumes from A's own.
  const std::string ckpt_s = absl::StrCat(dir, "/ckpt-s");
  v1::JobSpec spec_s = MlpSpec(2, absl::StrCat(dir, "/out-s"));
  spec_s.set_assignment_policy(v1::JobSpec::SHARDED);
  CheckpointEvery(spec_s, ckpt_s, 20);
  ASSERT_OK_AND_ASSIGN(v1::Job submitted_s, cluster_->Submit(spec_s));
  ASSERT_OK_AND_ASSIGN(v1::Job sharded,
                       cluster_->WaitForEnd(submitted_s.id(), absl::Seconds(60)));
  ASSERT_EQ(sharded.state(), v1::SUCCEEDED) << sharded.reason() << cluster_->Logs();
  ASSERT_TRUE(cluster_->WaitForIdle(3, absl::Seconds(10))) << cluster_->Logs();
  EXPECT_TRUE(ReadBytes(sharded.output_path()) == a_bytes);
  const v1::Job from_sharded =
      SubmitFrom(MlpSpec(3, absl::StrCat(dir, "/out-from-s")),
                 checkpoint::StepDirectory(ckpt_s, 40));
  ASSERT_EQ(from_sharded.state(), v1::SUCCEEDED)
      << from_sharded.reason() << cluster_->Logs();
  EXPECT_TRUE(ReadBytes(from_sharded.output_path()) ==
              ReadBytes(b_plain.output_path()))
      << "resumed from the SHARDED job's step 40, not the parameters "
         "resuming from A's step 40 gives";
  v1::JobSpec sharded_from_a = MlpSpec(2, absl::StrCat(dir, "/out-s-from-a"));
  sharded_from_a.set_assignment_policy(v1::JobSpec::SHARDED);
  const v1::Job s_from_a =
      SubmitFrom(sharded_from_a, checkpoint::StepDirectory(ckpt_a, 20));
  ASSERT_EQ(s_from_a.state(), v1::SUCCEEDED) << s_from_a.reason();
  EXPECT_TRUE(ReadBytes(s_from_a.output_path()) == a_bytes);

  // Another seed is another training: refused, naming the fingerprint.
  v1::JobSpec other = MlpSpec(2, absl::StrCat(dir, "/out-x"));
  other.set_seed(6);
  std::string json;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(other, &json).ok());
  const CliResult refused = Cli({"submit", WriteTempFile("x.json", json),
                                 "--from_checkpoint=" + ckpt_a});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("spec fingerprint"));
}

}  // namespace
}  // namespace pshard
