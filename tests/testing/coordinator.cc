#include "tests/testing/coordinator.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pshard::testing {
namespace {

std::string DurationFlag(absl::Duration d) {
  return absl::StrCat(absl::ToInt64Milliseconds(d), "ms");
}

}  // namespace

std::string RunningCoordinator::address() const {
  return absl::StrCat("127.0.0.1:", port);
}

std::shared_ptr<grpc::Channel> RunningCoordinator::Channel() const {
  // Its own connections: from the global pool a new channel could take a
  // connection another channel still holds to the process this one
  // replaced (a restart on the same port), and its first call would fail
  // with "Broken pipe".
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address(),
                                   grpc::InsecureChannelCredentials(), args);
}

absl::StatusOr<RunningCoordinator> StartCoordinator(
    const CoordinatorOptions& options) {
  const std::string port_file = options.dir + "/coordinator.port";
  // A restart must not read the previous process's port.
  std::remove(port_file.c_str());
  RunningCoordinator c;
  c.log = options.dir + "/coordinator.log";
  std::vector<std::string> argv = {
      RunfilePath("server/pshard-coordinator"),
      absl::StrCat("--listen=127.0.0.1:", options.port),
      "--port_file=" + port_file, "--state_path=" + options.state_path,
      "--heartbeat_interval=" + DurationFlag(options.heartbeat_interval),
      "--worker_timeout=" + DurationFlag(options.worker_timeout)};
  argv.insert(argv.end(), options.security_flags.begin(),
              options.security_flags.end());
  argv.insert(argv.end(), options.extra_flags.begin(), options.extra_flags.end());
  ASSIGN_OR_RETURN(c.process, Subprocess::Start(argv, {}, c.log));
  ASSIGN_OR_RETURN(c.port, WaitForPortFile(port_file, absl::Seconds(30)));
  return c;
}

}  // namespace pshard::testing
