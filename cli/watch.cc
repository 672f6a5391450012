// The watch half of pshardctl: ProgressRenderer, WatchUntilDone and
// FormatOutcome (declared in cli/commands.h), used by `submit --watch`,
// `watch` and `local`.
#include <string>
#include <thread>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "common/job_state.h"
#include "common/status_macros.h"
#include "pshard/v1/job.pb.h"

namespace pshard::cli {

ProgressRenderer::ProgressRenderer(std::ostream& out, bool tty,
                                   OutputFormat format, int64_t total_steps,
                                   int max_restarts)
    : out_(out),
      tty_(tty),
      format_(format),
      total_steps_(total_steps),
      max_restarts_(max_restarts) {}

void ProgressRenderer::OnEvent(const v1::JobEvent& event) {
  absl::MutexLock lock(&mu_);
  if (format_ == OutputFormat::kJson) {
    out_ << ToJsonLine(event);
    out_.flush();
    return;
  }
  if (event.has_progress()) {
    if (tty_) {
      DrawBar(event.progress());
    } else {
      v1::JobProgress progress = event.progress();
      if (progress.total_steps() == 0) progress.set_total_steps(total_steps_);
      out_ << FormatProgressLine(progress) << "\n";
    }
  } else if (event.has_state_change()) {
    FinishLocked();
    const auto& change = event.state_change();
    if (change.from() != v1::JOB_STATE_UNSPECIFIED) {
      out_ << JobStateName(change.from()) << " -> ";
    }
    out_ << JobStateName(change.to());
    if (!change.reason().empty()) out_ << ": " << change.reason();
    out_ << "\n";
    // A new attempt (epoch) starts counting again.
    if (change.to() == v1::STARTING) shown_step_ = -1;
    ended_ = IsTerminal(change.to());
  } else if (event.has_restart()) {
    FinishLocked();
    out_ << FormatRestartLine(event.restart(), max_restarts_) << "\n";
  } else if (event.has_checkpoint()) {
    FinishLocked();
    out_ << FormatCheckpointLine(event.checkpoint()) << "\n";
  }
  out_.flush();
}

void ProgressRenderer::OnLatestProgress(const v1::JobProgress& progress) {
  if (!tty_ || format_ != OutputFormat::kTable) return;
  absl::MutexLock lock(&mu_);
  if (ended_ || progress.step() <= shown_step_) return;
  DrawBar(progress);
  out_.flush();
}

void ProgressRenderer::DrawBar(v1::JobProgress progress) {
  // The stream may replay older steps than a poll already showed.
  if (progress.step() < shown_step_) return;
  shown_step_ = progress.step();
  if (progress.total_steps() == 0) progress.set_total_steps(total_steps_);
  // \r returns to the line start, ESC[K clears what an older, longer line
  // left behind.
  out_ << "\r\033[K" << FormatProgressBar(progress, 30);
  line_open_ = true;
}

void ProgressRenderer::Finish() {
  absl::MutexLock lock(&mu_);
  FinishLocked();
  out_.flush();
}

void ProgressRenderer::FinishLocked() {
  if (line_open_) {
    out_ << "\n";
    line_open_ = false;
  }
}

absl::StatusOr<v1::Job> WatchUntilDone(CoordinatorClient& client,
                                       const std::string& job_id,
                                       const CliOptions& options,
                                       const CliIo& io, Cancellation* cancel,
                                       const Clock& clock) {
  const absl::Time deadline = clock.Now() + options.watch_timeout;
  ASSIGN_OR_RETURN(v1::Job job, client.GetJob(job_id));
  ProgressRenderer renderer(*io.out, io.out_is_tty, options.output,
                            job.spec().steps(), job.spec().max_restarts());
  // The coordinator's event log keeps about one progress event a second; on
  // a terminal the bar also follows the job's latest progress, polled.
  absl::Mutex poll_mu;
  bool stop_polling = false;
  std::thread poller;
  if (io.out_is_tty && options.output == OutputFormat::kTable) {
    poller = std::thread([&] {
      for (;;) {
        {
          absl::MutexLock lock(&poll_mu);
          if (clock.AwaitWithTimeout(poll_mu, absl::Condition(&stop_polling),
                                     absl::Milliseconds(200))) {
            return;
          }
        }
        absl::StatusOr<v1::Job> latest = client.GetJob(job_id);
        if (latest.ok() && latest->state() == v1::RUNNING) {
          renderer.OnLatestProgress(latest->progress());
        }
      }
    });
  }
  // On every way out: stops the poller, then ends the progress output (so the
  // poller cannot draw after the last line).
  absl::Cleanup finish = [&] {
    {
      absl::MutexLock lock(&poll_mu);
      stop_polling = true;
    }
    if (poller.joinable()) poller.join();
    renderer.Finish();
  };
  int64_t last_sequence = 0;
  int failures = 0;
  auto timed_out = [&] {
    return absl::DeadlineExceededError(
        absl::StrCat("watch ", job_id, ": still ", JobStateName(job.state()),
                     " after --watch_timeout=",
                     absl::FormatDuration(options.watch_timeout)));
  };
  while (true) {
    const absl::Duration left = deadline - clock.Now();
    if (left <= absl::ZeroDuration()) return timed_out();
    absl::Status status = client.WatchJob(
        job_id, last_sequence, left,
        [&](const v1::JobEvent& event) {
          if (event.sequence() > last_sequence) last_sequence = event.sequence();
          renderer.OnEvent(event);
        },
        cancel);
    if (status.code() == absl::StatusCode::kCancelled) return status;
    if (status.code() == absl::StatusCode::kDeadlineExceeded) {
      // The stream's deadline (gRPC's clock) was the watch's: say in which
      // state it left the job.
      absl::StatusOr<v1::Job> latest = client.GetJob(job_id);
      if (latest.ok()) job = *std::move(latest);
      return timed_out();
    }
    if (!status.ok()) {
      // A broken stream (coordinator restart, network blip) is resumed from
      // the last event seen; anything else is final.
      if (status.code() != absl::StatusCode::kUnavailable || ++failures > 10) {
        return status;
      }
      clock.SleepFor(absl::Milliseconds(500));
      continue;
    }
    failures = 0;
    ASSIGN_OR_RETURN(job, client.GetJob(job_id));
    if (IsTerminal(job.state())) {
      return job;
    }
    // The stream ended but the job has not: resume after what we saw.
  }
}

std::string FormatOutcome(const v1::Job& job) {
  std::string out = absl::StrCat(job.id(), " ", JobStateName(job.state()));
  if (job.start_time().seconds() != 0 && job.end_time().seconds() != 0) {
    const absl::Duration d =
        absl::Seconds(job.end_time().seconds() - job.start_time().seconds()) +
        absl::Nanoseconds(job.end_time().nanos() - job.start_time().nanos());
    if (d >= absl::Milliseconds(100)) {
      absl::StrAppend(&out, " in ",
                      HumanDuration(absl::Trunc(d, absl::Milliseconds(100))));
    }
  }
  if (!job.reason().empty() && job.state() != v1::SUCCEEDED) {
    absl::StrAppend(&out, ": ", job.reason());
  }
  out += "\n";
  if (!job.output_path().empty()) {
    absl::StrAppend(&out, "final parameters: ", job.output_path(), "\n");
  }
  return out;
}

}  // namespace pshard::cli
