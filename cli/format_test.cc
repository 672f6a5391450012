#include "cli/format.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "shard/layout.h"

namespace pshard::cli {
namespace {

using ::google::protobuf::util::TimeUtil;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

TEST(HumanBytesTest, PicksBinaryUnits) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(25 << 20), "25.0 MiB");
  EXPECT_EQ(HumanBytes(int64_t{3} << 30), "3.0 GiB");
  EXPECT_EQ(HumanBytes(-2048), "-2.0 KiB");
}

TEST(HumanDurationTest, CompactUnits) {
  EXPECT_EQ(HumanDuration(absl::Microseconds(12300)), "12.3ms");
  EXPECT_EQ(HumanDuration(absl::Seconds(2.5)), "2.5s");
  EXPECT_EQ(HumanDuration(absl::Seconds(75)), "1m15s");
  EXPECT_EQ(HumanDuration(absl::Hours(2) + absl::Minutes(3)), "2h3m");
  EXPECT_EQ(HumanDuration(absl::Microseconds(5)), "5.0us");
}

TEST(TableTest, AlignsColumnsAndRightAlignsNumbers) {
  Table table({"NAME", "BYTES"}, {false, true});
  table.AddRow({"a", "1"});
  table.AddRow({"longer", "12345"});
  EXPECT_EQ(table.Render(),
            "NAME    BYTES\n"
            "a           1\n"
            "longer  12345\n");
}

TEST(TableTest, MissingCellsAreBlankAndTrailingSpaceTrimmed) {
  Table table({"A", "B"});
  table.AddRow({"x"});
  EXPECT_EQ(table.Render(), "A  B\nx\n");
}

TEST(ParseJobStateTest, CaseInsensitive) {
  EXPECT_EQ(*ParseJobState("running"), v1::RUNNING);
  EXPECT_EQ(*ParseJobState("SUCCEEDED"), v1::SUCCEEDED);
  absl::StatusOr<v1::JobState> bad = ParseJobState("sleeping");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("sleeping"));
  EXPECT_FALSE(ParseJobState("job_state_unspecified").ok());
}

TEST(IsTerminalTest, OnlyEndStates) {
  EXPECT_TRUE(IsTerminal(v1::SUCCEEDED));
  EXPECT_TRUE(IsTerminal(v1::FAILED));
  EXPECT_TRUE(IsTerminal(v1::CANCELLED));
  EXPECT_FALSE(IsTerminal(v1::RUNNING));
  EXPECT_FALSE(IsTerminal(v1::QUEUED));
}

v1::JobProgress Progress(int64_t step, int64_t total) {
  v1::JobProgress p;
  p.set_step(step);
  p.set_total_steps(total);
  p.set_loss(0.0123);
  *p.mutable_step_time() = TimeUtil::MicrosecondsToDuration(12300);
  p.set_samples_per_second(3200);
  return p;
}

TEST(ProgressTest, LineHasStepPercentLossTimeThroughput) {
  EXPECT_EQ(FormatProgressLine(Progress(120, 200)),
            "step 120/200 (60%)  loss 0.0123  12.3ms/step  3200 samples/s");
}

TEST(ProgressTest, LineShowsTheLrWhenReported) {
  v1::JobProgress p = Progress(120, 200);
  p.set_lr(2.5e-4);
  EXPECT_EQ(FormatProgressLine(p),
            "step 120/200 (60%)  loss 0.0123  lr 0.00025  12.3ms/step  "
            "3200 samples/s");
}

TEST(ProgressTest, LineShowsTheGradNormWhenReported) {
  v1::JobProgress p = Progress(120, 200);
  p.set_lr(2.5e-4);
  p.set_grad_norm(0.75);
  EXPECT_EQ(FormatProgressLine(p),
            "step 120/200 (60%)  loss 0.0123  lr 0.00025  grad_norm 0.75  "
            "12.3ms/step  3200 samples/s");
  p.set_grad_norm(0);  // reported, even when zero
  EXPECT_THAT(FormatProgressLine(p), ::testing::HasSubstr("grad_norm 0  "));
}

TEST(ProgressTest, LineOmitsLossWhenNotFinite) {
  v1::JobProgress p = Progress(3, 10);
  p.set_loss(std::nan(""));
  p.set_samples_per_second(0);
  EXPECT_EQ(FormatProgressLine(p), "step 3/10 (30%)  12.3ms/step");
}

TEST(ProgressTest, BarFillsProportionally) {
  const std::string bar = FormatProgressBar(Progress(5, 10), 10);
  EXPECT_THAT(bar, HasSubstr("[#####-----]  5/10  50%"));
  EXPECT_THAT(FormatProgressBar(Progress(10, 10), 4), HasSubstr("[####]"));
  EXPECT_THAT(FormatProgressBar(Progress(0, 10), 4), HasSubstr("[----]"));
  // A step past the total (never expected) does not overflow the bar.
  EXPECT_THAT(FormatProgressBar(Progress(12, 10), 4), HasSubstr("[####]"));
}

v1::ShardAssignment TwoRankAssignment() {
  v1::ShardAssignment a;
  a.set_job_id("job-7");
  a.set_epoch(3);
  a.set_policy(v1::JobSpec::BALANCED);
  a.set_total_bytes(3 << 20);
  a.set_imbalance(1.3333);
  auto* b0 = a.add_buckets();
  b0->set_index(0);
  b0->set_bytes(2 << 20);
  b0->set_num_elements(524288);
  b0->add_parameter_names("fc2.weight");
  b0->set_dtype("F32");
  b0->set_owner_rank(0);
  b0->set_owner_worker_id("w-1");
  auto* b1 = a.add_buckets();
  b1->set_index(1);
  b1->set_bytes(1 << 20);
  b1->set_num_elements(262144);
  for (const char* n : {"fc1.weight", "fc1.bias", "fc0.weight", "fc0.bias"}) {
    b1->add_parameter_names(n);
  }
  b1->set_owner_rank(1);
  b1->set_owner_worker_id("w-2");
  b1->set_dtype("F32");
  auto* r0 = a.add_ranks();
  r0->set_rank(0);
  r0->set_worker_id("w-1");
  r0->set_owned_bytes(2 << 20);
  r0->set_owned_elements(524288);
  r0->set_num_buckets(1);
  auto* r1 = a.add_ranks();
  r1->set_rank(1);
  r1->set_worker_id("w-2");
  r1->set_owned_bytes(1 << 20);
  r1->set_owned_elements(262144);
  r1->set_num_buckets(1);
  return a;
}

TEST(ShardTableTest, BucketsRanksAndSummary) {
  const std::string text = FormatShardTable(TwoRankAssignment());
  const std::vector<std::string> lines = Lines(text);
  ASSERT_EQ(lines.size(), 7u) << text;
  EXPECT_EQ(lines[0],
            "BUCKET    BYTES  ELEMENTS  DTYPE  OWNER  WORKER  PARAMS");
  EXPECT_EQ(lines[1],
            "     0  2.0 MiB    524288  F32        0  w-1     fc2.weight");
  EXPECT_EQ(lines[2],
            "     1  1.0 MiB    262144  F32        1  w-2     "
            "fc1.weight,fc1.bias,... (4)");
  EXPECT_EQ(lines[3], "RANK  WORKER  BUCKETS    BYTES  ELEMENTS  SHARE");
  EXPECT_EQ(lines[4], "   0  w-1           1  2.0 MiB    524288  66.7%");
  EXPECT_EQ(lines[5], "   1  w-2           1  1.0 MiB    262144  33.3%");
  EXPECT_EQ(lines[6],
            "job job-7  policy balanced  imbalance 1.333  epoch 3  buckets 2  "
            "total 3.0 MiB");
}

TEST(ShardTableTest, ShardedShowsEachRanksRange) {
  // One bucket of a bias and a large weight, one small bucket: rank 1's
  // range of the small bucket is empty.
  shard::Layout layout;
  for (const auto& bucket :
       std::vector<std::vector<std::pair<const char*, int>>>{
           {{"fc.bias", 10}, {"fc.weight", 256}}, {{"head.bias", 12}}}) {
    v1::BucketLayout* b = layout.Add();
    b->set_index(layout.size() - 1);
    for (const auto& [name, numel] : bucket) {
      v1::BucketParameter* p = b->add_parameters();
      p->set_name(name);
      p->set_num_elements(numel);
      p->set_dtype("F32");
    }
  }
  google::protobuf::RepeatedPtrField<v1::JobMember> members;
  members.Add()->set_worker_id("w-1");
  members.Add()->set_worker_id("w-2");
  const absl::StatusOr<v1::ShardAssignment> a = shard::BuildShardAssignment(
      "job-8", 1, v1::JobSpec::SHARDED, layout, members);
  ASSERT_TRUE(a.ok()) << a.status();
  const std::string text = FormatShardTable(*a);
  const std::vector<std::string> lines = Lines(text);
  ASSERT_EQ(lines.size(), 9u) << text;
  EXPECT_EQ(lines[0],
            "BUCKET  RANGE    BYTES  ELEMENTS  DTYPE  OWNER  WORKER  PARAMS");
  EXPECT_EQ(lines[1],
            "     0  0-128    512 B       128  F32        0  w-1     "
            "fc.bias,fc.weight");
  EXPECT_EQ(lines[2],
            "     0  128-266  552 B       138  F32        1  w-2     fc.weight");
  EXPECT_EQ(lines[3],
            "     1  0-0        0 B         0  F32        0  w-1     -");
  EXPECT_EQ(lines[4],
            "     1  0-12      48 B        12  F32        1  w-2     head.bias");
  EXPECT_EQ(lines[8],
            "job job-8  policy sharded  imbalance 1.079  epoch 1  buckets 2  "
            "total 1.1 KiB");
}

TEST(WorkersTableTest, IdleWorkerShowsDashes) {
  v1::WorkerInfo w;
  w.set_id("w-1");
  w.set_name("pod-a");
  w.set_host("node1");
  w.set_device("cpu");
  w.set_state(v1::IDLE);
  w.set_rank(-1);
  *w.mutable_heartbeat_age() = TimeUtil::MillisecondsToDuration(250);
  v1::WorkerInfo busy = w;
  busy.set_id("w-2");
  busy.set_state(v1::BUSY);
  busy.set_job_id("job-1");
  busy.set_rank(1);
  const std::vector<std::string> lines =
      Lines(FormatWorkersTable({w, busy}));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "ID   NAME   HOST   DEVICE  STATE  JOB    RANK    HEARTBEAT");
  EXPECT_EQ(lines[1],
            "w-1  pod-a  node1  cpu     IDLE   -         -  250.0ms ago");
  EXPECT_EQ(lines[2],
            "w-2  pod-a  node1  cpu     BUSY   job-1     1  250.0ms ago");
}

TEST(JobsTableTest, OneRowPerJob) {
  v1::Job job;
  job.set_id("job-1");
  job.mutable_spec()->set_name("demo");
  job.mutable_spec()->set_world_size(2);
  job.mutable_spec()->set_steps(200);
  job.mutable_spec()->mutable_mlp()->set_input_dim(4);
  job.set_state(v1::RUNNING);
  job.mutable_progress()->set_step(50);
  const absl::Time now = absl::FromUnixSeconds(1000000);
  *job.mutable_submit_time() = TimeUtil::SecondsToTimestamp(1000000 - 90);
  const std::vector<std::string> lines = Lines(FormatJobsTable({job}, now));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], "job-1  demo  RUNNING        2  mlp       50/200  1m30s ago");
}

TEST(JobsTableTest, AProgramJobShowsItsCommand) {
  v1::Job job;
  job.set_id("job-7");
  job.mutable_spec()->set_name("lm");
  job.mutable_spec()->set_world_size(2);
  job.mutable_spec()->mutable_program()->add_argv("python3");
  job.mutable_spec()->mutable_program()->add_argv("train.py");
  job.set_state(v1::QUEUED);
  const std::vector<std::string> lines =
      Lines(FormatJobsTable({job}, absl::FromUnixSeconds(1000000)));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[1], HasSubstr("  program python3  "));
  EXPECT_THAT(FormatJobDetails(job, absl::Now()),
              HasSubstr("workload:   program python3\n"));
  EXPECT_EQ(JobWorkload(v1::JobSpec()), "-");
}

TEST(JobDetailsTest, ShowsReasonOutputAndMembers) {
  v1::Job job;
  job.set_id("job-2");
  job.mutable_spec()->set_name("demo");
  job.set_state(v1::FAILED);
  job.set_reason("rank 1 (w-2) lost");
  job.set_output_path("/tmp/out/params.safetensors");
  auto* m = job.add_members();
  m->set_rank(0);
  m->set_worker_id("w-1");
  m->set_host("h");
  const std::string text = FormatJobDetails(job, absl::Now());
  EXPECT_THAT(text, HasSubstr("state:      FAILED\n"));
  EXPECT_THAT(text, HasSubstr("reason:     rank 1 (w-2) lost\n"));
  EXPECT_THAT(text, HasSubstr("output:     /tmp/out/params.safetensors\n"));
  EXPECT_THAT(text, HasSubstr("w-1"));
}

TEST(JobDetailsTest, ShowsRestartsResumeAndCheckpoints) {
  v1::Job job;
  job.set_id("job-3");
  job.mutable_spec()->set_world_size(3);
  job.mutable_spec()->set_max_restarts(2);
  job.set_restarts(1);
  job.mutable_resumed_from()->set_path("/ckpt/step-50");
  job.mutable_resumed_from()->set_step(50);
  for (int r = 0; r < 2; ++r) job.add_members()->set_rank(r);
  v1::CheckpointRecord* done = job.add_checkpoints();
  done->set_step(50);
  done->set_state(v1::CheckpointRecord::COMPLETE);
  done->set_world_size(3);
  done->set_size_bytes(3 << 20);
  done->set_path("/ckpt/step-50");
  v1::CheckpointRecord* failed = job.add_checkpoints();
  failed->set_step(75);
  failed->set_state(v1::CheckpointRecord::FAILED);
  const std::string text = FormatJobDetails(job, absl::Now());
  EXPECT_THAT(text, HasSubstr("this epoch: 2 workers\n"));
  EXPECT_THAT(text, HasSubstr("restarts:   1 of 2\n"));
  EXPECT_THAT(text, HasSubstr("resumed:    from step 50 (/ckpt/step-50)\n"));
  EXPECT_THAT(text, HasSubstr("checkpoints:\n"));
  EXPECT_THAT(text, HasSubstr("COMPLETE"));
  EXPECT_THAT(text, HasSubstr("FAILED"));
  // A job that cannot restart and never did says nothing about restarts.
  EXPECT_THAT(FormatJobDetails(v1::Job(), absl::Now()),
              Not(HasSubstr("restarts")));
}

TEST(EventLinesTest, RestartAndCheckpoint) {
  v1::JobEvent::Restart restart;
  restart.set_restart(1);
  restart.set_epoch(2);
  restart.set_world_size(2);
  restart.set_cause("rank 1 (worker w-2) lost: its connection closed");
  EXPECT_EQ(FormatRestartLine(restart, 3),
            "restart 1 of 3: epoch 2 on 2 workers from step 0: rank 1 "
            "(worker w-2) lost: its connection closed");
  restart.mutable_resumed_from()->set_step(50);
  EXPECT_THAT(FormatRestartLine(restart, 3), HasSubstr("from step 50: "));
  v1::CheckpointRecord c;
  c.set_step(50);
  c.set_state(v1::CheckpointRecord::FAILED);
  c.set_reason("rank 1: /ckpt/step-50/shard-1-of-2.safetensors: disk full");
  EXPECT_EQ(FormatCheckpointLine(c),
            "checkpoint step 50 FAILED: rank 1: "
            "/ckpt/step-50/shard-1-of-2.safetensors: disk full");
  c.set_state(v1::CheckpointRecord::COMPLETE);
  c.set_world_size(2);
  c.set_size_bytes(2048);
  c.set_path("/ckpt/step-50");
  EXPECT_THAT(FormatCheckpointLine(c),
              HasSubstr("checkpoint step 50 COMPLETE: 2 shards, "));
  EXPECT_THAT(FormatCheckpointLine(c), HasSubstr(" at /ckpt/step-50"));
}

TEST(JsonTest, RoundTripsThroughTheJsonParser) {
  const v1::ShardAssignment a = TwoRankAssignment();
  const std::string json = ToJson(a);
  EXPECT_THAT(json, HasSubstr("\"owner_worker_id\": \"w-2\""));
  v1::ShardAssignment back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &back).ok());
  EXPECT_EQ(back.SerializeAsString(), a.SerializeAsString());
  const std::string line = ToJsonLine(a);
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  EXPECT_THAT(ToJson(v1::Job()), Not(HasSubstr("error")));
}

}  // namespace
}  // namespace pshard::cli
