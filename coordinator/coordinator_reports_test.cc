// Hostile or buggy worker reports (worker_reports.h) are refused through the
// coordinator's own entry points, and leave the job as it was.
#include <cstdint>

#include "common/proto_time.h"
#include "coordinator/coordinator_test_fixture.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::HasSubstr;

TEST_F(CoordinatorTest, HostileProgressResultAndHeartbeatAreRefused) {
  Worker a = Register("a");
  Worker b = Register("b");
  const v1::Job job = StartJobOn(a, b);
  PublishLayout(job, {4, 4});
  const v1::Job before = GetJob(job.id());

  v1::ReportProgressRequest progress;
  progress.set_job_id(job.id());
  progress.set_epoch(job.epoch());
  progress.set_rank(0);
  progress.set_worker_id(job.members(0).worker_id());
  progress.mutable_progress()->set_step(int64_t{1} << 62);  // of a 10-step job
  EXPECT_THAT(c_->ReportProgress(progress),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("progress.step: must be in [0, 10]")));
  progress.mutable_progress()->set_step(3);
  *progress.mutable_progress()->mutable_step_time() = ToProto(absl::Seconds(-2));
  EXPECT_THAT(c_->ReportProgress(progress),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("progress.step_time")));

  v1::ReportResultRequest result = ResultRequest(job, 1, true, "");
  result.set_final_step(11);
  EXPECT_THAT(c_->ReportResult(result),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("final_step: must be in [0, 10]")));

  v1::HeartbeatRequest beat;
  beat.set_worker_id(a.id);
  beat.set_incarnation(a.incarnation);
  beat.set_state(static_cast<v1::WorkerState>(77));
  EXPECT_THAT(c_->Heartbeat(beat),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("state: must be IDLE, BUSY or DRAINING, got 77")));

  const v1::Job after = GetJob(job.id());
  EXPECT_EQ(after.state(), v1::RUNNING);
  EXPECT_EQ(after.progress().SerializeAsString(),
            before.progress().SerializeAsString());
  EXPECT_EQ(Events(job.id()).size(), Events(before.id()).size());
}

TEST_F(CoordinatorTest, ALayoutNamingAParameterTwiceFailsTheJob) {
  Worker a = Register("a");
  Worker b = Register("b");
  const v1::Job job = StartJobOn(a, b);
  v1::ReportBucketsRequest req = Buckets(job, 0, {4, 4});
  req.mutable_buckets(1)->mutable_parameters(0)->set_name("t0");
  EXPECT_THAT(c_->ReportBuckets(req),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"t0\" is already buckets[0].parameters[0]")));
  EXPECT_EQ(GetJob(job.id()).state(), v1::FAILED);
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
