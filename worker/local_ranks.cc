#include "worker/local_ranks.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/child_process.h"
#include "common/logging.h"
#include "security/worker_principal.h"

namespace pshard::worker {
namespace {

// The flags each child gets its own value of (ChildArgv writes them), and
// the parser's own, which have done their work in the supervisor.
const std::set<std::string>& FlagsNotPassedOn() {
  static const auto* const flags = new std::set<std::string>{
      "local_ranks", "local_rank", "local_world_size", "name", "host",
      "device", "listen", "port_file", "metrics_listen", "metrics_port_file",
      "health_listen", "health_port_file", "log_dir", "control_dir", "flagfile",
      "fromenv",
      "tryfromenv", "undefok"};
  return *flags;
}

// "128 + signal" as a shell reports a killed child.
int ExitCodeOf(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

}  // namespace

absl::Status ValidateLocalRanks(int local_ranks,
                                absl::string_view device_flag) {
  if (local_ranks < 1 || local_ranks > security::kMaxLocalRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("--local_ranks: want 1..", security::kMaxLocalRanks,
                     " ranks on this node, got ", local_ranks));
  }
  if (local_ranks > 1 && absl::StartsWith(device_flag, "cuda:")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device=", device_flag, " names one GPU, but --local_ranks=",
        local_ranks, " runs ", local_ranks,
        " ranks: use --device=auto (rank i gets cuda:i) or --device=cpu"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ChildDeviceFlag(absl::string_view device_flag,
                                            int local_index, int local_ranks,
                                            int cuda_device_count) {
  if (device_flag != "auto") return std::string(device_flag);
  if (cuda_device_count <= 0) return std::string("cpu");
  if (cuda_device_count < local_ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device=auto with --local_ranks=", local_ranks, ": this node has ",
        cuda_device_count, " CUDA devices, one per rank is needed"));
  }
  return absl::StrCat("cuda:", local_index);
}

absl::StatusOr<std::string> OffsetListenPort(absl::string_view address,
                                             int offset) {
  if (address.empty()) return std::string();
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("want host:port, got \"", address.substr(0, 300), "\""));
  }
  if (port == 0) return std::string(address);
  if (port + offset > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port ", port, " + local rank ", offset,
                     " passes 65535 (\"", address, "\")"));
  }
  return absl::StrCat(address.substr(0, colon + 1), port + offset);
}

absl::StatusOr<std::vector<std::string>> ChildArgv(const LocalRanksPlan& plan,
                                                   int local_index) {
  const int i = local_index;
  std::vector<std::string> argv = {plan.binary};
  std::string metrics_listen, metrics_port_file, health_listen,
      health_port_file, port_file, log_dir, control_dir;
  for (const auto& [name, value] : plan.specified_flags) {
    if (name == "metrics_listen") metrics_listen = value;
    if (name == "metrics_port_file") metrics_port_file = value;
    if (name == "health_listen") health_listen = value;
    if (name == "health_port_file") health_port_file = value;
    if (name == "port_file") port_file = value;
    if (name == "log_dir") log_dir = value;
    if (name == "control_dir") control_dir = value;
    if (FlagsNotPassedOn().count(name) > 0) continue;
    argv.push_back(absl::StrCat("--", name, "=", value));
  }
  absl::StatusOr<std::string> device = ChildDeviceFlag(
      plan.device_flag, i, plan.local_ranks, plan.cuda_device_count);
  if (!device.ok()) return device.status();
  auto offset = [&](absl::string_view flag, const std::string& address)
      -> absl::StatusOr<std::string> {
    absl::StatusOr<std::string> moved = OffsetListenPort(address, i);
    if (!moved.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": ", moved.status().message()));
    }
    return moved;
  };
  absl::StatusOr<std::string> listen = offset("listen", plan.listen);
  if (!listen.ok()) return listen.status();
  absl::StatusOr<std::string> metrics = offset("metrics_listen", metrics_listen);
  if (!metrics.ok()) return metrics.status();
  absl::StatusOr<std::string> health = offset("health_listen", health_listen);
  if (!health.ok()) return health.status();
  argv.push_back("--local_ranks=1");
  argv.push_back(absl::StrCat("--local_rank=", i));
  argv.push_back(absl::StrCat("--local_world_size=", plan.local_ranks));
  argv.push_back(
      absl::StrCat("--name=", security::LocalRankWorkerName(plan.name, i)));
  argv.push_back(absl::StrCat("--host=", plan.host));
  argv.push_back(absl::StrCat("--device=", *device));
  argv.push_back(absl::StrCat("--listen=", *listen));
  auto suffixed = [&](absl::string_view flag, const std::string& file) {
    if (!file.empty()) argv.push_back(absl::StrCat("--", flag, "=", file, ".", i));
  };
  suffixed("port_file", port_file);
  suffixed("metrics_port_file", metrics_port_file);
  suffixed("health_port_file", health_port_file);
  if (!metrics->empty()) argv.push_back(absl::StrCat("--metrics_listen=", *metrics));
  if (!health->empty()) argv.push_back(absl::StrCat("--health_listen=", *health));
  if (!log_dir.empty()) argv.push_back(absl::StrCat("--log_dir=", log_dir, "/", i));
  if (!control_dir.empty()) {
    argv.push_back(absl::StrCat("--control_dir=", control_dir, "/", i));
  }
  return argv;
}

int SuperviseLocalRanks(const LocalRanksPlan& plan,
                        const volatile std::sig_atomic_t* stop_requested,
                        absl::Duration grace) {
  std::vector<std::unique_ptr<ChildProcess>> children;
  // Stops every child still running: SIGTERM to all, then each waited for
  // within one shared grace period, SIGKILL for what is left. True when
  // every child exited 0.
  auto stop_all = [&]() {
    for (auto& child : children) child->Signal(SIGTERM);
    const absl::Time deadline = absl::Now() + grace;
    bool all_ok = true;
    for (auto& child : children) {
      if (!child->WaitFor(std::max(deadline - absl::Now(), absl::ZeroDuration()))) {
        LOG(WARNING) << child->name() << " did not stop within " << grace
                     << ": killed";
        (void)child->Stop(absl::ZeroDuration());
      }
      const std::optional<int> status = child->wait_status();
      if (!status.has_value() || ExitCodeOf(*status) != 0) {
        all_ok = false;
        LOG(WARNING) << child->name() << " " << child->DescribeExit();
      }
    }
    return all_ok;
  };
  for (int i = 0; i < plan.local_ranks; ++i) {
    absl::StatusOr<std::vector<std::string>> argv = ChildArgv(plan, i);
    if (!argv.ok()) {
      LOG(ERROR) << "local rank " << i << ": " << argv.status().message();
      stop_all();
      return 2;
    }
    ChildProcess::Options options;
    options.name = security::LocalRankWorkerName(plan.name, i);
    options.argv = *std::move(argv);
    absl::StatusOr<std::unique_ptr<ChildProcess>> child =
        ChildProcess::Start(std::move(options));
    if (!child.ok()) {
      LOG(ERROR) << "local rank " << i << ": " << child.status().message();
      stop_all();
      return 1;
    }
    LOG(INFO) << "local rank " << i << " of " << plan.local_ranks << ": "
              << (*child)->name() << ", pid " << (*child)->pid();
    children.push_back(*std::move(child));
  }
  // Polled, as the worker's own main loop: a signal only sets the flag.
  while (true) {
    if (*stop_requested != 0) {
      LOG(INFO) << "stopping " << children.size() << " local ranks on a signal";
      return stop_all() ? 0 : 1;
    }
    for (auto& child : children) {
      if (child->Running()) continue;
      const int code = ExitCodeOf(*child->wait_status());
      LOG(WARNING) << child->name() << " " << child->DescribeExit()
                   << "; stopping the other local ranks and exiting with "
                   << code;
      (void)stop_all();
      return code;
    }
    // Every child runs (checked above): the first one's wait is the poll
    // period; another's exit is seen on the next round.
    (void)children.front()->WaitFor(absl::Milliseconds(100));
  }
}

}  // namespace pshard::worker
