#include "coordinator/worker_reports.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/proto_time.h"

namespace pshard {
namespace coordinator {
namespace {

absl::Status CheckStep(absl::string_view field, int64_t step,
                       const v1::JobSpec& spec) {
  // A program job may leave steps 0: the program decides how many.
  const bool bounded = !(spec.has_program() && spec.steps() == 0);
  if (step < 0 || (bounded && step > spec.steps())) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": must be in [0, ", bounded ? absl::StrCat(spec.steps()) : "inf",
        "] (the job's steps), got ", step));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateProgress(const v1::JobProgress& progress,
                              const v1::JobSpec& spec) {
  if (absl::Status s = CheckStep("progress.step", progress.step(), spec);
      !s.ok()) {
    return s;
  }
  if (std::isinf(progress.loss())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "progress.loss: must be finite, or NaN for no loss; got ",
        progress.loss()));
  }
  if (progress.has_step_time()) {
    const absl::Duration t = FromProto(progress.step_time());
    if (progress.step_time().seconds() < 0 || progress.step_time().nanos() < 0 ||
        t > absl::Hours(24)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "progress.step_time: must be in [0, 24h], got ",
          progress.step_time().seconds(), "s ", progress.step_time().nanos(),
          "ns"));
    }
  }
  if (progress.bytes_sent() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "progress.bytes_sent: must be >= 0, got ", progress.bytes_sent()));
  }
  if (!std::isfinite(progress.samples_per_second()) ||
      progress.samples_per_second() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("progress.samples_per_second: must be finite and >= 0, got ",
                     progress.samples_per_second()));
  }
  if (!std::isfinite(progress.lr()) || progress.lr() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "progress.lr: must be finite and >= 0, got ", progress.lr()));
  }
  if (progress.has_grad_norm() &&
      (!std::isfinite(progress.grad_norm()) || progress.grad_norm() < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("progress.grad_norm: must be finite and >= 0 or absent, "
                     "got ", progress.grad_norm()));
  }
  return absl::OkStatus();
}

absl::Status ValidateResult(const v1::ReportResultRequest& result,
                            const v1::JobSpec& spec) {
  if (absl::Status s = CheckStep("final_step", result.final_step(), spec);
      !s.ok()) {
    return s;
  }
  if (!v1::FailureCause_IsValid(result.cause())) {
    return absl::InvalidArgumentError(
        absl::StrCat("cause: unknown FailureCause ", result.cause()));
  }
  return absl::OkStatus();
}

absl::Status ValidateHeartbeat(const v1::HeartbeatRequest& heartbeat) {
  if (!v1::WorkerState_IsValid(heartbeat.state()) ||
      heartbeat.state() == v1::LOST || heartbeat.state() == v1::RELEASING) {
    return absl::InvalidArgumentError(absl::StrCat(
        "state: must be IDLE, BUSY or DRAINING, got ", heartbeat.state()));
  }
  if (heartbeat.epoch() < 0 || heartbeat.step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("epoch and step: must be >= 0, got ", heartbeat.epoch(),
                     " and ", heartbeat.step()));
  }
  return absl::OkStatus();
}

}  // namespace coordinator
}  // namespace pshard
