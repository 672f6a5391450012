// The real pshard-coordinator binary as a child process on loopback, for
// multi-process tests: started on a free (or a given) port, with its state
// file and log where the test says, found through its port file.
#ifndef PSHARD_TESTS_TESTING_COORDINATOR_H_
#define PSHARD_TESTS_TESTING_COORDINATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "tests/testing/subprocess.h"

namespace pshard::testing {

struct CoordinatorOptions {
  // Holds the port file and coordinator.log.
  std::string dir;
  // --state_path: the SQLite file; reuse it to restart the same coordinator.
  std::string state_path;
  // 0: a free port; a restart passes the previous one.
  int port = 0;
  // --heartbeat_interval and --worker_timeout: short, so that a lost worker
  // is noticed quickly.
  absl::Duration heartbeat_interval = absl::Milliseconds(100);
  absl::Duration worker_timeout = absl::Seconds(2);
  // More flags for the binary (e.g. "--state_sync=normal").
  std::vector<std::string> extra_flags;
  // Its transport: plaintext on loopback unless a test says otherwise
  // (security::TransportSecurityFlags).
  std::vector<std::string> security_flags = {"--insecure"};
};

struct RunningCoordinator {
  std::unique_ptr<Subprocess> process;
  int port = 0;
  std::string log;

  std::string address() const;
  // A new plaintext channel with its own connections (not shared with
  // channels to a coordinator that ran on this port before).
  std::shared_ptr<grpc::Channel> Channel() const;
};

// Starts the coordinator and waits (30 s at most) until it has written its
// port file.
absl::StatusOr<RunningCoordinator> StartCoordinator(
    const CoordinatorOptions& options);

}  // namespace pshard::testing

#endif  // PSHARD_TESTS_TESTING_COORDINATOR_H_
