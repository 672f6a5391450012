#include "worker/runtime/program_job.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/spec_fingerprint.h"
#include "common/child_process.h"
#include "common/job_spec.h"
#include "common/status_macros.h"
#include "worker/hook/zero_hook.h"
#include "worker/runtime/program_failure.h"
#include "worker/runtime/program_log.h"
#include "worker/runtime/result_reporter.h"

namespace pshard::worker {
namespace {

// A port free right now on every interface, for the program's own
// torch.distributed store (as torchrun picks one): bound to port 0, read
// back, released.
absl::StatusOr<int> PickFreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("MASTER_PORT: socket: ", std::strerror(errno)));
  }
  absl::Cleanup closer = [fd] { close(fd); };
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::InternalError(
        absl::StrCat("MASTER_PORT: no free port: ", std::strerror(errno)));
  }
  return ntohs(addr.sin_port);
}

// "program exited with status 3", "program killed by signal 9 (Killed)":
// the job's own failure (FAILURE_CAUSE_JOB), restarted only when its spec
// says restart_on_program_failure.
absl::Status ExitStatus(int wait_status) {
  absl::Status status;
  if (WIFEXITED(wait_status)) {
    if (WEXITSTATUS(wait_status) == 0) return absl::OkStatus();
    status = absl::AbortedError(absl::StrCat("program exited with status ",
                                             WEXITSTATUS(wait_status)));
  } else if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    status = absl::AbortedError(absl::StrCat("program killed by signal ", sig,
                                             " (", strsignal(sig), ")"));
  } else {
    status = absl::AbortedError(
        absl::StrCat("program ended with wait status ", wait_status));
  }
  return WithFailureCause(std::move(status), v1::FAILURE_CAUSE_JOB);
}

}  // namespace

LocalPlacement LocalPlacementOf(const v1::RunJobDirective& directive) {
  // An older coordinator sends neither field; a value outside the job is
  // not trusted either.
  if (directive.local_world_size() < 1 ||
      directive.local_world_size() > directive.world_size() ||
      directive.local_rank() < 0 ||
      directive.local_rank() >= directive.local_world_size()) {
    return LocalPlacement{};
  }
  return LocalPlacement{directive.local_rank(), directive.local_world_size()};
}

ProgramJob::ProgramJob(ControlPlane* control, v1::RunJobDirective directive,
                       ProgramJobOptions options)
    : control_(control),
      directive_(std::move(directive)),
      options_(std::move(options)),
      log_path_(ProgramLogPath(options_.log_dir, directive_.job_id(),
                               directive_.rank())),
      kv_(control, directive_.job_id(), directive_.epoch(), *options_.clock) {}

ProgramJob::~ProgramJob() = default;

void ProgramJob::Abort(const absl::Status& reason) {
  absl::MutexLock lock(&mu_);
  if (!abort_reason_.ok()) return;
  abort_reason_ = reason.ok() ? absl::AbortedError("job aborted") : reason;
  kv_.Cancel();
  // The supervision loop in RunProgram sees the reason within a poll and
  // stops the program; only that thread touches the child.
}

absl::Status ProgramJob::CheckAborted() {
  absl::MutexLock lock(&mu_);
  return abort_reason_;
}

JobSnapshot ProgramJob::Snapshot() const {
  JobSnapshot snapshot;
  snapshot.job_id = directive_.job_id();
  snapshot.epoch = directive_.epoch();
  snapshot.rank = directive_.rank();
  return snapshot;
}

absl::StatusOr<std::vector<std::string>> ProgramJob::Environment(
    const v1::JobSpec& spec, const v1::RunJobDirective& directive,
    const ProgramJobOptions& options, const std::string& master) {
  std::vector<std::string> env;
  for (const auto& [name, value] : spec.program().env()) {
    env.push_back(absl::StrCat(name, "=", value));
  }
  const size_t colon = master.rfind(':');
  const std::string master_addr = master.substr(0, colon);
  const std::string master_port =
      colon == std::string::npos ? "" : master.substr(colon + 1);
  const LocalPlacement local = LocalPlacementOf(directive);
  // The rank's device: the worker's GPU where the job runs on NCCL there,
  // else the CPU (a GLOO job on a GPU worker trains on host memory).
  ASSIGN_OR_RETURN(const CommBackend backend,
                   ChooseBackend(spec.backend(), options.device));
  const std::string device =
      backend == CommBackend::kNccl ? options.device.name : "cpu";
  const std::pair<const char*, std::string> agent[] = {
      {"PSHARD_COORDINATOR", options.coordinator_address},
      {"PSHARD_JOB_ID", directive.job_id()},
      {"PSHARD_EPOCH", absl::StrCat(directive.epoch())},
      {"PSHARD_RANK", absl::StrCat(directive.rank())},
      {"PSHARD_WORLD_SIZE", absl::StrCat(directive.world_size())},
      {"PSHARD_WORKER_ID", options.worker_id},
      {"PSHARD_HOSTNAME", options.hostname},
      {"PSHARD_COLLECTIVE_TIMEOUT_SECONDS",
       absl::StrCat(spec.collective_timeout_seconds())},
      {"RANK", absl::StrCat(directive.rank())},
      {"WORLD_SIZE", absl::StrCat(directive.world_size())},
      // From the job's placement (the coordinator's): this rank's place
      // among the job's ranks on this host.
      {"LOCAL_RANK", absl::StrCat(local.local_rank)},
      {"LOCAL_WORLD_SIZE", absl::StrCat(local.local_world_size)},
      {"PSHARD_DEVICE", device},
      {"MASTER_ADDR", master_addr},
      {"MASTER_PORT", master_port},
  };
  for (const auto& [name, value] : agent) {
    env.push_back(absl::StrCat(name, "=", value));
  }
  for (const auto& [name, value] :
       security::ClientSecurityEnvironment(options.coordinator_security)) {
    env.push_back(absl::StrCat(name, "=", value));
  }
  // A restarted program is told how often, and where to resume from (the
  // step directory its epoch starts after) when there is a checkpoint.
  env.push_back(absl::StrCat("PSHARD_RESTART_COUNT=", directive.restart_count()));
  env.push_back(absl::StrCat(
      "PSHARD_ERROR_FILE=",
      ProgramFailurePath(options.log_dir, directive.job_id(), directive.rank())));
  const bool resumes = directive.has_resume() && !directive.resume().path().empty();
  if (resumes) {
    env.push_back(absl::StrCat("PSHARD_RESUME_FROM=", directive.resume().path()));
    env.push_back(absl::StrCat("PSHARD_RESUME_STEP=", directive.resume().step()));
  }
  // What pshardSaveCheckpoint/pshardLoadCheckpoint need: where the job's
  // checkpoints go, how often the spec asks for one, and the fingerprint
  // every shard's manifest carries and every resume checks (a resume
  // without `checkpoint` is a job initialised from_checkpoint).
  if (spec.has_checkpoint() || resumes) {
    ASSIGN_OR_RETURN(const std::string fingerprint,
                     checkpoint::SpecFingerprint(spec));
    env.push_back(absl::StrCat("PSHARD_CHECKPOINT_FINGERPRINT=", fingerprint));
  }
  // The session's default for overlap_param_broadcast (pshard.h).
  if (spec.overlap_param_broadcast()) {
    env.push_back("PSHARD_OVERLAP_PARAM_BROADCAST=1");
  }
  // The session's default precision (pshardSetPrecision): the spec's names.
  // Unspecified is fp32.
  if (spec.has_precision()) {
    const MixedPrecision precision = MixedPrecision::FromSpec(spec);
    env.push_back(absl::StrCat("PSHARD_PARAM_DTYPE=",
                               PrecisionDTypeName(precision.param_dtype)));
    env.push_back(absl::StrCat("PSHARD_REDUCE_DTYPE=",
                               PrecisionDTypeName(precision.reduce_dtype)));
  }
  if (spec.has_checkpoint()) {
    env.push_back(absl::StrCat("PSHARD_CHECKPOINT_DIR=", spec.checkpoint().dir()));
    env.push_back(absl::StrCat("PSHARD_CHECKPOINT_EVERY_STEPS=",
                               spec.checkpoint().every_steps()));
  }
  return env;
}

absl::StatusOr<std::string> ProgramJob::Rendezvous(absl::Duration timeout) {
  RETURN_IF_ERROR(kv_.Put(absl::StrCat(kProgramAgentKeyPrefix, directive_.rank()),
                          options_.worker_id));
  if (directive_.rank() == 0) {
    ASSIGN_OR_RETURN(const int port, PickFreePort());
    const std::string master = absl::StrCat(options_.hostname, ":", port);
    RETURN_IF_ERROR(kv_.Put(kProgramMasterAddrKey, master));
    return master;
  }
  absl::StatusOr<std::string> master = kv_.Get(kProgramMasterAddrKey, timeout);
  if (!master.ok()) {
    return absl::Status(master.status().code(),
                        absl::StrCat("reading MASTER_ADDR/PORT from rank 0: ",
                                     master.status().message()));
  }
  int port = 0;
  const size_t colon = master->rfind(':');
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(master->substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return absl::InternalError(
        absl::StrCat("rank 0 published a bad master address \"", *master, "\""));
  }
  return master;
}

absl::Status ProgramJob::Run() {
  const v1::JobSpec spec = ApplyJobSpecDefaults(directive_.spec());
  absl::Status status = RunProgram(spec);
  // An abort explains the end better than the signal it caused.
  if (!status.ok()) {
    absl::Status aborted = CheckAborted();
    if (!aborted.ok()) status = aborted;
  }
  (void)ReportRankResult(
      *control_,
      ResultSource{directive_.job_id(), directive_.epoch(), directive_.rank(),
                   options_.worker_id},
      status.ok(), status.message(), FailureCauseOf(status), /*final_step=*/0,
      /*output_path=*/"", options_.rpc_timeout, *options_.clock,
      ResultRetry{options_.result_retry_for,
                  [this] { return !CheckAborted().ok(); }});
  return status;
}

absl::Status ProgramJob::RunProgram(const v1::JobSpec& spec) {
  const int rank = directive_.rank();
  const int world = directive_.world_size();
  if (!spec.has_program()) {
    return absl::InvalidArgumentError("job spec has no program workload");
  }
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "directive gives rank ", rank, " of world size ", world));
  }
  const v1::ProgramWorkload& program = spec.program();
  const absl::Duration timeout =
      absl::Seconds(spec.collective_timeout_seconds());
  const absl::Duration grace = absl::Seconds(program.grace_period_seconds());
  RETURN_IF_ERROR(CheckAborted());
  ASSIGN_OR_RETURN(const std::string master, Rendezvous(timeout));
  RETURN_IF_ERROR(CheckAborted());

  ASSIGN_OR_RETURN(std::unique_ptr<ProgramLog> log,
                   ProgramLog::Open(log_path_, options_.log_max_bytes));
  log->Append(absl::StrCat("[pshard: job ", directive_.job_id(), " epoch ",
                           directive_.epoch(), " rank ", rank, " of ", world,
                           " on worker ", options_.worker_id, "]\n"));
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(
        absl::StrCat("program output pipe: ", std::strerror(errno)));
  }
  const int read_fd = pipe_fds[0];
  absl::Cleanup close_read = [read_fd] { close(read_fd); };

  // This attempt's program writes its own failure afresh.
  const std::string error_file =
      ProgramFailurePath(options_.log_dir, directive_.job_id(), rank);
  if (unlink(error_file.c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(absl::StrCat("removing ", error_file, ": ",
                                            std::strerror(errno)));
  }

  ChildProcess::Options child_options;
  child_options.name = "program";
  child_options.argv.assign(program.argv().begin(), program.argv().end());
  child_options.search_path = true;
  child_options.output_fd = pipe_fds[1];
  ASSIGN_OR_RETURN(child_options.extra_env,
                   Environment(spec, directive_, options_, master));
  child_options.working_dir = program.working_dir();
  child_options.reap_descendants = true;
  child_options.clock = options_.clock;
  absl::StatusOr<std::unique_ptr<ChildProcess>> started =
      ChildProcess::Start(std::move(child_options));
  close(pipe_fds[1]);
  if (!started.ok()) {
    log->Append(absl::StrCat("[pshard: ", started.status().message(), "]\n"));
    return started.status();
  }
  ChildProcess& child = **started;

  // Supervision: copy output to the log, notice the exit, obey an abort
  // (SIGTERM now, SIGKILL after the grace). Polls are short so that an
  // abort or an exit is seen within ~50 ms.
  bool output_open = true;
  bool terminated = false;
  bool killed = false;
  absl::Time kill_at = absl::InfiniteFuture();
  absl::Time drain_until = absl::InfiniteFuture();
  char buffer[64 * 1024];
  while (true) {
    if (output_open) {
      pollfd p = {read_fd, POLLIN, 0};
      const int ready = poll(&p, 1, 50);
      if (ready > 0) {
        const ssize_t n = read(read_fd, buffer, sizeof(buffer));
        if (n > 0) {
          log->Append(absl::string_view(buffer, n));
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          output_open = false;  // every writer is gone
        }
      }
    } else {
      options_.clock->SleepFor(absl::Milliseconds(50));
    }
    if (!child.Running()) {
      // The reaper has killed the program's group; what is still in the
      // pipe is read until EOF, for a bounded time (a process that left the
      // group may hold it).
      if (!output_open) break;
      if (drain_until == absl::InfiniteFuture()) {
        drain_until = options_.clock->Now() + absl::Seconds(2);
      }
      if (options_.clock->Now() >= drain_until) break;
      continue;
    }
    if (!terminated && !CheckAborted().ok()) {
      child.Signal(SIGTERM);
      terminated = true;
      kill_at = options_.clock->Now() + grace;
    }
    if (terminated && !killed && options_.clock->Now() >= kill_at) {
      log->Append(absl::StrCat("[pshard: program still running ",
                               absl::FormatDuration(grace),
                               " after SIGTERM; SIGKILL]\n"));
      child.Signal(SIGKILL);
      killed = true;
    }
  }
  log->Append(absl::StrCat("[pshard: program ", child.DescribeExit(), "]\n"));
  absl::Status exit = ExitStatus(*child.wait_status());
  // An exit that followed a lost peer is the peer's failure, not the
  // program's: the coordinator then blames the lost worker and restarts.
  if (!exit.ok()) {
    if (std::optional<ProgramFailure> failure = ReadProgramFailure(error_file);
        failure.has_value() && failure->cause == v1::FAILURE_CAUSE_PEER) {
      return WithFailureCause(
          absl::AbortedError(absl::StrCat(exit.message(), " after its pshard "
                                          "session lost a peer: ",
                                          failure->error)),
          v1::FAILURE_CAUSE_PEER);
    }
  }
  return exit;
}

}  // namespace pshard::worker
