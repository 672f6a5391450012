#include "cli/commands.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "cli/export_command.h"
#include "cli/format.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "pshard/v1/job.pb.h"

namespace pshard::cli {
namespace {

// A fresh idempotency key per invocation: 128 random bits, so two users'
// submissions never collide, while this invocation's retries repeat it.
std::string RandomRequestId() {
  absl::BitGen gen;
  return absl::StrCat(
      "pshardctl-",
      absl::Hex(absl::Uniform<uint64_t>(gen), absl::kZeroPad16),
      absl::Hex(absl::Uniform<uint64_t>(gen), absl::kZeroPad16));
}

struct CommandDoc {
  const char* name;
  const char* args;
  const char* summary;
  const char* details;
  // The flags the command takes, space-separated, without the common ones
  // below; any other flag given is refused (CheckFlagsApply).
  const char* flags;
  // Talks to a coordinator: takes kConnectionFlags.
  bool remote;
};

// The flags of kCommonFlags.
constexpr const char* kConnectionFlags =
    "coordinator connect_timeout rpc_timeout insecure tls_ca tls_cert tls_key "
    "tls_server_name token_file";

constexpr const char* kCommonFlags =
    "  --coordinator=HOST:PORT  coordinator address (default "
    "$PSHARD_COORDINATOR, else localhost:7070)\n"
    "  --connect_timeout=5s     give up if the coordinator does not answer "
    "within this long\n"
    "  --rpc_timeout=30s        deadline of each request\n"
    "  --tls_ca=FILE            CA bundle the coordinator's (and workers') "
    "certificates are checked against (default $PSHARD_TLS_CA, else the "
    "system's roots)\n"
    "  --tls_cert=FILE, --tls_key=FILE  client certificate and key, where the "
    "coordinator requires one (mutual TLS)\n"
    "  --tls_server_name=NAME   the name the server's certificate carries, when "
    "it is not the host dialled\n"
    "  --token_file=FILE        bearer token to present (default "
    "$PSHARD_TOKEN_FILE, else the token in $PSHARD_TOKEN)\n"
    "  --insecure               plaintext, for a coordinator started with "
    "--insecure\n";
constexpr const char* kOutputFlag =
    "  --output=table|json      output format (default table; json prints the "
    "API message under protobuf's JSON mapping)\n";

const CommandDoc kCommands[] = {
    {"submit", "JOB.json",
     "validate a job spec, submit it, print the job id",
     "Validates JOB.json (the JSON form of pshard.v1.JobSpec; see "
     "docs/user-guide.md; `-` reads it from stdin) before contacting the "
     "coordinator, then submits it and prints the new job id (on stderr: "
     "its state and why, e.g. QUEUED: submitted; needs 64 workers; 3 are "
     "registered and not draining).\n\n"
     "Flags:\n"
     "  --watch                  follow the job until it ends (as `watch`); "
     "exit 0 only if it SUCCEEDED\n"
     "  --from_checkpoint=DIR    start the job from a checkpoint instead of "
     "step 0 (sets the spec's from_checkpoint, replacing any there): a step "
     "directory (<dir>/step-<N>) or a job's checkpoint directory (its latest "
     "complete checkpoint). A relative DIR is taken from the current "
     "directory and sent as an absolute path. The coordinator verifies it "
     "(every shard's size and SHA-256), requires the same workload, optimizer "
     "and seed, and a step below the spec's steps; the job then runs steps "
     "N+1..steps at its own world_size, whatever the checkpoint's\n"
     "  --request_id=ID          the submission's idempotency key (at most "
     "128 of [A-Za-z0-9._:-]): submitting again with the same ID and spec "
     "prints the job the first submission made instead of adding one (the "
     "same ID with another spec fails). Default: a new random "
     "pshardctl-<32 hex digits> per invocation, sent again on pshardctl's "
     "own retries (up to 3 attempts when the coordinator is unavailable or "
     "late). Fix it where a submit may run twice, e.g. in a Kubernetes Job\n"
     "  --watch_timeout=DURATION with --watch: give up following after this "
     "long (default 72h)\n",
     "output watch from_checkpoint request_id watch_timeout", true},
    {"list", "", "list jobs, newest first",
     "Flags:\n"
     "  --state=S1,S2            only jobs in these states (queued, starting, "
     "running, succeeded, failed, cancelled)\n"
     "  --limit=N                at most N jobs (default 0: all, fetched page "
     "by page)\n",
     "output state limit", true},
    {"get", "JOB", "show one job: state, progress, members, output path", "",
     "output", true},
    {"watch", "JOB",
     "follow a job's progress until it ends; exit 0 only if it SUCCEEDED",
     "On a terminal the progress bar is redrawn in place; otherwise every "
     "event is printed on its own line (with --output=json, one JSON "
     "JobEvent per line).\n\n"
     "Flags:\n"
     "  --watch_timeout=DURATION give up after this long (default 72h)\n",
     "output watch_timeout", true},
    {"logs", "JOB",
     "print a program job's output (its ranks' stdout and stderr)",
     "Reads each rank's log from the worker that runs (or ran) it, through "
     "the worker's status service; the logs stay on the workers after the "
     "job ends (the newest pshard-worker --log_max_bytes of each rank; "
     "the rotated file holds the earlier part). Prints the text as it is; "
     "--output does not apply. Without --rank, every rank's lines are printed with a "
     "\"[rank R] \" prefix, rank after rank (interleaved as they come with "
     "--follow). Only program jobs have logs; the ranks are those of the "
     "job's latest attempt.\n\n"
     "Flags:\n"
     "  --rank=R                 only rank R, as the program wrote it\n"
     "  --follow                 keep printing what the programs write until "
     "they exit (Ctrl-C stops)\n"
     "  --watch_timeout=DURATION with --follow: give up after this long "
     "(default 72h)\n",
     "rank follow watch_timeout", true},
    {"shards", "JOB",
     "show which rank owns which gradient bucket, per-rank totals, policy, "
     "imbalance and epoch",
     "Fails (exit 1) while the job has no assignment yet: it is published "
     "once every rank has reported its bucket layout.\n",
     "output", true},
    {"checkpoints", "JOB",
     "list a job's checkpoints: step, state, world size, size, time, path",
     "One row per checkpoint the coordinator records for the job, oldest "
     "first: the complete ones still on disk, then any being written or "
     "failed (REASON says why). With --output=json, the Job message with only "
     "its id, checkpoints and initialized_from set. A job submitted with "
     "--from_checkpoint says where it was initialised first.\n",
     "output", true},
    {"export", "CHECKPOINT OUT.safetensors",
     "write a checkpoint's full parameters to one safetensors file",
     "CHECKPOINT is a step directory (<dir>/step-<N>) or a job's checkpoint "
     "directory (then its latest complete checkpoint). Verifies the manifest "
     "(sizes and SHA-256 of every shard), then writes the parameters (no "
     "optimizer state) sorted by name, streamed shard by shard: memory stays "
     "bounded by the largest tensor. The output is the same whatever world "
     "size the checkpoint was written at. Needs no coordinator; exit 1 if "
     "the checkpoint is refused (the message names the file).\n",
     "output", false},
    {"workers", "", "list the worker pool",
     "A worker taken out of scheduling by `drain` shows as DRAINING (with its "
     "job while that still runs). A worker whose job was cancelled, failed or "
     "restarted shows as RELEASING (with that job) until it has stopped it; "
     "it takes no new job until then.\n\n"
     "Flags:\n"
     "  --include_lost           also list LOST workers\n"
     "  --limit=N                at most N workers (default 0: all, fetched "
     "page by page)\n",
     "output include_lost limit", true},
    {"drain", "WORKER",
     "take a worker out of scheduling; its running job, if any, finishes",
     "WORKER is a worker id (w-7) or name (e.g. the pod name). The worker "
     "keeps running and heartbeating but gets no new job until `undrain` (or "
     "until it restarts). Like `kubectl cordon`; with --wait, like `kubectl "
     "drain`, it then waits until the worker runs no job.\n\n"
     "Flags:\n"
     "  --wait                   wait until the worker's job (if any) has ended\n"
     "  --wait_timeout=DURATION  give up waiting after this long (default 1h; "
     "exit 1)\n",
     "output wait wait_timeout", true},
    {"undrain", "WORKER", "make a drained worker schedulable again",
     "WORKER is a worker id (w-7) or name.\n",
     "output", true},
    {"cancel", "JOB", "cancel a job that has not ended",
     "Flags:\n"
     "  --reason=TEXT            recorded in the job's event log\n",
     "output reason", true},
    {"local", "[JOB.json]",
     "run a local cluster (coordinator + N workers) and a job on it",
     "Starts pshard-coordinator and N pshard-worker processes on 127.0.0.1 "
     "(free ports), submits JOB.json (default: the built-in "
     "examples/mlp_adam_2workers.json), shows the shard table and the live "
     "progress, prints where the final parameters are, then stops every "
     "process. Ctrl-C cancels the job and stops the cluster. Exit 0 only if "
     "the job SUCCEEDED.\n\n"
     "Flags:\n"
     "  --workers=N              number of workers (default: the spec's "
     "world_size; when set, it also sets world_size)\n"
     "  --device=cpu|cuda        the workers' device: cpu (default), or "
     "cuda: worker i on GPU cuda:i (NCCL wants one worker per GPU)\n"
     "  --run_dir=DIR            where state, logs and (unless the spec sets "
     "output_dir) the final parameters go (default: a new "
     "/tmp/pshard-local-XXXXXX)\n"
     "  --bin_dir=DIR            where pshard-coordinator and pshard-worker "
     "are (default: next to pshardctl, or its Bazel runfiles)\n"
     "  --keep_running           after the job ends, keep the cluster up "
     "until Ctrl-C (to inspect it with other pshardctl commands)\n"
     "  --watch_timeout=DURATION give up following the job after this long "
     "(default 72h)\n"
     "  --insecure               plaintext on loopback; by default the cluster "
     "uses mutual TLS with a CA and certificates made in RUN_DIR/tls\n"
     "  --connect_timeout=5s, --rpc_timeout=30s  as for the other commands, "
     "towards the local coordinator\n",
     "output workers device run_dir bin_dir keep_running connect_timeout rpc_timeout "
     "watch_timeout insecure",
     false},
};

const CommandDoc* FindCommand(absl::string_view name) {
  for (const CommandDoc& doc : kCommands) {
    if (name == doc.name) return &doc;
  }
  return nullptr;
}

absl::Status UsageError(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

// Checks that `args` (args[0] = command) has exactly `n` positional arguments.
absl::Status ExpectArgs(const std::vector<std::string>& args, size_t n) {
  const CommandDoc* doc = FindCommand(args[0]);
  const std::string usage =
      absl::StrCat("usage: pshardctl ", args[0],
                   (doc != nullptr && doc->args[0] != '\0')
                       ? absl::StrCat(" ", doc->args)
                       : "");
  if (args.size() - 1 < n) {
    return UsageError(absl::StrCat(args[0], ": missing ", doc->args,
                                   " argument (", usage, ")"));
  }
  if (args.size() - 1 > n) {
    return UsageError(absl::StrCat(args[0], ": unexpected argument \"",
                                   args[n + 1], "\" (", usage, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::JobState>> ParseStates(absl::string_view list) {
  std::vector<v1::JobState> states;
  for (absl::string_view name :
       absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    ASSIGN_OR_RETURN(v1::JobState state,
                     ParseJobState(absl::StripAsciiWhitespace(name)));
    states.push_back(state);
  }
  return states;
}

class Runner {
 public:
  Runner(const CliOptions& options, const CliIo& io, const Connector& connect,
         Cancellation* cancel, const Clock& clock)
      : options_(options),
        io_(io),
        connect_(connect),
        cancel_(cancel),
        clock_(clock) {}

  // Returns the exit code; errors are printed here.
  int Run(const std::vector<std::string>& args) {
    const absl::Status timeouts = CheckTimeouts(options_);
    absl::StatusOr<int> code =
        timeouts.ok() ? Dispatch(args) : absl::StatusOr<int>(timeouts);
    if (!code.ok()) {
      PrintError(*io_.err, code.status());
      return ExitCodeFor(code.status());
    }
    return *code;
  }

 private:
  absl::StatusOr<int> Dispatch(const std::vector<std::string>& args) {
    const std::string& cmd = args[0];
    if (cmd == "submit") return Submit(args);
    if (cmd == "list") return List(args);
    if (cmd == "get") return Get(args);
    if (cmd == "watch") return Watch(args);
    if (cmd == "logs") return Logs(args);
    if (cmd == "shards") return Shards(args);
    if (cmd == "checkpoints") return Checkpoints(args);
    if (cmd == "export") return Export(args);
    if (cmd == "workers") return Workers(args);
    if (cmd == "drain") return Drain(args);
    if (cmd == "undrain") return Undrain(args);
    if (cmd == "cancel") return Cancel(args);
    return UsageError(absl::StrCat("unknown command \"", cmd,
                                   "\"; run `pshardctl --help` for the list"));
  }

  absl::StatusOr<CoordinatorClient*> Client() {
    if (client_ == nullptr) {
      ASSIGN_OR_RETURN(client_, connect_());
    }
    return client_.get();
  }

  bool json() const { return options_.output == OutputFormat::kJson; }

  absl::StatusOr<int> Submit(const std::vector<std::string>& args) {
    RETURN_IF_ERROR(ExpectArgs(args, 1));
    ASSIGN_OR_RETURN(v1::JobSpec spec, LoadJobSpecFile(args[1]));
    if (!options_.from_checkpoint.empty()) {
      spec.set_from_checkpoint(options_.from_checkpoint);
      RETURN_IF_ERROR(ValidateJobSpec(spec));  // e.g. a relative path
    }
    ASSIGN_OR_RETURN(CoordinatorClient * client, Client());
    const std::string request_id = options_.request_id.empty()
                                       ? RandomRequestId()
                                       : options_.request_id;
    ASSIGN_OR_RETURN(v1::Job job, client->SubmitJob(spec, request_id));
    if (json() && !options_.watch) {
      *io_.out << ToJson(job);
    } else if (!json()) {
      *io_.out << job.id() << "\n";
      // Only the id on stdout (JOB=$(pshardctl submit ...)); where it
      // stands on stderr, so a job that cannot start on this pool says so
      // at once.
      *io_.err << job.id() << ": " << v1::JobState_Name(job.state()) << ": "
               << job.reason() << "\n";
    }
    io_.out->flush();
    if (!options_.watch) return kExitOk;
    return WatchJob(*client, job.id());
  }

  absl::StatusOr<int> List(const std::vector<std::string>& args) {
    RETURN_IF_ERROR(ExpectArgs(args, 0));
    ASSIGN_OR_RETURN(std::vector<v1::JobState> states,
                     ParseStates(options_.states));
    if (options_.limit < 0) return UsageError("--limit: must be >= 0");
    ASSIGN_OR_RETURN(CoordinatorClient * client, Client());
    ASSIGN_OR_RETURN(std::vector<v1::Job> jobs,
                     client->ListJobs(states, options_.limit));
    if (json()) {
      v1::ListJobsResponse response;
      for (v1::Job& job : jobs) *response.add_jobs() = std::move(job);
      *io_.out << ToJson(response);
    } else {
      *io_.out << FormatJobsTable(jobs, clock_.Now());
    }
    return kExitOk;
  }

  absl::StatusOr<int> Get(const std::vector<std::string>& args) {
    RETURN_IF_ERROR(ExpectArgs(args, 1));
    ASSIGN_OR_RETURN(CoordinatorClient * client, Client());
    ASSIGN_OR_RETURN(v1::Job job, client->GetJob(args[1]));
    *io_.out << (json() ? ToJson(job) : FormatJobDetails(job, clock_.Now()));
    return kExitOk;
  }

  absl::StatusOr<int> Watch(const std::vector<std::string>& args) {
    RETURN_IF_ERROR(ExpectArgs(args, 1));
    ASSIGN_OR_RETURN(CoordinatorClient * client, Client());
    return WatchJob(*client, args[1]);
  }

  absl::StatusOr<int> WatchJob(CoordinatorClient& client,
                               const std::string& job_id) {
    ASSIGN_OR_RETURN(v1::Job job, WatchUntilDone(client, job_id, options_, io_,
                                                 cancel_, clock_));
    if (!json()) *io_.out << FormatOutcome(job);
    io_.out->flush();
    return job.state() == v1::SUCCEEDED ? kExitOk : kExitError;
  }

  absl::StatusOr<int> Export(const std::vector<std::string>& args) {
    RETURN_IF_ERROR(ExpectArgs(args, 2));
    RETURN_IF_ERROR(ExportCheckpoint(args[1], args[2], options_.output,
                                     *io_.out));
    return kExitOk;
  }

  absl::StatusOr<int> Logs(const std::vector<std::string>& args) {
    RETURN_IF_ERROR(ExpectArgs(args, 1));
    ASSIGN_OR_RETURN(CoordinatorClient * client, Client());
    RETURN_IF_ERROR(
        StreamJobLogs(*client, args[1], options_, *io_.out, cancel_, clock_));
    return kExitOk;
  }

  absl::StatusOr<int> Shards(const std::vector<std::string>& args) {
    RETURN_IF_ERROR(ExpectArgs(args, 1));
    ASSIGN_OR_RETURN(CoordinatorClient * client, Client());
    ASSIGN_OR_RETURN(v1::ShardAssignment assignment,
                     client->GetShardAssignment(args[1]));
    *io_.out << (json() ? ToJson(assignment) : FormatShardTable(assignment));
    return kExitOk;
  }

  absl::StatusOr<int> Checkpoints(const std::vector<std::string>& args) {
    RETURN_IF_ERROR(ExpectArgs(args, 1));
    ASSIGN_OR_RETURN(CoordinatorClient * client, Client());
    ASSIGN_OR_RETURN(v1::Job job, client->GetJob(args[1]));
    if (json()) {
      v1::Job listed;
      listed.set_id(job.id());
      *listed.mutable_checkpoints() = job.checkpoints();
      if (job.has_initialized_from()) {
        *listed.mutable_initialized_from() = job.initialized_from();
      }
      *io_.out << ToJson(listed);
    } else {
      *io_.out << FormatCheckpointsTable(job, clock_.Now());
    }
    return kExitOk;
  }

  absl::StatusOr<int> Workers(const std::vector<std::string>& args) {
    RETURN_IF_ERROR(ExpectArgs(args, 0));
    if (options_.limit < 0) return UsageError("--limit: must be >= 0");
    ASSIGN_OR_RETURN(CoordinatorClient * client, Client());
    ASSIGN_OR_RETURN(std::vector<v1::WorkerInfo> workers,
                     client->ListWorkers(options_.include_lost, options_.limit));
    if (json()) {
      v1::ListWorkersResponse response;
      for (v1::WorkerInfo& w : workers) *response.add_workers() = std::move(w);
      *io_.out << ToJson(response);
    } else {
      *io_.out << FormatWorkersTable(workers);
    }
    return kExitOk;
  }

  absl::StatusOr<int> Drain(const std::vector<std::string>& args) {
    RETURN_IF_ERROR(ExpectArgs(args, 1));
    if (args[1].empty()) return UsageError("drain: WORKER must not be empty");
    ASSIGN_OR_RETURN(CoordinatorClient * client, Client());
    ASSIGN_OR_RETURN(v1::WorkerInfo worker, client->DrainWorker(args[1]));
    if (options_.wait) {
      const absl::Time give_up = clock_.Now() + options_.wait_timeout;
      while (!worker.job_id().empty()) {
        if (!json()) {
          *io_.out << DrainLine(worker) << "\n";
          io_.out->flush();
        }
        // Poll once a poll interval, noticing Ctrl-C within 100 ms.
        const absl::Time next = clock_.Now() + options_.drain_poll;
        for (absl::Time now = clock_.Now(); now < next; now = clock_.Now()) {
          if (cancel_ != nullptr && cancel_->cancelled()) {
            return absl::CancelledError("drain: interrupted while waiting");
          }
          clock_.SleepUntil(std::min(now + absl::Milliseconds(100), next));
        }
        if (clock_.Now() > give_up) {
          return absl::DeadlineExceededError(absl::StrCat(
              "drain: ", worker.id(), " still runs ", worker.job_id(), " after ",
              absl::FormatDuration(options_.wait_timeout)));
        }
        ASSIGN_OR_RETURN(worker, client->GetWorker(worker.id()));
      }
    }
    *io_.out << (json() ? ToJson(worker) : DrainLine(worker) + "\n");
    return kExitOk;
  }

  absl::StatusOr<int> Undrain(const std::vector<std::string>& args) {
    RETURN_IF_ERROR(ExpectArgs(args, 1));
    if (args[1].empty()) return UsageError("undrain: WORKER must not be empty");
    ASSIGN_OR_RETURN(CoordinatorClient * client, Client());
    ASSIGN_OR_RETURN(v1::WorkerInfo worker, client->UndrainWorker(args[1]));
    if (json()) {
      *io_.out << ToJson(worker);
    } else {
      *io_.out << worker.id() << " (" << worker.name() << ") "
               << WorkerStateName(worker.state()) << ": schedulable\n";
    }
    return kExitOk;
  }

  // "w-3 (pod-a) DRAINING: runs job-4 (rank 0) until it ends, then no new job"
  static std::string DrainLine(const v1::WorkerInfo& w) {
    return absl::StrCat(
        w.id(), " (", w.name(), ") ", WorkerStateName(w.state()), ": ",
        w.job_id().empty()
            ? "no job running, takes no new one"
            : absl::StrCat("runs ", w.job_id(), " (rank ", w.rank(),
                           ") until it ends, then no new job"));
  }

  absl::StatusOr<int> Cancel(const std::vector<std::string>& args) {
    RETURN_IF_ERROR(ExpectArgs(args, 1));
    if (options_.reason.size() > 1024) {
      return UsageError("--reason: at most 1024 characters");
    }
    ASSIGN_OR_RETURN(CoordinatorClient * client, Client());
    ASSIGN_OR_RETURN(v1::Job job, client->CancelJob(args[1], options_.reason));
    if (json()) {
      *io_.out << ToJson(job);
    } else {
      *io_.out << job.id() << " " << JobStateName(job.state()) << "\n";
    }
    return kExitOk;
  }

  const CliOptions& options_;
  const CliIo& io_;
  const Connector& connect_;
  Cancellation* cancel_;
  const Clock& clock_;
  std::unique_ptr<CoordinatorClient> client_;
};

}  // namespace

int ExitCodeFor(const absl::Status& status) {
  if (status.ok()) return kExitOk;
  if (status.code() == absl::StatusCode::kInvalidArgument) return kExitUsage;
  if (status.code() == absl::StatusCode::kCancelled) return kExitInterrupted;
  return kExitError;
}

absl::Status CheckTimeouts(const CliOptions& options) {
  for (const auto& [flag, timeout] :
       {std::pair{"--connect_timeout", options.connect_timeout},
        std::pair{"--rpc_timeout", options.rpc_timeout},
        std::pair{"--watch_timeout", options.watch_timeout},
        std::pair{"--wait_timeout", options.wait_timeout}}) {
    if (timeout <= absl::ZeroDuration()) {
      return UsageError(absl::StrCat(flag, ": must be positive, got ",
                                     absl::FormatDuration(timeout)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<OutputFormat> ParseOutputFormat(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "table" || lower == "text") return OutputFormat::kTable;
  if (lower == "json") return OutputFormat::kJson;
  return absl::InvalidArgumentError(absl::StrCat(
      "--output: unknown format \"", name, "\"; expected table or json"));
}

void PrintError(std::ostream& err, const absl::Status& status) {
  std::string message(status.message());
  // One line, whatever the server sent.
  absl::StrReplaceAll({{"\r\n", " "}, {"\n", " "}, {"\r", " "}}, &message);
  if (status.code() == absl::StatusCode::kCancelled) {
    err << "pshardctl: interrupted\n";
  } else {
    err << "pshardctl: " << message << "\n";
  }
  err.flush();
}

int RunCommand(const std::vector<std::string>& args, const CliOptions& options,
               const CliIo& io, const Connector& connect, Cancellation* cancel,
               const Clock& clock) {
  if (args.empty()) {
    *io.err << UsageText();
    return kExitUsage;
  }
  Runner runner(options, io, connect, cancel, clock);
  return runner.Run(args);
}

std::string UsageText() {
  std::string out =
      "pshardctl: submit, follow and inspect pshard jobs.\n\n"
      "usage: pshardctl COMMAND [ARGS] [FLAGS]\n\ncommands:\n";
  for (const CommandDoc& doc : kCommands) {
    std::string head = absl::StrCat(doc.name, " ", doc.args);
    absl::StrAppend(&out, "  ", head,
                    std::string(head.size() < 20 ? 20 - head.size() : 1, ' '),
                    doc.summary, "\n");
  }
  absl::StrAppend(&out, "\nflags for every command:\n", kCommonFlags,
                  kOutputFlag,
                  "\n`pshardctl COMMAND --help` shows a command's own flags. "
                  "Exit codes: 0 ok, 1 error (or the job did not succeed), 2 "
                  "bad input, 130 interrupted.\n");
  return out;
}

std::vector<std::string> CommandFlags(absl::string_view command) {
  const CommandDoc* doc = FindCommand(command);
  if (doc == nullptr) return {};
  std::vector<std::string> flags = absl::StrSplit(doc->flags, ' ',
                                                  absl::SkipEmpty());
  if (doc->remote) {
    for (absl::string_view flag :
         absl::StrSplit(kConnectionFlags, ' ', absl::SkipEmpty())) {
      if (!absl::c_linear_search(flags, flag)) flags.emplace_back(flag);
    }
  }
  return flags;
}

absl::Status CheckFlagsApply(absl::string_view command,
                             const std::vector<std::string>& given) {
  if (FindCommand(command) == nullptr) return absl::OkStatus();
  const std::vector<std::string> taken = CommandFlags(command);
  for (const std::string& flag : given) {
    if (absl::c_linear_search(taken, flag)) continue;
    return UsageError(absl::StrCat(
        command, " does not take --", flag, " (its flags: --",
        absl::StrJoin(taken, ", --"), "; see pshardctl ", command,
        " --help)"));
  }
  return absl::OkStatus();
}

std::string CommandHelp(absl::string_view command) {
  const CommandDoc* doc = FindCommand(command);
  if (doc == nullptr) return "";
  std::string out = absl::StrCat("usage: pshardctl ", doc->name,
                                 doc->args[0] != '\0' ? " " : "", doc->args,
                                 " [FLAGS]\n\n", doc->summary, ".\n");
  if (doc->details[0] != '\0') absl::StrAppend(&out, "\n", doc->details);
  const std::vector<std::string> flags = CommandFlags(command);
  const bool output = absl::c_linear_search(flags, "output");
  if (doc->remote || output) absl::StrAppend(&out, "\nCommon flags:\n");
  if (doc->remote) absl::StrAppend(&out, kCommonFlags);
  if (output) absl::StrAppend(&out, kOutputFlag);
  return out;
}

absl::StatusOr<v1::JobSpec> LoadJobSpecFile(const std::string& path) {
  if (path == "-") {
    std::stringstream buffer;
    buffer << std::cin.rdbuf();
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpecJson(buffer.str());
    if (!spec.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid job spec on stdin: ", spec.status().message()));
    }
    return spec;
  }
  // An ifstream opens a directory without complaint and then reads nothing.
  std::error_code error;
  const std::filesystem::file_status kind = std::filesystem::status(path, error);
  if (kind.type() == std::filesystem::file_type::not_found) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read job spec ", path, ": no such file"));
  }
  if (std::filesystem::is_directory(kind)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read job spec ", path, ": is a directory"));
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read job spec ", path, ": not readable"));
  }
  std::stringstream buffer;
  buffer << file.rdbuf();
  if (file.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read job spec ", path));
  }
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecJson(buffer.str());
  if (!spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid job spec ", path, ": ", spec.status().message()));
  }
  return spec;
}

}  // namespace pshard::cli
