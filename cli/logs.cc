// `pshardctl logs JOB [--rank R] [--follow]` (declared in cli/commands.h):
// a program job's output, read from the workers that run or ran its ranks.
//
//   GetJob -> a program job with members (the current epoch's rank->worker)
//   -> per rank: GetWorker(member) -> its registered status address
//   -> WorkerStatus.StreamLogs on that worker
//
// One rank (--rank) is printed as the program wrote it. Every rank (the
// default, as `kubectl logs --all-containers --prefix`) is printed line by
// line with "[rank R] " in front: rank after rank without --follow, and
// interleaved as lines arrive with it. A follower that asks before the
// worker has started its rank waits for it while the job's attempt lasts.
#include <algorithm>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "common/clock.h"
#include "common/job_state.h"
#include "common/status_macros.h"
#include "pshard/v1/job.pb.h"

namespace pshard::cli {
namespace {

// Writes one rank's bytes to the shared output: with a prefix, only whole
// lines (the rest waits for its newline, or for Finish), each under the
// output's lock so that lines of different ranks never mix.
class RankOutput {
 public:
  RankOutput(std::string prefix, std::ostream& out, absl::Mutex& out_mu)
      : prefix_(std::move(prefix)), out_(out), out_mu_(out_mu) {}

  void Write(absl::string_view data) {
    if (prefix_.empty()) {
      absl::MutexLock lock(&out_mu_);
      out_ << data;
      out_.flush();
      return;
    }
    partial_.append(data.data(), data.size());
    const size_t last_newline = partial_.rfind('\n');
    if (last_newline == std::string::npos) return;
    std::string lines;
    size_t start = 0;
    while (start <= last_newline) {
      const size_t end = partial_.find('\n', start);
      absl::StrAppend(&lines, prefix_,
                      absl::string_view(partial_).substr(start, end + 1 - start));
      start = end + 1;
    }
    partial_.erase(0, last_newline + 1);
    absl::MutexLock lock(&out_mu_);
    out_ << lines;
    out_.flush();
  }

  // The last line, if the program did not end it.
  void Finish() {
    if (partial_.empty()) return;
    absl::MutexLock lock(&out_mu_);
    out_ << prefix_ << partial_ << "\n";
    out_.flush();
    partial_.clear();
  }

 private:
  const std::string prefix_;
  std::ostream& out_;
  absl::Mutex& out_mu_;
  std::string partial_;
};

// Where rank `rank`'s log is: the worker that holds it in `job`'s epoch.
struct RankSource {
  int rank = 0;
  std::string worker_id;
  std::string address;
};

absl::StatusOr<std::vector<RankSource>> FindRanks(CoordinatorClient& client,
                                                  const v1::Job& job,
                                                  int only_rank) {
  std::vector<RankSource> sources;
  for (const v1::JobMember& member : job.members()) {
    if (only_rank >= 0 && member.rank() != only_rank) continue;
    absl::StatusOr<v1::WorkerInfo> worker = client.GetWorker(member.worker_id());
    if (!worker.ok()) {
      return absl::Status(worker.status().code(),
                          absl::StrCat("rank ", member.rank(), " of ", job.id(),
                                       ": cannot look up its worker ",
                                       member.worker_id(), ": ",
                                       worker.status().message()));
    }
    sources.push_back({member.rank(), member.worker_id(), worker->address()});
  }
  return sources;
}

// Half a second on `clock`, cut short (Cancelled) by any of `cancels`.
absl::Status PauseUnlessCancelled(const Clock& clock,
                                  const std::vector<Cancellation*>& cancels) {
  const absl::Time until = clock.Now() + absl::Milliseconds(500);
  for (absl::Time now = clock.Now(); now < until; now = clock.Now()) {
    for (Cancellation* cancel : cancels) {
      if (cancel != nullptr && cancel->cancelled()) {
        return absl::CancelledError("logs: interrupted");
      }
    }
    clock.SleepUntil(std::min(now + absl::Milliseconds(100), until));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status StreamJobLogs(CoordinatorClient& client, const std::string& job_id,
                           const CliOptions& options, std::ostream& out,
                           Cancellation* cancel, const Clock& clock) {
  if (options.rank < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank: must be >= 0, got ", options.rank));
  }
  ASSIGN_OR_RETURN(v1::Job job, client.GetJob(job_id));
  if (!job.spec().has_program()) {
    return absl::FailedPreconditionError(absl::StrCat(
        job.id(), " runs the built-in ", JobWorkload(job.spec()),
        " workload, not a program: only program jobs have logs (the workers' "
        "own logs have the rest)"));
  }
  if (job.members_size() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(job.id(), " is ", JobStateName(job.state()),
                     ": no rank has started, so there are no logs yet"));
  }
  if (options.rank >= job.members_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank=", options.rank, ": ", job.id(), " has ranks 0 to ",
                     job.members_size() - 1));
  }
  ASSIGN_OR_RETURN(std::vector<RankSource> sources,
                   FindRanks(client, job, options.rank));

  // A follow lasts as long as a watch may; a plain read as long as a request.
  const absl::Duration timeout =
      options.follow ? options.watch_timeout : options.rpc_timeout;
  absl::Mutex out_mu;
  // Ends every rank's stream once one of them fails.
  Cancellation siblings;
  auto stream_rank = [&](const RankSource& source) -> absl::Status {
    auto where = [&](const absl::Status& status) {
      return absl::Status(
          status.code(),
          absl::StrCat("rank ", source.rank, " of ", job.id(), " (worker ",
                       source.worker_id,
                       source.address.empty() ? "" : " at ", source.address,
                       "): ", status.message()));
    };
    absl::StatusOr<std::unique_ptr<WorkerLogClient>> worker =
        WorkerLogClient::Connect(source.address, options.security,
                                 options.connect_timeout);
    if (!worker.ok()) return where(worker.status());
    RankOutput output(
        options.rank >= 0 ? "" : absl::StrCat("[rank ", source.rank, "] "), out,
        out_mu);
    v1::StreamLogsRequest request;
    request.set_job_id(job.id());
    request.set_rank(source.rank);
    request.set_follow(options.follow);
    bool received = false;
    while (true) {
      absl::Status status = (*worker)->StreamLogs(
          request, timeout,
          [&](const v1::LogChunk& chunk) {
            received = true;
            output.Write(chunk.data());
          },
          {cancel, &siblings});
      // Right after a submit the worker may not have been told to run the
      // rank yet: a follower waits for it while the job's attempt lasts.
      if (options.follow && !received &&
          status.code() == absl::StatusCode::kNotFound) {
        absl::StatusOr<v1::Job> now = client.GetJob(job.id());
        if (now.ok() && !IsTerminal(now->state()) &&
            now->epoch() == job.epoch()) {
          RETURN_IF_ERROR(PauseUnlessCancelled(clock, {cancel, &siblings}));
          continue;
        }
      }
      output.Finish();
      if (status.ok() || status.code() == absl::StatusCode::kCancelled) {
        return status;
      }
      return where(status);
    }
  };

  if (!options.follow || sources.size() == 1) {
    for (const RankSource& source : sources) {
      RETURN_IF_ERROR(stream_rank(source));
    }
    return absl::OkStatus();
  }
  std::vector<absl::Status> results(sources.size());
  std::vector<std::thread> followers;
  for (size_t i = 0; i < sources.size(); ++i) {
    followers.emplace_back([&, i] {
      results[i] = stream_rank(sources[i]);
      if (!results[i].ok()) siblings.Cancel();
    });
  }
  for (std::thread& follower : followers) follower.join();
  // The first real failure; a sibling's Cancelled only if nothing else.
  absl::Status first = absl::OkStatus();
  for (const absl::Status& result : results) {
    if (result.ok()) continue;
    if (first.ok() || (first.code() == absl::StatusCode::kCancelled &&
                       result.code() != absl::StatusCode::kCancelled)) {
      first = result;
    }
  }
  return first;
}

}  // namespace pshard::cli
