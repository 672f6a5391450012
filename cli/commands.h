// The pshardctl subcommands that talk to a running coordinator: submit, list,
// get, watch, logs, shards, checkpoints, workers, drain, undrain, cancel. main() turns flags into CliOptions and
// calls RunCommand; tests call it directly against an in-process server.
//
// Exit codes: 0 success; 1 a server or connection error, or a watched job that
// did not succeed; 2 bad input (usage, an invalid job spec, InvalidArgument
// from the server); 130 interrupted.
#ifndef PSHARD_CLI_COMMANDS_H_
#define PSHARD_CLI_COMMANDS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cli/client.h"
#include "common/clock.h"
#include "pshard/v1/job.pb.h"
#include "pshard/v1/job_spec.pb.h"
#include "security/transport.h"

namespace pshard::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInterrupted = 130;

// 2 for InvalidArgument (bad input), 130 for Cancelled (interrupted), 1 for
// anything else that is not OK.
int ExitCodeFor(const absl::Status& status);

enum class OutputFormat { kTable, kJson };
// "table" or "json". InvalidArgument otherwise.
absl::StatusOr<OutputFormat> ParseOutputFormat(absl::string_view name);

// Everything the flags say, already typed.
struct CliOptions {
  std::string coordinator = "localhost:7070";
  // TLS settings of every connection (--tls_*, --insecure).
  security::TransportSecurity security;
  OutputFormat output = OutputFormat::kTable;
  absl::Duration connect_timeout = absl::Seconds(5);
  absl::Duration rpc_timeout = absl::Seconds(30);
  // Longest a watch may run before giving up.
  absl::Duration watch_timeout = absl::Hours(72);
  // submit: follow the job after submitting.
  bool watch = false;
  // submit: sets the spec's from_checkpoint (an absolute path; main()
  // absolutises a relative --from_checkpoint against the working directory).
  std::string from_checkpoint;
  // submit: SubmitJobRequest.request_id; empty: a random
  // "pshardctl-<32 hex digits>" per invocation.
  std::string request_id;
  // list: comma-separated state names; empty = all.
  std::string states;
  // list, workers: at most this many (0 = all, page after page).
  int limit = 0;
  // workers: include LOST workers.
  bool include_lost = false;
  // drain: wait until the worker runs no job, polling every drain_poll, for
  // at most wait_timeout.
  bool wait = false;
  absl::Duration wait_timeout = absl::Hours(1);
  absl::Duration drain_poll = absl::Seconds(1);
  // cancel: recorded in the job's event log.
  std::string reason = "by pshardctl cancel";
  // logs: one rank (-1: every rank, each line prefixed "[rank R] "), and
  // whether to follow a running program until it exits.
  int rank = -1;
  bool follow = false;
};

// InvalidArgument naming the flag: a connect, rpc, watch or wait timeout
// that is not positive (a deadline already past would fail every call with a
// confusing DEADLINE_EXCEEDED).
absl::Status CheckTimeouts(const CliOptions& options);

// Where output goes. `out_is_tty` selects the in-place progress bar.
struct CliIo {
  std::ostream* out;
  std::ostream* err;
  bool out_is_tty = false;
};

// Opens a client to the coordinator; called once a command needs one, so that
// input errors are reported before any connection attempt.
using Connector =
    std::function<absl::StatusOr<std::unique_ptr<CoordinatorClient>>()>;

// Runs `args` (args[0] is the subcommand: submit, list, get, watch, logs,
// shards, checkpoints, workers, drain, undrain, cancel) and returns the exit code. Errors are printed as one line
// on io.err. `cancel` (may be null) interrupts a watch.
// Waits and timestamps are measured on `clock`.
int RunCommand(const std::vector<std::string>& args, const CliOptions& options,
               const CliIo& io, const Connector& connect, Cancellation* cancel,
               const Clock& clock = Clock::Real());

// Top-level usage: every command with a one-line description.
std::string UsageText();
// Help for one command (its arguments and flags); empty if there is no such
// command.
std::string CommandHelp(absl::string_view command);

// The flags `command` takes (its own and the common ones), by name.
std::vector<std::string> CommandFlags(absl::string_view command);
// InvalidArgument naming the flag and the command, e.g. "cancel does not take
// --limit (its flags: ...)", for the first of `given` (flag names) that
// `command` does not take. OK for an unknown command (reported by
// RunCommand).
absl::Status CheckFlagsApply(absl::string_view command,
                             const std::vector<std::string>& given);

// Reads and validates a job-spec file (JSON of JobSpec; "-" is stdin).
// InvalidArgument names the file and the offending field, or says the file
// cannot be read.
absl::StatusOr<v1::JobSpec> LoadJobSpecFile(const std::string& path);

// Draws a job's events: an in-place progress bar on a terminal, one plain
// line per event otherwise, or one JSON object per event.
// Thread-safe: a poller may feed it progress while the event stream does.
class ProgressRenderer {
 public:
  // `total_steps` and `max_restarts` come from the job's spec.
  ProgressRenderer(std::ostream& out, bool tty, OutputFormat format,
                   int64_t total_steps, int max_restarts = 0);
  void OnEvent(const v1::JobEvent& event);
  // Redraws the bar from a job's latest progress (terminal and table format
  // only), if it is newer than what is shown.
  void OnLatestProgress(const v1::JobProgress& progress);
  // Ends a bar left open on the current line.
  void Finish();

 private:
  void DrawBar(v1::JobProgress progress) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::ostream& out_ ABSL_GUARDED_BY(mu_);
  const bool tty_;
  const OutputFormat format_;
  const int64_t total_steps_;
  const int max_restarts_;
  bool line_open_ ABSL_GUARDED_BY(mu_) = false;
  int64_t shown_step_ ABSL_GUARDED_BY(mu_) = -1;
  // A terminal state change was drawn: polled progress is stale from now on.
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
};

// Follows `job_id` until it reaches a terminal state, rendering its events,
// and returns the final job. Reconnects if the stream breaks. Cancelled if
// `cancel` fires; DeadlineExceeded after options.watch_timeout on `clock`.
absl::StatusOr<v1::Job> WatchUntilDone(CoordinatorClient& client,
                                       const std::string& job_id,
                                       const CliOptions& options,
                                       const CliIo& io, Cancellation* cancel,
                                       const Clock& clock = Clock::Real());

// The closing lines of a watch: "job-3 SUCCEEDED in 12.3s", the reason of a
// failure, and where the final parameters are.
std::string FormatOutcome(const v1::Job& job);

// `logs` (cli/logs.cc): writes the output of `job_id`'s program, one rank
// (options.rank) or every rank, read from the workers that hold its ranks in
// the job's current epoch (they keep the files after the job ends); with
// options.follow, until every followed program has exited. Errors name what
// is wrong: NotFound (no such job), FailedPrecondition (not a program job, or
// no rank started yet), InvalidArgument (--rank out of range), Unavailable
// (a worker cannot be reached, naming rank, worker and address), Cancelled
// (`cancel` fired). A follower's waits are measured on `clock`.
absl::Status StreamJobLogs(CoordinatorClient& client, const std::string& job_id,
                           const CliOptions& options, std::ostream& out,
                           Cancellation* cancel,
                           const Clock& clock = Clock::Real());

// Prints `status` as one line, "pshardctl: <message>", on `err`.
void PrintError(std::ostream& err, const absl::Status& status);

}  // namespace pshard::cli

#endif  // PSHARD_CLI_COMMANDS_H_
