#include "coordinator/worker_reports.h"

#include <cmath>
#include <limits>

#include "common/proto_time.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pshard {
namespace coordinator {
namespace {

using ::testing::HasSubstr;

v1::JobSpec Spec(int64_t steps) {
  v1::JobSpec spec;
  spec.set_steps(steps);
  spec.mutable_synthetic()->set_num_parameters(10);
  return spec;
}

v1::JobProgress Progress(int64_t step) {
  v1::JobProgress p;
  p.set_step(step);
  p.set_loss(0.5);
  *p.mutable_step_time() = ToProto(absl::Milliseconds(40));
  p.set_bytes_sent(1 << 20);
  p.set_samples_per_second(1000);
  return p;
}

TEST(WorkerReportsTest, ProgressInRangeIsAccepted) {
  EXPECT_OK(ValidateProgress(Progress(0), Spec(200)));
  EXPECT_OK(ValidateProgress(Progress(200), Spec(200)));
  v1::JobProgress no_loss = Progress(3);
  no_loss.set_loss(std::numeric_limits<double>::quiet_NaN());
  EXPECT_OK(ValidateProgress(no_loss, Spec(200)));
  // A program that decides its own steps may report any step.
  v1::JobSpec program;
  program.mutable_program()->add_argv("train.py");
  EXPECT_OK(ValidateProgress(Progress(int64_t{1} << 40), program));
}

TEST(WorkerReportsTest, HostileProgressIsRefusedNamingTheField) {
  const v1::JobSpec spec = Spec(200);
  EXPECT_THAT(ValidateProgress(Progress(int64_t{1} << 62), spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("progress.step: must be in [0, 200]")));
  EXPECT_THAT(ValidateProgress(Progress(-1), spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("progress.step")));
  v1::JobProgress p = Progress(5);
  p.set_loss(std::numeric_limits<double>::infinity());
  EXPECT_THAT(ValidateProgress(p, spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("progress.loss")));
  p = Progress(5);
  p.mutable_step_time()->set_seconds(-3);
  EXPECT_THAT(ValidateProgress(p, spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("progress.step_time")));
  p = Progress(5);
  p.mutable_step_time()->set_seconds(int64_t{1} << 40);
  EXPECT_THAT(ValidateProgress(p, spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("progress.step_time")));
  p = Progress(5);
  p.set_bytes_sent(-1);
  EXPECT_THAT(ValidateProgress(p, spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("progress.bytes_sent")));
  p = Progress(5);
  p.set_samples_per_second(std::nan(""));
  EXPECT_THAT(ValidateProgress(p, spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("progress.samples_per_second")));
  p = Progress(5);
  p.set_lr(-0.1);
  EXPECT_THAT(ValidateProgress(p, spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "progress.lr: must be finite and >= 0, got -0.1"));
  p.set_lr(std::numeric_limits<double>::infinity());
  EXPECT_THAT(ValidateProgress(p, spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("progress.lr")));
  p.set_lr(3e-4);
  EXPECT_OK(ValidateProgress(p, spec));
  p.set_grad_norm(-1);
  EXPECT_THAT(ValidateProgress(p, spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "progress.grad_norm: must be finite and >= 0 or "
                       "absent, got -1"));
  p.set_grad_norm(std::nan(""));
  EXPECT_THAT(ValidateProgress(p, spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("progress.grad_norm")));
  p.set_grad_norm(std::numeric_limits<double>::infinity());
  EXPECT_THAT(ValidateProgress(p, spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("progress.grad_norm")));
  p.set_grad_norm(0);
  EXPECT_OK(ValidateProgress(p, spec));
  p.set_grad_norm(12.5);
  EXPECT_OK(ValidateProgress(p, spec));
  p.clear_grad_norm();
  EXPECT_OK(ValidateProgress(p, spec));
}

TEST(WorkerReportsTest, ResultsAndHeartbeats) {
  v1::ReportResultRequest result;
  result.set_ok(true);
  result.set_final_step(200);
  EXPECT_OK(ValidateResult(result, Spec(200)));
  result.set_final_step(201);
  EXPECT_THAT(ValidateResult(result, Spec(200)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("final_step: must be in [0, 200]")));
  result.set_final_step(10);
  result.set_cause(static_cast<v1::FailureCause>(77));
  EXPECT_THAT(ValidateResult(result, Spec(200)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cause: unknown FailureCause 77")));

  v1::HeartbeatRequest beat;
  beat.set_state(v1::BUSY);
  beat.set_epoch(2);
  beat.set_step(7);
  EXPECT_OK(ValidateHeartbeat(beat));
  beat.set_state(static_cast<v1::WorkerState>(77));
  EXPECT_THAT(ValidateHeartbeat(beat),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("state: must be IDLE, BUSY or DRAINING, got 77")));
  beat.set_state(v1::LOST);
  EXPECT_THAT(ValidateHeartbeat(beat),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("state")));
  beat.set_state(v1::RELEASING);  // the coordinator's word, not a worker's
  EXPECT_THAT(ValidateHeartbeat(beat),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("state")));
  beat.set_state(v1::IDLE);
  beat.set_epoch(-1);
  EXPECT_THAT(ValidateHeartbeat(beat),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("epoch")));
}

}  // namespace
}  // namespace coordinator
}  // namespace pshard
