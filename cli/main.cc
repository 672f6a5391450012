// pshardctl: the command-line client of pshard. See `pshardctl --help` and
// docs/user-guide.md.
#include <signal.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cli/client.h"
#include "cli/flag_args.h"
#include "cli/commands.h"
#include "cli/local.h"
#include "common/binary_flags.h"
#include "common/clock.h"
#include "security/client_token_flags.h"
#include "security/transport_flags.h"

ABSL_FLAG(std::string, coordinator, "",
          "Coordinator address host:port (default $PSHARD_COORDINATOR, else "
          "localhost:7070).");
ABSL_FLAG(std::string, output, "table",
          "Output format: table or json (-o json for short).");
ABSL_FLAG(bool, watch, false, "submit: follow the job until it ends.");
ABSL_FLAG(std::string, from_checkpoint, "",
          "submit: start the job from this checkpoint (a step directory or a "
          "job's checkpoint directory); a relative path is taken from the "
          "current directory.");
ABSL_FLAG(std::string, request_id, "",
          "submit: the request id that makes the submission idempotent (at "
          "most 128 of [A-Za-z0-9._:-]); default: a random one per "
          "invocation.");
ABSL_FLAG(std::string, state, "",
          "list: comma-separated job states to show (e.g. running,queued).");
ABSL_FLAG(int, limit, 0,
          "list, workers: at most this many (0: all, fetched page by page).");
ABSL_FLAG(bool, wait, false, "drain: wait until the worker's job has ended.");
ABSL_FLAG(absl::Duration, wait_timeout, absl::Hours(1),
          "drain --wait: give up after this long.");
ABSL_FLAG(bool, include_lost, false, "workers: include LOST workers.");
ABSL_FLAG(std::string, reason, "by pshardctl cancel",
          "cancel: reason recorded in the job's event log.");
ABSL_FLAG(int, rank, -1, "logs: only this rank (default: every rank).");
ABSL_FLAG(bool, follow, false,
          "logs: keep printing the programs' output until they exit.");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(5),
          "How long to wait for the coordinator to answer.");
ABSL_FLAG(absl::Duration, rpc_timeout, absl::Seconds(30),
          "Deadline of each request.");
ABSL_FLAG(absl::Duration, watch_timeout, absl::Hours(72),
          "watch, submit --watch, local: give up following a job after this "
          "long.");
ABSL_FLAG(int, workers, 0,
          "local: number of workers (default: the spec's world_size).");
ABSL_FLAG(std::string, device, "cpu",
          "local: the workers' device: cpu, or cuda (worker i on cuda:i).");
ABSL_FLAG(std::string, run_dir, "",
          "local: directory for state, logs and default output (default: a "
          "new /tmp/pshard-local-XXXXXX).");
ABSL_FLAG(std::string, bin_dir, "",
          "local: directory with pshard-coordinator and pshard-worker.");
ABSL_FLAG(bool, keep_running, false,
          "local: keep the cluster up after the job ends, until Ctrl-C.");

namespace {

using pshard::cli::Cancellation;

bool IsHelpFlag(const char* arg) {
  return std::strcmp(arg, "--help") == 0 || std::strcmp(arg, "-help") == 0 ||
         std::strcmp(arg, "-h") == 0 || std::strcmp(arg, "--helpshort") == 0;
}

// Paths on the command line are the user's: under `bazel run` the process
// starts in the runfiles tree, and BUILD_WORKING_DIRECTORY is where the user
// was.
std::string UserWorkingDirectory() {
  const char* bwd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (bwd != nullptr && bwd[0] != '\0') return bwd;
  char buffer[PATH_MAX];
  if (getcwd(buffer, sizeof(buffer)) != nullptr) return buffer;
  return "";
}

std::string UserPath(const std::string& path) {
  if (path.empty() || path[0] == '/' || path == "-") return path;
  const std::string base = UserWorkingDirectory();
  return base.empty() ? path : absl::StrCat(base, "/", path);
}

std::string SelfPath(const char* argv0) {
  char buffer[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n > 0) return std::string(buffer, static_cast<size_t>(n));
  return argv0;
}

}  // namespace

int main(int argc, char** argv) {
  // gRPC logs a failed TLS handshake on stderr in its own format before
  // pshardctl's one-line error says the same in words; keep stderr to ours
  // unless the user asks for gRPC's (GRPC_VERBOSITY=debug).
  setenv("GRPC_VERBOSITY", "NONE", /*overwrite=*/0);
  // SIGINT/SIGTERM are taken by a thread (below) that cancels what is in
  // progress, so `watch` and `local` can clean up. Block them before any
  // thread exists so every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // Per-command help is ours; abseil's --help would list every flag of every
  // linked library.
  bool help = false;
  std::vector<std::string> arg_strings;
  for (int i = 0; i < argc; ++i) {
    if (i > 0 && IsHelpFlag(argv[i])) {
      help = true;
    } else {
      arg_strings.push_back(argv[i]);
    }
  }
  arg_strings = pshard::cli::ExpandShortFlags(arg_strings);
  pshard::SetUpBinaryFlags("pshardctl", pshard::cli::UsageText(), __FILE__);
  absl::StatusOr<std::vector<std::string>> given_flags =
      pshard::cli::CheckFlagArgs(arg_strings);
  if (!given_flags.ok()) {
    pshard::cli::PrintError(
        std::cerr,
        absl::InvalidArgumentError(absl::StrCat(
            given_flags.status().message(), " (see pshardctl --help)")));
    return pshard::cli::kExitUsage;
  }
  std::vector<char*> args;
  for (std::string& arg : arg_strings) args.push_back(arg.data());
  std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  std::vector<std::string> command(positional.begin() + 1, positional.end());

  if (!command.empty() && command[0] == "help") {
    help = true;
    command.erase(command.begin());
  }
  if (help || command.empty()) {
    if (!command.empty()) {
      std::string text = pshard::cli::CommandHelp(command[0]);
      if (text.empty()) {
        std::cerr << "pshardctl: unknown command \"" << command[0]
                  << "\"\n\n"
                  << pshard::cli::UsageText();
        return pshard::cli::kExitUsage;
      }
      std::cout << text;
      return pshard::cli::kExitOk;
    }
    (help ? std::cout : std::cerr) << pshard::cli::UsageText();
    return help ? pshard::cli::kExitOk : pshard::cli::kExitUsage;
  }

  if (absl::Status applies =
          pshard::cli::CheckFlagsApply(command[0], *given_flags);
      !applies.ok()) {
    pshard::cli::PrintError(std::cerr, applies);
    return pshard::cli::kExitUsage;
  }

  pshard::cli::CliOptions options;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  if (options.coordinator.empty()) {
    const char* env = std::getenv("PSHARD_COORDINATOR");
    options.coordinator =
        (env != nullptr && env[0] != '\0') ? env : "localhost:7070";
  }
  absl::StatusOr<pshard::cli::OutputFormat> output =
      pshard::cli::ParseOutputFormat(absl::GetFlag(FLAGS_output));
  if (!output.ok()) {
    pshard::cli::PrintError(std::cerr, output.status());
    return pshard::cli::kExitUsage;
  }
  options.output = *output;
  options.watch = absl::GetFlag(FLAGS_watch);
  options.from_checkpoint = UserPath(absl::GetFlag(FLAGS_from_checkpoint));
  options.request_id = absl::GetFlag(FLAGS_request_id);
  options.states = absl::GetFlag(FLAGS_state);
  options.limit = absl::GetFlag(FLAGS_limit);
  options.include_lost = absl::GetFlag(FLAGS_include_lost);
  options.wait = absl::GetFlag(FLAGS_wait);
  options.wait_timeout = absl::GetFlag(FLAGS_wait_timeout);
  options.reason = absl::GetFlag(FLAGS_reason);
  options.rank = absl::GetFlag(FLAGS_rank);
  options.follow = absl::GetFlag(FLAGS_follow);
  options.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  options.rpc_timeout = absl::GetFlag(FLAGS_rpc_timeout);
  options.watch_timeout = absl::GetFlag(FLAGS_watch_timeout);
  options.security = pshard::security::TransportSecurityFromFlags();
  for (std::string* path :
       {&options.security.ca_file, &options.security.certificate_file,
        &options.security.key_file}) {
    *path = UserPath(*path);
  }
  absl::StatusOr<std::string> token =
      pshard::security::BearerTokenFromFlags(UserPath);
  if (!token.ok()) {
    std::cerr << "pshardctl: " << token.status().message() << "\n";
    return pshard::cli::kExitUsage;
  }
  options.security.bearer_token = *std::move(token);

  Cancellation cancel;
  std::thread signal_thread([&signals, &cancel] {
    int sig = 0;
    while (sigwait(&signals, &sig) == 0) cancel.Cancel();
  });
  signal_thread.detach();

  pshard::cli::CliIo io{&std::cout, &std::cerr,
                        static_cast<bool>(isatty(STDOUT_FILENO))};

  if (command[0] == "local") {
    if (command.size() > 2) {
      std::cerr << "pshardctl: local: unexpected argument \"" << command[2]
                << "\" (usage: pshardctl local [JOB.json])\n";
      return pshard::cli::kExitUsage;
    }
    pshard::cli::LocalOptions local;
    if (command.size() == 2) local.spec_path = UserPath(command[1]);
    local.workers = absl::GetFlag(FLAGS_workers);
    local.device = absl::GetFlag(FLAGS_device);
    local.run_dir = UserPath(absl::GetFlag(FLAGS_run_dir));
    local.bin_dir = UserPath(absl::GetFlag(FLAGS_bin_dir));
    local.self_path = SelfPath(argv[0]);
    local.base_dir = UserWorkingDirectory();
    local.keep_running = absl::GetFlag(FLAGS_keep_running);
    local.cli = options;
    const int code =
        pshard::cli::RunLocal(local, io, &cancel, pshard::Clock::Real());
    std::cout.flush();
    std::_Exit(code);  // The signal thread is still blocked in sigwait.
  }

  if (command[0] == "submit" || command[0] == "export") {
    for (size_t i = 1; i < command.size(); ++i) command[i] = UserPath(command[i]);
  }
  const int code = pshard::cli::RunCommand(
      command, options, io,
      [&options]() {
        return pshard::cli::CoordinatorClient::Connect(
            options.coordinator, options.security, options.connect_timeout,
            options.rpc_timeout);
      },
      &cancel, pshard::Clock::Real());
  std::cout.flush();
  std::cerr.flush();
  std::_Exit(code);
}
